//! The simulator validated against a real run: the same small scenario (30 jobs, every fifth to
//! busy@courier.test, which Postfix answers `421 4.7.0 ... try again later`, a policy that
//! retries throttling once after 1 s) runs once through the real send handler, the local driver
//! with Lambda's SQS semantics, moto and Postfix, and once through `courier-sim`. Provider
//! attempts per job must match exactly and AWS API calls per job within the stated tolerance.
//!
//! Not compared: reads made by the clock rather than by jobs (breaker-state refreshes every 2 s,
//! the poison blocklist every minute, empty polls): their number depends on how long the real run
//! takes on the emulator, which the simulator does not try to reproduce.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers fail the test loudly

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use courier_adapters::aws::{CallCounter, Clients, DynamoDbStatusStore};
use courier_core::policy::RetryPolicy;
use courier_core::ports::{DeadLetter, StatusStore};
use courier_core::status::Status;
use courier_dev::driver::Driver;
use courier_integration::{Stack, require_env, unique};
use courier_send::config::SendConfig;
use courier_send::wiring;
use courier_sim::{RecipientShare, Scenario};

const JOBS: u32 = 30;
const BUSY_SHARE: f64 = 0.2;
const BUSY: &str = "busy@courier.test";
/// What Postfix answers for busy@ (scripts/with-harness.sh), as the SMTP client reports it.
const BUSY_REPLY: &str =
    "421 4.7.0 <busy@courier.test>: Recipient address rejected: try again later";
/// Relative tolerance on AWS calls per job: the real run's batches may split differently (SQS
/// returns fewer than 10 messages at times, retries come back spread over a few polls).
const TOLERANCE: f64 = 0.15;

fn policy() -> RetryPolicy {
    RetryPolicy::from_json(
        r#"{"transactional": {"classes": {
            "throttled": {"retries": 1, "schedule": {"delays": [1]}, "jitter": {"kind": "none"}, "spends_attempt": false, "horizon": "1h"}
        }}}"#,
    )
    .unwrap()
}

/// Which jobs the simulator sends to the busy recipient: of every 5 jobs the 5th (its
/// Bresenham spread of a 0.2 share).
fn is_busy(i: u32) -> bool {
    ((f64::from(i) + 1.0) * BUSY_SHARE).floor() > (f64::from(i) * BUSY_SHARE).floor()
}

fn captured(to: &str) -> usize {
    let dir = require_env("COURIER_SMTP_CAPTURE_DIR");
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| {
                    std::fs::read_to_string(e.path())
                        .is_ok_and(|t| t.contains(&format!("Delivered-To: {to}")))
                })
                .count()
        })
        .unwrap_or(0)
}

/// Calls that scale with jobs: everything but GetItem (breaker refreshes and flush reads),
/// Query (poison blocklist) and empty receives.
fn per_job(calls: &BTreeMap<String, u64>, empty_receives: u64) -> u64 {
    calls
        .iter()
        .filter(|(op, _)| !matches!(op.as_str(), "DynamoDB.GetItem" | "DynamoDB.Query"))
        .map(|(_, n)| *n)
        .sum::<u64>()
        - empty_receives
}

