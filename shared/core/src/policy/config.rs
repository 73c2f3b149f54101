//! The policy's configuration: the policy document (JSON, from a file or a variable), its
//! validation and the durations it is written in. Everything it does not name keeps the
//! defaults ([`super::defaults`]).

use serde::Deserialize;

use super::defaults::{DAY, HOUR, MINUTE};
use super::*;

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
}

/// A duration of [`parse_duration`]'s forms, or milliseconds (`250ms`): the send-rate horizons.
pub fn parse_duration_ms(text: &str) -> Result<std::time::Duration, String> {
    match text.trim().strip_suffix("ms") {
        Some(ms) if !ms.is_empty() && ms.bytes().all(|b| b.is_ascii_digit()) => ms
            .parse()
            .map(std::time::Duration::from_millis)
            .map_err(|_| format!("duration {text:?} is too large")),
        _ => parse_duration(text).map(std::time::Duration::from_secs),
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
