//! Outcome events: what becomes of a job, told to the application that sent it.
//!
//! A status write that reaches an outcome ([`Outcome::of`]) marks the record's outbox in the
//! same item write, so the outcome is durable before anything is published. The writer then
//! [`relay`]s it: reads the record, publishes the event built from it ([`OutcomeEvent::pending`])
//! and clears the outbox. A writer that dies in between leaves the mark, which the sweeper
//! relays later ([`crate::ports::StatusStore::outbox_before`]): at least once, never early.
//! `event_id` is the same for every publication of one outcome, so consumers dedupe on it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

use crate::ports::{JobRecord, OpenState, Outbox, OutcomeBus, StatusStore, StoreError};
use crate::status::Status;

/// The events' `source`.
pub const SOURCE: &str = "courier";
/// The version of the detail's layout.
pub const DETAIL_VERSION: u32 = 1;
/// EventBridge's `PutEvents` takes at most 10 entries a call.
pub const EVENTS_PER_CALL: usize = 10;
/// EventBridge's limit for one `PutEvents` request (the sum of its entries' sizes).
pub const MAX_REQUEST_BYTES: usize = 256 * 1024;
/// A reason longer than this many characters is cut (an SMTP reply can be long).
pub const MAX_REASON_CHARS: usize = 1024;

/// What an application hears about its job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// A provider accepted the message (through SMTP, the last thing Courier learns).
    Sent,
    Delivered,
    /// Some recipients delivered, the others bounced (see [`crate::recipients::derive`]).
    PartiallyDelivered,
    /// Bounced permanently.
    Bounced,
    Complained,
    /// Every recipient is on the suppression list: nothing was sent.
    Suppressed,
    DeadLettered,
    Failed,
}

impl Outcome {
    pub const ALL: [Outcome; 8] = [
        Outcome::Sent,
        Outcome::Delivered,
        Outcome::PartiallyDelivered,
        Outcome::Bounced,
        Outcome::Complained,
        Outcome::Suppressed,
        Outcome::DeadLettered,
        Outcome::Failed,
    ];

    /// The outcome a status write reaches; `None` for the statuses on the way (a resend or a
    /// decision follows them).
    pub fn of(status: Status) -> Option<Outcome> {
        match status {
            Status::SentToProvider => Some(Outcome::Sent),
            Status::Delivered => Some(Outcome::Delivered),
            Status::PartiallyDelivered => Some(Outcome::PartiallyDelivered),
            Status::BouncedPermanent => Some(Outcome::Bounced),
            Status::Complained => Some(Outcome::Complained),
            Status::Suppressed => Some(Outcome::Suppressed),
            Status::DeadLettered => Some(Outcome::DeadLettered),
            Status::FailedInternal => Some(Outcome::Failed),
            Status::Pending
            | Status::Processing
            | Status::Deferred
            | Status::Unknown
            | Status::BouncedTransient => None,
        }
    }

    /// `detail.outcome`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Sent => "sent",
            Outcome::Delivered => "delivered",
            Outcome::PartiallyDelivered => "partially_delivered",
            Outcome::Bounced => "bounced",
            Outcome::Complained => "complained",
            Outcome::Suppressed => "suppressed",
            Outcome::DeadLettered => "dead_lettered",
            Outcome::Failed => "failed",
        }
    }

    /// The event's `detail-type`.
    pub fn detail_type(self) -> &'static str {
        match self {
            Outcome::Sent => "Email Sent",
            Outcome::Delivered => "Email Delivered",
            Outcome::PartiallyDelivered => "Email Partially Delivered",
            Outcome::Bounced => "Email Bounced",
            Outcome::Complained => "Email Complained",
            Outcome::Suppressed => "Email Suppressed",
            Outcome::DeadLettered => "Email Dead-Lettered",
            Outcome::Failed => "Email Failed",
        }
    }
}

