//! Ports: the narrow capabilities the send pipeline needs from the outside world. Adapters live
//! in `courier-adapters` (DynamoDB, SQS, S3, SES, Step Functions, SMTP) and `courier-devkit`
//! (in memory, for unit tests).
//! The status record and the status store are in `ports/records.rs` (re-exported here).

pub use crate::mailbox::Mailbox;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::breaker::BreakerState;
use crate::classify::Verdict;

pub use crate::claim::{ClaimJudgement, ClaimOutcome, ClaimRequest, judge_claim};
pub use crate::letters::{AttemptRecord, DeadLetter};
pub use crate::recipients::{Recipient, RecipientChange, RecipientEntry, RecipientFill};

mod records;
pub use records::*;

/// A storage or queue call failed; the record must not be acknowledged.
#[derive(Debug, thiserror::Error)]
#[error("{operation} failed: {message}")]
pub struct StoreError {
    pub operation: &'static str,
    pub message: String,
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl StoreError {
    pub fn new(
        operation: &'static str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> StoreError {
        StoreError {
            operation,
            message: source.to_string(),
            source: Some(Box::new(source)),
        }
    }

    pub fn msg(operation: &'static str, message: impl Into<String>) -> StoreError {
        StoreError {
            operation,
            message: message.into(),
            source: None,
        }
    }
}

/// Where outcome events go (the stack's EventBridge bus).
#[async_trait::async_trait]
pub trait OutcomeBus: Send + Sync {
    /// Publishes at most [`crate::outcome::EVENTS_PER_CALL`] events; one result per event, in
    /// order.
    async fn publish(&self, events: &[crate::outcome::OutcomeEvent])
    -> Vec<Result<(), StoreError>>;
}

/// A message ready for a provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingEmail {
    pub message_id: String,
    pub campaign_id: String,
    pub from: Mailbox,
    pub to: Vec<Mailbox>,
    pub cc: Vec<Mailbox>,
    pub bcc: Vec<Mailbox>,
    pub subject: String,
    pub text: Option<String>,
    pub html: Option<String>,
    pub headers: Vec<(String, String)>,
    /// Sent as the `X-Courier-Trace-Id` header and, on SES, a message tag.
    pub trace_id: Option<String>,
    /// Files attached to the message, fetched and checked against their references.
    pub attachments: Vec<Attachment>,
}

/// A file attached to an outgoing message.
#[derive(Clone, PartialEq, Eq)]
pub struct Attachment {
    pub filename: String,
    pub content_type: String,
    pub content: Vec<u8>,
}

impl std::fmt::Debug for Attachment {
    // The content stays out of logs and test output.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attachment")
            .field("filename", &self.filename)
            .field("content_type", &self.content_type)
            .field("bytes", &self.content.len())
            .finish()
    }
}

/// A provider accepted the message (for every recipient but those it `refused`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub provider_message_id: String,
    /// Recipients the provider refused while it took the message for the others (an SMTP
    /// relay's permanent reply to one `RCPT TO`); empty when it took every one.
    pub refused: Vec<Refusal>,
}

impl Receipt {
    /// The message was accepted for every recipient.
    pub fn new(provider_message_id: impl Into<String>) -> Receipt {
        Receipt {
            provider_message_id: provider_message_id.into(),
            refused: Vec::new(),
        }
    }
}

/// One recipient a provider refused, and the verdict on its reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The address as it was sent in the envelope.
    pub address: String,
    pub verdict: Verdict,
}

/// A provider did not accept the message.
#[derive(Debug, thiserror::Error)]
#[error("{} ({}): {}", verdict.class, verdict.rule, verdict.raw_text.as_deref().unwrap_or(""))]
pub struct SendFailure {
    pub verdict: Verdict,
    /// The request may have reached the provider (timeout after sending): the outcome is
    /// unknown, and a resend could duplicate.
    pub ambiguous: bool,
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

/// A provider Courier sends through: named once, when the configuration is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Provider {
    Ses,
    Smtp,
}

impl Provider {
    pub const ALL: [Provider; 2] = [Provider::Ses, Provider::Smtp];

