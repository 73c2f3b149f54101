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
            // The provider's throttling (SES's rate) and a receiver's ("421 4.7.28", "[TSS04]",
            // "451 4.7.650"): quick at first, backing off to 7.5-15 minutes while it lasts (the
            // jitter at most doubles a delay: it stays within SQS's 15-minute delay, without
            // the state machine).
            Throttled,
            rule(
                40,
                Schedule::Exponential {
                    base: 10,
                    factor: 2.0,
                    cap: 15 * MINUTE / 2,
                },
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

/// Bulk mail keeps trying a receiver's temporary refusals as RFC 5321 (4.5.4.1) asks of a
/// sender, "at least 4-5 days": full or greylisted mailboxes (up to 12 hours apart), an
/// unavailable receiving system (up to 2 hours apart) and a receiver's throttling (up to 15
/// minutes apart) until 5 days have passed, and so do the waits such an outage or backlog
/// causes on our side (an open breaker, the send rate).
fn bulk_tier() -> TierPolicy {
    use ErrorClass::*;
    let mut tier = default_tier(DAY, 5 * DAY);
    if let Some(rule) = tier.classes.get_mut(&Throttled) {
        rule.retries = 2000;
        rule.horizon = 5 * DAY;
    }
    for class in [CircuitOpen, RateLimited] {
        if let Some(rule) = tier.classes.get_mut(&class) {
            rule.horizon = 5 * DAY;
        }
    }
    // A waiting job is received again at each wait: over days of an outage, every 7.5 to 15
    // minutes (a bulk job goes at most 15 minutes after the breaker closes), not every 2.5 to
    // 5. No longer: a wait past SQS's 15-minute delay goes through the state machine, whose
    // transitions cost more than the receives they save.
    if let Some(rule) = tier.classes.get_mut(&CircuitOpen) {
        rule.schedule = Schedule::Exponential {
            base: 30,
            factor: 1.5,
            cap: 15 * MINUTE,
        };
    }
    tier.classes.insert(
        MailboxTemporary,
        rule(
            14,
            Schedule::Delays(vec![15 * MINUTE, HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR]),
            Jitter::Proportional { ratio: 0.1 },
            true,
            5 * DAY,
        ),
    );
    tier.classes.insert(
        ProviderUnavailable,
        rule(
            150,
            Schedule::Exponential {
                base: 30,
                factor: 2.0,
                cap: 2 * HOUR,
            },
            Jitter::Equal,
            false,
            5 * DAY,
        ),
    );
    // Room for the mailbox retries besides a few of the other classes.
    tier.max_total_attempts = 20;
    tier
}

impl Default for RetryPolicy {
    /// Transactional mail gives up on infrastructure trouble after 2 hours and on full or
    /// greylisted mailboxes after 1 day (mail that is useless later: a sign-in code, a receipt);
    /// bulk mail keeps trying a receiver's temporary refusals for 5 days (RFC 5321 4.5.4.1).
    fn default() -> RetryPolicy {
        RetryPolicy {
            transactional: default_tier(2 * HOUR, DAY),
            bulk: bulk_tier(),
        }
    }
}
