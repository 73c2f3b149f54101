//! The send attempt: the breaker, the reputation pause and the send-rate permit per provider in
//! failover order, then the call and its status write.

use super::*;

impl Pipeline {
    pub(crate) async fn attempt(
        &self,
        incoming: &Incoming,
        suppressed: &[String],
        now: DateTime<Utc>,
        owner: &str,
        budget: &SendBudget,
    ) -> Step {
        let job = &incoming.job;
        // 6. Render (before choosing a provider: a rendering failure costs no provider call).
        let stored = match &job.template {
            Some(t) => match self.templates.get(&t.id).await {
                Ok(stored) => Some(stored),
                Err(TemplateError::NotFound(id)) => {
                    let verdict = Verdict::local(
                        ErrorClass::Rendering,
                        "template-not-found",
                        format!("template {id:?} does not exist"),
                    );
                    return self
                        .after_failure(incoming, verdict, None, now, owner, false)
                        .await;
                }
                Err(TemplateError::Store(e)) => return Step::Fail(e.to_string()),
            },
            None => None,
        };
        let content = match content_of(job, stored.as_ref()) {
            Ok(c) => c,
            Err(e) => {
                let verdict = Verdict::local(ErrorClass::Rendering, "render", e.to_string());
                return self
                    .after_failure(incoming, verdict, None, now, owner, false)
                    .await;
            }
        };
        let email = match build_email(incoming, suppressed, content) {
            Ok(email) => email,
            Err(e) => {
                let verdict = Verdict::local(ErrorClass::InvalidJob, "build", e);
                return self
                    .after_failure(incoming, verdict, None, now, owner, false)
                    .await;
            }
        };
        // 5. Breaker per provider, in failover order (the job's hint first).
        let order = self.provider_order(job);
        let mut earliest_retry: Option<DateTime<Utc>> = None;
        let mut rate_limited = false;
        let domain = email.from.email.domain().to_owned();
        for mailer in order {
            let provider = mailer.provider();
            let name = provider.as_str();
            if provider == Provider::Ses
                && let Some(until) = self
                    .breakers
                    .paused(&courier_core::reputation::pause_key(&domain), now)
                    .await
            {
                warn!(domain = %domain, until = %until, "sending domain paused by the reputation guard");
                earliest_retry = Some(earliest_retry.map_or(until, |t| t.min(until)));
                continue;
            }
            match self.breakers.admit(name, now).await {
                Admission::Reject { retry_at } => {
                    earliest_retry = Some(earliest_retry.map_or(retry_at, |t| t.min(retry_at)));
                    continue;
                }
                // A half-open probe goes at once: holding it back could strand the probe slot.
                Admission::Probe => {}
                Admission::Allow => match self.governor.permit(name, now, budget.wanted()).await {
                    Ok(Permit::Go { wait }) if wait.is_zero() => {}
                    Ok(Permit::Go { wait }) if self.now() + wait < budget.send_by => {
                        tokio::time::sleep(wait).await;
                    }
                    Ok(Permit::Go { wait }) => {
                        let until = now + chrono::Duration::from_std(wait).unwrap_or_default();
                        warn!(provider = %name, %until, "send-rate slot past the lease; deferred");
                        earliest_retry = Some(earliest_retry.map_or(until, |t| t.min(until)));
                        rate_limited = true;
                        continue;
                    }
                    Ok(Permit::Refused { until }) => {
                        info!(provider = %name, %until, "send-rate quota booked; deferred");
                        earliest_retry = Some(earliest_retry.map_or(until, |t| t.min(until)));
                        rate_limited = true;
                        continue;
                    }
                    Err(e) => return Step::Fail(e.to_string()),
                },
            }
            // 7. Send.
            budget
                .called
                .store(true, std::sync::atomic::Ordering::SeqCst);
            let started = std::time::Instant::now();
            let result = mailer.send(&email).await;
            let latency = started.elapsed();
            let done = self.now();
            return match result {
                Ok(receipt) => {
                    self.breakers.record(name, false, done).await;
                    let mut update = self.update(
                        job.message_id.clone(),
                        owner.to_owned(),
                        Status::SentToProvider,
                        incoming.attempt,
                        done,
                    );
                    update.provider = Some(name.to_owned());
                    update.provider_message_id = Some(receipt.provider_message_id.clone());
                    update.detail = Some(format!("accepted by {name}"));
                    // Kept for a resend on a transient bounce (only SES reports those), unless
                    // it would crowd the 400 KB DynamoDB item (then the bounce is recorded only).
                    if provider == Provider::Ses {
                        let body = current_body(incoming);
                        if body.len() <= MAX_KEPT_PAYLOAD {
                            update.payload = Some(body);
                        }
                    }
                    let step = self.keep_acceptance(update, budget.send_by, latency).await;
                    if let Step::Done(_) = step {
                        info!(provider = %name, provider_message_id = %receipt.provider_message_id, latency_ms = latency.as_millis() as u64, "sent");
                    }
                    step
                }
                Err(failure) => {
                    let counts = failure.verdict.class.counts_against_provider();
                    self.breakers.record(name, counts, done).await;
                    if failure.ambiguous {
                        warn!(provider = %name, class = %failure.verdict.class, "outcome ambiguous; the retry waits for provider evidence");
                    }
                    self.after_failure(
                        incoming,
                        failure.verdict,
                        Some(name.to_owned()),
                        done,
                        owner,
                        failure.ambiguous,
                    )
                    .await
                }
            };
        }
        let retry_at = earliest_retry.unwrap_or(now);
        let verdict = if rate_limited {
            Verdict::local(
                ErrorClass::RateLimited,
                "send-rate",
                format!(
                    "no provider could take the message now (the send-rate quota is booked until {retry_at})"
                ),
            )
        } else {
            Verdict::local(
                ErrorClass::CircuitOpen,
                "breaker-open",
                format!("every provider's circuit is open until {retry_at}"),
            )
        };
        self.after_failure(incoming, verdict, None, now, owner, false)
            .await
    }

