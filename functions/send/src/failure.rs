//! After a failure: the policy's decision, then the re-enqueue, the wait, the dead letter or the
//! ambiguous record it leads to.

use super::*;

impl Pipeline {
    /// The retry policy's decision for a failure with `verdict` at `now` (with the shared jitter).
    pub(crate) fn decide(
        &self,
        incoming: &Incoming,
        verdict: &Verdict,
        now: DateTime<Utc>,
    ) -> Decision {
        let live = self.live.as_ref().and_then(live::Live::policy);
        live.as_deref()
            .unwrap_or(&self.policy)
            .decide_job(incoming, verdict, now, &self.rng)
    }

    /// The fate of a failure (step 8): the policy's decision, planned by
    /// [`courier_core::plan::plan`] with what is known of the provider's acceptance.
    ///
    /// An `ambiguous` failure (the provider may have the message) counts as an attempt like any
    /// other, but nothing follows until the job is durably `unknown`, and its retry waits at
    /// least the grace window, so provider events can resolve it before anything is sent again.
    pub(crate) async fn after_failure(
        &self,
        incoming: &Incoming,
        verdict: Verdict,
        provider: Option<&str>,
        now: DateTime<Utc>,
        owner: &str,
        acceptance: Acceptance,
    ) -> Fate {
        if verdict.class == ErrorClass::Unknown {
            self.note_unknown_code(&verdict, provider, now).await;
        }
        let failure = Failure {
            incoming,
            verdict: &verdict,
            provider,
            acceptance,
            now,
            grace: self.config.ambiguity_grace,
        };
        let plan = plan::plan(&failure, self.decide(incoming, &verdict, now));
        let fate = self.fate_of(plan, incoming, &verdict, provider, owner, now);
        match acceptance {
            Acceptance::Refused => fate,
            Acceptance::Unknown => {
                let mut unknown = StatusUpdate::new(
                    incoming.job.message_id.clone(),
                    owner,
                    Status::Unknown,
                    incoming.attempt,
                    now,
                );
                unknown.provider = provider.map(str::to_owned);
                unknown.detail = Some(format!(
                    "{} ({}): the provider may have the message",
                    verdict.class, verdict.rule
                ));
                Fate::Ambiguous {
                    unknown,
                    then: Box::new(fate),
                }
            }
        }
    }

    /// A job dead-lettered before it was claimed: a record still waiting for this copy (a
    /// retry's, a replay's, a resent part's) becomes `dead_lettered` with it
    /// ([`Lettered::Abandon`]); a record that moved on is left. Only a later generation, whose
    /// seal proves Courier wrote it, speaks for the record: a generation-0 copy may be a
    /// producer's duplicate with another payload, so it leaves the record as it is (one
    /// waiting after a released lease is flagged by the sweeper when its copy is overdue).
    pub(crate) fn unclaimed_letter(
        &self,
        incoming: &Incoming,
        verdict: &Verdict,
        category: DeadLetterCategory,
        reason: String,
        now: DateTime<Utc>,
    ) -> Fate {
        let detail = format!(
            "{} ({}): {}",
            category.as_str(),
            verdict.class,
            verdict.rule
        );
        Fate::DeadLetter {
            letter: Box::new(dead_letter_of(
                incoming, verdict, category, reason, None, now,
            )),
            then: abandoning(&incoming.job.message_id, incoming.attempt, &detail, now),
            outcome: Outcome::DeadLettered(category, verdict.class),
        }
    }

    /// A payload that fails parsing or validation: an invalid job ([`Pipeline::reject`]). A
    /// later generation's copy whose seal verifies (Courier wrote it, and a deploy since
    /// tightened validation or rolled back past one of its fields) is trusted for the job and
    /// generation it names, and speaks for its record as any copy dead-lettered before its
    /// claim; unreadable seal keys bring the copy back later.
    pub(crate) async fn rejected(
        &self,
        body: &str,
        rejected: &Rejected,
        now: DateTime<Utc>,
    ) -> Fate {
        let trusted = match &rejected.envelope {
            Some(
                claimed @ Claimed {
                    generation: 1..,
                    message_id: Some(id),
                    ..
                },
            ) => match self
                .sealing
                .verifies(body.as_bytes(), id, claimed.generation)
                .await
            {
                Ok(true) => Some(claimed),
                Ok(false) => None,
                Err(e) => return Fate::Redeliver(e.into()),
            },
            _ => None,
        };
        Self::reject(body, rejected, trusted, now)
    }

