//! Transient bounces: the job sent again through the retry policy ([`Applier::transient_bounce`]),
//! or, of some recipients of a job with several, only they, as a job of their own ([`part_id`]: the same for the same bounce, so a redelivered event's copy is
//! a duplicate its claim drops), in their roles; on this job they become `resent`.
//!
//! Crash safety: the recipients are `bounced_transient` (written by [`Applier::follow`]), then
//! the part's copy is scheduled (or its letter written), then the part's own record is written
//! waiting for that copy (`StatusStore::expect`, so the sweeper finds it if the copy is lost),
//! then they move to `resent`. A failure in between leaves them `bounced_transient` and the
//! event is redelivered, which schedules the same part again (its claim drops the second copy)
//! and finds the part's record written.

use std::time::Duration;

use chrono::{DateTime, Utc};
use courier_core::claim_check::{self, RedeemError};
use courier_core::classify::{Verdict, classify_ses_event};
use courier_core::envelope::{Incoming, current_body, parse_body};
use courier_core::mailbox::address_key;
use courier_core::plan::{self, Acceptance, Failure, Plan, Wait};
use courier_core::ports::{Expected, JobFacts, JobRecord, Resend, StoreError};
use courier_core::recipients::{self, RecipientStatus, part_id};
use courier_core::status::Status;
use tracing::{info, warn};

use crate::recipients::Moved;
use crate::{Applied, Applier, EventKind, SesEvent, describe, update_of};

impl Applier {
    /// Whether a transient bounce of `record`'s send resends a part of it: the job has several
    /// recipients it sent to (a job of one is sent again whole). A send still without its
    /// recipients (SES's event named none to fill them from, [`Applier::fill`]) is counted from
    /// its kept body, so a job of several is never sent again whole for one recipient's bounce.
    pub(crate) async fn resends_part(&self, record: &JobRecord) -> Result<bool, StoreError> {
        if !record.recipients.is_empty() {
            return Ok(record
                .recipients
                .iter()
                .filter(|r| r.status != RecipientStatus::Suppressed)
                .count()
                > 1);
        }
        Ok(self
            .kept_body(record)
            .await?
            .and_then(|body| parse_body(body.as_bytes()).ok())
            .is_some_and(|kept| recipients::roll(&kept.job, RecipientStatus::Sent, &[]).len() > 1))
    }

    /// The body `record` keeps for a resend (see `StatusStore`'s `payload`): as the record holds
    /// it, or, for one over 300 KiB, from the payload bucket its claim check names. `None` when
    /// it keeps none, or when the stored body is gone or altered (warned: the bounce is then
    /// recorded only); an error of the bucket itself is returned (the event is redelivered).
    pub(crate) async fn kept_body(&self, record: &JobRecord) -> Result<Option<String>, StoreError> {
        let Some(payload) = &record.payload else {
            return Ok(None);
        };
        match claim_check::redeem(Some(&*self.resender.payloads), payload).await {
            Ok(body) => Ok(Some(body.into_owned())),
            Err(RedeemError::Store(e)) => Err(e),
            Err(e) => {
                warn!(message_id = %record.message_id, error = %e, "the body kept for a resend cannot be read; the transient bounce is recorded only");
                Ok(None)
            }
        }
    }

