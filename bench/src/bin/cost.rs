//! `make bench-cost`: AWS API calls and US dollars per million emails, for three scenarios: all
//! delivered at the first attempt; 10% throttled once and delivered at the retry; a 30-minute
//! outage of the (only) provider. Counted, not timed: nothing here needs an emulator.
//!
//! The calls a pickup of a job makes are those `aws_api_calls_per_job` (tests/tests/send.rs)
//! counts on the emulators; the model below reproduces both measured figures (3.20 calls for a
//! first-attempt delivery, 6.70 on moto for "throttled once, then delivered") before it is
//! used for the scenarios. The outage scenario's waits are drawn from the real retry policy
//! (`RetryPolicy::default()`, class `circuit_open`, seeded jitter).
//!
//! Options: `--batch-ms MS` (billed Lambda duration of one batch of 10; default: the median
//! `make bench-lambda` measured), `--log-bytes-per-batch B` (CloudWatch Logs ingested per batch;
//! default: measured the same way), `--outage-calls-per-job N` (take the outage's calls per job
//! from the outage simulator instead of deriving it), `--outage-minutes M` (30).

use chrono::{DateTime, Duration as ChronoDuration, Utc};
use courier_core::classify::ErrorClass;
use courier_core::job::Priority;
use courier_core::policy::{Decision, RetryPolicy, RetryState};
use courier_core::random::SeededRandom;

/// Unit prices, US dollars: AWS list prices for us-east-1, on-demand, no free tier (as published
/// for 2026; check the pricing pages before quoting them).
struct Prices {
    /// Lambda on arm64 (Graviton), per GB-second of billed duration (1 ms granularity).
    lambda_gb_s: f64,
    /// Lambda, per invocation.
    lambda_request: f64,
    /// SQS standard queue, per API request (a request carries up to 10 messages and 64 KiB).
    sqs_request: f64,
    /// DynamoDB on-demand, per write request unit (1 WRU = a standard write of up to 1 KB;
    /// transactional writes and condition checks cost 2 per KB).
    ddb_wru: f64,
    /// DynamoDB on-demand, per read request unit (a strongly consistent read of up to 4 KB).
    ddb_rru: f64,
    /// Step Functions Standard, per state transition.
    sfn_transition: f64,
    /// SES outbound, per message sent (throttled or rejected calls are not billed).
    ses_message: f64,
    /// S3 Standard, per GET.
    s3_get: f64,
    /// CloudWatch Logs, per GB ingested (the EMF metrics and logs of the functions).
    logs_gb: f64,
}

const PRICES: Prices = Prices {
    lambda_gb_s: 0.000_013_333_4,
    lambda_request: 0.20 / 1e6,
    sqs_request: 0.40 / 1e6,
    ddb_wru: 0.625 / 1e6,
    ddb_rru: 0.125 / 1e6,
    sfn_transition: 0.025 / 1e3,
    ses_message: 0.10 / 1e3,
    s3_get: 0.40 / 1e6,
    logs_gb: 0.50,
};

/// The send function's memory, from infra/template.yaml (`Globals.Function.MemorySize`).
const MEMORY_MB: f64 = 128.0;
/// Records per SQS batch (the template's `BatchSize`).
const BATCH: f64 = 10.0;
/// Write units of the claim: a transaction of the status put (item under 1 KB) and one
/// suppression condition check per recipient (one recipient here), 2 WRU each.
const CLAIM_WRU: f64 = 4.0;
/// Write units of a status update or a breaker write (items under 1 KB).
const SMALL_WRITE_WRU: f64 = 1.0;
/// Defaults measured by `make bench-lambda` (BENCHMARKS.md): median latency of a batch of 10
/// (on moto: its DynamoDB dominates, so this overstates the duration on AWS), and the bytes of
/// log output per batch.
const DEFAULT_BATCH_MS: f64 = 1_348.0;
const DEFAULT_LOG_BYTES_PER_BATCH: f64 = 2_331.0;

