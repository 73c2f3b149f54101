//! `courier-dev demo`: the local run. Provisions Courier's resources on the emulator the harness
//! started (moto by default), enqueues a demo campaign with a realistic failure mix and drives the
//! three functions through their real handlers:
//! - the send function, through the local event-source driver (several concurrent "instances",
//!   Lambda's batch, visibility-timeout and partial-failure semantics) on the send and retry
//!   queues (the template's two event sources), against
//!   the real SMTP server and SES v2 on the emulator (the demo verifies its sending domain and
//!   creates the configuration set through the SES v2 API first);
//! - the events function, through the same driver on the events queue. Emulators never publish
//!   SES events, so the demo acts as SES's event destination (see `ses`): for every message the
//!   emulator's SES accepted (noted by a wrapper around the send function's SES mailer) it
//!   publishes SES's events, in SNS notification envelopes, on the events queue;
//! - the archiver, once at the end (dead letters to S3);
//! - the unsubscribe function behind a function URL on the loopback: after the campaign, one
//!   reader POSTs the one-click link of a delivered message and the next job of that list to
//!   them is not sent ([`unsubscribe`]);
//!
//! then shows live progress and ends with a report. The exit code is 0 only when every job
//! reached a known end (the send function's final outcomes, and for SES sends the end their
//! events lead to).
//!
//! The campaign, per 100 jobs (`i` is the job's number, `demo-{i:05}` its message id):
//! - SMTP (the harness's Postfix scripts replies by recipient): 3 unknown users (two later ones
//!   hit the suppression list), 2 busy (throttling), 3 greylisted, 2 mailbox full, 2 policy
//!   rejections, 1 rendering failure, 2 malformed, 1 invalid address, 1 poison, 1 duplicate of an
//!   earlier job, and 72 good addresses;
//! - SES (`i % 100` in 30..=39, `"provider": "ses"`), the outcome decided by the recipient's
//!   local part before `+`: `reader{i}@` delivered (Send, Delivery); `bounce+{i}@`
//!   (`i % 100 == 36`) a permanent bounce, the recipient then suppressed by the events function;
//!   `softbounce+{i}@` (37) a transient bounce, sent again by the events function through the
//!   retry queue and then delivered; `delay+{i}@` (38) a delivery delay, then the delivery;
//!   `complaint+{i}@` (`i % 500 == 39`) delivered, then a complaint, the recipient suppressed;
//!   `i % 500 == 35` one message to three recipients, `reader{i}@` delivered, `bounce+{i}@` (Cc)
//!   bounced, `complaint+{i}@` (Bcc) complained: each recipient's outcome is recorded on its own
//!   and the job ends `complained` (see `courier_core::recipients`).
//!
//! Retry waits use a compressed policy ([`DEMO_POLICY`]) so the run takes about a minute; the
//! production defaults wait minutes to hours. The reputation guard keeps its production
//! settings: it needs 500 SES messages in its window before it judges a domain, so a run of
//! 1,000 jobs (100 through SES) never trips it; a run of 5,000 or more does (the demo's bounce
//! rate is far above SES's review level), and the report then shows the pause.
//!
//! With `RUST_LOG` set, the functions' logs (tracing) go to stderr.

pub(crate) mod serve;
mod settle;
mod unsubscribe;
mod workers;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::driver::Driver;
use aws_sdk_sesv2::types::VerificationStatus;
use aws_sdk_sqs::types::QueueAttributeName;
use courier_adapters::aws::{
    DynamoDbPoisonList, DynamoDbStatusStore, DynamoDbSuppressionList, store_error,
};
use courier_client::{CourierQueue, Email, EntryResult, QueueWriter, SqsQueueWriter};
use courier_core::policy::RetryPolicy;
use courier_core::ports::{
    DeadLetter, JobRecord, Provider, StatusStore, StoreError, SuppressionList,
};
use courier_core::reputation::GuardConfig;
use courier_core::status::Status;
use courier_devkit::provision::{QueueSettings, provision};
use courier_events::Applied;
use courier_send::config::{SendConfig, SmtpSettings};
use courier_send::wiring;

use courier_dev::queue_arn;
use courier_dev::ses::{self, Destination, EventPublisher, Script, SesAcceptLog};
use settle::{IDLE_CHECKS, Report, open_jobs, queues_idle, region, report};

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

