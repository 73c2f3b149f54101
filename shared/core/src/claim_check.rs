//! The claim check: a body too large for the queue it must go on (a retry copy, a dead letter)
//! is stored apart through [`PayloadStore`] (S3), and the queue carries a small pointer to it.
//! Content-addressed (the key is the body's SHA-256), so a retried store is harmless; whoever
//! reads the queue redeems the pointer for the body and checks its size and digest.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::job::fingerprint;
use crate::limits::SQS_MAX_BYTES;
use crate::ports::{PayloadStore, StoreError};

/// Marker key of a pointer (the first key of its JSON; no job or envelope has it).
pub const CLAIM_CHECK_KEY: &str = "courier_claim_check";

/// Where stored bodies live in the payload bucket (its lifecycle rule expires this prefix).
pub const KEY_PREFIX: &str = "claim-check/";

/// Room kept under SQS's message limit for the message attributes, which count towards it
/// (AWS, SendMessage: "the message size includes the message body and attributes").
pub const ATTRIBUTE_ROOM: usize = 16 * 1024;

/// The largest body sent as it is; a larger one is stored apart.
pub const MAX_INLINE_BYTES: usize = SQS_MAX_BYTES - ATTRIBUTE_ROOM;

/// What a queue message carries instead of a body larger than [`MAX_INLINE_BYTES`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimCheck {
    pub courier_claim_check: u32,
    /// The object's key in the payload store.
    pub key: String,
    /// The body's length and SHA-256 (hex), checked when it is redeemed.
    pub bytes: usize,
    pub sha256: String,
}

impl ClaimCheck {
    /// The pointer for `body`.
    pub fn of(body: &str) -> ClaimCheck {
        let sha256 = fingerprint(body.as_bytes());
        ClaimCheck {
            courier_claim_check: 1,
            key: format!("{KEY_PREFIX}{sha256}"),
            bytes: body.len(),
            sha256,
        }
    }

    /// The pointer as a queue body.
    pub fn to_body(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The pointer a queue body is, if it is one (a cheap prefix test first: every other body
    /// pays nothing).
    pub fn parse(body: &str) -> Option<ClaimCheck> {
        let head = body.trim_start().strip_prefix('{')?.trim_start();
        let head = head.strip_prefix('"')?.strip_prefix(CLAIM_CHECK_KEY)?;
        if !head.starts_with('"') {
            return None;
        }
        serde_json::from_str(body).ok()
    }

    /// Whether the pointer names the key its digest gives (any other key is refused unread:
    /// a queue body cannot point Courier at an object of its choosing).
    pub fn well_formed(&self) -> bool {
        self.key == format!("{KEY_PREFIX}{}", self.sha256)
    }

    /// The body the store returned, once its size and digest match the pointer.
    pub fn verify(&self, bytes: Vec<u8>) -> Result<String, RedeemError> {
        if bytes.len() != self.bytes || fingerprint(&bytes) != self.sha256 {
            return Err(RedeemError::Corrupt {
                key: self.key.clone(),
                expected: self.bytes,
                got: bytes.len(),
            });
        }
        String::from_utf8(bytes).map_err(|_| RedeemError::Corrupt {
            key: self.key.clone(),
            expected: self.bytes,
            got: self.bytes,
        })
    }
}

/// Why a pointer could not be redeemed.
#[derive(Debug, thiserror::Error)]
pub enum RedeemError {
    #[error("the claim-checked body {key} is not in the payload store (expired or deleted)")]
    Missing { key: String },
    #[error(
        "the claim-checked body {key} does not match its pointer ({got} bytes, expected {expected} and its digest)"
    )]
    Corrupt {
        key: String,
        expected: usize,
        got: usize,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The queue body for `body`: itself when it fits, else a pointer to it once it is stored.
/// Without a store, a body too large fails here, with a message that says so.
pub async fn stow<'a>(
    store: Option<&dyn PayloadStore>,
    body: &'a str,
) -> Result<Cow<'a, str>, StoreError> {
    if body.len() <= MAX_INLINE_BYTES {
        return Ok(Cow::Borrowed(body));
    }
    let Some(store) = store else {
        return Err(StoreError::msg(
            "claim check",
            format!(
                "a body of {} bytes is larger than a queue message may be ({MAX_INLINE_BYTES}) and no payload store is configured",
                body.len()
            ),
        ));
    };
    let check = ClaimCheck::of(body);
    store.put(&check.key, body.as_bytes().to_vec()).await?;
    Ok(Cow::Owned(check.to_body()))
}

