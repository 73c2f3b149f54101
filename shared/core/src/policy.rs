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
mod tests;
