//! After a failure: the policy's decision, then the re-enqueue, the wait, the dead letter or the
//! ambiguous record it leads to.

use super::*;

impl Pipeline {
    /// The retry policy's decision for a failure of `class` at `now` (with the shared jitter).
    pub(crate) fn decide(
        &self,
        incoming: &Incoming,
        class: ErrorClass,
        now: DateTime<Utc>,
    ) -> Decision {
        let mut rng = self
            .rng
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.policy.decide(
            incoming.job.priority,
            class,
            &incoming.retry,
            now,
            incoming.job.not_after,
            &mut *rng as &mut dyn RandomSource,
        )
    }

    /// Classifies and acts on a failure (steps 8): retry, dead letter or terminal status.
    ///
    /// An `ambiguous` failure (the provider may have the message) counts as an attempt like any
    /// other, but the job is marked `unknown` and its retry waits at least the grace window, so
    /// provider events can resolve it before anything is sent again.
    pub(crate) async fn after_failure(
        &self,
        incoming: &Incoming,
        verdict: Verdict,
        provider: Option<String>,
        now: DateTime<Utc>,
        owner: &str,
        ambiguous: bool,
    ) -> Step {
        if verdict.class == ErrorClass::Unknown {
            self.note_unknown_code(&verdict, provider.as_deref(), now)
                .await;
        }
        if !ambiguous {
            return self
                .act_on_failure(incoming, verdict, provider, now, owner, false)
                .await;
        }
        // The provider may have the mail: nothing else happens until `unknown` is durable. If
        // it cannot be written, the lease is left to expire into `unknown` (the claim's rule).
        let mut unknown = self.update(
            incoming.job.message_id.clone(),
            owner.to_owned(),
            Status::Unknown,
            incoming.attempt,
            now,
        );
        unknown.provider = provider.clone();
        unknown.detail = Some(format!(
            "{} ({}): the provider may have the message",
            verdict.class, verdict.rule
        ));
        if let Err((tries, e)) = self.finish_durably(&unknown, self.write_deadline()).await {
            return Step::FailKeepStatus(format!(
                "the send's outcome is ambiguous and unknown could not be written ({tries} tries: {e}); the lease expires into unknown"
            ));
        }
        // From here a failed write must not release the lease as `deferred`: keep `unknown`.
        match self
            .act_on_failure(incoming, verdict, provider, now, owner, true)
            .await
        {
            Step::Fail(reason) => Step::FailKeepStatus(reason),
            step => step,
        }
    }