    /// A record whose task panicked before any provider call: the job crashes the worker, so
    /// it is dead-lettered as poison now rather than crash every redelivery until SQS redrives
    /// it without a record. The status record becomes `dead_lettered` if this copy took the job
    /// (its lease, or the `unknown` its lease expired into), else as for any copy dead-lettered
    /// before its claim ([`Pipeline::unclaimed_letter`]); a payload that does not even parse is
    /// an invalid job as usual. A copy carrying the provider's acceptance is never poison.
    pub(crate) async fn poison_after_panic(&self, body: &str, owner: &str, what: &str) -> Step {
        let now = self.now();
        // A claim-checked copy is judged by the job it stands for.
        let body = match claim_check::redeem(Some(&*self.payloads), body).await {
            Ok(body) => body,
            Err(RedeemError::Store(e)) => return Step::Redeliver(e.into()),
            Err(e) => {
                let fate = Self::unredeemable(body, &e, now);
                return self.carry_out(fate, Holding::Nothing).await;
            }
        };
        let body = &*body;
        let parsed = match parse_body(body.as_bytes()) {
            Ok(incoming) => match self.sealing.admit(incoming, body.as_bytes()).await {
                Ok(incoming) => Ok(incoming),
                Err(e) => return Step::Redeliver(e.into()),
            },
            Err(rejected) => Err(rejected),
        };
        let fate = match parsed {
            Ok(incoming) if incoming.accepted.is_some() => {
                // A copy carrying the provider's acceptance: the mail is out. Never poison (its
                // record `dead_lettered` over a sent job, which a replay would send again): left
                // for redelivery, which records it (a copy crashing every time reaches the
                // redrive DLQ, which alarms).
                warn!(message_id = %incoming.job.message_id, panic = %redact(what), "a copy carrying the provider's acceptance crashed the worker; left for redelivery");
                return Step::Redeliver(Cause::PanickedAfterCall(what.to_owned()));
            }
            Ok(incoming) => {
                let verdict = Verdict::local(
                    ErrorClass::Poison,
                    "worker-panic",
                    format!("the worker panicked on this job: {what}"),
                );
                // The panic's text may quote a recipient: redacted here, kept whole in the letter.
                warn!(message_id = %incoming.job.message_id, panic = %redact(what), "the job crashed the worker; dead-lettered as poison");
                let category = DeadLetterCategory::Poison;
                let reason = format!("crashed the worker: {what}");
                // Whether the crashed copy took the job (its lease, or the `unknown` its lease
                // expired into: it called no provider): only then is its lease holder's write
                // made. Otherwise the copy is dead-lettered as any unclaimed one, which never
                // writes over another copy's lease or an `unknown` that may have been sent;
                // a failed read is taken as not held (that write is conditional).
                let held = match self.status.get(&incoming.job.message_id).await {
                    Ok(Some(record)) => took(&record, incoming.attempt, owner),
                    Ok(None) => false,
                    Err(e) => {
                        warn!(error = %e, "could not read the record of a job that crashed the worker");
                        false
                    }
                };
                if held {
                    let plan = Plan::DeadLetter {
                        detail: format!(
                            "{} ({}): {}",
                            category.as_str(),
                            verdict.class,
                            verdict.rule
                        ),
                        letter: Box::new(dead_letter_of(
                            &incoming, &verdict, category, reason, None, now,
                        )),
                    };
                    self.fate_of(plan, &incoming, &verdict, None, owner, now)
                } else {
                    self.unclaimed_letter(&incoming, &verdict, category, reason, now)
                }
            }
            Err(rejected) => self.rejected(body, &rejected, now).await,
        };
        // Whatever the panic left is kept: the lease, if taken, expires as usual.
        self.carry_out(fate, Holding::Nothing).await
    }

