//! One-click unsubscribe on the send path: the `List-Unsubscribe` headers a job's message gets
//! ([`courier_core::unsubscribe::offer`]), signed with the key of `COURIER_UNSUBSCRIBE_KEY_SECRET`,
//! and the counts of links added and not added (drained into each batch's metrics).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use courier_adapters::seal_secret::SecretSealKeys;
use courier_core::job::EmailJob;
use courier_core::ports::StoreError;
use courier_core::unsubscribe::{Links, Offer, token};
use tracing::{info, warn};

/// Where links point and the key that signs them; `None` in [`Unsubscribing::off`].
#[derive(Default)]
pub struct Unsubscribing {
    signing: Option<(Links, Arc<SecretSealKeys>)>,
    added: AtomicU64,
    not_added: AtomicU64,
}

impl Unsubscribing {
    /// Links to `links`, signed with the keys of a secret.
    pub fn new(links: Links, keys: Arc<SecretSealKeys>) -> Unsubscribing {
        Unsubscribing {
            signing: Some((links, keys)),
            ..Unsubscribing::default()
        }
    }

    /// No unsubscribe function configured: no links (a job that wants one is sent without it
    /// and counted in `UnsubscribeLinksNotAdded`).
    pub fn off() -> Unsubscribing {
        Unsubscribing::default()
    }

    /// The signing keys, when configured (read eagerly at INIT).
    pub fn keys(&self) -> Option<&Arc<SecretSealKeys>> {
        self.signing.as_ref().map(|(_, keys)| keys)
    }

    /// The headers the job's message gets (none when the producer set its own, the job wants
    /// none, or a bulk job's default cannot be honoured). Unreadable keys are an error: the
    /// record comes back later rather than going out without its link.
    pub async fn headers(&self, job: &EmailJob) -> Result<Vec<(String, String)>, StoreError> {
        match courier_core::unsubscribe::offer(job) {
            Offer::ProducerOwns | Offer::Off => Ok(Vec::new()),
            Offer::NotPossible(why) => {
                info!(why, "no List-Unsubscribe link for this bulk job");
                self.not_added.fetch_add(1, Ordering::Relaxed);
                Ok(Vec::new())
            }
            Offer::Add { recipient, scope } => match &self.signing {
                Some((links, keys)) => {
                    let keys = keys.keys().await?;
                    self.added.fetch_add(1, Ordering::Relaxed);
                    Ok(links.headers(&token(&recipient, &scope, &keys)).to_vec())
                }
                None => {
                    warn!(
                        "the job wants a List-Unsubscribe link but COURIER_UNSUBSCRIBE_URL is not set"
                    );
                    self.not_added.fetch_add(1, Ordering::Relaxed);
                    Ok(Vec::new())
                }
            },
        }
    }

    /// Links added and not added since the last drain.
    pub fn drain(&self) -> (u64, u64) {
        (
            self.added.swap(0, Ordering::Relaxed),
            self.not_added.swap(0, Ordering::Relaxed),
        )
    }
}
