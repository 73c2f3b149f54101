//! Ports: the narrow capabilities the send pipeline needs from the outside world. Adapters live
//! in `courier-adapters` (DynamoDB, SQS, S3, SES, Step Functions, SMTP) and `courier-devkit`
//! (in memory, for unit tests).

pub use crate::mailbox::Mailbox;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::breaker::BreakerState;
use crate::classify::Verdict;
use crate::status::Status;

pub use crate::claim::{ClaimJudgement, ClaimOutcome, ClaimRequest, judge_claim};
pub use crate::letters::{AttemptRecord, DeadLetter};
pub use crate::recipients::{Recipient, RecipientChange, RecipientEntry, RecipientFill};

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

/// The status record of one job (one item in the status table).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    pub message_id: String,
    pub status: Status,
    /// Generation of the queue copy that last claimed or re-enqueued the job.
    pub attempt: u32,
    pub lease_owner: Option<String>,
    pub lease_until: Option<DateTime<Utc>>,
    /// When the outcome became ambiguous (status `unknown`).
    pub unknown_since: Option<DateTime<Utc>>,
    pub provider: Option<String>,
    /// The provider's id of this generation's send (the claim removes an earlier send's).
    pub provider_message_id: Option<String>,
    pub updated_at: DateTime<Utc>,
    /// Every status change, oldest first (see [`HistoryEntry`]).
    #[serde(default)]
    pub history: Vec<HistoryEntry>,
    /// The queue body of the copy that holds or last held the lease (a retry envelope), kept
    /// so a transient bounce can be sent again: written by the claim when the stack sends
    /// through SES (before SES can take the mail), `None` otherwise or when too large.
    #[serde(default)]
    pub payload: Option<String>,
    /// The provider message id whose transient bounce scheduled the latest resend (kept by
    /// later claims: a late copy of that bounce changes nothing).
    #[serde(default)]
    pub resend_of: Option<String>,
    /// When the sweeper flagged the record (sent, but no outcome event within its period; or
    /// waiting, and its copy did not come back).
    #[serde(default)]
    pub swept_at: Option<DateTime<Utc>>,
    /// When the copy a `deferred` or `unknown` job waits for is due back (see
    /// [`OpenState::Waiting`]); `None` in every other status.
    #[serde(default)]
    pub copy_due: Option<DateTime<Utc>>,
    /// The job's trace id ([`crate::envelope::Incoming::trace`]), written by each claim.
    #[serde(default)]
    pub trace_id: Option<String>,
    /// The job's campaign and the producer's metadata, written by each claim (for outcome events).
    #[serde(default)]
    pub facts: JobFacts,
    /// An outcome written to this record and not yet published (the transactional outbox).
    #[serde(default)]
    pub outbox: Option<Outbox>,
    /// The job's recipients and their outcomes, written by the send (see [`crate::recipients`]).
    #[serde(default)]
    pub recipients: Vec<Recipient>,
    /// The recipients' timelines, oldest first.
    #[serde(default)]
    pub recipient_log: Vec<RecipientEntry>,
    /// Counts the writes of `recipients` (a recipient change is written only at the version it
    /// was computed from).
    #[serde(default)]
    pub recipients_version: u32,
}

/// What a job's outcome events say about the job besides its status: written by its claim (or
/// by a status write that precedes any claim) and echoed to the producer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobFacts {
    pub campaign_id: Option<String>,
    #[serde(default)]
    pub metadata: std::collections::BTreeMap<String, String>,
}

impl JobFacts {
    /// The facts of a parsed job.
    pub fn of(job: &crate::job::EmailJob) -> JobFacts {
        JobFacts {
            campaign_id: Some(job.campaign_id.clone()),
            metadata: job.metadata.clone(),
        }
    }
}

/// An outcome waiting to be published: marked by the status write that reached it, in the same
/// item write (so it is durable exactly when the status is), and cleared once published
/// ([`StatusStore::outcome_published`]). A later outcome replaces an unpublished earlier one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outbox {
    pub status: Status,
    pub attempt: u32,
    pub at: DateTime<Utc>,
}

