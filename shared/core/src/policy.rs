//! Retry policy: per class and priority tier, what happens after a failure.
//!
//! [`RetryPolicy::decide`] is pure: it takes the job's [`RetryState`] (counters carried in the
//! re-enqueued message), the failure's class, `now` and a [`RandomSource`], and returns a
//! [`Decision`]. Defaults are in [`RetryPolicy::default`]; a JSON file or the
//! `COURIER_RETRY_POLICY_JSON` variable overrides any part of them (see `docs/retry-policy.md`).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::classify::ErrorClass;
use crate::job::Priority;
use crate::random::RandomSource;
use crate::status::Status;

/// SQS's per-message `DelaySeconds` ceiling; longer waits go through the delay state machine.
pub const MAX_QUEUE_DELAY_SECS: u64 = 900;
/// Step Functions Standard waits up to a year; no sane retry needs more.
pub const MAX_DELAY_SECS: u64 = 365 * 24 * 3600;

/// How a delay is randomised.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Jitter {
    /// Exactly the scheduled delay (not recommended: synchronised retries).
    None,
    /// Uniform in `[0, d]`.
    Full,
    /// Uniform in `[d/2, d]`.
    Equal,
    /// `min(cap, uniform[base, 3 * previous])`, base being the schedule's first delay.
    Decorrelated,
    /// Uniform in `[d, d * (1 + ratio)]`: never earlier than scheduled.
    Proportional { ratio: f64 },
}

/// The base delay before the n-th retry of a class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    /// The n-th retry waits `delays[n]` (the last entry repeats).
    Delays(#[serde(with = "secs_list")] Vec<u64>),
    /// `min(cap, base * factor^n)`.
    Exponential {
        #[serde(with = "secs")]
        base: u64,
        factor: f64,
        #[serde(with = "secs")]
        cap: u64,
    },
}

impl Schedule {
    fn base_delay(&self, retry_index: u32) -> u64 {
        match self {
            Schedule::Delays(list) => {
                let i = usize::try_from(retry_index).unwrap_or(usize::MAX);
                list.get(i).or(list.last()).copied().unwrap_or(1)
            }
            Schedule::Exponential { base, factor, cap } => {
                let d =
                    (*base as f64) * factor.powi(i32::try_from(retry_index).unwrap_or(i32::MAX));
                if d.is_finite() && d < *cap as f64 {
                    d.round() as u64
                } else {
                    *cap
                }
            }
        }
    }

    fn first(&self) -> u64 {
        self.base_delay(0)
    }

    fn cap(&self) -> u64 {
        match self {
            Schedule::Delays(list) => list.iter().copied().max().unwrap_or(1),
            Schedule::Exponential { cap, .. } => *cap,
        }
    }
}

/// What to do with one retryable class in one tier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassRule {
    /// Retries after failures of this class (spending classes: failures of this class over the
    /// job's life; non-spending classes: consecutive waits).
    pub retries: u32,
    pub schedule: Schedule,
    pub jitter: Jitter,
    /// Whether a failure of this class uses up one of the job's attempts. Throttling, provider
    /// outages and open circuits do not: the message is not at fault.
    pub spends_attempt: bool,
    /// Give up when the next try would fall later than this after the job's first attempt.
    #[serde(with = "secs")]
    pub horizon: u64,
}

/// The rules of one priority tier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierPolicy {
    /// Cap on spent attempts across all classes.
    pub max_total_attempts: u32,
    pub classes: BTreeMap<ErrorClass, ClassRule>,
}

/// The whole policy matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    pub transactional: TierPolicy,
    pub bulk: TierPolicy,
}

/// Where a dead letter goes. Each category has its own archival age and alarm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadLetterCategory {
    RetriesExhausted,
    InvalidJob,
    Poison,
    NeedsReview,
    /// A raw message SQS moved to the DLQ after maxReceiveCount (no error record of ours).
    Redriven,
}