/// What one million jobs cost, counted by API operation.
#[derive(Default, Clone)]
struct Counts {
    sqs_receive: f64,
    sqs_delete_batch: f64,
    sqs_send_batch: f64,
    ddb_claim: f64,
    ddb_status_write: f64,
    /// Writes DynamoDB makes to the status table's `by_provider_message_id` index (keys only,
    /// 1 WRU) when a status write sets the provider's message id: not API calls, billed.
    ddb_index_write: f64,
    ddb_breaker_read: f64,
    ddb_breaker_write: f64,
    ses_calls: f64,
    ses_accepted: f64,
    sfn_transitions: f64,
    /// Lambda invocations (batches).
    batches: f64,
}

impl Counts {
    /// A batch of records picked up: one ReceiveMessage and one DeleteMessageBatch (made by the
    /// event source mapping), one invocation, a claim per record.
    fn pickups(&mut self, records: f64) {
        let batches = records / BATCH;
        self.batches += batches;
        self.sqs_receive += batches;
        self.sqs_delete_batch += batches;
        self.ddb_claim += records;
    }

    /// Records delivered: SendEmail accepted, status written (with SES's message id, so the
    /// sparse index gets a write too).
    fn delivered(&mut self, records: f64) {
        self.ses_calls += records;
        self.ses_accepted += records;
        self.ddb_status_write += records;
        self.ddb_index_write += records;
    }

    /// Records the provider refused for now (throttled): SendEmail called, status written,
    /// re-enqueued with SendMessageBatch (one per batch that had any), and the breaker's
    /// read and conditional write once per batch that saw a failure.
    fn refused(&mut self, records: f64, batches_with_failures: f64) {
        self.ses_calls += records;
        self.ddb_status_write += records;
        self.sqs_send_batch += batches_with_failures;
        self.ddb_breaker_read += batches_with_failures;
        self.ddb_breaker_write += batches_with_failures;
    }

    /// Records that wait without a send because every circuit is open, as the cached breaker
    /// state says: re-enqueued unclaimed (the batch's records together), no claim and no status
    /// write (`wait_unclaimed` in the send function); the breaker is only read from the cache.
    fn circuit_open(&mut self, records: f64) {
        self.sqs_send_batch += records / BATCH;
    }

    /// Pickups of records that wait unclaimed: the receive, delete and invocation of their
    /// batches, no claim.
    fn unclaimed_pickups(&mut self, records: f64) {
        let batches = records / BATCH;
        self.batches += batches;
        self.sqs_receive += batches;
        self.sqs_delete_batch += batches;
    }

    /// API calls, as `aws_api_calls_per_job` counts them (SendEmail included).
    fn calls(&self) -> f64 {
        self.sqs_receive
            + self.sqs_delete_batch
            + self.sqs_send_batch
            + self.ddb_claim
            + self.ddb_status_write
            + self.ddb_breaker_read
            + self.ddb_breaker_write
            + self.ses_calls
    }
}

struct Bill {
    lambda: f64,
    sqs: f64,
    dynamodb: f64,
    step_functions: f64,
    logs: f64,
    ses: f64,
}

impl Bill {
    fn of(c: &Counts, batch_ms: f64, log_bytes_per_batch: f64) -> Bill {
        let gb_s = c.batches * batch_ms / 1000.0 * MEMORY_MB / 1024.0;
        Bill {
            lambda: gb_s * PRICES.lambda_gb_s + c.batches * PRICES.lambda_request,
            sqs: (c.sqs_receive + c.sqs_delete_batch + c.sqs_send_batch) * PRICES.sqs_request,
            dynamodb: (c.ddb_claim * CLAIM_WRU
                + (c.ddb_status_write + c.ddb_index_write + c.ddb_breaker_write) * SMALL_WRITE_WRU)
                * PRICES.ddb_wru
                + c.ddb_breaker_read * PRICES.ddb_rru,
            step_functions: c.sfn_transitions * PRICES.sfn_transition,
            logs: c.batches * log_bytes_per_batch / 1e9 * PRICES.logs_gb,
            ses: c.ses_accepted * PRICES.ses_message,
        }
    }

