//! Live settings: the thresholds an operator may change without a redeploy (the breaker, the
//! send rates, per-destination pacing and the retry policy), as one JSON document kept in the
//! control table (`courierctl policy set`). Every section is optional; a section replaces the
//! deployment's own value (its INIT settings, the [`Baseline`]) for what it names, and removing
//! it brings the deployment's value back. The document is validated with the same code and the
//! same errors as the settings at INIT, by `courierctl policy validate|set` before it is
//! written and by every instance when it reads it: an instance keeps the last good settings
//! when a stored document does not validate.
//!
//! ```json
//! {
//!   "breaker": {"min_calls": 20, "failure_ratio": 0.6, "open_secs": 60},
//!   "send_rates": {"ses": 14, "smtp": "off"},
//!   "destination_pacing": {"ceiling_per_sec": 50, "decrease": 0.5},
//!   "retry_policy": {"bulk": {"max_total_attempts": 8}}
//! }
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::breaker::BreakerConfig;
use crate::pacing::DestinationPacing;
use crate::policy::{PolicyError, RetryPolicy};
use crate::rate::RateLimit;

/// Why a live settings document cannot be used, naming the place that is wrong.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("live settings are not valid JSON or have unknown fields: {0}")]
    Parse(#[source] serde_json::Error),
    #[error("live settings breaker.{field}: {problem}")]
    Breaker {
        field: &'static str,
        problem: String,
    },
    #[error("live settings send_rates.{provider}: {problem}")]
    SendRate { provider: String, problem: String },
    #[error("live settings destination_pacing: {0}")]
    Pacing(#[from] crate::pacing::PacingError),
    #[error("live settings retry_policy: {0}")]
    Policy(#[from] PolicyError),
}

/// A send rate as written: calls per second, or `"off"` (unpaced).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RateSetting {
    PerSec(f64),
    Word(String),
}

/// The document as written (every field optional).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LiveDocument {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<BreakerOverride>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub send_rates: BTreeMap<String, RateSetting>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_pacing: Option<PacingOverride>,
    /// A retry policy document (the format of `COURIER_RETRY_POLICY_JSON`): it replaces the
    /// deployment's policy; what it does not name keeps the defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Kept as written, so its errors are those `COURIER_RETRY_POLICY_JSON` would give.
    pub retry_policy: Option<Box<serde_json::value::RawValue>>,
}

/// Breaker fields to change.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerOverride {
    pub window_secs: Option<i64>,
    pub min_calls: Option<u32>,
    pub failure_ratio: Option<f64>,
    pub open_secs: Option<i64>,
    pub max_open_secs: Option<i64>,
    pub probes: Option<u32>,
    pub probes_to_close: Option<u32>,
}

/// Pacing fields to change; `enabled: false` turns per-destination pacing off.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PacingOverride {
    pub enabled: Option<bool>,
    pub floor_per_sec: Option<f64>,
    pub ceiling_per_sec: Option<f64>,
    pub increase_per_min: Option<f64>,
    pub decrease: Option<f64>,
}

/// The deployment's own settings (from INIT), which a document changes.
#[derive(Debug, Clone)]
pub struct Baseline {
    pub breaker: BreakerConfig,
    pub destination_pacing: Option<DestinationPacing>,
    pub policy: RetryPolicy,
    /// The shape (horizon, chunk) a live send rate gets.
    pub rate_shape: RateLimit,
}

impl Default for Baseline {
    /// The settings of a deployment that configures nothing.
    fn default() -> Baseline {
        Baseline {
            breaker: BreakerConfig::default(),
            destination_pacing: Some(DestinationPacing::default()),
            policy: RetryPolicy::default(),
            rate_shape: RateLimit {
                per_sec: 1.0,
                max_ahead: RateLimit::DEFAULT_MAX_AHEAD,
                chunk: RateLimit::DEFAULT_CHUNK,
            },
        }
    }
}

/// The settings in force: the baseline with a document applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    pub breaker: BreakerConfig,
    /// Per provider named by the document: its rate (`None`: unpaced). Providers it does not
    /// name keep the deployment's pacing (a configured rate or SES's quota).
    pub send_rates: BTreeMap<String, Option<RateLimit>>,
    pub destination_pacing: Option<DestinationPacing>,
    pub policy: RetryPolicy,
}