    /// Sends the recipients `event` bounced (those still `bounced_transient`) again as a job of
    /// their own, through the retry policy, or gives them up; then the job takes the status its
    /// recipients make once each is final.
    pub(crate) async fn resend_part(
        &self,
        event: &SesEvent,
        record: JobRecord,
    ) -> Result<Applied, StoreError> {
        let named: Vec<String> = event.recipients.iter().map(|a| address_key(a)).collect();
        let bounced: Vec<String> = record
            .recipients
            .iter()
            .filter(|r| r.status == RecipientStatus::BouncedTransient && named.contains(&r.address))
            .map(|r| r.address.clone())
            .collect();
        let EventKind::Failure(failure) = &event.kind else {
            return Ok(Applied::Absorbed);
        };
        if record.recipients.is_empty() {
            // Still without its recipients (the event named none to fill them from): no list
            // to resend one of them from, and the others must not get it twice.
            warn!(message_id = %record.message_id, "transient bounce of one recipient of a send recorded without its recipients; recorded only");
            return Ok(Applied::Absorbed);
        }
        if bounced.is_empty() {
            // Resent already (a redelivered event), or a late bounce of a final recipient.
            return Ok(Applied::Absorbed);
        }
        if event.provider_message_id.is_some()
            && record.provider_message_id.is_some()
            && event.provider_message_id != record.provider_message_id
        {
            // A bounce of an earlier send of the job (sent again whole since): recorded on its
            // recipients only; the later send is the one that counts.
            return Ok(Applied::Recipients);
        }
        let record = if record.status == Status::Unknown {
            // A bounce proves SES took the message: the ambiguous send is resolved as sent, so
            // nothing sends the whole message again after the grace window.
            self.settle(event, &record, Status::SentToProvider).await?;
            match self.status.get(&record.message_id).await? {
                Some(again) => again,
                None => return Ok(Applied::NotYet),
            }
        } else {
            record
        };
        let Some(payload) = self.kept_body(&record).await? else {
            // Nothing to send again from: the bounce is recorded on its recipients and stays.
            return Ok(Applied::Recipients);
        };
        let id = part_id(
            &record.message_id,
            event.provider_message_id.as_deref().unwrap_or_default(),
            &bounced,
        );
        let Some(part) = parse_body(payload.as_bytes())
            .ok()
            .and_then(|whole| whole.part(&id, &bounced))
        else {
            warn!(message_id = %record.message_id, "the kept payload does not parse; transient bounce recorded only");
            return Ok(Applied::Recipients);
        };
        let verdict = classify_ses_event(failure);
        let now = self.clock.now();
        let (to, detail, applied) = match self.plan(&part, &verdict, now) {
            Plan::Retry { wait, .. } => {
                self.schedule(&wait).await?;
                self.expect_part(&part, &wait, &record.message_id, now)
                    .await?;
                info!(message_id = %record.message_id, part = %id, recipients = bounced.len(), delay_s = wait.requeue().delay_secs, "transient bounce; resend to its recipients scheduled");
                (
                    RecipientStatus::Resent,
                    format!("resent as {id}"),
                    Applied::Resent,
                )
            }
            Plan::DeadLetter { letter, .. } => {
                // Idempotent, first: a later failure redelivers the event, which does it again.
                let reason = format!(
                    "soft: transient bounce gave up ({}, {}): {}",
                    verdict.class,
                    verdict.rule,
                    verdict.raw_code.as_deref().unwrap_or("")
                );
                self.suppress_softly(&bounced, &reason).await?;
                self.resender.dead_letters.put(&letter).await?;
                warn!(message_id = %record.message_id, part = %id, category = letter.category.as_str(), "transient bounce past the give-up horizon; its recipients dead-lettered");
                (
                    RecipientStatus::Resent,
                    format!("gave up: dead-lettered as {id}"),
                    Applied::GaveUp(letter.category),
                )
            }
            // The policy does not retry this class: the bounce is final for them.
            Plan::Finish { .. } => (
                RecipientStatus::BouncedPermanent,
                format!("not sent again: {} ({})", verdict.class, verdict.rule),
                Applied::Recipients,
            ),
        };
        let Some(Moved { record, .. }) =
            self.move_recipients(record, &bounced, to, &detail).await?
        else {
            return Ok(Applied::NotYet);
        };
        match recipients::derive(&record.recipients) {
            Some(status) => match self.settle(event, &record, status).await? {
                Applied::Absorbed => Ok(applied),
                settled => Ok(settled),
            },
            None => Ok(applied),
        }
    }
}