/// The event's `detail` (see `docs/outcomes.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutcomeDetail {
    pub version: u32,
    /// `{message_id}/{attempt}/{outcome}`: the same for every publication of one outcome.
    pub event_id: String,
    pub outcome: String,
    /// No other outcome follows, but a complaint after `delivered`. False for `sent` through a
    /// provider that reports deliveries and bounces (SES).
    #[serde(rename = "final")]
    pub is_final: bool,
    pub message_id: String,
    pub campaign_id: Option<String>,
    pub trace_id: Option<String>,
    pub metadata: BTreeMap<String, String>,
    pub attempt: u32,
    pub provider: Option<String>,
    pub provider_message_id: Option<String>,
    /// Why: the class and rule, or the provider event, from the record's history.
    pub reason: Option<String>,
    /// When the outcome was written (RFC 3339, UTC, milliseconds).
    pub at: String,
    /// Each recipient's outcome so far (absent before a send recorded them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recipients: Vec<RecipientOutcome>,
}

/// One recipient in an outcome event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecipientOutcome {
    pub address: String,
    pub role: String,
    pub status: String,
}

/// Why an outcome event could not be read ([`OutcomeDetail::from_event`]).
#[derive(Debug, thiserror::Error)]
pub enum OutcomeEventError {
    #[error("the event's source is {found:?}, not {SOURCE:?}: not an outcome event of Courier")]
    NotCourier { found: String },
    #[error("the event's detail does not match version {DETAIL_VERSION} of the layout: {source}")]
    Detail {
        #[source]
        source: serde_json::Error,
    },
    #[error("detail version {found} is not {DETAIL_VERSION}, the layout this build reads")]
    Version { found: u32 },
    #[error(
        "unknown outcome {found:?} (known: sent, delivered, partially_delivered, bounced, complained, suppressed, dead_lettered, failed)"
    )]
    UnknownOutcome { found: String },
}

impl OutcomeDetail {
    /// Reads an outcome event as an EventBridge rule delivers it (the whole event: an SQS
    /// message's body, a Lambda function's event) or its `detail` alone.
    pub fn from_event(event: &serde_json::Value) -> Result<OutcomeDetail, OutcomeEventError> {
        let detail = match event.get("detail") {
            Some(detail) => {
                let source = event.get("source").and_then(|s| s.as_str()).unwrap_or("");
                if source != SOURCE {
                    return Err(OutcomeEventError::NotCourier {
                        found: source.to_owned(),
                    });
                }
                detail
            }
            None => event,
        };
        let detail = OutcomeDetail::deserialize(detail)
            .map_err(|source| OutcomeEventError::Detail { source })?;
        if detail.version != DETAIL_VERSION {
            return Err(OutcomeEventError::Version {
                found: detail.version,
            });
        }
        if !Outcome::ALL.iter().any(|o| o.as_str() == detail.outcome) {
            return Err(OutcomeEventError::UnknownOutcome {
                found: detail.outcome,
            });
        }
        Ok(detail)
    }
}

/// One event for the bus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutcomeEvent {
    pub detail_type: &'static str,
    pub detail: OutcomeDetail,
}

impl OutcomeEvent {
    /// The event of the record's unpublished outcome, if it has one.
    pub fn pending(record: &JobRecord) -> Option<OutcomeEvent> {
        let outbox = record.outbox?;
        let outcome = Outcome::of(outbox.status)?;
        let reason = record
            .history
            .iter()
            .rev()
            .find(|h| h.status == outbox.status && h.attempt == outbox.attempt)
            .and_then(|h| h.detail.as_deref())
            .map(|d| d.chars().take(MAX_REASON_CHARS).collect());
        let is_final = match outcome {
            Outcome::Sent => {
                OpenState::of(Status::SentToProvider, record.provider.as_deref()).is_none()
            }
            _ => true,
        };
        Some(OutcomeEvent {
            detail_type: outcome.detail_type(),
            detail: OutcomeDetail {
                version: DETAIL_VERSION,
                event_id: format!(
                    "{}/{}/{}",
                    record.message_id,
                    outbox.attempt,
                    outcome.as_str()
                ),
                outcome: outcome.as_str().to_owned(),
                is_final,
                message_id: record.message_id.clone(),
                campaign_id: record.facts.campaign_id.clone(),
                trace_id: record.trace_id.clone(),
                metadata: record.facts.metadata.clone(),
                attempt: outbox.attempt,
                provider: record.provider.clone(),
                provider_message_id: record.provider_message_id.clone(),
                reason,
                at: outbox.at.to_rfc3339_opts(SecondsFormat::Millis, true),
                recipients: record
                    .recipients
                    .iter()
                    .map(|r| RecipientOutcome {
                        address: r.address.clone(),
                        role: r.role.as_str().to_owned(),
                        status: r.status.as_str().to_owned(),
                    })
                    .collect(),
            },
        })
    }

