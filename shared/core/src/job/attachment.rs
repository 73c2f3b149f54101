//! Attachments: files a producer stores in the stack's payload bucket (the claim-check store,
//! under `attachments/`), named by the job with their size and SHA-256. The send function fetches
//! them, checks both, and attaches them; their bytes never travel through the queue.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{JobError, fingerprint, is_deceptive};

/// Where attachments live in the payload bucket (its lifecycle rule expires this prefix).
pub const KEY_PREFIX: &str = "attachments/";
/// Where the archiver keeps the attachments of archived dead letters, for as long as the archive
/// keeps the letters (the bucket's lifecycle rule for this prefix), so a replay finds them.
pub const RETAINED_PREFIX: &str = "retained/attachments/";
/// At most this many attachments per job.
pub const MAX_ATTACHMENTS: usize = 10;
/// At most this many bytes of attachments per job (about 14 MB once in base64). The bound is the
/// send function's memory, not the providers' (SES v2 takes 40 MB): a message is held about five
/// times over while it is fetched, encoded and sent (see `AttachmentBudget` in the send
/// function), and the function has 128 MB.
pub const MAX_ATTACHMENT_BYTES: u64 = 10 * 1024 * 1024;
/// Longest file name.
pub const MAX_FILENAME_LEN: usize = 255;
/// File name extensions refused (executables and scripts: the types Gmail and Outlook block,
/// which would get the message refused or the sender's reputation hurt).
pub const DENIED_EXTENSIONS: &[&str] = &[
    "ade", "adp", "apk", "appx", "bat", "cab", "chm", "cmd", "com", "cpl", "dll", "dmg", "exe",
    "hta", "ins", "iso", "isp", "jar", "js", "jse", "lib", "lnk", "mde", "msc", "msi", "msix",
    "msp", "mst", "nsh", "pif", "ps1", "scr", "sct", "shb", "sys", "vb", "vbe", "vbs", "vxd",
    "wsc", "wsf", "wsh",
];
/// Content types refused, for the same reason.
pub const DENIED_CONTENT_TYPES: &[&str] = &[
    "application/hta",
    "application/java-archive",
    "application/x-bat",
    "application/x-msdos-program",
    "application/x-msdownload",
    "application/x-ms-installer",
    "application/x-msi",
    "application/x-sh",
    "application/x-shellscript",
    "application/vnd.microsoft.portable-executable",
];

/// A file attached to the message, stored by the producer at `attachments/{sha256}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AttachmentRef {
    /// The name the recipient sees: no path, no control or deceptive characters.
    pub filename: String,
    /// `type/subtype` (RFC 6838 names, no parameters), e.g. `application/pdf`.
    pub content_type: String,
    /// The object's key in the payload bucket: `attachments/` and its SHA-256.
    pub key: String,
    /// The file's size in bytes.
    pub bytes: u64,
    /// The file's SHA-256, lower-case hex; checked when the send function fetches it.
    pub sha256: String,
}

impl AttachmentRef {
    /// The reference of `content`, stored at its content address.
    pub fn of(filename: &str, content_type: &str, content: &[u8]) -> AttachmentRef {
        let sha256 = fingerprint(content);
        AttachmentRef {
            filename: filename.to_owned(),
            content_type: content_type.to_owned(),
            key: format!("{KEY_PREFIX}{sha256}"),
            bytes: u64::try_from(content.len()).unwrap_or(u64::MAX),
            sha256,
        }
    }

    /// Where the archiver keeps this file while the job's dead letter is archived.
    pub fn retained_key(&self) -> String {
        format!("{RETAINED_PREFIX}{}", self.sha256)
    }

    /// Whether `s` is a SHA-256 as references write it: 64 lower-case hex digits.
    fn is_digest(s: &str) -> bool {
        s.len() == 64
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    }

    /// Whether `content` is the file this reference names (size and digest).
    pub fn matches(&self, content: &[u8]) -> bool {
        u64::try_from(content.len()) == Ok(self.bytes) && fingerprint(content) == self.sha256
    }

    fn validate(&self, field: &str) -> Result<(), JobError> {
        let invalid = |reason: String| JobError::InvalidAttachment {
            field: field.to_owned(),
            reason,
        };
        let name = &self.filename;
        if name.trim().is_empty() || name == "." || name == ".." {
            return Err(invalid("the file name is empty".into()));
        }
        if name.chars().count() > MAX_FILENAME_LEN {
            return Err(invalid(format!(
                "the file name is longer than {MAX_FILENAME_LEN} characters"
            )));
        }
        if let Some(c) = name
            .chars()
            .find(|&c| c.is_control() || is_deceptive(c) || c == '/' || c == '\\')
        {
            return Err(invalid(format!(
                "the file name holds U+{:04X}: no control or invisible characters, no path",
                u32::from(c)
            )));
        }
        if !is_media_type(&self.content_type) {
            return Err(invalid(format!(
                "content type {:?} is not `type/subtype`",
                self.content_type
            )));
        }
        if !Self::is_digest(&self.sha256) {
            return Err(invalid("sha256 is not 64 lower-case hex digits".into()));
        }
        if self.key != format!("{KEY_PREFIX}{}", self.sha256) {
            return Err(invalid(format!(
                "key must be {KEY_PREFIX}{{sha256}}, found {:?}",
                self.key
            )));
        }
        if self.bytes == 0 {
            return Err(invalid("the file is empty".into()));
        }
        let extension = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
        let content_type = self.content_type.to_ascii_lowercase();
        if extension.is_some_and(|e| DENIED_EXTENSIONS.contains(&e.as_str()))
            || DENIED_CONTENT_TYPES.contains(&content_type.as_str())
        {
            return Err(JobError::AttachmentDenied {
                field: field.to_owned(),
                filename: name.clone(),
                content_type: self.content_type.clone(),
            });
        }
        Ok(())
    }
}

