//! The send function: consumes SQS batches of email jobs and gives every record a known next
//! home: sent, re-enqueued with a delay, dead-lettered with its full record, or a terminal status.
//!
//! # Layout
//! - [`Pipeline`]: the ports and configuration, built once at INIT.
//! - [`Pipeline::handle`]: one batch; records run concurrently (bounded), each in its own task
//!   so a panic fails only its record; re-enqueues are sent with one batched call.
//! - `attempt`: one send attempt through the providers in failover order (breaker, reputation
//!   pause, send-rate permit, the call, the status write).
//! - `failure`: after a failure, the policy's decision planned into the record's fate.
//! - `fate`: the record's fate as one value, carried out by one exhaustive match.
//! - [`breakers`]: the circuit breakers with shared state and a short local cache.
//! - [`governor`]: the send-rate governor over the shared schedules.
//! - [`config`]: the settings, parsed once at INIT.
//! - [`metrics`]: CloudWatch Embedded Metric Format output.
//! - [`wiring`]: builds the pipeline from the environment at INIT.
//!
//! A record is acknowledged only after its next home is durably written; otherwise it is listed
//! in `batchItemFailures` and SQS redelivers it (and redrives it to the DLQ after
//! maxReceiveCount).

pub mod acceptances;
mod attempt;
pub use attempt::{ACCEPTED_DETAIL, AttachmentBudget};
pub mod breakers;
pub mod config;
mod failure;
mod fate;
pub use fate::Cause;
use fate::{Fate, Holding, Lettered, Step};
pub mod governor;
pub mod live;
pub mod metrics;
pub mod unsubscribing;
pub mod wiring;

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use chrono::{DateTime, Utc};
use courier_adapters::seal_secret::SecretSealKeys;
use courier_core::breaker::Admission;
use courier_core::claim_check::{self, RedeemError};
use courier_core::classify::{ErrorClass, Verdict};
use courier_core::delay;
use courier_core::envelope::{
    Incoming, ProviderAcceptance, accepted_body, attempt_record, current_body, dead_letter_of,
    job_fingerprint, parse_body, same_generation_body,
};
use courier_core::job::{Claimed, Rejected, parse_mailbox};
use courier_core::letters::letter_id;
use courier_core::mailbox::{address_hash, address_key, redact};
use courier_core::outcome::Relay;
use courier_core::plan::{self, Acceptance, Failure, Plan};
use courier_core::policy::{DeadLetterCategory, Decision, RetryPolicy};
use courier_core::ports::{
    ClaimOutcome, ClaimRequest, Clock, DeadLetter, DeadLetterSink, JobFacts, Mailer, OutgoingEmail,
    PayloadStore, PoisonList, Provider, Requeue, RetryScheduler, Sightings, StatusStore,
    StatusUpdate, StoreError, SuppressionList, TemplateError, TemplateStore,
};
use courier_core::random::SeededRandom;
use courier_core::render::content_of;
use courier_core::seal::{self, SealCheck};
use courier_core::status::Status;
use futures::StreamExt;
use tracing::{Instrument, info, warn};

pub use config::SendConfig;
use governor::Permit;
use metrics::{Metrics, Outcome};

/// Everything the pipeline needs, wired once at start-up.
pub struct Pipeline {
    pub status: Arc<dyn StatusStore>,
    /// Publishes the outcomes `status` wrote, after each batch; `None`: not published.
    pub outcomes: Option<Relay>,
    /// Providers in failover order.
    pub mailers: Vec<Arc<dyn Mailer>>,
    pub scheduler: Arc<dyn RetryScheduler>,
    pub dead_letters: Arc<dyn DeadLetterSink>,
    /// Bodies too large for an SQS message (the claim check), redeemed before parsing.
    pub payloads: Arc<dyn PayloadStore>,
    /// Written to on permanent bounces; read inside the claim (see `ClaimRequest::check_suppressed`).
    pub suppression: Arc<dyn SuppressionList>,
    pub poison: Arc<dyn PoisonList>,
    pub templates: Arc<dyn TemplateStore>,
    pub breakers: breakers::Breakers,
    /// The providers' shared send-rate schedules.
    pub governor: governor::Governor,
    pub policy: RetryPolicy,
    pub clock: Arc<dyn Clock>,
    pub config: SendConfig,
    pub rng: std::sync::Mutex<SeededRandom>,
    /// Error codes seen before (a new code that classifies as `unknown` raises a metric).
    pub sightings: Arc<dyn Sightings>,
    /// New unknown codes seen during the current batch (drained into its metrics).
    pub new_codes: std::sync::Mutex<Vec<String>>,
    /// The retry envelopes' seal ([`courier_core::seal`]).
    pub sealing: Sealing,
    /// Acceptances this instance could not record ([`acceptances`]).
    pub acceptances: acceptances::Acceptances,
    /// The live settings ([`live`]); `None`: the deployment's settings only.
    pub live: Option<live::Live>,
    /// Attachment bytes this instance holds at once ([`AttachmentBudget`]).
    pub attachment_budget: AttachmentBudget,
    /// One-click unsubscribe links ([`unsubscribing`]).
    pub unsubscribing: unsubscribing::Unsubscribing,
}

