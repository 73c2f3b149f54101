//! What a run reports, and the tables the CLI prints.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::cost::{AwsCalls, Cost};

/// Figures of the outage windows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutageFigures {
    /// Jobs received by the function while the provider was down.
    pub jobs: u64,
    /// Provider calls made while it was down.
    pub calls: u64,
    /// Amplification: `calls / jobs`.
    pub calls_per_job: f64,
    /// Jobs that made at least one of those calls.
    pub calling_jobs: u64,
    pub calls_per_calling_job: f64,
}

/// Figures of the throttling receiving domain and of everyone else's mail.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReceiverFigures {
    /// Per-destination pacing: `off`, or its rule.
    pub pacing: String,
    /// Jobs to the throttling domain, and of them sent and dead-lettered.
    pub jobs: u64,
    pub sent: u64,
    pub dead_lettered: u64,
    /// Messages the domain accepted and throttle replies it gave.
    pub accepted: u64,
    pub throttled: u64,
    /// Sends its pace deferred (no call), and how often its pace was lowered.
    pub paced: u64,
    pub lowered: u64,
    /// Accepted per second, from its first acceptance to its last.
    pub accepted_per_sec: f64,
    /// Arrival to accepted, for its sent jobs.
    pub latency_p50_secs: f64,
    pub latency_p99_secs: f64,
    /// The same for every other domain's sent jobs.
    pub others_p50_secs: f64,
    pub others_p99_secs: f64,
}

/// One run's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub scenario: String,
    pub policy: String,
    pub breaker: String,
    pub seed: u64,
    pub jobs: u64,
    pub sent: u64,
    /// Permanent bounces (recipient suppressed).
    pub bounced: u64,
    pub dead_lettered: u64,
    /// Moved to the redrive DLQ by SQS after maxReceiveCount.
    pub redriven: u64,
    /// Not finished when the simulation stopped.
    pub pending: u64,
    pub dead_letters_by_class: BTreeMap<String, u64>,
    pub provider_calls: u64,
    pub provider_accepted: u64,
    pub throttled: u64,
    /// Failed calls other than throttling and timeouts.
    pub failed_calls: u64,
    pub timed_out: u64,
    pub provider_calls_per_job: f64,
    pub outage: Option<OutageFigures>,
    pub receiver: Option<ReceiverFigures>,
    pub quota_per_sec: f64,
    pub peak_calls_per_sec: u32,
    /// Highest provider calls in one second after the last fault ended (the whole run if none).
    pub peak_calls_per_sec_after_recovery: u32,
    pub peak_accepted_per_sec_after_recovery: u32,
    /// Highest 10-second average of calls per second after recovery (the token bucket's burst
    /// lets single seconds exceed the quota).
    pub peak_calls_per_sec_10s_after_recovery: f64,
    /// Seconds after recovery with more calls than the quota.
    pub secs_over_quota_after_recovery: u64,
    pub recovery_secs: Option<u64>,
    /// From the end of the last fault until every job that arrived before it is finished.
    pub drain_secs: Option<f64>,
    /// Time of the last job's end.
    pub makespan_secs: f64,
    /// The send-rate governor: `off`, or its rate.
    pub send_rate: String,
    /// Sends the governor deferred (the schedule was booked past its horizon).
    pub rate_refused: u64,
    /// Arrival to accepted, for sent jobs.
    pub latency_p50_secs: f64,
    pub latency_p99_secs: f64,
    /// The retry bulkhead: `off`, or how far ahead retries book.
    pub retry_bulkhead: String,
    /// The retry queue: `off` (one queue), or its event source's most instances.
    pub retry_queue: String,
    /// Arrival to accepted, for sent jobs that arrived after the last fault ended and the
    /// breaker closed after it (fresh mail during the drain; `None` without faults).
    pub fresh_after_recovery_p50_secs: Option<f64>,
    pub fresh_after_recovery_p99_secs: Option<f64>,
    /// Jobs sent again after a timed-out call the provider had in fact accepted.
    pub possible_duplicates: u64,
    /// Most invocations running at once.
    pub max_concurrency: u32,
    /// Closed -> open transitions of the breaker.
    pub breaker_opened: u64,
    /// AWS API calls per job (provider calls included; periodic reads and empty polls apart).
    pub aws_calls_per_job: f64,
    pub periodic_calls: u64,
    pub aws: AwsCalls,
    pub cost: Cost,
    pub cost_per_1000_jobs: f64,
    /// Events the engine handled.
    pub events: u64,
    /// Wall-clock time of the run.
    pub wall_ms: f64,
}

fn opt(v: Option<f64>, unit: &str) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.0}{unit}"))
}