#[tokio::test]
async fn the_simulator_matches_a_real_run_on_the_emulators() {
    // --- the real run ---
    let stack = Stack::create(&["smtp"]).await;
    let counter = CallCounter::default();
    let clients = Clients::counted(&stack.sdk, &counter);
    let config = SendConfig {
        ambiguity_grace: Duration::from_secs(3),
        ..SendConfig::default()
    };
    let p = Arc::new(wiring::wire(&clients, config, &stack.resources, policy()).unwrap());
    let d = Driver {
        sqs: clients.sqs.clone(),
        ..stack.driver(2)
    };
    let sqs = stack.sqs();
    let job = |id: &str, to: &str| {
        serde_json::json!({
            "version": 1, "message_id": id, "campaign_id": "sim", "from": stack.sender,
            "to": [to], "content": {"subject": "Hello", "text": format!("hello {id}")}
        })
        .to_string()
    };
    let status = DynamoDbStatusStore::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk),
        &stack.resources.status_table,
        Duration::from_secs(3600),
    );
    // A warm instance first (caches filled), as the simulator's instance is after its first batch.
    let warm_to = format!("{}@courier.test", unique("warm"));
    sqs.send_message()
        .queue_url(&stack.resources.queue_url)
        .message_body(job("warm", &warm_to))
        .send()
        .await
        .unwrap();
    let started = Instant::now();
    while status.get("warm").await.unwrap().map(|r| r.status) != Some(Status::SentToProvider)
        && started.elapsed() < Duration::from_secs(20)
    {
        d.poll_once(&p, "warm").await.unwrap();
    }
    let ok_prefix = unique("simok");
    let recipient = |i: u32| {
        if is_busy(i) {
            BUSY.to_owned()
        } else {
            format!("{ok_prefix}-{i}@courier.test")
        }
    };
    let ids: Vec<String> = (0..JOBS).map(|i| format!("sim-{i}")).collect();
    let entries: Vec<(String, String)> = (0..JOBS)
        .map(|i| {
            (
                ids[i as usize].clone(),
                job(&ids[i as usize], &recipient(i)),
            )
        })
        .collect();
    for chunk in entries.chunks(10) {
        let batch: Vec<_> = chunk
            .iter()
            .enumerate()
            .map(|(n, (_, body))| {
                aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                    .id(n.to_string())
                    .message_body(body)
                    .build()
                    .unwrap()
            })
            .collect();
        // The test's own enqueue goes through an uncounted client.
        sqs.send_message_batch()
            .queue_url(&stack.resources.queue_url)
            .set_entries(Some(batch))
            .send()
            .await
            .unwrap();
    }
    counter.reset();
    let started = Instant::now();
    let mut empty = 0u64;
    let mut finished = 0;
    while finished < JOBS && started.elapsed() < Duration::from_secs(60) {
        let (stats, _) = d.poll_once(&p, "sim").await.unwrap();
        if stats.received == 0 {
            empty += 1;
        }
        finished = 0;
        for id in &ids {
            if matches!(
                status.get(id).await.unwrap().map(|r| r.status),
                Some(Status::SentToProvider | Status::DeadLettered)
            ) {
                finished += 1;
            }
        }
    }
    assert_eq!(finished, JOBS, "the real run did not finish in 60 s");
    let real_calls = counter.snapshot();
    let letters: Vec<DeadLetter> = stack
        .drain(&stack.resources.dead_letter_queue_url)
        .await
        .into_iter()
        .map(|m| serde_json::from_str(m.body.as_deref().unwrap()).unwrap())
        .collect();
    let real_sent: usize = (0..JOBS)
        .filter(|i| !is_busy(*i))
        .map(|i| captured(&recipient(i)))
        .sum();
    let real_attempts = real_sent + letters.iter().map(|l| l.history.len()).sum::<usize>();
    let real_per_job = per_job(&real_calls, empty) as f64 / f64::from(JOBS);

    // --- the same scenario in the simulator ---
    let mut sc = Scenario {
        name: "validation".into(),
        jobs: u64::from(JOBS),
        arrival_secs: 0,
        policy: policy(),
        mix: vec![RecipientShare {
            share: BUSY_SHARE,
            reply: BUSY_REPLY.into(),
        }],
        ambiguity_grace_secs: 3,
        ..Scenario::default()
    };
    // One poller, as the driver; latencies of the emulators on this machine (order of magnitude).
    sc.lambda.initial_concurrency = 1;
    sc.lambda.max_concurrency = 1;
    sc.lambda.ramp_per_minute = 0;
    sc.lambda.cold_start_ms = 0;
    sc.sqs.visibility_timeout_secs = 2;
    sc.sqs.max_receive_count = courier_integration::MAX_RECEIVE_COUNT;
    sc.latency.sqs_ms = 20;
    sc.latency.dynamodb_ms = 20;
    sc.latency.provider_ms = 20;
    sc.latency.provider_spread_ms = 20;
    sc.provider.quota_per_sec = 1e6;
    // The real run sets no COURIER_SEND_RATE_*: unpaced.
    sc.send_rate = None;
    let r = courier_sim::run(&sc).unwrap();
    let sim_attempts = r.provider_calls;
    // The simulator counts provider calls among AWS calls (as SES SendEmail); here the provider
    // is SMTP, not an AWS call.
    let sim_per_job = (r.aws.per_job_calls() - r.aws.provider_calls) as f64 / f64::from(JOBS);

    println!(
        "real: {real_attempts} provider attempts, {real_per_job:.2} AWS calls per job ({real_calls:?}, {empty} empty polls)"
    );
    println!(
        "simulated: {sim_attempts} provider attempts, {sim_per_job:.2} AWS calls per job ({:?})",
        r.aws
    );
    // Busy jobs: tried twice, then dead-lettered as throttled, in both.
    let busy = (0..JOBS).filter(|i| is_busy(*i)).count();
    assert_eq!(letters.len(), busy);
    assert!(
        letters
            .iter()
            .all(|l| l.class == courier_core::classify::ErrorClass::Throttled)
    );
    assert_eq!(
        (r.dead_lettered, r.sent),
        (busy as u64, u64::from(JOBS) - busy as u64)
    );
    assert_eq!(real_attempts as u64, sim_attempts, "provider attempts");
    let diff = (sim_per_job - real_per_job).abs() / real_per_job;
    assert!(
        diff <= TOLERANCE,
        "AWS calls per job: simulated {sim_per_job:.2} vs real {real_per_job:.2} ({:.0}% apart, tolerance {:.0}%)",
        diff * 100.0,
        TOLERANCE * 100.0
    );
}
