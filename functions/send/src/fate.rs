//! A record's fate: decided once as one [`Fate`] value, carried out by the one exhaustive
//! match in [`Pipeline::carry_out`]. Errors keep their type ([`Cause`]) until the batch report.

use courier_core::plan::{Plan, Wait};
use courier_core::ports::{JobRecord, StoreError};

use super::*;

/// What becomes of one record.
#[derive(Debug)]
pub(crate) enum Fate {
    /// Nothing (more) to write: acknowledge (a duplicate or a stale copy).
    Ack(Outcome),
    /// Leave it for SQS to redeliver.
    Redeliver(Cause),
    /// The copy waits: through the queue (in the batch's one re-enqueue call) or the state
    /// machine (started at once); then the record says `then`.
    Wait {
        wait: Wait,
        then: Option<StatusUpdate>,
        outcome: Outcome,
    },
    /// The job's home is this letter; then the record says so ([`Lettered`]).
    DeadLetter {
        letter: Box<DeadLetter>,
        then: Lettered,
        outcome: Outcome,
    },
    /// Suppress `suppress` (a dead recipient, for `reason`), then write the final status.
    Finish {
        suppress: Vec<String>,
        reason: String,
        update: StatusUpdate,
        outcome: Outcome,
    },
    /// Move the record forward without a lease (every recipient suppressed, or an acceptance
    /// kept as `unknown` by an earlier copy).
    Record {
        update: StatusUpdate,
        outcome: Outcome,
    },
    /// The provider accepted the mail: write `sent_to_provider` while `send_by` allows; when
    /// it cannot be written, keep the acceptance as `unknown` (never release the lease). Then
    /// the breaker counts the success, and `suppress` (recipients it refused as dead: address,
    /// reason) are suppressed.
    Accepted {
        update: StatusUpdate,
        send_by: DateTime<Utc>,
        latency: Duration,
        suppress: Vec<(String, String)>,
        /// A copy of this generation carrying the acceptance ([`accepted_body`]), queued if the
        /// status write fails, so the acceptance outlives this instance.
        carrier: Requeue,
    },
    /// The provider may have the mail: nothing follows until `unknown` is durable; then
    /// `then`, whose failures keep `unknown`.
    Ambiguous {
        unknown: StatusUpdate,
        then: Box<Fate>,
    },
}

/// The status write that follows a durable dead letter.
#[derive(Debug)]
pub(crate) enum Lettered {
    /// None: the body is not a job, or a generation-0 copy refused before its claim.
    Nothing,
    /// The lease holder's `dead_lettered` ([`StatusStore::finish`]).
    Finish(StatusUpdate),
    /// A copy dead-lettered before its claim: `dead_lettered` on a record still waiting for
    /// that generation ([`StatusStore::abandon`]; a first copy has none).
    Abandon(StatusUpdate),
}

/// What this copy holds while its fate is carried out: what a failure does to the record.
#[derive(Debug, Clone)]
pub(crate) enum Holding {
    /// No lease (not claimed yet, or not claimable).
    Nothing,
    /// The job's lease: a failure releases it as `deferred`, so the redelivered copy can claim
    /// at once.
    Lease {
        message_id: String,
        owner: String,
        attempt: u32,
    },
    /// `unknown` is durable, or the lease must expire into it: a failure keeps it.
    Unknown,
}

/// Text for a log line or a batch report's reason: a panic's message can quote a recipient
/// ([`redact`]).
fn redacted(text: &impl std::fmt::Display) -> String {
    redact(&text.to_string())
}

/// Why a record is left for redelivery (logged, and in the batch report's reasons: whatever
/// text it carries from a panic is redacted).
#[derive(Debug, thiserror::Error)]
pub enum Cause {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("leased by another invocation until {until}")]
    Busy { until: DateTime<Utc> },
    #[error("the claim reported {hits} suppressed addresses it was not asked about")]
    UnaskedSuppression { hits: usize },
    /// The panic's message, as it was (it may quote an address): shown redacted.
    #[error("the record's task panicked after calling the provider: {}", redacted(.0))]
    PanickedAfterCall(String),
    /// A join error shows its task's panic message: shown redacted.
    #[error("the record's task failed: {}", redacted(.0))]
    Task(#[source] tokio::task::JoinError),
    #[error(
        "the send's outcome is ambiguous and unknown could not be written ({tries} tries: {source}); the lease expires into unknown"
    )]
    UnknownNotWritten {
        tries: u32,
        #[source]
        source: StoreError,
    },
    #[error(
        "sent, but the status write failed {tries} times ({source}); kept as unknown with the provider's id"
    )]
    AcceptedKeptUnknown {
        tries: u32,
        #[source]
        source: StoreError,
    },
    #[error(
        "sent, but neither the status ({source}) nor unknown ({unknown}) could be written; the lease expires into unknown{}",
        carrier_note(.carrier_queued)
    )]
    AcceptedNotWritten {
        #[source]
        source: StoreError,
        unknown: StoreError,
        carrier_queued: bool,
    },
}