/// Concurrent driver loops on the send queue, standing in for concurrent Lambda instances (and
/// half as many on the retry queue).
const INSTANCES: usize = 4;
/// Concurrent driver loops on the events queue (the template allows the events function 5).
const EVENT_INSTANCES: usize = 2;
/// The demo's sending and recipient domain (the harness's Postfix scripts replies for it).
const DOMAIN: &str = "courier.test";
/// The account the emulator reports (moto's default), for ARNs in the published events.
const ACCOUNT: &str = "123456789012";

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DemoError {
    #[error(
        "{0} is not set: run the demo through `make demo` (it starts the emulator and the SMTP server)"
    )]
    Env(&'static str),
    #[error("setting up: {0}")]
    Store(#[from] StoreError),
    #[error("wiring the send function: {0}")]
    Wiring(#[from] courier_send::wiring::WiringError),
    #[error("demo policy: {0}")]
    Policy(#[from] courier_core::policy::PolicyError),
    #[error("SES identity {identity} is not verified for sending (verification status {status})")]
    Unverified { identity: String, status: String },
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

/// The campaign's queue bodies, the poison ones among them, and the jobs routed through SES
/// with the status their events end them in.
struct Campaign {
    jobs: Vec<String>,
    poison: Vec<String>,
    ses: BTreeMap<String, Status>,
}

/// The campaign: mostly good addresses, every scripted SMTP failure, some bad input, and a slice
/// through SES whose events the demo publishes (see the module docs for the mix).
fn campaign(size: usize, from: &str) -> Campaign {
    let mut jobs = Vec::with_capacity(size);
    let mut poison = Vec::new();
    let mut ses = BTreeMap::new();
    for i in 0..size {
        let scripted = |name: &str| job(i, from, &format!("{name}@{DOMAIN}")).to_string();
        let body = match i % 100 {
            0..=2 => scripted("unknown"),
            3 | 4 => scripted("busy"),
            5..=7 => scripted("greylist"),
            8 | 9 => scripted("full"),
            10 | 11 => scripted("policy"),
            12 => {
                let mut j = job(i, from, &format!("reader{i}@{DOMAIN}"));
                j["template"]["variables"] = serde_json::json!({});
                j.to_string()
            }
            13 => format!("{{\"version\": 1, \"message_id\": \"demo-{i:05}\""),
            14 => String::from_utf8_lossy(b"\xff\xfe garbage").into_owned(),
            15 => job(i, from, "not an address").to_string(),
            16 => {
                let body = job(i, from, &format!("reader{i}@{DOMAIN}")).to_string();
                poison.push(body.clone());
                body
            }
            17 if i >= 100 => job(
                i - 100 + 20,
                from,
                &format!("reader{}@{DOMAIN}", i - 100 + 20),
            )
            .to_string(),
            30..=39 => {
                let local = match i % 100 {
                    36 => format!("bounce+{i}"),
                    37 => format!("softbounce+{i}"),
                    38 => format!("delay+{i}"),
                    39 if i % 500 == 39 => format!("complaint+{i}"),
                    _ => format!("reader{i}"),
                };
                let to = format!("{local}@{DOMAIN}");
                let mut j = job(i, from, &to);
                j["provider"] = serde_json::json!("ses");
                let mut end = Script::of(&to).end();
                if i % 500 == 35 {
                    // One message, three outcomes: delivered to the reader, a permanent bounce
                    // from the Cc, a complaint from the Bcc; the job ends `complained`.
                    j["cc"] = serde_json::json!([format!("bounce+{i}@{DOMAIN}")]);
                    j["bcc"] = serde_json::json!([format!("complaint+{i}@{DOMAIN}")]);
                    end = Status::Complained;
                }
                ses.insert(format!("demo-{i:05}"), end);
                j.to_string()
            }
            _ => job(i, from, &format!("reader{i}@{DOMAIN}")).to_string(),
        };
        jobs.push(body);
    }
    Campaign { jobs, poison, ses }
}

/// A valid job as the Rust client puts it on the queue (its own serialisation); anything else as
/// is.
fn as_enqueued(body: &str) -> String {
    serde_json::from_str(body)
        .ok()
        .and_then(|value| Email::from_json(value).ok())
        .map_or_else(|| body.to_owned(), |email| email.body().to_owned())
}

/// Enqueues the campaign as applications do: valid jobs through the Rust client
/// (`courier-client`: validated, batched by SQS's limits, failed entries retried), and the
/// deliberately broken ones raw, as a producer without the client could write them (the client
/// refuses them). Returns how many went raw.
async fn enqueue(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
    jobs: &[String],
) -> Result<usize, DemoError> {
    let mut emails = Vec::new();
    let mut raw = Vec::new();
    for body in jobs {
        match serde_json::from_str(body).ok().map(Email::from_json) {
            Some(Ok(email)) => emails.push(email),
            _ => raw.push(body.as_str()),
        }
    }
    let writer = SqsQueueWriter::new(sqs.clone(), queue_url);
    for chunk in raw.chunks(10) {
        let answers = writer
            .write_batch(chunk)
            .await
            .map_err(|e| StoreError::new("enqueue", e))?;
        if let Some(EntryResult::Failed { code, message, .. }) = answers
            .into_iter()
            .find(|a| matches!(a, EntryResult::Failed { .. }))
        {
            return Err(StoreError::msg("enqueue", format!("{code}: {message}")).into());
        }
    }
    for result in CourierQueue::with_writer(writer).send_batch(&emails).await {
        result.map_err(|e| StoreError::new("enqueue", e))?;
    }
    Ok(raw.len())
}

pub(crate) fn run(size: usize, prefix: Option<String>) -> Result<i32, DemoError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    // lettre's connection pool spawns its reaper on the runtime it is built in.
    let _entered = runtime.enter();
    if std::env::var_os("RUST_LOG").is_some() {
        // The functions' logs (tracing) to stderr, filtered by RUST_LOG.
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let prefix = prefix.unwrap_or_else(|| format!("courier-demo-{}", std::process::id()));
    runtime.block_on(run_async(size, prefix))
}

/// SES sends only from verified identities, and moto checks it too (`SendEmail` from an
/// unverified address is `MessageRejected`): the demo verifies its sending domain through the
/// SES v2 API and creates the configuration set the template declares (the local template leaves
/// SES out). moto reports `VerifiedForSendingStatus` false for every identity but
/// `VerificationStatus` SUCCESS, and sends from it; AWS sets both once it finds the DKIM records.
async fn prepare_ses(
    sdk: &aws_config::SdkConfig,
    configuration_set: &str,
) -> Result<(), DemoError> {
    let ses = aws_sdk_sesv2::Client::new(sdk);
    ses.create_configuration_set()
        .configuration_set_name(configuration_set)
        .send()
        .await
        .map_err(store_error("create configuration set"))?;
    if let Err(e) = ses
        .create_email_identity()
        .email_identity(DOMAIN)
        .send()
        .await
        && !e
            .as_service_error()
            .is_some_and(|s| s.is_already_exists_exception())
    {
        return Err(store_error("create email identity")(e).into());
    }
    let identity = ses
        .get_email_identity()
        .email_identity(DOMAIN)
        .send()
        .await
        .map_err(store_error("get email identity"))?;
    let status = identity.verification_status;
    if identity.verified_for_sending_status || status == Some(VerificationStatus::Success) {
        Ok(())
    } else {
        Err(DemoError::Unverified {
            identity: DOMAIN.to_owned(),
            status: status.map_or_else(|| "unknown".to_owned(), |s| s.as_str().to_owned()),
        })
    }
}

/// What the events side did, summed over the events function's batches and the publisher's
/// rounds.
#[derive(Debug, Default, Clone)]
struct EventTotals {
    /// What the events function's handler did with each event (see [`applied_key`]).
    applied: BTreeMap<&'static str, u64>,
    unparseable: u64,
    /// Events the demo published, per type.
    published: BTreeMap<String, u64>,
    /// Recipients of permanent bounces and complaints.
    to_suppress: Vec<String>,
    /// Latest bounce and complaint rate per sending domain.
    rates: BTreeMap<String, (f64, f64)>,
    /// Domains the reputation guard paused, with the reason.
    paused: Vec<(String, String)>,
}

fn applied_key(applied: &Applied) -> &'static str {
    match applied {
        Applied::Changed(Status::Delivered) => "delivered",
        Applied::Changed(Status::BouncedPermanent) => "bounced_permanent",
        Applied::Changed(Status::Complained) => "complained",
        Applied::Changed(Status::PartiallyDelivered) => "partially_delivered",
        Applied::Changed(_) => "changed_other",
        Applied::Resent => "resent",
        Applied::GaveUp(_) => "gave_up",
        Applied::Absorbed => "absorbed",
        Applied::NotYet => "not_yet",
        Applied::Uncorrelated => "uncorrelated",
        Applied::Noted => "noted",
        Applied::Recipients => "recipients",
    }
}

/// The SES jobs: those still on their way (with the status their script ends them in), and those
/// at an end.
struct SesJobs {
    pending: BTreeMap<String, Status>,
    ended: BTreeMap<String, Ended>,
}

/// An SES job at an end, as its record shows it.
struct Ended {
    status: Status,
    expected: Status,
    provider: Option<String>,
    /// How many times the send function sent it.
    sends: u32,
    /// Each recipient and its outcome, as the record lists them.
    recipients: Vec<(String, courier_core::recipients::RecipientStatus)>,
}

impl SesJobs {
    /// Reads the pending jobs' records and moves those at an end. A job is at an end in the
    /// status its script leads to, in another final status, or sent through another provider
    /// (no events will come: the reputation guard paused SES and the job failed over).
    async fn settle(&mut self, status: &dyn StatusStore) -> Result<(), StoreError> {
        let ids: Vec<(String, Status)> =
            self.pending.iter().map(|(k, v)| (k.clone(), *v)).collect();
        for (id, expected) in ids {
            let Some(record) = status.get(&id).await? else {
                continue;
            };
            let ended = match record.status {
                s if s == expected => true,
                // A complaint may still follow a delivery.
                Status::Delivered | Status::PartiallyDelivered => expected != Status::Complained,
                Status::BouncedPermanent
                | Status::Complained
                | Status::Suppressed
                | Status::DeadLettered
                | Status::FailedInternal => true,
                Status::SentToProvider => record.provider.as_deref() != Some("ses"),
                _ => false,
            };
            if ended {
                self.pending.remove(&id);
                self.ended.insert(
                    id,
                    Ended {
                        status: record.status,
                        expected,
                        provider: record.provider.clone(),
                        sends: sends(&record),
                        recipients: record
                            .recipients
                            .iter()
                            .map(|r| (r.address.clone(), r.status))
                            .collect(),
                    },
                );
            }
        }
        Ok(())
    }

    /// Sends beyond each job's first (resends after a transient bounce): the send function's
    /// counters count every send, the campaign each job once.
    fn extra_sends(&self) -> u64 {
        self.ended
            .values()
            .map(|e| u64::from(e.sends.saturating_sub(1)))
            .sum()
    }
}

/// How many times the send function recorded the job as sent.
fn sends(record: &JobRecord) -> u32 {
    let n = record
        .history
        .iter()
        .filter(|h| h.status == Status::SentToProvider && h.by != "events")
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The send function's final outcomes (each job ends in one of these once per send).
fn finals(t: &BTreeMap<String, u64>) -> u64 {
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
}

async fn run_async(size: usize, prefix: String) -> Result<i32, DemoError> {
    env("AWS_ENDPOINT_URL")?;
    let smtp_host = env("COURIER_SMTP_HOST")?;
    let smtp_port: u16 = env("COURIER_SMTP_PORT")?
        .parse()
        .map_err(|_| DemoError::Env("COURIER_SMTP_PORT"))?;
    let started = Instant::now();
    let sdk = courier_adapters::aws::sdk_config().await;
    let (stack, configuration_set) =
        workers::provision_with_ses(&sdk, &prefix, "courier-demo").await?;
    println!(
        "provisioned {}: send and events queues, redrive DLQ, dead-letter queue, tables, buckets, delay state machine; SES identity {DOMAIN} verified, configuration set {configuration_set} ({:.1} s)",
        stack.stack_name,
        started.elapsed().as_secs_f64()
    );
    aws_sdk_s3::Client::new(&sdk)
        .put_object()
        .bucket(&stack.template_bucket)
        .key(courier_adapters::aws::S3TemplateStore::key("welcome"))
        .body(br#"{"subject": "Welcome, {{ name }}", "text": "Hello {{ name }}, thanks for joining.", "html": "<p>Hello {{ name }}, thanks for joining.</p>"}"#.to_vec().into())
        .send()
        .await
        .map_err(store_error("upload template"))?;
    let from = format!("Courier Demo <demo@{DOMAIN}>");
    let Campaign {
        jobs,
        poison,
        ses: ses_jobs,
    } = campaign(size, &from);
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let control = DynamoDbPoisonList::new(
        dynamodb.clone(),
        &stack.control_table,
        Duration::from_secs(60),
    );
    for body in &poison {
        control
            .block_fingerprint(
                &courier_core::envelope::job_fingerprint(&as_enqueued(body)),
                "demo: blocklisted by an operator",
                chrono::Utc::now(),
            )
            .await?;
    }
    let clients = courier_adapters::aws::Clients::new(&sdk);
    let unsubscribe = unsubscribe::start(&sdk, &clients, &stack.suppression_table, &prefix).await?;
    // SMTP first: jobs without a provider hint go to Postfix, `"provider": "ses"` to SES.
    let mut resources = crate::send_resources(
        &stack,
        &[Provider::Smtp, Provider::Ses],
        Some(configuration_set.clone()),
        Some(SmtpSettings {
            host: smtp_host.clone(),
            port: smtp_port,
            tls: courier_adapters::smtp::SmtpSecurity::None,
            username: None,
            password: None,
            credentials_secret: None,
            timeout: Duration::from_secs(10),
            max_message_bytes: courier_adapters::smtp::DEFAULT_MAX_MESSAGE_BYTES,
        }),
    );
    resources.unsubscribe = Some(unsubscribe.settings);
    let config = SendConfig {
        ambiguity_grace: Duration::from_secs(30),
        ..SendConfig::default()
    };
    // SES's view of what it accepted, for the events it publishes.
    let accepted: Arc<Mutex<Vec<ses::Accepted>>> = Arc::default();
    let (pipeline, applier) =
        workers::functions(&clients, &stack, &resources, config, DEMO_POLICY, &accepted)?;
    let guard = GuardConfig::default();

    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let raw = enqueue(&sqs, &stack.queue_url, &jobs).await?;
    println!(
        "enqueued {} jobs ({} through SES; {} through courier-client, {raw} broken ones written raw) -> SMTP {smtp_host}:{smtp_port} and SES; {INSTANCES} send and {EVENT_INSTANCES} events driver instances, batches of 10",
        jobs.len(),
        ses_jobs.len(),
        jobs.len() - raw,
    );

    let totals: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let events: Arc<Mutex<EventTotals>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = workers::spawn_send(INSTANCES, &sqs, &stack, &pipeline, &totals, &stop);
    tasks.extend(
        workers::spawn_events(EVENT_INSTANCES, &sqs, &stack, &applier, &events, &stop).await?,
    );
    let status: Arc<dyn StatusStore> = Arc::new(DynamoDbStatusStore::new(
        dynamodb.clone(),
        &stack.status_table,
        courier_core::status::RETENTION,
    ));
    let publisher = EventPublisher::new(
        sqs.clone(),
        workers::destination(&sdk, &stack, &prefix, &configuration_set),
        accepted,
    );
    tasks.push(workers::spawn_publisher(publisher, &events, &stop));

    let mut ses = SesJobs {
        pending: ses_jobs,
        ended: BTreeMap::new(),
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut last_line = Instant::now();
    let mut last_settle = Instant::now();
    let mut all_done;
    // Evidence that nothing is left to do, whatever the counters say: both queues empty
    // (visible, in flight and delayed) at several checks in a row.
    let mut idle_checks = 0u32;
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let snapshot = totals.lock().map(|t| t.clone()).unwrap_or_default();
        let send_done = finals(&snapshot).saturating_sub(ses.extra_sends());
        let looks_done = send_done >= jobs.len() as u64;
        if last_line.elapsed() < Duration::from_secs(2) && !looks_done {
            continue;
        }
        last_line = Instant::now();
        idle_checks = match queues_idle(
            &sqs,
            &[
                &stack.queue_url,
                &stack.retry_queue_url,
                &stack.events_queue_url,
            ],
        )
        .await
        {
            Ok(true) => idle_checks + 1,
            Ok(false) => 0,
            Err(e) => {
                eprintln!("reading the queues: {e}");
                0
            }
        };
        // One read per SES job still on its way: when the run looks done, else now and then
        // (every 30 s: on a busy emulator a hundred reads are seconds of its time).
        if looks_done
            || idle_checks >= IDLE_CHECKS
            || last_settle.elapsed() >= Duration::from_secs(30)
        {
            last_settle = Instant::now();
            if let Err(e) = ses.settle(status.as_ref()).await {
                eprintln!("reading SES jobs' status: {e}");
            }
        }
        let send_done = finals(&snapshot).saturating_sub(ses.extra_sends());
        all_done = ses.pending.is_empty()
            && (send_done >= jobs.len() as u64 || idle_checks >= IDLE_CHECKS);
        let ev = events.lock().map(|t| t.clone()).unwrap_or_default();
        let applied = |k: &str| ev.applied.get(k).copied().unwrap_or(0);
        println!(
            "  {:>5.1} s  finished {:>5}/{}  sent {:>5}  retries {:>4}  dead letters {:>4} | SES at an end {:>3}/{}  events {:>4}: delivered {:>3}  bounced {:>3}  complaints {:>2}  resent {:>2}  delays {:>2}",
            started.elapsed().as_secs_f64(),
            send_done.min(jobs.len() as u64),
            jobs.len(),
            snapshot.get("Sent").copied().unwrap_or(0),
            snapshot
                .iter()
                .filter(|(k, _)| k.starts_with("Retried"))
                .map(|(_, v)| v)
                .sum::<u64>(),
            snapshot
                .iter()
                .filter(|(k, _)| k.starts_with("DeadLettered_"))
                .map(|(_, v)| v)
                .sum::<u64>(),
            ses.ended.len(),
            ses.ended.len() + ses.pending.len(),
            ev.published.values().sum::<u64>(),
            applied("delivered"),
            applied("bounced_permanent"),
            applied("complained"),
            applied("resent"),
            ev.published.get("DeliveryDelay").copied().unwrap_or(0),
        );
        if all_done || Instant::now() > deadline {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = task.await;
    }
    let totals = totals.lock().map(|t| t.clone()).unwrap_or_default();
    let events = events.lock().map(|t| t.clone()).unwrap_or_default();
    // The events function's suppressions, read back from the suppression table.
    let suppression = DynamoDbSuppressionList::new(dynamodb.clone(), &stack.suppression_table);
    let suppressed = suppression
        .suppressed(&events.to_suppress, chrono::Utc::now())
        .await?;
    // Dead letters, read back from the index (no draining of the queue).
    let index =
        courier_adapters::aws::DynamoDbLetterIndex::new(dynamodb, &stack.letter_index_table);
    let letters: Vec<DeadLetter> =
        courierctl::workbench::select(&index, &courier_core::letters::LetterFilter::default())
            .await
            .map_err(|e| DemoError::Archive(e.to_string()))?
            .into_iter()
            .map(|l| l.record)
            .collect();
    // The archiver's scheduled run, with the archive ages of the demo (zero: archive everything).
    let ages = courier_core::letters::ArchiveAges::zero();
    let settings = courier_dev::archiver_settings(&stack, ages);
    let archiver = courier_archiver::wiring::wire(&clients, &settings);
    let archived = archiver
        .run("demo", chrono::Utc::now() + chrono::Duration::seconds(120))
        .await
        .map_err(|e| DemoError::Archive(e.to_string()))?;
    report(&Report {
        totals: &totals,
        events: &events,
        ses: &ses,
        suppressed: suppressed.len(),
        guard: &guard,
        letters: &letters,
        archived: &archived,
        jobs: jobs.len(),
        took: started.elapsed(),
    });
    let (line, unsubscribed) = unsubscribe::show(&sdk, &pipeline, &stack, jobs.len()).await?;
    println!("{line}");
    // The exit code is the tables' word, not the counters': every job with a status record
    // must be at an end (the others are dead letters: bad input without a usable record).
    let open = open_jobs(&aws_sdk_dynamodb::Client::new(&sdk), &stack.status_table).await?;
    if !open.is_empty() {
        println!("\njobs not at an end ({}):", open.len());
        for (id, status) in open.iter().take(20) {
            println!("  {id}: {status}");
        }
    }
    Ok(if all_done && open.is_empty() && unsubscribed {
        0
    } else {
        1
    })
}
