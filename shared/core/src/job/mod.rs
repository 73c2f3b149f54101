//! The job contract: what applications put on the send queue, and its validation.
//!
//! Parsing is two-staged so that every failure is specific: the bytes must be UTF-8, then JSON,
//! then an object with a known `version`, then an [`EmailJob`], then pass [`EmailJob::validate`].
//! Whatever can be salvaged from a bad payload (its `message_id`, `campaign_id`, `trace_id`) is
//! kept in [`Rejected`] so the dead letter can still be found by those ids.

use std::collections::BTreeMap;

use crate::mailbox::Mailbox;
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub mod attachment;
pub mod metadata;
mod schema;

pub use attachment::AttachmentRef;

/// The only contract version this build understands.
pub const JOB_VERSION: u32 = 1;
/// At most this many recipients (to + cc + bcc) per job; SES v2 allows 50.
pub const MAX_RECIPIENTS: usize = 50;
/// Rendered or inline bodies above this size are rejected (SES v2's limit is 40 MB for the whole
/// message; SQS's for the whole job 1 MiB). Subject, text and html together.
pub const MAX_BODY_BYTES: usize = 512 * 1024;
/// Longest accepted identifier (`message_id`, `campaign_id`, `trace_id`, template id).
pub const MAX_ID_LEN: usize = 256;
/// Longest accepted header value or subject.
pub const MAX_HEADER_LEN: usize = 998;
/// Headers an application may set; everything else is rejected (case-insensitive match).
pub const ALLOWED_HEADERS: &[&str] = &[
    "Reply-To",
    "List-Unsubscribe",
    "List-Unsubscribe-Post",
    "In-Reply-To",
    "References",
    "X-Entity-Ref-ID",
];

/// Which retry budget a job draws on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// Password resets, receipts: short give-up horizons, sent first.
    #[default]
    Transactional,
    /// Newsletters and campaigns: long horizons, RFC 5321-style persistence.
    Bulk,
}

impl Priority {
    /// Stable lower-case name, as in the JSON contract.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Transactional => "transactional",
            Priority::Bulk => "bulk",
        }
    }
}

/// A provider the job would like to be sent through (a hint: failover may still pick another).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProviderHint {
    Ses,
    Smtp,
}

/// A stored template and the variables to render it with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TemplateRef {
    /// Template id: the S3 key prefix `templates/{id}/` holds `subject`, `text` and/or `html`.
    /// Letters, digits, `_`, `-` and `.`, in segments joined by `/`; no segment is `.` or `..`
    /// nor starts with `.`, so an id never reaches outside `templates/`.
    #[schemars(regex(
        pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_-][A-Za-z0-9._-]*)*$"
    ))]
    pub id: String,
    /// Variables; a variable the template uses but this map lacks is a rendering failure.
    #[serde(default)]
    pub variables: serde_json::Map<String, serde_json::Value>,
}

/// Inline content, used as is (no rendering).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Content {
    pub subject: String,
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub html: Option<String>,
}

/// One email job, version 1 of the contract. See the README's "Job contract".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Courier EmailJob v1")]
pub struct EmailJob {
    /// Contract version; must be 1.
    pub version: u32,
    /// Idempotency key: two jobs with one `message_id` are sent at most once.
    pub message_id: String,
    /// Groups jobs for search, stats and replay.
    pub campaign_id: String,
    /// One id that finds the job everywhere: every log line about it, its status record, the
    /// sent message (`X-Courier-Trace-Id`, and an SES tag), its retry copies and its dead letter.
    /// Without it, the root of an X-Ray trace header sent with the message (`AWSTraceHeader`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Selects the retry budget.
    #[serde(default)]
    pub priority: Priority,
    /// Sender mailbox, `addr@example.com` or `Name <addr@example.com>`.
    pub from: String,
    /// Recipients (`to`, `cc` and `bcc` hold at least one between them; `to` may be empty).
    pub to: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cc: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bcc: Vec<String>,
    /// Exactly one of `template` and `content`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<TemplateRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
    /// Extra headers, limited to [`ALLOWED_HEADERS`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Preferred provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<ProviderHint>,
    /// Do not send after this instant (RFC 3339); a job past it is dead-lettered, not sent late.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after: Option<DateTime<Utc>>,
    /// Files stored in the stack's payload bucket, attached to the message ([`attachment`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<AttachmentRef>,
    /// The producer's own string pairs, kept on the job's record and echoed in its outcome
    /// events ([`metadata`]: at most 20 entries, 4 KiB).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// The mailing list the job belongs to, for one-click unsubscribe (default: `campaign_id`
    /// when it is a list id). Letters, digits, `.`, `_`, `-`; at most 64 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"))]
    pub list_id: Option<String>,
    /// Whether Courier adds `List-Unsubscribe` (RFC 8058 one-click): `list`, `global` or
    /// `none`. Default: `list` for bulk jobs with one recipient, `none` otherwise. `list` and
    /// `global` need exactly one recipient.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsubscribe: Option<crate::unsubscribe::UnsubscribeMode>,
}