impl DeadLetterCategory {
    pub const ALL: [DeadLetterCategory; 5] = [
        DeadLetterCategory::RetriesExhausted,
        DeadLetterCategory::InvalidJob,
        DeadLetterCategory::Poison,
        DeadLetterCategory::NeedsReview,
        DeadLetterCategory::Redriven,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeadLetterCategory::RetriesExhausted => "retries_exhausted",
            DeadLetterCategory::InvalidJob => "invalid_job",
            DeadLetterCategory::Poison => "poison",
            DeadLetterCategory::NeedsReview => "needs_review",
            DeadLetterCategory::Redriven => "redriven",
        }
    }

    pub fn parse(name: &str) -> Option<DeadLetterCategory> {
        DeadLetterCategory::ALL
            .into_iter()
            .find(|c| c.as_str() == name)
    }
}

/// How a retry waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DelayMechanism {
    /// Re-enqueue with `DelaySeconds` (at most 900).
    QueueDelay,
    /// Start the delay state machine (Wait, then SendMessage back to the queue).
    StateMachine,
}

/// The policy's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Retry {
        delay: Duration,
        mechanism: DelayMechanism,
        spends_attempt: bool,
    },
    DeadLetter {
        category: DeadLetterCategory,
        reason: String,
    },
    Finish {
        status: Status,
        suppress_recipient: bool,
    },
}

/// The retry counters a job carries from attempt to attempt.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryState {
    /// Attempts spent so far (all classes).
    pub spent: u32,
    /// Spent failures by class.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub by_class: BTreeMap<ErrorClass, u32>,
    /// Trailing run of waits of one non-spending class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streak: Option<(ErrorClass, u32)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_attempt_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_delay_secs: Option<u64>,
}

impl RetryState {
    /// Records a failure and the retry chosen for it (`delay_secs`).
    pub fn record(&mut self, class: ErrorClass, spends: bool, delay_secs: u64, at: DateTime<Utc>) {
        self.first_attempt_at.get_or_insert(at);
        if spends {
            self.spent += 1;
            *self.by_class.entry(class).or_default() += 1;
            self.streak = None;
        } else {
            self.streak = match self.streak {
                Some((c, n)) if c == class => Some((c, n + 1)),
                _ => Some((class, 1)),
            };
        }
        self.last_delay_secs = Some(delay_secs);
    }
}

