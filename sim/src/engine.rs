//! The discrete-event engine: a simulated clock in milliseconds, one event queue, the send
//! queue and, with `retry_concurrency`, the retry queue (visible messages, delayed ones,
//! in-flight ones), each with its own Lambda pollers and instances, and
//! the send function's per-record steps with the real policy, classifier and breaker.
//!
//! Work is aggregated per batch, as the function does it: one event when a poller receives a
//! batch (every record's claim, breaker admission, provider call and decision happen in it, at
//! their own simulated times), one when the invocation ends (the breaker flush, the next poll),
//! and one per delayed message when it becomes visible again.

mod bulkhead;
mod receiver;
mod report;
mod send;

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use chrono::{DateTime, Utc};
use courier_core::breaker::{Admission, BreakerState};
use courier_core::classify::ErrorClass;
use courier_core::delay;
use courier_core::plan::{self, Acceptance, Route};
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
/// The job goes to the scenario's throttling receiver.
const F_RECEIVER: u8 = 8;

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

/// A queue and the event source polling it: the send queue, and the retry queue when the
/// scenario has one (copies that waited come back there).
#[derive(Debug, Default)]
struct Pool {
    visible: VecDeque<u32>,
    idle: Vec<u32>,
    pending_polls: usize,
    active: u32,
    allowed: u32,
    busy: u32,
    max_busy: u32,
    /// The event source's MaximumConcurrency.
    max: u32,
}