/// Why a job was refused before any send. Each variant is a documented error code
/// (see [`JobError::code`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    #[error("body is not valid UTF-8 (first bad byte at offset {offset})")]
    NotUtf8 { offset: usize },
    #[error("body is not valid JSON: {message}")]
    MalformedJson { message: String },
    #[error("job must be a JSON object, found {found}")]
    NotAnObject { found: &'static str },
    #[error("field `version` is missing")]
    MissingVersion,
    #[error("unknown contract version {found:?}; this build understands version {JOB_VERSION}")]
    UnknownVersion { found: String },
    #[error("job does not match the contract: {message}")]
    Schema { message: String },
    #[error("field `{field}` is empty")]
    EmptyField { field: &'static str },
    #[error("field `{field}` is longer than {max} characters")]
    TooLong { field: String, max: usize },
    #[error(
        "field `{field}` contains a control character (CR, LF, NUL or other) at offset {offset}"
    )]
    ControlCharacter { field: String, offset: usize },
    #[error(
        "field `{field}` contains an invisible or direction-changing character U+{code:04X} at offset {offset} (bidi controls, zero-width spaces and line/paragraph separators can disguise what a reader sees)"
    )]
    DeceptiveCharacter {
        field: String,
        offset: usize,
        code: u32,
    },
    #[error("address in `{field}` is invalid: {value:?}: {reason}")]
    InvalidAddress {
        field: String,
        value: String,
        reason: String,
    },
    #[error(
        "template id {id:?} is invalid: letters, digits, `_`, `-` and `.` in segments joined by `/`, no segment starting with `.`"
    )]
    InvalidTemplateId { id: String },
    #[error("no recipients: `to`, `cc` and `bcc` hold no address between them")]
    NoRecipients,
    #[error("too many recipients: {count} (at most {MAX_RECIPIENTS})")]
    TooManyRecipients { count: usize },
    #[error("body too large: {bytes} bytes (at most {max} bytes)")]
    BodyTooLarge { bytes: usize, max: usize },
    #[error("exactly one of `template` and `content` is required, found {found}")]
    TemplateXorContent { found: &'static str },
    #[error("`content` needs at least one of `text` and `html`")]
    NoBody,
    #[error("header {name:?} is not allowed; allowed: {allowed}")]
    HeaderNotAllowed { name: String, allowed: String },
    #[error("attachment `{field}` is invalid: {reason}")]
    InvalidAttachment { field: String, reason: String },
    #[error(
        "attachment `{field}` ({filename:?}, {content_type}) is an executable or script type, which mail providers refuse"
    )]
    AttachmentDenied {
        field: String,
        filename: String,
        content_type: String,
    },
    #[error(
        "too many attachments or too large: {count} files, {bytes} bytes (at most {} files, {} bytes)",
        attachment::MAX_ATTACHMENTS,
        attachment::MAX_ATTACHMENT_BYTES
    )]
    AttachmentsTooLarge { count: usize, bytes: u64 },
    #[error("field `metadata` is invalid: {reason}")]
    InvalidMetadata { reason: String },
    #[error(
        "list_id {id:?} is invalid: letters, digits, `.`, `_` and `-`, starting with a letter or digit, at most 64 characters"
    )]
    InvalidListId { id: String },
    #[error("{reason}")]
    UnsubscribeNotPossible { reason: String },
}