/// A configuration error, naming the place that is wrong.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("retry policy is not valid JSON or has unknown fields: {0}")]
    Parse(#[source] serde_json::Error),
    #[error("retry policy {tier}.{class}: {problem}")]
    Invalid {
        tier: &'static str,
        class: String,
        problem: String,
    },
    #[error("cannot read retry policy file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl RetryPolicy {
    /// Parses a policy document: tiers and classes it names replace the defaults for those
    /// classes; everything it does not name keeps the default.
    pub fn from_json(text: &str) -> Result<RetryPolicy, PolicyError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct TierOverride {
            max_total_attempts: Option<u32>,
            #[serde(default)]
            classes: BTreeMap<String, ClassRule>,
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Overrides {
            transactional: Option<TierOverride>,
            bulk: Option<TierOverride>,
        }
        let overrides: Overrides = serde_json::from_str(text).map_err(PolicyError::Parse)?;
        let mut policy = RetryPolicy::default();
        for (name, over, tier) in [
            (
                "transactional",
                overrides.transactional,
                &mut policy.transactional,
            ),
            ("bulk", overrides.bulk, &mut policy.bulk),
        ] {
            let Some(over) = over else { continue };
            if let Some(max) = over.max_total_attempts {
                tier.max_total_attempts = max;
            }
            for (class_name, rule) in over.classes {
                let Some(class) = ErrorClass::parse(&class_name) else {
                    return Err(PolicyError::Invalid {
                        tier: name,
                        class: class_name,
                        problem: format!(
                            "unknown class; known: {}",
                            ErrorClass::ALL.map(ErrorClass::as_str).join(", ")
                        ),
                    });
                };
                tier.classes.insert(class, rule);
            }
        }
        policy.validate()?;
        Ok(policy)
    }

    /// Reads the policy from `COURIER_RETRY_POLICY_FILE` or `COURIER_RETRY_POLICY_JSON` through
    /// `lookup`; neither set gives the defaults.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<RetryPolicy, PolicyError> {
        if let Some(path) = lookup("COURIER_RETRY_POLICY_FILE") {
            let text = std::fs::read_to_string(&path).map_err(|source| PolicyError::Read {
                path: path.clone(),
                source,
            })?;
            return RetryPolicy::from_json(&text);
        }
        if let Some(json) = lookup("COURIER_RETRY_POLICY_JSON") {
            return RetryPolicy::from_json(&json);
        }
        Ok(RetryPolicy::default())
    }

    /// Checks every rule for values that cannot work.
    pub fn validate(&self) -> Result<(), PolicyError> {
        for (tier_name, tier) in [("transactional", &self.transactional), ("bulk", &self.bulk)] {
            let bad = |class: &str, problem: String| PolicyError::Invalid {
                tier: tier_name,
                class: class.to_owned(),
                problem,
            };
            if tier.max_total_attempts == 0 || tier.max_total_attempts > 1000 {
                return Err(bad(
                    "max_total_attempts",
                    format!("must be 1..=1000, is {}", tier.max_total_attempts),
                ));
            }
            for (class, rule) in &tier.classes {
                let name = class.as_str();
                if !class.is_retryable() {
                    return Err(bad(name, "this class is never retried; remove it".into()));
                }
                if rule.retries > 10_000 {
                    return Err(bad(
                        name,
                        format!("retries must be at most 10000, is {}", rule.retries),
                    ));
                }
                match &rule.schedule {
                    Schedule::Delays(list) if list.is_empty() => {
                        return Err(bad(name, "schedule.delays must not be empty".into()));
                    }
                    Schedule::Delays(list) => {
                        if let Some(d) = list.iter().find(|d| **d == 0 || **d > MAX_DELAY_SECS) {
                            return Err(bad(name, format!("delay {d}s is outside 1s..=365d")));
                        }
                    }
                    Schedule::Exponential { base, factor, cap } => {
                        if *base == 0 || *cap < *base || *cap > MAX_DELAY_SECS {
                            return Err(bad(
                                name,
                                format!(
                                    "exponential needs 1s <= base <= cap <= 365d, got base {base}s cap {cap}s"
                                ),
                            ));
                        }
                        if !(factor.is_finite() && *factor >= 1.0 && *factor <= 100.0) {
                            return Err(bad(
                                name,
                                format!("exponential factor must be in 1..=100, is {factor}"),
                            ));
                        }
                    }
                }
                if let Jitter::Proportional { ratio } = rule.jitter
                    && !(ratio.is_finite() && (0.0..=10.0).contains(&ratio))
                {
                    return Err(bad(
                        name,
                        format!("jitter ratio must be in 0..=10, is {ratio}"),
                    ));
                }
                if rule.horizon == 0 || rule.horizon > MAX_DELAY_SECS {
                    return Err(bad(
                        name,
                        format!("horizon {}s is outside 1s..=365d", rule.horizon),
                    ));
                }
            }
            for class in ErrorClass::ALL.into_iter().filter(|c| c.is_retryable()) {
                if !tier.classes.contains_key(&class) {
                    return Err(bad(class.as_str(), "retryable class has no rule".into()));
                }
            }
        }
        Ok(())
    }

    pub fn tier(&self, priority: Priority) -> &TierPolicy {
        match priority {
            Priority::Transactional => &self.transactional,
            Priority::Bulk => &self.bulk,
        }
    }

    /// Decides what follows a failure of `class`.
    ///
    /// `state` holds the counters *before* this failure; `not_after` is the job's deadline.
    pub fn decide(
        &self,
        priority: Priority,
        class: ErrorClass,
        state: &RetryState,
        now: DateTime<Utc>,
        not_after: Option<DateTime<Utc>>,
        rng: &mut dyn RandomSource,
    ) -> Decision {
        let category = match class {
            ErrorClass::RecipientPermanent => {
                return Decision::Finish {
                    status: Status::BouncedPermanent,
                    suppress_recipient: true,
                };
            }
            ErrorClass::InvalidJob => Some(DeadLetterCategory::InvalidJob),
            ErrorClass::Poison => Some(DeadLetterCategory::Poison),
            ErrorClass::ContentRejected | ErrorClass::SenderConfig | ErrorClass::Rendering => {
                Some(DeadLetterCategory::NeedsReview)
            }
            _ => None,
        };
        if let Some(category) = category {
            return Decision::DeadLetter {
                category,
                reason: format!("{class} is not retried"),
            };
        }
        let tier = self.tier(priority);
        let Some(rule) = tier.classes.get(&class) else {
            return Decision::DeadLetter {
                category: DeadLetterCategory::NeedsReview,
                reason: format!("no retry rule for {class}"),
            };
        };
        let exhausted = |reason: String| Decision::DeadLetter {
            category: DeadLetterCategory::RetriesExhausted,
            reason,
        };
        // n = how many failures of this kind, this one included.
        let n = if rule.spends_attempt {
            state.by_class.get(&class).copied().unwrap_or(0) + 1
        } else {
            match state.streak {
                Some((c, k)) if c == class => k + 1,
                _ => 1,
            }
        };
        if n > rule.retries {
            return exhausted(format!(
                "{class}: {} retries used (limit {})",
                n - 1,
                rule.retries
            ));
        }
        if rule.spends_attempt && state.spent + 1 >= tier.max_total_attempts {
            return exhausted(format!(
                "{} attempts spent (limit {})",
                state.spent + 1,
                tier.max_total_attempts
            ));
        }
        let base = rule.schedule.base_delay(n - 1);
        let delay = jittered(rule, base, state.last_delay_secs, rng).max(1);
        let next = now + chrono::Duration::seconds(i64::try_from(delay).unwrap_or(i64::MAX / 2));
        let first = state.first_attempt_at.unwrap_or(now);
        let horizon_end =
            first + chrono::Duration::seconds(i64::try_from(rule.horizon).unwrap_or(i64::MAX / 2));
        if next > horizon_end {
            return exhausted(format!(
                "{class}: next try would be past the {}s give-up horizon",
                rule.horizon
            ));
        }
        if let Some(deadline) = not_after
            && next > deadline
        {
            return exhausted(format!("next try would be past not_after {deadline}"));
        }
        Decision::Retry {
            delay: Duration::from_secs(delay),
            mechanism: if delay <= MAX_QUEUE_DELAY_SECS {
                DelayMechanism::QueueDelay
            } else {
                DelayMechanism::StateMachine
            },
            spends_attempt: rule.spends_attempt,
        }
    }
}

