//! Retry policy: per class and priority tier, what happens after a failure.
//!
//! [`RetryPolicy::decide`] is pure: it takes the job's [`RetryState`] (counters carried in the
//! re-enqueued message), the failure's class, `now` and a [`RandomSource`], and returns a
//! [`Decision`]. Defaults are in [`RetryPolicy::default`]; a JSON file or the
//! `COURIER_RETRY_POLICY_JSON` variable overrides any part of them (see `docs/retry-policy.md`).
//!
//! # Layout
//! - here: the policy's types and the decision ([`RetryPolicy::decide`]).
//! - `config`: the policy document, its validation and durations ([`parse_duration`]).
//! - `defaults`: the defaults table.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::classify::ErrorClass;
use crate::job::Priority;
use crate::random::RandomSource;
use crate::status::Status;

pub use crate::delay::{DelayMechanism, MAX_QUEUE_DELAY_SECS};
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

/// The policy's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Try again after `delay` (how the copy waits is [`crate::delay::mechanism`]'s choice).
    Retry {
        delay: Duration,
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

mod config;
mod defaults;

pub use config::{PolicyError, parse_duration, parse_duration_ms};

impl RetryPolicy {
    pub fn tier(&self, priority: Priority) -> &TierPolicy {
        match priority {
            Priority::Transactional => &self.transactional,
            Priority::Bulk => &self.bulk,
        }
    }

    /// Decides what follows a failure of `class`.
    ///
    /// `state` holds the counters *before* this failure; `not_after` is the job's deadline.
    /// [`RetryPolicy::decide`] for a classifier's verdict: a verdict that says not to retry a
    /// class that is otherwise retried (an `unknown` reply with a permanent signal: a `5yz` code
    /// or a `5.x.x` status) goes to review at once, with its rule and raw text in the letter.
    pub fn decide_verdict(
        &self,
        priority: Priority,
        verdict: &crate::classify::Verdict,
        state: &RetryState,
        now: DateTime<Utc>,
        not_after: Option<DateTime<Utc>>,
        rng: &mut dyn RandomSource,
    ) -> Decision {
        if verdict.class.is_retryable() && !verdict.retryable {
            return Decision::DeadLetter {
                category: DeadLetterCategory::NeedsReview,
                reason: format!(
                    "{} with a permanent signal ({}) is not retried; a classifier rule would say what it is",
                    verdict.class,
                    verdict.raw_code.as_deref().unwrap_or("no code")
                ),
            };
        }
        self.decide(priority, verdict.class, state, now, not_after, rng)
    }

    /// [`RetryPolicy::decide_verdict`] for a failure of `incoming` (its priority, counters and
    /// deadline), with jitter drawn from a generator the caller shares between records (a lock
    /// poisoned by a panic elsewhere still gives its generator: a draw cannot leave it broken).
    pub fn decide_job(
        &self,
        incoming: &crate::envelope::Incoming,
        verdict: &crate::classify::Verdict,
        now: DateTime<Utc>,
        rng: &std::sync::Mutex<impl RandomSource>,
    ) -> Decision {
        let mut rng = rng
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.decide_verdict(
            incoming.job.priority,
            verdict,
            &incoming.retry,
            now,
            incoming.job.not_after,
            &mut *rng,
        )
    }

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