/// The largest body kept as it is beside a job's status record (the body a soft-bounce resend
/// or `courierctl requeue` sends again from): 300 KiB, under DynamoDB's 400 KB item with room
/// for the rest of the record. A larger one is kept apart, as a claim check ([`keep`]).
pub const MAX_KEPT_BYTES: usize = 300 * 1024;

/// The body to keep beside a job's status record: itself up to [`MAX_KEPT_BYTES`], else a
/// pointer to it once it is stored (content-addressed: storing it again is harmless). Read it
/// back with [`redeem`].
pub async fn keep(store: &dyn PayloadStore, body: String) -> Result<String, StoreError> {
    if body.len() <= MAX_KEPT_BYTES {
        return Ok(body);
    }
    let check = ClaimCheck::of(&body);
    store.put(&check.key, body.into_bytes()).await?;
    Ok(check.to_body())
}

/// The body a queue message stands for: itself (borrowed, not copied), or the stored body its
/// pointer names.
pub async fn redeem<'a>(
    store: Option<&dyn PayloadStore>,
    body: &'a str,
) -> Result<Cow<'a, str>, RedeemError> {
    let Some(check) = ClaimCheck::parse(body) else {
        return Ok(Cow::Borrowed(body));
    };
    if !check.well_formed() {
        return Err(RedeemError::Corrupt {
            key: check.key,
            expected: check.bytes,
            got: 0,
        });
    }
    let Some(store) = store else {
        return Err(RedeemError::Store(StoreError::msg(
            "claim check",
            format!(
                "{} is claim-checked and no payload store is configured",
                check.key
            ),
        )));
    };
    match store.get(&check.key).await? {
        Some(bytes) => check.verify(bytes).map(Cow::Owned),
        None => Err(RedeemError::Missing { key: check.key }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pointer_round_trips_and_nothing_else_is_taken_for_one() {
        let check = ClaimCheck::of("body");
        assert_eq!(ClaimCheck::parse(&check.to_body()), Some(check.clone()));
        assert!(check.key.starts_with(KEY_PREFIX));
        for body in [
            r#"{"version":1}"#,
            r#"{"courier_envelope":1}"#,
            r#"{"courier_claim_checkX":1}"#,
            "not json",
            "",
        ] {
            assert_eq!(ClaimCheck::parse(body), None, "{body}");
        }
    }

    #[test]
    fn a_body_is_redeemed_only_when_its_size_and_digest_match() {
        let check = ClaimCheck::of("the body");
        assert_eq!(check.verify(b"the body".to_vec()).unwrap(), "the body");
        assert!(matches!(
            check.verify(b"the bodY".to_vec()),
            Err(RedeemError::Corrupt { .. })
        ));
        assert!(matches!(
            check.verify(b"the body!".to_vec()),
            Err(RedeemError::Corrupt { .. })
        ));
    }

    #[test]
    fn a_pointer_to_a_key_of_its_own_choosing_is_refused_unread() {
        let mut check = ClaimCheck::of("the body");
        assert!(check.well_formed());
        check.key = "templates/welcome.json".into();
        assert!(!check.well_formed());
        let body = check.to_body();
        let redeemed = futures_lite_block_on(redeem(None, &body));
        assert!(
            matches!(redeemed, Err(RedeemError::Corrupt { .. })),
            "{redeemed:?}"
        );
    }

    /// Polls a future that never waits (no store is called on this path).
    fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut f = std::pin::pin!(f);
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("the future waited"),
        }
    }
}
