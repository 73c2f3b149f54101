//! One chaos run: provision, start the proxies and the driver processes, enqueue the jobs,
//! follow the plan (kills, faults, Postfix restarts), wait until every job settled, audit.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::{QueueAttributeName, SendMessageBatchRequestEntry};
use courier_devkit::provision::{Provisioned, QueueSettings, provision};

use crate::audit::{self, Evidence, LetterSeen, StatusSeen};
use crate::dynamodb_local::DynamoDbLocal;
use crate::mix::{self, Job};
use crate::postfix::Postfix;
use crate::proxy::{Fault, Proxy};
use crate::schedule::{Action, Plan, PlanSettings, Rng, Target};

/// Settings of a run (the command-line flags).
#[derive(Debug, Clone)]
pub struct Settings {
    pub jobs: usize,
    pub kills: usize,
    pub seed: u64,
    /// Length of the chaos phase (jobs are enqueued over its first 60 %).
    pub duration: Duration,
    /// How long to wait for every job to settle after the chaos phase.
    pub settle_deadline: Duration,
    pub drivers: usize,
    pub instances: usize,
    pub postfix_restarts: usize,
    pub aws_outage: Duration,
    pub smtp_resets: bool,
    pub driver_bin: PathBuf,
    pub work_dir: PathBuf,
}

/// Why a run could not be carried out (as opposed to a run that found violations).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0} is not set: run through `make chaos` (scripts/with-harness.sh moto -- ...)")]
    Env(&'static str),
    #[error("{0}")]
    Store(#[from] courier_core::ports::StoreError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("postfix restart: {0}")]
    Postfix(#[from] crate::postfix::RestartError),
    #[error("{0}")]
    Msg(String),
    #[error("the SES emulator's evidence: {0}")]
    Moto(#[from] courier_devkit::moto::MotoStateError),
}

fn env(name: &'static str) -> Result<String, RunError> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .ok_or(RunError::Env(name))
}

fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_owned()
}

/// The driver processes (`courier-dev drive`), restartable.
struct Drivers {
    bin: PathBuf,
    envs: Vec<(String, String)>,
    args: Vec<String>,
    logs: PathBuf,
    children: Vec<Option<tokio::process::Child>>,
    started: usize,
    crashed: usize,
}

impl Drivers {
    fn spawn(&mut self, i: usize) -> Result<(), RunError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.logs.join(format!("driver-{i}.log")))?;
        let child = tokio::process::Command::new(&self.bin)
            .arg("drive")
            .args(&self.args)
            .args(["--name", &format!("driver-{i}")])
            .envs(self.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env_remove("COURIER_RETRY_POLICY_FILE")
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.children[i] = Some(child);
        self.started += 1;
        Ok(())
    }

    /// SIGKILL driver `i` and wait for it.
    async fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.children[i].take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }

    /// Restarts drivers that exited on their own.
    fn revive(&mut self) -> Result<(), RunError> {
        for i in 0..self.children.len() {
            let exited = match self.children[i].as_mut() {
                Some(child) => child.try_wait().ok().flatten().is_some(),
                None => false,
            };
            if exited {
                self.crashed += 1;
                eprintln!("chaos: driver {i} exited on its own; restarting it");
                self.spawn(i)?;
            }
        }
        Ok(())
    }
}

