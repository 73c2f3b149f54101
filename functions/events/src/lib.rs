//! The events function: applies SES delivery events to Courier's status records.
//!
//! SES publishes events (configuration set event destination) to SNS or EventBridge, which
//! deliver them to an SQS queue that triggers this function. Each event is correlated with its
//! job by the `X-Courier-Message-Id` header Courier set (exact), else the `courier-message-id`
//! tag, else SES's message id (the status store's `find_by_provider_message_id`), and applied
//! through the status machine: forward only, duplicates and late events absorbed. An event that
//! is ahead of the record (it arrived before the send was recorded) is left on the queue and
//! applied on a later delivery. Permanent bounces and complaints add the recipients to the
//! suppression list before any correlation (an event we cannot match still protects the
//! sender); undetermined bounces soft-suppress them for the configured period. A SEND or
//! DELIVERY event resolves an ambiguous (`unknown`) job as sent, so it is not sent again after
//! its grace window. Delivery delays and undetermined bounces change no status: they are noted
//! in the job's timeline, once per event.
//!
//! Each event moves the recipients it names on the record's list of recipients, forward only;
//! a job with several recipients takes the status their outcomes make once each is final
//! (`delivered`, `partially_delivered`, `bounced_permanent`, `complained`; see
//! [`courier_core::recipients`]) and keeps its status until then.
//!
//! A transient bounce (SES gave up on a soft failure, e.g. a full mailbox) sends the job again
//! on the soft-bounce schedule of the retry policy, from the payload the send function kept with
//! the record, within the give-up horizon; past it the recipients are soft-suppressed and the
//! job is dead-lettered with its record. In a job with several recipients only those bounced
//! are sent again, as a job of their own (`resend`), and become `resent` on this one. A
//! delivery delay is noted only: SES is still trying, and a resend would duplicate.
//!
//! The reputation guard counts sends, deliveries, bounces and complaints per sending domain in
//! hourly buckets, each event once (its [`count_key`] entered in an [`EventLedger`] first), and,
//! when the rolling rates approach SES's review levels, pauses the domain's
//! SES sends (a breaker the send function checks) and raises `ReputationGuardTripped`.
//!
//! # Layout
//! - [`Gate`]: admits only the configured path's envelope; through SNS, only the stack's topic's
//!   notifications whose signature verifies ([`sns`]). Others are refused (`EventsRefused`).
//! - [`parse`]: SNS notifications, EventBridge events and raw SES events into [`SesEvent`]s.
//! - [`Applier::handle`]: one SQS batch, partial batch failures for events not yet applicable.
//! - `recipients`: per-recipient outcomes and the job status that follows from them.
//! - [`Resender`]: the soft-bounce resend (`resend`: of some recipients of a job with several, as
//!   a job of their own); [`Guard`]: the reputation guard.

mod event;
mod recipients;
mod resend;
pub mod sns;
pub mod wiring;

pub use event::{EventKind, ParseError, SesEvent, count_key, parse, parse_value};
pub use sns::{Admission, Forgery, Gate, NoCertificates, Refusal, SnsTrust};

use std::sync::Arc;

use std::collections::BTreeMap;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use chrono::{DateTime, Utc};
use courier_core::breaker::{BreakerConfig, BreakerState, Mode};
use courier_core::classify::{SesFailureEvent, classify_ses_event};
use courier_core::mailbox::redact;
use courier_core::policy::{DeadLetterCategory, RetryPolicy};
use courier_core::ports::{
    BreakerStore, Clock, DeadLetterSink, EventLedger, HistoryEntry, JobRecord, PayloadStore,
    ReputationStore, RetryScheduler, StatusStore, StatusUpdate, StoreError, SuppressionList,
};
use courier_core::random::SeededRandom;
use courier_core::reputation::{GuardConfig, ReputationCounts, Trip, assess, bucket_of, pause_key};
use courier_core::status::{Status, Transition, transition};
use serde_json::Value;
use tracing::{Instrument, info, warn};

/// Header and tag names set by the send function.
pub const HEADER_MESSAGE_ID: &str = "X-Courier-Message-Id";
/// The header and the SES tag the send function writes a job's trace id in.
pub const HEADER_TRACE_ID: &str = "X-Courier-Trace-Id";
pub const TAG_TRACE_ID: &str = "courier-trace-id";
pub const TAG_MESSAGE_ID: &str = "courier-message-id";

