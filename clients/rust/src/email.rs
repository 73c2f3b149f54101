//! A validated email job, its builder, and the idempotency helper.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use courier_core::job::{
    AttachmentRef, Content, EmailJob, JOB_VERSION, JobError, Priority, ProviderHint, TemplateRef,
    fingerprint,
};
use courier_core::unsubscribe::UnsubscribeMode;
/// The largest message body the client sends (through the claim check): 8 MiB, above anything
/// the contract's limits allow (512 KiB of body and of template variables, even when JSON
/// escapes every character).
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// A job that the send function will accept, with the exact message body that goes on the queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Email {
    job: EmailJob,
    body: String,
    /// Attachments this process holds, by key: uploaded to the payload bucket before the job is
    /// enqueued.
    files: Vec<(String, Vec<u8>)>,
}

/// Why an email cannot be enqueued.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidEmail {
    /// The job breaks the contract; the send function would dead-letter it as `invalid_job` with
    /// this code ([`JobError::code`], documented in `docs/job-contract.md`).
    #[error("invalid job ({code}): {source}", code = source.code())]
    Contract {
        #[source]
        source: JobError,
    },
    /// The job's message body is larger than the client stores through the claim check
    /// (code `too_large`; no job within the contract's limits comes near it).
    #[error(
        "the job is {bytes} bytes as a message body; at most {max} are sent, through the claim check above SQS's limit"
    )]
    TooLarge { bytes: usize, max: usize },
}

impl InvalidEmail {
    /// Stable code: the contract's rejection code, or `too_large`.
    pub fn code(&self) -> &'static str {
        match self {
            InvalidEmail::Contract { source } => source.code(),
            InvalidEmail::TooLarge { .. } => "too_large",
        }
    }
}

impl Email {
    /// A builder for a version-1 job.
    pub fn builder() -> EmailBuilder {
        EmailBuilder::default()
    }

    /// Validates a job written as JSON (the contract of `schema/email-job.v1.json`).
    pub fn from_json(value: serde_json::Value) -> Result<Email, InvalidEmail> {
        let job = EmailJob::from_value(value).map_err(|rejected| InvalidEmail::Contract {
            source: rejected.error,
        })?;
        Email::from_job(&job)
    }

    /// Validates a job built by hand. The job is checked on the message body it becomes, with the
    /// parser the send function runs on that body.
    pub fn from_job(job: &EmailJob) -> Result<Email, InvalidEmail> {
        let body = encode(job)?;
        let job = EmailJob::parse(body.as_bytes()).map_err(|rejected| InvalidEmail::Contract {
            source: rejected.error,
        })?;
        Ok(Email {
            job,
            body,
            files: Vec::new(),
        })
    }

    /// The attachments this process holds (key, content), to be stored before the job is sent.
    pub fn files(&self) -> &[(String, Vec<u8>)] {
        &self.files
    }

    /// The job, as the send function will read it.
    pub fn job(&self) -> &EmailJob {
        &self.job
    }

    /// Its idempotency key.
    pub fn message_id(&self) -> &str {
        &self.job.message_id
    }

    /// The SQS message body.
    pub fn body(&self) -> &str {
        &self.body
    }
}

/// The message body of `job`: its JSON, with U+FFFE and U+FFFF written as escapes (SQS refuses
/// them in a message; JSON escapes every control character already), at most
/// [`MAX_BODY_BYTES`] (a body above the queue's claim-check threshold is stored in the payload
/// bucket and the queue carries a pointer to it).
fn encode(job: &EmailJob) -> Result<String, InvalidEmail> {
    let json = serde_json::to_string(job).map_err(|e| InvalidEmail::Contract {
        source: JobError::Schema {
            message: e.to_string(),
        },
    })?;
    let body = if json.contains(['\u{FFFE}', '\u{FFFF}']) {
        json.replace('\u{FFFE}', "\\ufffe")
            .replace('\u{FFFF}', "\\uffff")
    } else {
        json
    };
    if body.len() > MAX_BODY_BYTES {
        return Err(InvalidEmail::TooLarge {
            bytes: body.len(),
            max: MAX_BODY_BYTES,
        });
    }
    Ok(body)
}

/// A stable `message_id` for the application's own key: `idem-` and the first 32 hex digits of
/// the SHA-256 of the key. The same key always gives the same id (in the Python client too), and
/// Courier sends a `message_id` at most once.
pub fn message_id_for(key: &str) -> String {
    let digest = fingerprint(key.as_bytes());
    format!("idem-{}", &digest[..32])
}

