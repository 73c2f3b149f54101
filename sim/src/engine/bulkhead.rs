//! The retry lane, as the send function has it (`Governor::retry_permit`): a copy that already
//! waited books the send-rate schedule only while it is booked less than the retry horizon
//! ahead; fresh mail books up to the full horizon, so it always finds a slot, and retries take
//! what it leaves.

use courier_core::rate::RateLimit;

use super::*;

impl Engine<'_> {
    /// Whether `job` has waited before (a failure or a wait was recorded): the retry lane's.
    pub(super) fn is_retry(&self, job: u32) -> bool {
        self.jobs[job as usize].retry.first_attempt_at.is_some()
    }

    /// The limit a retry books with: the send rate's, within the retry horizon.
    pub(super) fn retry_limit(&self) -> Option<RateLimit> {
        let limit = self.sc.send_rate?;
        Some(match self.sc.retry_horizon {
            Some(h) => RateLimit {
                max_ahead: h.min(limit.max_ahead),
                ..limit
            },
            None => limit,
        })
    }

    /// Whether `inst` knows, without a call, that a retry's booking is refused at `now_ms`.
    pub(super) fn retry_refused_known(&self, inst: u32, now_ms: u64) -> bool {
        let Some(limit) = self.retry_limit() else {
            return false;
        };
        let now_us = i64::try_from(now_ms).unwrap_or(i64::MAX / 2_000) * 1000;
        let i = &self.instances[inst as usize];
        let mut probe = i.allowance;
        now_us < i.rate_booked_until_us - limit.max_ahead_us()
            && probe.take(now_us, limit.spacing_us()).is_none()
    }
}
