//! The discrete-event engine: a simulated clock in milliseconds, one event queue, the send
//! queue (visible messages, delayed ones, in-flight ones), Lambda's pollers and instances, and
//! the send function's per-record steps with the real policy, classifier and breaker.
//!
//! Work is aggregated per batch, as the function does it: one event when a poller receives a
//! batch (every record's claim, breaker admission, provider call and decision happen in it, at
//! their own simulated times), one when the invocation ends (the breaker flush, the next poll),
//! and one per delayed message when it becomes visible again.

use std::collections::{BTreeMap, VecDeque};

use chrono::{DateTime, Utc};
use courier_core::breaker::{Admission, BreakerState};
use courier_core::classify::ErrorClass;
use courier_core::policy::{Decision, DelayMechanism, MAX_QUEUE_DELAY_SECS, RetryState};
use courier_core::random::{RandomSource, SeededRandom};
use courier_core::rate::{Allowance, Reservation};

use crate::breakers::{InstanceBreaker, SharedBreaker};
use crate::cost::{AwsCalls, Cost, PRICES, SFN_TRANSITIONS_PER_WAIT};
use crate::provider::{Answer, Provider};
use crate::report::{OutageFigures, Report};
use crate::scenario::Scenario;
use crate::wheel::Wheel;

/// The simulated clock's epoch (any fixed instant: the policy only compares times).
const EPOCH_MS: i64 = 1_800_000_000_000;
const ARRIVAL_TICK_MS: u64 = 100;
const SCALE_TICK_MS: u64 = 60_000;

fn at(ms: u64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(EPOCH_MS + i64::try_from(ms).unwrap_or(i64::MAX / 4))
        .unwrap_or_default()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Arrive,
    /// A delayed, redelivered or re-sent message is visible again.
    Visible(u32),
    /// A poller's receive returns.
    Poll(u32),
    /// An instance's next send-rate slot has come.
    Send(u32),
    /// An invocation ends.
    Done(u32),
    Scale,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Pending,
    Sent,
    Bounced,
    DeadLettered,
    Redriven,
}

const F_OUTAGE: u8 = 1;
const F_CALLED_IN_OUTAGE: u8 = 2;
const F_MAYBE_DELIVERED: u8 = 4;

#[derive(Debug, Clone)]
struct Job {
    retry: RetryState,
    arrived: u64,
    finished: u64,
    /// SQS receive count of the current message copy.
    receives: u32,
    fate: Fate,
    flags: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InstState {
    Retired,
    Idle,
    Polling,
    Busy,
}

#[derive(Debug, Clone)]
struct Instance {
    state: InstState,
    warm: bool,
    idle_since: u64,
    poison_fetched: Option<u64>,
    breaker: InstanceBreaker,
    /// Send-rate slots reserved and not yet used.
    allowance: Allowance,
    /// After a refused booking: until when bookings are sure to be refused (µs).
    rate_refused_until_us: i64,
    /// The invocation in progress.
    batch: BatchState,
}

/// What an invocation has done so far (it may wait for send-rate slots between records).
#[derive(Debug, Clone, Default)]
struct BatchState {
    /// When the batch was received.
    started: u64,
    /// When its last step so far ends.
    end: u64,
    any_sfn: bool,
    acked: usize,
    /// Re-enqueues: (job, delay in ms).
    requeues: Vec<(u32, u64)>,
    /// Records waiting for their slot: (slot in ms, job), in slot order.
    waiting: VecDeque<(u64, u32)>,
}

struct Engine<'a> {
    sc: &'a Scenario,
    now: u64,
    queue: Wheel<Ev>,
    jobs: Vec<Job>,
    arrived: u64,
    unfinished: u64,
    visible: VecDeque<u32>,
    instances: Vec<Instance>,
    idle: Vec<u32>,
    pending_polls: usize,
    active: u32,
    allowed: u32,
    busy: u32,
    max_busy: u32,
    shared: Option<SharedBreaker>,
    provider: Provider,
    rng_policy: SeededRandom,
    rng_world: SeededRandom,
    calls: AwsCalls,
    per_sec_calls: Vec<u32>,
    per_sec_accepted: Vec<u32>,
    throttled: u64,
    /// The shared send-rate schedule's next free slot (microseconds), as in `courier_core::rate`.
    rate_tat: Option<i64>,
    rate_refused: u64,
    failed_calls: u64,
    timed_out: u64,
    outage_calls: u64,
    outage_jobs: u64,
    outage_calling_jobs: u64,
    possible_duplicates: u64,
    dead_by_class: BTreeMap<String, u64>,
    events: u64,
    /// Cumulative recipient shares.
    shares: Vec<f64>,
    /// Re-enqueues of the batch being handled: (job, delay in ms).
    requeues: Vec<(u32, u64)>,
    batch: Vec<u32>,
}