impl Report {
    /// The rows of the report: (label, value).
    pub fn rows(&self) -> Vec<(&'static str, String)> {
        let mut rows = vec![
            ("scenario", self.scenario.clone()),
            ("policy / jitter", self.policy.clone()),
            ("breaker", self.breaker.clone()),
            ("send-rate governor", self.send_rate.clone()),
            ("jobs", self.jobs.to_string()),
            ("sent", self.sent.to_string()),
            ("bounced (permanent)", self.bounced.to_string()),
            ("dead-lettered", self.dead_lettered.to_string()),
            ("redriven by SQS", self.redriven.to_string()),
            ("still pending", self.pending.to_string()),
            ("provider calls", self.provider_calls.to_string()),
            (
                "  accepted / throttled / failed / timed out",
                format!(
                    "{} / {} / {} / {}",
                    self.provider_accepted, self.throttled, self.failed_calls, self.timed_out
                ),
            ),
            (
                "provider calls per job",
                format!("{:.3}", self.provider_calls_per_job),
            ),
        ];
        if let Some(o) = &self.outage {
            rows.push((
                "outage: calls per job (amplification)",
                format!(
                    "{:.3} ({} calls / {} jobs)",
                    o.calls_per_job, o.calls, o.jobs
                ),
            ));
            rows.push((
                "outage: calls per calling job",
                format!("{:.2} ({} jobs)", o.calls_per_calling_job, o.calling_jobs),
            ));
        }
        if let Some(r) = &self.receiver {
            rows.extend([
                ("receiver: destination pacing", r.pacing.clone()),
                (
                    "receiver: jobs / sent / dead-lettered",
                    format!("{} / {} / {}", r.jobs, r.sent, r.dead_lettered),
                ),
                (
                    "receiver: accepted / throttle replies",
                    format!("{} / {}", r.accepted, r.throttled),
                ),
                (
                    "receiver: paced waits / pace lowered",
                    format!("{} / {}", r.paced, r.lowered),
                ),
                (
                    "receiver: accepted per second",
                    format!("{:.1}", r.accepted_per_sec),
                ),
                (
                    "receiver: latency p50 / p99",
                    format!("{:.1} s / {:.1} s", r.latency_p50_secs, r.latency_p99_secs),
                ),
                (
                    "other domains: latency p50 / p99",
                    format!("{:.1} s / {:.1} s", r.others_p50_secs, r.others_p99_secs),
                ),
            ]);
        }
        rows.extend([
            ("quota (sends/s)", format!("{:.0}", self.quota_per_sec)),
            (
                "peak calls/s after recovery (accepted)",
                format!(
                    "{} ({})",
                    self.peak_calls_per_sec_after_recovery,
                    self.peak_accepted_per_sec_after_recovery
                ),
            ),
            (
                "peak 10-s average calls/s after recovery",
                format!("{:.0}", self.peak_calls_per_sec_10s_after_recovery),
            ),
            (
                "seconds over quota after recovery",
                self.secs_over_quota_after_recovery.to_string(),
            ),
            ("drain after recovery", opt(self.drain_secs, " s")),
            (
                "last job finished at",
                format!("{:.0} s", self.makespan_secs),
            ),
            (
                "latency to provider p50 / p99",
                format!(
                    "{:.1} s / {:.1} s",
                    self.latency_p50_secs, self.latency_p99_secs
                ),
            ),
            ("retry bulkhead", self.retry_bulkhead.clone()),
            ("retry queue", self.retry_queue.clone()),
            (
                "latency of mail arriving after the breaker closed p50 / p99",
                match (
                    self.fresh_after_recovery_p50_secs,
                    self.fresh_after_recovery_p99_secs,
                ) {
                    (Some(p50), Some(p99)) => format!("{p50:.1} s / {p99:.1} s"),
                    _ => "-".into(),
                },
            ),
            (
                "possible duplicates (timeouts)",
                self.possible_duplicates.to_string(),
            ),
            ("max concurrency", self.max_concurrency.to_string()),
            (
                "sends deferred by the governor",
                self.rate_refused.to_string(),
            ),
            ("breaker opened", format!("{} times", self.breaker_opened)),
            (
                "AWS calls per job",
                format!(
                    "{:.2} (+{} periodic reads and empty polls)",
                    self.aws_calls_per_job, self.periodic_calls
                ),
            ),
            (
                "cost (Lambda/SQS/DynamoDB/SFN/SES/EventBridge)",
                format!(
                    "${:.2} ({:.2}/{:.2}/{:.2}/{:.2}/{:.2}/{:.2})",
                    self.cost.total,
                    self.cost.lambda,
                    self.cost.sqs,
                    self.cost.dynamodb,
                    self.cost.step_functions,
                    self.cost.ses,
                    self.cost.eventbridge
                ),
            ),
            (
                "cost per 1,000 jobs",
                format!("${:.4}", self.cost_per_1000_jobs),
            ),
            (
                "simulated in",
                format!("{:.0} ms ({} events)", self.wall_ms, self.events),
            ),
        ]);
        if !self.dead_letters_by_class.is_empty() {
            let by: Vec<String> = self
                .dead_letters_by_class
                .iter()
                .map(|(c, n)| format!("{c} {n}"))
                .collect();
            rows.insert(8, ("  dead letters by class", by.join(", ")));
        }
        rows
    }
}

/// Renders reports side by side: one column per report.
pub fn table(reports: &[Report]) -> String {
    let columns: Vec<Vec<(&'static str, String)>> = reports.iter().map(Report::rows).collect();
    let Some(first) = columns.first() else {
        return String::new();
    };
    // Rows may differ (dead-letter classes): align on labels, in the first report's order
    // with any extra labels appended.
    let mut labels: Vec<&'static str> = first.iter().map(|(l, _)| *l).collect();
    for col in &columns[1..] {
        for (l, _) in col {
            if !labels.contains(l) {
                labels.push(l);
            }
        }
    }
    let value = |col: &Vec<(&'static str, String)>, label: &str| {
        col.iter()
            .find(|(l, _)| *l == label)
            .map_or_else(|| "-".to_owned(), |(_, v)| v.clone())
    };
    let lw = labels.iter().map(|l| l.len()).max().unwrap_or(0);
    let widths: Vec<usize> = columns
        .iter()
        .map(|c| labels.iter().map(|l| value(c, l).len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for label in &labels {
        let _ = write!(out, "{label:<lw$}");
        for (col, w) in columns.iter().zip(&widths) {
            let _ = write!(out, "  {:<w$}", value(col, label));
        }
        out.push('\n');
    }
    out
}
