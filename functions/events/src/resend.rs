//! A transient bounce of some recipients of a job with several: only they are sent again, as a
//! job of their own ([`part_id`]: the same for the same bounce, so a redelivered event's copy is
//! a duplicate its claim drops), in their roles; on this job they become `resent`.
//!
//! Crash safety: the recipients are `bounced_transient` (written by [`Applier::follow`]), then
//! the part's copy is scheduled (or its letter written), then they move to `resent`. A failure
//! in between leaves them `bounced_transient` and the event is redelivered, which schedules the
//! same part again.

use courier_core::classify::classify_ses_event;
use courier_core::envelope::parse_body;
use courier_core::mailbox::address_key;
use courier_core::plan::Plan;
use courier_core::ports::{JobRecord, StoreError};
use courier_core::recipients::{self, RecipientStatus, part_id};
use courier_core::status::Status;
use tracing::{info, warn};

use crate::recipients::Moved;
use crate::{Applied, Applier, EventKind, SesEvent};

/// Whether a transient bounce of `record`'s send resends a part of it: the job has several
/// recipients it sent to (a job of one is sent again whole).
pub(crate) fn resends_part(record: &JobRecord) -> bool {
    record
        .recipients
        .iter()
        .filter(|r| r.status != RecipientStatus::Suppressed)
        .count()
        > 1
}

impl Applier {
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
        let Some(payload) = &record.payload else {
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
