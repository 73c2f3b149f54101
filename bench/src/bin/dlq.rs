//! `make bench-dlq`: dead-letter figures on the emulator the harness started. Prints: index query
//! latency (median of 5) with 100,000 letters indexed, and letters archived per second by the real
//! archiver against the emulator (and on in-memory ports, for the cost of the code alone).

#![allow(clippy::expect_used)] // a benchmark stops at the first failure, loudly
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
use chrono::Utc;
use courier_adapters::aws::{
    Clients, DynamoDbLetterIndex, IndexedDeadLetterSink, SqsDeadLetterSink,
};
use courier_core::classify::ErrorClass;
use courier_core::letters::{ArchiveAges, IndexedLetter, LetterFilter, LetterState};
use courier_core::policy::DeadLetterCategory;
use courier_core::ports::{Clock, DeadLetter, DeadLetterSink, LetterIndex};

const LETTERS: usize = 100_000;
const CAMPAIGNS: usize = 100;

fn record(i: usize, now: chrono::DateTime<Utc>) -> DeadLetter {
    let category = DeadLetterCategory::ALL[i % 4];
    let at = now - chrono::Duration::seconds(i as i64);
    DeadLetter {
        id: format!("bench-{i}#0123456789abcdef#g0#{}", category.as_str()),
        category,
        reason: if i % 1000 == 7 {
            "554 5.7.1 needle in the haystack".into()
        } else {
            "554 5.7.1 rejected by policy".into()
        },
        message_id: Some(format!("bench-{i}")),
        campaign_id: Some(format!("campaign-{}", i % CAMPAIGNS)),
        trace_id: None,
        recipients: vec![format!("user{i}@example.org")],
        provider: Some(if i.is_multiple_of(2) {
            "ses".into()
        } else {
            "smtp".into()
        }),
        class: ErrorClass::ContentRejected,
        rule: "smtp.text.content-or-policy".into(),
        raw_code: Some("554 5.7.1".into()),
        raw_text: Some("Message rejected by policy".into()),
        attempts: 1,
        history: vec![],
        first_failure_at: at,
        last_failure_at: at,
        fingerprint: "0123456789abcdef".into(),
        payload: Some(format!(r#"{{"version":1,"message_id":"bench-{i}"}}"#)),
        payload_base64: None,
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

#[tokio::main]
async fn main() {
    if std::env::var("AWS_ENDPOINT_URL").is_err() {
        eprintln!("run through the harness: make bench-dlq");
        std::process::exit(2);
    }
    let sdk = courier_adapters::aws::sdk_config().await;
    let clients = Clients::new(&sdk);
    let prefix = format!("bench-dlq-{}", std::process::id());
    let stack = courier_devkit::provision::provision(
        &sdk,
        &prefix,
        "arn:aws:iam::123456789012:role/bench",
        courier_devkit::provision::QueueSettings {
            max_receive_count: 5,
            visibility_timeout: Duration::from_secs(60),
        },
    )
    .await
    .expect("provision");
    let now = Utc::now();

    // Seed the index: BatchWriteItem, 25 items a call, 8 calls in flight.
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let client = clients.dynamodb.clone();
        let table = stack.letter_index_table.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = worker * 25;
            while i < LETTERS {
                let mut writes = Vec::new();
                for j in i..(i + 25).min(LETTERS) {
                    let l = IndexedLetter {
                        letter_id: record(j, now).id.clone(),
                        state: LetterState::Live,
                        dead_lettered_at: record(j, now).last_failure_at,
                        archive_key: None,
                        record: record(j, now),
                        audit: vec![],
                    };
                    let item = courier_adapters::aws::letters::item_of(&l).expect("item");
                    writes.push(
                        WriteRequest::builder()
                            .put_request(
                                PutRequest::builder()
                                    .set_item(Some(item))
                                    .build()
                                    .expect("put"),
                            )
                            .build(),
                    );
                }
                let mut pending = Some(std::collections::HashMap::from([(table.clone(), writes)]));
                while let Some(items) = pending.take() {
                    let out = client
                        .batch_write_item()
                        .set_request_items(Some(items))
                        .send()
                        .await
                        .expect("batch write");
                    pending = out.unprocessed_items.filter(|u| !u.is_empty());
                }
                i += 25 * 8;
            }
        }));
    }
    for t in tasks {
        t.await.expect("seed task");
    }
    let seeded = started.elapsed();
    println!(
        "seeded {LETTERS} letters into the index in {:.1} s ({:.0}/s)",
        seeded.as_secs_f64(),
        LETTERS as f64 / seeded.as_secs_f64()
    );

    let index = DynamoDbLetterIndex::new(clients.dynamodb.clone(), &stack.letter_index_table);
    let queries: Vec<(&str, LetterFilter)> = vec![
        (
            "newest 50 of a category (GSI by_category)",
            LetterFilter {
                category: Some(DeadLetterCategory::NeedsReview),
                ..LetterFilter::default()
            },
        ),
        (
            "newest 50 of a campaign (GSI by_campaign)",
            LetterFilter {
                campaign: Some("campaign-42".into()),
                ..LetterFilter::default()
            },
        ),
        (
            "a category in the last 10 minutes",
            LetterFilter {
                category: Some(DeadLetterCategory::Poison),
                since: Some(now - chrono::Duration::minutes(10)),
                ..LetterFilter::default()
            },
        ),
        (
            "a campaign + text (GSI, then filter)",
            LetterFilter {
                campaign: Some("campaign-7".into()),
                text: Some("needle".into()),
                ..LetterFilter::default()
            },
        ),
        (
            "text alone, first 50 matches (full scan)",
            LetterFilter {
                text: Some("needle".into()),
                ..LetterFilter::default()
            },
        ),
    ];
    for (name, filter) in queries {
        let mut times = Vec::new();
        let mut found = 0;
        for _ in 0..5 {
            let t = Instant::now();
            let (page, _) = index.search(&filter, 50, None).await.expect("search");
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            found = page.len();
        }
        println!(
            "index query, {LETTERS} letters: {name:<44} median {:>9.1} ms ({found} letters)",
            median(times)
        );
    }

    // Archive rate, real adapters: 2,000 letters dead-lettered through the sink, then one run.
    let sink = Arc::new(IndexedDeadLetterSink::new(
        DynamoDbLetterIndex::new(clients.dynamodb.clone(), &stack.letter_index_table),
        SqsDeadLetterSink::new(clients.sqs.clone(), &stack.dead_letter_queue_url),
    ));
    let n = 2_000;
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let sink = Arc::clone(&sink);
        tasks.push(tokio::spawn(async move {
            for i in (LETTERS + worker..LETTERS + n).step_by(8) {
                sink.put(&record(i, now - chrono::Duration::days(30)))
                    .await
                    .expect("dead letter");
            }
        }));
    }
    for t in tasks {
        t.await.expect("sink task");
    }
    let ages = ArchiveAges::zero();
    let settings = courier_dev::archiver_settings(&stack, ages.clone());
    let archiver = courier_archiver::wiring::wire(&clients, &settings);
    let t = Instant::now();
    let report = archiver
        .run("bench", Utc::now() + chrono::Duration::seconds(900))
        .await
        .expect("archive");
    let took = t.elapsed().as_secs_f64();
    println!(
        "archiver on the emulator: {} letters in {took:.1} s = {:.0} letters/s ({} objects)",
        report.archived,
        report.archived as f64 / took,
        report.objects.len()
    );

    // The same run on in-memory ports: the archiver's own cost.
    let clock: Arc<dyn Clock> = Arc::new(courier_adapters::clock::SystemClock);
    let queue = Arc::new(courier_devkit::memory::MemoryLetterQueue::new(
        clock.clone(),
    ));
    let mem_index = Arc::new(courier_devkit::memory::MemoryLetterIndex::default());
    let m = 20_000;
    for i in 0..m {
        let r = record(i, now - chrono::Duration::days(30));
        mem_index
            .put_new(&courier_archiver::indexed(r.clone()))
            .await
            .expect("index");
        queue.push(serde_json::to_string(&r).expect("json"));
    }
    let archiver = courier_archiver::Archiver {
        queues: vec![(courier_archiver::QueueKind::Letters, queue)],
        index: mem_index,
        archive: Arc::new(courier_devkit::memory::MemoryArchive::default()),
        payloads: Arc::new(courier_devkit::memory::MemoryPayloads::default()),
        ages,
        clock,
        margin: Duration::from_secs(1),
        hide: Duration::from_secs(300),
    };
    let t = Instant::now();
    let report = archiver
        .run("bench-mem", Utc::now() + chrono::Duration::seconds(900))
        .await
        .expect("archive");
    let took = t.elapsed().as_secs_f64();
    println!(
        "archiver on in-memory ports: {} letters in {took:.2} s = {:.0} letters/s",
        report.archived,
        report.archived as f64 / took
    );
}