/// The status an event moves a job to, if any.
pub fn target(kind: &EventKind) -> Option<Status> {
    match kind {
        EventKind::Send => Some(Status::SentToProvider),
        EventKind::Delivery => Some(Status::Delivered),
        EventKind::Failure(SesFailureEvent::Bounce { bounce_type, .. })
            if bounce_type == "Permanent" =>
        {
            Some(Status::BouncedPermanent)
        }
        EventKind::Failure(SesFailureEvent::Bounce { bounce_type, .. })
            if bounce_type == "Transient" =>
        {
            Some(Status::BouncedTransient)
        }
        EventKind::Failure(SesFailureEvent::Complaint { .. }) => Some(Status::Complained),
        // SES rejected it (virus) or could not render it: never delivered.
        EventKind::Failure(
            SesFailureEvent::Reject { .. } | SesFailureEvent::RenderingFailure { .. },
        ) => Some(Status::BouncedPermanent),
        // Delays and undetermined bounces change nothing yet; engagement is not tracked.
        _ => None,
    }
}

/// What applying one event did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    Changed(Status),
    Absorbed,
    /// A transient bounce: the job was scheduled to be sent again.
    Resent,
    /// A transient bounce past the give-up horizon: the job was dead-lettered (in this
    /// category, counted in `DeadLettered_<category>` like the send function's letters).
    GaveUp(DeadLetterCategory),
    /// The record is behind the event (or absent): try again later.
    NotYet,
    /// No job to correlate with (not sent by Courier, or without our header and tag and its
    /// SES message id on no record). Suppression still applied.
    Uncorrelated,
    /// Recorded in the job's timeline without a transition (a delivery delay, an undetermined
    /// bounce).
    Noted,
    /// The recipients it names moved; the job's status waits for its other recipients.
    Recipients,
}

/// How long an event without our header and tag is retried while no record has its SES
/// message id yet (the send is still being recorded, or the index lags the record by a
/// moment), counted from the send (`mail.timestamp`). Older ones are uncorrelated.
pub const EARLY_EVENT_WINDOW_SECS: i64 = 15 * 60;

/// How long a counted event's key is kept, so a redelivery within it counts no more (SQS
/// redelivers within the events queue's retention; SES and SNS duplicates come within minutes).
pub const COUNTED_KEEP_SECS: i64 = 2 * 24 * 3600;

/// Whether an event is an undetermined bounce (SES could not tell soft from hard).
fn undetermined_bounce(kind: &EventKind) -> bool {
    matches!(kind, EventKind::Failure(SesFailureEvent::Bounce { bounce_type, .. })
        if bounce_type != "Permanent" && bounce_type != "Transient")
}

/// Sends a job again after a transient bounce, through the retry policy.
pub struct Resender {
    /// The deployment's policy; the live settings' one when they name it ([`Resender::live`]).
    pub policy: RetryPolicy,
    /// The live settings (`None`: the deployment's policy only).
    pub live: Option<courier_adapters::live_settings::LiveSettingsReader>,
    /// The retry policy the live settings put in force.
    pub live_policy: std::sync::RwLock<Option<Arc<RetryPolicy>>>,
    pub scheduler: Arc<dyn RetryScheduler>,
    pub dead_letters: Arc<dyn DeadLetterSink>,
    /// Where a body over 300 KiB is kept for a resend (a claim check on the record).
    pub payloads: Arc<dyn PayloadStore>,
    pub rng: std::sync::Mutex<SeededRandom>,
}

/// The reputation guard.
pub struct Guard {
    pub store: Arc<dyn ReputationStore>,
    /// Events already counted (a redelivered event counts once).
    pub ledger: Arc<dyn EventLedger>,
    /// Where the pause lives (the send function's breaker table, key `reputation:<domain>`).
    pub breakers: Arc<dyn BreakerStore>,
    pub config: GuardConfig,
}