/// Builds an [`Email`]; [`EmailBuilder::build`] validates it. Set the body either inline
/// (`subject` with `text` and/or `html`) or as a stored `template` with `variable`s.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct EmailBuilder {
    message_id: Option<String>,
    campaign_id: Option<String>,
    trace_id: Option<String>,
    priority: Priority,
    from: Option<String>,
    to: Vec<String>,
    cc: Vec<String>,
    bcc: Vec<String>,
    subject: Option<String>,
    text: Option<String>,
    html: Option<String>,
    template: Option<String>,
    variables: serde_json::Map<String, serde_json::Value>,
    headers: BTreeMap<String, String>,
    provider: Option<ProviderHint>,
    not_after: Option<DateTime<Utc>>,
    attachments: Vec<AttachmentRef>,
    files: Vec<(String, Vec<u8>)>,
    metadata: BTreeMap<String, String>,
    list_id: Option<String>,
    unsubscribe: Option<UnsubscribeMode>,
}

impl EmailBuilder {
    /// The idempotency key as is (at most 256 characters, no control characters).
    pub fn message_id(mut self, id: impl Into<String>) -> Self {
        self.message_id = Some(id.into());
        self
    }

    /// The idempotency key derived from the application's own key ([`message_id_for`]).
    pub fn idempotency_key(self, key: &str) -> Self {
        self.message_id(message_id_for(key))
    }

    /// The campaign, for search, statistics and replay (required).
    pub fn campaign(mut self, id: impl Into<String>) -> Self {
        self.campaign_id = Some(id.into());
        self
    }

    /// An id carried into Courier's logs and dead letters.
    pub fn trace_id(mut self, id: impl Into<String>) -> Self {
        self.trace_id = Some(id.into());
        self
    }

    /// The retry budget (transactional by default).
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// The sender: `addr@example.com` or `Name <addr@example.com>` (required).
    pub fn from(mut self, mailbox: impl Into<String>) -> Self {
        self.from = Some(mailbox.into());
        self
    }

    /// Adds a `To` recipient (at least one recipient in `to`, `cc` and `bcc`; 50 in all at most).
    pub fn to(mut self, mailbox: impl Into<String>) -> Self {
        self.to.push(mailbox.into());
        self
    }

    /// Adds a `Cc` recipient.
    pub fn cc(mut self, mailbox: impl Into<String>) -> Self {
        self.cc.push(mailbox.into());
        self
    }

    /// Adds a `Bcc` recipient.
    pub fn bcc(mut self, mailbox: impl Into<String>) -> Self {
        self.bcc.push(mailbox.into());
        self
    }