#[derive(Debug, Clone)]
struct Instance {
    /// The pool (queue) it polls.
    pool: usize,
    state: InstState,
    warm: bool,
    idle_since: u64,
    poison_fetched: Option<u64>,
    breaker: InstanceBreaker,
    /// Send-rate slots reserved and not yet used.
    allowance: Allowance,
    /// After a refused booking: until when bookings are sure to be refused (µs).
    rate_refused_until_us: i64,
    /// After a refused booking: until when the schedule was booked (µs; the retry lane's
    /// known refusal is this less the retry horizon).
    rate_booked_until_us: i64,
    /// The receiving domain's pacing state as this instance last read it, and when.
    pace_seen: Option<(u64, Option<courier_core::pacing::DestinationRate>)>,
    /// After a refused booking on the domain's schedule: until when bookings are sure to be
    /// refused (µs).
    pace_refused_until_us: i64,
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
    pools: Vec<Pool>,
    instances: Vec<Instance>,
    /// Busy instances of every pool.
    busy: u32,
    max_busy: u32,
    shared: Option<SharedBreaker>,
    provider: Provider,
    /// The throttling receiving domain, if the scenario has one.
    receiver: Option<receiver::ReceiverWorld>,
    rng_policy: SeededRandom,
    rng_world: SeededRandom,
    calls: AwsCalls,
    /// Outcomes written since the last batch ended (published when one ends).
    outcomes: u64,
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
                let q = e.queue_of(job);
                e.pools[q].visible.push_back(job);
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
        let mut provider = Provider::new(sc);
        let receiver = sc.receiver.as_ref().map(|r| {
            let verdict = courier_core::classify::classify_smtp(&r.reply);
            let lowers = verdict.throttles_receiver();
            provider.replies.push(crate::provider::Reply {
                text: r.reply.clone(),
                verdict,
            });
            receiver::ReceiverWorld::new(provider.replies.len() - 1, lowers)
        });
        Engine {
            sc,
            now: 0,
            queue: Wheel::new(),
            jobs: Vec::with_capacity(usize::try_from(sc.jobs).unwrap_or(0)),
            arrived: 0,
            unfinished: 0,
            pools: std::iter::once(sc.lambda.max_concurrency)
                .chain(sc.retry_concurrency)
                .map(|max| Pool {
                    allowed: sc.lambda.initial_concurrency.min(max),
                    max,
                    ..Pool::default()
                })
                .collect(),
            instances: Vec::new(),
            busy: 0,
            max_busy: 0,
            shared: sc.breaker.map(|cfg| SharedBreaker {
                state: BreakerState::new(at(0), &cfg),
                cfg,
                cache_ms: sc.breaker_cache_ms,
                opened: 0,
                closed_at_ms: None,
            }),
            provider,
            receiver,
            rng_policy: SeededRandom::new(sc.seed),
            rng_world: SeededRandom::new(sc.seed ^ 0x5EED_0FCA_11AB_1E00),
            calls: AwsCalls::default(),
            outcomes: 0,
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
            let flags = if self.to_receiver(id) { F_RECEIVER } else { 0 };
            self.jobs.push(Job {
                retry: RetryState::default(),
                arrived: self.now,
                finished: 0,
                receives: 0,
                fate: Fate::Pending,
                flags,
            });
            self.pools[0].visible.push_back(id);
            self.arrived += 1;
            self.unfinished += 1;
        }
        if self.arrived < sc.jobs {
            self.push(self.now + ARRIVAL_TICK_MS, Ev::Arrive);
        }
        self.wake();
    }

    /// The queue `job`'s copies come back to: the retry queue once it has waited, when the
    /// scenario has one (the send function's `COURIER_RETRY_QUEUE_URL`).
    fn queue_of(&self, job: u32) -> usize {
        usize::from(self.pools.len() > 1 && self.is_retry(job))
    }

    /// Idle pollers take newly visible messages at once (long polling); new instances start
    /// only on the scaling ticks.
    fn wake(&mut self) {
        let bs = self.sc.lambda.batch_size as usize;
        for p in 0..self.pools.len() {
            while self.pools[p].visible.len() > self.pools[p].pending_polls * bs {
                let Some(inst) = self.pools[p].idle.pop() else {
                    break;
                };
                let i = &mut self.instances[inst as usize];
                let waited = self.now.saturating_sub(i.idle_since);
                self.calls.sqs_receive_empty +=
                    waited / (self.sc.sqs.receive_wait_secs.max(1) * 1000);
                i.state = InstState::Polling;
                self.pools[p].pending_polls += 1;
                self.push(self.now + self.sc.latency.sqs_ms, Ev::Poll(inst));
            }
            self.spawn(p);
        }
    }

    fn spawn(&mut self, p: usize) {
        let bs = self.sc.lambda.batch_size as usize;
        while self.pools[p].active < self.pools[p].allowed
            && self.pools[p].visible.len() > self.pools[p].pending_polls * bs
        {
            let idx = match self
                .instances
                .iter()
                .position(|i| i.state == InstState::Retired)
            {
                Some(i) => i,
                None => {
                    self.instances.push(Instance {
                        pool: p,
                        state: InstState::Retired,
                        warm: false,
                        idle_since: 0,
                        poison_fetched: None,
                        breaker: InstanceBreaker::default(),
                        allowance: Allowance::default(),
                        rate_refused_until_us: 0,
                        rate_booked_until_us: 0,
                        pace_seen: None,
                        pace_refused_until_us: 0,
                        batch: BatchState::default(),
                    });
                    self.instances.len() - 1
                }
            };
            // A retired instance is a new execution environment for whichever source needs it.
            self.instances[idx].pool = p;
            self.instances[idx].state = InstState::Polling;
            self.pools[p].active += 1;
            self.pools[p].pending_polls += 1;
            self.push(self.now + self.sc.latency.sqs_ms, Ev::Poll(idx as u32));
        }
    }

    fn scale(&mut self) {
        let l = &self.sc.lambda;
        for p in 0..self.pools.len() {
            let pool = &mut self.pools[p];
            if pool.visible.is_empty() {
                pool.allowed = l.initial_concurrency.max(pool.busy).min(pool.max);
                // Idle pollers beyond the allowance stop.
                while pool.active > pool.allowed {
                    let Some(inst) = pool.idle.pop() else { break };
                    let i = &mut self.instances[inst as usize];
                    self.calls.sqs_receive_empty += self.now.saturating_sub(i.idle_since)
                        / (self.sc.sqs.receive_wait_secs.max(1) * 1000);
                    i.state = InstState::Retired;
                    pool.active -= 1;
                }
            } else {
                pool.allowed = (pool.allowed + l.ramp_per_minute).min(pool.max);
            }
        }
        self.wake();
        if self.unfinished > 0 || self.arrived < self.sc.jobs {
            self.push(self.now + SCALE_TICK_MS, Ev::Scale);
        }
    }

    fn go_idle(&mut self, inst: u32) {
        let pool = &mut self.pools[self.instances[inst as usize].pool];
        if pool.active > pool.allowed {
            self.instances[inst as usize].state = InstState::Retired;
            pool.active -= 1;
            return;
        }
        self.calls.sqs_receive_empty += 1;
        pool.idle.push(inst);
        let i = &mut self.instances[inst as usize];
        i.state = InstState::Idle;
        i.idle_since = self.now;
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
        // Every status write that reaches an outcome marks an outbox the batch then publishes
        // (a redriven record has no status write).
        if matches!(fate, Fate::Sent | Fate::DeadLettered | Fate::Bounced) {
            self.calls.ddb_outbox_clear += 1;
            self.outcomes += 1;
        }
        let j = &mut self.jobs[job as usize];
        j.fate = fate;
        j.finished = t;
        self.unfinished -= 1;
    }

    fn poll(&mut self, inst: u32) {
        let p = self.instances[inst as usize].pool;
        self.pools[p].pending_polls = self.pools[p].pending_polls.saturating_sub(1);
        let sc = self.sc;
        let t = self.now;
        let mut batch = std::mem::take(&mut self.batch);
        batch.clear();
        while batch.len() < sc.lambda.batch_size as usize {
            let Some(job) = self.pools[p].visible.pop_front() else {
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
        self.pools[p].busy += 1;
        self.pools[p].max_busy = self.pools[p].max_busy.max(self.pools[p].busy);
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
            let known = if self.jobs[job as usize].flags & F_RECEIVER != 0
                && self.receiver_refused_known(inst, tc)
            {
                Some((ErrorClass::RateLimited, true))
            } else if let Some(class) = self.known_blocked(inst, tc) {
                Some((class, false))
            } else if self.is_retry(job) && self.retry_refused_known(inst, tc) {
                Some((ErrorClass::RateLimited, false))
            } else {
                None
            };
            if let Some((class, receiver)) = known
                && self.wait_unclaimed(job, class, tc)
            {
                if receiver {
                    self.count_paced();
                } else if class == ErrorClass::RateLimited {
                    self.rate_refused += 1;
                }
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
            // The receiving domain's pace (the function asks it before any provider, for every
            // job: the domains' states are read once per cache period).
            if sc.destination_pacing.is_some() {
                self.seen_state(inst, tc);
            }
            if self.jobs[job as usize].flags & F_RECEIVER != 0 {
                match self.receiver_slot(inst, tc) {
                    None => {
                        let sfn = self.after_failure(job, ErrorClass::RateLimited, tc, false);
                        self.instances[inst as usize].batch.any_sfn |= sfn;
                        continue;
                    }
                    Some(slot) if slot > tc => {
                        let waiting = &mut self.instances[inst as usize].batch.waiting;
                        let at = waiting.partition_point(|&(s, _)| s <= slot);
                        waiting.insert(at, (slot, job));
                        continue;
                    }
                    Some(_) => {}
                }
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
            // The send-rate governor; a retry books in the retry lane (the bulkhead). A
            // half-open probe takes its slot but is never held back.
            if sc.send_rate.is_some() {
                let retry = self.is_retry(job);
                match self.slot(inst, tc, (batch.len() - k) as u32, retry) {
                    None if admission == Admission::Probe => {}
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
}
