//! `make bench`: prints medians for the core's hot paths and the send handler's overhead.
//! No assertions: these machines are shared and noisy; read the figures, compare ratios.
//!
//! Each figure is the median over 15 runs of a timed loop; the loop size is printed.
//!
//! # Layout
//! - this binary (`courier-bench`): the core's hot paths and the handler's overhead, in memory.
//! - `bin/cost.rs` (`make bench-cost`): AWS calls and dollars per million emails.
//! - `bin/dlq.rs` (`make bench-dlq`): the letter index and the archiver on an emulator.
//! - `bin/throughput.rs` (`make bench-throughput`): end-to-end jobs per second on the emulators.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use courier_core::breaker::BreakerConfig;
use courier_core::classify::{ErrorClass, classify_smtp};
use courier_core::job::Priority;
use courier_core::policy::{RetryPolicy, RetryState};
use courier_core::ports::Clock;
use courier_core::random::SeededRandom;
use courier_devkit::memory::*;
use courier_send::{Pipeline, RecordIn, SendConfig, breakers::Breakers};

const RUNS: usize = 15;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Median nanoseconds per iteration of `f` over `iters` iterations.
fn bench(name: &str, iters: usize, mut f: impl FnMut(usize)) {
    let mut per = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let start = Instant::now();
        for i in 0..iters {
            f(i);
        }
        per.push(start.elapsed().as_nanos() as f64 / iters as f64);
    }
    println!(
        "{name:<55} median {:>10.0} ns  ({iters} iterations x {RUNS} runs)",
        median(per)
    );
}

fn corpus() -> Vec<String> {
    let text = include_str!("../../shared/core/tests/fixtures/smtp_replies.jsonl");
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["reply"].as_str().map(str::to_owned))
        .collect()
}

fn main() {
    let replies = corpus();
    // The first classification in a process builds the wording rules' phrase automaton (a
    // Lambda's first failure after a cold start pays it once): one call, not a median.
    let start = Instant::now();
    black_box(classify_smtp(black_box(&replies[0])));
    println!(
        "{:<55} once   {:>10.0} ns  (the first call in this process)",
        "first classification (builds the phrase automata)",
        start.elapsed().as_nanos() as f64
    );
    bench(
        &format!(
            "classify one SMTP reply ({} real replies, cycled)",
            replies.len()
        ),
        20_000,
        |i| {
            black_box(classify_smtp(black_box(&replies[i % replies.len()])));
        },
    );

    let policy = RetryPolicy::default();
    let mut rng = SeededRandom::new(1);
    let now = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default();
    let mut state = RetryState::default();
    state.record(ErrorClass::Network, true, 5, now);
    let classes = [
        ErrorClass::Network,
        ErrorClass::Throttled,
        ErrorClass::MailboxTemporary,
        ErrorClass::CircuitOpen,
    ];
    bench("one retry-policy decision", 200_000, |i| {
        black_box(policy.decide(
            Priority::Bulk,
            classes[i % 4],
            black_box(&state),
            now,
            None,
            &mut rng,
        ));
    });

    handler_overhead();
}

fn handler_overhead() {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start a tokio runtime: {e}");
            return;
        }
    };
    let templates = Arc::new(MemoryTemplates::default());
    templates
        .templates
        .lock()
        .map(|mut t| {
            t.insert(
                "welcome".into(),
                courier_core::ports::Template {
                    subject: "Welcome {{ name }}".into(),
                    text: Some("Hello {{ name }}, your code is {{ code }}.".into()),
                    html: Some("<p>Hello {{ name }}</p>".into()),
                },
            )
        })
        .ok();
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let pipeline = Arc::new(Pipeline {
        status: Arc::new(MemoryStatusStore::default()),
        mailers: vec![Arc::new(MemoryMailer::accepting(
            courier_core::ports::Provider::Ses,
        ))],
        scheduler: courier_devkit::memory::sealing(Arc::new(MemoryScheduler::default())),
        dead_letters: Arc::new(MemoryDeadLetters::default()),
        payloads: Arc::new(courier_devkit::memory::MemoryPayloads::default()),
        suppression: Arc::new(MemorySuppressionList::default()),
        poison: Arc::new(MemoryPoisonList::default()),
        templates,
        breakers: Breakers::new(
            Arc::new(MemoryBreakerStore::default()),
            BreakerConfig::default(),
            Duration::from_secs(60),
        ),
        governor: courier_send::governor::Governor::new(
            Arc::new(courier_devkit::memory::MemorySendSchedule::default()),
            std::collections::BTreeMap::new(),
        ),
        policy: RetryPolicy::default(),
        clock: clock.clone(),
        config: SendConfig::default(),
        rng: std::sync::Mutex::new(SeededRandom::new(7)),
        sightings: Arc::new(courier_devkit::memory::MemorySightings::default()),
        new_codes: std::sync::Mutex::new(Vec::new()),
        sealing: courier_send::Sealing::new(courier_devkit::memory::test_seal_keys()),
        acceptances: Default::default(),
        live: None,
        attachment_budget: Default::default(),
        unsubscribing: Default::default(),
        outcomes: None,
    });
    let batches = 300;
    let mut per_message = Vec::with_capacity(RUNS);
    let mut n = 0u64;
    for _ in 0..RUNS {
        let start = Instant::now();
        for _ in 0..batches {
            let records: Vec<RecordIn> = (0..10)
                .map(|_| {
                    n += 1;
                    RecordIn {
                        sqs_message_id: format!("sqs-{n}"),
                        body: format!(
                            r#"{{"version":1,"message_id":"job-{n}","campaign_id":"bench","from":"Shop <shop@example.com>","to":["user{n}@example.org"],"template":{{"id":"welcome","variables":{{"name":"Ann","code":"{n}"}}}}}}"#
                        ),
                        trace_header: None,
                    }
                })
                .collect();
            let deadline = clock.now() + chrono::Duration::seconds(60);
            let report = runtime.block_on(pipeline.handle_records(records, deadline, "bench"));
            black_box(report);
        }
        per_message.push(start.elapsed().as_nanos() as f64 / (batches * 10) as f64 / 1000.0);
    }
    println!(
        "{:<55} median {:>10.1} us  ({} batches of 10 x {RUNS} runs; parse, validate, claim, render, send, record)",
        "send handler overhead per message (memory ports)",
        median(per_message),
        batches
    );
}
