//! The throttling receiving domain and per-destination pacing, as the send function has them
//! (`functions/send/src/governor/destinations.rs`): the real `courier_core::pacing` rule and
//! `courier_core::rate` schedule, the domain's state shared, each instance's copy of it read at
//! most once per breaker cache period, a throttle reply read fresh and written back.
//!
//! Simplified: a paced send whose slot is ahead waits for it without also booking a provider
//! slot (the domain's rate is far below the provider's quota in the scenarios).

use courier_core::pacing::DestinationRate;
use courier_core::rate::RateLimit;

use super::*;

/// The receiving domain's side: its token bucket, the shared pacing state and the figures.
#[derive(Debug, Default)]
pub(super) struct ReceiverWorld {
    tokens: f64,
    last_ms: u64,
    /// The domain's shared pacing state and its schedule's next free slot (µs).
    state: Option<DestinationRate>,
    tat: Option<i64>,
    /// The throttle reply (an index into the provider's replies), and whether the classifier
    /// takes it for the domain's throttle (`Verdict::throttles_receiver`: only then is the
    /// domain's pace lowered, as in the function).
    pub(super) reply: usize,
    lowers: bool,
    pub(super) accepted: u64,
    pub(super) throttled: u64,
    /// Sends the domain's pace deferred (`rate_limited`, no call).
    pub(super) paced: u64,
    pub(super) lowered: u64,
    pub(super) first_accept_ms: Option<u64>,
    pub(super) last_accept_ms: u64,
}

impl ReceiverWorld {
    /// A receiver whose throttle reply is the provider's `replies[reply]`.
    pub(super) fn new(reply: usize, lowers: bool) -> ReceiverWorld {
        ReceiverWorld {
            reply,
            lowers,
            ..ReceiverWorld::default()
        }
    }

    /// The receiver takes one message at `t_ms` if its bucket (one second deep) has a token.
    fn take(&mut self, accept_per_sec: f64, t_ms: u64) -> bool {
        let elapsed = t_ms.saturating_sub(self.last_ms) as f64 / 1000.0;
        self.tokens = (self.tokens + elapsed * accept_per_sec).min(accept_per_sec.max(1.0));
        self.last_ms = self.last_ms.max(t_ms);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

fn us(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX / 2_000) * 1000
}

impl Engine<'_> {
    /// Whether job `i` goes to the throttling domain: of every `n` jobs, `floor(n × share)`
    /// do, spread evenly.
    pub(super) fn to_receiver(&self, i: u32) -> bool {
        self.sc.receiver.as_ref().is_some_and(|r| {
            (f64::from(i + 1) * r.share).floor() > (f64::from(i) * r.share).floor()
        })
    }

    /// The domain's state as instance `inst` knows it at `t_ms` (read again after a cache
    /// period, one `GetItem`).
    pub(super) fn seen_state(&mut self, inst: u32, t_ms: u64) -> Option<DestinationRate> {
        let cache_ms = self.sc.breaker_cache_ms;
        let i = &mut self.instances[inst as usize];
        match i.pace_seen {
            Some((read_at, state)) if t_ms < read_at + cache_ms.max(1) => state,
            _ => {
                self.calls.ddb_pace_read += 1;
                let state = self.receiver.as_ref().and_then(|r| r.state);
                i.pace_seen = Some((t_ms, state));
                state
            }
        }
    }

    /// The slot for a send of `inst` to the throttling domain at `t_ms`: `Some(t_ms)` while the
    /// domain is not paced, `None` when its schedule is booked past the horizon.
    pub(super) fn receiver_slot(&mut self, inst: u32, t_ms: u64) -> Option<u64> {
        let Some(rule) = self.sc.destination_pacing else {
            return Some(t_ms);
        };
        let state = self.seen_state(inst, t_ms);
        let Some(per_sec) = rule.rate_at(state.as_ref(), us(t_ms)) else {
            return Some(t_ms);
        };
        let limit = RateLimit {
            per_sec,
            max_ahead: courier_core::pacing::BOOKING_HORIZON,
            chunk: 1,
        };
        self.calls.ddb_rate_write += 1;
        let r = self.receiver.as_mut()?;
        match courier_core::rate::reserve(r.tat, us(t_ms), limit.spacing_us(), limit.max_ahead_us())
        {
            (Reservation::Granted { start_us }, next) => {
                r.tat = next;
                Some(u64::try_from(start_us).unwrap_or(0).div_ceil(1000))
            }
            (Reservation::Refused { booked_until_us }, _) => {
                r.paced += 1;
                self.instances[inst as usize].pace_refused_until_us =
                    booked_until_us - limit.max_ahead_us();
                None
            }
        }
    }

    /// Whether `inst` knows, without a call, that the domain's schedule refuses bookings at
    /// `t_ms` (the send function's `destination_refused_until`): the job waits unclaimed.
    pub(super) fn receiver_refused_known(&self, inst: u32, t_ms: u64) -> bool {
        self.sc.destination_pacing.is_some()
            && us(t_ms) < self.instances[inst as usize].pace_refused_until_us
    }

    /// A send deferred by the domain's pace.
    pub(super) fn count_paced(&mut self) {
        if let Some(r) = self.receiver.as_mut() {
            r.paced += 1;
        }
    }

    /// The receiver's answer to a send at `t_ms`: `None` when it accepts (the provider's own
    /// answer follows), else the throttle reply; a throttle lowers the domain's pace (a fresh
    /// read and a conditional write).
    pub(super) fn receiver_answer(&mut self, t_ms: u64) -> Option<usize> {
        let accept_per_sec = self.sc.receiver.as_ref()?.accept_per_sec;
        let rule = self.sc.destination_pacing;
        let r = self.receiver.as_mut()?;
        if r.take(accept_per_sec, t_ms) {
            r.accepted += 1;
            r.first_accept_ms.get_or_insert(t_ms);
            r.last_accept_ms = t_ms;
            return None;
        }
        r.throttled += 1;
        if let Some(rule) = rule.filter(|_| r.lowers) {
            self.calls.ddb_pace_read += 1;
            if let Some(next) = rule.after_throttle(r.state.as_ref(), us(t_ms)) {
                self.calls.ddb_rate_write += 1;
                r.state = Some(next);
                r.lowered += 1;
            }
        }
        Some(r.reply)
    }
}