/// Applies events to status records and the suppression list.
pub struct Applier {
    pub status: Arc<dyn StatusStore>,
    pub suppression: Arc<dyn SuppressionList>,
    /// How long an automatic soft suppression lasts (a transient bounce that gave up, an
    /// undetermined bounce): `COURIER_SOFT_SUPPRESSION_PERIOD`.
    pub soft_suppression: chrono::Duration,
    pub clock: Arc<dyn Clock>,
    pub resender: Resender,
    pub guard: Guard,
    /// Which messages are admitted (and the SNS certificates fetched so far).
    pub gate: Arc<Gate>,
    /// Publishes the outcomes `status` wrote, after each batch; `None`: not published.
    pub outcomes: Option<courier_core::outcome::Relay>,
}

/// The outcome of one batch.
#[derive(Debug, Default)]
pub struct EventsReport {
    pub failures: Vec<String>,
    pub applied: Vec<Applied>,
    pub unparseable: usize,
    /// Messages refused at the gate: another envelope, another topic, a signature that does
    /// not verify (forged or misrouted).
    pub refused: Vec<Forgery>,
    /// Per sending domain: the window's bounce and complaint rates after this batch.
    pub rates: BTreeMap<String, (f64, f64)>,
    /// Domains whose SES sends the guard paused in this batch.
    pub tripped: Vec<(String, String)>,
    /// Events applied again (redeliveries, SES duplicates) that the rates had counted already.
    pub recounts_skipped: usize,
    /// A stored live settings version did not validate (the last good policy stays).
    pub live_refused: bool,
    /// Outcome events published after the batch.
    pub outcomes_published: usize,
}

impl Applier {
    /// Applies one event: suppression first (it needs no job), then the job's status.
    pub async fn apply(&self, event: &SesEvent) -> Result<Applied, StoreError> {
        self.suppress(event).await?;
        if matches!(event.kind, EventKind::Engagement(_)) {
            return Ok(Applied::Absorbed);
        }
        let Some(message_id) = self.correlate(event).await? else {
            let young = event.provider_message_id.is_some()
                && self.clock.now() - event.at < chrono::Duration::seconds(EARLY_EVENT_WINDOW_SECS);
            return Ok(if young {
                Applied::NotYet
            } else {
                Applied::Uncorrelated
            });
        };
        let message_id = &message_id;
        let Some(to) = target(&event.kind) else {
            return self.note(message_id, event).await;
        };
        let Some(record) = self.status.get(message_id).await? else {
            return Ok(Applied::NotYet);
        };
        if to == Status::BouncedTransient
            && event.provider_message_id.is_some()
            && record.resend_of == event.provider_message_id
        {
            // A copy of a bounce whose resend was scheduled already (SES's duplicate, a
            // redelivery): that copy is on its way or took the job; nothing more to record.
            return Ok(Applied::Absorbed);
        }
        let Some(record) = self.fill(event, record).await? else {
            return Ok(Applied::NotYet);
        };
        let (record, to) = match self.follow(event, record, to).await? {
            recipients::Follow::Job(record, to) => (*record, to),
            recipients::Follow::Waits => return Ok(Applied::Recipients),
            recipients::Follow::Absorbed => return Ok(Applied::Absorbed),
            recipients::Follow::Gone => return Ok(Applied::NotYet),
        };
        // A bounce of a send whose acceptance is not written yet (the send function is still
        // trying, or its copy carrying the acceptance is on the queue), or a late one of an
        // earlier send while the next is in flight: the acceptance brings the provider's id and
        // the recipients the bounce is applied to (and a resend judged by), so the event waits
        // for it (or for SES's Send event, if the send function died; the body to send again
        // from is on the record since the claim). A dead address was suppressed above already.
        if matches!(
            event.kind,
            EventKind::Failure(SesFailureEvent::Bounce { .. })
        ) && record.status == Status::Processing
        {
            return Ok(Applied::NotYet);
        }
        if to == Status::BouncedTransient && self.resends_part(&record).await? {
            return self.resend_part(event, record).await;
        }
        if to == Status::BouncedTransient
            && let Some(applied) = self.transient_bounce(event, &record).await?
        {
            return Ok(applied);
        }
        self.settle(event, &record, to).await
    }

