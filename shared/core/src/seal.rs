//! The retry envelope's seal: an HMAC-SHA256 over the envelope (job included) with a key only
//! the stack's functions and operators can read (a Secrets Manager secret). A producer can write
//! an envelope, but not seal one: an envelope whose seal does not verify is taken as the first
//! copy of a new job ([`demote`]), never as a later generation of an existing one.
//!
//! The seal covers the envelope's canonical text: its JSON with the `seal` key taken out, keys
//! sorted, no insignificant whitespace (what a `serde_json::Value` prints).

use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;

use crate::envelope::{ENVELOPE_KEY, Incoming};
use crate::job::to_hex;
use crate::policy::RetryState;

/// The envelope key that carries the seal.
pub const SEAL_KEY: &str = "seal";
/// What the seal adds to a body at most, JSON-escaped inside another string too: `,"seal":"v1.`,
/// 64 hex digits and `"` (77 bytes, 81 escaped), rounded up.
pub const SEAL_BYTES: usize = 96;
/// The shortest key accepted (bytes of its text).
pub const MIN_KEY_BYTES: usize = 32;
const VERSION: &str = "v1.";

/// The keys of the secret: `key` seals and verifies; `previous` (optional) only verifies, so
/// copies sealed before a rotation still verify until they have drained.
#[derive(Clone, PartialEq, Eq)]
pub struct SealKeys {
    sealing: Vec<u8>,
    verifying: Vec<Vec<u8>>,
}

impl std::fmt::Debug for SealKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SealKeys(1 + {} previous, redacted)",
            self.verifying.len()
        )
    }
}

/// Why a secret's text is not a set of seal keys (the message never quotes the secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealKeyError {
    #[error(
        "is not a JSON object {{\"key\": \"...\", \"previous\": [\"...\"]}} (previous is optional)"
    )]
    Shape,
    #[error("has a key shorter than {MIN_KEY_BYTES} characters")]
    Short,
}

impl SealKeys {
    /// The keys of a secret holding `{"key": "...", "previous": ["...", ...]}`.
    pub fn parse(text: &str) -> Result<SealKeys, SealKeyError> {
        let value: Value = serde_json::from_str(text).map_err(|_| SealKeyError::Shape)?;
        let key = value
            .get("key")
            .and_then(Value::as_str)
            .ok_or(SealKeyError::Shape)?;
        let previous = match value.get("previous") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|k| k.as_str().ok_or(SealKeyError::Shape))
                .collect::<Result<Vec<_>, _>>()?,
            Some(_) => return Err(SealKeyError::Shape),
        };
        SealKeys::new(key, &previous)
    }

    /// Keys from their texts: `key` seals; `key` and each of `previous` verify.
    pub fn new(key: &str, previous: &[&str]) -> Result<SealKeys, SealKeyError> {
        if std::iter::once(&key)
            .chain(previous)
            .any(|k| k.len() < MIN_KEY_BYTES)
        {
            return Err(SealKeyError::Short);
        }
        Ok(SealKeys {
            sealing: key.as_bytes().to_vec(),
            verifying: previous.iter().map(|k| k.as_bytes().to_vec()).collect(),
        })
    }

    fn mac(key: &[u8], canonical: &str) -> Hmac<Sha256> {
        // HMAC takes a key of any length.
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        mac.update(canonical.as_bytes());
        mac
    }

    /// The sealing key's HMAC-SHA256 tag of `text` (for other signed values, such as
    /// unsubscribe tokens, each with its own domain prefix in `text`).
    pub fn tag(&self, text: &str) -> Vec<u8> {
        Self::mac(&self.sealing, text)
            .finalize()
            .into_bytes()
            .to_vec()
    }

    /// Whether `tag` is the leading bytes (at least 16) of some key's tag of `text`, compared in
    /// constant time.
    pub fn verifies_truncated(&self, text: &str, tag: &[u8]) -> bool {
        tag.len() >= 16
            && std::iter::once(&self.sealing)
                .chain(&self.verifying)
                .any(|key| Self::mac(key, text).verify_truncated_left(tag).is_ok())
    }

    fn verifies(&self, canonical: &str, tag: &[u8]) -> bool {
        std::iter::once(&self.sealing)
            .chain(&self.verifying)
            .any(|key| Self::mac(key, canonical).verify_slice(tag).is_ok())
    }
}