    /// The subject of inline content.
    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = Some(subject.into());
        self
    }

    /// The plain-text body of inline content.
    pub fn text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }

    /// The HTML body of inline content.
    pub fn html(mut self, html: impl Into<String>) -> Self {
        self.html = Some(html.into());
        self
    }

    /// A stored template (`templates/{id}.json` in the stack's template bucket).
    pub fn template(mut self, id: impl Into<String>) -> Self {
        self.template = Some(id.into());
        self
    }

    /// A variable of the template.
    pub fn variable(
        mut self,
        name: impl Into<String>,
        value: impl Into<serde_json::Value>,
    ) -> Self {
        self.variables.insert(name.into(), value.into());
        self
    }

    /// An extra header, one of `ALLOWED_HEADERS` (`Reply-To`, `List-Unsubscribe`, ...).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// The `Reply-To` header.
    pub fn reply_to(self, mailbox: impl Into<String>) -> Self {
        self.header("Reply-To", mailbox)
    }

    /// A preferred provider (a hint: failover may pick another).
    pub fn provider(mut self, provider: ProviderHint) -> Self {
        self.provider = Some(provider);
        self
    }

    /// Do not send after this instant: a job found later is dead-lettered, not sent late.
    pub fn not_after(mut self, at: DateTime<Utc>) -> Self {
        self.not_after = Some(at);
        self
    }

    /// Attaches a file: [`CourierQueue`](crate::CourierQueue) stores it in the stack's payload
    /// bucket (at `attachments/{sha256}`) before it enqueues the job, which names it.
    pub fn attach(
        mut self,
        filename: impl Into<String>,
        content_type: impl Into<String>,
        content: impl Into<Vec<u8>>,
    ) -> Self {
        let content = content.into();
        let reference = AttachmentRef::of(&filename.into(), &content_type.into(), &content);
        if !self.files.iter().any(|(key, _)| *key == reference.key) {
            self.files.push((reference.key.clone(), content));
        }
        self.attachments.push(reference);
        self
    }

    /// A pair of the application's own, echoed in the job's outcome events (at most 20 keys of
    /// ASCII letters, digits, `_`, `.`, `:`, `-`; values up to 512 characters; 4 KiB in all).
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// The mailing list the job belongs to, named in its one-click unsubscribe link (default:
    /// the campaign id, when it is a list id).
    pub fn list_id(mut self, list: impl Into<String>) -> Self {
        self.list_id = Some(list.into());
        self
    }

    /// Whether Courier adds `List-Unsubscribe` (one-click, RFC 8058): default `List` for bulk
    /// jobs with one recipient, `None` otherwise. `List` and `Global` need one recipient.
    pub fn unsubscribe(mut self, mode: UnsubscribeMode) -> Self {
        self.unsubscribe = Some(mode);
        self
    }

    /// Validates the job as the send function will, on the message body it becomes.
    pub fn build(self) -> Result<Email, InvalidEmail> {
        let inline = self.subject.is_some() || self.text.is_some() || self.html.is_some();
        let content = inline.then(|| Content {
            subject: self.subject.unwrap_or_default(),
            text: self.text,
            html: self.html,
        });
        let template =
            (self.template.is_some() || !self.variables.is_empty()).then(|| TemplateRef {
                id: self.template.unwrap_or_default(),
                variables: self.variables,
            });
        let files = self.files;
        let email = Email::from_job(&EmailJob {
            version: JOB_VERSION,
            message_id: self.message_id.unwrap_or_default(),
            campaign_id: self.campaign_id.unwrap_or_default(),
            trace_id: self.trace_id,
            priority: self.priority,
            from: self.from.unwrap_or_default(),
            to: self.to,
            cc: self.cc,
            bcc: self.bcc,
            template,
            content,
            headers: self.headers,
            provider: self.provider,
            not_after: self.not_after,
            attachments: self.attachments,
            metadata: self.metadata,
            list_id: self.list_id,
            unsubscribe: self.unsubscribe,
        })?;
        Ok(Email { files, ..email })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receipt() -> EmailBuilder {
        Email::builder()
            .message_id("m-1")
            .campaign("receipts")
            .from("Shop <shop@example.com>")
            .to("ann@example.org")
            .subject("Your receipt")
            .text("Thanks.")
    }

    #[test]
    fn a_built_email_is_the_job_the_send_function_reads() {
        let email = receipt()
            .cc("bo@example.org")
            .reply_to("help@example.com")
            .build()
            .unwrap();
        assert_eq!(
            EmailJob::parse(email.body().as_bytes()).unwrap(),
            *email.job()
        );
        assert_eq!(email.message_id(), "m-1");
        assert_eq!(email.job().cc, vec!["bo@example.org"]);
    }

    #[test]
    fn what_the_contract_refuses_comes_back_with_its_code() {
        let missing_id = Email::builder()
            .campaign("c")
            .from("a@b.com")
            .to("c@d.com")
            .subject("s")
            .text("t")
            .build()
            .unwrap_err();
        assert_eq!(missing_id.code(), "empty_field");
        assert!(
            missing_id.to_string().contains("message_id"),
            "{missing_id}"
        );
        assert_eq!(
            receipt().template("welcome").build().unwrap_err().code(),
            "template_xor_content"
        );
        assert_eq!(
            receipt()
                .header("Bcc", "x@y.com")
                .build()
                .unwrap_err()
                .code(),
            "header_not_allowed"
        );
        let none = Email::builder()
            .message_id("m")
            .campaign("c")
            .from("a@b.com")
            .to("c@d.com");
        assert_eq!(none.build().unwrap_err().code(), "template_xor_content");
    }

    #[test]
    fn a_template_email_carries_its_variables() {
        let email = Email::builder()
            .idempotency_key("order-1")
            .campaign("c")
            .from("a@b.com")
            .to("c@d.com")
            .template("receipts/v2")
            .variable("name", "Ann")
            .variable("total", 42)
            .build()
            .unwrap();
        let template = email.job().template.as_ref().unwrap();
        assert_eq!(template.variables["total"], 42);
    }

    #[test]
    fn sqs_forbidden_characters_travel_as_escapes() {
        let email = receipt().text("a\u{FFFF}b\u{FFFE}").build().unwrap();
        assert!(
            !email.body().contains(['\u{FFFE}', '\u{FFFF}']),
            "{}",
            email.body()
        );
        assert!(email.body().contains("a\\uffffb\\ufffe"));
        assert_eq!(
            email.job().content.as_ref().unwrap().text.as_deref(),
            Some("a\u{FFFF}b\u{FFFE}")
        );
    }

    #[test]
    fn a_body_above_what_the_client_sends_is_refused_before_sending() {
        // Far beyond the contract (which the parser would refuse too), as a job built by hand.
        let mut job = receipt().build().unwrap().job().clone();
        job.content.as_mut().unwrap().text = Some("\"".repeat(MAX_BODY_BYTES / 2));
        let err = Email::from_job(&job).unwrap_err();
        assert_eq!(err.code(), "too_large");
        assert!(
            matches!(err, InvalidEmail::TooLarge { bytes, max } if bytes > max && max == MAX_BODY_BYTES)
        );
    }

    #[test]
    fn message_ids_are_stable_and_valid() {
        assert_eq!(message_id_for("a"), "idem-ca978112ca1bbdcafac231b39a23dc4d");
        assert_ne!(message_id_for("order-1"), message_id_for("order-2"));
    }
}
