//! Per-destination pacing: each receiving domain that throttles us gets a send rate of its own,
//! on the shared schedule ([`crate::rate`]), that listens to it: additive increase while the
//! domain accepts, multiplicative decrease on its throttle replies (Gmail `421 4.7.28`, Outlook
//! `451 4.7.650`, Yahoo `[TSS04]`, ...), between a floor and a ceiling. Postfix adapts its
//! per-destination concurrency the same way; this adapts a rate, which is what a serverless
//! sender controls.
//!
//! A domain is unpaced until it first throttles. Its shared state is two numbers, the rate set
//! at the last decrease and when ([`DestinationRate`]); the rate since then grows linearly with
//! time, so an accepted send writes nothing, and once the rate is back at the ceiling the
//! domain is unpaced again. Decreases are at most one per [`DestinationPacing::hold`]: the
//! throttle replies of one burst (slots already booked at the old rate) count once.
//!
//! Pure: the caller passes the time; the send function keeps the state in the control table.

use std::time::Duration;

/// The rule: floor, ceiling, increase and decrease.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DestinationPacing {
    /// The lowest rate a domain is paced at (calls per second, > 0).
    pub floor_per_sec: f64,
    /// At or above this rate a domain is not paced at all.
    pub ceiling_per_sec: f64,
    /// Added to a domain's rate per minute without a throttle reply.
    pub increase_per_min: f64,
    /// The factor applied on a throttle reply (in (0, 1)); the first throttle of an unpaced
    /// domain starts it at `ceiling × decrease`.
    pub decrease: f64,
    /// At most one decrease per `hold`.
    pub hold: Duration,
}

/// Why a pacing rule is not valid.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PacingError {
    #[error(
        "the destination rate floor must be a positive number of calls per second below the ceiling, not {floor} (ceiling {ceiling})"
    )]
    Bounds { floor: f64, ceiling: f64 },
    #[error("the destination rate ceiling must be at most 1,000,000 calls per second, not {0}")]
    Ceiling(f64),
    #[error("the destination rate increase must be a positive number per minute, not {0}")]
    Increase(f64),
    #[error("the destination rate decrease must be a factor between 0 and 1 (exclusive), not {0}")]
    Decrease(f64),
    #[error("the hold between two decreases must be between 1 s and 10 minutes, not {0:?}")]
    Hold(Duration),
}

/// A domain's shared state: the rate set at its last decrease, and when (µs since the epoch).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DestinationRate {
    pub per_sec: f64,
    pub since_us: i64,
}

/// How far ahead a paced domain's send slots are booked: a send waits at most this long in its
/// invocation, a later slot in the queue. Short, because an invocation held for one domain holds
/// back the next batch, and with it every other domain's mail, where instances are few.
pub const BOOKING_HORIZON: Duration = Duration::from_millis(100);

impl Default for DestinationPacing {
    /// Floor 0.5/s, ceiling 100/s, +6/s per minute, × 0.7 on a throttle, one decrease per 5 s
    /// (longer than the [`BOOKING_HORIZON`]: slots booked at the old rate lapse within it).
    fn default() -> DestinationPacing {
        DestinationPacing {
            floor_per_sec: 0.5,
            ceiling_per_sec: 100.0,
            increase_per_min: 6.0,
            decrease: 0.7,
            hold: Duration::from_secs(5),
        }
    }
}

impl DestinationPacing {
    /// `self` if every field is in range.
    pub fn validated(self) -> Result<DestinationPacing, PacingError> {
        let (floor, ceiling) = (self.floor_per_sec, self.ceiling_per_sec);
        if !(ceiling.is_finite() && ceiling <= 1_000_000.0) {
            return Err(PacingError::Ceiling(ceiling));
        }
        if !(floor.is_finite() && floor > 0.0 && floor < ceiling) {
            return Err(PacingError::Bounds { floor, ceiling });
        }
        if !(self.increase_per_min.is_finite() && self.increase_per_min > 0.0) {
            return Err(PacingError::Increase(self.increase_per_min));
        }
        if !(self.decrease > 0.0 && self.decrease < 1.0) {
            return Err(PacingError::Decrease(self.decrease));
        }
        if self.hold < Duration::from_secs(1) || self.hold > Duration::from_secs(600) {
            return Err(PacingError::Hold(self.hold));
        }
        Ok(self)
    }