    /// Moves the job `record` is of to `to`, by the status machine: `Changed` once the write
    /// landed, `Absorbed` for a repeat or a late event, `NotYet` for an event ahead of it.
    async fn settle(
        &self,
        event: &SesEvent,
        record: &JobRecord,
        to: Status,
    ) -> Result<Applied, StoreError> {
        let message_id = &record.message_id;
        match transition(record.status, to) {
            Ok(Transition::Applied) => {
                let mut update = update_of(record, to, self.clock.now());
                update.provider = Some("ses".into());
                update.provider_message_id = event.provider_message_id.clone();
                update.detail = Some(describe(&event.kind));
                self.status.record(&update).await?;
                // `record` absorbs a write the status moved past meanwhile; check it landed.
                let now = self.status.get(message_id).await?.map(|r| r.status);
                Ok(match now {
                    Some(s) if s == to => Applied::Changed(to),
                    Some(s) if transition(s, to).is_ok_and(|t| t != Transition::Applied) => {
                        Applied::Absorbed
                    }
                    _ => Applied::NotYet,
                })
            }
            Ok(Transition::Duplicate | Transition::Late) => Ok(Applied::Absorbed),
            // A late event of an earlier send on a job that will never move to it: ended
            // otherwise (`suppressed`, `dead_lettered`, or `delivered` before a bounce of a job
            // recorded without recipients), or waiting to be sent again (`deferred`: this
            // generation has not reached SES). A dead address was suppressed above already;
            // redelivered, the event would wait for ever and end in the events DLQ.
            Err(_) if record.status.is_terminal() || record.status == Status::Deferred => {
                info!(message_id = %message_id, status = %record.status, event = to.as_str(), "a late event of an earlier send; the job has moved on");
                Ok(Applied::Absorbed)
            }
            // The event is ahead of the record (e.g. DELIVERY while the send is still being
            // recorded): apply it later.
            Err(_) => Ok(Applied::NotYet),
        }
    }

    /// The job an event is about: Courier's message id (header, else tag), else the job whose
    /// recorded send has the event's SES message id.
    async fn correlate(&self, event: &SesEvent) -> Result<Option<String>, StoreError> {
        if let Some(id) = &event.message_id {
            return Ok(Some(id.clone()));
        }
        match &event.provider_message_id {
            Some(provider_id) => self.status.find_by_provider_message_id(provider_id).await,
            None => Ok(None),
        }
    }

    /// Permanent bounces and complaints suppress their recipients for good; an undetermined
    /// bounce suppresses them softly (for the soft-suppression period). Needs no job: an event
    /// we cannot correlate still protects the sender.
    async fn suppress(&self, event: &SesEvent) -> Result<(), StoreError> {
        let EventKind::Failure(failure) = &event.kind else {
            return Ok(());
        };
        let verdict = classify_ses_event(failure);
        let reason = format!(
            "{}: {}",
            verdict.rule,
            verdict.raw_code.as_deref().unwrap_or("")
        );
        let now = self.clock.now();
        if verdict.suppress_recipient {
            for r in &event.recipients {
                self.suppression.suppress(r, &reason, now).await?;
            }
        } else if undetermined_bounce(&event.kind) {
            self.suppress_softly(&event.recipients, &format!("soft: {reason}"))
                .await?;
        }
        Ok(())
    }

    /// Soft-suppresses addresses until now + the soft-suppression period (never weakening an
    /// entry that is there).
    async fn suppress_softly(&self, recipients: &[String], reason: &str) -> Result<(), StoreError> {
        let now = self.clock.now();
        let until = now + self.soft_suppression;
        for r in recipients {
            if self
                .suppression
                .suppress_soft(r, reason, now, until)
                .await?
            {
                info!(until = %until, "recipient soft-suppressed");
            }
        }
        Ok(())
    }

    /// A delivery delay or an undetermined bounce: no transition (SES is still trying, or we
    /// cannot tell), but an entry in the job's timeline, once per event.
    async fn note(&self, message_id: &str, event: &SesEvent) -> Result<Applied, StoreError> {
        let EventKind::Failure(
            failure @ (SesFailureEvent::DeliveryDelay { .. } | SesFailureEvent::Bounce { .. }),
        ) = &event.kind
        else {
            return Ok(Applied::Absorbed);
        };
        let verdict = classify_ses_event(failure);
        let what = match failure {
            SesFailureEvent::DeliveryDelay { .. } => "delivery delayed, SES keeps trying",
            _ => "undetermined bounce, recipients soft-suppressed",
        };
        let detail = format!(
            "{} event at {}: {what} ({}; {})",
            verdict.raw_code.as_deref().unwrap_or("failure"),
            event.occurred_at.as_deref().unwrap_or("?"),
            event.recipients.join(", "),
            verdict.raw_text.as_deref().unwrap_or(verdict.rule.as_str()),
        );
        // Another write may move the record between the read and the note: read again.
        for _ in 0..3 {
            let Some(record) = self.status.get(message_id).await? else {
                // Nothing to note on (the send is not recorded): the event itself changes nothing.
                return Ok(Applied::Absorbed);
            };
            if record
                .history
                .iter()
                .any(|h| h.detail.as_deref() == Some(detail.as_str()))
            {
                return Ok(Applied::Absorbed);
            }
            let entry = HistoryEntry {
                at: self.clock.now(),
                status: record.status,
                attempt: record.attempt,
                by: "events".into(),
                detail: Some(detail.clone()),
            };
            if self.status.note(message_id, &entry).await? {
                return Ok(Applied::Noted);
            }
        }
        Ok(Applied::Absorbed)
    }

