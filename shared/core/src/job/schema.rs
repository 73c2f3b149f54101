//! The published JSON Schema of the contract: what schemars derives from the types, plus every
//! rule of [`EmailJob::validate`] that JSON Schema can state, built from the same constants. The
//! rules it cannot state are listed in the schema's description (and in
//! `schema/conformance/jobs.json`, whose `cannot_express` rows keep that list true).

use serde_json::{Map, Value, json};

use super::attachment::{
    DENIED_CONTENT_TYPES, DENIED_EXTENSIONS, KEY_PREFIX, MAX_ATTACHMENT_BYTES, MAX_ATTACHMENTS,
    MAX_FILENAME_LEN,
};
use super::metadata::{MAX_METADATA_ENTRIES, MAX_METADATA_KEY_LEN, MAX_METADATA_VALUE_LEN};
use super::{ALLOWED_HEADERS, EmailJob, JOB_VERSION, MAX_BODY_BYTES, MAX_HEADER_LEN, MAX_ID_LEN};
use super::{MAX_RECIPIENTS, is_deceptive};

/// What the schema cannot say; the parser checks it (see the README's "Job contract").
const CANNOT_EXPRESS: &[&str] = &[
    "the RFC 5322 grammar of an address beyond `@` and the forbidden characters",
    "internationalised domains that mix scripts (UTS #39 look-alikes)",
    "at least one and at most 50 recipients in `to`, `cc` and `bcc` together",
    "at most 512 KiB of subject, text and html together (in UTF-8 bytes; the schema caps each part in characters)",
    "at most 512 KiB of template variables",
    "an attachment's key is `attachments/` and its own sha256",
    "at most 10 MiB of attachments together",
    "at most 4096 bytes of metadata keys and values together (in UTF-8 bytes)",
    "`unsubscribe: list` or `global` needs exactly one recipient, and `list` a list id (`list_id`, or a `campaign_id` that is one)",
];

/// RFC 6838 `type/subtype` ([`super::attachment::is_media_type`]).
const MEDIA_TYPE: &str =
    r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}$";

/// Control characters (Unicode `Cc`), as `char::is_control` has them.
const CONTROL: &str = r"\u0000-\u001f\u007f-\u009f";
/// Control characters but the tab, which a header value may hold.
const CONTROL_BUT_TAB: &str = r"\u0000-\u0008\u000a-\u001f\u007f-\u009f";

impl EmailJob {
    /// The JSON Schema of the contract, as published in `schema/email-job.v1.json`.
    pub fn json_schema() -> Value {
        let mut schema = serde_json::to_value(schemars::schema_for!(EmailJob)).unwrap_or_default();
        contract_rules(&mut schema);
        schema
    }
}

/// A character class of every character [`is_deceptive`] refuses, for a regex.
fn deceptive_class() -> String {
    let mut class = String::new();
    let mut run: Option<(u32, u32)> = None;
    let flush = |run: Option<(u32, u32)>, class: &mut String| {
        if let Some((from, to)) = run {
            class.push_str(&format!("\\u{from:04x}"));
            if to > from {
                class.push_str(&format!("-\\u{to:04x}"));
            }
        }
    };
    for code in 0..=0xFFFFu32 {
        let deceptive = char::from_u32(code).is_some_and(is_deceptive);
        run = match (deceptive, run) {
            (true, Some((from, to))) if to + 1 == code => Some((from, code)),
            (true, other) => {
                flush(other, &mut class);
                Some((code, code))
            }
            (false, other) => {
                flush(other, &mut class);
                None
            }
        };
    }
    flush(run, &mut class);
    class
}

/// A string of characters outside `forbidden`, with at least one that is not white space.
fn not_blank(forbidden: &str) -> String {
    format!(r"^[^{forbidden}]*[^{forbidden}\s][^{forbidden}]*$")
}

/// A regex matching any casing of one of `names`, whole.
fn any_case(names: &[&str]) -> String {
    let alternatives: Vec<String> = names
        .iter()
        .map(|name| {
            name.chars()
                .map(|c| {
                    if c.is_ascii_alphabetic() {
                        format!("[{}{}]", c.to_ascii_uppercase(), c.to_ascii_lowercase())
                    } else if r".+*?()[]{}|^$\".contains(c) {
                        format!("\\{c}")
                    } else {
                        c.to_string()
                    }
                })
                .collect()
        })
        .collect();
    format!("^(?:{})$", alternatives.join("|"))
}

