//! The default policy: the table of classes, schedules and horizons a deployment gets when it
//! configures nothing.

use super::*;

pub(super) const MINUTE: u64 = 60;
pub(super) const HOUR: u64 = 3600;
pub(super) const DAY: u64 = 24 * HOUR;

pub(super) fn rule(
    retries: u32,
    schedule: Schedule,
    jitter: Jitter,
    spends: bool,
    horizon: u64,
) -> ClassRule {
    ClassRule {
        retries,
        schedule,
        jitter,
        spends_attempt: spends,
        horizon,
    }
}

fn default_tier(short_horizon: u64, mailbox_horizon: u64) -> TierPolicy {
    use ErrorClass::*;
    let classes = BTreeMap::from([
        (
            Network,
            rule(
                5,
                Schedule::Delays(vec![5, 15, 30, 60, 120]),
                Jitter::Proportional { ratio: 0.2 },
                true,
                short_horizon,
            ),
        ),
        (
            Tls,
            rule(
                3,
                Schedule::Delays(vec![60, 5 * MINUTE, 15 * MINUTE]),
                Jitter::Proportional { ratio: 0.2 },
                true,
                short_horizon,
            ),
        ),
        (
            Throttled,
            rule(
                8,
                Schedule::Delays(vec![10]),
                Jitter::Proportional { ratio: 1.0 },
                false,
                short_horizon,
            ),
        ),
        (
            ProviderUnavailable,
            rule(
                20,
                Schedule::Exponential {
                    base: 30,
                    factor: 2.0,
                    cap: 15 * MINUTE,
                },
                Jitter::Equal,
                false,
                short_horizon,
            ),
        ),
        (
            MailboxTemporary,
            rule(
                3,
                Schedule::Delays(vec![15 * MINUTE, HOUR, 6 * HOUR]),
                Jitter::Proportional { ratio: 0.1 },
                true,
                mailbox_horizon,
            ),
        ),
        (
            CircuitOpen,
            rule(
                10_000,
                Schedule::Exponential {
                    base: 30,
                    factor: 1.5,
                    cap: 5 * MINUTE,
                },
                Jitter::Equal,
                false,
                short_horizon,
            ),
        ),
        (
            // Short first waits (the schedule is booked only seconds ahead), backing off while
            // the backlog lasts; counted apart from circuit_open, so the waits of an outage do
            // not carry over into the drain after it.
            RateLimited,
            rule(
                10_000,
                Schedule::Exponential {
                    base: 5,
                    factor: 1.5,
                    cap: 5 * MINUTE,
                },
                Jitter::Equal,
                false,
                short_horizon,
            ),
        ),
        (
            Unknown,
            rule(
                3,
                Schedule::Delays(vec![60, 5 * MINUTE, 15 * MINUTE]),
                Jitter::Proportional { ratio: 0.2 },
                true,
                short_horizon,
            ),
        ),
    ]);
    TierPolicy {
        max_total_attempts: 12,
        classes,
    }
}

impl Default for RetryPolicy {
    /// Transactional mail gives up on infrastructure trouble after 2 hours and on full or
    /// greylisted mailboxes after 1 day; bulk mail after 1 day and 5 days (RFC 5321 s4.5.4.1).
    fn default() -> RetryPolicy {
        RetryPolicy {
            transactional: default_tier(2 * HOUR, DAY),
            bulk: default_tier(DAY, 5 * DAY),
        }
    }
}