    /// Reads the live settings when they are due and takes a new valid version's retry policy;
    /// `true` when a stored version was refused.
    async fn refresh_live(&self) -> bool {
        use courier_adapters::live_settings::LiveRead;
        let Some(live) = &self.resender.live else {
            return false;
        };
        match live.refresh(self.clock.now()).await {
            None => false,
            Some(LiveRead::Applied { version, effective }) => {
                info!(version, "live settings' retry policy in force");
                *self
                    .resender
                    .live_policy
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) =
                    Some(Arc::new(effective.policy));
                false
            }
            Some(LiveRead::Refused { version, error }) => {
                warn!(version, error = %error, "live settings refused; the last good policy stays");
                true
            }
            Some(LiveRead::Failed(error)) => {
                warn!(error = %error, "live settings not read; the policy in force stays");
                false
            }
        }
    }

    /// One SQS batch: refused and unparseable messages are logged and acknowledged (they are
    /// not ours to fix); messages whose certificate could not be fetched, events not yet applicable and store failures are reported for redelivery.
    pub async fn handle(&self, event: SqsEvent) -> EventsReport {
        let mut report = EventsReport {
            live_refused: self.refresh_live().await,
            ..EventsReport::default()
        };
        let mut counts: BTreeMap<String, ReputationCounts> = BTreeMap::new();
        for record in event.records {
            let id = record.message_id.unwrap_or_default();
            let body = record.body.unwrap_or_default();
            let span = tracing::info_span!(
                "event",
                sqs_message_id = %id,
                message_id = tracing::field::Empty,
                trace_id = tracing::field::Empty,
            );
            self.record(id, &body, &mut counts, &mut report)
                .instrument(span)
                .await;
        }
        for (domain, batch) in counts {
            self.guard(&domain, &batch, &mut report).await;
        }
        if let Some(relay) = &self.outcomes {
            let relayed = relay.flush().await;
            report.outcomes_published = relayed.published;
            for (message_id, error, what) in relayed.problems() {
                warn!(%message_id, %error, "{what}");
            }
        }
        report
    }

    /// One SQS message of the batch, in its own span (SES's event carries the job's message id
    /// and trace id back).
    async fn record(
        &self,
        id: String,
        body: &str,
        counts: &mut BTreeMap<String, ReputationCounts>,
        report: &mut EventsReport,
    ) {
        let outer = match self.gate.admit(body).await {
            Ok(outer) => outer,
            Err(Refusal::Forged(forgery)) => {
                // What a refused message shows (a topic, a URL) is the sender's text: redacted.
                warn!(sqs_message_id = %id, error = %redact(&forgery.to_string()), "event refused; acknowledged");
                report.refused.push(forgery);
                return;
            }
            Err(e @ Refusal::Unchecked(_)) => {
                warn!(sqs_message_id = %id, error = %redact(&e.to_string()), "event not checked; retried later");
                report.failures.push(id);
                return;
            }
        };
        let parsed = match parse_value(outer) {
            Ok(e) => e,
            Err(e) => {
                // A parse error quotes what it could not read (an unknown eventType, say).
                warn!(sqs_message_id = %id, error = %redact(&e.to_string()), "not an SES event; acknowledged");
                report.unparseable += 1;
                return;
            }
        };
        let span = tracing::Span::current();
        if let Some(message_id) = &parsed.message_id {
            span.record("message_id", message_id.as_str());
        }
        if let Some(trace) = &parsed.trace_id {
            span.record("trace_id", trace.as_str());
        }
        match self.apply(&parsed).await {
            Ok(Applied::NotYet) => {
                info!(sqs_message_id = %id, message_id = ?parsed.message_id, "event ahead of its record; retried later");
                report.applied.push(Applied::NotYet);
                report.failures.push(id);
                // Counted when it is applied.
                return;
            }
            Ok(applied) => report.applied.push(applied),
            Err(e) => {
                warn!(sqs_message_id = %id, error = %redact(&e.to_string()), "event not applied; retried later");
                report.failures.push(id);
                return;
            }
        }
        let Some(domain) = &parsed.source_domain else {
            return;
        };
        match self.first_count(&parsed).await {
            Ok(true) => count(counts.entry(domain.clone()).or_default(), &parsed),
            Ok(false) => report.recounts_skipped += 1,
            Err(e) => {
                // Applied, not yet counted: the redelivery is absorbed and counted.
                warn!(sqs_message_id = %id, error = %redact(&e.to_string()), "event not counted; retried later");
                report.failures.push(id);
            }
        }
    }

    /// Whether an event is counted for the first time (its key entered in the ledger now).
    async fn first_count(&self, event: &SesEvent) -> Result<bool, StoreError> {
        let Some(key) = count_key(event) else {
            return Ok(true);
        };
        let now = self.clock.now();
        self.guard
            .ledger
            .first_entry(
                &key,
                now,
                now + chrono::Duration::seconds(COUNTED_KEEP_SECS),
            )
            .await
    }

    /// Adds a batch's counts to the domain's window and pauses the domain when its rates
    /// approach the review levels. Failures are logged: the events themselves are applied.
    async fn guard(&self, domain: &str, batch: &ReputationCounts, report: &mut EventsReport) {
        let now = self.clock.now();
        if batch.is_empty() {
            return;
        }
        if let Err(e) = self.guard.store.add(domain, bucket_of(now), batch).await {
            warn!(domain, error = %e, "reputation counts not recorded");
            return;
        }
        let window = match self
            .guard
            .store
            .window(domain, bucket_of(now - self.guard.config.window))
            .await
        {
            Ok(w) => w,
            Err(e) => {
                warn!(domain, error = %e, "reputation window not read");
                return;
            }
        };
        let assessment = assess(&window, &self.guard.config);
        report.rates.insert(
            domain.to_owned(),
            (assessment.bounce_rate, assessment.complaint_rate),
        );
        let Some(trip) = assessment.trip else {
            return;
        };
        match self.pause(domain, now, trip).await {
            Ok(true) => {
                warn!(domain, reason = %trip, volume = assessment.volume, "reputation guard: SES sends from this domain paused");
                report.tripped.push((domain.to_owned(), trip.to_string()));
            }
            Ok(false) => {}
            Err(e) => warn!(domain, error = %e, "reputation guard could not pause the domain"),
        }
    }

    /// Opens the domain's pause unless it is open already; true when this call opened it.
    async fn pause(
        &self,
        domain: &str,
        now: DateTime<Utc>,
        trip: Trip,
    ) -> Result<bool, StoreError> {
        let key = pause_key(domain);
        let current = self.guard.breakers.load(&key).await?;
        if let Some(state) = &current
            && state.mode == Mode::Open
            && state.open_until.is_some_and(|until| until > now)
        {
            return Ok(false);
        }
        let pause = self.guard.config.pause;
        let base = current
            .clone()
            .unwrap_or_else(|| BreakerState::new(now, &BreakerConfig::default()));
        let next = BreakerState {
            mode: Mode::Open,
            open_until: Some(now + pause),
            open_secs: pause.num_seconds(),
            probes_in_flight: 0,
            probe_successes: 0,
            version: base.version + 1,
            ..base
        };
        info!(domain, reason = %trip, until = %(now + pause), "pausing SES sends");
        self.guard
            .breakers
            .save(&key, &next, current.map(|c| c.version))
            .await
    }
}