/// The attachments a dead letter's payload names (a job as the producer wrote it, or a retry
/// envelope around one), as `(key, retained key)` pairs: only well-formed content addresses,
/// whatever else the payload holds, so an invalid job's letter is read as far as it can be.
pub fn named_in(payload: &str) -> Vec<(String, String)> {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(payload) else {
        return Vec::new();
    };
    let job = match value.get(crate::envelope::ENVELOPE_KEY) {
        Some(_) => value.get("job").unwrap_or(&serde_json::Value::Null),
        None => &value,
    };
    let Some(list) = job.get("attachments").and_then(serde_json::Value::as_array) else {
        return Vec::new();
    };
    let mut pairs: Vec<(String, String)> = list
        .iter()
        .filter_map(|a| a.get("key")?.as_str())
        .filter_map(|key| {
            let sha = key.strip_prefix(KEY_PREFIX)?;
            AttachmentRef::is_digest(sha)
                .then(|| (key.to_owned(), format!("{RETAINED_PREFIX}{sha}")))
        })
        .collect();
    pairs.sort();
    pairs.dedup();
    pairs
}

/// Checks every attachment, their number and their total size.
pub(super) fn validate(attachments: &[AttachmentRef]) -> Result<(), JobError> {
    let bytes: u64 = attachments
        .iter()
        .map(|a| a.bytes)
        .fold(0, u64::saturating_add);
    if attachments.len() > MAX_ATTACHMENTS || bytes > MAX_ATTACHMENT_BYTES {
        return Err(JobError::AttachmentsTooLarge {
            count: attachments.len(),
            bytes,
        });
    }
    for (i, attachment) in attachments.iter().enumerate() {
        attachment.validate(&format!("attachments[{i}]"))?;
    }
    Ok(())
}

/// RFC 6838 `type-name "/" subtype-name`: a letter or digit, then up to 126 of
/// `A-Za-z0-9 ! # $ & - ^ _ . +`.
pub fn is_media_type(text: &str) -> bool {
    let name = |part: &str| {
        let mut chars = part.chars();
        chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
            && part.len() <= 127
            && chars.all(|c| c.is_ascii_alphanumeric() || "!#$&-^_.+".contains(c))
    };
    text.split_once('/')
        .is_some_and(|(kind, sub)| name(kind) && name(sub))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pdf() -> AttachmentRef {
        AttachmentRef::of("invoice 4711.pdf", "application/pdf", b"%PDF-1.7 ...")
    }

    #[test]
    fn a_reference_names_its_content_by_digest() {
        let a = pdf();
        assert!(a.key.starts_with(KEY_PREFIX) && a.key.ends_with(&a.sha256));
        assert!(a.matches(b"%PDF-1.7 ..."));
        assert!(!a.matches(b"%PDF-1.7 ..!"));
        assert!(validate(&[a]).is_ok());
    }

    #[test]
    fn media_types_follow_rfc_6838() {
        for ok in [
            "application/pdf",
            "image/svg+xml",
            "text/x-vcard",
            "application/vnd.ms-excel",
        ] {
            assert!(is_media_type(ok), "{ok}");
        }
        for bad in [
            "pdf",
            "/pdf",
            "application/",
            "text/plain; charset=utf-8",
            "a b/c",
            "te\rxt/plain",
        ] {
            assert!(!is_media_type(bad), "{bad}");
        }
    }

    #[test]
    fn executables_are_refused_by_name_or_type() {
        for (name, kind) in [
            ("setup.exe", "application/octet-stream"),
            ("INVOICE.PDF.JS", "text/plain"),
            ("report.pdf", "application/x-msdownload"),
        ] {
            let a = AttachmentRef::of(name, kind, b"MZ");
            assert_eq!(
                validate(&[a]).unwrap_err().code(),
                "attachment_denied",
                "{name}"
            );
        }
    }

    #[test]
    fn counts_and_sizes_are_bounded() {
        let eleven = vec![pdf(); MAX_ATTACHMENTS + 1];
        assert_eq!(
            validate(&eleven).unwrap_err().code(),
            "attachments_too_large"
        );
        let mut huge = pdf();
        huge.bytes = MAX_ATTACHMENT_BYTES + 1;
        assert_eq!(
            validate(&[huge]).unwrap_err().code(),
            "attachments_too_large"
        );
    }

    #[test]
    fn a_letter_names_its_files_in_a_job_or_an_envelope_and_only_as_content_addresses() {
        let a = pdf();
        let b = AttachmentRef::of("b.txt", "text/plain", b"b");
        let job = serde_json::json!({
            "version": 1, "message_id": "m",
            "attachments": [a, b, a, {"key": "claim-check/x"}, {"key": "attachments/../x"}, {"no": 1}],
        });
        let mut want = vec![
            (a.key.clone(), a.retained_key()),
            (b.key.clone(), b.retained_key()),
        ];
        want.sort();
        // GIVEN the job as the producer wrote it, and the same job inside a retry envelope
        let envelope = serde_json::json!({"courier_envelope": 1, "attempt": 2, "job": job});
        for payload in [job.to_string(), envelope.to_string()] {
            // THEN each well-formed file is named once, with where it is retained
            assert_eq!(named_in(&payload), want);
        }
        assert!(
            a.retained_key().starts_with(RETAINED_PREFIX) && a.retained_key().ends_with(&a.sha256)
        );
        // AND a payload that is not JSON, or names no files, names none
        for none in [
            "not json",
            "{}",
            r#"{"attachments": "x"}"#,
            r#"{"courier_envelope": 1}"#,
        ] {
            assert!(named_in(none).is_empty(), "{none}");
        }
    }
}