/// Runs a scenario to the end (every job terminal, or `max_sim_secs`).
pub fn run(sc: &Scenario) -> Result<Report, String> {
    sc.validate()?;
    let started = std::time::Instant::now();
    let mut e = Engine::new(sc);
    e.push(0, Ev::Arrive);
    e.push(SCALE_TICK_MS, Ev::Scale);
    let limit = sc.max_sim_secs.saturating_mul(1000);
    while e.unfinished > 0 || e.arrived < sc.jobs {
        let Some((t, ev)) = e.queue.pop() else {
            break;
        };
        if t > limit {
            break;
        }
        e.now = t;
        e.events += 1;
        match ev {
            Ev::Arrive => e.arrive(),
            Ev::Visible(job) => {
                e.visible.push_back(job);
                e.wake();
            }
            Ev::Poll(inst) => e.poll(inst),
            Ev::Send(inst) => e.send_waiting(inst),
            Ev::Done(inst) => e.done(inst),
            Ev::Scale => e.scale(),
        }
    }
    Ok(e.report(started.elapsed().as_secs_f64() * 1000.0))
}

impl<'a> Engine<'a> {
    fn new(sc: &'a Scenario) -> Engine<'a> {
        let mut cum = 0.0;
        let shares = sc
            .mix
            .iter()
            .map(|m| {
                cum += m.share;
                cum
            })
            .collect();
        Engine {
            sc,
            now: 0,
            queue: Wheel::new(),
            jobs: Vec::with_capacity(usize::try_from(sc.jobs).unwrap_or(0)),
            arrived: 0,
            unfinished: 0,
            visible: VecDeque::new(),
            instances: Vec::new(),
            idle: Vec::new(),
            pending_polls: 0,
            active: 0,
            allowed: sc.lambda.initial_concurrency.min(sc.lambda.max_concurrency),
            busy: 0,
            max_busy: 0,
            shared: sc.breaker.map(|cfg| SharedBreaker {
                state: BreakerState::new(at(0), &cfg),
                cfg,
                cache_ms: sc.breaker_cache_ms,
                opened: 0,
            }),
            provider: Provider::new(sc),
            rng_policy: SeededRandom::new(sc.seed),
            rng_world: SeededRandom::new(sc.seed ^ 0x5EED_0FCA_11AB_1E00),
            calls: AwsCalls::default(),
            per_sec_calls: Vec::new(),
            per_sec_accepted: Vec::new(),
            throttled: 0,
            rate_tat: None,
            rate_refused: 0,
            failed_calls: 0,
            timed_out: 0,
            outage_calls: 0,
            outage_jobs: 0,
            outage_calling_jobs: 0,
            possible_duplicates: 0,
            dead_by_class: BTreeMap::new(),
            events: 0,
            shares,
            requeues: Vec::new(),
            batch: Vec::new(),
        }
    }

    fn push(&mut self, t: u64, ev: Ev) {
        self.queue.push(t, ev);
    }

    /// Which recipient share job `i` belongs to: of every `n` jobs, exactly `floor(n * total)`
    /// belong to some share, spread evenly (Bresenham); which share, by a low-discrepancy
    /// sequence over the shares' sizes.
    fn share_of(&self, i: u32) -> Option<usize> {
        let total = *self.shares.last()?;
        let (a, b) = (f64::from(i) * total, (f64::from(i) + 1.0) * total);
        if b.floor() <= a.floor() {
            return None;
        }
        let y = (a.floor() * 0.618_033_988_749_894_9).fract() * total;
        self.shares
            .iter()
            .position(|c| y < *c)
            .or(Some(self.shares.len() - 1))
    }

    fn arrive(&mut self) {
        let sc = self.sc;
        let target = if sc.arrival_secs == 0 {
            sc.jobs
        } else {
            let ticks = sc.arrival_secs * 1000 / ARRIVAL_TICK_MS;
            let tick = self.now / ARRIVAL_TICK_MS + 1;
            (u128::from(sc.jobs) * u128::from(tick.min(ticks)) / u128::from(ticks.max(1))) as u64
        };
        while self.arrived < target {
            let id = self.jobs.len() as u32;
            self.jobs.push(Job {
                retry: RetryState::default(),
                arrived: self.now,
                finished: 0,
                receives: 0,
                fate: Fate::Pending,
                flags: 0,
            });
            self.visible.push_back(id);
            self.arrived += 1;
            self.unfinished += 1;
        }
        if self.arrived < sc.jobs {
            self.push(self.now + ARRIVAL_TICK_MS, Ev::Arrive);
        }
        self.wake();
    }

    /// Idle pollers take newly visible messages at once (long polling); new instances start
    /// only on the scaling ticks.
    fn wake(&mut self) {
        let bs = self.sc.lambda.batch_size as usize;
        while self.visible.len() > self.pending_polls * bs {
            let Some(inst) = self.idle.pop() else { break };
            let i = &mut self.instances[inst as usize];
            let waited = self.now.saturating_sub(i.idle_since);
            self.calls.sqs_receive_empty += waited / (self.sc.sqs.receive_wait_secs.max(1) * 1000);
            i.state = InstState::Polling;
            self.pending_polls += 1;
            self.push(self.now + self.sc.latency.sqs_ms, Ev::Poll(inst));
        }
        self.spawn();
    }

    fn spawn(&mut self) {
        let bs = self.sc.lambda.batch_size as usize;
        while self.active < self.allowed && self.visible.len() > self.pending_polls * bs {
            let idx = match self
                .instances
                .iter()
                .position(|i| i.state == InstState::Retired)
            {
                Some(i) => i,
                None => {
                    self.instances.push(Instance {
                        state: InstState::Retired,
                        warm: false,
                        idle_since: 0,
                        poison_fetched: None,
                        breaker: InstanceBreaker::default(),
                        allowance: Allowance::default(),
                        rate_refused_until_us: 0,
                        batch: BatchState::default(),
                    });
                    self.instances.len() - 1
                }
            };
            self.instances[idx].state = InstState::Polling;
            self.active += 1;
            self.pending_polls += 1;
            self.push(self.now + self.sc.latency.sqs_ms, Ev::Poll(idx as u32));
        }
    }

    fn scale(&mut self) {
        let l = &self.sc.lambda;
        if self.visible.is_empty() {
            self.allowed = l.initial_concurrency.max(self.busy).min(l.max_concurrency);
            // Idle pollers beyond the allowance stop.
            while self.active > self.allowed {
                let Some(inst) = self.idle.pop() else { break };
                let i = &mut self.instances[inst as usize];
                self.calls.sqs_receive_empty += self.now.saturating_sub(i.idle_since)
                    / (self.sc.sqs.receive_wait_secs.max(1) * 1000);
                i.state = InstState::Retired;
                self.active -= 1;
            }
        } else {
            self.allowed = (self.allowed + l.ramp_per_minute).min(l.max_concurrency);
        }
        self.wake();
        if self.unfinished > 0 || self.arrived < self.sc.jobs {
            self.push(self.now + SCALE_TICK_MS, Ev::Scale);
        }
    }

    fn go_idle(&mut self, inst: u32) {
        if self.active > self.allowed {
            self.instances[inst as usize].state = InstState::Retired;
            self.active -= 1;
            return;
        }
        self.calls.sqs_receive_empty += 1;
        let i = &mut self.instances[inst as usize];
        i.state = InstState::Idle;
        i.idle_since = self.now;
        self.idle.push(inst);
    }

    fn count_call(&mut self, t: u64, accepted: bool) {
        let s = (t / 1000) as usize;
        if s >= self.per_sec_calls.len() {
            self.per_sec_calls.resize(s + 1, 0);
            self.per_sec_accepted.resize(s + 1, 0);
        }
        self.per_sec_calls[s] += 1;
        if accepted {
            self.per_sec_accepted[s] += 1;
        }
    }

    fn finish(&mut self, job: u32, fate: Fate, t: u64) {
        let j = &mut self.jobs[job as usize];
        j.fate = fate;
        j.finished = t;
        self.unfinished -= 1;
    }

    fn poll(&mut self, inst: u32) {
        self.pending_polls = self.pending_polls.saturating_sub(1);
        let sc = self.sc;
        let t = self.now;
        let mut batch = std::mem::take(&mut self.batch);
        batch.clear();
        while batch.len() < sc.lambda.batch_size as usize {
            let Some(job) = self.visible.pop_front() else {
                break;
            };
            let j = &mut self.jobs[job as usize];
            if j.receives >= sc.sqs.max_receive_count {
                // SQS moves it to the redrive DLQ instead of delivering it again.
                self.finish(job, Fate::Redriven, t);
                continue;
            }
            j.receives += 1;
            batch.push(job);
        }
        if batch.is_empty() {
            self.batch = batch;
            self.go_idle(inst);
            return;
        }
        self.calls.sqs_receive += 1;
        self.calls.lambda_invocations += 1;
        self.busy += 1;
        self.max_busy = self.max_busy.max(self.busy);
        let lat = &sc.latency;
        let mut start = t;
        {
            let i = &mut self.instances[inst as usize];
            i.state = InstState::Busy;
            if !i.warm {
                start += sc.lambda.cold_start_ms;
                i.warm = true;
            }
            if i.poison_fetched
                .is_none_or(|f| start.saturating_sub(f) >= sc.poison_cache_ms)
            {
                self.calls.ddb_poison_read += 1;
                i.poison_fetched = Some(start);
            }
        }
        let tc = start + lat.dynamodb_ms;
        let in_outage = sc.in_outage(tc);
        self.instances[inst as usize].batch = BatchState {
            started: t,
            end: tc + lat.dynamodb_ms,
            ..BatchState::default()
        };
        for (k, &job) in batch.iter().enumerate() {
            // No provider can take it now, as the instance knows without a call: it waits
            // unclaimed (the send function's `wait_unclaimed`).
            if let Some(class) = self.known_blocked(inst, tc)
                && self.wait_unclaimed(job, class, tc)
            {
                self.instances[inst as usize].batch.acked += 1;
                if in_outage && self.jobs[job as usize].flags & F_OUTAGE == 0 {
                    self.jobs[job as usize].flags |= F_OUTAGE;
                    self.outage_jobs += 1;
                }
                continue;
            }
            self.calls.ddb_claim += 1;
            if sc.aws_error_rate > 0.0 && self.rng_world.next_unit() < sc.aws_error_rate {
                // A write failed: the lease is released and SQS redelivers the record.
                self.calls.ddb_status_write += 1;
                self.push(t + sc.sqs.visibility_timeout_secs * 1000, Ev::Visible(job));
                continue;
            }
            self.instances[inst as usize].batch.acked += 1;
            if in_outage && self.jobs[job as usize].flags & F_OUTAGE == 0 {
                self.jobs[job as usize].flags |= F_OUTAGE;
                self.outage_jobs += 1;
            }
            let admission = match self.shared.as_mut() {
                Some(shared) => {
                    self.instances[inst as usize]
                        .breaker
                        .admit(shared, tc, at(tc), &mut self.calls)
                }
                None => Admission::Allow,
            };
            if let Admission::Reject { .. } = admission {
                let sfn = self.after_failure(job, ErrorClass::CircuitOpen, tc, false);
                self.instances[inst as usize].batch.any_sfn |= sfn;
                continue;
            }
            // The send-rate governor (a half-open probe is never held back).
            if admission == Admission::Allow && sc.send_rate.is_some() {
                match self.slot(inst, tc, (batch.len() - k) as u32) {
                    None => {
                        self.rate_refused += 1;
                        let sfn = self.after_failure(job, ErrorClass::RateLimited, tc, false);
                        self.instances[inst as usize].batch.any_sfn |= sfn;
                        continue;
                    }
                    Some(slot) if slot > tc => {
                        self.instances[inst as usize]
                            .batch
                            .waiting
                            .push_back((slot, job));
                        continue;
                    }
                    Some(_) => {}
                }
            }
            self.send_one(inst, job, tc);
        }
        self.batch = batch;
        self.after_step(inst);
    }

    /// The class of the wait when `inst` already knows no call can be made at `now_ms`: the
    /// cached breaker state is open, or a booking was refused and its window has not passed.
    fn known_blocked(&mut self, inst: u32, now_ms: u64) -> Option<ErrorClass> {
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
    fn decide(&mut self, job: u32, class: ErrorClass, now: u64) -> Decision {
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
    fn wait_unclaimed(&mut self, job: u32, class: ErrorClass, now: u64) -> bool {
        let decision = self.decide(job, class, now);
        let Decision::Retry {
            delay,
            mechanism: DelayMechanism::QueueDelay,
            spends_attempt,
        } = decision
        else {
            return false;
        };
        if class == ErrorClass::RateLimited {
            self.rate_refused += 1;
        }
        let secs = delay.as_secs();
        let j = &mut self.jobs[job as usize];
        j.retry.record(class, spends_attempt, secs, at(now));
        j.receives = 0;
        self.requeues.push((job, secs * 1000));
        true
    }

    /// A send-rate slot for one call by `inst` at `now_ms` (None: refused), from its allowance
    /// or a reservation of up to `wanted` slots (the batch's records still to send) on the
    /// shared schedule, as `functions/send/src/governor.rs` does.
    fn slot(&mut self, inst: u32, now_ms: u64, wanted: u32) -> Option<u64> {
        let limit = self.sc.send_rate?;
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
                i.rate_refused_until_us = booked_until_us - limit.max_ahead_us();
                None
            }
        }
    }

    /// The records of `inst` whose slot has come are sent.
    fn send_waiting(&mut self, inst: u32) {
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
    fn after_step(&mut self, inst: u32) {
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
        self.push(end + lat.sqs_ms, Ev::Done(inst));
    }

    /// One provider call for `job` at `tc` by `inst`, and what follows from its answer.
    fn send_one(&mut self, inst: u32, job: u32, tc: u64) {
        let sc = self.sc;
        let lat = &sc.latency;
        let in_outage = sc.in_outage(tc);
        let answer = self
            .provider
            .call(sc, tc, self.share_of(job), &mut self.rng_world);
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
                let class = self.provider.replies[reply].verdict.class;
                if class == ErrorClass::Throttled {
                    self.throttled += 1;
                } else {
                    self.failed_calls += 1;
                }
                (class.counts_against_provider(), Some(class), false)
            }
            Answer::TimedOut { delivered, .. } => {
                self.timed_out += 1;
                if delivered {
                    self.jobs[job as usize].flags |= F_MAYBE_DELIVERED;
                }
                let class = Provider::timeout_verdict().class;
                (class.counts_against_provider(), Some(class), true)
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
    fn after_failure(&mut self, job: u32, class: ErrorClass, now: u64, ambiguous: bool) -> bool {
        let sc = self.sc;
        let decision = self.decide(job, class, now);
        match decision {
            Decision::Retry {
                delay,
                mechanism,
                spends_attempt,
            } => {
                let mut secs = delay.as_secs();
                let mut mechanism = mechanism;
                if ambiguous {
                    secs = secs.max(sc.ambiguity_grace_secs);
                    mechanism = if secs <= MAX_QUEUE_DELAY_SECS {
                        DelayMechanism::QueueDelay
                    } else {
                        DelayMechanism::StateMachine
                    };
                }
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
                }
            }
            Decision::DeadLetter { .. } => {
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
            Decision::Finish {
                suppress_recipient, ..
            } => {
                if suppress_recipient {
                    self.calls.ddb_suppression_write += 1;
                }
                self.calls.ddb_status_write += 1;
                self.finish(job, Fate::Bounced, now);
                false
            }
        }
    }

    fn done(&mut self, inst: u32) {
        self.busy = self.busy.saturating_sub(1);
        let now = self.now;
        if let Some(shared) = self.shared.as_mut() {
            self.instances[inst as usize]
                .breaker
                .flush(shared, now, at(now), &mut self.calls);
        }
        if self.active > self.allowed {
            self.instances[inst as usize].state = InstState::Retired;
            self.active -= 1;
            return;
        }
        if self.visible.is_empty() {
            self.go_idle(inst);
        } else {
            self.instances[inst as usize].state = InstState::Polling;
            self.pending_polls += 1;
            self.push(now + self.sc.latency.sqs_ms, Ev::Poll(inst));
        }
    }

    fn report(mut self, wall_ms: f64) -> Report {
        let sc = self.sc;
        // Idle pollers keep long-polling until the end.
        let end = self.now;
        for &inst in &self.idle {
            let i = &self.instances[inst as usize];
            self.calls.sqs_receive_empty +=
                end.saturating_sub(i.idle_since) / (sc.sqs.receive_wait_secs.max(1) * 1000);
        }
        let mut counts = [0u64; 5];
        let mut latencies: Vec<u64> = Vec::new();
        let mut makespan = 0u64;
        let recovery_ms = sc.recovery_secs().map(|s| s * 1000);
        let mut drained_at: Option<u64> = None;
        for j in &self.jobs {
            let k = match j.fate {
                Fate::Pending => 0,
                Fate::Sent => 1,
                Fate::Bounced => 2,
                Fate::DeadLettered => 3,
                Fate::Redriven => 4,
            };
            counts[k] += 1;
            if j.fate != Fate::Pending {
                makespan = makespan.max(j.finished);
            }
            if j.fate == Fate::Sent {
                latencies.push(j.finished - j.arrived);
            }
            if let Some(r) = recovery_ms
                && j.arrived < r
            {
                let f = if j.fate == Fate::Pending {
                    u64::MAX
                } else {
                    j.finished
                };
                drained_at = Some(drained_at.map_or(f, |d| d.max(f)));
            }
        }
        latencies.sort_unstable();
        let pct = |p: f64| -> f64 {
            if latencies.is_empty() {
                return 0.0;
            }
            let i = ((latencies.len() - 1) as f64 * p).round() as usize;
            latencies[i] as f64 / 1000.0
        };
        let after = recovery_ms.map_or(0, |r| (r / 1000) as usize);
        let peak = |v: &[u32], from: usize| v.iter().skip(from).copied().max().unwrap_or(0);
        let quota = sc.provider.quota_per_sec;
        let over = self
            .per_sec_calls
            .iter()
            .skip(after)
            .filter(|c| f64::from(**c) > quota)
            .count() as u64;
        let jobs = self.jobs.len().max(1) as f64;
        let outage = sc
            .faults
            .iter()
            .any(|f| matches!(f.kind, crate::scenario::FaultKind::Outage { .. }));
        let cost = Cost::of(&self.calls, &PRICES);
        Report {
            scenario: sc.name.clone(),
            policy: sc.policy_label.clone(),
            breaker: match sc.breaker {
                None => "off".into(),
                Some(b) => format!(
                    "min {} / {:.0}% / open {}s",
                    b.min_calls,
                    b.failure_ratio * 100.0,
                    b.open_secs
                ),
            },
            seed: sc.seed,
            send_rate: sc
                .send_rate
                .map_or_else(|| "off".into(), |r| format!("{}/s", r.per_sec)),
            rate_refused: self.rate_refused,
            jobs: self.jobs.len() as u64,
            sent: counts[1],
            bounced: counts[2],
            dead_lettered: counts[3],
            redriven: counts[4],
            pending: counts[0] + (sc.jobs - self.arrived),
            dead_letters_by_class: self.dead_by_class,
            provider_calls: self.calls.provider_calls,
            provider_accepted: self.calls.provider_accepted,
            throttled: self.throttled,
            failed_calls: self.failed_calls,
            timed_out: self.timed_out,
            provider_calls_per_job: self.calls.provider_calls as f64 / jobs,
            outage: outage.then(|| OutageFigures {
                jobs: self.outage_jobs,
                calls: self.outage_calls,
                calls_per_job: self.outage_calls as f64 / self.outage_jobs.max(1) as f64,
                calling_jobs: self.outage_calling_jobs,
                calls_per_calling_job: self.outage_calls as f64
                    / self.outage_calling_jobs.max(1) as f64,
            }),
            quota_per_sec: quota,
            peak_calls_per_sec: peak(&self.per_sec_calls, 0),
            peak_calls_per_sec_after_recovery: peak(&self.per_sec_calls, after),
            peak_accepted_per_sec_after_recovery: peak(&self.per_sec_accepted, after),
            peak_calls_per_sec_10s_after_recovery: self
                .per_sec_calls
                .get(after..)
                .unwrap_or(&[])
                .windows(10)
                .map(|w| f64::from(w.iter().sum::<u32>()) / 10.0)
                .fold(0.0, f64::max),
            secs_over_quota_after_recovery: over,
            recovery_secs: sc.recovery_secs(),
            drain_secs: match (drained_at, recovery_ms) {
                (Some(d), Some(r)) if d != u64::MAX => Some(d.saturating_sub(r) as f64 / 1000.0),
                _ => None,
            },
            makespan_secs: makespan as f64 / 1000.0,
            latency_p50_secs: pct(0.5),
            latency_p99_secs: pct(0.99),
            possible_duplicates: self.possible_duplicates,
            max_concurrency: self.max_busy,
            breaker_opened: self.shared.as_ref().map_or(0, |s| s.opened),
            aws_calls_per_job: self.calls.per_job_calls() as f64 / jobs,
            periodic_calls: self.calls.periodic_calls(),
            cost_per_1000_jobs: cost.total / jobs * 1000.0,
            cost,
            aws: self.calls,
            events: self.events,
            wall_ms,
        }
    }
}