    /// The providers in failover order, the job's hint first.
    pub(crate) fn provider_order(
        &self,
        job: &courier_core::job::EmailJob,
    ) -> Vec<&Arc<dyn Mailer>> {
        let mut order: Vec<&Arc<dyn Mailer>> = self.mailers.iter().collect();
        if let Some(hint) = job.provider {
            let hinted = Provider::from(hint);
            order.sort_by_key(|m| m.provider() != hinted);
        }
        order
    }

    /// When no provider can take the job now, as this instance already knows without a call
    /// (every provider's circuit is open, per the cached breaker state, or its send-rate
    /// schedule was seen booked past the horizon), the job waits in the queue without being
    /// claimed: no status write, the same generation, the retry state in the envelope. A claim
    /// would cost a transaction and a status write for every wait of every job during an
    /// outage or a drain. `None`: go on and claim (anything else, including a wait the policy
    /// would not grant, is decided after the claim as before).
    pub(crate) async fn wait_unclaimed(
        &self,
        incoming: &Incoming,
        now: DateTime<Utc>,
    ) -> Option<Step> {
        let job = &incoming.job;
        let mut until: Option<DateTime<Utc>> = None;
        let mut rate_limited = false;
        for mailer in self.provider_order(job) {
            let name = mailer.provider().as_str();
            if let Some(t) = self.breakers.paused(name, now).await {
                until = Some(until.map_or(t, |u| u.min(t)));
            } else if let Some(t) = self.governor.refused_until(name, now).await {
                until = Some(until.map_or(t, |u| u.min(t)));
                rate_limited = true;
            } else {
                return None;
            }
        }
        let until = until?;
        let verdict = if rate_limited {
            Verdict::local(
                ErrorClass::RateLimited,
                "send-rate",
                format!("the send-rate quota is booked; no booking before {until} (not claimed)"),
            )
        } else {
            Verdict::local(
                ErrorClass::CircuitOpen,
                "breaker-open",
                format!("every provider's circuit is open until {until} (not claimed)"),
            )
        };
        let decision = self.decide(incoming, verdict.class, now);
        let Decision::Retry {
            delay,
            spends_attempt,
        } = decision
        else {
            return None;
        };
        if delay.as_secs() > delay::MAX_QUEUE_DELAY_SECS {
            return None;
        }
        let mut retry = incoming.retry.clone();
        retry.record(verdict.class, spends_attempt, delay.as_secs(), now);
        let mut history = incoming.history.clone();
        history.push(attempt_record(
            &verdict,
            None,
            now,
            spends_attempt,
            Some(delay.as_secs()),
        ));
        info!(class = %verdict.class, delay_s = delay.as_secs(), "no provider can take it now; waiting unclaimed");
        Some(Step::Requeue {
            requeue: Requeue {
                message_id: job.message_id.clone(),
                body: same_generation_body(incoming, retry, history),
                delay_secs: delay.as_secs(),
            },
            then: None,
            outcome: Outcome::Retried(verdict.class),
        })
    }

