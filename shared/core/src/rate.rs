//! The shared send-rate governor: keeps every instance's calls to a provider, together, within
//! the provider's send-rate quota (SES's `MaxSendRate`, a relay's agreed rate), however many
//! function instances Lambda runs.
//!
//! The breaker stops calls to a failing provider; it does nothing about a healthy provider
//! being called faster than its quota, which is what happens when a backlog meets a thousand
//! instances after an outage (the simulator measured 2,284 calls/s against a 500/s quota, the
//! throttling replies then tripping the breaker again and again). The governor is the
//! provider's quota, enforced before the call.
//!
//! # How
//! A virtual schedule per provider (the generic cell rate algorithm): one shared number, the
//! *theoretical arrival time* (`tat`) of the next free send slot. Sends are spaced
//! `1 / per_sec` apart. An instance reserves `n` slots at once: it gets the slots from
//! `max(tat, now)` on, and `tat` moves `n` spacings on. Every reservation succeeds while the
//! schedule is booked at most `max_ahead` past now; the instance then waits for its slot (at
//! most `max_ahead`) and sends. Beyond that it is refused without booking anything, and the job
//! waits in the queue (class `rate_limited`, no attempt spent, its own short back-off).
//! Calls are thus spaced at least `1 / per_sec` apart across all instances: in any second at
//! most `per_sec` calls start.
//!
//! [`reserve`] is the schedule's pure step (the in-memory store and the simulator use it; the
//! DynamoDB adapter performs the same step with conditional writes); [`Allowance`] is one
//! instance's unused slots. Times are integer microseconds since the Unix epoch.

use std::time::Duration;

/// A provider's send-rate limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Calls per second across all instances (> 0).
    pub per_sec: f64,
    /// How far past now the schedule may be booked before reservations are refused.
    pub max_ahead: Duration,
    /// Slots one instance reserves at a time (one shared write per `chunk` sends).
    pub chunk: u32,
}

/// Why a rate limit is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateLimitError {
    #[error("the send rate must be a positive number of calls per second, not {0:?}")]
    Rate(String),
    #[error("the chunk of slots reserved at once must be between 1 and 1000, not {0}")]
    Chunk(u32),
    #[error("the booking horizon must be between 1 ms and 15 minutes, not {0:?}")]
    Ahead(Duration),
}

impl RateLimit {
    /// Default booking horizon: a reserved slot is at most this far away, and a send waits for
    /// it in its invocation. Short, because the batch waits for its slowest record: a horizon of
    /// `h` caps an instance at about a batch per `h` when the schedule is booked out, so where
    /// instances are few (the template's 20) a longer one held the drain after an outage, and
    /// fresh mail behind it, below the quota (`courier-dev simulate outage-30m --instances 20`).
    pub const DEFAULT_MAX_AHEAD: Duration = Duration::from_secs(1);
    /// Default slots reserved at once (an SQS batch).
    pub const DEFAULT_CHUNK: u32 = 10;
    /// Default retry lane: a copy that already waited books a schedule only while it is booked
    /// less than this far ahead (fresh mail up to `max_ahead`).
    pub const DEFAULT_RETRY_HORIZON: Duration = Duration::from_millis(200);

    /// A limit of `per_sec` with the default horizon and chunk.
    pub fn per_second(per_sec: f64) -> Result<RateLimit, RateLimitError> {
        RateLimit {
            per_sec,
            max_ahead: Self::DEFAULT_MAX_AHEAD,
            chunk: Self::DEFAULT_CHUNK,
        }
        .validated()
    }

    /// `self` if every field is in range.
    pub fn validated(self) -> Result<RateLimit, RateLimitError> {
        if !(self.per_sec.is_finite() && self.per_sec > 0.0 && self.per_sec <= 1_000_000.0) {
            return Err(RateLimitError::Rate(self.per_sec.to_string()));
        }
        if !(1..=1000).contains(&self.chunk) {
            return Err(RateLimitError::Chunk(self.chunk));
        }
        if self.max_ahead < Duration::from_millis(1) || self.max_ahead > Duration::from_secs(900) {
            return Err(RateLimitError::Ahead(self.max_ahead));
        }
        Ok(self)
    }

    /// The distance between two slots, rounded up (never faster than the quota).
    pub fn spacing_us(&self) -> i64 {
        (1_000_000.0 / self.per_sec).ceil().max(1.0) as i64
    }

    /// The horizon in microseconds.
    pub fn max_ahead_us(&self) -> i64 {
        i64::try_from(self.max_ahead.as_micros()).unwrap_or(i64::MAX)
    }
}

/// The schedule's answer to a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reservation {
    /// The slots from `start_us` on (one spacing apart) are this caller's.
    Granted { start_us: i64 },
    /// The schedule is booked until `booked_until_us`, more than the horizon away.
    Refused { booked_until_us: i64 },
}