/// What became of the copy carrying an acceptance that could not be written.
fn carrier_note(queued: &bool) -> &'static str {
    if *queued {
        "; the copy carrying the acceptance will record it sent"
    } else {
        " (the copy carrying the acceptance could not be queued either)"
    }
}

/// What carrying out a fate left to do.
#[derive(Debug)]
pub(crate) enum Step {
    /// Its next home is durable: acknowledge.
    Done(Outcome),
    /// Left for redelivery (the lease already released or kept, as [`Holding`] said).
    Redeliver(Cause),
    /// Acknowledge once the batch's re-enqueue of `requeue` is written, then write `then`.
    Queue {
        requeue: Requeue,
        then: Option<Box<StatusUpdate>>,
        outcome: Outcome,
        holding: Holding,
    },
}

impl Pipeline {
    /// Carries out `fate` for a copy holding `holding`: the one place a record's fate is acted on.
    pub(crate) async fn carry_out(&self, fate: Fate, holding: Holding) -> Step {
        match fate {
            Fate::Ack(outcome) => Step::Done(outcome),
            Fate::Redeliver(cause) => self.redeliver(cause, &holding).await,
            Fate::Wait {
                wait,
                then,
                outcome,
            } => {
                if wait.via_queue() {
                    return Step::Queue {
                        requeue: wait.into_requeue(),
                        then: then.map(Box::new),
                        outcome,
                        holding,
                    };
                }
                if let Err(e) = self.scheduler.start_wait(wait.requeue()).await {
                    return self.redeliver(e.into(), &holding).await;
                }
                if let Some(then) = then
                    && let Err(e) = self.status.finish(&then).await
                {
                    // The running wait is the copy's durable home; its claim takes the next
                    // generation whatever the record says meanwhile.
                    warn!(error = %e, "status write after starting the wait failed");
                }
                Step::Done(outcome)
            }
            Fate::DeadLetter {
                letter,
                then,
                outcome,
            } => {
                if let Err(e) = self.dead_letters.put(&letter).await {
                    return self.redeliver(e.into(), &holding).await;
                }
                match then {
                    Lettered::Nothing => {}
                    Lettered::Finish(then) => {
                        if let Err((tries, e)) =
                            self.finish_durably(&then, self.write_deadline()).await
                        {
                            // The letter is durable and is the job's home; its record still
                            // says processing (the sweeper marks it unknown), which
                            // `courierctl status` shows next to the letter.
                            warn!(error = %e, tries, "status write after dead-lettering failed");
                        }
                    }
                    Lettered::Abandon(then) => self.abandon_durably(&then).await,
                }
                warn!(category = letter.category.as_str(), class = %letter.class, rule = %letter.rule, "dead-lettered");
                Step::Done(outcome)
            }
            Fate::Finish {
                suppress,
                reason,
                update,
                outcome,
            } => {
                for address in &suppress {
                    if let Err(e) = self
                        .suppression
                        .suppress(address, &reason, update.now)
                        .await
                    {
                        // The answer may have been lost after the write landed.
                        let listed = self
                            .suppression
                            .suppressed(std::slice::from_ref(address), update.now)
                            .await
                            .is_ok_and(|hit| !hit.is_empty());
                        if !listed {
                            return self.redeliver(e.into(), &holding).await;
                        }
                    }
                }
                match self.finish_durably(&update, self.write_deadline()).await {
                    Ok(()) => {
                        info!(status = %update.status, detail = update.detail.as_deref().unwrap_or(""), "finished");
                        Step::Done(outcome)
                    }
                    Err((_, e)) => self.redeliver(e.into(), &holding).await,
                }
            }
            Fate::Record { update, outcome } => match self.status.record(&update).await {
                Ok(()) => Step::Done(outcome),
                Err(e) => self.redeliver(e.into(), &holding).await,
            },
            Fate::Accepted {
                update,
                send_by,
                latency,
                suppress,
                carrier,
            } => {
                // The acceptance is written first: until it is durable a crash leaves a mail
                // out and unrecorded (a recorded duplicate later), so nothing else may come
                // before it, not even the breaker's bookkeeping (which can read the shared
                // state, behind the other records' reads and writes).
                let (provider, at) = (update.provider.clone().unwrap_or_default(), update.now);
                let step = self
                    .keep_acceptance(update, send_by, latency, carrier)
                    .await;
                self.breakers.record(&provider, false, at).await;
                for (address, reason) in &suppress {
                    // The mail is out: nothing may send it again, so a failed write here only
                    // costs the address one more refusal (the next send suppresses it then).
                    if let Err(e) = self.suppression.suppress(address, reason, at).await {
                        warn!(error = %e, "a refused recipient could not be suppressed");
                    }
                }
                step
            }
            Fate::Ambiguous { unknown, then } => {
                if let Err((tries, source)) =
                    self.finish_durably(&unknown, self.write_deadline()).await
                {
                    return Step::Redeliver(Cause::UnknownNotWritten { tries, source });
                }
                Box::pin(self.carry_out(*then, Holding::Unknown)).await
            }
        }
    }