    /// The stable name (`ses`, `smtp`) used for breakers, schedules, metrics and records.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Ses => "ses",
            Provider::Smtp => "smtp",
        }
    }

    /// The provider of a stable name; `None` for any other text.
    pub fn parse(name: &str) -> Option<Provider> {
        Provider::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

impl std::fmt::Display for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<crate::job::ProviderHint> for Provider {
    fn from(hint: crate::job::ProviderHint) -> Provider {
        match hint {
            crate::job::ProviderHint::Ses => Provider::Ses,
            crate::job::ProviderHint::Smtp => Provider::Smtp,
        }
    }
}

/// Sends mail through one provider.
#[async_trait::async_trait]
pub trait Mailer: Send + Sync {
    /// The provider this mailer sends through (its name keys the breaker and records).
    fn provider(&self) -> Provider;
    async fn send(&self, email: &OutgoingEmail) -> Result<Receipt, SendFailure>;
}

/// A job copy to put back on the queue after a delay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requeue {
    pub message_id: String,
    pub body: String,
    pub delay_secs: u64,
}

/// Re-enqueues retries.
#[async_trait::async_trait]
pub trait RetryScheduler: Send + Sync {
    /// Delays of at most 900 s, batched (SendMessageBatch, split within SQS's count and size
    /// limits, see `limits::sqs_batches`); one result per item, in order.
    async fn enqueue(&self, items: &[Requeue]) -> Vec<Result<(), StoreError>>;
    /// Longer delays: start the delay state machine.
    async fn start_wait(&self, item: &Requeue) -> Result<(), StoreError>;
}

/// Where dead letters go.
#[async_trait::async_trait]
pub trait DeadLetterSink: Send + Sync {
    async fn put(&self, letter: &DeadLetter) -> Result<(), StoreError>;
}

/// A dead letter's copy on the dead-letter queue, as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedLetter {
    /// Receipt handle for delete / hide.
    pub receipt: String,
    /// The queue's own message id.
    pub queue_message_id: String,
    pub body: String,
    /// When the queue first got it.
    pub sent_at: DateTime<Utc>,
}

/// A dead-letter queue as the archiver sees it.
#[async_trait::async_trait]
pub trait LetterQueue: Send + Sync {
    /// Up to `max` (1..=10) messages, hidden from other receivers for `hide`.
    async fn receive(
        &self,
        max: usize,
        hide: std::time::Duration,
    ) -> Result<Vec<QueuedLetter>, StoreError>;
    async fn delete(&self, receipts: &[String]) -> Result<(), StoreError>;
    /// Makes a received message invisible for `hide` more (at most 12 h).
    async fn hide(&self, receipt: &str, hide: std::time::Duration) -> Result<(), StoreError>;
}

/// The searchable dead-letter index: one item per letter, the truth about its state.
#[async_trait::async_trait]
pub trait LetterIndex: Send + Sync {
    /// Adds a letter; false (and no change) when its id is already indexed.
    async fn put_new(&self, letter: &crate::letters::IndexedLetter) -> Result<bool, StoreError>;
    /// The indexed letters among `ids` (missing ids are left out).
    async fn get_many(
        &self,
        ids: &[String],
    ) -> Result<Vec<crate::letters::IndexedLetter>, StoreError>;
    /// Moves a letter from `from` to `to` (conditionally); sets or clears `archive_key` and
    /// appends `audit`. False when the letter was not in `from`.
    async fn transition(
        &self,
        id: &str,
        from: crate::letters::LetterState,
        to: crate::letters::LetterState,
        archive_key: Option<&str>,
        audit: Option<&str>,
    ) -> Result<bool, StoreError>;
    /// Letters matching `filter`, newest first, at most `limit`, continuing after `cursor`.
    async fn search(
        &self,
        filter: &crate::letters::LetterFilter,
        limit: usize,
        cursor: Option<String>,
    ) -> Result<(Vec<crate::letters::IndexedLetter>, Option<String>), StoreError>;
}

/// Where archived letters go.
#[async_trait::async_trait]
pub trait ArchiveStore: Send + Sync {
    /// Writes a new object; false (nothing written) when `key` already exists.
    async fn put_new(&self, key: &str, bytes: Vec<u8>) -> Result<bool, StoreError>;
    async fn exists(&self, key: &str) -> Result<bool, StoreError>;
}

/// Bodies too large for their queue, stored apart (see [`crate::claim_check`]).
#[async_trait::async_trait]
pub trait PayloadStore: Send + Sync {
    /// Writes the object (an existing one with the same key holds the same bytes).
    async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), StoreError>;
    /// The object; `None` when there is none (expired or deleted).
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// Copies an object to `to` (a new object, so its lifecycle counts from now); false, nothing
    /// written, when `from` is gone.
    async fn copy(&self, from: &str, to: &str) -> Result<bool, StoreError>;
}

/// One suppressed address, or one address unsubscribed from one list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuppressionEntry {
    /// Lower-cased.
    pub address: String,
    /// The list an unsubscription covers; `None` for a suppression of every mail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list: Option<String>,
    pub reason: String,
    pub suppressed_at: DateTime<Utc>,
    /// Soft entries expire; hard ones (permanent bounces, complaints) do not.
    pub expires_at: Option<DateTime<Utc>>,
}