    fn courier(&self) -> f64 {
        self.lambda + self.sqs + self.dynamodb + self.step_functions + self.logs
    }
}

const MILLION: f64 = 1e6;

/// Every job delivered at its first attempt.
fn all_succeed() -> Counts {
    let mut c = Counts::default();
    c.pickups(MILLION);
    c.delivered(MILLION);
    c
}

/// A share `p` of jobs throttled once (spread at random over batches), then delivered at the
/// retry (a short SQS delay: no Step Functions).
fn some_retry_once(p: f64) -> Counts {
    let mut c = Counts::default();
    let retried = MILLION * p;
    c.pickups(MILLION);
    c.delivered(MILLION - retried);
    // Batches of the first pickup with at least one throttled record.
    let batches_with_failures = MILLION / BATCH * (1.0 - (1.0 - p).powf(BATCH));
    c.refused(retried, batches_with_failures);
    c.pickups(retried);
    c.delivered(retried);
    c
}

/// Every job throttled once then delivered, whole batches at a time: what the test measures.
fn all_retry_once() -> Counts {
    let mut c = Counts::default();
    c.pickups(MILLION);
    c.refused(MILLION, MILLION / BATCH);
    c.pickups(MILLION);
    c.delivered(MILLION);
    c
}

/// The outage: how many circuit-open deferrals a job goes through, drawn from the real policy.
struct Outage {
    deferrals_per_job: f64,
    max_deferrals: u32,
    exhausted: u64,
    step_function_waits: u64,
}

/// Jobs whose first pickup falls uniformly within an outage of `minutes`, to which the
/// breaker's recovery adds `recovery_secs` (the open period running when the provider comes
/// back: up to 300 s after failed probes, 150 s on average; then 2 half-open probes close it).
/// Each pickup until then is a `circuit_open` wait (no attempt spent), with the policy's delay.
fn outage_deferrals(minutes: f64, recovery_secs: f64, priority: Priority) -> Outage {
    let policy = RetryPolicy::default();
    let mut rng = SeededRandom::new(7);
    let mut jitter = SeededRandom::new(11);
    let window = minutes * 60.0 + recovery_secs;
    let jobs = 20_000u32;
    let t0: DateTime<Utc> = DateTime::UNIX_EPOCH;
    let (mut total, mut max, mut exhausted, mut sfn) = (0u64, 0u32, 0u64, 0u64);
    for _ in 0..jobs {
        use courier_core::random::RandomSource;
        let mut t = rng.next_unit() * minutes * 60.0;
        let mut state = RetryState::default();
        let mut n = 0u32;
        while t < window {
            let now = t0 + ChronoDuration::milliseconds((t * 1000.0) as i64);
            match policy.decide(
                priority,
                ErrorClass::CircuitOpen,
                &state,
                now,
                None,
                &mut jitter,
            ) {
                Decision::Retry { delay, .. } => {
                    let secs = delay.as_secs();
                    if secs > 900 {
                        sfn += 1;
                    }
                    state.record(ErrorClass::CircuitOpen, false, secs, now);
                    t += secs as f64;
                    n += 1;
                }
                _ => {
                    exhausted += 1;
                    break;
                }
            }
        }
        total += u64::from(n);
        max = max.max(n);
    }
    Outage {
        deferrals_per_job: total as f64 / f64::from(jobs),
        max_deferrals: max,
        exhausted,
        step_function_waits: sfn,
    }
}

fn outage(deferrals_per_job: f64) -> Counts {
    let mut c = Counts::default();
    let deferred = MILLION * deferrals_per_job;
    c.unclaimed_pickups(deferred);
    c.circuit_open(deferred);
    c.pickups(MILLION);
    c.delivered(MILLION);
    c
}