    /// An unparseable or invalid payload: dead letter with whatever ids could be salvaged, or,
    /// for a `trusted` retry envelope, with the job and generation it names (its letter one of
    /// that generation), its waiting record taken along ([`abandoning`]).
    pub(crate) fn reject(
        body: &str,
        rejected: &Rejected,
        trusted: Option<&Claimed>,
        now: DateTime<Utc>,
    ) -> Fate {
        let code = rejected.error.code();
        warn!(code, error = %redact(&rejected.error.to_string()), "invalid job");
        let mut letter = Self::raw_letter(
            body,
            DeadLetterCategory::InvalidJob,
            code,
            rejected.error.to_string(),
            now,
        );
        let (generation, message_id, campaign_id, trace_id) = match trusted {
            Some(c) => (c.generation, &c.message_id, &c.campaign_id, &c.trace_id),
            None => (
                0,
                &rejected.message_id,
                &rejected.campaign_id,
                &rejected.trace_id,
            ),
        };
        letter.id = letter_id(
            message_id.as_deref(),
            &letter.fingerprint,
            generation,
            DeadLetterCategory::InvalidJob,
        );
        letter.message_id = message_id.clone();
        letter.campaign_id = campaign_id.clone();
        letter.trace_id = trace_id.clone();
        let then = match (trusted, message_id) {
            (Some(_), Some(id)) => {
                let detail = format!("invalid_job (invalid_job): {code}");
                abandoning(id, generation, &detail, now)
            }
            _ => Lettered::Nothing,
        };
        Fate::DeadLetter {
            outcome: Outcome::DeadLettered(letter.category, letter.class),
            letter: Box::new(letter),
            then,
        }
    }

    /// A claim check whose body is gone or altered: nothing can be sent, so the pointer itself
    /// is dead-lettered for review (its key and digest say what was lost).
    pub(crate) fn unredeemable(body: &str, error: &RedeemError, now: DateTime<Utc>) -> Fate {
        warn!(error = %error, "a claim-checked body cannot be redeemed; dead-lettered for review");
        let letter = Self::raw_letter(
            body,
            DeadLetterCategory::NeedsReview,
            "claim-check",
            error.to_string(),
            now,
        );
        Fate::DeadLetter {
            outcome: Outcome::DeadLettered(letter.category, letter.class),
            letter: Box::new(letter),
            then: Lettered::Nothing,
        }
    }

    /// The letter of a queue body that could not be read as a job.
    fn raw_letter(
        body: &str,
        category: DeadLetterCategory,
        rule: &str,
        reason: String,
        now: DateTime<Utc>,
    ) -> DeadLetter {
        let print = job_fingerprint(body);
        DeadLetter {
            id: letter_id(None, &print, 0, category),
            category,
            reason: reason.clone(),
            message_id: None,
            campaign_id: None,
            trace_id: None,
            recipients: Vec::new(),
            provider: None,
            class: ErrorClass::InvalidJob,
            rule: rule.to_owned(),
            raw_code: Some(rule.to_owned()),
            raw_text: Some(reason),
            attempts: 0,
            history: Vec::new(),
            first_failure_at: now,
            last_failure_at: now,
            fingerprint: print,
            payload: Some(body.to_owned()),
            payload_base64: None,
        }
    }

    /// The same generation back on the queue after `wait` seconds (an ambiguous claim, back
    /// after the grace window).
    pub(crate) fn requeue_same(
        &self,
        body: &str,
        incoming: &Incoming,
        wait: u64,
        now: DateTime<Utc>,
    ) -> Fate {
        let requeue = Requeue {
            message_id: incoming.job.message_id.clone(),
            body: body.to_owned(),
            delay_secs: wait,
        };
        Fate::Wait {
            wait: plan::wait(requeue, now),
            then: None,
            outcome: Outcome::Ambiguous,
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
                warn!(code = %key, text = %redact(verdict.raw_text.as_deref().unwrap_or("")), "a new error code classified as unknown");
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

/// Whether the copy of generation `attempt` claimed by `owner` took `record`: it holds the lease,
/// or the lease expired into `unknown` (the sweeper's or another copy's mark) with no claim since.
fn took(record: &courier_core::ports::JobRecord, attempt: u32, owner: &str) -> bool {
    if record.lease_owner.as_deref() == Some(owner) {
        return true;
    }
    let claimed = courier_core::claim::claimed_by(owner);
    let last_claim = record
        .history
        .iter()
        .rev()
        .find(|h| h.status == Status::Processing);
    record.status == Status::Unknown
        && record.attempt == attempt
        && last_claim.is_some_and(|h| h.detail.as_deref() == Some(claimed.as_str()))
}

/// What a job's copy dead-lettered before its claim does to its record: a later generation's
/// makes it `dead_lettered` if it still waits for that copy ([`Lettered::Abandon`]), a
/// generation-0 copy nothing ([`Pipeline::unclaimed_letter`]).
fn abandoning(message_id: &str, generation: u32, detail: &str, now: DateTime<Utc>) -> Lettered {
    if generation == 0 {
        return Lettered::Nothing;
    }
    Lettered::Abandon(StatusUpdate {
        detail: Some(format!("{detail} (dead-lettered before its claim)")),
        ..StatusUpdate::new(
            message_id.to_owned(),
            "send",
            Status::DeadLettered,
            generation,
            now,
        )
    })
}
