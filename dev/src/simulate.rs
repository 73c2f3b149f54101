//! `courier-dev simulate`: the outage simulator (crate `courier-sim`) from the command line.

use std::io::Write;

use clap::Args;
use courier_core::job::Priority;
use courier_core::policy::{RetryPolicy, parse_duration};
use courier_sim::{FaultKind, OutageReply, PRESETS, Scenario};

/// Flags of `courier-dev simulate`.
#[derive(Args, Debug)]
pub(crate) struct SimulateArgs {
    /// Scenario preset: steady, outage-30m, outage-30m-refused, throttle-wave, latency-spike,
    /// soft-bounce-storm, receiver-throttle (one domain taking 40% of the mail accepts 40/s).
    /// Faults start 10 minutes in; jobs arrive evenly over `--arrival`.
    #[arg(default_value = "outage-30m")]
    preset: String,
    /// Number of jobs.
    #[arg(long)]
    jobs: Option<u64>,
    /// Most concurrent function instances (the event source's MaximumConcurrency).
    #[arg(long)]
    instances: Option<u32>,
    /// Copies that waited come back on a retry queue polled by at most this many instances
    /// (the template's RetryConcurrency; --instances is then the send queue's
    /// SendConcurrency). Unset: one queue for fresh mail and retries.
    #[arg(long)]
    retry_instances: Option<u32>,
    /// Added concurrency per minute while there is a backlog.
    #[arg(long)]
    ramp: Option<u32>,
    /// Provider send-rate quota, sends per second.
    #[arg(long)]
    quota: Option<f64>,
    /// Seed of every random draw (same seed, same report).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Jobs arrive evenly over this long (e.g. 1h, 30m; 0 = all at once).
    #[arg(long)]
    arrival: Option<String>,
    /// Length of every fault of the preset (e.g. 30m, 2h).
    #[arg(long)]
    fault_duration: Option<String>,
    /// When the faults start (e.g. 10m).
    #[arg(long)]
    fault_start: Option<String>,
    /// What a provider that is down answers: an SMTP reply, or `connection-refused`.
    #[arg(long)]
    outage_reply: Option<String>,
    /// transactional (give-up horizons of 2 h, 1 day for full mailboxes) or bulk (5 days for a
    /// receiver's refusals and the waits they cause, 1 day for our own faults).
    #[arg(long, default_value = "transactional")]
    priority: String,
    /// No circuit breaker at all.
    #[arg(long)]
    no_breaker: bool,
    /// The send-rate governor (COURIER_SEND_RATE_*): `quota` (paced at the provider's quota,
    /// as Courier should be deployed), a number of calls per second, or `off`.
    #[arg(long, default_value = "quota")]
    send_rate: String,
    /// A retry policy JSON file (as COURIER_RETRY_POLICY_FILE).
    #[arg(long)]
    policy: Option<String>,
    /// Run side by side: every jitter strategy, several breaker settings, the send-rate
    /// governor on and off, per-destination pacing on and off, the retry bulkhead on and off,
    /// or the retry queue against one queue with as many instances (`queues`, with
    /// --retry-instances).
    #[arg(long, value_parser = ["jitter", "breaker", "governor", "pacing", "bulkhead", "queues"])]
    compare: Option<String>,
    /// Print the report(s) as JSON.
    #[arg(long)]
    json: bool,
}

fn secs(flag: &str, text: &str) -> Result<u64, String> {
    parse_duration(text).map_err(|e| format!("--{flag}: {e}"))
}

/// The scenario the flags describe.
pub(crate) fn scenario(a: &SimulateArgs) -> Result<Scenario, String> {
    let mut sc = Scenario::preset(&a.preset).ok_or_else(|| {
        format!(
            "unknown preset {:?}; known: {}",
            a.preset,
            PRESETS.join(", ")
        )
    })?;
    sc.seed = a.seed;
    if let Some(n) = a.jobs {
        sc.jobs = n;
    }
    if let Some(n) = a.instances {
        sc.lambda.max_concurrency = n;
        sc.lambda.initial_concurrency = sc.lambda.initial_concurrency.min(n.max(1));
    }
    if let Some(n) = a.retry_instances {
        sc.retry_concurrency = Some(n);
    }
    if let Some(n) = a.ramp {
        sc.lambda.ramp_per_minute = n;
    }
    if let Some(q) = a.quota {
        sc.provider.quota_per_sec = q;
    }
    if let Some(t) = &a.arrival {
        sc.arrival_secs = secs("arrival", t)?;
    }
    if let Some(t) = &a.fault_duration {
        let d = secs("fault-duration", t)?;
        for f in &mut sc.faults {
            f.duration_secs = d;
        }
    }
    if let Some(t) = &a.fault_start {
        let start = secs("fault-start", t)?;
        let first = sc.first_fault_secs().unwrap_or(0);
        for f in &mut sc.faults {
            f.start_secs = f.start_secs - first + start;
        }
    }
    if let Some(text) = &a.outage_reply {
        let reply = if text == "connection-refused" {
            OutageReply::ConnectionRefused
        } else {
            OutageReply::Smtp(text.clone())
        };
        for f in &mut sc.faults {
            if let FaultKind::Outage { reply: r } = &mut f.kind {
                *r = reply.clone();
            }
        }
    }
    sc.priority = match a.priority.as_str() {
        "transactional" => Priority::Transactional,
        "bulk" => Priority::Bulk,
        other => return Err(format!("--priority {other:?}: use transactional or bulk")),
    };
    if a.no_breaker {
        sc.breaker = None;
    }
    sc.send_rate = match a.send_rate.as_str() {
        "off" => None,
        "quota" => Some(Scenario::send_rate_of(sc.provider.quota_per_sec)),
        n => Some(Scenario::send_rate_of(n.parse().map_err(|_| {
            format!("--send-rate {n:?}: use quota, off or a number of calls per second")
        })?)),
    };
    if let Some(path) = &a.policy {
        let text = std::fs::read_to_string(path).map_err(|e| format!("--policy {path}: {e}"))?;
        sc.policy = RetryPolicy::from_json(&text).map_err(|e| e.to_string())?;
        sc.policy_label = path.clone();
    }
    sc.validate()?;
    Ok(sc)
}

