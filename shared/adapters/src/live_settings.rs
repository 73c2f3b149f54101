//! The live settings document (`courier_core::live`) as a function instance reads it: at most
//! once per period, validated against the instance's own INIT settings, each version reported
//! once. The send function puts the settings in force on its breakers, governor and policy; the
//! events function takes the retry policy.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use courier_core::live::{Baseline, Effective, LiveError};
use courier_core::ports::{LiveSettingsStore, StoreError};

/// Reads the live settings when they are due.
pub struct LiveSettingsReader {
    store: Arc<dyn LiveSettingsStore>,
    every: chrono::Duration,
    baseline: Baseline,
    state: tokio::sync::Mutex<State>,
}

/// When the document is due to be read (`None`: now), and the version in force (`None`: the
/// deployment's own settings) or refused last, each with its document: a version number seen
/// again with another document (the item deleted and written anew, a restore, a hand edit) is
/// a change.
#[derive(Debug, Default)]
struct State {
    next_read: Option<DateTime<Utc>>,
    applied: Option<(u64, String)>,
    refused: Option<(u64, String)>,
}

/// What a read found.
#[derive(Debug)]
pub enum LiveRead {
    /// Version `version` (0: none stored) is to be put in force.
    Applied {
        version: u64,
        effective: Box<Effective>,
    },
    /// Version `version` does not validate: the settings in force stay (reported once per
    /// version).
    Refused { version: u64, error: LiveError },
    /// The read failed: the settings in force stay.
    Failed(StoreError),
}

impl LiveSettingsReader {
    pub fn new(
        store: Arc<dyn LiveSettingsStore>,
        every: chrono::Duration,
        baseline: Baseline,
    ) -> LiveSettingsReader {
        LiveSettingsReader {
            store,
            every,
            baseline,
            state: tokio::sync::Mutex::new(State::default()),
        }
    }

    /// Reads the document when it is due; `None` when nothing was due or nothing changed.
    pub async fn refresh(&self, now: DateTime<Utc>) -> Option<LiveRead> {
        let mut state = self.state.lock().await;
        if state.next_read.is_some_and(|at| now < at) {
            return None;
        }
        state.next_read = Some(now + self.every);
        let record = match self.store.get().await {
            Ok(record) => record,
            Err(e) => return Some(LiveRead::Failed(e)),
        };
        let seen = record.map(|r| (r.version, r.document));
        let version = seen.as_ref().map(|(v, _)| *v);
        if seen == state.applied || (seen.is_some() && seen == state.refused) {
            return None;
        }
        let document = seen.as_ref().map_or("{}", |(_, d)| d.as_str());
        match courier_core::live::effective(document, &self.baseline) {
            Ok(effective) => {
                state.applied = seen;
                state.refused = None;
                Some(LiveRead::Applied {
                    version: version.unwrap_or(0),
                    effective: Box::new(effective),
                })
            }
            Err(error) => {
                state.refused = seen;
                Some(LiveRead::Refused {
                    version: version.unwrap_or(0),
                    error,
                })
            }
        }
    }
}