/// One step of the shared schedule: reserves `cost_us` (slots × spacing) on a schedule whose
/// next free slot is `tat` (None: never used), at `now_us`, unless it is booked more than
/// `max_ahead_us` past now. Returns the answer and the new `tat` (None when refused).
pub fn reserve(
    tat: Option<i64>,
    now_us: i64,
    cost_us: i64,
    max_ahead_us: i64,
) -> (Reservation, Option<i64>) {
    let start = tat.map_or(now_us, |t| t.max(now_us));
    if start - now_us > max_ahead_us {
        return (
            Reservation::Refused {
                booked_until_us: start,
            },
            None,
        );
    }
    (
        Reservation::Granted { start_us: start },
        Some(start.saturating_add(cost_us)),
    )
}

/// One instance's reserved but unused slots for one provider.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Allowance {
    next_us: i64,
    left: u32,
}

impl Allowance {
    /// Slots from `start_us` on, `count` of them.
    pub fn new(start_us: i64, count: u32) -> Allowance {
        Allowance {
            next_us: start_us,
            left: count,
        }
    }

    /// The next slot, unless none is left or the slots have gone stale (more than one spacing
    /// in the past: sending on them late would bunch calls together, above the rate).
    pub fn take(&mut self, now_us: i64, spacing_us: i64) -> Option<i64> {
        while self.left > 0 && self.next_us + spacing_us < now_us {
            // A slot that passed unused is gone.
            self.next_us += spacing_us;
            self.left -= 1;
        }
        if self.left == 0 {
            return None;
        }
        let slot = self.next_us;
        self.next_us += spacing_us;
        self.left -= 1;
        Some(slot)
    }

    /// Slots left.
    pub fn left(&self) -> u32 {
        self.left
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_schedule_grants_now_and_books_the_cost() {
        assert_eq!(
            reserve(None, 1_000, 20, 500),
            (Reservation::Granted { start_us: 1_000 }, Some(1_020))
        );
        // a schedule that lags behind now starts at now, not in the past
        assert_eq!(
            reserve(Some(10), 1_000, 20, 500),
            (Reservation::Granted { start_us: 1_000 }, Some(1_020))
        );
    }

    #[test]
    fn a_booked_schedule_grants_its_next_free_slot_until_the_horizon() {
        assert_eq!(
            reserve(Some(1_400), 1_000, 20, 500),
            (Reservation::Granted { start_us: 1_400 }, Some(1_420))
        );
        assert_eq!(
            reserve(Some(1_500), 1_000, 20, 500).0,
            Reservation::Granted { start_us: 1_500 }
        );
        assert_eq!(
            reserve(Some(1_501), 1_000, 20, 500),
            (
                Reservation::Refused {
                    booked_until_us: 1_501
                },
                None
            )
        );
    }

    #[test]
    fn many_instances_together_never_exceed_the_rate_in_any_second() {
        // GIVEN 1,000 instances asking for 10 slots each, every millisecond, for 3 seconds,
        // on a 500/s limit
        let limit = RateLimit::per_second(500.0).unwrap();
        let spacing = limit.spacing_us();
        let mut tat = None;
        let mut calls: Vec<i64> = Vec::new();
        for now in (0..3_000_000).step_by(1_000) {
            for _ in 0..1_000 {
                let (r, next) = reserve(tat, now, spacing * 10, limit.max_ahead_us());
                if let Reservation::Granted { start_us } = r {
                    tat = next;
                    let mut a = Allowance::new(start_us, 10);
                    while let Some(slot) = a.take(start_us, spacing) {
                        calls.push(slot);
                    }
                }
            }
        }
        // THEN no one-second window (sliding, at every call) holds more than 500 calls
        calls.sort_unstable();
        for (i, &t) in calls.iter().enumerate() {
            let in_window = calls[i..].partition_point(|&c| c < t + 1_000_000);
            assert!(in_window <= 500, "{in_window} calls in the second from {t}");
        }
        // AND the schedule is used at the full rate (3 s, and the horizon booked ahead of them)
        let full = 500.0 * (3.0 + limit.max_ahead.as_secs_f64());
        assert!(
            calls.len() as f64 >= full * 0.95,
            "{} of {full}",
            calls.len()
        );
    }

    #[test]
    fn stale_slots_are_dropped_not_bunched() {
        let mut a = Allowance::new(0, 5);
        assert_eq!(a.take(0, 100), Some(0));
        // 250 us later the slots at 100 are stale; 200 is still usable (one spacing late)
        assert_eq!(a.take(250, 100), Some(200));
        assert_eq!(a.left(), 2);
        // long after, every remaining slot is gone
        assert_eq!(a.take(10_000, 100), None);
        assert_eq!(a.left(), 0);
    }

    #[test]
    fn limits_out_of_range_are_refused_with_what_was_wrong() {
        assert!(matches!(
            RateLimit::per_second(0.0),
            Err(RateLimitError::Rate(_))
        ));
        assert!(matches!(
            RateLimit::per_second(f64::NAN),
            Err(RateLimitError::Rate(_))
        ));
        let ok = RateLimit::per_second(14.0).unwrap();
        assert_eq!(ok.spacing_us(), 71_429);
        assert_eq!(
            RateLimit { chunk: 0, ..ok }.validated(),
            Err(RateLimitError::Chunk(0))
        );
        assert!(matches!(
            RateLimit {
                max_ahead: Duration::ZERO,
                ..ok
            }
            .validated(),
            Err(RateLimitError::Ahead(_))
        ));
    }
}