/// Runs the simulation(s) and prints the report; returns the exit code.
pub(crate) fn run(args: &SimulateArgs, out: &mut dyn Write) -> std::io::Result<i32> {
    let sc = match scenario(args) {
        Ok(sc) => sc,
        Err(e) => {
            eprintln!("courier-dev simulate: {e}");
            return Ok(2);
        }
    };
    let reports = match &args.compare {
        Some(what) => courier_sim::compare(&sc, what),
        None => courier_sim::run(&sc).map(|r| vec![r]),
    };
    let reports = match reports {
        Ok(r) => r,
        Err(e) => {
            eprintln!("courier-dev simulate: {e}");
            return Ok(2);
        }
    };
    if args.json {
        let value = if args.compare.is_some() {
            serde_json::to_value(&reports)
        } else {
            serde_json::to_value(&reports[0])
        }
        .map_err(std::io::Error::other)?;
        serde_json::to_writer_pretty(&mut *out, &value).map_err(std::io::Error::other)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", courier_sim::table(&reports))?;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: SimulateArgs,
    }

    fn parse(args: &[&str]) -> SimulateArgs {
        T::try_parse_from(std::iter::once("simulate").chain(args.iter().copied()))
            .unwrap()
            .a
    }

    #[test]
    fn flags_shape_the_scenario() {
        let sc = scenario(&parse(&[
            "throttle-wave",
            "--jobs",
            "1000",
            "--instances",
            "50",
            "--quota",
            "20",
            "--fault-start",
            "1m",
            "--fault-duration",
            "2m",
            "--no-breaker",
            "--priority",
            "bulk",
        ]))
        .unwrap();
        assert_eq!(sc.jobs, 1000);
        assert_eq!(sc.lambda.max_concurrency, 50);
        assert_eq!(sc.provider.quota_per_sec, 20.0);
        assert_eq!(sc.faults.len(), 3);
        assert_eq!(sc.faults[0].start_secs, 60);
        assert_eq!(sc.faults[1].start_secs, 60 + 15 * 60);
        assert!(sc.faults.iter().all(|f| f.duration_secs == 120));
        assert!(sc.breaker.is_none());
        assert_eq!(sc.priority, Priority::Bulk);
        // the governor follows the quota unless told otherwise
        assert_eq!(sc.send_rate.map(|r| r.per_sec), Some(20.0));
        let off = scenario(&parse(&["steady", "--send-rate", "off"])).unwrap();
        assert!(off.send_rate.is_none());
        let n = scenario(&parse(&["steady", "--send-rate", "12.5"])).unwrap();
        assert_eq!(n.send_rate.map(|r| r.per_sec), Some(12.5));
        let bad = scenario(&parse(&["steady", "--send-rate", "fast"])).unwrap_err();
        assert!(bad.contains("--send-rate"), "{bad}");
        let zero = scenario(&parse(&["steady", "--send-rate", "0"])).unwrap_err();
        assert!(zero.contains("send rate"), "{zero}");
        assert!(scenario(&parse(&["nope"])).unwrap_err().contains("known:"));
        // the retry queue: its own instances, none without the flag; zero is refused
        let two = scenario(&parse(&[
            "steady",
            "--instances",
            "20",
            "--retry-instances",
            "10",
        ]));
        let two = two.unwrap();
        assert_eq!(
            (two.lambda.max_concurrency, two.retry_concurrency),
            (20, Some(10))
        );
        assert_eq!(
            scenario(&parse(&["steady"])).unwrap().retry_concurrency,
            None
        );
        let zero = scenario(&parse(&["steady", "--retry-instances", "0"])).unwrap_err();
        assert!(zero.contains("at least 1"), "{zero}");
        assert!(scenario(&parse(&["steady", "--arrival", "5y"])).is_err());
    }

    #[test]
    fn prints_a_table_or_json() {
        let mut out = Vec::new();
        let code = run(
            &parse(&[
                "outage-30m",
                "--jobs",
                "500",
                "--arrival",
                "5m",
                "--fault-start",
                "1m",
                "--fault-duration",
                "2m",
                "--quota",
                "50",
            ]),
            &mut out,
        )
        .unwrap();
        assert_eq!(code, 0);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("outage: calls per job (amplification)"),
            "{text}"
        );
        let mut out = Vec::new();
        run(
            &parse(&["steady", "--jobs", "100", "--compare", "breaker", "--json"]),
            &mut out,
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 4);
        // the retry queue against one queue with as many instances: two reports
        let mut out = Vec::new();
        let args = [
            "steady",
            "--jobs",
            "100",
            "--retry-instances",
            "3",
            "--compare",
            "queues",
        ];
        run(&parse(&[&args[..], &["--json"]].concat()), &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v[0]["retry_queue"],
            "its own event source, 3 instances at most (0 at once)"
        );
        assert_eq!(v[1]["retry_queue"], "off");
        // and without --retry-instances, nothing to compare: exit 2
        let without = parse(&["steady", "--jobs", "100", "--compare", "queues"]);
        assert_eq!(run(&without, &mut Vec::new()).unwrap(), 2);
    }
}