impl JobRecord {
    /// A record with nothing but its identity and status.
    pub fn new(
        message_id: impl Into<String>,
        status: Status,
        attempt: u32,
        now: DateTime<Utc>,
    ) -> JobRecord {
        JobRecord {
            message_id: message_id.into(),
            status,
            attempt,
            lease_owner: None,
            lease_until: None,
            unknown_since: None,
            provider: None,
            provider_message_id: None,
            updated_at: now,
            history: Vec::new(),
            payload: None,
            resend_of: None,
            swept_at: None,
            copy_due: None,
            trace_id: None,
            facts: JobFacts::default(),
            outbox: None,
            recipients: Vec::new(),
            recipient_log: Vec::new(),
            recipients_version: 0,
        }
    }
}

/// One status change in a job's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    pub at: DateTime<Utc>,
    pub status: Status,
    pub attempt: u32,
    /// Who wrote it: `send`, `events`, `sweeper`, `operator`.
    pub by: String,
    /// Why: the error class and rule, the event, the sweeper's finding.
    #[serde(default)]
    pub detail: Option<String>,
}

/// Records still waiting for something, found through the status table's sparse `by_open`
/// index by the sweeper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenState {
    /// `processing`: leased by a send function.
    Processing,
    /// `sent_to_provider` through a provider that reports outcomes (SES): waiting for a
    /// delivery, bounce or complaint event.
    AwaitingOutcome,
    /// `deferred` or `unknown`: waiting for a copy of the job to come back (a retry, a wait, a
    /// redelivery, the grace window's copy), keyed by when it is due
    /// ([`JobRecord::copy_due`]), not by when the job entered the state.
    Waiting,
    /// `deferred` or `unknown`, flagged by the sweeper ([`SweepMark::CopyOverdue`]), keyed by
    /// when: the jobs `courierctl requeue --overdue` finds. No status write leads here; any
    /// write of the job takes it off.
    Overdue,
}

/// How long a copy left for SQS's redelivery can take at most to come back: SQS's largest
/// visibility timeout (12 hours). A `deferred` or `unknown` record written without a due time
/// (a released lease, a lease the sweeper found expired) is due back by then.
pub const REDELIVERY_BOUND: chrono::Duration = chrono::Duration::hours(12);

impl OpenState {
    /// Index partitions per state (write sharding: no hot partition at high send rates).
    pub const SHARDS: u32 = 8;

    /// The open state a record is in after a write, if any.
    pub fn of(status: Status, provider: Option<&str>) -> Option<OpenState> {
        match status {
            Status::Processing => Some(OpenState::Processing),
            Status::SentToProvider if provider == Some("ses") => Some(OpenState::AwaitingOutcome),
            Status::Deferred | Status::Unknown => Some(OpenState::Waiting),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            OpenState::Processing => "processing",
            OpenState::AwaitingOutcome => "awaiting_outcome",
            OpenState::Waiting => "waiting",
            OpenState::Overdue => "overdue",
        }
    }

    /// The index partition key of a job in this state: `<state>#<shard>`.
    pub fn key(self, message_id: &str) -> String {
        format!("{}#{}", self.as_str(), shard_of(message_id))
    }
}

/// A stable shard number of a message id (FNV-1a).
pub fn shard_of(message_id: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in message_id.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h % OpenState::SHARDS
}

/// What the sweeper does with a record it found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SweepMark {
    /// The lease expired long ago with the job still `processing` (its worker died mid-send):
    /// mark it `unknown`, so provider events or the grace window decide about a resend.
    LeaseExpired,
    /// Sent, but no outcome event arrived within the period: flag it (`swept_at`) and leave
    /// the index; the status stays `sent_to_provider`.
    NoOutcome,
    /// `deferred` or `unknown`, and the copy it waits for is long past due (lost with a purged
    /// or deleted queue, past the queue's retention, or with a delay execution that failed):
    /// flag it (`swept_at`) and move it to [`OpenState::Overdue`]; the status stays.
    CopyOverdue,
}