fn jittered(rule: &ClassRule, base: u64, previous: Option<u64>, rng: &mut dyn RandomSource) -> u64 {
    let u = rng.next_unit();
    let b = base as f64;
    let d = match rule.jitter {
        Jitter::None => b,
        Jitter::Full => u * b,
        Jitter::Equal => b / 2.0 + u * b / 2.0,
        Jitter::Decorrelated => {
            let low = rule.schedule.first() as f64;
            let high = (previous.unwrap_or(rule.schedule.first()) as f64 * 3.0).max(low);
            (low + u * (high - low)).min(rule.schedule.cap() as f64)
        }
        Jitter::Proportional { ratio } => b + u * b * ratio,
    };
    d.round().clamp(0.0, MAX_DELAY_SECS as f64) as u64
}

const MINUTE: u64 = 60;
const HOUR: u64 = 3600;
const DAY: u64 = 24 * HOUR;

fn rule(retries: u32, schedule: Schedule, jitter: Jitter, spends: bool, horizon: u64) -> ClassRule {
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

/// Durations in the policy file: a number of seconds, or a string like `90s`, `15m`, `6h`, `5d`.
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("invalid duration {text:?}: expected e.g. 90s, 15m, 6h, 5d"))?;
    let mult = match unit {
        "" | "s" => 1,
        "m" => MINUTE,
        "h" => HOUR,
        "d" => DAY,
        _ => {
            return Err(format!(
                "invalid duration unit in {text:?}: use s, m, h or d"
            ));
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("duration {text:?} is too large"))
}

mod secs {
    use serde::{Deserialize, Deserializer, Serializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    pub(super) enum Raw {
        Number(u64),
        Text(String),
    }

    impl Raw {
        pub(super) fn secs<E: serde::de::Error>(self) -> Result<u64, E> {
            match self {
                Raw::Number(n) => Ok(n),
                Raw::Text(t) => super::parse_duration(&t).map_err(E::custom),
            }
        }
    }

    pub(super) fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(*v)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        Raw::deserialize(d)?.secs()
    }
}

