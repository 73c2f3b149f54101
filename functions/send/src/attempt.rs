//! The send attempt: the breaker, the reputation pause and the send-rate permit per provider in
//! failover order, then the call and its status write.

use super::*;
use courier_core::ports::Receipt;
use courier_core::recipients::RecipientStatus;

/// The attachment bytes an instance holds at once. A message is held about five times over
/// while it is fetched, encoded (base64) and sent, so 16 MiB of files in flight is about 80 MB of
/// the function's 128 MB; a record whose files do not fit waits for the others to be sent.
#[derive(Debug)]
pub struct AttachmentBudget(tokio::sync::Semaphore);

/// The budget, in KiB.
const ATTACHMENT_BUDGET_KIB: u32 = 16 * 1024;

impl Default for AttachmentBudget {
    fn default() -> Self {
        AttachmentBudget(tokio::sync::Semaphore::new(ATTACHMENT_BUDGET_KIB as usize))
    }
}

impl AttachmentBudget {
    /// Waits until `bytes` fit (a job larger than the whole budget waits for all of it).
    pub(crate) async fn reserve(&self, bytes: u64) -> Option<tokio::sync::SemaphorePermit<'_>> {
        if bytes == 0 {
            return None;
        }
        let kib = u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .min(ATTACHMENT_BUDGET_KIB);
        self.0.acquire_many(kib).await.ok()
    }

    /// The KiB free now.
    pub fn available_kib(&self) -> usize {
        self.0.available_permits()
    }
}

/// Why a job's attachments cannot be attached.
enum AttachmentFault {
    /// The store failed: the record is redelivered.
    Store(StoreError),
    /// Gone or altered: the job cannot be sent as written.
    Unusable(Verdict),
}

impl Pipeline {
    /// The job's attachments, fetched from the payload store and checked against their
    /// references (size and SHA-256).
    async fn attachments(
        &self,
        job: &courier_core::job::EmailJob,
    ) -> Result<Vec<courier_core::ports::Attachment>, AttachmentFault> {
        let mut files = Vec::with_capacity(job.attachments.len());
        for reference in &job.attachments {
            let unusable = |rule: &str, what: &str| {
                AttachmentFault::Unusable(Verdict::local(
                    ErrorClass::InvalidJob,
                    rule,
                    format!(
                        "attachment {:?} ({}) {what}",
                        reference.filename, reference.key
                    ),
                ))
            };
            // A replayed letter's files may have outlived `attachments/` only where the
            // archiver retained them.
            let mut found = None;
            for key in [reference.key.clone(), reference.retained_key()] {
                match self.payloads.get(&key).await {
                    Ok(Some(content)) => {
                        found = Some(content);
                        break;
                    }
                    Ok(None) => {}
                    Err(e) => return Err(AttachmentFault::Store(e)),
                }
            }
            let Some(content) = found else {
                return Err(unusable(
                    "attachment-missing",
                    "is not in the payload bucket",
                ));
            };
            if !reference.matches(&content) {
                return Err(unusable(
                    "attachment-altered",
                    "does not match its size and SHA-256",
                ));
            }
            files.push(courier_core::ports::Attachment {
                filename: reference.filename.clone(),
                content_type: reference.content_type.clone(),
                content,
            });
        }
        Ok(files)
    }