impl JobError {
    /// Stable machine-readable code for dead-letter records and metrics.
    pub fn code(&self) -> &'static str {
        match self {
            JobError::NotUtf8 { .. } => "not_utf8",
            JobError::MalformedJson { .. } => "malformed_json",
            JobError::NotAnObject { .. } => "not_an_object",
            JobError::MissingVersion => "missing_version",
            JobError::UnknownVersion { .. } => "unknown_version",
            JobError::Schema { .. } => "schema",
            JobError::EmptyField { .. } => "empty_field",
            JobError::TooLong { .. } => "too_long",
            JobError::ControlCharacter { .. } => "header_injection",
            JobError::DeceptiveCharacter { .. } => "deceptive_text",
            JobError::InvalidAddress { .. } => "invalid_address",
            JobError::InvalidTemplateId { .. } => "invalid_template_id",
            JobError::NoRecipients => "no_recipients",
            JobError::TooManyRecipients { .. } => "too_many_recipients",
            JobError::BodyTooLarge { .. } => "body_too_large",
            JobError::TemplateXorContent { .. } => "template_xor_content",
            JobError::NoBody => "no_body",
            JobError::HeaderNotAllowed { .. } => "header_not_allowed",
            JobError::InvalidAttachment { .. } => "invalid_attachment",
            JobError::AttachmentDenied { .. } => "attachment_denied",
            JobError::AttachmentsTooLarge { .. } => "attachments_too_large",
            JobError::InvalidMetadata { .. } => "invalid_metadata",
            JobError::InvalidListId { .. } => "invalid_list_id",
            JobError::UnsubscribeNotPossible { .. } => "unsubscribe_not_possible",
        }
    }
}

/// A payload that failed parsing or validation, with whatever ids could be salvaged from it.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejected {
    pub error: JobError,
    pub message_id: Option<String>,
    pub campaign_id: Option<String>,
    pub trace_id: Option<String>,
    /// What a rejected retry envelope says it is (`None` for a bare job, or an envelope without
    /// a readable generation): trusted only once the body's seal verifies
    /// ([`crate::seal::check`]).
    pub envelope: Option<Claimed>,
}

/// The job and generation a rejected retry envelope names. An envelope this version cannot
/// read has its job's ids here only, not in [`Rejected`]'s own fields: they are the job's only
/// if Courier wrote the envelope.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    pub generation: u32,
    pub message_id: Option<String>,
    pub campaign_id: Option<String>,
    pub trace_id: Option<String>,
}

impl Claimed {
    /// What the envelope `value` names: its `attempt` and its job's ids.
    pub(crate) fn of(value: &serde_json::Value) -> Option<Claimed> {
        let generation = value
            .get("attempt")
            .and_then(serde_json::Value::as_u64)
            .and_then(|a| u32::try_from(a).ok())?;
        let job = value.get("job").unwrap_or(&serde_json::Value::Null);
        Some(Claimed {
            generation,
            message_id: salvage(job, "message_id"),
            campaign_id: salvage(job, "campaign_id"),
            trace_id: salvage(job, "trace_id"),
        })
    }
}

impl Rejected {
    /// A rejection of the job `value`, with the ids salvaged from it.
    pub(crate) fn salvaged(error: JobError, value: &serde_json::Value) -> Box<Rejected> {
        Box::new(Rejected {
            error,
            message_id: salvage(value, "message_id"),
            campaign_id: salvage(value, "campaign_id"),
            trace_id: salvage(value, "trace_id"),
            envelope: None,
        })
    }
}

/// Hex SHA-256 of a payload: the poison blocklist and duplicate detection key on it.
pub fn fingerprint(payload: &[u8]) -> String {
    to_hex(&Sha256::digest(payload))
}

/// Lower-case hex of `bytes`.
pub(crate) fn to_hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    out
}

