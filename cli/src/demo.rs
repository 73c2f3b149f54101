//! `courierctl demo`: the local run. Provisions Courier's resources on the emulator the harness
//! started (moto by default), enqueues a demo campaign with a realistic failure mix, runs the send
//! function's real handler through the local event-source driver (several concurrent "instances",
//! Lambda's batch, visibility-timeout and partial-failure semantics) against the real SMTP server,
//! shows live progress and ends with a report.
//!
//! Retry waits use a compressed policy ([`DEMO_POLICY`]) so the run takes about a minute; the
//! production defaults wait minutes to hours.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use courier::aws::DynamoDbControlTable;
use courier::aws::provision::{QueueSettings, provision};
use courier::policy::RetryPolicy;
use courier::ports::DeadLetter;
use courier_send::config::{Resources, SendConfig, SmtpSettings};
use courier_send::driver::Driver;
use courier_send::wiring;

/// The compressed retry policy of the demo (same classes as production, waits in seconds).
pub(crate) const DEMO_POLICY: &str = r#"{
  "transactional": {"classes": {
    "throttled": {"retries": 3, "schedule": {"delays": [2]}, "jitter": {"kind": "proportional", "ratio": 1.0}, "spends_attempt": false, "horizon": "10m"},
    "mailbox_temporary": {"retries": 2, "schedule": {"delays": [3, 6]}, "jitter": {"kind": "proportional", "ratio": 0.2}, "spends_attempt": true, "horizon": "10m"},
    "network": {"retries": 2, "schedule": {"delays": [1, 2]}, "jitter": {"kind": "equal"}, "spends_attempt": true, "horizon": "10m"},
    "circuit_open": {"retries": 20, "schedule": {"delays": [2]}, "jitter": {"kind": "equal"}, "spends_attempt": false, "horizon": "10m"}
  }},
  "bulk": {"classes": {
    "throttled": {"retries": 3, "schedule": {"delays": [2]}, "jitter": {"kind": "proportional", "ratio": 1.0}, "spends_attempt": false, "horizon": "10m"},
    "mailbox_temporary": {"retries": 2, "schedule": {"delays": [3, 6]}, "jitter": {"kind": "proportional", "ratio": 0.2}, "spends_attempt": true, "horizon": "10m"},
    "network": {"retries": 2, "schedule": {"delays": [1, 2]}, "jitter": {"kind": "equal"}, "spends_attempt": true, "horizon": "10m"},
    "circuit_open": {"retries": 20, "schedule": {"delays": [2]}, "jitter": {"kind": "equal"}, "spends_attempt": false, "horizon": "10m"}
  }}
}"#;