    /// [`Pipeline::after_failure`] once an ambiguous outcome is durably `unknown`.
    async fn act_on_failure(
        &self,
        incoming: &Incoming,
        verdict: Verdict,
        provider: Option<String>,
        now: DateTime<Utc>,
        owner: &str,
        ambiguous: bool,
    ) -> Step {
        let job = &incoming.job;
        let decision = self.decide(incoming, verdict.class, now);
        match decision {
            Decision::Retry {
                delay,
                spends_attempt,
            } => {
                // An ambiguous outcome waits at least the grace window for provider evidence.
                let delay = if ambiguous {
                    delay.max(self.config.ambiguity_grace)
                } else {
                    delay
                };
                let mut retry = incoming.retry.clone();
                retry.record(verdict.class, spends_attempt, delay.as_secs(), now);
                let mut history = incoming.history.clone();
                history.push(attempt_record(
                    &verdict,
                    provider.clone(),
                    now,
                    spends_attempt,
                    Some(delay.as_secs()),
                ));
                let requeue = Requeue {
                    message_id: job.message_id.clone(),
                    body: next_body(incoming, retry, history),
                    delay_secs: delay.as_secs(),
                };
                let waiting = if ambiguous {
                    Status::Unknown
                } else {
                    Status::Deferred
                };
                let mut then = self.update(
                    job.message_id.clone(),
                    owner.to_owned(),
                    waiting,
                    incoming.attempt + 1,
                    now,
                );
                then.provider = provider;
                then.detail = Some(format!(
                    "{} ({}); retry in {} s",
                    verdict.class,
                    verdict.rule,
                    delay.as_secs()
                ));
                info!(class = %verdict.class, rule = %verdict.rule, delay_s = delay.as_secs(), "retry scheduled");
                let outcome = if ambiguous {
                    Outcome::Ambiguous
                } else {
                    Outcome::Retried(verdict.class)
                };
                match self.wait(requeue, Some(then), outcome, now).await {
                    Step::Fail(e) if ambiguous => self.fail_ambiguous(incoming, owner, e).await,
                    step => step,
                }
            }
            Decision::DeadLetter { category, reason } => {
                let reason = if ambiguous {
                    format!(
                        "{reason}; the last attempt's outcome is unknown (the provider may have sent it)"
                    )
                } else {
                    reason
                };
                self.dead_letter(
                    incoming,
                    &verdict,
                    category,
                    reason,
                    provider,
                    now,
                    Some(owner),
                )
                .await
            }
            Decision::Finish {
                status,
                suppress_recipient,
            } => {
                if suppress_recipient && job.recipients().count() == 1 {
                    for address in job.recipients() {
                        let reason = format!(
                            "{}: {}",
                            verdict.rule,
                            verdict.raw_code.as_deref().unwrap_or("")
                        );
                        if let Err(e) = self.suppression.suppress(address, &reason, now).await {
                            // The answer may have been lost after the write landed.
                            let listed = self
                                .suppression
                                .suppressed(&[address.to_owned()], now)
                                .await
                                .is_ok_and(|hit| !hit.is_empty());
                            if !listed {
                                return Step::Fail(e.to_string());
                            }
                        }
                    }
                }
                let mut update = self.update(
                    job.message_id.clone(),
                    owner.to_owned(),
                    status,
                    incoming.attempt,
                    now,
                );
                update.provider = provider;
                update.detail = Some(format!("{} ({})", verdict.class, verdict.rule));
                match self.finish_durably(&update, self.write_deadline()).await {
                    Ok(()) => {
                        info!(%status, class = %verdict.class, rule = %verdict.rule, "finished");
                        Step::Done(Outcome::Bounced(verdict.class))
                    }
                    Err((_, e)) => Step::Fail(e.to_string()),
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn dead_letter(
        &self,
        incoming: &Incoming,
        verdict: &Verdict,
        category: DeadLetterCategory,
        reason: String,
        provider: Option<String>,
        now: DateTime<Utc>,
        owner: Option<&str>,
    ) -> Step {
        let job = &incoming.job;
        let letter = dead_letter_of(incoming, verdict, category, reason, provider.clone(), now);
        if let Err(e) = self.dead_letters.put(&letter).await {
            return Step::Fail(e.to_string());
        }
        if let Some(owner) = owner {
            let mut update = self.update(
                job.message_id.clone(),
                owner.to_owned(),
                Status::DeadLettered,
                incoming.attempt,
                now,
            );
            update.provider = provider;
            update.detail = Some(format!(
                "{} ({}): {}",
                category.as_str(),
                verdict.class,
                verdict.rule
            ));
            if let Err((tries, e)) = self.finish_durably(&update, self.write_deadline()).await {
                // The letter is durable and is the job's home; its record still says
                // processing (the sweeper marks it unknown), which `courierctl status` shows
                // next to the letter.
                warn!(error = %e, tries, "status write after dead-lettering failed");
            }
        }
        warn!(category = category.as_str(), class = %verdict.class, rule = %verdict.rule, "dead-lettered");
        Step::Done(Outcome::DeadLettered(category, verdict.class))
    }

    /// A record whose task panicked before any provider call: the job crashes the worker, so
    /// it is dead-lettered as poison now rather than crash every redelivery until SQS redrives
    /// it without a record. The status record, if this copy claimed it, becomes
    /// `dead_lettered`; a payload that does not even parse is an invalid job as usual.
    pub(crate) async fn poison_after_panic(&self, body: &str, owner: &str, what: &str) -> Step {
        let now = self.now();
        let incoming = match parse_body(body.as_bytes()) {
            Ok(incoming) => incoming,
            Err(rejected) => {
                let record = RecordIn {
                    sqs_message_id: String::new(),
                    body: body.to_owned(),
                };
                let print = job_fingerprint(body);
                return self.reject(&record, &rejected, &print, now).await;
            }
        };
        let verdict = Verdict::local(
            ErrorClass::Poison,
            "worker-panic",
            format!("the worker panicked on this job: {what}"),
        );
        warn!(message_id = %incoming.job.message_id, panic = %what, "the job crashed the worker; dead-lettered as poison");
        self.dead_letter(
            &incoming,
            &verdict,
            DeadLetterCategory::Poison,
            format!("crashed the worker: {what}"),
            None,
            now,
            Some(owner),
        )
        .await
    }

    /// An unparseable or invalid payload: dead letter with whatever ids could be salvaged.
    pub(crate) async fn reject(
        &self,
        record: &RecordIn,
        rejected: &Rejected,
        print: &str,
        now: DateTime<Utc>,
    ) -> Step {
        let verdict = Verdict::local(
            ErrorClass::InvalidJob,
            rejected.error.code(),
            rejected.error.to_string(),
        );
        let letter = DeadLetter {
            id: letter_id(
                rejected.message_id.as_deref(),
                print,
                0,
                DeadLetterCategory::InvalidJob,
            ),
            category: DeadLetterCategory::InvalidJob,
            reason: rejected.error.to_string(),
            message_id: rejected.message_id.clone(),
            campaign_id: rejected.campaign_id.clone(),
            trace_id: rejected.trace_id.clone(),
            recipients: Vec::new(),
            provider: None,
            class: ErrorClass::InvalidJob,
            rule: verdict.rule.clone(),
            raw_code: Some(rejected.error.code().to_owned()),
            raw_text: verdict.raw_text.clone(),
            attempts: 0,
            history: Vec::new(),
            first_failure_at: now,
            last_failure_at: now,
            fingerprint: print.to_owned(),
            payload: Some(record.body.clone()),
            payload_base64: None,
        };
        match self.dead_letters.put(&letter).await {
            Ok(()) => {
                warn!(code = rejected.error.code(), error = %rejected.error, "invalid job dead-lettered");
                Step::Done(Outcome::DeadLettered(
                    DeadLetterCategory::InvalidJob,
                    ErrorClass::InvalidJob,
                ))
            }
            Err(e) => Step::Fail(e.to_string()),
        }
    }

    pub(crate) async fn requeue_same(
        &self,
        record: &RecordIn,
        incoming: &Incoming,
        wait: u64,
    ) -> Step {
        let requeue = Requeue {
            message_id: incoming.job.message_id.clone(),
            body: record.body.clone(),
            delay_secs: wait,
        };
        self.schedule_same(requeue, Outcome::Ambiguous).await
    }

    /// A failure after an ambiguous send: mark the job `unknown` (so the redelivered copy waits
    /// for provider evidence) and leave the record for redelivery.
    pub(crate) async fn fail_ambiguous(
        &self,
        incoming: &Incoming,
        owner: &str,
        reason: String,
    ) -> Step {
        let update = self.update(
            incoming.job.message_id.clone(),
            owner.to_owned(),
            Status::Unknown,
            incoming.attempt,
            self.now(),
        );
        if let Err(e) = self.status.finish(&update).await {
            warn!(error = %e, "could not mark the ambiguous job unknown");
        }
        Step::FailKeepStatus(reason)
    }

    pub(crate) async fn schedule_same(&self, requeue: Requeue, outcome: Outcome) -> Step {
        self.wait(requeue, None, outcome, self.now()).await
    }

    /// Sends `requeue` on its wait, by the mechanism [`courier_core::delay::mechanism`] picks
    /// for its delay and size: the queue's delay (acknowledged once the batched re-enqueue is
    /// written, then `then` is written), the state machine (started here, then `then`), or hops
    /// through the queue for a copy too large for the state machine's input.
    pub(crate) async fn wait(
        &self,
        requeue: Requeue,
        then: Option<StatusUpdate>,
        outcome: Outcome,
        now: DateTime<Utc>,
    ) -> Step {
        let then = then.map(Box::new);
        match delay::mechanism(requeue.delay_secs, &requeue.body) {
            DelayMechanism::QueueDelay => Step::Requeue {
                requeue,
                then,
                outcome,
            },
            DelayMechanism::QueueHops => {
                info!(
                    delay_s = requeue.delay_secs,
                    bytes = requeue.body.len(),
                    "too large for the state machine's input; waiting through the queue in hops"
                );
                Step::Requeue {
                    requeue: delay::first_hop(requeue, now),
                    then,
                    outcome,
                }
            }
            DelayMechanism::StateMachine => match self.scheduler.start_wait(&requeue).await {
                Ok(()) => {
                    if let Some(then) = then
                        && let Err(e) = self.status.finish(&then).await
                    {
                        warn!(error = %e, "status write after starting the wait failed");
                    }
                    Step::Done(outcome)
                }
                Err(e) => Step::Fail(e.to_string()),
            },
        }
    }

    /// Until when a status write after a durable step (a dead letter, a bounce's suppression)
    /// may keep trying: the longest lease (its tries are bounded by `status_write_tries` too).
    pub(crate) fn write_deadline(&self) -> DateTime<Utc> {
        self.now() + chrono::Duration::from_std(self.config.max_lease).unwrap_or_default()
    }

    /// Records the first sighting of an error code that classified as `unknown`: a new kind of
    /// failure the classifier should learn (it raises the `NewUnknownErrorCode` metric).
    pub(crate) async fn note_unknown_code(
        &self,
        verdict: &Verdict,
        provider: Option<&str>,
        now: DateTime<Utc>,
    ) {
        let key = format!(
            "{}:{}",
            provider.unwrap_or("local"),
            verdict.raw_code.as_deref().unwrap_or("no-code")
        );
        match self.sightings.first_sighting(&key, now).await {
            Ok(true) => {
                warn!(code = %key, text = verdict.raw_text.as_deref().unwrap_or(""), "a new error code classified as unknown");
                self.new_codes
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(key);
            }
            Ok(false) => {}
            Err(e) => warn!(code = %key, error = %e, "could not record the error code's sighting"),
        }
    }
}