impl SweepMark {
    /// The history entry's detail of this mark on `found`.
    pub fn detail(&self, found: &JobRecord) -> String {
        match self {
            SweepMark::LeaseExpired => "still processing long after its lease expired".into(),
            SweepMark::NoOutcome => "no delivery, bounce or complaint event arrived".into(),
            SweepMark::CopyOverdue => format!(
                "its copy was due back at {} and has not come (a purged or deleted queue, past \
                 the queue's retention, a failed delay execution)",
                found
                    .copy_due
                    .map_or_else(|| "an unrecorded time".to_owned(), |d| d.to_rfc3339())
            ),
        }
    }
}

/// A resend scheduled after a transient bounce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resend {
    pub message_id: String,
    /// The attempt that bounced; the resend is `attempt + 1`.
    pub attempt: u32,
    /// The provider message id of the bounced send.
    pub bounced: String,
    pub detail: String,
    pub now: DateTime<Utc>,
    /// When the resend's copy is due ([`JobRecord::copy_due`]).
    pub copy_due: DateTime<Utc>,
}

/// A status change written by the lease holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusUpdate {
    pub message_id: String,
    pub owner: String,
    pub status: Status,
    pub attempt: u32,
    pub provider: Option<String>,
    pub provider_message_id: Option<String>,
    pub now: DateTime<Utc>,
    /// Why, for the record's history (class and rule, event).
    pub detail: Option<String>,
    /// Kept where the record has none (a write that precedes any claim: suppressed).
    pub facts: Option<Box<JobFacts>>,
    /// The recipients as this send reached them (with `SentToProvider` or `Unknown` from
    /// [`StatusStore::finish`]): they replace the record's list, and their entries are added to
    /// its timeline.
    pub recipients: Option<Vec<Recipient>>,
    /// A recipient's own timeline detail in that roll (bare address, detail), where it differs
    /// from `detail` (the reply that refused it).
    pub recipient_notes: Vec<(String, String)>,
    /// With `deferred` or `unknown`: when the copy the job waits for is due back
    /// ([`JobRecord::copy_due`]); `None`: by [`REDELIVERY_BOUND`] from `now`.
    pub copy_due: Option<DateTime<Utc>>,
}

impl StatusUpdate {
    pub fn new(
        message_id: impl Into<String>,
        owner: impl Into<String>,
        status: Status,
        attempt: u32,
        now: DateTime<Utc>,
    ) -> StatusUpdate {
        StatusUpdate {
            message_id: message_id.into(),
            owner: owner.into(),
            status,
            attempt,
            provider: None,
            provider_message_id: None,
            now,
            detail: None,
            facts: None,
            recipients: None,
            recipient_notes: Vec::new(),
            copy_due: None,
        }
    }

    /// When the copy this write's job waits for is due back: `Some` exactly when the status
    /// waits for one ([`OpenState::Waiting`]).
    pub fn copy_due(&self) -> Option<DateTime<Utc>> {
        matches!(self.status, Status::Deferred | Status::Unknown)
            .then(|| self.copy_due.unwrap_or(self.now + REDELIVERY_BOUND))
    }
}