impl SuppressionEntry {
    /// The entry stored under `key` (an address key, or a list-scoped one:
    /// [`crate::unsubscribe::suppression_key`]).
    pub fn from_key(
        key: &str,
        reason: String,
        suppressed_at: DateTime<Utc>,
        expires_at: Option<DateTime<Utc>>,
    ) -> SuppressionEntry {
        let (list, address) = crate::unsubscribe::split_key(key);
        SuppressionEntry {
            address,
            list,
            reason,
            suppressed_at,
            expires_at,
        }
    }
}

/// The suppression list.
#[async_trait::async_trait]
pub trait SuppressionList: Send + Sync {
    /// The subset of `addresses` suppressed at `now` (compared case-insensitively; expired soft
    /// entries do not count).
    async fn suppressed(
        &self,
        addresses: &[String],
        now: DateTime<Utc>,
    ) -> Result<Vec<String>, StoreError>;
    /// Suppresses an address, for good (`until` = None) or until a time (a soft entry).
    async fn suppress_until(
        &self,
        address: &str,
        reason: &str,
        now: DateTime<Utc>,
        until: Option<DateTime<Utc>>,
    ) -> Result<(), StoreError>;
    /// A soft suppression made automatically (a transient bounce that gave up, an undetermined
    /// bounce): written only where it adds protection. It never replaces a hard entry and never
    /// shortens a soft one. True when it was written.
    async fn suppress_soft(
        &self,
        address: &str,
        reason: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<bool, StoreError>;
    /// A hard suppression (permanent bounce, complaint).
    async fn suppress(
        &self,
        address: &str,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.suppress_until(address, reason, now, None).await
    }
    /// Removes an address; false when it was not listed.
    async fn remove(&self, address: &str) -> Result<bool, StoreError>;
    /// The subset of `addresses` unsubscribed from `list` (compared as [`crate::mailbox::address_key`]s).
    async fn unsubscribed(
        &self,
        addresses: &[String],
        list: &str,
    ) -> Result<Vec<String>, StoreError>;
    /// Records an unsubscription (reason [`crate::unsubscribe::REASON`], never expiring): a
    /// global one is a suppression of every mail; it replaces a soft entry and keeps a hard one.
    /// True when written, false when already recorded (a replayed request).
    async fn unsubscribe(
        &self,
        address: &str,
        scope: &crate::unsubscribe::Scope,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError>;
    /// Removes an address's unsubscription from one list; false when there was none.
    async fn remove_from_list(&self, address: &str, list: &str) -> Result<bool, StoreError>;
    /// Entries (expired ones included, marked by `expires_at`), a page at a time.
    async fn list(
        &self,
        limit: usize,
        cursor: Option<String>,
    ) -> Result<(Vec<SuppressionEntry>, Option<String>), StoreError>;
}

/// The poison blocklist (payload fingerprints).
#[async_trait::async_trait]
pub trait PoisonList: Send + Sync {
    async fn is_blocked(&self, fingerprint: &str) -> Result<bool, StoreError>;
    /// Adds a payload fingerprint: identical payloads go straight to the poison category.
    async fn block(
        &self,
        fingerprint: &str,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError>;
}

/// A stored template's parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub subject: String,
    pub text: Option<String>,
    pub html: Option<String>,
}

/// Why a template could not be had.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("template {0:?} does not exist")]
    NotFound(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Stored templates.
#[async_trait::async_trait]
pub trait TemplateStore: Send + Sync {
    async fn get(&self, id: &str) -> Result<Template, TemplateError>;
}

/// Shared breaker state, one per provider, written with optimistic concurrency.
#[async_trait::async_trait]
pub trait BreakerStore: Send + Sync {
    async fn load(&self, provider: &str) -> Result<Option<BreakerState>, StoreError>;
    /// Writes `state` if the stored version is still `expected_version` (None: absent).
    /// Returns false when another instance wrote first.
    async fn save(
        &self,
        provider: &str,
        state: &BreakerState,
        expected_version: Option<u64>,
    ) -> Result<bool, StoreError>;
}

/// First sightings of keys (error codes that classified as `unknown`).
#[async_trait::async_trait]
pub trait Sightings: Send + Sync {
    /// True the first time `key` is seen (and records it); false after.
    async fn first_sighting(&self, key: &str, now: DateTime<Utc>) -> Result<bool, StoreError>;
}

/// Events already counted, so a redelivered event counts once (the reputation guard).
#[async_trait::async_trait]
pub trait EventLedger: Send + Sync {
    /// True the first time `key` is entered (and records it until `keep_until`); false while it
    /// is recorded.
    async fn first_entry(
        &self,
        key: &str,
        now: DateTime<Utc>,
        keep_until: DateTime<Utc>,
    ) -> Result<bool, StoreError>;
}

/// Rolling delivery counts per sending domain, in hourly buckets (the reputation guard).
#[async_trait::async_trait]
pub trait ReputationStore: Send + Sync {
    /// Adds `counts` to the domain's bucket starting at `bucket`.
    async fn add(
        &self,
        domain: &str,
        bucket: DateTime<Utc>,
        counts: &crate::reputation::ReputationCounts,
    ) -> Result<(), StoreError>;
    /// The sum of the domain's buckets from `since` on.
    async fn window(
        &self,
        domain: &str,
        since: DateTime<Utc>,
    ) -> Result<crate::reputation::ReputationCounts, StoreError>;
}

/// The shared send-rate schedules, one per provider (see [`crate::rate`]).
#[async_trait::async_trait]
pub trait SendSchedule: Send + Sync {
    /// Reserves `cost_us` of `key`'s schedule at `now_us` unless it is booked more than
    /// `max_ahead_us` past now: [`crate::rate::reserve`], performed atomically on the shared
    /// state.
    async fn reserve(
        &self,
        key: &str,
        now_us: i64,
        cost_us: i64,
        max_ahead_us: i64,
    ) -> Result<crate::rate::Reservation, StoreError>;
}

/// The receiving domains' pacing states (see [`crate::pacing`]), shared by every instance.
#[async_trait::async_trait]
pub trait DestinationRates: Send + Sync {
    /// Every paced domain's state, by domain.
    async fn all(
        &self,
    ) -> Result<std::collections::BTreeMap<String, crate::pacing::DestinationRate>, StoreError>;
    /// Sets `domain`'s state to `new` if it is still `seen` (`None`: the domain has none).
    /// `Ok(false)`: another instance changed it first (its decrease stands; this one is
    /// dropped).
    async fn set(
        &self,
        domain: &str,
        seen: Option<&crate::pacing::DestinationRate>,
        new: &crate::pacing::DestinationRate,
    ) -> Result<bool, StoreError>;
    /// Forgets `domain`'s state if it is still `seen` (a domain grown back to the ceiling).
    async fn forget(
        &self,
        domain: &str,
        seen: &crate::pacing::DestinationRate,
    ) -> Result<bool, StoreError>;
}

/// The live settings document as stored ([`crate::live`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveRecord {
    /// The JSON document as written.
    pub document: String,
    /// 1 for the first document, one more for each change.
    pub version: u64,
    /// When it was written (`None`: an item written by hand without it).
    pub updated_at: Option<DateTime<Utc>>,
    /// Who wrote it, as `courierctl policy set --operator` named them (by default `$USER`): a
    /// name for the operators, not an authenticated identity (CloudTrail records the caller).
    pub updated_by: String,
}

/// Where the live settings are kept (one document for the whole deployment).
#[async_trait::async_trait]
pub trait LiveSettingsStore: Send + Sync {
    /// The document, if one was ever written.
    async fn get(&self) -> Result<Option<LiveRecord>, StoreError>;
    /// Writes `document` as version `expected + 1` (`expected` `None`: none is stored yet), only
    /// if the stored version is still `expected`. `Ok(false)`: someone changed it first.
    async fn put(
        &self,
        document: &str,
        expected: Option<u64>,
        now: DateTime<Utc>,
        by: &str,
    ) -> Result<bool, StoreError>;
}

/// The clock, as a port so handlers can be tested on a fixed time.
pub trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Utc>;
}

/// The provider's own send quota: the calls per second the account may make (SES `GetAccount`,
/// `SendQuota.MaxSendRate`), for pacing when no rate is configured.
#[async_trait::async_trait]
pub trait SendQuota: Send + Sync {
    async fn max_send_rate(&self) -> Result<f64, StoreError>;
}

/// Secrets by id (an ARN or name): the current value as text (SMTP credentials).
#[async_trait::async_trait]
pub trait SecretStore: Send + Sync {
    async fn secret_string(&self, id: &str) -> Result<String, StoreError>;
}

/// The certificates SNS signs its messages with, by their `SigningCertURL` (already checked to
/// be on a trusted SNS host): the PEM text as served.
#[async_trait::async_trait]
pub trait SigningCertificates: Send + Sync {
    async fn certificate(&self, url: &str) -> Result<Vec<u8>, StoreError>;
}