mod secs_list {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &[u64], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
        Vec::<super::secs::Raw>::deserialize(d)?
            .into_iter()
            .map(super::secs::Raw::secs)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SeededRandom;
    use proptest::prelude::*;

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-30T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    /// Runs failures of one class until the policy stops retrying; returns the delays chosen.
    fn run(
        policy: &RetryPolicy,
        tier: Priority,
        class: ErrorClass,
        seed: u64,
    ) -> (Vec<u64>, Decision) {
        let mut state = RetryState::default();
        let mut rng = SeededRandom::new(seed);
        let mut now = t0();
        let mut delays = Vec::new();
        loop {
            match policy.decide(tier, class, &state, now, None, &mut rng) {
                Decision::Retry {
                    delay,
                    spends_attempt,
                    ..
                } => {
                    state.record(class, spends_attempt, delay.as_secs(), now);
                    delays.push(delay.as_secs());
                    now += chrono::Duration::seconds(delay.as_secs() as i64);
                    assert!(delays.len() < 100_000, "unbounded retries");
                }
                other => return (delays, other),
            }
        }
    }

    #[test]
    fn defaults_validate() {
        RetryPolicy::default().validate().unwrap();
    }

    #[test]
    fn network_retries_five_times_on_its_schedule() {
        let (delays, end) = run(
            &RetryPolicy::default(),
            Priority::Bulk,
            ErrorClass::Network,
            7,
        );
        assert_eq!(delays.len(), 5);
        for (d, base) in delays.iter().zip([5, 15, 30, 60, 120]) {
            assert!((base..=base + base / 5 + 1).contains(d), "{d} vs {base}");
        }
        assert!(matches!(
            end,
            Decision::DeadLetter {
                category: DeadLetterCategory::RetriesExhausted,
                ..
            }
        ));
    }

    #[test]
    fn soft_bounces_wait_minutes_to_hours_through_the_state_machine() {
        let policy = RetryPolicy::default();
        let mut rng = SeededRandom::new(1);
        let d = policy.decide(
            Priority::Bulk,
            ErrorClass::MailboxTemporary,
            &RetryState::default(),
            t0(),
            None,
            &mut rng,
        );
        let Decision::Retry {
            delay,
            mechanism,
            spends_attempt,
        } = d
        else {
            panic!("{d:?}")
        };
        assert!(delay.as_secs() >= 900);
        assert!(spends_attempt);
        // 900 s plus any jitter is past the queue's limit, so the state machine carries it.
        if delay.as_secs() > MAX_QUEUE_DELAY_SECS {
            assert_eq!(mechanism, DelayMechanism::StateMachine);
        }
        let (delays, _) = run(&policy, Priority::Bulk, ErrorClass::MailboxTemporary, 3);
        assert_eq!(delays.len(), 3);
        assert!(delays[2] >= 6 * 3600);
    }

    #[test]
    fn throttling_does_not_spend_attempts_but_is_bounded() {
        let policy = RetryPolicy::default();
        let (delays, end) = run(&policy, Priority::Bulk, ErrorClass::Throttled, 9);
        assert_eq!(delays.len(), 8);
        assert!(delays.iter().all(|d| (10..=20).contains(d)));
        assert!(matches!(end, Decision::DeadLetter { .. }));
        let mut state = RetryState::default();
        state.record(ErrorClass::Throttled, false, 10, t0());
        assert_eq!(state.spent, 0);
    }