/// Adds one applied event to a domain's counts.
fn count(counts: &mut ReputationCounts, event: &SesEvent) {
    let n = event.recipients.len().max(1) as u64;
    match &event.kind {
        EventKind::Send => counts.sent += n,
        EventKind::Delivery => counts.delivered += n,
        EventKind::Failure(SesFailureEvent::Bounce { bounce_type, .. })
            if bounce_type == "Permanent" =>
        {
            counts.bounced += n;
        }
        EventKind::Failure(SesFailureEvent::Complaint { .. }) => counts.complained += n,
        _ => {}
    }
}

/// The events function's write of `to` over `record`'s generation at `now`.
fn update_of(record: &JobRecord, to: Status, now: DateTime<Utc>) -> StatusUpdate {
    StatusUpdate::new(record.message_id.clone(), "events", to, record.attempt, now)
}

/// The history note of an event.
fn describe(kind: &EventKind) -> String {
    match kind {
        EventKind::Send => "SES accepted it (Send event)".into(),
        EventKind::Delivery => "delivered (Delivery event)".into(),
        EventKind::Failure(f) => {
            let v = classify_ses_event(f);
            format!(
                "{} event: {} ({})",
                v.raw_code.as_deref().unwrap_or("failure"),
                v.class,
                v.rule
            )
        }
        EventKind::Engagement(name) => name.clone(),
    }
}

