//! Circuit breaker state machine (pure). The shared state lives in DynamoDB (one item per
//! provider) so every concurrent instance sees the same circuit; this module only decides.
//!
//! ```text
//! closed --(>= min_calls in the window and failure ratio >= threshold)--> open
//! open --(open_for elapsed)--> half_open (at most `probes` sends in flight)
//! half_open --(a probe succeeds `probes_to_close` times)--> closed
//! half_open --(a probe fails)--> open (open_for doubles, up to max_open_for)
//! ```

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Tunables.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BreakerConfig {
    /// Length of the rolling window in which calls are counted.
    pub window_secs: i64,
    /// Fewer calls than this in the window never open the circuit.
    pub min_calls: u32,
    /// Failure ratio (0..1) that opens the circuit.
    pub failure_ratio: f64,
    /// First open period.
    pub open_secs: i64,
    /// Longest open period after repeated failed probes.
    pub max_open_secs: i64,
    /// Concurrent probes allowed while half-open.
    pub probes: u32,
    /// Successful probes needed to close.
    pub probes_to_close: u32,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            window_secs: 60,
            min_calls: 10,
            failure_ratio: 0.5,
            open_secs: 30,
            max_open_secs: 300,
            probes: 2,
            probes_to_close: 2,
        }
    }
}

/// The circuit's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Closed,
    Open,
    HalfOpen,
}

/// The shared state of one provider's circuit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BreakerState {
    pub mode: Mode,
    pub window_start: DateTime<Utc>,
    pub calls: u32,
    pub failures: u32,
    /// While open: when half-open probing may start.
    pub open_until: Option<DateTime<Utc>>,
    /// Current open period (doubles on failed probes).
    pub open_secs: i64,
    pub probes_in_flight: u32,
    pub probe_successes: u32,
    /// Bumped on every change; the store writes conditionally on it (optimistic concurrency).
    pub version: u64,
}

impl BreakerState {
    pub fn new(now: DateTime<Utc>, cfg: &BreakerConfig) -> BreakerState {
        BreakerState {
            mode: Mode::Closed,
            window_start: now,
            calls: 0,
            failures: 0,
            open_until: None,
            open_secs: cfg.open_secs,
            probes_in_flight: 0,
            probe_successes: 0,
            version: 0,
        }
    }
}

/// Whether a send may go ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Allow,
    /// Allowed as one of the half-open probes; report its result.
    Probe,
    /// Not now; the circuit may be tried again at `retry_at`.
    Reject {
        retry_at: DateTime<Utc>,
    },
}

/// A change of mode, for metrics and alarms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModeChange {
    pub from: Mode,
    pub to: Mode,
}

/// Decides whether to send now; may move open -> half-open (the returned state must be stored).
pub fn admit(
    state: &BreakerState,
    now: DateTime<Utc>,
    cfg: &BreakerConfig,
) -> (Admission, BreakerState, Option<ModeChange>) {
    let mut next = state.clone();
    match state.mode {
        Mode::Closed => (Admission::Allow, next, None),
        Mode::Open => {
            let until = state.open_until.unwrap_or(now);
            if now < until {
                (Admission::Reject { retry_at: until }, next, None)
            } else {
                next.mode = Mode::HalfOpen;
                next.probes_in_flight = 1;
                next.probe_successes = 0;
                next.version += 1;
                let change = ModeChange {
                    from: Mode::Open,
                    to: Mode::HalfOpen,
                };
                (Admission::Probe, next, Some(change))
            }
        }
        Mode::HalfOpen => {
            if state.probes_in_flight < cfg.probes {
                next.probes_in_flight += 1;
                next.version += 1;
                (Admission::Probe, next, None)
            } else {
                let retry_at = now + chrono::Duration::seconds(cfg.open_secs.max(1));
                (Admission::Reject { retry_at }, next, None)
            }
        }
    }
}

