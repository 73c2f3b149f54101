//! Each simulated instance's view of the shared circuit breaker, mirroring the send function's
//! `functions/send/src/breakers.rs` on the simulated clock: the shared state (one DynamoDB item)
//! is cached for `cache_ms`; results are counted locally and folded into the shared state once
//! per batch that saw a failure (a half-open probe's result at once); moving to half-open or
//! taking a probe slot is a conditional write that loses to a newer version. The decisions
//! themselves are the real `courier_core::breaker::{admit, record}`.

use chrono::{DateTime, Utc};
use courier_core::breaker::{self, Admission, BreakerConfig, BreakerState, Mode};

use crate::cost::AwsCalls;

/// The shared item and what happened to it.
#[derive(Debug, Clone)]
pub struct SharedBreaker {
    pub state: BreakerState,
    pub cfg: BreakerConfig,
    pub cache_ms: u64,
    /// Closed -> open transitions.
    pub opened: u64,
    /// When it last closed after being open (simulated ms).
    pub closed_at_ms: Option<u64>,
}

/// One instance's cache and unsaved counts.
#[derive(Debug, Clone, Default)]
pub struct InstanceBreaker {
    cached: Option<(BreakerState, u64)>,
    unsaved_successes: u32,
    unsaved_failures: u32,
}

impl InstanceBreaker {
    fn state(&mut self, shared: &SharedBreaker, now_ms: u64, calls: &mut AwsCalls) -> BreakerState {
        if let Some((state, fetched)) = &self.cached
            && now_ms.saturating_sub(*fetched) < shared.cache_ms
        {
            return state.clone();
        }
        calls.ddb_breaker_read += 1;
        self.cached = Some((shared.state.clone(), now_ms));
        shared.state.clone()
    }

    /// Whether the cached state says open and not yet due for probing (no write; a read when
    /// the cache is stale), as `Breakers::paused` in the send function.
    pub fn open(
        &mut self,
        shared: &SharedBreaker,
        now_ms: u64,
        now: DateTime<Utc>,
        calls: &mut AwsCalls,
    ) -> bool {
        let state = self.state(shared, now_ms, calls);
        state.mode == Mode::Open && state.open_until.is_some_and(|until| until > now)
    }

    /// Whether a send may go ahead now.
    pub fn admit(
        &mut self,
        shared: &mut SharedBreaker,
        now_ms: u64,
        now: DateTime<Utc>,
        calls: &mut AwsCalls,
    ) -> Admission {
        let state = self.state(shared, now_ms, calls);
        let (admission, next, _) = breaker::admit(&state, now, &shared.cfg);
        if next == state {
            return admission;
        }
        calls.ddb_breaker_write += 1;
        if shared.state.version == state.version {
            shared.state = next.clone();
            self.cached = Some((next, now_ms));
            admission
        } else {
            // Lost the conditional write: re-read next time, do not probe now.
            self.cached = None;
            Admission::Reject {
                retry_at: now + chrono::Duration::seconds(shared.cfg.open_secs.max(1)),
            }
        }
    }

    /// Records a send's result; `failed` only for failures that count against the provider.
    pub fn record(
        &mut self,
        shared: &mut SharedBreaker,
        failed: bool,
        now_ms: u64,
        now: DateTime<Utc>,
        calls: &mut AwsCalls,
    ) {
        let state = self.state(shared, now_ms, calls);
        if state.mode == Mode::HalfOpen {
            // Results counted before the circuit opened say nothing now: only the probe's.
            self.unsaved_successes = 0;
            self.unsaved_failures = 0;
        }
        if failed {
            self.unsaved_failures += 1;
        } else {
            self.unsaved_successes += 1;
        }
        if state.mode == Mode::HalfOpen {
            self.flush_one(shared, now_ms, now, calls);
        }
    }

    /// End of a batch: writes the counts if a failure is among them.
    pub fn flush(
        &mut self,
        shared: &mut SharedBreaker,
        now_ms: u64,
        now: DateTime<Utc>,
        calls: &mut AwsCalls,
    ) {
        if self.unsaved_failures > 0 {
            self.flush_one(shared, now_ms, now, calls);
        }
    }

    fn flush_one(
        &mut self,
        shared: &mut SharedBreaker,
        now_ms: u64,
        now: DateTime<Utc>,
        calls: &mut AwsCalls,
    ) {
        if self.unsaved_successes == 0 && self.unsaved_failures == 0 {
            return;
        }
        calls.ddb_breaker_read += 1;
        let fresh = shared.state.clone();
        let mut state = fresh.clone();
        let results = std::iter::repeat_n(false, self.unsaved_successes.min(5_000) as usize)
            .chain(std::iter::repeat_n(true, self.unsaved_failures as usize));
        for failed in results {
            let (next, change) = breaker::record(&state, failed, now, &shared.cfg);
            state = next;
            match change {
                Some(c) if c.from == Mode::Closed && c.to == Mode::Open => shared.opened += 1,
                Some(c) if c.to == Mode::Closed => shared.closed_at_ms = Some(now_ms),
                _ => {}
            }
        }
        calls.ddb_breaker_write += 1;
        shared.state = BreakerState {
            version: fresh.version + 1,
            ..state
        };
        self.cached = Some((shared.state.clone(), now_ms));
        self.unsaved_successes = 0;
        self.unsaved_failures = 0;
    }
}
