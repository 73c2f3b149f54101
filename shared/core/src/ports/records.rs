//! The job's status record and the status store: claims, status writes, the history, the
//! sweeper's open-job index and the outcome outbox.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::StoreError;
use crate::claim::{ClaimOutcome, ClaimRequest};
use crate::recipients::{Recipient, RecipientChange, RecipientEntry, RecipientFill};
use crate::status::Status;

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

/// A copy of a job that has no record yet, on its way (the events function's resend to some
/// recipients of a job as a job of its own): the record that waits for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub message_id: String,
    /// The copy's generation.
    pub attempt: u32,
    /// Why, for the record's history (whose part it is).
    pub detail: String,
    pub now: DateTime<Utc>,
    /// When the copy is due ([`JobRecord::copy_due`]).
    pub copy_due: DateTime<Utc>,
    /// The body `courierctl requeue` puts the copy back from ([`JobRecord::payload`]).
    pub payload: Option<String>,
    pub trace_id: Option<String>,
    pub facts: JobFacts,
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
    /// The copy a job waited for was dead-lettered before any claim (a blocklisted payload, a
    /// sender or template the stack no longer allows): writes `update` (`dead_lettered`, at the
    /// copy's generation) while the job is still `deferred` or `pending` at that generation
    /// with no lease, so the letter is its home and `courierctl dlq replay` can reopen it.
    /// False (nothing written) when the job has no record (a first copy) or moved on (a claim,
    /// another generation).
    async fn abandon(&self, update: &StatusUpdate) -> Result<bool, StoreError>;
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
    /// Writes the record of a job whose first copy is on its way: `deferred` at
    /// `expected.attempt`, waiting for that copy (in the waiting index), with its body, trace
    /// and facts. False (nothing written) when the job has a record already: its copy was
    /// claimed first, or the write is repeated (a redelivered event).
    async fn expect(&self, expected: &Expected) -> Result<bool, StoreError>;
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