    /// The detail as the JSON text the bus carries.
    pub fn detail_json(&self) -> String {
        serde_json::to_string(&self.detail).unwrap_or_default()
    }

    /// The entry's size as EventBridge counts it against [`MAX_REQUEST_BYTES`]: 14 bytes for
    /// the time, and the UTF-8 bytes of the source, the detail-type and the detail.
    pub fn entry_size(&self) -> usize {
        14 + SOURCE.len() + self.detail_type.len() + self.detail_json().len()
    }
}

/// What [`relay`] did.
#[derive(Debug, Default)]
pub struct Relayed {
    /// Outcomes the bus accepted (cleared or not).
    pub published: usize,
    /// Jobs whose outcome was published but stays marked (the clear failed): published again
    /// later, a duplicate consumers drop by `event_id`.
    pub uncleared: Vec<(String, StoreError)>,
    /// Jobs whose outcome was not published and stays marked for the sweeper, and why.
    pub failed: Vec<(String, StoreError)>,
}

impl Relayed {
    /// What to warn of, per job: the outcomes not published, then those published but still
    /// marked. Either way the outbox keeps the mark and the sweeper publishes it within minutes.
    pub fn problems(&self) -> impl Iterator<Item = (&str, &StoreError, &'static str)> {
        let unpublished = self
            .failed
            .iter()
            .map(|(id, e)| (id.as_str(), e, "outcome not published yet"));
        let uncleared = self.uncleared.iter().map(|(id, e)| {
            let what = "outcome published but still marked: published again (one event_id)";
            (id.as_str(), e, what)
        });
        unpublished.chain(uncleared)
    }
}

/// Publishes the unpublished outcomes of these jobs: read from their records in one call (so
/// only what is durable is published), published in calls of [`EVENTS_PER_CALL`], then each
/// cleared.
pub async fn relay(
    store: &dyn StatusStore,
    bus: &dyn OutcomeBus,
    message_ids: &[String],
) -> Relayed {
    let mut relayed = Relayed::default();
    let mut ids: Vec<String> = message_ids.to_vec();
    ids.sort();
    ids.dedup();
    let records = match store.get_many(&ids).await {
        Ok(records) => records,
        Err(e) => {
            relayed.failed = ids
                .into_iter()
                .map(|id| (id, StoreError::msg(e.operation, e.message.clone())))
                .collect();
            return relayed;
        }
    };
    let mut pending: Vec<(Outbox, OutcomeEvent)> = records
        .iter()
        .filter_map(|record| Some((record.outbox?, OutcomeEvent::pending(record)?)))
        .collect();
    // Oldest first, as the sweeper finds them.
    pending.sort_by(|a, b| (a.0.at, &a.1.detail.message_id).cmp(&(b.0.at, &b.1.detail.message_id)));
    for chunk in pending.chunks(EVENTS_PER_CALL) {
        let events: Vec<OutcomeEvent> = chunk.iter().map(|(_, e)| e.clone()).collect();
        let mut results = bus.publish(&events).await.into_iter();
        for (outbox, event) in chunk {
            let id = &event.detail.message_id;
            match results.next() {
                Some(Ok(())) => {
                    relayed.published += 1;
                    if let Err(e) = store.outcome_published(id, outbox).await {
                        relayed.uncleared.push((id.clone(), e));
                    }
                }
                Some(Err(e)) => relayed.failed.push((id.clone(), e)),
                None => relayed.failed.push((
                    id.clone(),
                    StoreError::msg("outcome publish", "the bus returned no result"),
                )),
            }
        }
    }
    relayed
}