    /// Leaves a record for redelivery, after [`Pipeline::release`].
    pub(crate) async fn redeliver(&self, cause: Cause, holding: &Holding) -> Step {
        self.release(holding).await;
        Step::Redeliver(cause)
    }

    /// Before a record is left for redelivery: a held lease is released as `deferred` (the
    /// failure proves nothing was sent), anything else stays as written.
    pub(crate) async fn release(&self, holding: &Holding) {
        match holding {
            Holding::Lease {
                message_id,
                owner,
                attempt,
            } => {
                let release = StatusUpdate::new(
                    message_id.clone(),
                    owner.clone(),
                    Status::Deferred,
                    *attempt,
                    self.now(),
                );
                if let Err(e) = self.status.finish(&release).await {
                    warn!(error = %e, "could not release the lease");
                }
            }
            Holding::Nothing | Holding::Unknown => {}
        }
    }

    /// The fate a failure's [`Plan`] leads to, for a job leased by `owner`.
    pub(crate) fn fate_of(
        &self,
        plan: Plan,
        incoming: &Incoming,
        verdict: &Verdict,
        provider: Option<&str>,
        owner: &str,
        now: DateTime<Utc>,
    ) -> Fate {
        let job = &incoming.job;
        let update = |status: Status, attempt: u32, detail: String| StatusUpdate {
            provider: provider.map(str::to_owned),
            detail: Some(detail),
            ..StatusUpdate::new(job.message_id.clone(), owner, status, attempt, now)
        };
        match plan {
            Plan::Retry {
                wait,
                status,
                detail,
            } => {
                info!(class = %verdict.class, rule = %verdict.rule, delay_s = wait.requeue().delay_secs, mechanism = ?wait.mechanism(), "retry scheduled");
                let then = StatusUpdate {
                    copy_due: Some(wait.due()),
                    ..update(status, incoming.attempt + 1, detail)
                };
                Fate::Wait {
                    wait,
                    then: Some(then),
                    outcome: if status == Status::Unknown {
                        Outcome::Ambiguous
                    } else {
                        Outcome::Retried(verdict.class)
                    },
                }
            }
            Plan::DeadLetter { letter, detail } => Fate::DeadLetter {
                outcome: Outcome::DeadLettered(letter.category, verdict.class),
                then: Lettered::Finish(update(Status::DeadLettered, incoming.attempt, detail)),
                letter,
            },
            Plan::Finish {
                status,
                suppress,
                reason,
                detail,
            } => Fate::Finish {
                suppress,
                reason,
                update: update(status, incoming.attempt, detail),
                outcome: Outcome::Bounced(verdict.class),
            },
        }
    }