/// Records a call's result. `failed` means a failure that counts against the provider
/// (see [`crate::classify::ErrorClass::counts_against_provider`]).
pub fn record(
    state: &BreakerState,
    failed: bool,
    now: DateTime<Utc>,
    cfg: &BreakerConfig,
) -> (BreakerState, Option<ModeChange>) {
    let mut next = state.clone();
    next.version += 1;
    let open = |next: &mut BreakerState, open_secs: i64| {
        next.mode = Mode::Open;
        next.open_secs = open_secs;
        next.open_until = Some(now + chrono::Duration::seconds(open_secs));
        next.probes_in_flight = 0;
        next.probe_successes = 0;
        next.calls = 0;
        next.failures = 0;
        next.window_start = now;
    };
    match state.mode {
        Mode::Closed => {
            if (now - state.window_start).num_seconds() >= cfg.window_secs {
                next.window_start = now;
                next.calls = 0;
                next.failures = 0;
            }
            next.calls += 1;
            if failed {
                next.failures += 1;
            }
            let ratio = f64::from(next.failures) / f64::from(next.calls.max(1));
            if failed && next.calls >= cfg.min_calls && ratio >= cfg.failure_ratio {
                open(&mut next, cfg.open_secs);
                return (
                    next,
                    Some(ModeChange {
                        from: Mode::Closed,
                        to: Mode::Open,
                    }),
                );
            }
            (next, None)
        }
        Mode::HalfOpen => {
            next.probes_in_flight = next.probes_in_flight.saturating_sub(1);
            if failed {
                let longer = (state.open_secs * 2).min(cfg.max_open_secs);
                open(&mut next, longer);
                return (
                    next,
                    Some(ModeChange {
                        from: Mode::HalfOpen,
                        to: Mode::Open,
                    }),
                );
            }
            next.probe_successes += 1;
            if next.probe_successes >= cfg.probes_to_close {
                next = BreakerState {
                    version: next.version,
                    ..BreakerState::new(now, cfg)
                };
                return (
                    next,
                    Some(ModeChange {
                        from: Mode::HalfOpen,
                        to: Mode::Closed,
                    }),
                );
            }
            (next, None)
        }
        // A result that arrives while open came from a send admitted before it opened: it says
        // nothing new.
        Mode::Open => (state.clone(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    #[test]
    fn opens_on_failure_ratio_then_probes_then_closes() {
        let cfg = BreakerConfig::default();
        let mut s = BreakerState::new(t(0), &cfg);
        // GIVEN 9 failures: below min_calls, still closed
        for i in 0..9 {
            s = record(&s, true, t(i), &cfg).0;
        }
        assert_eq!(s.mode, Mode::Closed);
        // WHEN the 10th fails THEN it opens
        let (s2, change) = record(&s, true, t(9), &cfg);
        assert_eq!(
            change,
            Some(ModeChange {
                from: Mode::Closed,
                to: Mode::Open
            })
        );
        // AND rejects until open_until
        let (a, _, _) = admit(&s2, t(20), &cfg);
        assert_eq!(a, Admission::Reject { retry_at: t(39) });
        // THEN after it, a limited number of probes
        let (a, s3, change) = admit(&s2, t(40), &cfg);
        assert_eq!(
            (a, change.map(|c| c.to)),
            (Admission::Probe, Some(Mode::HalfOpen))
        );
        let (a, s4, _) = admit(&s3, t(40), &cfg);
        assert_eq!(a, Admission::Probe);
        let (a, _, _) = admit(&s4, t(40), &cfg);
        assert!(matches!(a, Admission::Reject { .. }));
        let (s5, _) = record(&s4, false, t(41), &cfg);
        let (s6, change) = record(&s5, false, t(41), &cfg);
        assert_eq!(change.map(|c| c.to), Some(Mode::Closed));
        assert_eq!(s6.mode, Mode::Closed);
        assert!(s6.version > s.version);
    }

    #[test]
    fn failed_probe_reopens_for_longer_up_to_the_cap() {
        let cfg = BreakerConfig::default();
        let mut s = BreakerState::new(t(0), &cfg);
        for i in 0..10 {
            s = record(&s, true, t(i), &cfg).0;
        }
        let mut now = 100;
        let mut periods = Vec::new();
        for _ in 0..6 {
            let (a, probing, _) = admit(&s, t(now), &cfg);
            assert_eq!(a, Admission::Probe);
            s = record(&probing, true, t(now), &cfg).0;
            periods.push(s.open_secs);
            now += 1000;
        }
        assert_eq!(periods, vec![60, 120, 240, 300, 300, 300]);
    }

    #[test]
    fn successes_keep_it_closed_and_windows_roll() {
        let cfg = BreakerConfig::default();
        let mut s = BreakerState::new(t(0), &cfg);
        for i in 0..100 {
            s = record(&s, i % 3 == 0, t(i), &cfg).0;
        }
        assert_eq!(s.mode, Mode::Closed);
        // failures spread over many windows never reach min_calls in one window
        let mut s = BreakerState::new(t(0), &cfg);
        for i in 0..50 {
            s = record(&s, true, t(i * 61), &cfg).0;
        }
        assert_eq!(s.mode, Mode::Closed);
    }
}
