//! `make bench-throughput [EMULATOR=localstack] [JOBS=n]`: end-to-end throughput through the
//! emulator the harness started, with the local event-source driver (Lambda's SQS semantics:
//! batches of 10, visibility timeout, partial batch failures, deletes) and the real send
//! pipeline: every job is received, validated, claimed in DynamoDB, rendered from the S3
//! template, sent to Postfix over SMTP, recorded and deleted.
//!
//! For 1, 4 and 8 concurrent driver instances in turn, it enqueues JOBS (default 1,000)
//! deliverable jobs, starts the instances and clocks from their first poll until every job was
//! acknowledged (deleted from the queue); then it reads every job's status record back and fails
//! unless each one is `sent_to_provider` and was sent once. Prints jobs per second, the median
//! batch (one invocation) latency, and AWS API calls per job.

#![allow(clippy::expect_used)] // a benchmark stops at the first failure, loudly
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use courier_adapters::aws::{CallCounter, Clients, DynamoDbStatusStore};
use courier_core::ports::StatusStore;
use courier_core::status::Status;
use courier_dev::driver::Driver;
use courier_send::config::{SendConfig, SmtpSettings};

const INSTANCES: [usize; 3] = [1, 4, 8];
const DOMAIN: &str = "courier.test";

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        eprintln!("{name} is not set: run through the harness (make bench-throughput)");
        std::process::exit(2);
    })
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(0.0)
}

async fn enqueue(sqs: &aws_sdk_sqs::Client, queue_url: &str, round: usize, jobs: usize) {
    let bodies: Vec<String> = (0..jobs)
        .map(|i| {
            serde_json::json!({
                "version": 1,
                "message_id": format!("tp-{round}-{i:06}"),
                "campaign_id": "throughput",
                "from": format!("bench@{DOMAIN}"),
                "to": [format!("reader{i}@{DOMAIN}")],
                "template": {"id": "welcome", "variables": {"name": format!("Reader {i}")}}
            })
            .to_string()
        })
        .collect();
    for (n, chunk) in bodies.chunks(10).enumerate() {
        let mut request = sqs.send_message_batch().queue_url(queue_url);
        for (i, body) in chunk.iter().enumerate() {
            request = request.entries(
                SendMessageBatchRequestEntry::builder()
                    .id(format!("{n}-{i}"))
                    .message_body(body)
                    .build()
                    .expect("entry"),
            );
        }
        request.send().await.expect("enqueue");
    }
}

#[tokio::main]
async fn main() {
    env("AWS_ENDPOINT_URL");
    let jobs: usize = std::env::args()
        .nth(1)
        .map_or(1000, |a| a.parse().expect("JOBS is a number"));
    let smtp = SmtpSettings {
        host: env("COURIER_SMTP_HOST"),
        port: env("COURIER_SMTP_PORT").parse().expect("COURIER_SMTP_PORT"),
        tls: courier_adapters::smtp::SmtpSecurity::None,
        username: None,
        password: None,
        credentials_secret: None,
        timeout: Duration::from_secs(10),
        max_message_bytes: courier_adapters::smtp::DEFAULT_MAX_MESSAGE_BYTES,
    };
    let sdk = courier_adapters::aws::sdk_config().await;
    let stack = courier_devkit::provision::provision(
        &sdk,
        &format!("bench-tp-{}", std::process::id()),
        "arn:aws:iam::123456789012:role/bench",
        courier_devkit::provision::QueueSettings {
            max_receive_count: 5,
            visibility_timeout: Duration::from_secs(30),
        },
    )
    .await
    .expect("provision");
    let counter = CallCounter::default();
    let clients = Clients::counted(&sdk, &counter);
    clients
        .s3
        .put_object()
        .bucket(&stack.template_bucket)
        .key(courier_adapters::aws::S3TemplateStore::key("welcome"))
        .body(
            br#"{"subject": "Welcome, {{ name }}", "text": "Hello {{ name }}, thanks for joining."}"#
                .to_vec()
                .into(),
        )
        .send()
        .await
        .expect("upload template");
    // One queue: the drivers poll the send queue only, so any copy that waits comes back there.
    let resources = courier_send::config::Resources {
        retry_queue_url: None,
        ..courier_dev::send_resources(
            &stack,
            &[courier_core::ports::Provider::Smtp],
            None,
            Some(smtp),
        )
    };
    let pipeline = Arc::new(
        courier_send::wiring::wire(
            &clients,
            SendConfig::default(),
            &resources,
            courier_core::policy::RetryPolicy::default(),
        )
        .expect("wire"),
    );
    let status = DynamoDbStatusStore::new(
        clients.dynamodb.clone(),
        &stack.status_table,
        Duration::from_secs(3600),
    );
    println!(
        "{} on {}: {jobs} deliverable jobs per round, batches of 10, SMTP to Postfix",
        stack.stack_name,
        std::env::var("COURIER_EMULATOR").unwrap_or_else(|_| "the emulator".into())
    );
    for (round, instances) in INSTANCES.into_iter().enumerate() {
        enqueue(&clients.sqs, &stack.queue_url, round, jobs).await;
        counter.reset();
        let acknowledged = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let tasks: Vec<_> = (0..instances)
            .map(|instance| {
                let driver = Driver::new(clients.sqs.clone(), &stack.queue_url, &stack.queue_arn);
                let pipeline = Arc::clone(&pipeline);
                let acknowledged = Arc::clone(&acknowledged);
                tokio::spawn(async move {
                    let mut latencies = Vec::new();
                    let mut n = 0;
                    while acknowledged.load(Ordering::Relaxed) < jobs {
                        n += 1;
                        let invoked = Instant::now();
                        let (stats, _) = driver
                            .poll_once(&pipeline, &format!("tp-{round}-{instance}-{n}"))
                            .await
                            .expect("poll");
                        if stats.received > 0 {
                            latencies.push(invoked.elapsed().as_secs_f64() * 1000.0);
                        }
                        acknowledged.fetch_add(stats.deleted, Ordering::Relaxed);
                    }
                    latencies
                })
            })
            .collect();
        let mut latencies = Vec::new();
        for task in tasks {
            latencies.extend(task.await.expect("driver instance"));
        }
        let took = started.elapsed().as_secs_f64();
        let calls = counter.total();
        let mut wrong = Vec::new();
        for i in 0..jobs {
            let id = format!("tp-{round}-{i:06}");
            match status.get(&id).await.expect("status get") {
                Some(r)
                    if r.status == Status::SentToProvider
                        && r.history
                            .iter()
                            .filter(|h| h.status == Status::SentToProvider)
                            .count()
                            == 1 => {}
                other => wrong.push(format!("{id}: {:?}", other.map(|r| r.status))),
            }
        }
        assert!(
            wrong.is_empty(),
            "{} of {jobs} jobs not sent exactly once: {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        );
        println!(
            "{instances} instance(s): {jobs} jobs in {took:.1} s = {:.1} jobs/s; median batch {:.0} ms over {} batches; {:.2} AWS calls per job; all {jobs} status records sent_to_provider",
            jobs as f64 / took,
            median(latencies.clone()),
            latencies.len(),
            calls as f64 / jobs as f64,
        );
    }
}