    /// The rate of a domain whose state is `state` at `now_us`: grown linearly since its last
    /// decrease; `None` when it is unpaced (no state, or grown back to the ceiling).
    pub fn rate_at(&self, state: Option<&DestinationRate>, now_us: i64) -> Option<f64> {
        let s = state?;
        let minutes = (now_us - s.since_us).max(0) as f64 / 60_000_000.0;
        let rate = s.per_sec + self.increase_per_min * minutes;
        (rate < self.ceiling_per_sec).then(|| rate.max(self.floor_per_sec))
    }

    /// The state after a throttle reply at `now_us`: the rate of the moment times the decrease
    /// (an unpaced domain: the ceiling's), never below the floor. `None`: no change, the last
    /// decrease is less than a hold ago.
    pub fn after_throttle(
        &self,
        state: Option<&DestinationRate>,
        now_us: i64,
    ) -> Option<DestinationRate> {
        let hold_us = i64::try_from(self.hold.as_micros()).unwrap_or(i64::MAX);
        if let Some(s) = state
            && now_us.saturating_sub(s.since_us) < hold_us
        {
            return None;
        }
        let current = self.rate_at(state, now_us).unwrap_or(self.ceiling_per_sec);
        Some(DestinationRate {
            per_sec: (current * self.decrease).max(self.floor_per_sec),
            since_us: now_us,
        })
    }

    /// When a domain whose state is `state` is unpaced again (µs): its rate reaches the
    /// ceiling then; the state can be forgotten after it.
    pub fn unpaced_at(&self, state: &DestinationRate) -> i64 {
        let minutes = (self.ceiling_per_sec - state.per_sec).max(0.0) / self.increase_per_min;
        state
            .since_us
            .saturating_add((minutes * 60_000_000.0).ceil() as i64)
    }
}