/// A function's outcome publishing: the store it writes through remembers the outcomes it
/// wrote ([`OutcomeWrites`]), and [`Relay::flush`] publishes them after the batch.
#[derive(Clone)]
pub struct Relay {
    writes: Arc<OutcomeWrites>,
    bus: Arc<dyn OutcomeBus>,
}

impl Relay {
    /// The store to write through, and the relay of what it writes.
    pub fn wrap(
        store: Arc<dyn StatusStore>,
        bus: Arc<dyn OutcomeBus>,
    ) -> (Arc<dyn StatusStore>, Relay) {
        let writes = Arc::new(OutcomeWrites::new(store));
        (writes.clone(), Relay { writes, bus })
    }

    /// Publishes the outcomes written since the last flush.
    pub async fn flush(&self) -> Relayed {
        let ids = self.writes.take();
        if ids.is_empty() {
            return Relayed::default();
        }
        relay(self.writes.as_ref(), self.bus.as_ref(), &ids).await
    }
}

/// The jobs a status store wrote an outcome for, to [`relay`] after a batch: wraps the store
/// the functions write through (the outbox is marked by the store itself; this only remembers
/// whom to relay now rather than at the sweeper's next run).
pub struct OutcomeWrites {
    inner: Arc<dyn StatusStore>,
    written: Mutex<Vec<String>>,
}

impl OutcomeWrites {
    pub fn new(inner: Arc<dyn StatusStore>) -> OutcomeWrites {
        OutcomeWrites {
            inner,
            written: Mutex::new(Vec::new()),
        }
    }

    /// The jobs written to since the last call.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.written.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn note(&self, status: Status, message_id: &str) {
        if Outcome::of(status).is_some() {
            self.written
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(message_id.to_owned());
        }
    }
}