/// Idempotency and status records.
#[async_trait::async_trait]
pub trait StatusStore: Send + Sync {
    /// One conditional write that leases the job (see [`judge_claim`]).
    async fn claim(&self, req: &ClaimRequest) -> Result<ClaimOutcome, StoreError>;
    /// Writes the outcome of a leased attempt and releases the lease. Succeeds only while the
    /// lease is ours or the job was marked `unknown` meanwhile (our evidence resolves it).
    async fn finish(&self, update: &StatusUpdate) -> Result<(), StoreError>;
    /// Writes a status without a lease (suppressed before any claim; SES's events); applied only
    /// where the status machine allows the transition (late or duplicate writes are absorbed).
    /// Ends the lease: the lease holder's own later write of that send no longer lands.
    async fn record(&self, update: &StatusUpdate) -> Result<(), StoreError>;
    async fn get(&self, message_id: &str) -> Result<Option<JobRecord>, StoreError>;
    /// The records of these jobs that exist, read consistently, in no particular order (one
    /// `BatchGetItem` per 100 on DynamoDB).
    async fn get_many(&self, message_ids: &[String]) -> Result<Vec<JobRecord>, StoreError>;
    /// The job whose recorded send has this provider message id (SES's message id), for an
    /// event that carries no Courier message id. The lookup is eventually consistent (the status
    /// table's sparse `by_provider_message_id` index): a send recorded a moment ago may not be
    /// found yet. `None` when no job has it.
    async fn find_by_provider_message_id(
        &self,
        provider_message_id: &str,
    ) -> Result<Option<String>, StoreError>;
    /// Appends a history entry that changes nothing else (a delivery delay, an undetermined
    /// bounce) while the job is still in `entry.status` at generation `entry.attempt`. False
    /// (nothing written) when the job is absent or moved on.
    async fn note(&self, message_id: &str, entry: &HistoryEntry) -> Result<bool, StoreError>;
    /// An operator put back the copy of a `deferred` or `unknown` job (`courierctl requeue`):
    /// appends `entry`, and the job waits again for a copy due at `copy_due` (in the waiting
    /// index, the sweeper's flag cleared), while it is still in `entry.status` at generation
    /// `entry.attempt`. False (nothing written) when it is absent or moved on.
    async fn rewait(
        &self,
        message_id: &str,
        entry: &HistoryEntry,
        copy_due: DateTime<Utc>,
    ) -> Result<bool, StoreError>;
    /// An operator's replay: moves a `dead_lettered` job back to `pending` as a new generation
    /// and returns that generation; `None` when the job is not dead-lettered (nothing changes).
    async fn reopen(&self, message_id: &str, now: DateTime<Utc>)
    -> Result<Option<u32>, StoreError>;
    /// Moves a sent job whose send bounced transiently to `deferred` as generation
    /// `attempt + 1`, remembering the bounced provider message id (`resend_of`), and ends the
    /// bounced send's lease (a late status write of that send no longer lands). False when the
    /// job is no longer at `attempt` in a sent status (another event or resend came first).
    async fn resend(&self, resend: &Resend) -> Result<bool, StoreError>;
    /// Records in `state` that entered it before `before` (for [`OpenState::Waiting`]: whose
    /// copy was due before `before`), oldest first, at most `limit` (eventually consistent:
    /// check what you act on with [`StatusStore::sweep`]).
    async fn open_before(
        &self,
        state: OpenState,
        before: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<JobRecord>, StoreError>;
    /// Marks a record the sweeper found, if it is unchanged since (`found.updated_at`, status);
    /// false when it moved on meanwhile.
    async fn sweep(
        &self,
        found: &JobRecord,
        mark: SweepMark,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError>;
    /// Jobs whose outbox was marked before `before` and is still unpublished, at most `limit`
    /// (eventually consistent: read the record before publishing).
    async fn outbox_before(
        &self,
        before: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError>;
    /// Writes a change to the record's recipients (their new outcomes and timeline entries) if
    /// its recipients are still at `change.version`; false (nothing written) when they changed
    /// meanwhile (read again and compute the change again), the record has no list (a later
    /// generation's claim removed it) or is absent.
    async fn update_recipients(
        &self,
        message_id: &str,
        change: &RecipientChange,
    ) -> Result<bool, StoreError>;
    /// Writes `fill`'s recipients (all its entries in the timeline, the list's version one more)
    /// on a record that has none, whose generation is `fill.attempt`, whose recorded send is
    /// `fill.provider_message_id` and still open ([`crate::recipients::FILLABLE`]); false
    /// (nothing written) otherwise: a list written meanwhile (the send function's own status
    /// write), another generation or send, a finished job, the record absent.
    async fn fill_recipients(
        &self,
        message_id: &str,
        fill: &RecipientFill,
    ) -> Result<bool, StoreError>;
    /// Clears the record's outbox after `outbox` was published; false (nothing changes) when
    /// the record holds another outbox by now (a later outcome, published on its own).
    async fn outcome_published(
        &self,
        message_id: &str,
        outbox: &Outbox,
    ) -> Result<bool, StoreError>;
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