    pub(crate) async fn attempt(
        &self,
        incoming: &Incoming,
        suppressed: &[String],
        now: DateTime<Utc>,
        owner: &str,
        budget: &SendBudget,
    ) -> Fate {
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
                        .after_failure(incoming, verdict, None, now, owner, Acceptance::Refused)
                        .await;
                }
                Err(TemplateError::Store(e)) => return Fate::Redeliver(e.into()),
            },
            None => None,
        };
        let content = match content_of(job, stored.as_ref()) {
            Ok(c) => c,
            Err(e) => {
                let verdict = Verdict::local(ErrorClass::Rendering, "render", e.to_string());
                return self
                    .after_failure(incoming, verdict, None, now, owner, Acceptance::Refused)
                    .await;
            }
        };
        let mut email = match build_email(incoming, suppressed, content) {
            Ok(email) => email,
            Err(e) => {
                let verdict = Verdict::local(ErrorClass::InvalidJob, "build", e.to_string());
                return self
                    .after_failure(incoming, verdict, None, now, owner, Acceptance::Refused)
                    .await;
            }
        };
        // One-click unsubscribe (RFC 8058), for the one recipient the link names.
        match self.unsubscribing.headers(job).await {
            Ok(headers) => email.headers.extend(headers),
            Err(e) => return Fate::Redeliver(e.into()),
        }
        // Attachments, from the payload bucket, each checked against its reference; held
        // within the instance's budget until this attempt ends.
        let total: u64 = job.attachments.iter().map(|a| a.bytes).sum();
        let _held = self.attachment_budget.reserve(total).await;
        match self.attachments(job).await {
            Ok(files) => email.attachments = files,
            Err(AttachmentFault::Store(e)) => return Fate::Redeliver(e.into()),
            Err(AttachmentFault::Unusable(verdict)) => {
                return self
                    .after_failure(incoming, verdict, None, now, owner, Acceptance::Refused)
                    .await;
            }
        }
        // The receiving domains' pace (a domain that throttled us has a rate of its own; one
        // message goes to every recipient's domain, so each paced one books a slot): the latest
        // slot, at most `BOOKING_HORIZON` ahead, is waited for here, a later one in the queue.
        let destinations = recipient_domains(&email);
        let mut now = now;
        // A domain this instance saw booked past the horizon first, with no booking made: a
        // slot booked on one domain is spent even when another then makes the message wait.
        let refused = destinations
            .iter()
            .filter_map(|d| Some((self.governor.destination_refused_until(d, now)?, d)))
            .max();
        if let Some((until, domain)) = refused {
            return self
                .destination_paced(incoming, domain, until, now, owner)
                .await;
        }
        let mut wait = Duration::ZERO;
        for domain in &destinations {
            match self.governor.destination_permit(domain, now).await {
                Ok(Permit::Go { wait: slot }) if slot.is_zero() => {}
                Ok(Permit::Go { wait: slot }) if self.now() + slot < budget.send_by => {
                    wait = wait.max(slot);
                }
                Ok(Permit::Go { wait: slot }) => {
                    let until = now + chrono::Duration::from_std(slot).unwrap_or_default();
                    return self
                        .destination_paced(incoming, domain, until, now, owner)
                        .await;
                }
                Ok(Permit::Refused { until }) => {
                    return self
                        .destination_paced(incoming, domain, until, now, owner)
                        .await;
                }
                Err(e) => return Fate::Redeliver(e.into()),
            }
        }
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
            // The provider's checks below are at the time the send goes.
            now = self.now();
        }
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
                // A half-open probe takes its send-rate slot (the quota holds around it), but
                // is never held back: deferring it could strand the breaker's probe slot.
                Admission::Probe => match self.permit(name, incoming, now, budget).await {
                    Ok(Permit::Go { wait })
                        if !wait.is_zero() && self.now() + wait < budget.send_by =>
                    {
                        tokio::time::sleep(wait).await;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        warn!(provider = %name, error = %e, "send-rate schedule unreadable; the probe goes at once");
                    }
                },
                Admission::Allow => match self.permit(name, incoming, now, budget).await {
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
                    Err(e) => return Fate::Redeliver(e.into()),
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
                    // The breaker counts the success once the acceptance is written (Fate::Accepted).
                    let mut update = StatusUpdate::new(
                        job.message_id.clone(),
                        owner,
                        Status::SentToProvider,
                        incoming.attempt,
                        done,
                    );
                    update.provider = Some(name.to_owned());
                    update.provider_message_id = Some(receipt.provider_message_id.clone());
                    update.detail = Some(format!("accepted by {name}"));
                    let mut roll =
                        courier_core::recipients::roll(job, RecipientStatus::Sent, suppressed);
                    let (refused, suppress) = refusals(&receipt, name);
                    update.recipient_notes = courier_core::recipients::refuse(&mut roll, &refused);
                    update.recipients = Some(roll);
                    // The body to resend from after a transient bounce is on the record since
                    // the claim (`resend_body`), whoever records this acceptance.
                    if !refused.is_empty() {
                        info!(provider = %name, refused = refused.len(), "sent; some recipients refused");
                    }
                    let carrier = Requeue {
                        message_id: job.message_id.clone(),
                        body: accepted_body(
                            incoming,
                            ProviderAcceptance {
                                provider: name.to_owned(),
                                provider_message_id: receipt.provider_message_id.clone(),
                                at: done,
                            },
                        ),
                        delay_secs: 0,
                    };
                    Fate::Accepted {
                        update,
                        send_by: budget.send_by,
                        latency,
                        suppress,
                        carrier,
                    }
                }
                Err(failure) => {
                    let counts = failure.verdict.counts_against_provider(
                        email
                            .to
                            .iter()
                            .chain(&email.cc)
                            .chain(&email.bcc)
                            .map(|m| m.email.as_str()),
                    );
                    self.breakers.record(name, counts, done).await;
                    if failure.verdict.throttles_receiver() {
                        for domain in throttling_domains(&failure.verdict, &email, &destinations) {
                            self.receiver_throttled(domain, done).await;
                        }
                    }
                    if failure.ambiguous {
                        warn!(provider = %name, class = %failure.verdict.class, "outcome ambiguous; the retry waits for provider evidence");
                    }
                    let acceptance = if failure.ambiguous {
                        Acceptance::Unknown
                    } else {
                        Acceptance::Refused
                    };
                    let mut fate = self
                        .after_failure(
                            incoming,
                            failure.verdict,
                            Some(name),
                            done,
                            owner,
                            acceptance,
                        )
                        .await;
                    // Each recipient the message went to is as ambiguous as the send.
                    if let Fate::Ambiguous { unknown, .. } = &mut fate {
                        unknown.recipients = Some(courier_core::recipients::roll(
                            job,
                            RecipientStatus::Unknown,
                            suppressed,
                        ));
                    }
                    fate
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
        self.after_failure(incoming, verdict, None, now, owner, Acceptance::Refused)
            .await
    }

    /// The send-rate permit for one call to `provider`: a retry books only the near end of
    /// the provider's schedule (the retry lane), fresh mail all of it.
    async fn permit(
        &self,
        provider: &str,
        incoming: &Incoming,
        now: DateTime<Utc>,
        budget: &SendBudget,
    ) -> Result<Permit, StoreError> {
        if is_retry(incoming) {
            self.governor
                .retry_permit(provider, now, budget.wanted())
                .await
        } else {
            self.governor.permit(provider, now, budget.wanted()).await
        }
    }

    /// The job waits for its receiving domain's pace: `rate_limited`, no attempt spent.
    async fn destination_paced(
        &self,
        incoming: &Incoming,
        domain: &str,
        until: DateTime<Utc>,
        now: DateTime<Utc>,
        owner: &str,
    ) -> Fate {
        info!(%domain, %until, "receiving domain's pace booked; deferred");
        let verdict = Verdict::local(
            ErrorClass::RateLimited,
            "destination-rate",
            format!("{domain} is paced after throttling us; its next free slot is at {until}"),
        );
        self.after_failure(incoming, verdict, None, now, owner, Acceptance::Refused)
            .await
    }

    /// A throttle reply from `domain`: lowers its shared pace. A failure to record it is logged
    /// and otherwise ignored: the job's own fate does not depend on it.
    async fn receiver_throttled(&self, domain: &str, now: DateTime<Utc>) {
        match self.governor.receiver_throttled(domain, now).await {
            Ok(Some(governor::Lowered::To { per_sec })) => {
                info!(%domain, per_sec, "receiving domain throttled us; its pace is lowered");
            }
            Ok(_) => {}
            Err(e) => {
                warn!(%domain, error = %e, "receiving domain throttled us; could not lower its pace");
            }
        }
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
    ) -> Option<Fate> {
        let job = &incoming.job;
        // The latest of its receiving domains' refusals (the message waits for every one).
        let refused = job
            .recipients()
            .filter_map(courier_core::pacing::domain_of)
            .filter_map(|domain| {
                let until = self.governor.destination_refused_until(&domain, now)?;
                Some((until, domain))
            })
            .max();
        if let Some((until, domain)) = refused {
            let verdict = Verdict::local(
                ErrorClass::RateLimited,
                "destination-rate",
                format!("{domain} is paced; no booking before {until} (not claimed)"),
            );
            return self.unclaimed(incoming, verdict, now);
        }
        let mut until: Option<DateTime<Utc>> = None;
        let mut rate_limited = false;
        for mailer in self.provider_order(job) {
            let name = mailer.provider().as_str();
            if let Some(t) = self.breakers.paused(name, now).await {
                until = Some(until.map_or(t, |u| u.min(t)));
            } else if let Some(t) = self.governor.refused_until(name, now).await {
                until = Some(until.map_or(t, |u| u.min(t)));
                rate_limited = true;
            } else if is_retry(incoming)
                && let Some(t) = self.governor.retry_refused_until(name, now).await
            {
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
        self.unclaimed(incoming, verdict, now)
    }

    /// The job waits in the queue for `verdict` without a claim, when the policy grants it a
    /// queue delay.
    fn unclaimed(&self, incoming: &Incoming, verdict: Verdict, now: DateTime<Utc>) -> Option<Fate> {
        let job = &incoming.job;
        let decision = self.decide(incoming, &verdict, now);
        let Decision::Retry {
            delay,
            spends_attempt,
        } = decision
        else {
            return None;
        };
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
        let requeue = Requeue {
            message_id: job.message_id.clone(),
            body: same_generation_body(incoming, retry, history),
            delay_secs: delay.as_secs(),
        };
        // Only the queue's own delay: a longer wait is decided after the claim.
        let wait = plan::unclaimed(requeue, now)?;
        info!(class = %verdict.class, delay_s = delay.as_secs(), "no provider can take it now; waiting unclaimed");
        Some(Fate::Wait {
            wait,
            then: None,
            outcome: Outcome::Retried(verdict.class),
        })
    }

    /// A copy its sender queued with the provider's acceptance of this generation, because the
    /// status table could not record it then (the seal proved Courier wrote it: a producer's
    /// envelope loses the field). The mail is out: never sent again, whatever the claim finds.
    /// The claim (with no suppression check) says where the job stands: free for this
    /// generation (nothing recorded, the lease lapsed) or `unknown` within the grace window:
    /// recorded `sent_to_provider`; still leased (its sender may yet write it): the copy waits
    /// on the queue until the lease ends; already sent or finished, or a later generation
    /// under way (a soft bounce's resend): acknowledged, the acceptance is not that
    /// generation's.
    pub(crate) async fn record_carried(
        &self,
        body: &str,
        incoming: &Incoming,
        accepted: &ProviderAcceptance,
        owner: &str,
        now: DateTime<Utc>,
    ) -> Fate {
        let job = &incoming.job;
        let claim = ClaimRequest {
            message_id: job.message_id.clone(),
            attempt: incoming.attempt,
            owner: owner.to_owned(),
            now,
            lease_until: now + chrono::Duration::seconds(1),
            grace: chrono::Duration::from_std(self.config.ambiguity_grace).unwrap_or_default(),
            check_suppressed: Vec::new(),
            trace_id: incoming.trace.clone(),
            facts: JobFacts::of(job),
            payload: match self.resend_body(incoming).await {
                Ok(body) => body,
                // The mail is out: its acceptance is not held back for the payload bucket. The
                // generation's first claim stored the same body under the same key (the key is
                // its digest), so its claim check stands without this put.
                Err(e) => {
                    warn!(error = %e, "the payload bucket failed; the carried acceptance keeps the claim check of its body");
                    Some(claim_check::ClaimCheck::of(&current_body(incoming)).to_body())
                }
            },
        };
        match self.status.claim(&claim).await {
            Ok(
                ClaimOutcome::Claimed
                | ClaimOutcome::Ambiguous { .. }
                | ClaimOutcome::Suppressed(_),
            ) => Self::carried_acceptance(incoming, accepted, owner, now),
            Ok(ClaimOutcome::Busy { lease_until }) => {
                let wait = (lease_until - now).num_seconds().max(0) as u64 + 1;
                info!(
                    wait_s = wait,
                    "this copy carries the provider's acceptance; the job is still leased: waiting for the lease to end"
                );
                self.requeue_same(body, incoming, wait, now)
            }
            Ok(ClaimOutcome::Duplicate(status)) => {
                info!(%status, "this copy carries the provider's acceptance; the job is already recorded");
                Fate::Ack(Outcome::Duplicate)
            }
            Ok(ClaimOutcome::Stale { current_attempt }) => {
                info!(
                    current_attempt,
                    copy_attempt = incoming.attempt,
                    "this copy carries an earlier generation's acceptance; dropped"
                );
                Fate::Ack(Outcome::Stale)
            }
            Err(e) => Fate::Redeliver(e.into()),
        }
    }

    /// The `sent_to_provider` record of a carried acceptance ([`Pipeline::record_carried`]).
    pub(crate) fn carried_acceptance(
        incoming: &Incoming,
        accepted: &ProviderAcceptance,
        owner: &str,
        now: DateTime<Utc>,
    ) -> Fate {
        let job = &incoming.job;
        let mut sent = StatusUpdate::new(
            job.message_id.clone(),
            owner,
            Status::SentToProvider,
            incoming.attempt,
            now,
        );
        sent.provider = Some(accepted.provider.clone());
        sent.provider_message_id = Some(accepted.provider_message_id.clone());
        sent.detail = Some(format!(
            "{ACCEPTED_DETAIL} {} as {} at {} (recorded from the copy its sender queued: the status table could not be written then)",
            accepted.provider,
            accepted.provider_message_id,
            accepted.at.to_rfc3339()
        ));
        sent.recipients = Some(courier_core::recipients::roll(
            job,
            RecipientStatus::Sent,
            &[],
        ));
        sent.facts = Some(Box::new(JobFacts::of(job)));
        info!(provider_message_id = %accepted.provider_message_id, "this copy carries the provider's acceptance; recording it sent without sending");
        Fate::Record {
            update: sent,
            outcome: Outcome::Duplicate,
        }
    }

    /// A copy whose claim found the job `unknown`: when that `unknown` keeps a provider's
    /// acceptance of this generation ([`Fate::Accepted`]), the job is recorded
    /// `sent_to_provider` and the copy acknowledged without sending. `None`: the outcome is
    /// really unknown (go on as for any ambiguous claim).
    pub(crate) async fn resolve_accepted(
        &self,
        incoming: &Incoming,
        owner: &str,
        now: DateTime<Utc>,
    ) -> Option<Fate> {
        let record = match self.status.get(&incoming.job.message_id).await {
            Ok(Some(record)) => record,
            Ok(None) => return None,
            Err(e) => return Some(Fate::Redeliver(e.into())),
        };
        // This instance saw the provider take this generation and could record nothing then.
        if record.status == Status::Unknown
            && record.attempt == incoming.attempt
            && let Some(mut sent) = self
                .acceptances
                .recall(&incoming.job.message_id, incoming.attempt)
        {
            sent.owner = owner.to_owned();
            sent.now = now;
            info!(provider_message_id = ?sent.provider_message_id, "this instance kept the provider's acceptance; recording it sent without sending");
            return Some(Fate::Record {
                update: sent,
                outcome: Outcome::Duplicate,
            });
        }
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
        let mut sent = StatusUpdate::new(
            incoming.job.message_id.clone(),
            owner,
            Status::SentToProvider,
            incoming.attempt,
            now,
        );
        sent.provider = record.provider.clone();
        sent.provider_message_id = record.provider_message_id.clone();
        sent.detail = last.detail.clone();
        info!(provider_message_id = ?record.provider_message_id, "the provider's acceptance was kept as unknown; recording it sent without sending");
        Some(Fate::Record {
            update: sent,
            outcome: Outcome::Duplicate,
        })
    }

    /// The body the claim keeps with the record for a resend after a transient bounce, when
    /// the stack sends through SES (only SES reports those): written with the lease, so it is
    /// durable before SES can take the mail (SES's Send event may record the send before this
    /// function does, or instead of it if the function dies). A body over 300 KiB is stored in
    /// the payload bucket first and the record keeps a claim check of it; an error of the bucket
    /// is returned (the copy is left for a redelivery, before anything is claimed).
    pub(crate) async fn resend_body(
        &self,
        incoming: &Incoming,
    ) -> Result<Option<String>, StoreError> {
        if !self.mailers.iter().any(|m| m.provider() == Provider::Ses) {
            return Ok(None);
        }
        claim_check::keep(&*self.payloads, current_body(incoming))
            .await
            .map(Some)
    }
}

/// How an `unknown` that keeps a provider's acceptance begins its detail.
pub const ACCEPTED_DETAIL: &str = "accepted by";

/// The receiving domains of the message's recipients (`To`, `Cc`, `Bcc`), lower-cased, each
/// once, in the order first named: the domains whose pace the send waits for.
fn recipient_domains(email: &OutgoingEmail) -> Vec<String> {
    let mut domains: Vec<String> = Vec::new();
    for m in email.to.iter().chain(&email.cc).chain(&email.bcc) {
        let domain = m.email.domain().to_ascii_lowercase();
        if !domains.contains(&domain) {
            domains.push(domain);
        }
    }
    domains
}

/// The receiving domains a throttle reply is taken to come from: those of the message's
/// recipients the reply names ([`courier_core::mailbox::names_address`]: `<ann@big.example>`,
/// as a relay's reply to `RCPT TO` does); when it names none, every domain of the message (one
/// of them throttled us: slowing the others costs them some rate, which the additive increase
/// gives back, while sparing the one that throttled would go on pressing it).
fn throttling_domains<'d>(
    verdict: &Verdict,
    email: &OutgoingEmail,
    domains: &'d [String],
) -> Vec<&'d String> {
    let text = verdict.raw_text.as_deref().unwrap_or("");
    let named: Vec<String> = email
        .to
        .iter()
        .chain(&email.cc)
        .chain(&email.bcc)
        .filter(|m| courier_core::mailbox::names_address(text, m.email.as_str()))
        .map(|m| m.email.domain().to_ascii_lowercase())
        .collect();
    let hit: Vec<&String> = domains.iter().filter(|d| named.contains(d)).collect();
    if hit.is_empty() {
        domains.iter().collect()
    } else {
        hit
    }
}

/// A copy that already waited (a failure or a wait was recorded): it books in the retry lane.
fn is_retry(incoming: &Incoming) -> bool {
    incoming.retry.first_attempt_at.is_some()
}

/// What the recipients `receipt` says were refused become: (address, timeline note) for the
/// record, and (address, reason) for those to suppress (the reply says the address is dead).
type Refused = (Vec<(String, String)>, Vec<(String, String)>);

fn refusals(receipt: &Receipt, provider: &str) -> Refused {
    let mut refused = Vec::new();
    let mut suppress = Vec::new();
    for r in &receipt.refused {
        let v = &r.verdict;
        let reply = v.raw_text.as_deref().unwrap_or(v.rule.as_str());
        refused.push((
            r.address.clone(),
            format!("refused by {provider} ({}): {reply}", v.class),
        ));
        if v.suppress_recipient {
            suppress.push((
                r.address.clone(),
                format!("{}: {}", v.rule, v.raw_code.as_deref().unwrap_or("")),
            ));
        }
    }
    (refused, suppress)
}