/// Checks a breaker configuration for values that cannot work.
pub fn validate_breaker(c: &BreakerConfig) -> Result<(), LiveError> {
    let bad = |field, problem: &str| {
        Err(LiveError::Breaker {
            field,
            problem: problem.to_owned(),
        })
    };
    if !(1..=3600).contains(&c.window_secs) {
        return bad("window_secs", "must be 1..=3600 seconds");
    }
    if c.min_calls == 0 {
        return bad("min_calls", "must be at least 1");
    }
    if !(c.failure_ratio > 0.0 && c.failure_ratio <= 1.0) {
        return bad("failure_ratio", "must be in (0, 1]");
    }
    if !(1..=86_400).contains(&c.open_secs) {
        return bad("open_secs", "must be 1..=86400 seconds");
    }
    if c.max_open_secs < c.open_secs || c.max_open_secs > 86_400 {
        return bad("max_open_secs", "must be open_secs..=86400 seconds");
    }
    if c.probes == 0 {
        return bad("probes", "must be at least 1");
    }
    if c.probes_to_close == 0 {
        return bad("probes_to_close", "must be at least 1");
    }
    Ok(())
}

/// The providers a send rate may name.
pub const PROVIDERS: [&str; 2] = ["ses", "smtp"];

impl LiveDocument {
    /// Parses a document (unknown fields are refused).
    pub fn parse(text: &str) -> Result<LiveDocument, LiveError> {
        serde_json::from_str(text).map_err(LiveError::Parse)
    }

    /// The settings in force when this document is applied to `baseline`, every value
    /// validated.
    pub fn apply(&self, baseline: &Baseline) -> Result<Effective, LiveError> {
        let mut breaker = baseline.breaker;
        if let Some(b) = &self.breaker {
            let c = &mut breaker;
            c.window_secs = b.window_secs.unwrap_or(c.window_secs);
            c.min_calls = b.min_calls.unwrap_or(c.min_calls);
            c.failure_ratio = b.failure_ratio.unwrap_or(c.failure_ratio);
            c.open_secs = b.open_secs.unwrap_or(c.open_secs);
            c.max_open_secs = b.max_open_secs.unwrap_or(c.max_open_secs);
            c.probes = b.probes.unwrap_or(c.probes);
            c.probes_to_close = b.probes_to_close.unwrap_or(c.probes_to_close);
        }
        validate_breaker(&breaker)?;
        let mut send_rates = BTreeMap::new();
        for (provider, setting) in &self.send_rates {
            let bad = |problem: String| LiveError::SendRate {
                provider: provider.clone(),
                problem,
            };
            if !PROVIDERS.contains(&provider.as_str()) {
                return Err(bad(format!(
                    "unknown provider; known: {}",
                    PROVIDERS.join(", ")
                )));
            }
            let limit = match setting {
                RateSetting::Word(w) if w == "off" => None,
                RateSetting::Word(w) => {
                    return Err(bad(format!(
                        "{w:?} is neither a number of calls per second nor \"off\""
                    )));
                }
                RateSetting::PerSec(per_sec) => Some(
                    RateLimit {
                        per_sec: *per_sec,
                        ..baseline.rate_shape
                    }
                    .validated()
                    .map_err(|e| bad(e.to_string()))?,
                ),
            };
            send_rates.insert(provider.clone(), limit);
        }
        let destination_pacing = match &self.destination_pacing {
            None => baseline.destination_pacing,
            Some(p) => {
                // The fields it names, over the deployment's rule (or the default one), are
                // checked whether or not pacing is on; `enabled` unnamed keeps it as deployed.
                let base = baseline.destination_pacing.unwrap_or_default();
                let rule = DestinationPacing {
                    floor_per_sec: p.floor_per_sec.unwrap_or(base.floor_per_sec),
                    ceiling_per_sec: p.ceiling_per_sec.unwrap_or(base.ceiling_per_sec),
                    increase_per_min: p.increase_per_min.unwrap_or(base.increase_per_min),
                    decrease: p.decrease.unwrap_or(base.decrease),
                    hold: base.hold,
                }
                .validated()?;
                p.enabled
                    .unwrap_or(baseline.destination_pacing.is_some())
                    .then_some(rule)
            }
        };
        let policy = match &self.retry_policy {
            None => baseline.policy.clone(),
            Some(doc) => RetryPolicy::from_json(doc.get())?,
        };
        Ok(Effective {
            breaker,
            send_rates,
            destination_pacing,
            policy,
        })
    }
}