/// The seal keys, and how many copies' seals did not verify during the current batch (drained
/// into its metrics as `EnvelopesUnverified`).
pub struct Sealing {
    pub keys: Arc<SecretSealKeys>,
    unverified: std::sync::atomic::AtomicU64,
}

impl Sealing {
    pub fn new(keys: Arc<SecretSealKeys>) -> Sealing {
        Sealing {
            keys,
            unverified: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// A parsed copy as far as its seal lets it be trusted: an envelope whose seal does not
    /// verify (after reading the keys again once, for a rotation) is the first copy of its job,
    /// never a later generation ([`courier_core::seal::demote`]). Unreadable keys are an error
    /// (the copy comes back later).
    pub async fn admit(&self, incoming: Incoming, body: &[u8]) -> Result<Incoming, StoreError> {
        if !incoming.enveloped
            || self
                .verifies(body, &incoming.job.message_id, incoming.attempt)
                .await?
        {
            return Ok(incoming);
        }
        Ok(seal::demote(incoming))
    }

    /// Whether an envelope's seal verifies (after reading the keys again once, for a
    /// rotation); one that does not is counted and logged with what it claims to be.
    pub async fn verifies(
        &self,
        body: &[u8],
        message_id: &str,
        claimed: u32,
    ) -> Result<bool, StoreError> {
        if seal::check(body, &*self.keys.keys().await?) == SealCheck::Verified {
            return Ok(true);
        }
        if let Some(keys) = self.keys.reread().await?
            && seal::check(body, &keys) == SealCheck::Verified
        {
            return Ok(true);
        }
        self.unverified
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        warn!(
            message_id = %message_id,
            claimed_attempt = claimed,
            "a retry envelope's seal does not verify; not trusted as a later generation of its job"
        );
        Ok(false)
    }

    fn drain(&self) -> u64 {
        self.unverified
            .swap(0, std::sync::atomic::Ordering::Relaxed)
    }
}

/// What a record's send may take: the time its slot must come by (its lease, less the
/// margin), and the batch's records not finished yet (how many send-rate slots to book at once).
struct SendBudget {
    send_by: DateTime<Utc>,
    unfinished: Arc<std::sync::atomic::AtomicUsize>,
    /// Set just before a provider is called (see [`Pipeline::handle_records`]).
    called: Arc<std::sync::atomic::AtomicBool>,
}

impl SendBudget {
    fn wanted(&self) -> u32 {
        u32::try_from(
            self.unfinished
                .load(std::sync::atomic::Ordering::Relaxed)
                .max(1),
        )
        .unwrap_or(u32::MAX)
    }
}

/// One SQS record, reduced to what the pipeline reads.
#[derive(Debug, Clone)]
pub struct RecordIn {
    pub sqs_message_id: String,
    pub body: String,
    /// SQS's `AWSTraceHeader` system attribute: a producer's X-Ray trace, whose root becomes the
    /// job's trace when the job has no `trace_id` ([`courier_core::trace`]).
    pub trace_header: Option<String>,
}

/// The result of one batch, for the caller and for tests.
#[derive(Debug, Default)]
pub struct BatchReport {
    /// SQS message ids to report in `batchItemFailures`.
    pub failures: Vec<String>,
    /// Why each of them failed (same order).
    pub reasons: Vec<String>,
    pub metrics: Metrics,
}

impl BatchReport {
    /// Lists `id` for redelivery, for `cause` (with its sources, for the reasons).
    fn redeliver(&mut self, id: String, cause: &Cause) {
        warn!(sqs_message_id = %id, error = %cause, "record left for redelivery");
        self.metrics.count(Outcome::Failed);
        self.failures.push(id);
        self.reasons.push(cause.to_string());
    }

    pub fn response(&self) -> SqsBatchResponse {
        let mut response = SqsBatchResponse::default();
        for id in &self.failures {
            response.add_failure(id.clone());
        }
        response
    }
}

/// Whether `recipient` is one of `listed` (the claim's suppression hits), compared by
/// [`address_key`]: `Ann <ann@x>` and `ANN@X` are one address.
fn is_listed(listed: &[String], recipient: &str) -> bool {
    let key = address_key(recipient);
    listed.iter().any(|s| address_key(s) == key)
}

impl Pipeline {
    /// Handles one SQS event; `deadline` is the invocation's deadline, `request_id` its id.
    pub async fn handle(
        self: &Arc<Self>,
        event: SqsEvent,
        deadline: DateTime<Utc>,
        request_id: &str,
    ) -> BatchReport {
        let records: Vec<RecordIn> = event
            .records
            .into_iter()
            .map(|r| RecordIn {
                trace_header: r.attributes.get("AWSTraceHeader").cloned(),
                sqs_message_id: r.message_id.unwrap_or_default(),
                body: r.body.unwrap_or_default(),
            })
            .collect();
        self.handle_records(records, deadline, request_id).await
    }

    /// Handles records (the event-free core of [`Pipeline::handle`]).
    /// Reads the provider quota that paces SES when it is due (INIT, then every 10 minutes),
    /// and logs what it did.
    pub async fn read_quota(&self) {
        match self.governor.read_quota(self.clock.now()).await {
            None => {}
            Some(governor::QuotaRead::Paced { provider, per_sec }) => {
                info!(provider, per_sec, "paced by the provider's quota");
            }
            Some(governor::QuotaRead::Kept {
                provider,
                per_sec,
                error,
            }) => {
                warn!(provider, per_sec, error = %error, "send quota not read; the rate stays");
            }
        }
    }

    /// Reads the live settings when they are due and puts a new valid version in force;
    /// `true` when a stored version was refused (counted as `LiveSettingsRefused`).
    pub async fn refresh_live(&self) -> bool {
        let Some(live) = &self.live else {
            return false;
        };
        match live
            .refresh(self.clock.now(), &self.breakers, &self.governor)
            .await
        {
            None => false,
            Some(live::LiveRead::Applied { version, .. }) => {
                info!(version, "live settings in force");
                false
            }
            Some(live::LiveRead::Refused { version, error }) => {
                warn!(version, error = %error, "live settings refused; the last good settings stay");
                true
            }
            Some(live::LiveRead::Failed(error)) => {
                warn!(error = %error, "live settings not read; the settings in force stay");
                false
            }
        }
    }

    pub async fn handle_records(
        self: &Arc<Self>,
        records: Vec<RecordIn>,
        deadline: DateTime<Utc>,
        request_id: &str,
    ) -> BatchReport {
        self.read_quota().await;
        let refused = self.refresh_live().await;
        let mut report = BatchReport::default();
        if refused {
            report.metrics.add("LiveSettingsRefused", 1);
        }
        let total = records.len();
        // Records of the batch not finished yet: how many send-rate slots are worth booking.
        let unfinished = Arc::new(std::sync::atomic::AtomicUsize::new(total));
        let steps: Vec<(String, Step)> = futures::stream::iter(records.into_iter().map(|record| {
            let pipeline = Arc::clone(self);
            let owner = format!("{request_id}/{}", record.sqs_message_id);
            let id = record.sqs_message_id.clone();
            let unfinished = Arc::clone(&unfinished);
            // Set just before the provider is called: a panic after it may have sent the email.
            let called = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (after, body, crashed_owner) =
                (Arc::clone(self), record.body.clone(), owner.clone());
            async move {
                let task = tokio::spawn({
                    let called = Arc::clone(&called);
                    async move {
                        let step = pipeline
                            .process(record, deadline, owner, Arc::clone(&unfinished), called)
                            .await;
                        unfinished.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                        step
                    }
                });
                let step = match task.await {
                    Ok(step) => step,
                    Err(e) if e.is_panic() => {
                        let what = panic_text(e.into_panic());
                        if called.load(std::sync::atomic::Ordering::SeqCst) {
                            // The email may be out: redelivery resolves it as an ambiguous send.
                            Step::Redeliver(Cause::PanickedAfterCall(what))
                        } else {
                            // A job that crashes the worker before any send is poison. Its
                            // own task too: a second panic fails only this record.
                            let poisoned = tokio::spawn(async move {
                                after.poison_after_panic(&body, &crashed_owner, &what).await
                            });
                            poisoned
                                .await
                                .unwrap_or_else(|e| Step::Redeliver(Cause::Task(e)))
                        }
                    }
                    Err(e) => Step::Redeliver(Cause::Task(e)),
                };
                (id, step)
            }
        }))
        .buffer_unordered(self.config.concurrency.max(1))
        .collect()
        .await;

        // One shared-state write per provider per batch, not one per result.
        self.breakers.flush(self.now()).await;
        let mut pending = Vec::new();
        for (id, step) in steps {
            match step {
                Step::Done(outcome) => report.metrics.count(outcome),
                Step::Redeliver(cause) => report.redeliver(id, &cause),
                Step::Queue {
                    requeue,
                    then,
                    outcome,
                    holding,
                } => pending.push((id, requeue, then, outcome, holding)),
            }
        }
        // One call: the scheduler splits it into batches within SQS's count and size limits.
        let items: Vec<Requeue> = pending.iter().map(|(_, r, ..)| r.clone()).collect();
        let results = if items.is_empty() {
            Vec::new()
        } else {
            self.scheduler.enqueue(&items).await
        };
        for ((id, _, then, outcome, holding), result) in pending.into_iter().zip(results) {
            match result {
                Ok(()) => {
                    if let Some(update) = then
                        && let Err(e) = self.status.finish(&update).await
                    {
                        // The re-enqueued copy is the durable next home; a failed status
                        // write only delays it (its claim takes a newer generation anyway).
                        warn!(sqs_message_id = %id, error = %e, "status write after re-enqueue failed");
                    }
                    report.metrics.count(outcome);
                }
                Err(e) => {
                    self.release(&holding).await;
                    report.redeliver(id, &Cause::from(e));
                }
            }
        }
        let new_codes = std::mem::take(
            &mut *self
                .new_codes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if !new_codes.is_empty() {
            report
                .metrics
                .add("NewUnknownErrorCode", new_codes.len() as u64);
        }
        if let Some(relay) = &self.outcomes {
            let relayed = relay.flush().await;
            report
                .metrics
                .add("OutcomesPublished", relayed.published as u64);
            for (message_id, error, what) in relayed.problems() {
                warn!(%message_id, %error, "{what}");
            }
        }
        let unverified = self.sealing.drain();
        if unverified > 0 {
            report.metrics.add("EnvelopesUnverified", unverified);
        }
        let (links, no_links) = self.unsubscribing.drain();
        if links > 0 {
            report.metrics.add("UnsubscribeLinksAdded", links);
        }
        if no_links > 0 {
            report.metrics.add("UnsubscribeLinksNotAdded", no_links);
        }
        if total > 0 && report.failures.len() == total {
            warn!(records = total, "every record of the batch failed");
        }
        report
    }

    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    async fn process(
        &self,
        record: RecordIn,
        deadline: DateTime<Utc>,
        owner: String,
        unfinished: Arc<std::sync::atomic::AtomicUsize>,
        called: Arc<std::sync::atomic::AtomicBool>,
    ) -> Step {
        let span = tracing::info_span!(
            "record",
            sqs_message_id = %record.sqs_message_id,
            message_id = tracing::field::Empty,
            campaign_id = tracing::field::Empty,
            trace_id = tracing::field::Empty,
        );
        let inner = span.clone();
        async move {
            let (fate, holding) = self
                .decide_fate(record, deadline, owner, unfinished, called, inner)
                .await;
            self.carry_out(fate, holding).await
        }
        .instrument(span)
        .await
    }

    /// Decides the record's fate (steps 1-8); what the copy holds when it is carried out.
    async fn decide_fate(
        &self,
        record: RecordIn,
        deadline: DateTime<Utc>,
        owner: String,
        unfinished: Arc<std::sync::atomic::AtomicUsize>,
        called: Arc<std::sync::atomic::AtomicBool>,
        span: tracing::Span,
    ) -> (Fate, Holding) {
        let now = self.now();
        let unclaimed = |fate| (fate, Holding::Nothing);
        // 1. Redeem a claim check, parse and validate.
        let body = match claim_check::redeem(Some(&*self.payloads), &record.body).await {
            Ok(body) => body,
            Err(RedeemError::Store(e)) => return unclaimed(Fate::Redeliver(e.into())),
            Err(e) => return unclaimed(Self::unredeemable(&record.body, &e, now)),
        };
        let incoming = match parse_body(body.as_bytes()) {
            Ok(incoming) => incoming,
            Err(rejected) => return unclaimed(self.rejected(&body, &rejected, now).await),
        };
        // The seal first (a forged envelope's trace is dropped), then the producer's header.
        let incoming = match self.sealing.admit(incoming, body.as_bytes()).await {
            Ok(incoming) => incoming.with_trace_header(record.trace_header.as_deref()),
            Err(e) => return unclaimed(Fate::Redeliver(e.into())),
        };
        let job = &incoming.job;
        span.record("message_id", job.message_id.as_str());
        span.record("campaign_id", job.campaign_id.as_str());
        if let Some(trace) = &incoming.trace {
            span.record("trace_id", trace.as_str());
        }
        // 1a. A copy carrying the provider's acceptance: the mail is out, record it.
        if let Some(accepted) = &incoming.accepted {
            let fate = self
                .record_carried(&record.body, &incoming, accepted, &owner, now)
                .await;
            return unclaimed(fate);
        }
        // 2. Poison blocklist (keyed on the application's original payload).
        match self.poison.is_blocked(&incoming.print).await {
            Ok(true) => {
                let verdict = Verdict::local(
                    ErrorClass::Poison,
                    "blocklisted",
                    "payload fingerprint is on the poison blocklist",
                );
                return unclaimed(self.unclaimed_letter(
                    &incoming,
                    &verdict,
                    DeadLetterCategory::Poison,
                    "blocklisted payload".into(),
                    now,
                ));
            }
            Ok(false) => {}
            Err(e) => return unclaimed(Fate::Redeliver(e.into())),
        }
        // 2a. A sender the stack does not allow: its own dead letter, before any claim.
        if let Some(allowed) = &self.config.allowed_senders
            && !allowed.allows(&job.from)
        {
            let verdict = Verdict::local(
                ErrorClass::InvalidJob,
                "sender_not_allowed",
                "`from` is not one of the stack's allowed sender identities (COURIER_ALLOWED_SENDERS)",
            );
            warn!(from = %address_hash(&job.from), "sender not allowed");
            return unclaimed(self.unclaimed_letter(
                &incoming,
                &verdict,
                DeadLetterCategory::InvalidJob,
                "sender not allowed".into(),
                now,
            ));
        }
        // 2a. ... and a template this sender may not use (COURIER_SENDER_TEMPLATES): the same.
        if let (Some(allowed), Some(template)) = (&self.config.sender_templates, &job.template)
            && !allowed.allows(&job.from, &template.id)
        {
            let verdict = Verdict::local(
                ErrorClass::InvalidJob,
                "template_not_allowed",
                format!(
                    "template {:?} is not one this sender may use (COURIER_SENDER_TEMPLATES)",
                    template.id
                ),
            );
            warn!(from = %address_hash(&job.from), template = %template.id, "template not allowed for this sender");
            return unclaimed(self.unclaimed_letter(
                &incoming,
                &verdict,
                DeadLetterCategory::InvalidJob,
                "template not allowed for this sender".into(),
                now,
            ));
        }
        // 2b. A hop of a long wait that is not due yet: back on the queue, unclaimed.
        if let Some(due) = incoming.not_before
            && due > now
        {
            let requeue = Requeue {
                message_id: job.message_id.clone(),
                body: record.body.clone(),
                delay_secs: delay::next_hop(now, due),
            };
            info!(%due, delay_s = requeue.delay_secs, "not due yet; waiting another hop");
            return unclaimed(Fate::Wait {
                wait: plan::wait(requeue, now),
                then: None,
                outcome: Outcome::Waiting,
            });
        }
        // 2c. No provider can take it now (known without a call): wait, unclaimed.
        if let Some(fate) = self.wait_unclaimed(&incoming, now).await {
            return unclaimed(fate);
        }
        // 3. Recipients unsubscribed from the job's list are not sent to (read before the
        // claim; a global unsubscription is a suppression, checked inside it).
        let recipients: Vec<String> = job.recipients().map(str::to_owned).collect();
        let mut unsubscribed: Vec<String> = Vec::new();
        if let Some(list) = courier_core::unsubscribe::checked_list(job) {
            unsubscribed = match self.suppression.unsubscribed(&recipients, &list).await {
                Ok(hit) => hit,
                Err(e) => return unclaimed(Fate::Redeliver(e.into())),
            };
            if !unsubscribed.is_empty() {
                let hashes: Vec<String> = unsubscribed.iter().map(|r| address_hash(r)).collect();
                info!(recipients = ?hashes, %list, "recipients unsubscribed from the job's list");
            }
            if recipients.iter().all(|r| is_listed(&unsubscribed, r)) {
                let detail = format!(
                    "{}: every recipient unsubscribed from list {list}",
                    courier_core::unsubscribe::REASON
                );
                return unclaimed(suppressed_job(&incoming, owner, now, Some(detail)));
            }
        }
        // 4 + 5. Suppression check and idempotent claim, in one conditional write.
        let lease_end = (now
            + chrono::Duration::from_std(self.config.max_lease).unwrap_or_default())
        .min(deadline - chrono::Duration::from_std(self.config.lease_margin).unwrap_or_default());
        let mut claim = ClaimRequest {
            message_id: job.message_id.clone(),
            attempt: incoming.attempt,
            owner: owner.clone(),
            now,
            lease_until: lease_end.max(now + chrono::Duration::seconds(1)),
            grace: chrono::Duration::from_std(self.config.ambiguity_grace).unwrap_or_default(),
            check_suppressed: recipients.clone(),
            trace_id: incoming.trace.clone(),
            facts: JobFacts::of(job),
            payload: match self.resend_body(&incoming).await {
                Ok(body) => body,
                Err(e) => return unclaimed(Fate::Redeliver(e.into())),
            },
        };
        let mut suppressed: Vec<String> = Vec::new();
        loop {
            match self.status.claim(&claim).await {
                Ok(ClaimOutcome::Claimed) => break,
                Ok(ClaimOutcome::Suppressed(hit))
                    if claim.check_suppressed.is_empty() || hit.is_empty() =>
                {
                    return unclaimed(Fate::Redeliver(Cause::UnaskedSuppression {
                        hits: hit.len(),
                    }));
                }
                Ok(ClaimOutcome::Suppressed(hit)) => {
                    suppressed = hit;
                    let all = recipients
                        .iter()
                        .all(|r| is_listed(&suppressed, r) || is_listed(&unsubscribed, r));
                    let hashes: Vec<String> = suppressed.iter().map(|r| address_hash(r)).collect();
                    if all {
                        info!(recipients = ?hashes, "all recipients suppressed");
                        return unclaimed(suppressed_job(&incoming, owner, now, None));
                    }
                    info!(recipients = ?hashes, "some recipients suppressed; sending to the rest");
                    // The others were checked in the same write: claim without checks.
                    claim.check_suppressed.clear();
                }
                Ok(ClaimOutcome::Duplicate(status)) => {
                    info!(%status, "duplicate delivery acknowledged without sending");
                    return unclaimed(Fate::Ack(Outcome::Duplicate));
                }
                Ok(ClaimOutcome::Stale { current_attempt }) => {
                    info!(
                        current_attempt,
                        copy_attempt = incoming.attempt,
                        "stale copy dropped"
                    );
                    return unclaimed(Fate::Ack(Outcome::Stale));
                }
                Ok(ClaimOutcome::Busy { lease_until }) => {
                    return unclaimed(Fate::Redeliver(Cause::Busy { until: lease_until }));
                }
                Ok(ClaimOutcome::Ambiguous { resolve_at }) => {
                    if let Some(fate) = self.resolve_accepted(&incoming, &owner, now).await {
                        return unclaimed(fate);
                    }
                    // Same generation, back after the grace window: provider events may resolve it.
                    let wait = (resolve_at - now).num_seconds().max(1) as u64;
                    return unclaimed(self.requeue_same(&record.body, &incoming, wait, now));
                }
                Err(e) => return unclaimed(Fate::Redeliver(e.into())),
            }
        }
        let holding = Holding::Lease {
            message_id: job.message_id.clone(),
            owner: owner.clone(),
            attempt: incoming.attempt,
        };
        suppressed.extend(unsubscribed);
        // 5-8. Provider, render, send, and the fate of its outcome.
        let send_by = claim.lease_until
            - chrono::Duration::from_std(self.config.lease_margin).unwrap_or_default();
        let budget = SendBudget {
            send_by,
            unfinished,
            called,
        };
        let fate = self
            .attempt(&incoming, &suppressed, now, &owner, &budget)
            .await;
        (fate, holding)
    }
}

/// The fate of a job none of whose recipients may get it: `suppressed`, without a lease, with
/// why when it is not the suppression list's doing.
fn suppressed_job(
    incoming: &Incoming,
    owner: String,
    now: DateTime<Utc>,
    detail: Option<String>,
) -> Fate {
    let job = &incoming.job;
    let mut update = StatusUpdate::new(
        job.message_id.clone(),
        owner,
        Status::Suppressed,
        incoming.attempt,
        now,
    );
    update.detail = detail;
    update.facts = Some(Box::new(JobFacts::of(job)));
    Fate::Record {
        update,
        outcome: Outcome::Suppressed,
    }
}

/// Why a parsed job could not be made into an email.
#[derive(Debug, thiserror::Error)]
enum BuildError {
    #[error(transparent)]
    Address(#[from] courier_core::job::JobError),
    #[error("every recipient is suppressed")]
    AllSuppressed,
}

fn build_email(
    incoming: &Incoming,
    suppressed: &[String],
    content: courier_core::job::Content,
) -> Result<OutgoingEmail, BuildError> {
    let job = &incoming.job;
    let keep = |list: &[String], field: &str| -> Result<Vec<courier_core::ports::Mailbox>, _> {
        list.iter()
            .filter(|a| !is_listed(suppressed, a))
            .map(|a| parse_mailbox(field, a))
            .collect()
    };
    let to = keep(&job.to, "to")?;
    let cc = keep(&job.cc, "cc")?;
    let bcc = keep(&job.bcc, "bcc")?;
    if to.is_empty() && cc.is_empty() && bcc.is_empty() {
        return Err(BuildError::AllSuppressed);
    }
    Ok(OutgoingEmail {
        message_id: job.message_id.clone(),
        campaign_id: job.campaign_id.clone(),
        from: parse_mailbox("from", &job.from)?,
        to,
        cc,
        bcc,
        subject: content.subject,
        text: content.text,
        html: content.html,
        headers: job
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        trace_id: incoming.trace.clone(),
        attachments: Vec::new(),
    })
}

/// The Lambda handler: one batch in, the partial batch response out, metrics as EMF on stdout.
pub async fn function_handler(
    pipeline: &Arc<Pipeline>,
    event: lambda_runtime::LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, lambda_runtime::Error> {
    let deadline = deadline_of(&event.context);
    let report = pipeline
        .handle(event.payload, deadline, &event.context.request_id)
        .await;
    let changes: Vec<(String, String)> = pipeline
        .breakers
        .changes
        .lock()
        .map(|mut c| {
            c.drain(..)
                .map(|(p, m)| (p, format!("{:?}->{:?}", m.from, m.to)))
                .collect()
        })
        .unwrap_or_default();
    println!(
        "{}",
        report
            .metrics
            .to_emf("send", Utc::now().timestamp_millis(), &changes)
    );
    Ok(report.response())
}

/// The invocation's deadline as a UTC instant.
pub fn deadline_of(ctx: &lambda_runtime::Context) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(i64::try_from(ctx.deadline).unwrap_or(i64::MAX))
        .unwrap_or_else(|| Utc::now() + chrono::Duration::seconds(60))
}

/// The largest payload the claim keeps as it is with a job's record for a soft-bounce resend
/// (DynamoDB items hold at most 400 KB, history included); a larger one is kept in the payload
/// bucket and the record holds a claim check of it.
pub const MAX_KEPT_PAYLOAD: usize = claim_check::MAX_KEPT_BYTES;

/// Default visibility-timeout-friendly lease when the deadline is far (or unknown).
pub const DEFAULT_MAX_LEASE: Duration = Duration::from_secs(120);

/// The message of a caught panic (`panic!("...")` payloads are `&str` or `String`).
fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

#[cfg(test)]
mod tests;