#[async_trait::async_trait]
impl StatusStore for OutcomeWrites {
    async fn claim(
        &self,
        req: &crate::claim::ClaimRequest,
    ) -> Result<crate::claim::ClaimOutcome, StoreError> {
        self.inner.claim(req).await
    }
    async fn finish(&self, update: &crate::ports::StatusUpdate) -> Result<(), StoreError> {
        self.inner.finish(update).await?;
        self.note(update.status, &update.message_id);
        Ok(())
    }
    async fn record(&self, update: &crate::ports::StatusUpdate) -> Result<(), StoreError> {
        self.inner.record(update).await?;
        self.note(update.status, &update.message_id);
        Ok(())
    }
    async fn abandon(&self, update: &crate::ports::StatusUpdate) -> Result<bool, StoreError> {
        let written = self.inner.abandon(update).await?;
        if written {
            self.note(update.status, &update.message_id);
        }
        Ok(written)
    }
    async fn get(&self, message_id: &str) -> Result<Option<JobRecord>, StoreError> {
        self.inner.get(message_id).await
    }
    async fn get_many(&self, message_ids: &[String]) -> Result<Vec<JobRecord>, StoreError> {
        self.inner.get_many(message_ids).await
    }
    async fn find_by_provider_message_id(&self, id: &str) -> Result<Option<String>, StoreError> {
        self.inner.find_by_provider_message_id(id).await
    }
    async fn note(
        &self,
        message_id: &str,
        entry: &crate::ports::HistoryEntry,
    ) -> Result<bool, StoreError> {
        self.inner.note(message_id, entry).await
    }
    async fn rewait(
        &self,
        message_id: &str,
        entry: &crate::ports::HistoryEntry,
        copy_due: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.inner.rewait(message_id, entry, copy_due).await
    }
    async fn expect(&self, expected: &crate::ports::Expected) -> Result<bool, StoreError> {
        self.inner.expect(expected).await
    }
    async fn reopen(
        &self,
        message_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<u32>, StoreError> {
        self.inner.reopen(message_id, now).await
    }
    async fn resend(&self, resend: &crate::ports::Resend) -> Result<bool, StoreError> {
        self.inner.resend(resend).await
    }
    async fn open_before(
        &self,
        state: OpenState,
        before: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<JobRecord>, StoreError> {
        self.inner.open_before(state, before, limit).await
    }
    async fn sweep(
        &self,
        found: &JobRecord,
        mark: crate::ports::SweepMark,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.inner.sweep(found, mark, now).await
    }
    async fn outbox_before(
        &self,
        before: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        self.inner.outbox_before(before, limit).await
    }
    async fn update_recipients(
        &self,
        message_id: &str,
        change: &crate::recipients::RecipientChange,
    ) -> Result<bool, StoreError> {
        self.inner.update_recipients(message_id, change).await
    }
    async fn fill_recipients(
        &self,
        message_id: &str,
        fill: &crate::recipients::RecipientFill,
    ) -> Result<bool, StoreError> {
        self.inner.fill_recipients(message_id, fill).await
    }
    async fn outcome_published(
        &self,
        message_id: &str,
        outbox: &crate::ports::Outbox,
    ) -> Result<bool, StoreError> {
        self.inner.outcome_published(message_id, outbox).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::MAX_ID_LEN;
    use crate::job::metadata::{MAX_METADATA_BYTES, MAX_METADATA_ENTRIES};
    use crate::ports::{HistoryEntry, JobFacts, Outbox};
    use chrono::TimeZone;

    fn at(ms: i64) -> DateTime<Utc> {
        Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
    }

    fn record(status: Status, provider: Option<&str>) -> JobRecord {
        let mut r = JobRecord::new("m-1", status, 2, at(1_000));
        r.provider = provider.map(str::to_owned);
        r.trace_id = Some("t-1".into());
        r.facts = JobFacts {
            campaign_id: Some("c-1".into()),
            metadata: BTreeMap::from([("order".into(), "o-42".into())]),
        };
        r.history.push(HistoryEntry {
            at: at(1_000),
            status,
            attempt: 2,
            by: "send".into(),
            detail: Some("accepted".into()),
        });
        r.outbox = Some(Outbox {
            status,
            attempt: 2,
            at: at(1_234),
        });
        r
    }

    #[test]
    fn only_outcomes_are_published() {
        let published: Vec<Status> = Status::ALL
            .into_iter()
            .filter(|s| Outcome::of(*s).is_some())
            .collect();
        assert_eq!(
            published,
            [
                Status::SentToProvider,
                Status::Delivered,
                Status::PartiallyDelivered,
                Status::Complained,
                Status::BouncedPermanent,
                Status::Suppressed,
                Status::FailedInternal,
                Status::DeadLettered,
            ]
        );
        // Every terminal status is an outcome.
        assert!(
            Status::ALL
                .into_iter()
                .filter(|s| s.is_terminal())
                .all(|s| Outcome::of(s).is_some())
        );
        let names: std::collections::HashSet<_> = Outcome::ALL.map(Outcome::as_str).into();
        assert_eq!(names.len(), Outcome::ALL.len());
    }

    #[test]
    fn the_event_is_built_from_the_durable_record() {
        let event = OutcomeEvent::pending(&record(Status::Delivered, Some("ses"))).unwrap();
        assert_eq!(event.detail_type, "Email Delivered");
        let detail: serde_json::Value = serde_json::from_str(&event.detail_json()).unwrap();
        assert_eq!(
            detail,
            serde_json::json!({
                "version": 1, "event_id": "m-1/2/delivered", "outcome": "delivered",
                "final": true, "message_id": "m-1", "campaign_id": "c-1", "trace_id": "t-1",
                "metadata": {"order": "o-42"}, "attempt": 2, "provider": "ses",
                "provider_message_id": null, "reason": "accepted",
                "at": "1970-01-01T00:00:01.234Z",
            })
        );
        // Nothing pending, nothing to publish; a status on the way publishes nothing.
        let mut done = record(Status::Delivered, None);
        done.outbox = None;
        assert_eq!(OutcomeEvent::pending(&done), None);
        assert_eq!(
            OutcomeEvent::pending(&record(Status::BouncedTransient, None)),
            None
        );
    }

    #[test]
    fn an_event_reads_back_whole_or_as_its_detail_and_strangers_are_refused() {
        let event = OutcomeEvent::pending(&record(Status::Complained, Some("ses"))).unwrap();
        let detail: serde_json::Value = serde_json::from_str(&event.detail_json()).unwrap();
        let whole = serde_json::json!({"source": "courier", "detail-type": event.detail_type, "detail": detail});
        assert_eq!(OutcomeDetail::from_event(&whole).unwrap(), event.detail);
        assert_eq!(OutcomeDetail::from_event(&detail).unwrap(), event.detail);
        let foreign = serde_json::json!({"source": "aws.ses", "detail": detail});
        assert!(matches!(
            OutcomeDetail::from_event(&foreign),
            Err(OutcomeEventError::NotCourier { found }) if found == "aws.ses"
        ));
        let mut missing = detail.clone();
        missing.as_object_mut().unwrap().remove("message_id");
        assert!(matches!(
            OutcomeDetail::from_event(&missing),
            Err(OutcomeEventError::Detail { .. })
        ));
        let mut later = detail.clone();
        later["version"] = 2.into();
        assert!(matches!(
            OutcomeDetail::from_event(&later),
            Err(OutcomeEventError::Version { found: 2 })
        ));
        let mut odd = detail;
        odd["outcome"] = "opened".into();
        assert!(matches!(
            OutcomeDetail::from_event(&odd),
            Err(OutcomeEventError::UnknownOutcome { found }) if found == "opened"
        ));
    }

    #[test]
    fn sent_is_final_only_where_no_provider_event_follows() {
        let ses = OutcomeEvent::pending(&record(Status::SentToProvider, Some("ses"))).unwrap();
        let smtp = OutcomeEvent::pending(&record(Status::SentToProvider, Some("smtp"))).unwrap();
        assert_eq!(ses.detail_type, "Email Sent");
        assert!(!ses.detail.is_final);
        assert!(smtp.detail.is_final);
    }

    #[test]
    fn ten_of_the_largest_events_fit_one_put_events_request() {
        // Every field at its limit, in characters that take the most bytes once escaped.
        let mut r = record(Status::DeadLettered, Some("smtp"));
        r.message_id = "\u{10348}".repeat(MAX_ID_LEN);
        r.trace_id = Some("\u{10348}".repeat(MAX_ID_LEN));
        r.facts.campaign_id = Some("\u{10348}".repeat(MAX_ID_LEN));
        r.provider_message_id = Some("p".repeat(MAX_ID_LEN * 4));
        let per_value = MAX_METADATA_BYTES / MAX_METADATA_ENTRIES - 8;
        r.facts.metadata = (0..MAX_METADATA_ENTRIES)
            .map(|i| (format!("k{i:06}"), "\"".repeat(per_value)))
            .collect();
        r.history.last_mut().unwrap().detail = Some("\\".repeat(MAX_REASON_CHARS * 10));
        let event = OutcomeEvent::pending(&r).unwrap();
        assert_eq!(
            event.detail.reason.as_ref().map(|r| r.chars().count()),
            Some(MAX_REASON_CHARS)
        );
        let size = event.entry_size();
        assert!(
            size * EVENTS_PER_CALL <= MAX_REQUEST_BYTES,
            "{size} bytes an event"
        );
    }
}