/// The domain an address's mail goes to, lower-cased (`None` without an `@`).
pub fn domain_of(address: &str) -> Option<String> {
    let (_, domain) = address.rsplit_once('@')?;
    let domain = domain.trim_end_matches('>').trim();
    (!domain.is_empty()).then(|| domain.to_ascii_lowercase())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000;

    fn rule() -> DestinationPacing {
        DestinationPacing {
            floor_per_sec: 1.0,
            ceiling_per_sec: 100.0,
            increase_per_min: 10.0,
            decrease: 0.5,
            hold: Duration::from_secs(5),
        }
    }

    #[test]
    fn an_unthrottled_domain_is_not_paced() {
        assert_eq!(rule().rate_at(None, 0), None);
    }

    #[test]
    fn the_first_throttle_starts_at_the_ceiling_times_the_decrease() {
        let s = rule().after_throttle(None, 7 * S).unwrap();
        assert_eq!(
            s,
            DestinationRate {
                per_sec: 50.0,
                since_us: 7 * S
            }
        );
        assert_eq!(rule().rate_at(Some(&s), 7 * S), Some(50.0));
    }

    #[test]
    fn the_rate_grows_linearly_until_the_ceiling_then_the_domain_is_unpaced() {
        let s = DestinationRate {
            per_sec: 40.0,
            since_us: 0,
        };
        // +10/s per minute
        assert_eq!(rule().rate_at(Some(&s), 60 * S), Some(50.0));
        assert_eq!(rule().rate_at(Some(&s), 90 * S), Some(55.0));
        // 6 minutes to climb 60/s: unpaced at the ceiling
        assert_eq!(rule().unpaced_at(&s), 360 * S);
        assert!(rule().rate_at(Some(&s), 359 * S).unwrap() < 100.0);
        assert_eq!(rule().rate_at(Some(&s), 360 * S), None);
    }

    #[test]
    fn a_throttle_multiplies_the_rate_of_the_moment_and_never_goes_below_the_floor() {
        let s = DestinationRate {
            per_sec: 40.0,
            since_us: 0,
        };
        // at 60 s the rate is 50/s: halved to 25
        assert_eq!(
            rule().after_throttle(Some(&s), 60 * S),
            Some(DestinationRate {
                per_sec: 25.0,
                since_us: 60 * S
            })
        );
        // at the floor, 5 s later: 1.83/s halved is below the floor
        let low = DestinationRate {
            per_sec: 1.0,
            since_us: 0,
        };
        assert_eq!(
            rule().after_throttle(Some(&low), 5 * S).unwrap().per_sec,
            1.0
        );
    }

    #[test]
    fn the_replies_of_one_burst_decrease_once() {
        let s = rule().after_throttle(None, 0).unwrap();
        assert_eq!(rule().after_throttle(Some(&s), 4 * S), None);
        assert!(rule().after_throttle(Some(&s), 5 * S).is_some());
    }

    #[test]
    fn repeated_throttles_settle_near_what_the_domain_accepts() {
        // GIVEN a domain that throttles every send above 30/s, checked each second
        let r = rule();
        let mut state = None;
        let mut rates = Vec::new();
        for second in 0..1_800 {
            let now = second * S;
            let rate = r.rate_at(state.as_ref(), now).unwrap_or(r.ceiling_per_sec);
            if rate > 30.0
                && let Some(next) = r.after_throttle(state.as_ref(), now)
            {
                state = Some(next);
            }
            if second >= 600 {
                rates.push(r.rate_at(state.as_ref(), now).unwrap());
            }
        }
        // THEN after ten minutes the rate saws between half and all of 30/s, never above
        let max = rates.iter().copied().fold(0.0, f64::max);
        let mean = rates.iter().sum::<f64>() / rates.len() as f64;
        assert!(max <= 30.5, "{max}");
        assert!((15.0..=30.0).contains(&mean), "{mean}");
        assert!(rates.iter().all(|&x| x >= 14.9), "below half");
    }

    #[test]
    fn rules_out_of_range_are_refused_with_what_was_wrong() {
        let ok = rule();
        assert_eq!(ok.validated(), Ok(ok));
        assert!(DestinationPacing::default().validated().is_ok());
        assert!(matches!(
            DestinationPacing {
                floor_per_sec: 0.0,
                ..ok
            }
            .validated(),
            Err(PacingError::Bounds { .. })
        ));
        assert!(matches!(
            DestinationPacing {
                floor_per_sec: 200.0,
                ..ok
            }
            .validated(),
            Err(PacingError::Bounds { .. })
        ));
        assert!(matches!(
            DestinationPacing {
                ceiling_per_sec: f64::INFINITY,
                ..ok
            }
            .validated(),
            Err(PacingError::Ceiling(_))
        ));
        assert!(matches!(
            DestinationPacing {
                increase_per_min: -1.0,
                ..ok
            }
            .validated(),
            Err(PacingError::Increase(_))
        ));
        for d in [0.0, 1.0, f64::NAN] {
            assert!(matches!(
                DestinationPacing { decrease: d, ..ok }.validated(),
                Err(PacingError::Decrease(_))
            ));
        }
        assert!(matches!(
            DestinationPacing {
                hold: Duration::ZERO,
                ..ok
            }
            .validated(),
            Err(PacingError::Hold(_))
        ));
    }

    #[test]
    fn the_domain_of_an_address_is_lower_cased() {
        assert_eq!(domain_of("Ann@GMail.com").as_deref(), Some("gmail.com"));
        assert_eq!(domain_of("no-at-sign"), None);
        assert_eq!(domain_of("x@"), None);
    }
}
