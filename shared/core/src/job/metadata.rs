//! The producer's `metadata`: string pairs Courier keeps on the job's record and echoes in its
//! outcome events, so an application can match an outcome to its own records.

use std::collections::BTreeMap;

use super::JobError;

/// At most this many entries.
pub const MAX_METADATA_ENTRIES: usize = 20;
/// Longest key, in characters (keys are ASCII).
pub const MAX_METADATA_KEY_LEN: usize = 64;
/// Longest value, in characters.
pub const MAX_METADATA_VALUE_LEN: usize = 512;
/// At most this many UTF-8 bytes of keys and values together (an outcome event stays small).
pub const MAX_METADATA_BYTES: usize = 4096;

/// Whether `key` is a well-formed metadata key: 1–64 ASCII letters, digits, `_`, `.`, `:`, `-`.
pub fn is_metadata_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_METADATA_KEY_LEN
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

/// Checks the limits of [`super::EmailJob::metadata`].
pub fn validate(metadata: &BTreeMap<String, String>) -> Result<(), JobError> {
    let invalid = |reason: String| Err(JobError::InvalidMetadata { reason });
    if metadata.len() > MAX_METADATA_ENTRIES {
        return invalid(format!(
            "{} entries (at most {MAX_METADATA_ENTRIES})",
            metadata.len()
        ));
    }
    let mut bytes = 0;
    for (key, value) in metadata {
        if !is_metadata_key(key) {
            return invalid(format!(
                "key {key:?} must be 1 to {MAX_METADATA_KEY_LEN} ASCII letters, digits, `_`, `.`, `:` or `-`"
            ));
        }
        if value.chars().count() > MAX_METADATA_VALUE_LEN {
            return invalid(format!(
                "the value of {key:?} is longer than {MAX_METADATA_VALUE_LEN} characters"
            ));
        }
        if let Some(offset) = value.find(char::is_control) {
            return invalid(format!(
                "the value of {key:?} contains a control character at offset {offset}"
            ));
        }
        bytes += key.len() + value.len();
    }
    if bytes > MAX_METADATA_BYTES {
        return invalid(format!(
            "{bytes} bytes of keys and values (at most {MAX_METADATA_BYTES})"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn reason(metadata: &BTreeMap<String, String>) -> String {
        match validate(metadata) {
            Err(JobError::InvalidMetadata { reason }) => reason,
            other => panic!("expected invalid_metadata, got {other:?}"),
        }
    }

    #[test]
    fn keys_are_short_ascii_words() {
        assert!(is_metadata_key("tenant.id:7_a-b"));
        for bad in ["", "a b", "ü", "a/b", &"k".repeat(65)] {
            assert!(!is_metadata_key(bad), "{bad:?}");
        }
        assert!(is_metadata_key(&"k".repeat(64)));
    }

    #[test]
    fn each_limit_has_its_own_reason() {
        assert_eq!(validate(&map(&[("order", "o-1"), ("empty", "")])), Ok(()));
        let many: BTreeMap<String, String> =
            (0..21).map(|i| (format!("k{i}"), "v".to_owned())).collect();
        assert_eq!(reason(&many), "21 entries (at most 20)");
        assert!(reason(&map(&[("a b", "1")])).starts_with("key \"a b\" must be"));
        let long = "é".repeat(513);
        assert!(reason(&map(&[("k", &long)])).contains("longer than 512 characters"));
        // 512 characters of two bytes each are within the value limit.
        assert_eq!(validate(&map(&[("k", &"é".repeat(512))])), Ok(()));
        assert!(reason(&map(&[("k", "a\u{85}b")])).contains("control character at offset 1"));
        let big: BTreeMap<String, String> =
            (0..9).map(|i| (format!("k{i}"), "x".repeat(500))).collect();
        assert_eq!(reason(&big), "4518 bytes of keys and values (at most 4096)");
    }
}
