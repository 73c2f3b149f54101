//! Per-recipient outcomes: an event moves the recipients it names, and the job's status follows
//! them ([`courier_core::recipients`]).

use courier_core::envelope::parse_body;
use courier_core::ports::{JobRecord, StoreError};
use courier_core::recipients::{self, RecipientFill, RecipientStatus};
use courier_core::status::Status;
use tracing::info;

use crate::{Applier, SesEvent, describe};

/// How often a recipient change is computed again when another write moved the recipients
/// between the read and the write (events of one message arrive together).
const TRIES: usize = 5;

/// What the recipients an event names make of the job.
#[derive(Debug)]
pub(crate) enum Follow {
    /// Apply this status to the job (as read after the recipients' write).
    Job(Box<JobRecord>, Status),
    /// The recipients moved; the job waits for its other recipients.
    Waits,
    /// Nothing moved (a repeat or a late event) and nothing follows.
    Absorbed,
    /// The record is gone.
    Gone,
}

impl Applier {
    /// A send recorded without its recipients (SES's Send event recorded it, the send function
    /// gone before its own status write) gets its list before the event moves any of them: the
    /// kept body's recipients in their roles, `sent` where SES's `mail.destination` names them
    /// (else `suppressed`: the send left them out). So each recipient's outcome is its own, and
    /// a transient bounce resends only the bounced ones, as for a send the send function
    /// recorded. The record as it is after (read again); `None` when it is gone.
    pub(crate) async fn fill(
        &self,
        event: &SesEvent,
        record: JobRecord,
    ) -> Result<Option<JobRecord>, StoreError> {
        let Some(provider_id) = &event.provider_message_id else {
            return Ok(Some(record));
        };
        if record.payload.is_none()
            || !record.recipients.is_empty()
            || !recipients::FILLABLE.contains(&record.status)
            || record.provider_message_id.as_ref() != Some(provider_id)
        {
            return Ok(Some(record));
        }
        let Some(body) = self.kept_body(&record).await? else {
            return Ok(Some(record));
        };
        let Some(list) = parse_body(body.as_bytes())
            .ok()
            .and_then(|kept| recipients::reached(&kept.job, &event.destination))
        else {
            return Ok(Some(record));
        };
        let fill = RecipientFill {
            attempt: record.attempt,
            provider_message_id: provider_id.clone(),
            list,
            at: self.clock.now(),
            detail: "accepted by ses (the recipients its event names)".into(),
        };
        if self
            .status
            .fill_recipients(&record.message_id, &fill)
            .await?
        {
            info!(message_id = %record.message_id, recipients = fill.list.len(), "a send recorded without its recipients: its list written from SES's event");
        }
        self.status.get(&record.message_id).await
    }

    /// Moves the recipients `event` names to what `to` means for them, then says which job
    /// status follows. A record without recipients (written before they were kept), an event
    /// naming none of them, and a transient bounce (the job's resend decides) keep `to`.
    pub(crate) async fn follow(
        &self,
        event: &SesEvent,
        record: JobRecord,
        to: Status,
    ) -> Result<Follow, StoreError> {
        let Some(target) = RecipientStatus::of_status(to) else {
            return Ok(Follow::Job(Box::new(record), to));
        };
        let named = |r: &&String| {
            let key = courier_core::mailbox::address_key(r);
            record.recipients.iter().any(|k| k.address == key)
        };
        if !event.recipients.iter().any(|r| named(&r)) {
            // No recipients kept, or the event names none of them (not what SES sends): the
            // job as a whole, as before recipients were kept.
            return Ok(Follow::Job(Box::new(record), to));
        }
        let detail = describe(&event.kind);
        let Some(Moved { record, moved }) = self
            .move_recipients(record, &event.recipients, target, &detail)
            .await?
        else {
            return Ok(Follow::Gone);
        };
        if to == Status::BouncedTransient {
            return Ok(Follow::Job(Box::new(record), to));
        }
        match recipients::derive(&record.recipients) {
            Some(derived) => Ok(Follow::Job(Box::new(record), derived)),
            // Provider evidence still resolves an ambiguous send: an accepted message must never
            // be sent again after the grace window.
            None if record.status == Status::Unknown => {
                Ok(Follow::Job(Box::new(record), Status::SentToProvider))
            }
            None if moved => Ok(Follow::Waits),
            None => Ok(Follow::Absorbed),
        }
    }

    /// Moves the recipients of `record` that `addresses` name to `target` (forward only), with
    /// `detail` in their timelines, written at the version they were computed from (computed
    /// again from a fresh read when another write came first). `None` when the record is gone.
    pub(crate) async fn move_recipients(
        &self,
        mut record: JobRecord,
        addresses: &[String],
        target: RecipientStatus,
        detail: &str,
    ) -> Result<Option<Moved>, StoreError> {
        let mut tries = 0;
        loop {
            let Some(change) = recipients::apply(
                &record.recipients,
                &record.recipient_log,
                record.recipients_version,
                addresses,
                target,
                self.clock.now(),
                Some(detail),
            ) else {
                return Ok(Some(Moved {
                    record,
                    moved: false,
                }));
            };
            if self
                .status
                .update_recipients(&record.message_id, &change)
                .await?
            {
                // The record as the write left it.
                record.recipients = recipients::applied(&record.recipients, &change);
                record.recipient_log.extend(change.log);
                record.recipients_version = change.version + 1;
                return Ok(Some(Moved {
                    record,
                    moved: true,
                }));
            }
            tries += 1;
            if tries == TRIES {
                return Err(StoreError::msg(
                    "events recipients",
                    "the record's recipients kept changing under five writes",
                ));
            }
            match self.status.get(&record.message_id).await? {
                Some(again) => record = again,
                None => return Ok(None),
            }
        }
    }
}

/// What [`Applier::move_recipients`] did.
pub(crate) struct Moved {
    /// The record, with its recipients as the write left them.
    pub(crate) record: JobRecord,
    /// Whether any recipient moved.
    pub(crate) moved: bool,
}
