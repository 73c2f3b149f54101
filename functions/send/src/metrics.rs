//! Per-batch counters, emitted as one CloudWatch Embedded Metric Format document per batch.

use std::collections::BTreeMap;
use std::time::Duration;

use courier_core::classify::ErrorClass;
use courier_core::policy::DeadLetterCategory;

/// What happened to one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Sent {
        latency: Duration,
    },
    Retried(ErrorClass),
    DeadLettered(DeadLetterCategory, ErrorClass),
    Bounced(ErrorClass),
    Suppressed,
    Duplicate,
    Stale,
    Ambiguous,
    /// A hop of a long wait came back before it was due and went back on the queue.
    Waiting,
    Failed,
}

/// Counters for one batch.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Metrics {
    pub counts: BTreeMap<String, u64>,
    pub send_latency_ms: Vec<f64>,
}

impl Metrics {
    /// Adds to a named counter.
    pub fn add(&mut self, name: &str, value: u64) {
        *self.counts.entry(name.to_owned()).or_default() += value;
    }

    pub fn count(&mut self, outcome: Outcome) {
        // Outcomes (decisions reached) and failures by class: the share of one class in the
        // outcomes is what the "one class above 20%" alarm watches.
        match outcome {
            Outcome::Sent { .. } | Outcome::Suppressed => self.add("Outcomes", 1),
            Outcome::Retried(class) | Outcome::DeadLettered(_, class) | Outcome::Bounced(class) => {
                self.add("Outcomes", 1);
                self.add(&format!("Failures_{class}"), 1);
            }
            Outcome::Duplicate
            | Outcome::Stale
            | Outcome::Ambiguous
            | Outcome::Waiting
            | Outcome::Failed => {}
        }
        let name = match outcome {
            Outcome::Sent { latency } => {
                self.send_latency_ms.push(latency.as_secs_f64() * 1000.0);
                "Sent".to_owned()
            }
            Outcome::Retried(class) => format!("Retried_{class}"),
            Outcome::DeadLettered(category, class) => {
                *self
                    .counts
                    .entry(format!("DeadLetteredClass_{class}"))
                    .or_default() += 1;
                format!("DeadLettered_{}", category.as_str())
            }
            Outcome::Bounced(_) => "BouncedPermanent".into(),
            Outcome::Suppressed => "Suppressed".into(),
            Outcome::Duplicate => "DuplicatesSkipped".into(),
            Outcome::Stale => "StaleCopiesDropped".into(),
            Outcome::Ambiguous => "AmbiguousOutcomes".into(),
            Outcome::Waiting => "WaitHops".into(),
            Outcome::Failed => "RecordsFailed".into(),
        };
        *self.counts.entry(name).or_default() += 1;
    }

    /// The EMF document (namespace `Courier`, dimension `Function`).
    pub fn to_emf(
        &self,
        function: &str,
        timestamp_ms: i64,
        breaker_changes: &[(String, String)],
    ) -> serde_json::Value {
        let mut root = serde_json::Map::new();
        let mut metrics = Vec::new();
        for (name, value) in &self.counts {
            metrics.push(serde_json::json!({"Name": name, "Unit": "Count"}));
            root.insert(name.clone(), (*value).into());
        }
        if !self.send_latency_ms.is_empty() {
            metrics.push(serde_json::json!({"Name": "SendLatency", "Unit": "Milliseconds"}));
            root.insert(
                "SendLatency".into(),
                serde_json::json!(self.send_latency_ms),
            );
        }
        if !breaker_changes.is_empty() {
            metrics.push(serde_json::json!({"Name": "BreakerTransitions", "Unit": "Count"}));
            root.insert(
                "BreakerTransitions".into(),
                (breaker_changes.len() as u64).into(),
            );
            root.insert("BreakerChanges".into(), serde_json::json!(breaker_changes));
        }
        root.insert("Function".into(), function.into());
        root.insert(
            "_aws".into(),
            serde_json::json!({
                "Timestamp": timestamp_ms,
                "CloudWatchMetrics": [{"Namespace": "Courier", "Dimensions": [["Function"]], "Metrics": metrics}]
            }),
        );
        serde_json::Value::Object(root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emf_document_lists_every_metric() {
        let mut m = Metrics::default();
        m.count(Outcome::Sent {
            latency: Duration::from_millis(12),
        });
        m.count(Outcome::Retried(ErrorClass::Throttled));
        m.count(Outcome::Retried(ErrorClass::Throttled));
        m.count(Outcome::DeadLettered(
            DeadLetterCategory::Poison,
            ErrorClass::Poison,
        ));
        let doc = m.to_emf("send", 1, &[("ses".into(), "closed->open".into())]);
        assert_eq!(doc["Retried_throttled"], 2);
        assert_eq!(doc["DeadLettered_poison"], 1);
        assert_eq!(doc["DeadLetteredClass_poison"], 1);
        assert_eq!(doc["SendLatency"][0], 12.0);
        assert_eq!(doc["BreakerTransitions"], 1);
        assert_eq!(doc["Outcomes"], 4);
        assert_eq!(doc["Failures_throttled"], 2);
        assert_eq!(doc["Failures_poison"], 1);
        let names: Vec<&str> = doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["Name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"Sent") && names.contains(&"SendLatency"));
    }
}