    /// The provider accepted the mail: its `sent_to_provider` write is tried again (with
    /// backoff, `status_write_tries` times at most, while the lease lasts). After its first
    /// failure, or when the first try has not answered within `SendConfig::carrier_after`,
    /// `carrier` (a copy of this generation carrying the acceptance) is queued once:
    /// whichever instance takes it records the job sent without sending, so the acceptance
    /// outlives this one. When the write cannot be made, the acceptance is kept as `unknown`
    /// with the provider's id and answer, and the record is left for redelivery: the
    /// redelivered copy finds it (see [`Pipeline::resolve_accepted`]) and records it sent
    /// without sending. When neither write can be made, the lease is left to expire into
    /// `unknown` (never released as `deferred`, which would send again).
    async fn keep_acceptance(
        &self,
        update: StatusUpdate,
        send_by: DateTime<Utc>,
        latency: Duration,
        carrier: Requeue,
    ) -> Step {
        let mut carrier = Some(carrier);
        let (tries, source) = match self
            .finish_durably_with(&update, send_by, &mut carrier)
            .await
        {
            Ok(()) => {
                info!(
                    provider = update.provider.as_deref().unwrap_or(""),
                    provider_message_id = update.provider_message_id.as_deref().unwrap_or(""),
                    latency_ms = latency.as_millis() as u64,
                    "sent"
                );
                return Step::Done(Outcome::Sent { latency });
            }
            Err(failed) => failed,
        };
        let provider = update.provider.clone().unwrap_or_default();
        let provider_message_id = update.provider_message_id.clone().unwrap_or_default();
        let unknown = StatusUpdate {
            status: Status::Unknown,
            detail: Some(format!(
                "{ACCEPTED_DETAIL} {provider} as {provider_message_id}; the sent status could not be written: {source}"
            )),
            ..update
        };
        let cause = match self.status.finish(&unknown).await {
            Ok(()) => Cause::AcceptedKeptUnknown { tries, source },
            Err(second) => {
                // Nothing in the status table says the provider took it: keep the answer in
                // this instance, and on the queue if the carrier could not be queued yet.
                if let Some(pending) = carrier.take() {
                    carrier = self.queue_carrier(pending).await;
                }
                self.acceptances.remember(&StatusUpdate {
                    status: Status::SentToProvider,
                    detail: Some(format!(
                        "{ACCEPTED_DETAIL} {provider} as {provider_message_id} (recorded later: the status table could not be written then)"
                    )),
                    ..unknown.clone()
                });
                Cause::AcceptedNotWritten {
                    source,
                    unknown: second,
                    carrier_queued: carrier.is_none(),
                }
            }
        };
        self.redeliver(cause, &Holding::Unknown).await
    }

    /// The first write of an acceptance; if it has not answered within
    /// `SendConfig::carrier_after`, `carrier` is queued while it goes on (taken once queued).
    async fn first_write_or_carrier(
        &self,
        update: &StatusUpdate,
        carrier: &mut Option<Requeue>,
    ) -> Result<(), StoreError> {
        let write = self.status.finish(update);
        tokio::pin!(write);
        tokio::select! {
            written = &mut write => written,
            () = tokio::time::sleep(self.config.carrier_after) => {
                let pending = carrier.take();
                let (left, written) = tokio::join!(
                    async {
                        match pending {
                            Some(p) => self.queue_carrier(p).await,
                            None => None,
                        }
                    },
                    &mut write,
                );
                *carrier = left;
                written
            }
        }
    }

    /// Queues the copy that carries a provider's acceptance; gives it back when it could not be
    /// queued.
    async fn queue_carrier(&self, carrier: Requeue) -> Option<Requeue> {
        let result = self.scheduler.enqueue(std::slice::from_ref(&carrier)).await;
        match result.into_iter().next() {
            Some(Ok(())) => {
                info!(
                    "the status write failed or has not answered: queued a copy carrying the provider's acceptance"
                );
                None
            }
            Some(Err(e)) => {
                warn!(error = %e, "the copy carrying the provider's acceptance could not be queued");
                Some(carrier)
            }
            None => Some(carrier),
        }
    }

