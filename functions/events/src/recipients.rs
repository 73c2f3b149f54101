//! Per-recipient outcomes: an event moves the recipients it names, and the job's status follows
//! them ([`courier_core::recipients`]).

use courier_core::ports::{JobRecord, StoreError};
use courier_core::recipients::{self, RecipientStatus};
use courier_core::status::Status;

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
    /// Moves the recipients `event` names to what `to` means for them, then says which job
    /// status follows. A record without recipients (written before they were kept), an event
    /// naming none of them, and a transient bounce (the job's resend decides) keep `to`.
    pub(crate) async fn follow(
        &self,
        event: &SesEvent,
        mut record: JobRecord,
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
        let mut tries = 0;
        let (roll, moved) = loop {
            let Some(change) = recipients::apply(
                &record.recipients,
                &record.recipient_log,
                record.recipients_version,
                &event.recipients,
                target,
                self.clock.now(),
                Some(&detail),
            ) else {
                break (record.recipients.clone(), false);
            };
            if self
                .status
                .update_recipients(&record.message_id, &change)
                .await?
            {
                break (recipients::applied(&record.recipients, &change), true);
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
                None => return Ok(Follow::Gone),
            }
        };
        if to == Status::BouncedTransient {
            return Ok(Follow::Job(Box::new(record), to));
        }
        match recipients::derive(&roll) {
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
}