/// Parses `text` and applies it to `baseline`: what `courierctl policy validate` and every
/// instance's read run.
pub fn effective(text: &str, baseline: &Baseline) -> Result<Effective, LiveError> {
    LiveDocument::parse(text)?.apply(baseline)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::classify::ErrorClass;
    use crate::job::Priority;

    fn baseline() -> Baseline {
        Baseline::default()
    }

    #[test]
    fn an_empty_document_keeps_the_deployments_settings() {
        let e = effective("{}", &baseline()).unwrap();
        assert_eq!(e.breaker, BreakerConfig::default());
        assert!(e.send_rates.is_empty());
        assert_eq!(e.destination_pacing, Some(DestinationPacing::default()));
        assert_eq!(e.policy, RetryPolicy::default());
    }

    #[test]
    fn each_section_changes_only_what_it_names() {
        let e = effective(
            r#"{"breaker": {"min_calls": 20, "open_secs": 60},
                "send_rates": {"ses": 14, "smtp": "off"},
                "destination_pacing": {"ceiling_per_sec": 50},
                "retry_policy": {"transactional": {"classes": {"throttled":
                    {"retries": 4, "schedule": {"delays": [30]}, "jitter": {"kind": "none"},
                     "spends_attempt": false, "horizon": 3600}}}}}"#,
            &baseline(),
        )
        .unwrap();
        assert_eq!(
            (
                e.breaker.min_calls,
                e.breaker.open_secs,
                e.breaker.window_secs
            ),
            (20, 60, 60)
        );
        assert_eq!(e.send_rates["ses"].unwrap().per_sec, 14.0);
        assert_eq!(e.send_rates["smtp"], None);
        let p = e.destination_pacing.unwrap();
        assert_eq!((p.ceiling_per_sec, p.decrease), (50.0, 0.7));
        let rule = &e.policy.tier(Priority::Transactional).classes[&ErrorClass::Throttled];
        assert_eq!(rule.retries, 4);
        // the bulk tier is the default's
        assert_eq!(e.policy.bulk, RetryPolicy::default().bulk);
        assert_eq!(
            effective(r#"{"destination_pacing": {"enabled": false}}"#, &baseline())
                .unwrap()
                .destination_pacing,
            None
        );
    }

    #[test]
    fn naming_a_pacing_field_keeps_pacing_as_deployed_and_is_checked_either_way() {
        let off = Baseline {
            destination_pacing: None,
            ..baseline()
        };
        let pacing =
            |doc: &str, base: &Baseline| effective(doc, base).map(|e| e.destination_pacing);
        // Off as deployed: a field alone does not turn it on; `enabled: true` does.
        assert_eq!(
            pacing(r#"{"destination_pacing": {"decrease": 0.5}}"#, &off).unwrap(),
            None
        );
        let on = pacing(
            r#"{"destination_pacing": {"enabled": true, "decrease": 0.5}}"#,
            &off,
        )
        .unwrap()
        .unwrap();
        assert_eq!(on.decrease, 0.5);
        // On as deployed: the field changes the rule.
        assert_eq!(
            pacing(r#"{"destination_pacing": {"decrease": 0.5}}"#, &baseline())
                .unwrap()
                .map(|p| p.decrease),
            Some(0.5)
        );
        // A bad field is refused even where pacing stays off.
        for base in [&off, &baseline()] {
            assert!(
                pacing(
                    r#"{"destination_pacing": {"enabled": false, "decrease": 7}}"#,
                    base
                )
                .is_err()
            );
        }
    }

    #[test]
    fn a_bad_document_names_what_is_wrong() {
        for (doc, expected) in [
            ("not json", "not valid JSON"),
            (r#"{"breakers": {}}"#, "unknown field"),
            (r#"{"breaker": {"min_calls": 0}}"#, "breaker.min_calls"),
            (
                r#"{"breaker": {"failure_ratio": 1.5}}"#,
                "breaker.failure_ratio",
            ),
            (
                r#"{"breaker": {"open_secs": 600, "max_open_secs": 60}}"#,
                "breaker.max_open_secs",
            ),
            (
                r#"{"send_rates": {"sendgrid": 5}}"#,
                "send_rates.sendgrid: unknown provider",
            ),
            (r#"{"send_rates": {"ses": -1}}"#, "send_rates.ses"),
            (r#"{"send_rates": {"ses": "fast"}}"#, "neither a number"),
            (
                r#"{"destination_pacing": {"decrease": 2}}"#,
                "destination_pacing: the destination rate decrease",
            ),
            (
                r#"{"retry_policy": {"transactional": {"classes": {"nope": {}}}}}"#,
                "retry_policy",
            ),
        ] {
            let e = effective(doc, &baseline()).unwrap_err().to_string();
            assert!(e.contains(expected), "{doc}: {e}");
        }
    }

    #[test]
    fn the_retry_policy_errors_are_those_of_init() {
        let doc = r#"{"transactional": {"classes": {"nope": {}}}}"#;
        let at_init = RetryPolicy::from_json(doc).unwrap_err().to_string();
        let live = effective(&format!(r#"{{"retry_policy": {doc}}}"#), &baseline())
            .unwrap_err()
            .to_string();
        assert_eq!(live, format!("live settings retry_policy: {at_init}"));
    }
}