    /// Writes `update` (`dead_lettered`) on a record that waited for the copy just
    /// dead-lettered before its claim, trying again like [`Pipeline::finish_durably`]. A record
    /// that is absent (a first copy) or moved on is left as it is. When every try fails, the
    /// letter is still the job's home: the record stays waiting, the sweeper flags it once its
    /// copy is overdue, and `courierctl status` shows it next to the letter.
    async fn abandon_durably(&self, update: &StatusUpdate) {
        let mut tries = Tries::new(self.config.status_write_tries, self.write_deadline());
        loop {
            let error = match self.status.abandon(update).await {
                Ok(true) => {
                    info!(
                        attempt = update.attempt,
                        "the record waiting for this copy says dead_lettered"
                    );
                    return;
                }
                Ok(false) => return,
                Err(e) => e,
            };
            let Some(wait) = tries.failed(self.now()) else {
                warn!(error = %error, tries = tries.made, "status write after dead-lettering an unclaimed copy failed");
                return;
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// Writes `update` (the outcome of this lease), trying again with backoff after a failure,
    /// `SendConfig::status_write_tries` times at most (the waits between tries double from
    /// 50 ms to at most 1 s) and while `until` allows. A write whose answer was
    /// lost after it landed counts as made: after a failure the record is read, and if it
    /// already holds this update (status, generation, writer) nothing is written again. On
    /// failure: the tries made and the last error.
    pub(crate) async fn finish_durably(
        &self,
        update: &StatusUpdate,
        until: DateTime<Utc>,
    ) -> Result<(), (u32, StoreError)> {
        self.finish_durably_with(update, until, &mut None).await
    }

    /// [`Pipeline::finish_durably`], queueing `carrier` after the first failed write (taken
    /// once it is queued, left when it could not be).
    async fn finish_durably_with(
        &self,
        update: &StatusUpdate,
        until: DateTime<Utc>,
        carrier: &mut Option<Requeue>,
    ) -> Result<(), (u32, StoreError)> {
        let mut tries = Tries::new(self.config.status_write_tries, until);
        loop {
            let written = if tries.made == 0 && carrier.is_some() {
                self.first_write_or_carrier(update, carrier).await
            } else {
                self.status.finish(update).await
            };
            let error = match written {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if let Ok(Some(record)) = self.status.get(&update.message_id).await
                && (written_already(&record, update) || recorded_by_events(&record, update))
            {
                return Ok(());
            }
            if let Some(pending) = carrier.take() {
                *carrier = self.queue_carrier(pending).await;
            }
            let Some(wait) = tries.failed(self.now()) else {
                return Err((tries.made, error));
            };
            warn!(error = %error, tries = tries.made, status = %update.status, "status write failed; trying again");
            tokio::time::sleep(wait).await;
        }
    }
}

/// The tries of a status write: at most `most`, the waits between them doubling from 50 ms to
/// at most 1 s, none ending at or after `until`.
struct Tries {
    made: u32,
    most: u32,
    wait: Duration,
    until: DateTime<Utc>,
}

impl Tries {
    fn new(most: u32, until: DateTime<Utc>) -> Tries {
        Tries {
            made: 0,
            most,
            wait: Duration::from_millis(50),
            until,
        }
    }

    /// Counts a failed try at `now`: the wait before the next one, or `None` when none is left.
    fn failed(&mut self, now: DateTime<Utc>) -> Option<Duration> {
        self.made += 1;
        let wait = self.wait;
        let next = now + chrono::Duration::from_std(wait).unwrap_or_default();
        if self.made >= self.most || next >= self.until {
            return None;
        }
        self.wait = (wait * 2).min(Duration::from_secs(1));
        Some(wait)
    }
}

/// Whether `update` landed although its answer was lost.
fn written_already(record: &JobRecord, update: &StatusUpdate) -> bool {
    record.status == update.status
        && record.attempt == update.attempt
        && record
            .history
            .last()
            .is_some_and(|h| h.status == update.status && h.by == update.owner)
}

/// Whether the events function recorded this very send (the provider's id) first, which ends
/// the lease: SES's Send event or a later event of it, or the resend after its transient bounce.
/// The acceptance is durable then; this write has nothing to add.
fn recorded_by_events(record: &JobRecord, update: &StatusUpdate) -> bool {
    let Some(sent) = update.provider_message_id.as_deref() else {
        return false;
    };
    let this_send = record.attempt == update.attempt
        && record.status.is_sent()
        && record.provider_message_id.as_deref() == Some(sent);
    let resent = record.attempt > update.attempt && record.resend_of.as_deref() == Some(sent);
    update.status == Status::SentToProvider && (this_send || resent)
}

#[cfg(test)]
mod tries_tests {
    use super::*;

    #[test]
    fn a_status_write_is_tried_the_configured_times_with_doubling_waits_before_its_deadline() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        // Bounded by the count: 50, 100, 200, 400, 800 ms, then 1 s each.
        let mut tries = Tries::new(8, now + chrono::Duration::hours(1));
        let waits: Vec<u128> = std::iter::from_fn(|| tries.failed(now))
            .map(|w| w.as_millis())
            .collect();
        assert_eq!(waits, [50, 100, 200, 400, 800, 1000, 1000]);
        assert_eq!(tries.made, 8);
        // Bounded by the deadline: no wait that ends at or after it.
        let mut tries = Tries::new(100, now + chrono::Duration::milliseconds(120));
        assert_eq!(tries.failed(now), Some(Duration::from_millis(50)));
        assert_eq!(tries.failed(now), Some(Duration::from_millis(100)));
        assert_eq!(tries.failed(now), None, "200 ms from now is past it");
        let mut tries = Tries::new(100, now + chrono::Duration::milliseconds(120));
        assert_eq!(tries.failed(now + chrono::Duration::milliseconds(70)), None);
        // One try configured: none again.
        assert_eq!(
            Tries::new(1, now + chrono::Duration::hours(1)).failed(now),
            None
        );
    }
}
