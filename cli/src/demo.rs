//! `courierctl demo`: runs the send pipeline over a demo campaign against the real SMTP server
//! the harness started (Postfix with scripted recipients). AWS-side state (status table, queues,
//! suppression list) is held in memory until the AWS adapters land (issue 4), and retry waits
//! run on a simulated clock so a 6-hour soft-bounce schedule takes seconds.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use courier::breaker::BreakerConfig;
use courier::memory::*;
use courier::policy::RetryPolicy;
use courier::ports::{Clock, Template};
use courier::random::SeededRandom;
use courier::smtp::{SmtpMailer, SmtpOptions, SmtpSecurity};
use courier::status::Status;
use courier_send::{Pipeline, RecordIn, SendConfig, breakers::Breakers};

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DemoError {
    #[error("{0} is not set: run the demo through `make demo` (it starts the SMTP server)")]
    Env(&'static str),
    #[error(transparent)]
    Smtp(#[from] courier::smtp::SmtpSetupError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[from] std::io::Error),
}

fn env(name: &'static str) -> Result<String, DemoError> {
    std::env::var(name).map_err(|_| DemoError::Env(name))
}

fn job(i: usize, to: &str, extra: serde_json::Value) -> String {
    let mut job = serde_json::json!({
        "version": 1,
        "message_id": format!("demo-{i:04}"),
        "campaign_id": "demo-campaign",
        "priority": if i.is_multiple_of(3) { "transactional" } else { "bulk" },
        "from": "Courier Demo <demo@courier.test>",
        "to": [to],
        "template": {"id": "welcome", "variables": {"name": format!("Reader {i}")}}
    });
    if let (Some(obj), Some(extra)) = (job.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            obj.insert(k.clone(), v.clone());
        }
    }
    job.to_string()
}

/// The campaign: mostly good addresses, plus every scripted failure and some bad input.
fn campaign(size: usize) -> Vec<String> {
    let scripted = [
        "unknown",
        "full",
        "insufficient",
        "greylist",
        "policy",
        "busy",
    ];
    let mut jobs = Vec::with_capacity(size);
    for i in 0..size {
        let body = match i % 50 {
            n @ 0..=5 => job(
                i,
                &format!("{}@courier.test", scripted[n]),
                serde_json::json!({}),
            ),
            6 => job(
                i,
                &format!("reader{i}@courier.test"),
                serde_json::json!({"template": {"id": "welcome", "variables": {}}}),
            ),
            7 => format!("{{\"version\": 1, \"message_id\": \"broken-{i}\""),
            8 => job(i, "not-an-address", serde_json::json!({})),
            9 => job(
                i,
                "poison@courier.test",
                serde_json::json!({"campaign_id": "poisoned"}),
            ),
            _ => job(i, &format!("reader{i}@courier.test"), serde_json::json!({})),
        };
        jobs.push(body);
    }
    jobs
}

pub(crate) fn run(size: usize) -> Result<i32, DemoError> {
    let host = env("COURIER_SMTP_HOST")?;
    let port: u16 = env("COURIER_SMTP_PORT")?
        .parse()
        .map_err(|_| DemoError::Env("COURIER_SMTP_PORT"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    // lettre's connection pool spawns its reaper on the runtime it is built in.
    let _entered = runtime.enter();
    let mailer = Arc::new(SmtpMailer::new(&SmtpOptions {
        host,
        port,
        security: SmtpSecurity::None,
        credentials: None,
        timeout: Duration::from_secs(10),
        pool_size: 4,
    })?);
    let status = Arc::new(MemoryStatusStore::default());
    let scheduler = Arc::new(MemoryScheduler::default());
    let dead = Arc::new(MemoryDeadLetters::default());
    let suppression = Arc::new(MemorySuppressionList::default());
    let poison = Arc::new(MemoryPoisonList::default());
    let templates = Arc::new(MemoryTemplates::default());
    if let Ok(mut t) = templates.templates.lock() {
        t.insert(
            "welcome".into(),
            Template {
                subject: "Welcome, {{ name }}".into(),
                text: Some("Hello {{ name }}, thanks for joining.".into()),
                html: Some("<p>Hello {{ name }}, thanks for joining.</p>".into()),
            },
        );
    }
    let jobs = campaign(size);
    // The operator blocklisted the poisoned payloads' fingerprints earlier.
    if let Ok(mut p) = poison.fingerprints.lock() {
        for body in jobs.iter().filter(|b| b.contains("\"poisoned\"")) {
            p.insert(courier::job::fingerprint(body.as_bytes()));
        }
    }
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let pipeline = Arc::new(Pipeline {
        status: status.clone(),
        mailers: vec![mailer],
        scheduler: scheduler.clone(),
        dead_letters: dead.clone(),
        suppression: suppression.clone(),
        poison,
        templates,
        breakers: Breakers::new(
            Arc::new(MemoryBreakerStore::default()),
            BreakerConfig::default(),
            Duration::from_secs(2),
        ),
        policy: RetryPolicy::default(),
        clock: clock.clone(),
        config: SendConfig::default(),
        rng: std::sync::Mutex::new(SeededRandom::from_entropy()),
    });

    // The local queue: (due time, body), received in batches of 10 like Lambda's event source.
    let start_time = clock.now();
    let mut queue: Vec<(chrono::DateTime<chrono::Utc>, String)> =
        jobs.into_iter().map(|b| (start_time, b)).collect();
    let started = Instant::now();
    let mut batches = 0usize;
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut seq = 0usize;
    println!(
        "courier demo: {} jobs -> SMTP {}:{}",
        queue.len(),
        env("COURIER_SMTP_HOST")?,
        env("COURIER_SMTP_PORT")?
    );
    while !queue.is_empty() {
        queue.sort_by_key(|(due, _)| *due);
        let now = clock.now();
        if queue[0].0 > now {
            let secs = (queue[0].0 - now).num_seconds().max(1);
            clock.advance(secs);
            continue;
        }
        let due = queue.iter().take_while(|(d, _)| *d <= now).count().min(10);
        let batch: Vec<RecordIn> = queue
            .drain(..due)
            .map(|(_, body)| {
                seq += 1;
                RecordIn {
                    sqs_message_id: format!("sqs-{seq}"),
                    body,
                }
            })
            .collect();
        let deadline = now + chrono::Duration::seconds(60);
        let report = runtime.block_on(pipeline.handle_records(batch, deadline, "demo"));
        batches += 1;
        for (k, v) in report.metrics.counts {
            *counts.entry(k).or_default() += v;
        }
        let mut requeued = Vec::new();
        if let Ok(mut q) = scheduler.queued.lock() {
            requeued.append(&mut q);
        }
        if let Ok(mut w) = scheduler.waits.lock() {
            requeued.append(&mut w);
        }
        for r in requeued {
            queue.push((now + chrono::Duration::seconds(r.delay_secs as i64), r.body));
        }
        if batches.is_multiple_of(10) {
            println!(
                "  {batches:>4} batches, {:>4} messages waiting, simulated clock +{}",
                queue.len(),
                humanize((clock.now() - start_time).num_seconds())
            );
        }
    }
    let records = status.records.lock().map(|r| r.clone()).unwrap_or_default();
    let mut by_status: BTreeMap<&str, usize> = BTreeMap::new();
    for rec in records.values() {
        *by_status.entry(rec.status.as_str()).or_default() += 1;
    }
    println!(
        "\nreport after {batches} batches, {:.1} s real time, {} simulated",
        started.elapsed().as_secs_f64(),
        humanize((clock.now() - start_time).num_seconds())
    );
    println!("  outcomes per delivery attempt:");
    for (k, v) in &counts {
        println!("    {k:<36} {v:>6}");
    }
    println!("  final status of jobs:");
    for (k, v) in &by_status {
        println!("    {k:<36} {v:>6}");
    }
    let letters = dead.letters.lock().map(|l| l.clone()).unwrap_or_default();
    let mut by_category: BTreeMap<&str, usize> = BTreeMap::new();
    for l in &letters {
        *by_category.entry(l.category.as_str()).or_default() += 1;
    }
    println!("  dead letters by category:");
    for (k, v) in &by_category {
        println!("    {k:<36} {v:>6}");
    }
    println!(
        "  suppressed addresses: {}",
        suppression.entries.lock().map(|e| e.len()).unwrap_or(0)
    );
    if let Some(sample) = letters.iter().find(|l| l.attempts > 1) {
        println!(
            "  a dead letter, as an operator sees it:\n{}",
            serde_json::to_string_pretty(sample).unwrap_or_default()
        );
    }
    let delivered = by_status
        .get(Status::SentToProvider.as_str())
        .copied()
        .unwrap_or(0);
    Ok(if delivered == 0 { 1 } else { 0 })
}

fn humanize(secs: i64) -> String {
    format!(
        "{}h{:02}m{:02}s",
        secs / 3600,
        (secs % 3600) / 60,
        secs % 60
    )
}