    /// The provider accepted the mail: its `sent_to_provider` write is tried again (with
    /// backoff, `status_write_tries` times at most, while the lease lasts). When it cannot be
    /// made, the acceptance is kept as `unknown` with the provider's id and answer, and the
    /// record is left for redelivery: the redelivered copy finds it (see
    /// [`Pipeline::resolve_accepted`]) and records it sent without sending. When neither write
    /// can be made, the lease is left to expire into `unknown` (never released as `deferred`,
    /// which would send again).
    pub(crate) async fn keep_acceptance(
        &self,
        update: StatusUpdate,
        send_by: DateTime<Utc>,
        latency: std::time::Duration,
    ) -> Step {
        let (tries, error) = match self.finish_durably(&update, send_by).await {
            Ok(()) => return Step::Done(Outcome::Sent { latency }),
            Err(failed) => failed,
        };
        let provider = update.provider.clone().unwrap_or_default();
        let provider_message_id = update.provider_message_id.clone().unwrap_or_default();
        let unknown = StatusUpdate {
            status: Status::Unknown,
            detail: Some(format!(
                "{ACCEPTED_DETAIL} {provider} as {provider_message_id}; the sent status could not be written: {error}"
            )),
            ..update
        };
        match self.status.finish(&unknown).await {
            Ok(()) => Step::FailKeepStatus(format!(
                "sent, but the status write failed {tries} times ({error}); kept as unknown with the provider's id"
            )),
            Err(second) => Step::FailKeepStatus(format!(
                "sent, but neither the status ({error}) nor unknown ({second}) could be written; the lease expires into unknown"
            )),
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
    ) -> Result<(), (u32, courier_core::ports::StoreError)> {
        let mut backoff = std::time::Duration::from_millis(50);
        let mut tries = 0;
        loop {
            tries += 1;
            let error = match self.status.finish(update).await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if let Ok(Some(record)) = self.status.get(&update.message_id).await
                && record.status == update.status
                && record.attempt == update.attempt
                && record
                    .history
                    .last()
                    .is_some_and(|h| h.status == update.status && h.by == update.owner)
            {
                return Ok(());
            }
            let next = self.now() + chrono::Duration::from_std(backoff).unwrap_or_default();
            if tries >= self.config.status_write_tries || next >= until {
                return Err((tries, error));
            }
            warn!(error = %error, tries, status = %update.status, "status write failed; trying again");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(std::time::Duration::from_secs(1));
        }
    }

    /// A copy whose claim found the job `unknown`: when that `unknown` keeps a provider's
    /// acceptance of this generation ([`Pipeline::keep_acceptance`]), the job is recorded
    /// `sent_to_provider` and the copy acknowledged without sending. `None`: the outcome is
    /// really unknown (go on as for any ambiguous claim).
    pub(crate) async fn resolve_accepted(
        &self,
        incoming: &Incoming,
        owner: &str,
        now: DateTime<Utc>,
    ) -> Option<Step> {
        let record = match self.status.get(&incoming.job.message_id).await {
            Ok(Some(record)) => record,
            Ok(None) => return None,
            Err(e) => return Some(Step::FailKeepStatus(e.to_string())),
        };
        let last = record.history.last()?;
        let accepted = record.status == Status::Unknown
            && last.status == Status::Unknown
            && last.attempt == incoming.attempt
            && last
                .detail
                .as_deref()
                .is_some_and(|d| d.starts_with(ACCEPTED_DETAIL));
        if !accepted {
            return None;
        }
        let mut sent = self.update(
            incoming.job.message_id.clone(),
            owner.to_owned(),
            Status::SentToProvider,
            incoming.attempt,
            now,
        );
        sent.provider = record.provider.clone();
        sent.provider_message_id = record.provider_message_id.clone();
        sent.detail = last.detail.clone();
        Some(match self.status.record(&sent).await {
            Ok(()) => {
                info!(provider_message_id = ?record.provider_message_id, "the provider's acceptance was kept as unknown; recorded sent without sending");
                Step::Done(Outcome::Duplicate)
            }
            Err(e) => Step::FailKeepStatus(e.to_string()),
        })
    }
}

/// How an `unknown` that keeps a provider's acceptance begins its detail.
pub const ACCEPTED_DETAIL: &str = "accepted by";