/// The first two parsing stages shared by jobs and retry envelopes: UTF-8, then JSON.
pub fn parse_json(bytes: &[u8]) -> Result<(&str, serde_json::Value), Box<Rejected>> {
    let unsalvaged = |error| {
        Box::new(Rejected {
            error,
            message_id: None,
            campaign_id: None,
            trace_id: None,
            envelope: None,
        })
    };
    let text = std::str::from_utf8(bytes).map_err(|e| {
        unsalvaged(JobError::NotUtf8 {
            offset: e.valid_up_to(),
        })
    })?;
    let value = serde_json::from_str(text).map_err(|e| {
        unsalvaged(JobError::MalformedJson {
            message: e.to_string(),
        })
    })?;
    Ok((text, value))
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

fn salvage(value: &serde_json::Value, key: &str) -> Option<String> {
    value
        .get(key)
        .and_then(serde_json::Value::as_str)
        .filter(|s| !s.is_empty() && s.len() <= MAX_ID_LEN && !s.chars().any(char::is_control))
        .map(str::to_owned)
}

impl EmailJob {
    /// Parses and validates raw bytes (an SQS body) into a job.
    pub fn parse(bytes: &[u8]) -> Result<EmailJob, Box<Rejected>> {
        Self::from_value(parse_json(bytes)?.1)
    }

    /// Validates an already-parsed JSON value into a job.
    pub fn from_value(value: serde_json::Value) -> Result<EmailJob, Box<Rejected>> {
        let reject = Rejected::salvaged;
        if !value.is_object() {
            return Err(reject(
                JobError::NotAnObject {
                    found: json_kind(&value),
                },
                &value,
            ));
        }
        match value.get("version") {
            None => return Err(reject(JobError::MissingVersion, &value)),
            Some(serde_json::Value::Number(n)) if n.as_u64() == Some(u64::from(JOB_VERSION)) => {}
            Some(other) => {
                return Err(reject(
                    JobError::UnknownVersion {
                        found: other.to_string(),
                    },
                    &value,
                ));
            }
        }
        // Deserialised from a borrow: the value stays available for salvaging ids on error.
        let job: EmailJob = match EmailJob::deserialize(&value) {
            Ok(job) => job,
            Err(e) => {
                return Err(reject(
                    JobError::Schema {
                        message: e.to_string(),
                    },
                    &value,
                ));
            }
        };
        job.validate().map_err(|error| reject(error, &value))?;
        Ok(job)
    }

    /// Checks every rule the type system cannot: ids, addresses, header injection, sizes.
    pub fn validate(&self) -> Result<(), JobError> {
        check_id("message_id", &self.message_id)?;
        check_id("campaign_id", &self.campaign_id)?;
        if let Some(trace) = &self.trace_id {
            check_id("trace_id", trace)?;
        }
        check_mailbox("from", &self.from)?;
        if self.to.is_empty() && self.cc.is_empty() && self.bcc.is_empty() {
            return Err(JobError::NoRecipients);
        }
        let count = self.to.len() + self.cc.len() + self.bcc.len();
        if count > MAX_RECIPIENTS {
            return Err(JobError::TooManyRecipients { count });
        }
        for (field, list) in [("to", &self.to), ("cc", &self.cc), ("bcc", &self.bcc)] {
            for (i, addr) in list.iter().enumerate() {
                check_mailbox(&format!("{field}[{i}]"), addr)?;
            }
        }
        for (name, value) in &self.headers {
            let Some(canonical) = ALLOWED_HEADERS
                .iter()
                .find(|allowed| allowed.eq_ignore_ascii_case(name))
            else {
                return Err(JobError::HeaderNotAllowed {
                    name: name.clone(),
                    allowed: ALLOWED_HEADERS.join(", "),
                });
            };
            let field = format!("headers.{canonical}");
            check_header_value(&field, value)?;
            if canonical.eq_ignore_ascii_case("Reply-To") {
                check_mailbox(&field, value)?;
            }
        }
        match (&self.template, &self.content) {
            (Some(_), Some(_)) => return Err(JobError::TemplateXorContent { found: "both" }),
            (None, None) => return Err(JobError::TemplateXorContent { found: "neither" }),
            (Some(template), None) => {
                check_id("template.id", &template.id)?;
                if !is_template_id(&template.id) {
                    return Err(JobError::InvalidTemplateId {
                        id: template.id.clone(),
                    });
                }
                let bytes = serde_json::to_vec(&template.variables).map_or(0, |v| v.len());
                check_body_size(bytes)?;
            }
            (None, Some(content)) => content.validate()?,
        }
        attachment::validate(&self.attachments)?;
        metadata::validate(&self.metadata)?;
        if let Some(id) = &self.list_id
            && !crate::unsubscribe::is_list_id(id)
        {
            return Err(JobError::InvalidListId { id: id.clone() });
        }
        match crate::unsubscribe::refusal(self) {
            Some(reason) => Err(JobError::UnsubscribeNotPossible { reason }),
            None => Ok(()),
        }
    }

    /// Every recipient (to, cc, bcc), in order.
    pub fn recipients(&self) -> impl Iterator<Item = &str> {
        self.to
            .iter()
            .chain(&self.cc)
            .chain(&self.bcc)
            .map(String::as_str)
    }
}

impl Content {
    /// Checks subject and body rules shared by inline and rendered content.
    pub fn validate(&self) -> Result<(), JobError> {
        if self.subject.trim().is_empty() {
            return Err(JobError::EmptyField { field: "subject" });
        }
        check_header_value("subject", &self.subject)?;
        if self.text.as_deref().is_none_or(str::is_empty)
            && self.html.as_deref().is_none_or(str::is_empty)
        {
            return Err(JobError::NoBody);
        }
        for (field, body) in [("text", &self.text), ("html", &self.html)] {
            if let Some(offset) = body.as_deref().and_then(|b| b.find('\0')) {
                return Err(JobError::ControlCharacter {
                    field: field.to_owned(),
                    offset,
                });
            }
        }
        let bytes = self.subject.len()
            + self.text.as_deref().map_or(0, str::len)
            + self.html.as_deref().map_or(0, str::len);
        check_body_size(bytes)
    }
}

fn check_body_size(bytes: usize) -> Result<(), JobError> {
    if bytes > MAX_BODY_BYTES {
        return Err(JobError::BodyTooLarge {
            bytes,
            max: MAX_BODY_BYTES,
        });
    }
    Ok(())
}

fn check_id(field: &'static str, value: &str) -> Result<(), JobError> {
    if value.trim().is_empty() {
        return Err(JobError::EmptyField { field });
    }
    if value.chars().count() > MAX_ID_LEN {
        return Err(JobError::TooLong {
            field: field.to_owned(),
            max: MAX_ID_LEN,
        });
    }
    if let Some(offset) = value.find(char::is_control) {
        return Err(JobError::ControlCharacter {
            field: field.to_owned(),
            offset,
        });
    }
    Ok(())
}

/// Whether `id` is a well-formed template id (see [`TemplateRef::id`]).
pub fn is_template_id(id: &str) -> bool {
    id.split('/').all(|segment| {
        segment
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            && segment
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    })
}

/// Whether `c` can disguise text a reader sees in a display name, subject or header: the
/// Unicode `Bidi_Control` characters (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069,
/// which reorder what follows: `Trojan Source`), the zero-width space, word joiner and byte order
/// mark (U+200B, U+2060, U+FEFF) and the line and paragraph separators (U+2028, U+2029). The
/// zero-width joiner and non-joiner (U+200C, U+200D) stay allowed: scripts such as Persian and
/// emoji sequences need them.
pub fn is_deceptive(c: char) -> bool {
    matches!(
        c,
        '\u{061C}'
            | '\u{200B}'
            | '\u{200E}'
            | '\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{2060}'
            | '\u{2066}'..='\u{2069}'
            | '\u{FEFF}'
    )
}

/// Header values must be a single line: CR, LF, NUL or any other control character would let a
/// caller inject headers or smuggle SMTP commands; and nothing in them may disguise what the
/// reader sees ([`is_deceptive`]).
fn check_header_value(field: &str, value: &str) -> Result<(), JobError> {
    if let Some(offset) = value.find(|c: char| c.is_control() && c != '\t') {
        return Err(JobError::ControlCharacter {
            field: field.to_owned(),
            offset,
        });
    }
    if let Some((offset, c)) = value.char_indices().find(|(_, c)| is_deceptive(*c)) {
        return Err(JobError::DeceptiveCharacter {
            field: field.to_owned(),
            offset,
            code: u32::from(c),
        });
    }
    if value.chars().count() > MAX_HEADER_LEN {
        return Err(JobError::TooLong {
            field: field.to_owned(),
            max: MAX_HEADER_LEN,
        });
    }
    Ok(())
}

/// Parses a mailbox (`addr` or `Name <addr>`) with the RFC 5322 grammar ([`crate::mailbox`]),
/// which accepts internationalised domains (checked through IDNA) and rejects everything else
/// specifically.
pub fn parse_mailbox(field: &str, value: &str) -> Result<Mailbox, JobError> {
    if value.trim().is_empty() {
        return Err(JobError::InvalidAddress {
            field: field.to_owned(),
            value: value.to_owned(),
            reason: "empty".to_owned(),
        });
    }
    check_header_value(field, value)?;
    let mailbox = value
        .parse::<Mailbox>()
        .map_err(|e| JobError::InvalidAddress {
            field: field.to_owned(),
            value: value.to_owned(),
            reason: e.to_string(),
        })?;
    if let Some(label) = crate::mailbox::mixed_script_label(mailbox.email.domain()) {
        return Err(JobError::InvalidAddress {
            field: field.to_owned(),
            value: value.to_owned(),
            reason: format!(
                "domain label {label:?} mixes scripts (UTS #39): a look-alike of another domain"
            ),
        });
    }
    Ok(mailbox)
}

fn check_mailbox(field: &str, value: &str) -> Result<(), JobError> {
    parse_mailbox(field, value).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn valid() -> serde_json::Value {
        json!({
            "version": 1,
            "message_id": "m-1",
            "campaign_id": "c-1",
            "from": "Shop <shop@example.com>",
            "to": ["ann@example.org"],
            "content": {"subject": "Hi", "text": "Hello"}
        })
    }

    fn with(mut base: serde_json::Value, key: &str, v: serde_json::Value) -> serde_json::Value {
        base[key] = v;
        base
    }

    #[test]
    fn template_ids_stay_inside_the_template_prefix() {
        for id in ["welcome", "receipts/v2", "a.b-c_d", "2026/11/welcome.en"] {
            assert!(is_template_id(id), "{id}");
        }
        for id in [
            "", "../x", "a/../b", "./a", "a//b", "/a", "a/", ".hidden", "a b", "a\\b", "ä", "a/.b",
            "%2e%2e",
        ] {
            assert!(!is_template_id(id), "{id}");
        }
    }

    #[test]
    fn accepts_a_minimal_job_and_defaults_priority() {
        let job = EmailJob::from_value(valid()).unwrap();
        assert_eq!(job.priority, Priority::Transactional);
        assert_eq!(
            job.recipients().collect::<Vec<_>>(),
            vec!["ann@example.org"]
        );
    }

    #[test]
    fn accepts_idn_addresses() {
        let job = with(
            valid(),
            "to",
            json!(["josé@bücher.example", "用户@例子.广告"]),
        );
        EmailJob::from_value(job).unwrap();
    }

    #[test]
    fn joiners_that_scripts_and_emoji_need_stay_allowed() {
        // A family emoji (ZWJ sequence) in the subject and a Persian name with a ZWNJ.
        let job = with(
            with(
                valid(),
                "content",
                json!({"subject": "Hi \u{1F468}\u{200D}\u{1F469}\u{200D}\u{1F467}", "text": "x"}),
            ),
            "to",
            json!(["\u{0645}\u{06CC}\u{200C}\u{062E}\u{0648}\u{0627}\u{0647}\u{0645} <a@b.com>"]),
        );
        assert!(EmailJob::from_value(job).is_ok());
        assert!(!is_deceptive('\u{200D}') && !is_deceptive('\u{200C}'));
        assert!(is_deceptive('\u{202E}') && is_deceptive('\u{FEFF}'));
    }

    #[test]
    fn bytes_that_are_not_utf8_or_json_are_classified() {
        let err = EmailJob::parse(b"{\"a\": \"\xff\xfe\"}").unwrap_err();
        assert_eq!(err.error, JobError::NotUtf8 { offset: 7 });
        let err = EmailJob::parse(b"{\"version\": 1,").unwrap_err();
        assert_eq!(err.error.code(), "malformed_json");
        let err = EmailJob::parse(b"").unwrap_err();
        assert_eq!(err.error.code(), "malformed_json");
    }

    #[test]
    fn rejected_jobs_keep_their_ids_when_safe() {
        let bad = with(valid(), "to", json!([]));
        let rejected = EmailJob::from_value(bad).unwrap_err();
        assert_eq!(rejected.message_id.as_deref(), Some("m-1"));
        assert_eq!(rejected.campaign_id.as_deref(), Some("c-1"));
        let evil = with(valid(), "message_id", json!("m\r\n1"));
        assert_eq!(EmailJob::from_value(evil).unwrap_err().message_id, None);
    }

    #[test]
    fn deeply_nested_json_is_rejected_not_overflowed() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let err = EmailJob::parse(deep.as_bytes()).unwrap_err();
        assert_eq!(err.error.code(), "malformed_json");
    }

    #[test]
    fn fingerprint_is_stable_hex_sha256() {
        assert_eq!(
            fingerprint(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn round_trips_through_json() {
        let mut v = valid();
        v["template"] = json!({"id": "welcome", "variables": {"name": "Ann"}});
        v.as_object_mut().unwrap().remove("content");
        v["not_after"] = json!("2026-12-01T00:00:00Z");
        v["priority"] = json!("bulk");
        let job = EmailJob::from_value(v).unwrap();
        let back = EmailJob::from_value(serde_json::to_value(&job).unwrap()).unwrap();
        assert_eq!(job, back);
    }
}
