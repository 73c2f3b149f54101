//! The send function's steps after a poll: what an instance knows without a call, the send-rate
//! slot, the provider call, the decision after a failure and the invocation's end.

use super::*;

impl Engine<'_> {
    /// The class of the wait when `inst` already knows no call can be made at `now_ms`: the
    /// cached breaker state is open, or a booking was refused and its window has not passed.
    pub(super) fn known_blocked(&mut self, inst: u32, now_ms: u64) -> Option<ErrorClass> {
        if let Some(shared) = self.shared.as_ref()
            && self.instances[inst as usize].breaker.open(
                shared,
                now_ms,
                at(now_ms),
                &mut self.calls,
            )
        {
            return Some(ErrorClass::CircuitOpen);
        }
        let limit = self.sc.send_rate?;
        let now_us = i64::try_from(now_ms).unwrap_or(i64::MAX / 2_000) * 1000;
        let i = &self.instances[inst as usize];
        let mut probe = i.allowance;
        (now_us < i.rate_refused_until_us && probe.take(now_us, limit.spacing_us()).is_none())
            .then_some(ErrorClass::RateLimited)
    }

    /// The real policy's decision for `job` after `class` at `now` (the function's
    /// `Pipeline::decide`).
    pub(super) fn decide(&mut self, job: u32, class: ErrorClass, now: u64) -> Decision {
        let sc = self.sc;
        sc.policy.decide(
            sc.priority,
            class,
            &self.jobs[job as usize].retry,
            at(now),
            None,
            &mut self.rng_policy as &mut dyn RandomSource,
        )
    }

    /// Re-enqueues `job` with the policy's wait for `class`, unclaimed (no status write); false
    /// when the policy would not grant a queue delay (then the claim path decides).
    pub(super) fn wait_unclaimed(&mut self, job: u32, class: ErrorClass, now: u64) -> bool {
        let decision = self.decide(job, class, now);
        // The send function's planning: an unclaimed wait is only ever the queue's own delay.
        let Route::Retry {
            delay_secs: secs,
            spends_attempt,
        } = plan::route(decision, Acceptance::Refused, Duration::ZERO)
        else {
            return false;
        };
        if delay::mechanism(secs, SIMULATED_BODY) != DelayMechanism::QueueDelay {
            return false;
        }
        let j = &mut self.jobs[job as usize];
        j.retry.record(class, spends_attempt, secs, at(now));
        j.receives = 0;
        self.requeues.push((job, secs * 1000));
        true
    }

    /// A send-rate slot for one call by `inst` at `now_ms` (None: refused), from its allowance
    /// or a reservation of up to `wanted` slots (the batch's records still to send) on the
    /// shared schedule, as `functions/send/src/governor.rs` does.
    pub(super) fn slot(&mut self, inst: u32, now_ms: u64, wanted: u32, retry: bool) -> Option<u64> {
        let limit = if retry {
            self.retry_limit()?
        } else {
            self.sc.send_rate?
        };
        let spacing = limit.spacing_us();
        let now_us = i64::try_from(now_ms).unwrap_or(i64::MAX / 2_000) * 1000;
        let to_ms = |us: i64| u64::try_from(us).unwrap_or(0).div_ceil(1000);
        let i = &mut self.instances[inst as usize];
        if let Some(slot) = i.allowance.take(now_us, spacing) {
            return Some(to_ms(slot));
        }
        self.calls.ddb_rate_write += 1;
        let chunk = limit.chunk.min(wanted.max(1));
        let cost = spacing.saturating_mul(i64::from(chunk));
        match courier_core::rate::reserve(self.rate_tat, now_us, cost, limit.max_ahead_us()) {
            (Reservation::Granted { start_us }, next) => {
                self.rate_tat = next;
                i.allowance = Allowance::new(start_us, chunk);
                i.allowance.take(now_us, spacing).map(to_ms)
            }
            (Reservation::Refused { booked_until_us }, _) => {
                let full = self.sc.send_rate.map_or(0, |l| l.max_ahead_us());
                i.rate_refused_until_us = i.rate_refused_until_us.max(booked_until_us - full);
                i.rate_booked_until_us = booked_until_us;
                None
            }
        }
    }

    /// The records of `inst` whose slot has come are sent.
    pub(super) fn send_waiting(&mut self, inst: u32) {
        while let Some(&(slot, job)) = self.instances[inst as usize].batch.waiting.front() {
            if slot > self.now {
                break;
            }
            self.instances[inst as usize].batch.waiting.pop_front();
            self.send_one(inst, job, slot);
        }
        self.after_step(inst);
    }

    /// After the records that could go now: wait for the next slot, or end the invocation.
    pub(super) fn after_step(&mut self, inst: u32) {
        let requeues = std::mem::take(&mut self.requeues);
        let b = &mut self.instances[inst as usize].batch;
        b.requeues.extend(requeues);
        if let Some(&(slot, _)) = b.waiting.front() {
            self.push(slot, Ev::Send(inst));
            return;
        }
        let sc = self.sc;
        let lat = &sc.latency;
        let b = std::mem::take(&mut self.instances[inst as usize].batch);
        let mut end = b.end;
        if b.any_sfn {
            end += lat.sfn_ms;
        }
        if !b.requeues.is_empty() {
            end += lat.sqs_ms;
            self.calls.sqs_send_batch += b.requeues.len().div_ceil(10) as u64;
            // The status write after each re-enqueue.
            end += lat.dynamodb_ms;
            for &(job, delay) in &b.requeues {
                self.push(end + delay, Ev::Visible(job));
            }
        }
        self.calls.lambda_gb_ms +=
            (end - b.started) as f64 * f64::from(sc.lambda.memory_mb) / 1024.0;
        if b.acked > 0 {
            self.calls.sqs_delete_batch += 1;
        }
        // The batch's outcome events: its records read in one call, published by tens.
        if self.outcomes > 0 {
            self.calls.ddb_outcome_read += 1;
            self.calls.events_put += self.outcomes.div_ceil(10);
            self.calls.events_entries += self.outcomes;
            self.outcomes = 0;
        }
        self.push(end + lat.sqs_ms, Ev::Done(inst));
    }

    /// One provider call for `job` at `tc` by `inst`, and what follows from its answer.
    pub(super) fn send_one(&mut self, inst: u32, job: u32, tc: u64) {
        let sc = self.sc;
        let lat = &sc.latency;
        let in_outage = sc.in_outage(tc);
        let refused = if self.jobs[job as usize].flags & F_RECEIVER != 0 {
            self.receiver_answer(tc)
        } else {
            None
        };
        let answer = match refused {
            Some(reply) => Answer::Failed {
                reply,
                latency_ms: lat.provider_ms,
            },
            None => self
                .provider
                .call(sc, tc, self.share_of(job), &mut self.rng_world),
        };
        self.calls.provider_calls += 1;
        if in_outage {
            self.outage_calls += 1;
            let j = &mut self.jobs[job as usize];
            if j.flags & F_CALLED_IN_OUTAGE == 0 {
                j.flags |= F_CALLED_IN_OUTAGE;
                self.outage_calling_jobs += 1;
            }
        }
        let (latency, accepted) = match answer {
            Answer::Accepted { latency_ms } => (latency_ms, true),
            Answer::Failed { latency_ms, .. } | Answer::TimedOut { latency_ms, .. } => (
                latency_ms,
                matches!(
                    answer,
                    Answer::TimedOut {
                        delivered: true,
                        ..
                    }
                ),
            ),
        };
        self.count_call(tc, accepted);
        if accepted {
            self.calls.provider_accepted += 1;
        }
        let done = tc + latency;
        {
            let b = &mut self.instances[inst as usize].batch;
            b.end = b.end.max(done + lat.dynamodb_ms);
        }
        let (failed, class, ambiguous) = match answer {
            Answer::Accepted { .. } => (false, None, false),
            Answer::Failed { reply, .. } => {
                let verdict = &self.provider.replies[reply].verdict;
                let class = verdict.class;
                if class == ErrorClass::Throttled {
                    self.throttled += 1;
                } else {
                    self.failed_calls += 1;
                }
                // The job's recipient as far as a reply names it: a share's recipient is the
                // address its own reply names (Postfix's `<a@x>: Recipient address rejected`).
                let recipient = self
                    .share_of(job)
                    .and_then(|share| named_address(&sc.mix[share].reply));
                (
                    verdict.counts_against_provider(recipient.into_iter()),
                    Some(class),
                    false,
                )
            }
            Answer::TimedOut { delivered, .. } => {
                self.timed_out += 1;
                if delivered {
                    self.jobs[job as usize].flags |= F_MAYBE_DELIVERED;
                }
                let verdict = Provider::timeout_verdict();
                (
                    verdict.counts_against_provider(std::iter::empty()),
                    Some(verdict.class),
                    true,
                )
            }
        };
        if let Some(shared) = self.shared.as_mut() {
            self.instances[inst as usize].breaker.record(
                shared,
                failed,
                done,
                at(done),
                &mut self.calls,
            );
        }
        match class {
            None => {
                self.calls.ddb_status_write += 1;
                if self.jobs[job as usize].flags & F_MAYBE_DELIVERED != 0 {
                    self.possible_duplicates += 1;
                }
                self.finish(job, Fate::Sent, done + lat.dynamodb_ms);
            }
            Some(class) => {
                let sfn = self.after_failure(job, class, done, ambiguous);
                self.instances[inst as usize].batch.any_sfn |= sfn;
            }
        }
    }

    /// The policy's decision after a failure of `class` at `now`, acted on as the function does.
    /// Returns whether a delay execution was started.
    pub(super) fn after_failure(
        &mut self,
        job: u32,
        class: ErrorClass,
        now: u64,
        ambiguous: bool,
    ) -> bool {
        let sc = self.sc;
        let decision = self.decide(job, class, now);
        let acceptance = if ambiguous {
            Acceptance::Unknown
        } else {
            Acceptance::Refused
        };
        let grace = Duration::from_secs(sc.ambiguity_grace_secs);
        // The send function's planning, for the simulated job's body.
        match plan::route(decision, acceptance, grace) {
            Route::Retry {
                delay_secs: secs,
                spends_attempt,
            } => {
                let mechanism = delay::mechanism(secs, SIMULATED_BODY);
                let j = &mut self.jobs[job as usize];
                j.retry.record(class, spends_attempt, secs, at(now));
                // A re-sent message is a new copy: its receive count starts again.
                j.receives = 0;
                self.calls.ddb_status_write += 1;
                match mechanism {
                    DelayMechanism::QueueDelay => {
                        self.requeues.push((job, secs * 1000));
                        false
                    }
                    DelayMechanism::StateMachine => {
                        self.calls.sfn_start += 1;
                        self.calls.sfn_transitions += SFN_TRANSITIONS_PER_WAIT;
                        self.calls.sqs_send += 1;
                        let back = now + sc.latency.sfn_ms + secs * 1000 + sc.latency.sqs_ms;
                        self.push(back, Ev::Visible(job));
                        true
                    }
                    DelayMechanism::QueueHops => {
                        // One send per hop of at most 900 s (each early copy is put back).
                        let hops = secs.div_ceil(MAX_QUEUE_DELAY_SECS);
                        self.calls.sqs_send += hops;
                        let back = now + secs * 1000 + hops * sc.latency.sqs_ms;
                        self.push(back, Ev::Visible(job));
                        true
                    }
                }
            }
            Route::DeadLetter { .. } => {
                self.calls.ddb_letter_write += 1;
                self.calls.sqs_send += 1;
                self.calls.ddb_status_write += 1;
                *self
                    .dead_by_class
                    .entry(class.as_str().to_owned())
                    .or_default() += 1;
                self.finish(job, Fate::DeadLettered, now);
                false
            }
            Route::Finish { suppress, .. } => {
                if suppress {
                    self.calls.ddb_suppression_write += 1;
                }
                self.calls.ddb_status_write += 1;
                self.finish(job, Fate::Bounced, now);
                false
            }
        }
    }

    pub(super) fn done(&mut self, inst: u32) {
        let p = self.instances[inst as usize].pool;
        self.busy = self.busy.saturating_sub(1);
        self.pools[p].busy = self.pools[p].busy.saturating_sub(1);
        let now = self.now;
        if let Some(shared) = self.shared.as_mut() {
            self.instances[inst as usize]
                .breaker
                .flush(shared, now, at(now), &mut self.calls);
        }
        let pool = &mut self.pools[p];
        if pool.active > pool.allowed {
            self.instances[inst as usize].state = InstState::Retired;
            pool.active -= 1;
            return;
        }
        if pool.visible.is_empty() {
            self.go_idle(inst);
        } else {
            pool.pending_polls += 1;
            self.instances[inst as usize].state = InstState::Polling;
            self.push(now + self.sc.latency.sqs_ms, Ev::Poll(inst));
        }
    }
}

/// The simulated jobs' queue body (a typical transactional job: the delay mechanism depends on
/// the body's size).
const SIMULATED_BODY: &str = r#"{"version":1,"message_id":"sim","campaign_id":"sim","from":"shop@example.com","to":["reader@example.org"],"content":{"subject":"Your order","text":"Thanks for your order."}}"#;

/// The address a reply names in angle brackets (`421 4.7.0 <a@x>: ...` -> `a@x`), if any.
fn named_address(reply: &str) -> Option<&str> {
    let start = reply.find('<')? + 1;
    let len = reply[start..].find('>')?;
    Some(&reply[start..start + len]).filter(|a| a.contains('@'))
}