fn arg(name: &str) -> Option<f64> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == name)?;
    match args.get(i + 1).and_then(|v| v.parse().ok()) {
        Some(v) => Some(v),
        None => {
            eprintln!("{name} needs a number");
            std::process::exit(2);
        }
    }
}

fn row(name: &str, c: &Counts, batch_ms: f64, log_bytes: f64) {
    let b = Bill::of(c, batch_ms, log_bytes);
    println!(
        "| {name} | {:.2} | ${:.2} | ${:.2} | ${:.2} | ${:.2} | ${:.2} | ${:.2} | **${:.2}** | ${:.2} |",
        c.calls() / MILLION,
        b.lambda,
        b.sqs,
        b.dynamodb,
        b.step_functions,
        b.logs,
        b.ses,
        b.courier(),
        b.courier() + b.ses,
    );
}

fn main() {
    let batch_ms = arg("--batch-ms").unwrap_or(DEFAULT_BATCH_MS);
    let log_bytes = arg("--log-bytes-per-batch").unwrap_or(DEFAULT_LOG_BYTES_PER_BATCH);
    let minutes = arg("--outage-minutes").unwrap_or(30.0);

    // The model against the measurements it is built from.
    let first = all_succeed().calls() / MILLION;
    let throttled = all_retry_once().calls() / MILLION;
    println!(
        "model check: first-attempt delivery {first:.2} calls per job (measured 3.20); throttled once then delivered {throttled:.2} (measured 6.70 on moto)"
    );
    if (first - 3.20).abs() > 0.005 || (throttled - 6.70).abs() > 0.005 {
        eprintln!("the call model no longer matches the measured figures: update it");
        std::process::exit(1);
    }

    let t = outage_deferrals(minutes, 150.0, Priority::Transactional);
    let b = outage_deferrals(minutes, 150.0, Priority::Bulk);
    println!(
        "outage of {minutes} min (+150 s breaker recovery), first pickups spread over it: {:.2} circuit-open waits per job on average (at most {}), transactional; {:.2} bulk; jobs dead-lettered: {}; waits via Step Functions: {}",
        t.deferrals_per_job,
        t.max_deferrals,
        b.deferrals_per_job,
        t.exhausted + b.exhausted,
        t.step_function_waits + b.step_function_waits,
    );
    let (deferrals, source) = match arg("--outage-calls-per-job") {
        // calls = 3.20 + 0.30 per wait (a tenth each of receive, delete and re-enqueue: the
        // wait is unclaimed).
        Some(calls) => (
            (calls - first) / 0.3,
            "the outage simulator's calls per job",
        ),
        None => (t.deferrals_per_job, "derived from the retry policy"),
    };

    println!();
    println!(
        "Per million emails; Lambda arm64 {MEMORY_MB} MB at {batch_ms} ms per batch of 10, {log_bytes} log bytes per batch; us-east-1 list prices."
    );
    println!();
    println!(
        "| scenario | AWS calls per job | Lambda | SQS | DynamoDB | Step Functions | CloudWatch Logs | SES | Courier (without SES) | total |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    row(
        "all delivered at the first attempt",
        &all_succeed(),
        batch_ms,
        log_bytes,
    );
    row(
        "10% throttled once, delivered at the retry",
        &some_retry_once(0.10),
        batch_ms,
        log_bytes,
    );
    row(
        &format!("{minutes}-minute provider outage ({source})"),
        &outage(deferrals),
        batch_ms,
        log_bytes,
    );
    println!();
    println!(
        "Not per job: each instance reads the breaker state once per provider per 2 s and the poison blocklist once a minute (about 1,860 reads an instance-hour, $0.0002); S3 is read only for template jobs (one GetObject each, ${:.2} per million).",
        MILLION * PRICES.s3_get
    );
}