/// Seals a queue body: an envelope gets (or has replaced) its `seal`; any other body (an
/// application's bare job) is returned as it is.
pub fn seal(body: &str, keys: &SealKeys) -> String {
    match serde_json::from_str::<Value>(body) {
        Ok(mut value) if value.get(ENVELOPE_KEY).is_some() => {
            if let Some(map) = value.as_object_mut() {
                map.remove(SEAL_KEY);
                let tag = SealKeys::mac(&keys.sealing, &Value::Object(map.clone()).to_string())
                    .finalize()
                    .into_bytes();
                map.insert(
                    SEAL_KEY.to_owned(),
                    Value::String(format!("{VERSION}{}", to_hex(&tag))),
                );
            }
            value.to_string()
        }
        _ => body.to_owned(),
    }
}

/// What a parsed queue body's seal says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SealCheck {
    /// A bare job: the application's first copy, nothing to verify.
    Bare,
    /// An envelope whose seal verifies with one of the keys.
    Verified,
    /// An envelope without a seal, or whose seal does not verify.
    Unverified,
}

/// Checks the seal of a queue body (its JSON).
pub fn check(body: &[u8], keys: &SealKeys) -> SealCheck {
    let Ok(Value::Object(mut map)) = serde_json::from_slice::<Value>(body) else {
        return SealCheck::Bare;
    };
    if !map.contains_key(ENVELOPE_KEY) {
        return SealCheck::Bare;
    }
    let tag = match map.remove(SEAL_KEY) {
        Some(Value::String(text)) => text
            .strip_prefix(VERSION)
            .and_then(unhex)
            .unwrap_or_default(),
        _ => return SealCheck::Unverified,
    };
    if !tag.is_empty() && keys.verifies(&Value::Object(map).to_string(), &tag) {
        SealCheck::Verified
    } else {
        SealCheck::Unverified
    }
}