async fn queue_depth(sqs: &aws_sdk_sqs::Client, url: &str) -> Option<(i64, i64, i64)> {
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .ok()?;
    let attrs = out.attributes?;
    let get = |k: QueueAttributeName| -> i64 {
        attrs
            .get(&k)
            .and_then(|v| v.parse().ok())
            .unwrap_or_default()
    };
    Some((
        get(QueueAttributeName::ApproximateNumberOfMessages),
        get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        get(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
    ))
}

async fn enqueue(
    sqs: aws_sdk_sqs::Client,
    url: String,
    jobs: Arc<Vec<Job>>,
    window: Duration,
    done: Arc<AtomicUsize>,
) {
    let started = Instant::now();
    let chunks: Vec<&[Job]> = jobs.chunks(10).collect();
    let n = chunks.len().max(1);
    for (i, chunk) in chunks.iter().enumerate() {
        let due = window.mul_f64(i as f64 / n as f64);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        let entries: Vec<SendMessageBatchRequestEntry> = chunk
            .iter()
            .enumerate()
            .filter_map(|(k, j)| {
                SendMessageBatchRequestEntry::builder()
                    .id(k.to_string())
                    .message_body(&j.body)
                    .build()
                    .ok()
            })
            .collect();
        // The producer is not under test: it talks to the emulator directly and retries.
        loop {
            match sqs
                .send_message_batch()
                .queue_url(&url)
                .set_entries(Some(entries.clone()))
                .send()
                .await
            {
                Ok(out) if out.failed.is_empty() => break,
                Ok(out) => eprintln!("chaos: enqueue: {} entries failed; again", out.failed.len()),
                Err(e) => eprintln!("chaos: enqueue: {e}; again"),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        done.fetch_add(chunk.len(), Ordering::Relaxed);
    }
}

fn unknown_in(value: &AttributeValue) -> bool {
    match value {
        AttributeValue::M(m) => {
            m.get("status")
                .and_then(|v| v.as_s().ok())
                .is_some_and(|s| s == "unknown")
                || m.values().any(unknown_in)
        }
        AttributeValue::L(l) => l.iter().any(unknown_in),
        AttributeValue::S(s) => serde_json::from_str::<serde_json::Value>(s).is_ok_and(|v| {
            v.get("status").and_then(|s| s.as_str()) == Some("unknown")
                || v.as_array().is_some_and(|a| {
                    a.iter()
                        .any(|e| e.get("status").and_then(|s| s.as_str()) == Some("unknown"))
                })
        }),
        _ => false,
    }
}

async fn scan(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<Vec<HashMap<String, AttributeValue>>, RunError> {
    let mut items = Vec::new();
    let mut start: Option<HashMap<String, AttributeValue>> = None;
    loop {
        let out = ddb
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .map_err(courier_adapters::aws::store_error("scan"))?;
        items.extend(out.items.unwrap_or_default());
        match out.last_evaluated_key {
            Some(k) if !k.is_empty() => start = Some(k),
            _ => return Ok(items),
        }
    }
}

async fn collect(
    sdk: &aws_config::SdkConfig,
    stack: &Provisioned,
    capture_dir: &Path,
    journal: &Path,
) -> Result<Evidence, RunError> {
    let ddb = aws_sdk_dynamodb::Client::new(sdk);
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let mut ev = Evidence::default();
    let s = |item: &HashMap<String, AttributeValue>, k: &str| {
        item.get(k).and_then(|v| v.as_s().ok()).cloned()
    };
    for item in scan(&ddb, &stack.status_table).await? {
        if let (Some(id), Some(status)) = (s(&item, "message_id"), s(&item, "status")) {
            let unknown_in_history = item.get("history").is_some_and(unknown_in);
            ev.statuses.insert(
                id,
                StatusSeen {
                    status,
                    unknown_in_history,
                },
            );
        }
    }
    for item in scan(&ddb, &stack.letter_index_table).await? {
        let Some(letter_id) = s(&item, "letter_id") else {
            continue;
        };
        let record: serde_json::Value = s(&item, "record")
            .and_then(|r| serde_json::from_str(&r).ok())
            .unwrap_or_default();
        let text = |k: &str| {
            record
                .get(k)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned()
        };
        ev.letters.push(LetterSeen {
            letter_id,
            fingerprint: text("fingerprint"),
            category: text("category"),
            has_payload: record.get("payload").is_some_and(|p| !p.is_null())
                || record.get("payload_base64").is_some_and(|p| !p.is_null()),
        });
    }
    // The redrive DLQ: read (and leave) every raw copy.
    let mut empty = 0;
    while empty < 2 {
        let out = sqs
            .receive_message()
            .queue_url(&stack.redrive_dlq_url)
            .max_number_of_messages(10)
            .visibility_timeout(600)
            .wait_time_seconds(1)
            .send()
            .await
            .map_err(courier_adapters::aws::store_error("receive redrive"))?;
        let batch = out.messages.unwrap_or_default();
        if batch.is_empty() {
            empty += 1;
        }
        for m in batch {
            let body = m.body.unwrap_or_default();
            let print = courier_core::envelope::job_fingerprint(&body);
            ev.redriven.push(print);
        }
    }
    // Maildir: one file per accepted recipient, and more when Postfix itself delivers a
    // message again (a restart between its delivery and its queue manager's record of it):
    // counted once per acceptance, the Postfix queue id Courier's submission got.
    let files = std::fs::read_dir(capture_dir)?
        .flatten()
        .filter_map(|entry| {
            let text = std::fs::read_to_string(entry.path()).ok()?;
            Some((entry.file_name().to_string_lossy().into_owned(), text))
        });
    (ev.deliveries, ev.maildir_files) = audit::deliveries(files);
    if let Ok(text) = std::fs::read_to_string(journal) {
        ev.journal_ambiguous = text
            .lines()
            .filter_map(|l| l.strip_prefix("ambiguous "))
            .map(|id| id.trim().to_owned())
            .collect::<HashSet<_>>();
    }
    Ok(ev)
}

/// Runs the suite; returns the process exit code (0: no violation).
pub async fn run(settings: Settings) -> Result<i32, RunError> {
    let started = Instant::now();
    let endpoint = env("AWS_ENDPOINT_URL")?;
    // SES v2 is moto's on both harnesses; what it accepted is read from moto's own state.
    let ses_endpoint = std::env::var("AWS_ENDPOINT_URL_SESV2").unwrap_or_else(|_| endpoint.clone());
    let moto_url = env("COURIER_MOTO_URL")?;
    let smtp_host = env("COURIER_SMTP_HOST")?;
    let smtp_port = env("COURIER_SMTP_PORT")?;
    let capture_dir = PathBuf::from(env("COURIER_SMTP_CAPTURE_DIR")?);
    let mut postfix = if settings.postfix_restarts > 0 {
        Some(Postfix::from_env().ok_or(RunError::Env(
            "COURIER_HARNESS_ADOPT (with COURIER_HARNESS_DIR; needed to restart Postfix)",
        ))?)
    } else {
        Postfix::from_env()
    };
    std::fs::create_dir_all(&settings.work_dir)?;
    let journal = settings.work_dir.join("journal");
    let run_id = format!("{}", std::process::id());
    println!(
        "chaos: seed {} | {} jobs | {} kills | {} drivers x {} instances | chaos phase {} s | work dir {}",
        settings.seed,
        settings.jobs,
        settings.kills,
        settings.drivers,
        settings.instances,
        settings.duration.as_secs(),
        settings.work_dir.display()
    );

    // DynamoDB Local on disk (`--dynamodb-local`): the DynamoDB outage is a real restart.
    let mut ddb = DynamoDbLocal::from_env(&settings.work_dir);
    if let Some(d) = ddb.as_mut() {
        let took = tokio::task::block_in_place(|| d.start())?;
        println!(
            "chaos: DynamoDB Local on {} (tables in {}) ready in {:.1} s",
            d.url(),
            d.db_path.display(),
            took.as_secs_f64()
        );
    }
    let sdk = courier_adapters::aws::sdk_config().await;
    let stack = provision(
        &sdk,
        &format!("chaos-{run_id}"),
        "arn:aws:iam::123456789012:role/courier-chaos",
        QueueSettings {
            max_receive_count: 10,
            visibility_timeout: Duration::from_secs(25),
        },
    )
    .await?;
    if ddb.is_some() {
        // Provisioning (the template, through CloudFormation) made the tables on the harness's
        // emulator; the same tables, empty, on DynamoDB Local.
        copy_tables(
            &sdk,
            &endpoint,
            &[
                &stack.status_table,
                &stack.suppression_table,
                &stack.control_table,
                &stack.letter_index_table,
            ],
        )
        .await?;
    }
    // The sender's domain, verified on the SES emulator (moto refuses unverified senders).
    aws_sdk_sesv2::Client::new(&sdk)
        .create_email_identity()
        .email_identity(mix::SENDER_DOMAIN)
        .send()
        .await
        .map_err(|e| {
            RunError::Msg(format!(
                "create the SES identity {}: {e:?}",
                mix::SENDER_DOMAIN
            ))
        })?;
    let aws_proxy = Proxy::start(host_port(&endpoint), settings.seed ^ 0xa5).await?;
    let ses_proxy = Proxy::start(host_port(&ses_endpoint), settings.seed ^ 0x5e).await?;
    let smtp_proxy = Proxy::start(format!("{smtp_host}:{smtp_port}"), settings.seed ^ 0x5a).await?;
    let ddb_proxy = match &ddb {
        Some(d) => Some(Proxy::start(format!("127.0.0.1:{}", d.port), settings.seed ^ 0xdd).await?),
        None => None,
    };
    println!(
        "chaos: provisioned chaos-{run_id} in {:.1} s; AWS proxy 127.0.0.1:{} -> {}, SMTP proxy 127.0.0.1:{} -> {smtp_host}:{smtp_port}",
        started.elapsed().as_secs_f64(),
        aws_proxy.port,
        host_port(&endpoint),
        smtp_proxy.port
    );

    let plan = Plan::new(&PlanSettings {
        seed: settings.seed,
        duration: settings.duration,
        kills: settings.kills,
        drivers: settings.drivers,
        postfix_restarts: if postfix.is_some() {
            settings.postfix_restarts
        } else {
            0
        },
        aws_outage: settings.aws_outage,
        smtp_resets: settings.smtp_resets,
    });
    println!(
        "chaos: plan: {} kills, {} Postfix restarts, AWS proxy: {} latency / {} reset / {} blackhole episodes and 1 outage of {} s, SMTP proxy: {} episodes",
        plan.kills(),
        plan.steps
            .iter()
            .filter(|(_, a)| *a == Action::RestartPostfix)
            .count(),
        plan.count(Target::Aws, |f| matches!(f, Fault::Latency(_))),
        plan.count(Target::Aws, |f| matches!(f, Fault::Reset(_))),
        plan.count(Target::Aws, |f| *f == Fault::Blackhole),
        settings.aws_outage.as_secs(),
        plan.count(Target::Smtp, |f| *f != Fault::Pass),
    );

    let jobs: Arc<Vec<Job>> = Arc::new((0..settings.jobs).map(|n| mix::job(&run_id, n)).collect());
    let aws_url = format!("http://127.0.0.1:{}", aws_proxy.port);
    let ses_url = format!("http://127.0.0.1:{}", ses_proxy.port);
    let envs: Vec<(String, String)> = vec![
        ("AWS_ENDPOINT_URL", aws_url.as_str()),
        ("COURIER_QUEUE_URL", stack.queue_url.as_str()),
        ("COURIER_QUEUE_ARN", stack.queue_arn.as_str()),
        ("COURIER_RETRY_QUEUE_URL", stack.retry_queue_url.as_str()),
        (
            "COURIER_DEAD_LETTER_QUEUE_URL",
            stack.dead_letter_queue_url.as_str(),
        ),
        (
            "COURIER_LETTER_INDEX_TABLE",
            stack.letter_index_table.as_str(),
        ),
        ("COURIER_STATUS_TABLE", stack.status_table.as_str()),
        (
            "COURIER_SUPPRESSION_TABLE",
            stack.suppression_table.as_str(),
        ),
        ("COURIER_CONTROL_TABLE", stack.control_table.as_str()),
        ("COURIER_TEMPLATE_BUCKET", stack.template_bucket.as_str()),
        ("COURIER_PAYLOAD_BUCKET", stack.payload_bucket.as_str()),
        (
            "COURIER_DELAY_STATE_MACHINE_ARN",
            stack.delay_state_machine_arn.as_str(),
        ),
        (
            "COURIER_ENVELOPE_KEY_SECRET",
            stack.envelope_key_secret.as_str(),
        ),
        ("COURIER_OUTCOME_BUS", stack.outcome_bus.as_str()),
        ("AWS_ENDPOINT_URL_SESV2", ses_url.as_str()),
        // SMTP first, SES for the jobs that ask for it and for failover while SMTP's circuit is
        // open. moto has no GetAccount to read a quota from: SES is not paced.
        ("COURIER_PROVIDERS", "smtp,ses"),
        ("COURIER_SEND_RATE_SES", "off"),
        ("COURIER_SMTP_HOST", "127.0.0.1"),
        ("COURIER_SMTP_TLS", "none"),
        ("COURIER_SMTP_TIMEOUT", "10s"),
        ("COURIER_AMBIGUITY_GRACE", "10s"),
        ("COURIER_RETRY_POLICY_JSON", mix::POLICY),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .chain(ddb_proxy.as_ref().map(|p| {
        (
            "AWS_ENDPOINT_URL_DYNAMODB".to_owned(),
            format!("http://127.0.0.1:{}", p.port),
        )
    }))
    .chain([
        ("COURIER_SMTP_PORT".to_owned(), smtp_proxy.port.to_string()),
        ("COURIER_CONCURRENCY".to_owned(), "10".to_owned()),
    ])
    .collect();
    let mut drivers = Drivers {
        bin: settings.driver_bin.clone(),
        envs,
        args: vec![
            "--instances".into(),
            settings.instances.to_string(),
            "--visibility-timeout".into(),
            "25".into(),
            "--function-timeout".into(),
            "20".into(),
            "--log".into(),
            "--journal".into(),
            journal.display().to_string(),
        ],
        logs: settings.work_dir.clone(),
        children: (0..settings.drivers.max(1)).map(|_| None).collect(),
        started: 0,
        crashed: 0,
    };
    for i in 0..drivers.children.len() {
        drivers.spawn(i)?;
    }

    let sqs = aws_sdk_sqs::Client::new(&sdk);
    // SES's events for what moto's SES accepts, and the events function applying them.
    let ses_side = crate::ses_side::start(&sdk, &stack, moto_url.clone(), mix::POLICY, 2).await?;
    let enqueued = Arc::new(AtomicUsize::new(0));
    let producer = tokio::spawn(enqueue(
        sqs.clone(),
        stack.queue_url.clone(),
        Arc::clone(&jobs),
        settings.duration.mul_f64(0.6),
        Arc::clone(&enqueued),
    ));

    // The chaos phase: follow the plan.
    let phase = Instant::now();
    let mut rng = Rng::new(settings.seed ^ 0xd1e);
    let mut kills = 0usize;
    let mut postfix_restarts = 0usize;
    let mut postfix_down = Duration::ZERO;
    let mut ddb_stopped = false;
    let mut ddb_restarts = 0usize;
    let mut ddb_down = Duration::ZERO;
    let mut ddb_down_since: Option<Instant> = None;
    let mut last_report = Instant::now();
    let report = |phase: &Instant,
                  kills: usize,
                  restarts: usize,
                  depth: Option<(i64, i64, i64)>| {
        let (v, nv, d) = depth.unwrap_or((-1, -1, -1));
        println!(
            "chaos: {:>6.1} s  enqueued {:>6}/{}  send queue visible {v} in-flight {nv} delayed {d}  kills {kills}  postfix restarts {restarts}  AWS {} | SMTP {}  resets {}/{}",
            phase.elapsed().as_secs_f64(),
            enqueued.load(Ordering::Relaxed),
            settings.jobs,
            aws_proxy.fault().label(),
            smtp_proxy.fault().label(),
            aws_proxy.stats.resets.load(Ordering::Relaxed),
            smtp_proxy.stats.resets.load(Ordering::Relaxed),
        );
    };
    for (at, action) in &plan.steps {
        while let Some(wait) = at.checked_sub(phase.elapsed()) {
            tokio::time::sleep(wait.min(Duration::from_secs(1))).await;
            drivers.revive()?;
            if last_report.elapsed() >= Duration::from_secs(10) {
                last_report = Instant::now();
                report(
                    &phase,
                    kills,
                    postfix_restarts,
                    queue_depth(&sqs, &stack.queue_url).await,
                );
            }
        }
        match action {
            Action::Kill(i) => {
                let i = i % drivers.children.len();
                drivers.kill(i).await;
                kills += 1;
                // Back after a moment, like a new Lambda instance.
                tokio::time::sleep(Duration::from_millis((rng.unit() * 1500.0) as u64)).await;
                drivers.spawn(i)?;
            }
            Action::SetFault(Target::Aws, fault) => {
                aws_proxy.set(*fault);
                ses_proxy.set(*fault);
                if let Some(p) = &ddb_proxy {
                    p.set(*fault);
                }
                if let Some(d) = ddb.as_mut() {
                    if *fault == Fault::Down && !ddb_stopped {
                        let at = Instant::now();
                        tokio::task::block_in_place(|| d.stop());
                        ddb_stopped = true;
                        ddb_down_since = Some(at);
                        println!(
                            "chaos: {:>6.1} s  DynamoDB Local stopped",
                            phase.elapsed().as_secs_f64()
                        );
                    } else if *fault != Fault::Down && ddb_stopped {
                        tokio::task::block_in_place(|| d.start())?;
                        ddb_stopped = false;
                        ddb_restarts += 1;
                        if let Some(since) = ddb_down_since.take() {
                            ddb_down += since.elapsed();
                        }
                        println!(
                            "chaos: {:>6.1} s  DynamoDB Local started again on its files",
                            phase.elapsed().as_secs_f64()
                        );
                    }
                }
            }
            Action::SetFault(Target::Smtp, fault) => smtp_proxy.set(*fault),
            Action::RestartPostfix => {
                if let Some(p) = postfix.as_mut() {
                    let down = tokio::task::block_in_place(|| p.restart())?;
                    postfix_restarts += 1;
                    postfix_down += down;
                    println!(
                        "chaos: {:>6.1} s  Postfix restarted (SMTP down {:.1} s)",
                        phase.elapsed().as_secs_f64(),
                        down.as_secs_f64()
                    );
                }
            }
        }
    }
    aws_proxy.set(Fault::Pass);
    ses_proxy.set(Fault::Pass);
    smtp_proxy.set(Fault::Pass);
    if let Some(p) = &ddb_proxy {
        p.set(Fault::Pass);
    }
    if let Some(d) = ddb.as_mut()
        && ddb_stopped
    {
        tokio::task::block_in_place(|| d.start())?;
        ddb_restarts += 1;
    }
    let _ = producer.await;
    println!(
        "chaos: chaos phase over after {:.1} s ({kills} kills, {postfix_restarts} Postfix restarts); waiting for every job to settle",
        phase.elapsed().as_secs_f64()
    );

    // Settle: the send, retry and events queues empty (visible, in flight, delayed) three checks
    // in a row.
    let settle = Instant::now();
    let mut calm = 0;
    let mut settled = false;
    while settle.elapsed() < settings.settle_deadline {
        tokio::time::sleep(Duration::from_secs(2)).await;
        drivers.revive()?;
        let depth = queue_depth(&sqs, &stack.queue_url).await;
        // The retry queue (every copy that waits) and the events queue too: a transient
        // bounce's resend goes to the retry queue.
        let retry_depth = queue_depth(&sqs, &stack.retry_queue_url).await;
        let events_depth = queue_depth(&sqs, &stack.events_queue_url).await;
        if depth == Some((0, 0, 0))
            && retry_depth == Some((0, 0, 0))
            && events_depth == Some((0, 0, 0))
        {
            calm += 1;
            if calm >= 3 {
                settled = true;
                break;
            }
        } else {
            calm = 0;
        }
        if last_report.elapsed() >= Duration::from_secs(10) {
            last_report = Instant::now();
            report(&phase, kills, postfix_restarts, depth);
        }
    }
    let settle_took = settle.elapsed();
    for i in 0..drivers.children.len() {
        drivers.kill(i).await;
    }
    let ses_totals = ses_side.stop().await;
    // Postfix delivers what it accepted.
    if let Some(p) = &postfix {
        let wait = Instant::now();
        while p.queued() > 0 && wait.elapsed() < Duration::from_secs(120) {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        if p.queued() > 0 {
            eprintln!("chaos: {} files still in Postfix's queue", p.queued());
        }
    } else {
        tokio::time::sleep(Duration::from_secs(5)).await;
    }

    // The sweeper, then the evidence, then the archiver (the redrive DLQ's raw copies were
    // read and hidden by `collect`; Courier's letters are archived and read back from S3).
    let swept = crate::homes::sweep(&sdk, &stack).await?;
    let mut ev = collect(&sdk, &stack, &capture_dir, &journal).await?;
    ev.ses_accepted =
        courier_devkit::moto::ses_messages_by_id(&courier_devkit::moto::state(&moto_url).await?)?;
    let archived = crate::homes::archive(&sdk, &stack).await?;
    ev.archive = Some(crate::homes::read_archive(&sdk, &stack).await?);
    let verdict = audit::audit(&jobs, &ev);
    let total = started.elapsed();
    println!(
        "\nchaos suite: {} jobs, seed {}, {:.0} s in all (chaos phase {:.0} s, settling {:.0} s{})",
        settings.jobs,
        settings.seed,
        total.as_secs_f64(),
        settings.duration.as_secs_f64(),
        settle_took.as_secs_f64(),
        if settled {
            ""
        } else {
            ", DEADLINE PASSED before the queue emptied"
        }
    );
    println!(
        "faults: {kills} SIGKILLs of the driver ({} driver starts; {} restarts after a driver exited itself, e.g. a batch past the function timeout), {postfix_restarts} Postfix restarts (SMTP down {:.1} s in all), AWS emulator unreachable {} s (proxy outage)",
        drivers.started,
        drivers.crashed,
        postfix_down.as_secs_f64(),
        settings.aws_outage.as_secs()
    );
    if ddb.is_some() {
        println!(
            "DynamoDB Local (tables on disk) really restarted {ddb_restarts} times (down {:.1} s in all; SQS and S3 refused by the proxy meanwhile)",
            ddb_down.as_secs_f64()
        );
    }
    let proxies = [
        ("AWS", Some(&aws_proxy)),
        ("SES", Some(&ses_proxy)),
        ("SMTP", Some(&smtp_proxy)),
        ("DynamoDB", ddb_proxy.as_ref()),
    ];
    for (name, p) in proxies.iter().filter_map(|(n, p)| p.map(|p| (n, p))) {
        println!(
            "{name} proxy: {} connections, {} chunks, {} reset, {} blackholed, {} refused",
            p.stats.connections.load(Ordering::Relaxed),
            p.stats.chunks.load(Ordering::Relaxed),
            p.stats.resets.load(Ordering::Relaxed),
            p.stats.blackholed.load(Ordering::Relaxed),
            p.stats.refused.load(Ordering::Relaxed),
        );
    }
    println!(
        "evidence: {} status records, {} dead letters, {} raw copies in the redrive DLQ, {} Maildir files of jobs ({} SMTP acceptances: files of one Postfix queue id, delivered again by Postfix itself after a restart, count once), {} messages the SES emulator accepted, {} jobs journaled ambiguous",
        ev.statuses.len(),
        ev.letters.len(),
        ev.redriven.len(),
        ev.maildir_files,
        ev.deliveries.values().sum::<usize>(),
        ev.ses_accepted.values().sum::<usize>(),
        ev.journal_ambiguous.len()
    );
    println!(
        "SES side: {} messages accepted by the SES emulator, {} events published, {} batches through the events function ({} records left for redelivery), {} rounds that failed and were tried again",
        ses_totals.accepted.load(Ordering::Relaxed),
        ses_totals.published.load(Ordering::Relaxed),
        ses_totals.batches.load(Ordering::Relaxed),
        ses_totals.failed_records.load(Ordering::Relaxed),
        ses_totals.errors.load(Ordering::Relaxed),
    );
    println!(
        "sweeper: {} stuck processing jobs marked unknown, {} sends without an outcome; archiver: {} letters archived in {} objects, {} read back from S3",
        swept.stuck_processing,
        swept.no_outcome,
        archived.archived,
        archived.objects.len(),
        ev.archive.as_ref().map_or(0, HashMap::len)
    );
    println!("\n{}", audit::table(&verdict));
    let mut failed = !verdict.violations.is_empty() || !settled;
    if kills < settings.kills {
        eprintln!("chaos: only {kills} of {} kills happened", settings.kills);
        failed = true;
    }
    for (id, why) in verdict.violations.iter().take(30) {
        println!("VIOLATION {id}: {why}");
    }
    if verdict.violations.len() > 30 {
        println!("... and {} more", verdict.violations.len() - 30);
    }
    let report_path = settings.work_dir.join("violations.txt");
    let mut text: String = verdict
        .violations
        .iter()
        .map(|(id, why)| format!("{id}: {why}\n"))
        .collect();
    text.push_str(&explain(&sdk, &stack, &settings.work_dir, &verdict.violations).await);
    std::fs::write(&report_path, text)?;
    println!(
        "{}: {} violations (list in {}; driver logs and journal in {})",
        if failed { "FAIL" } else { "PASS" },
        verdict.violations.len(),
        report_path.display(),
        settings.work_dir.display()
    );
    Ok(i32::from(failed))
}

/// Details of the first violations for the report file: the raw status item and what the
/// drivers logged about the job.
async fn explain(
    sdk: &aws_config::SdkConfig,
    stack: &Provisioned,
    work_dir: &Path,
    violations: &[(String, String)],
) -> String {
    let ddb = aws_sdk_dynamodb::Client::new(sdk);
    let mut logs = String::new();
    if let Ok(entries) = std::fs::read_dir(work_dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with("driver-") {
                logs.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
    }
    let mut out = String::new();
    for (id, why) in violations.iter().take(40) {
        out.push_str(&format!("\n==== {id}: {why}\n"));
        let item = ddb
            .get_item()
            .table_name(&stack.status_table)
            .key("message_id", AttributeValue::S(id.clone()))
            .consistent_read(true)
            .send()
            .await
            .ok()
            .and_then(|o| o.item);
        out.push_str(&format!("status item: {item:?}\n"));
        for line in logs.lines().filter(|l| l.contains(id.as_str())).take(60) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Creates each table (keys, attributes, GSIs; on-demand) as it is on `endpoint` on the DynamoDB
/// endpoint of `sdk` (DynamoDB Local).
async fn copy_tables(
    sdk: &aws_config::SdkConfig,
    endpoint: &str,
    tables: &[&String],
) -> Result<(), RunError> {
    use aws_sdk_dynamodb::types::{BillingMode, GlobalSecondaryIndex};
    let source_conf = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(courier_adapters::aws::https_client())
        .endpoint_url(endpoint)
        .load()
        .await;
    let source = aws_sdk_dynamodb::Client::new(&source_conf);
    let target = aws_sdk_dynamodb::Client::new(sdk);
    for table in tables {
        let described = source
            .describe_table()
            .table_name(table.as_str())
            .send()
            .await
            .map_err(courier_adapters::aws::store_error("describe table"))?
            .table
            .ok_or_else(|| RunError::Msg(format!("no description of {table}")))?;
        let mut create = target
            .create_table()
            .table_name(table.as_str())
            .billing_mode(BillingMode::PayPerRequest)
            .set_key_schema(described.key_schema)
            .set_attribute_definitions(described.attribute_definitions);
        for gsi in described.global_secondary_indexes.unwrap_or_default() {
            let index = GlobalSecondaryIndex::builder()
                .set_index_name(gsi.index_name)
                .set_key_schema(gsi.key_schema)
                .set_projection(gsi.projection)
                .build()
                .map_err(|e| RunError::Msg(format!("index of {table}: {e}")))?;
            create = create.global_secondary_indexes(index);
        }
        create
            .send()
            .await
            .map_err(courier_adapters::aws::store_error(
                "create table on DynamoDB Local",
            ))?;
    }
    Ok(())
}