impl EventsReport {
    /// The batch's metrics as one EMF document (namespace `Courier`, dimension `Function`).
    pub fn to_emf(&self, timestamp_ms: i64) -> Value {
        let resent = self
            .applied
            .iter()
            .filter(|a| **a == Applied::Resent)
            .count();
        let mut dead_lettered: BTreeMap<String, usize> = BTreeMap::new();
        for a in &self.applied {
            if let Applied::GaveUp(category) = a {
                *dead_lettered
                    .entry(format!("DeadLettered_{}", category.as_str()))
                    .or_default() += 1;
            }
        }
        let gave_up: usize = dead_lettered.values().sum();
        let max =
            |f: fn(&(f64, f64)) -> f64| self.rates.values().map(f).fold(0.0_f64, f64::max) * 100.0;
        let mut metrics = vec![
            serde_json::json!({"Name": "EventsApplied", "Unit": "Count"}),
            serde_json::json!({"Name": "EventsRefused", "Unit": "Count"}),
            serde_json::json!({"Name": "SoftBounceResends", "Unit": "Count"}),
            serde_json::json!({"Name": "SoftBounceGaveUp", "Unit": "Count"}),
            serde_json::json!({"Name": "ReputationGuardTripped", "Unit": "Count"}),
            serde_json::json!({"Name": "LiveSettingsRefused", "Unit": "Count"}),
            serde_json::json!({"Name": "OutcomesPublished", "Unit": "Count"}),
            serde_json::json!({"Name": "BounceRate", "Unit": "Percent"}),
            serde_json::json!({"Name": "ComplaintRate", "Unit": "Percent"}),
        ];
        metrics.extend(
            dead_lettered
                .keys()
                .map(|name| serde_json::json!({"Name": name, "Unit": "Count"})),
        );
        let mut doc = serde_json::json!({
            "_aws": {"Timestamp": timestamp_ms, "CloudWatchMetrics": [{
                "Namespace": "Courier", "Dimensions": [["Function"]],
                "Metrics": metrics}]},
            "Function": "events",
            "EventsApplied": self.applied.iter().filter(|a| **a != Applied::NotYet).count(),
            "EventsRefused": self.refused.len(),
            "SoftBounceResends": resent,
            "SoftBounceGaveUp": gave_up,
            "ReputationGuardTripped": self.tripped.len(),
            "LiveSettingsRefused": usize::from(self.live_refused),
            "OutcomesPublished": self.outcomes_published,
            "BounceRate": max(|r| r.0),
            "ComplaintRate": max(|r| r.1),
            "Paused": self.tripped,
        });
        for (name, count) in dead_lettered {
            doc[name] = count.into();
        }
        doc
    }

    pub fn response(&self) -> SqsBatchResponse {
        let mut response = SqsBatchResponse::default();
        for id in &self.failures {
            response.add_failure(id.clone());
        }
        response
    }
}

/// The Lambda handler.
pub async fn function_handler(
    applier: &Arc<Applier>,
    event: lambda_runtime::LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, lambda_runtime::Error> {
    let report = applier.handle(event.payload).await;
    println!("{}", report.to_emf(applier.clock.now().timestamp_millis()));
    Ok(report.response())
}

#[cfg(test)]
mod tests;