/// An envelope that did not verify, taken as what it can only be trusted to be: the first copy
/// of its job (generation 0, a fresh retry budget, no history, no wait).
pub fn demote(incoming: Incoming) -> Incoming {
    Incoming {
        attempt: 0,
        retry: RetryState::default(),
        history: Vec::new(),
        not_before: None,
        // A forged envelope's trace and acceptance are not the job's either.
        trace: incoming.job.trace_id.clone(),
        accepted: None,
        ..incoming
    }
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{next_body, parse_body};

    const JOB: &str = r#"{"version":1,"message_id":"m","campaign_id":"c","from":"a@b.co","to":["x@y.co"],"content":{"subject":"s","text":"t"}}"#;

    fn keys(k: &str) -> SealKeys {
        SealKeys::new(&k.repeat(32), &[]).unwrap()
    }

    fn retry_body() -> String {
        let first = parse_body(JOB.as_bytes()).unwrap();
        next_body(&first, RetryState::default(), Vec::new())
    }

    #[test]
    fn a_sealed_envelope_verifies_and_still_parses() {
        let sealed = seal(&retry_body(), &keys("a"));
        assert_eq!(check(sealed.as_bytes(), &keys("a")), SealCheck::Verified);
        assert_eq!(parse_body(sealed.as_bytes()).unwrap().attempt, 1);
        // Sealing again replaces the seal (one seal, still valid).
        let twice = seal(&sealed, &keys("a"));
        assert_eq!(twice, sealed);
        // The seal costs at most SEAL_BYTES.
        assert!(sealed.len() <= retry_body().len() + SEAL_BYTES);
    }

    #[test]
    fn a_forged_or_altered_envelope_does_not_verify() {
        let body = retry_body();
        // No seal at all (a producer's hand-written envelope).
        assert_eq!(check(body.as_bytes(), &keys("a")), SealCheck::Unverified);
        // Sealed with another key.
        let other = seal(&body, &keys("b"));
        assert_eq!(check(other.as_bytes(), &keys("a")), SealCheck::Unverified);
        // A sealed copy whose generation, job or history was changed afterwards.
        let sealed = seal(&body, &keys("a"));
        for (from, to) in [
            ("\"attempt\":1", "\"attempt\":7"),
            ("\"to\":[\"x@y.co\"]", "\"to\":[\"victim@y.co\"]"),
            ("\"history\":[]", "\"history\":[null]"),
        ] {
            assert!(sealed.contains(from), "{from} in {sealed}");
            let altered = sealed.replace(from, to);
            assert_eq!(
                check(altered.as_bytes(), &keys("a")),
                SealCheck::Unverified,
                "{to}"
            );
        }
        // A seal that is not hex, or of another version.
        for seal_text in ["v1.zz", "v2.00", "", "v1."] {
            let mut value: Value = serde_json::from_str(&sealed).unwrap();
            value[SEAL_KEY] = Value::String(seal_text.into());
            let text = value.to_string();
            assert_eq!(
                check(text.as_bytes(), &keys("a")),
                SealCheck::Unverified,
                "{seal_text}"
            );
        }
        let mut value: Value = serde_json::from_str(&sealed).unwrap();
        value[SEAL_KEY] = Value::from(1);
        assert_eq!(
            check(value.to_string().as_bytes(), &keys("a")),
            SealCheck::Unverified
        );
    }

    #[test]
    fn bare_jobs_are_neither_sealed_nor_checked() {
        assert_eq!(seal(JOB, &keys("a")), JOB);
        assert_eq!(check(JOB.as_bytes(), &keys("a")), SealCheck::Bare);
        assert_eq!(check(b"not json", &keys("a")), SealCheck::Bare);
    }

    #[test]
    fn previous_keys_verify_but_do_not_seal() {
        let old = "o".repeat(32);
        let new = "n".repeat(32);
        let rotated = SealKeys::new(&new, &[&old]).unwrap();
        let before = seal(&retry_body(), &SealKeys::new(&old, &[]).unwrap());
        assert_eq!(check(before.as_bytes(), &rotated), SealCheck::Verified);
        let after = seal(&retry_body(), &rotated);
        assert_eq!(
            check(after.as_bytes(), &SealKeys::new(&old, &[]).unwrap()),
            SealCheck::Unverified
        );
    }

    #[test]
    fn a_demoted_envelope_is_the_first_copy_of_its_job() {
        let mut forged = parse_body(retry_body().as_bytes()).unwrap();
        forged.attempt = 9;
        forged.retry.spent = 3;
        forged.trace = Some("someone-elses-trace".into());
        forged.accepted = Some(crate::envelope::ProviderAcceptance {
            provider: "ses".into(),
            provider_message_id: "claimed".into(),
            at: chrono::DateTime::UNIX_EPOCH,
        });
        let first = parse_body(JOB.as_bytes()).unwrap();
        let demoted = demote(forged);
        assert_eq!((demoted.attempt, &demoted.retry), (0, &first.retry));
        assert!(demoted.history.is_empty() && demoted.not_before.is_none());
        assert!(demoted.accepted.is_none(), "a forged acceptance is dropped");
        assert_eq!(
            demoted.trace, first.trace,
            "a forged envelope's trace is dropped"
        );
        assert_eq!((demoted.job, demoted.print), (first.job, first.print));
    }

    #[test]
    fn secret_texts_parse_into_keys_and_errors_never_quote_them() {
        let key = "k".repeat(40);
        let ok = SealKeys::parse(&format!(r#"{{"key":"{key}"}}"#)).unwrap();
        assert_eq!(ok, SealKeys::new(&key, &[]).unwrap());
        let both = SealKeys::parse(&format!(r#"{{"key":"{key}","previous":["{key}x"]}}"#));
        assert_eq!(both.unwrap().verifying.len(), 1);
        for bad in [
            "not json",
            "{}",
            r#"{"key":1}"#,
            r#"{"key":"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk","previous":"x"}"#,
        ] {
            assert_eq!(SealKeys::parse(bad), Err(SealKeyError::Shape), "{bad}");
        }
        let short = SealKeys::parse(r#"{"key":"secret-but-short"}"#).unwrap_err();
        assert_eq!(short, SealKeyError::Short);
        assert!(!short.to_string().contains("secret-but-short"));
        assert!(!format!("{ok:?}").contains(&key));
    }
}