fn contract_rules(schema: &mut Value) {
    let deceptive = deceptive_class();
    let header_forbidden = format!("{CONTROL_BUT_TAB}{deceptive}");
    let id = json!({
        "minLength": 1,
        "maxLength": MAX_ID_LEN,
        "pattern": not_blank(CONTROL),
    });
    let mailbox = json!({
        "type": "string",
        "maxLength": MAX_HEADER_LEN,
        "pattern": format!("^[^{header_forbidden}]*@[^{header_forbidden}]*$"),
    });
    let header_value = json!({
        "type": "string",
        "maxLength": MAX_HEADER_LEN,
        "pattern": format!("^[^{header_forbidden}]*$"),
    });
    let body = json!({"maxLength": MAX_BODY_BYTES, "pattern": r"^[^\u0000]*$"});
    // A name ending in a denied extension, in any case.
    let extensions = any_case(DENIED_EXTENSIONS);
    let denied_extension = format!(r"\.{}", &extensions[1..]);
    let recipients = |min: usize, max: usize| json!({"minItems": min, "maxItems": max, "items": mailbox.clone()});

    let description = format!(
        "One email job, version {JOB_VERSION} of the contract (see the README's \"Job contract\"). \
         The send function's parser also checks what JSON Schema cannot state: {}.",
        CANNOT_EXPRESS.join("; ")
    );
    merge(
        schema,
        json!({
            "description": description,
            "oneOf": [
                {"required": ["template"], "properties": {"template": {"type": "object"}}},
                {"required": ["content"], "properties": {"content": {"type": "object"}}},
            ],
            "properties": {
                "version": {"const": JOB_VERSION},
                "message_id": id,
                "campaign_id": id,
                "trace_id": id,
                "from": mailbox,
                "to": recipients(0, MAX_RECIPIENTS),
                "cc": recipients(0, MAX_RECIPIENTS),
                "bcc": recipients(0, MAX_RECIPIENTS),
                "headers": {
                    "propertyNames": {"pattern": any_case(ALLOWED_HEADERS)},
                    "patternProperties": {any_case(&["Reply-To"]): mailbox},
                    "additionalProperties": header_value,
                },
                "attachments": {"maxItems": MAX_ATTACHMENTS},
                "metadata": {
                    "maxProperties": MAX_METADATA_ENTRIES,
                    "propertyNames": {"pattern": format!("^[A-Za-z0-9_.:-]{{1,{MAX_METADATA_KEY_LEN}}}$")},
                    "additionalProperties": {
                        "type": "string",
                        "maxLength": MAX_METADATA_VALUE_LEN,
                        "pattern": format!("^[^{CONTROL}]*$"),
                    },
                },
            },
            "$defs": {
                "Content": {
                    "anyOf": [
                        {"required": ["text"], "properties": {"text": {"type": "string", "minLength": 1}}},
                        {"required": ["html"], "properties": {"html": {"type": "string", "minLength": 1}}},
                    ],
                    "properties": {
                        "subject": {
                            "maxLength": MAX_HEADER_LEN,
                            "pattern": not_blank(&header_forbidden),
                        },
                        "text": body,
                        "html": body,
                    },
                },
                "TemplateRef": {"properties": {"id": {"maxLength": MAX_ID_LEN}}},
                "AttachmentRef": {"properties": {
                    "filename": {
                        "maxLength": MAX_FILENAME_LEN,
                        "pattern": not_blank(&format!(r"{CONTROL}{deceptive}/\\")),
                        "not": {"anyOf": [{"pattern": denied_extension}, {"pattern": r"^\.\.?$"}]},
                    },
                    "content_type": {
                        "pattern": MEDIA_TYPE,
                        "not": {"pattern": any_case(DENIED_CONTENT_TYPES)},
                    },
                    "key": {"pattern": format!("^{KEY_PREFIX}[0-9a-f]{{64}}$")},
                    "sha256": {"pattern": "^[0-9a-f]{64}$"},
                    "bytes": {"minimum": 1, "maximum": MAX_ATTACHMENT_BYTES},
                }},
            },
        }),
    );
    // `const` says all a type and a range would.
    if let Some(version) = schema
        .pointer_mut("/properties/version")
        .and_then(Value::as_object_mut)
    {
        version.retain(|key, _| key == "const" || key == "description");
    }
}

/// Merges `extra` into `target`, object by object; anything else in `extra` replaces.
fn merge(target: &mut Value, extra: Value) {
    match (target, extra) {
        (Value::Object(target), Value::Object(extra)) => merge_maps(target, extra),
        (target, extra) => *target = extra,
    }
}

fn merge_maps(target: &mut Map<String, Value>, extra: Map<String, Value>) {
    for (key, value) in extra {
        match target.get_mut(&key) {
            Some(existing) => merge(existing, value),
            None => {
                target.insert(key, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deceptive_class_names_exactly_the_refused_characters() {
        assert_eq!(
            deceptive_class(),
            r"\u061c\u200b\u200e-\u200f\u2028-\u202e\u2060\u2066-\u2069\ufeff"
        );
    }

    #[test]
    fn header_names_match_in_any_case() {
        assert_eq!(
            any_case(&["Reply-To", "X-1"]),
            "^(?:[Rr][Ee][Pp][Ll][Yy]-[Tt][Oo]|[Xx]-1)$"
        );
        // Regex metacharacters of a content type are literal.
        assert_eq!(any_case(&["a.b+c"]), r"^(?:[Aa]\.[Bb]\+[Cc])$");
    }
}