impl Applier {
    /// A transient bounce of the send the record knows: record it, then resend through the
    /// policy or give up. `None` when the record is not in a state this applies to (the
    /// ordinary transition rules then decide).
    ///
    /// Crash safety: the record is `bounced_transient`, then the copy (generation + 1) is
    /// scheduled, then the record moves to `deferred` (generation + 1, `resend_of` = the bounced
    /// provider message id). The copy's claim takes either state (see `judge_claim`). If
    /// scheduling fails, the event is redelivered and schedules again, and the job meanwhile
    /// stays `bounced_transient`, never `deferred` with no copy coming; a redelivered event that
    /// finds the resend written (`resend_of`) is absorbed before it gets here (`Applier::apply`):
    /// its copy was scheduled before that write. Two copies of one generation are harmless: the
    /// claim lets one send and drops the other as a duplicate.
    pub(crate) async fn transient_bounce(
        &self,
        event: &SesEvent,
        record: &JobRecord,
    ) -> Result<Option<Applied>, StoreError> {
        let bounced = event.provider_message_id.clone().unwrap_or_default();
        // The bounce is of the send the record knows (or the record has no provider id yet).
        let same_send = record.provider_message_id.is_none()
            || record.provider_message_id.as_deref() == event.provider_message_id.as_deref();
        let now = self.clock.now();
        if record.provider_message_id.is_some() && event.provider_message_id.is_some() && !same_send
        {
            // A bounce of an earlier send (the record's id is this generation's: the claim
            // removes an earlier one): the later send is the one that counts.
            return Ok(Some(Applied::Absorbed));
        }
        // An acceptance kept as `unknown` (its sent status could not be written) with SES's id:
        // the bounce is of that very send, and the record keeps its body too.
        let kept_acceptance = record.status == Status::Unknown
            && record.provider_message_id.is_some()
            && record.provider_message_id.as_deref() == event.provider_message_id.as_deref();
        let bounced_send = kept_acceptance
            || same_send
                && matches!(
                    record.status,
                    Status::SentToProvider | Status::BouncedTransient
                );
        if !bounced_send {
            return Ok(None);
        }
        let Some(payload) = self.kept_body(record).await? else {
            // Nothing to send again from (sent through a provider without events, or before
            // payloads were kept): the transient bounce is recorded and stays.
            return Ok(None);
        };
        let EventKind::Failure(failure) = &event.kind else {
            return Ok(None);
        };
        let mut incoming = match parse_body(payload.as_bytes()) {
            Ok(incoming) => incoming,
            Err(rejected) => {
                warn!(message_id = ?event.message_id, error = %courier_core::mailbox::redact(&rejected.error.to_string()), "the kept payload does not parse; transient bounce recorded only");
                return Ok(None);
            }
        };
        // The copy is the record's next generation, which the resend write moves it to: the
        // kept body can be of an earlier one (an ambiguous send moves the record on to its
        // retry's generation, and SES's Send event then records the send there), and a copy of
        // that generation would be dropped as stale, the job left `deferred` (chaos seed 23511).
        incoming.attempt = record.attempt;
        let verdict = classify_ses_event(failure);
        if record.status == Status::SentToProvider || kept_acceptance {
            let mut update = update_of(record, Status::BouncedTransient, now);
            update.provider = Some("ses".into());
            update.detail = Some(describe(&event.kind));
            self.status.record(&update).await?;
        }
        match self.plan(&incoming, &verdict, now) {
            Plan::Retry { wait, detail, .. } => {
                let resend = Resend {
                    message_id: record.message_id.clone(),
                    attempt: record.attempt,
                    bounced,
                    detail,
                    now,
                    copy_due: wait.due(),
                };
                // The copy first: until it is scheduled the job stays `bounced_transient` (a
                // known end if scheduling never succeeds), never `deferred` with no copy coming.
                self.schedule(&wait).await?;
                if !self.status.resend(&resend).await? {
                    // Another event or resend moved the record first; the copy is then a
                    // duplicate its claim drops, or the one copy of this resend.
                    return Ok(Some(Applied::Absorbed));
                }
                info!(message_id = %record.message_id, delay_s = wait.requeue().delay_secs, mechanism = ?wait.mechanism(), "transient bounce; resend scheduled");
                Ok(Some(Applied::Resent))
            }
            Plan::DeadLetter { letter, .. } => {
                // First (idempotent): if a later step fails, the redelivered event does it again.
                self.suppress_softly(
                    &event.recipients,
                    &format!(
                        "soft: transient bounce gave up ({}, {}): {}",
                        verdict.class,
                        verdict.rule,
                        verdict.raw_code.as_deref().unwrap_or("")
                    ),
                )
                .await?;
                self.resender.dead_letters.put(&letter).await?;
                let mut update = update_of(record, Status::DeadLettered, now);
                update.detail = Some(format!("{}: {}", letter.category.as_str(), letter.reason));
                self.status.record(&update).await?;
                warn!(message_id = %record.message_id, category = letter.category.as_str(), "transient bounce past the give-up horizon; dead-lettered");
                Ok(Some(Applied::GaveUp(letter.category)))
            }
            // The policy finished it (e.g. a class that is not retried): the bounce stands.
            Plan::Finish { .. } => Ok(Some(Applied::Changed(Status::BouncedTransient))),
        }
    }

    /// The plan for a transient bounce of SES's send: the policy's decision through
    /// [`courier_core::plan::plan`], the same planning as the send function's (a bounce proves
    /// the provider did not deliver, so nothing waits for acceptance evidence).
    pub(crate) fn plan(&self, incoming: &Incoming, verdict: &Verdict, now: DateTime<Utc>) -> Plan {
        let live = self
            .resender
            .live_policy
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let decision = live.as_deref().unwrap_or(&self.resender.policy).decide_job(
            incoming,
            verdict,
            now,
            &self.resender.rng,
        );
        let failure = Failure {
            incoming,
            verdict,
            provider: Some("ses"),
            acceptance: Acceptance::Refused,
            now,
            grace: Duration::ZERO,
        };
        plan::plan(&failure, decision)
    }

    /// Writes the record of a part whose copy `wait` schedules: `deferred` at the copy's
    /// generation, due when the wait ends, with the part's body (what `courierctl requeue` puts
    /// back if the copy is lost). Nothing when it has a record already (its copy came first, or
    /// a redelivered event).
    async fn expect_part(
        &self,
        part: &Incoming,
        wait: &Wait,
        whole: &str,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let payload = claim_check::keep(&*self.resender.payloads, current_body(part)).await?;
        let expected = Expected {
            message_id: part.job.message_id.clone(),
            attempt: part.attempt + 1,
            detail: format!("resend of some recipients of {whole} after a transient bounce"),
            now,
            copy_due: wait.due(),
            payload: Some(payload),
            trace_id: part.trace.clone(),
            facts: JobFacts::of(&part.job),
        };
        self.status.expect(&expected).await?;
        Ok(())
    }

    /// Schedules the resend's copy as its [`Wait`] says (the state machine, or the queue).
    pub(crate) async fn schedule(&self, wait: &Wait) -> Result<(), StoreError> {
        if !wait.via_queue() {
            return self.resender.scheduler.start_wait(wait.requeue()).await;
        }
        self.resender
            .scheduler
            .enqueue(std::slice::from_ref(wait.requeue()))
            .await
            .into_iter()
            .next()
            .unwrap_or_else(|| Err(StoreError::msg("resend", "no result for the re-enqueue")))
    }
}