/// Concurrent driver loops, standing in for concurrent Lambda instances.
const INSTANCES: usize = 4;

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DemoError {
    #[error(
        "{0} is not set: run the demo through `make demo` (it starts the emulator and the SMTP server)"
    )]
    Env(&'static str),
    #[error("setting up: {0}")]
    Store(#[from] courier::ports::StoreError),
    #[error("wiring the send function: {0}")]
    Wiring(#[from] courier_send::wiring::WiringError),
    #[error("demo policy: {0}")]
    Policy(#[from] courier::policy::PolicyError),
    #[error("dead letters: {0}")]
    Archive(String),
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[from] std::io::Error),
}

fn env(name: &'static str) -> Result<String, DemoError> {
    std::env::var(name).map_err(|_| DemoError::Env(name))
}

fn job(i: usize, from: &str, to: &str) -> serde_json::Value {
    serde_json::json!({
        "version": 1,
        "message_id": format!("demo-{i:05}"),
        "campaign_id": if i.is_multiple_of(2) { "winter-sale" } else { "newsletter" },
        "priority": if i.is_multiple_of(3) { "transactional" } else { "bulk" },
        "from": from,
        "to": [to],
        "template": {"id": "welcome", "variables": {"name": format!("Reader {i}")}}
    })
}

/// The campaign: mostly good addresses, plus every scripted failure and some bad input.
/// Per 100 jobs: 82 good, 3 unknown users (two later ones hit the suppression list), 2 busy
/// (throttling), 3 greylisted, 2 mailbox full, 2 policy rejections, 1 rendering failure,
/// 2 malformed, 1 invalid address, 1 poison, 1 duplicate of an earlier job.
fn campaign(size: usize, from: &str) -> (Vec<String>, Vec<String>) {
    let mut jobs = Vec::with_capacity(size);
    let mut poison = Vec::new();
    for i in 0..size {
        let scripted = |name: &str| job(i, from, &format!("{name}@courier.test")).to_string();
        let body = match i % 100 {
            0..=2 => scripted("unknown"),
            3 | 4 => scripted("busy"),
            5..=7 => scripted("greylist"),
            8 | 9 => scripted("full"),
            10 | 11 => scripted("policy"),
            12 => {
                let mut j = job(i, from, &format!("reader{i}@courier.test"));
                j["template"]["variables"] = serde_json::json!({});
                j.to_string()
            }
            13 => format!("{{\"version\": 1, \"message_id\": \"demo-{i:05}\""),
            14 => String::from_utf8_lossy(b"\xff\xfe garbage").into_owned(),
            15 => job(i, from, "not an address").to_string(),
            16 => {
                let body = job(i, from, &format!("reader{i}@courier.test")).to_string();
                poison.push(body.clone());
                body
            }
            17 if i >= 100 => job(
                i - 100 + 20,
                from,
                &format!("reader{}@courier.test", i - 100 + 20),
            )
            .to_string(),
            _ => job(i, from, &format!("reader{i}@courier.test")).to_string(),
        };
        jobs.push(body);
    }
    (jobs, poison)
}

pub(crate) fn run(size: usize) -> Result<i32, DemoError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    // lettre's connection pool spawns its reaper on the runtime it is built in.
    let _entered = runtime.enter();
    runtime.block_on(run_async(size))
}

async fn run_async(size: usize) -> Result<i32, DemoError> {
    env("AWS_ENDPOINT_URL")?;
    let smtp_host = env("COURIER_SMTP_HOST")?;
    let smtp_port: u16 = env("COURIER_SMTP_PORT")?
        .parse()
        .map_err(|_| DemoError::Env("COURIER_SMTP_PORT"))?;
    let started = Instant::now();
    let sdk = courier::aws::sdk_config().await;
    let prefix = format!("courier-demo-{}", std::process::id());
    let stack = provision(
        &sdk,
        &prefix,
        "arn:aws:iam::123456789012:role/courier-demo",
        QueueSettings {
            max_receive_count: 5,
            visibility_timeout: Duration::from_secs(30),
        },
    )
    .await?;
    println!(
        "provisioned {prefix}: queue, redrive DLQ, dead-letter queue, 3 tables, bucket, delay state machine ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
    aws_sdk_s3::Client::new(&sdk)
        .put_object()
        .bucket(&stack.template_bucket)
        .key(courier::aws::S3TemplateStore::key("welcome"))
        .body(br#"{"subject": "Welcome, {{ name }}", "text": "Hello {{ name }}, thanks for joining.", "html": "<p>Hello {{ name }}, thanks for joining.</p>"}"#.to_vec().into())
        .send()
        .await
        .map_err(courier::aws::store_error("upload template"))?;
    let from = "Courier Demo <demo@courier.test>";
    let (jobs, poison) = campaign(size, from);
    let control = DynamoDbControlTable::new(
        aws_sdk_dynamodb::Client::new(&sdk),
        &stack.control_table,
        Duration::from_secs(60),
    );
    for body in &poison {
        control
            .block_fingerprint(
                &courier::job::fingerprint(body.as_bytes()),
                "demo: blocklisted by an operator",
                chrono::Utc::now(),
            )
            .await?;
    }
    let resources = Resources {
        queue_url: stack.queue_url.clone(),
        dead_letter_queue_url: stack.dead_letter_queue_url.clone(),
        letter_index_table: stack.letter_index_table.clone(),
        status_table: stack.status_table.clone(),
        suppression_table: stack.suppression_table.clone(),
        breaker_table: stack.control_table.clone(),
        template_bucket: stack.template_bucket.clone(),
        delay_state_machine_arn: stack.delay_state_machine_arn.clone(),
        providers: vec!["smtp".into()],
        ses_configuration_set: None,
        smtp: Some(SmtpSettings {
            host: smtp_host.clone(),
            port: smtp_port,
            tls: "none".into(),
            username: None,
            password: None,
            timeout: Duration::from_secs(10),
        }),
    };
    let config = SendConfig {
        ambiguity_grace: Duration::from_secs(30),
        ..SendConfig::default()
    };
    let pipeline = Arc::new(wiring::wire(
        &courier::aws::Clients::new(&sdk),
        config,
        &resources,
        RetryPolicy::from_json(DEMO_POLICY)?,
    )?);

    let sqs = aws_sdk_sqs::Client::new(&sdk);
    for (chunk_no, chunk) in jobs.chunks(10).enumerate() {
        let mut request = sqs.send_message_batch().queue_url(&stack.queue_url);
        for (i, body) in chunk.iter().enumerate() {
            let entry = SendMessageBatchRequestEntry::builder()
                .id(format!("{chunk_no}-{i}"))
                .message_body(body)
                .build()
                .map_err(|e| courier::ports::StoreError::new("enqueue", e))?;
            request = request.entries(entry);
        }
        request
            .send()
            .await
            .map_err(courier::aws::store_error("enqueue"))?;
    }
    println!(
        "enqueued {} jobs -> SMTP {smtp_host}:{smtp_port}; {INSTANCES} driver instances, batches of 10",
        jobs.len()
    );

    let totals: Arc<std::sync::Mutex<BTreeMap<String, u64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for instance in 0..INSTANCES {
        let driver = Driver {
            sqs: sqs.clone(),
            queue_url: stack.queue_url.clone(),
            queue_arn: stack.queue_arn.clone(),
            batch_size: 10,
            visibility_timeout: 30,
            wait_seconds: 1,
            function_timeout: Duration::from_secs(30),
        };
        let pipeline = Arc::clone(&pipeline);
        let totals = Arc::clone(&totals);
        let stop = Arc::clone(&stop);
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                match driver
                    .poll_once(&pipeline, &format!("instance-{instance}-{n}"))
                    .await
                {
                    Ok((_, report)) => {
                        if let Ok(mut t) = totals.lock() {
                            for (k, v) in report.metrics.counts {
                                *t.entry(k).or_default() += v;
                            }
                        }
                    }
                    Err(e) => {
                        eprintln!("instance {instance}: {e}");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        }));
    }

    let finals = |t: &BTreeMap<String, u64>| -> u64 {
        t.iter()
            .filter(|(k, _)| {
                k.as_str() == "Sent"
                    || k.as_str() == "BouncedPermanent"
                    || k.as_str() == "Suppressed"
                    || k.starts_with("DeadLettered_")
                    || k.as_str() == "DuplicatesSkipped"
            })
            .map(|(_, v)| *v)
            .sum()
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut last_line = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let snapshot = totals.lock().map(|t| t.clone()).unwrap_or_default();
        let done = finals(&snapshot);
        if last_line.elapsed() >= Duration::from_secs(2) || done >= jobs.len() as u64 {
            last_line = Instant::now();
            let retried: u64 = snapshot
                .iter()
                .filter(|(k, _)| k.starts_with("Retried"))
                .map(|(_, v)| v)
                .sum();
            println!(
                "  {:>5.1} s  finished {done:>5}/{}  sent {:>5}  retries {retried:>4}  dead letters {:>4}",
                started.elapsed().as_secs_f64(),
                jobs.len(),
                snapshot.get("Sent").copied().unwrap_or(0),
                snapshot
                    .iter()
                    .filter(|(k, _)| k.starts_with("DeadLettered_"))
                    .map(|(_, v)| v)
                    .sum::<u64>(),
            );
        }
        if done >= jobs.len() as u64 || Instant::now() > deadline {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = task.await;
    }
    let totals = totals.lock().map(|t| t.clone()).unwrap_or_default();
    // Dead letters, read back from the index (no draining of the queue).
    let index = courier::aws::DynamoDbLetterIndex::new(
        aws_sdk_dynamodb::Client::new(&sdk),
        &stack.letter_index_table,
    );
    let letters: Vec<DeadLetter> =
        courier::workbench::select(&index, &courier::letters::LetterFilter::default())
            .await
            .map_err(|e| DemoError::Archive(e.to_string()))?
            .into_iter()
            .map(|l| l.record)
            .collect();
    // The archiver's scheduled run, with the archive ages of the demo (zero: archive everything).
    let mut ages = courier::letters::ArchiveAges::default();
    for age in ages.0.values_mut() {
        *age = Duration::ZERO;
    }
    let settings = courier_archiver::wiring::Settings {
        dead_letter_queue_url: stack.dead_letter_queue_url.clone(),
        redrive_queue_url: stack.redrive_dlq_url.clone(),
        letter_index_table: stack.letter_index_table.clone(),
        archive_bucket: stack.archive_bucket.clone(),
        ages,
    };
    let archiver = courier_archiver::wiring::wire(&courier::aws::Clients::new(&sdk), &settings);
    let archived = archiver
        .run("demo", chrono::Utc::now() + chrono::Duration::seconds(120))
        .await
        .map_err(|e| DemoError::Archive(e.to_string()))?;
    report(&totals, &letters, &archived, jobs.len(), started.elapsed());
    Ok(if finals(&totals) >= jobs.len() as u64 {
        0
    } else {
        1
    })
}

fn report(
    totals: &BTreeMap<String, u64>,
    letters: &[DeadLetter],
    archived: &courier_archiver::ArchiveReport,
    jobs: usize,
    took: Duration,
) {
    println!("\nreport: {jobs} jobs in {:.1} s", took.as_secs_f64());
    let get = |k: &str| totals.get(k).copied().unwrap_or(0);
    println!("  sent to provider            {:>6}", get("Sent"));
    println!(
        "  bounced permanently         {:>6}  (recipient suppressed)",
        get("BouncedPermanent")
    );
    println!("  suppressed before sending   {:>6}", get("Suppressed"));
    println!(
        "  duplicates acknowledged     {:>6}",
        get("DuplicatesSkipped")
    );
    println!("  retried, by class:");
    for (k, v) in totals.iter().filter(|(k, _)| k.starts_with("Retried_")) {
        println!("    {:<26}{v:>6}", k.trim_start_matches("Retried_"));
    }
    let mut by_category: BTreeMap<&str, usize> = BTreeMap::new();
    for l in letters {
        *by_category.entry(l.category.as_str()).or_default() += 1;
    }
    println!("  dead-lettered, by category (read back from the dead-letter index):");
    for (k, v) in &by_category {
        println!("    {k:<26}{v:>6}");
    }
    println!(
        "  archived to S3              {:>6}  in {} objects, e.g. {}",
        archived.archived,
        archived.objects.len(),
        archived.objects.first().map_or("-", String::as_str)
    );
    if let Some(sample) = letters.iter().find(|l| l.history.len() > 1) {
        println!(
            "\na dead letter as an operator sees it:\n{}",
            serde_json::to_string_pretty(sample).unwrap_or_default()
        );
    }
}