    #[test]
    fn open_circuits_wait_until_the_horizon_without_spending() {
        let (delays, end) = run(
            &RetryPolicy::default(),
            Priority::Transactional,
            ErrorClass::CircuitOpen,
            5,
        );
        let waited: u64 = delays.iter().sum();
        assert!(waited <= 2 * 3600 && waited > 3600, "{waited}");
        match end {
            Decision::DeadLetter { reason, .. } => assert!(reason.contains("horizon"), "{reason}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn non_retryable_classes_end_at_once() {
        let policy = RetryPolicy::default();
        let mut rng = SeededRandom::new(0);
        let state = RetryState::default();
        let d = |class| {
            policy.decide(
                Priority::Bulk,
                class,
                &state,
                t0(),
                None,
                &mut SeededRandom::new(0),
            )
        };
        assert_eq!(
            d(ErrorClass::RecipientPermanent),
            Decision::Finish {
                status: Status::BouncedPermanent,
                suppress_recipient: true
            }
        );
        for (class, category) in [
            (ErrorClass::Rendering, DeadLetterCategory::NeedsReview),
            (ErrorClass::ContentRejected, DeadLetterCategory::NeedsReview),
            (ErrorClass::SenderConfig, DeadLetterCategory::NeedsReview),
            (ErrorClass::InvalidJob, DeadLetterCategory::InvalidJob),
            (ErrorClass::Poison, DeadLetterCategory::Poison),
        ] {
            assert!(
                matches!(d(class), Decision::DeadLetter { category: c, .. } if c == category),
                "{class}"
            );
        }
        let _ = policy.decide(
            Priority::Bulk,
            ErrorClass::Network,
            &state,
            t0(),
            None,
            &mut rng,
        );
    }

    #[test]
    fn the_deadline_wins_over_the_schedule() {
        let policy = RetryPolicy::default();
        let deadline = t0() + chrono::Duration::seconds(60);
        let d = policy.decide(
            Priority::Bulk,
            ErrorClass::MailboxTemporary,
            &RetryState::default(),
            t0(),
            Some(deadline),
            &mut SeededRandom::new(0),
        );
        assert!(
            matches!(d, Decision::DeadLetter { ref reason, .. } if reason.contains("not_after")),
            "{d:?}"
        );
    }

    #[test]
    fn total_attempts_cap_spans_classes() {
        let mut policy = RetryPolicy::default();
        policy.bulk.max_total_attempts = 3;
        let mut state = RetryState::default();
        state.record(ErrorClass::Network, true, 5, t0());
        state.record(ErrorClass::Unknown, true, 60, t0());
        let d = policy.decide(
            Priority::Bulk,
            ErrorClass::Tls,
            &state,
            t0(),
            None,
            &mut SeededRandom::new(0),
        );
        assert!(
            matches!(d, Decision::DeadLetter { ref reason, .. } if reason.contains("attempts spent")),
            "{d:?}"
        );
    }

    #[test]
    fn jitter_strategies_stay_in_their_ranges() {
        let mk = |jitter| {
            rule(
                1,
                Schedule::Exponential {
                    base: 10,
                    factor: 2.0,
                    cap: 100,
                },
                jitter,
                true,
                DAY,
            )
        };
        let mut rng = SeededRandom::new(11);
        for _ in 0..1000 {
            assert!(jittered(&mk(Jitter::None), 40, None, &mut rng) == 40);
            assert!(jittered(&mk(Jitter::Full), 40, None, &mut rng) <= 40);
            assert!((20..=40).contains(&jittered(&mk(Jitter::Equal), 40, None, &mut rng)));
            assert!((10..=90).contains(&jittered(
                &mk(Jitter::Decorrelated),
                40,
                Some(30),
                &mut rng
            )));
            assert!((10..=100).contains(&jittered(
                &mk(Jitter::Decorrelated),
                40,
                Some(1000),
                &mut rng
            )));
            assert!((40..=60).contains(&jittered(
                &mk(Jitter::Proportional { ratio: 0.5 }),
                40,
                None,
                &mut rng
            )));
        }
        assert_eq!(
            Schedule::Exponential {
                base: 10,
                factor: 2.0,
                cap: 100
            }
            .base_delay(50),
            100
        );
        assert_eq!(Schedule::Delays(vec![1, 2]).base_delay(9), 2);
    }

    #[test]
    fn policy_file_overrides_and_validation_errors() {
        let p = RetryPolicy::from_json(r#"{"transactional": {"classes": {"network": {"retries": 2, "schedule": {"delays": ["1s", "2m"]}, "jitter": {"kind": "full"}, "spends_attempt": true, "horizon": "1h"}}}}"#).unwrap();
        let rule = &p.transactional.classes[&ErrorClass::Network];
        assert_eq!(rule.schedule, Schedule::Delays(vec![1, 120]));
        assert_eq!(rule.horizon, 3600);
        assert_eq!(p.bulk, RetryPolicy::default().bulk);

        let cases = [
            (
                r#"{"bulk": {"classes": {"nope": {"retries": 1, "schedule": {"delays": [1]}, "jitter": {"kind": "none"}, "spends_attempt": true, "horizon": 5}}}}"#,
                "unknown class",
            ),
            (
                r#"{"bulk": {"classes": {"rendering": {"retries": 1, "schedule": {"delays": [1]}, "jitter": {"kind": "none"}, "spends_attempt": true, "horizon": 5}}}}"#,
                "never retried",
            ),
            (
                r#"{"bulk": {"classes": {"network": {"retries": 1, "schedule": {"delays": []}, "jitter": {"kind": "none"}, "spends_attempt": true, "horizon": 5}}}}"#,
                "must not be empty",
            ),
            (
                r#"{"bulk": {"classes": {"network": {"retries": 1, "schedule": {"exponential": {"base": 10, "factor": 0.5, "cap": 100}}, "jitter": {"kind": "none"}, "spends_attempt": true, "horizon": 5}}}}"#,
                "factor",
            ),
            (
                r#"{"bulk": {"classes": {"network": {"retries": 1, "schedule": {"delays": [1]}, "jitter": {"kind": "proportional", "ratio": -1}, "spends_attempt": true, "horizon": 5}}}}"#,
                "ratio",
            ),
            (
                r#"{"bulk": {"classes": {"network": {"retries": 1, "schedule": {"delays": [1]}, "jitter": {"kind": "none"}, "spends_attempt": true, "horizon": "5y"}}}}"#,
                "unit",
            ),
            (
                r#"{"bulk": {"max_total_attempts": 0}}"#,
                "max_total_attempts",
            ),
            (r#"{"bulk": {"surprise": 1}}"#, "unknown field"),
            (r#"not json"#, "not valid JSON"),
        ];
        for (json, needle) in cases {
            let err = RetryPolicy::from_json(json).unwrap_err().to_string();
            assert!(err.contains(needle), "{json}: {err}");
        }
    }

    #[test]
    fn lookup_prefers_file_and_reports_missing_file() {
        let err = RetryPolicy::from_lookup(|k| {
            (k == "COURIER_RETRY_POLICY_FILE").then(|| "/nonexistent/p.json".into())
        })
        .unwrap_err();
        assert!(err.to_string().contains("/nonexistent/p.json"));
        assert_eq!(
            RetryPolicy::from_lookup(|_| None).unwrap(),
            RetryPolicy::default()
        );
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("90s"), Ok(90));
        assert_eq!(parse_duration("15m"), Ok(900));
        assert_eq!(parse_duration("5d"), Ok(432_000));
        assert_eq!(parse_duration("42"), Ok(42));
        assert!(parse_duration("m").is_err());
        assert!(parse_duration("99999999999999999999d").is_err());
    }

    fn any_class() -> impl Strategy<Value = ErrorClass> {
        prop::sample::select(ErrorClass::ALL.to_vec())
    }

    proptest! {
        #[test]
        fn delays_stay_within_bounds_and_attempts_are_bounded(
            seed in any::<u64>(),
            classes in prop::collection::vec(any_class(), 1..200),
            bulk in any::<bool>(),
        ) {
            let policy = RetryPolicy::default();
            let tier = if bulk { Priority::Bulk } else { Priority::Transactional };
            let mut state = RetryState::default();
            let mut rng = SeededRandom::new(seed);
            let start = t0();
            let mut now = start;
            for class in classes {
                match policy.decide(tier, class, &state, now, None, &mut rng) {
                    Decision::Retry { delay, mechanism, spends_attempt } => {
                        let rule = &policy.tier(tier).classes[&class];
                        let secs = delay.as_secs();
                        prop_assert!((1..=MAX_DELAY_SECS).contains(&secs));
                        prop_assert_eq!(mechanism == DelayMechanism::QueueDelay, secs <= MAX_QUEUE_DELAY_SECS);
                        let next = now + chrono::Duration::seconds(secs as i64);
                        prop_assert!(next <= start + chrono::Duration::seconds(rule.horizon as i64));
                        state.record(class, spends_attempt, secs, now);
                        prop_assert!(state.spent < policy.tier(tier).max_total_attempts);
                        now = next;
                    }
                    Decision::DeadLetter { .. } | Decision::Finish { .. } => break,
                }
            }
        }

        #[test]
        fn same_seed_same_schedule(seed in any::<u64>(), class in any_class()) {
            let policy = RetryPolicy::default();
            let a = run(&policy, Priority::Bulk, class, seed);
            let b = run(&policy, Priority::Bulk, class, seed);
            prop_assert_eq!(a, b);
        }
    }
}
