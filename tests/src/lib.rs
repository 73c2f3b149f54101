//! Helpers for the integration tests. They run against whatever the environment points at:
//! `scripts/with-harness.sh moto|localstack -- cargo test -p courier-integration` starts the
//! emulators and the SMTP server and exports `AWS_ENDPOINT_URL` and the `COURIER_SMTP_*`
//! variables; against real AWS, set the usual AWS variables instead. A missing variable fails
//! the test with a message: integration tests are never skipped silently.
//!
//! # Layout
//! - here: the environment ([`require_env`], [`emulator`], [`atomic_conditional_writes`]),
//!   [`Stack`] (a provisioned stack and the functions wired onto it), the binaries the tests run.
//! - `tests/`: one file per area: `contract` (every port's adapter), `send`, `events`,
//!   `archive`, `binary` (the functions' binaries under a Runtime API), `cli` (`courierctl`),
//!   `demo` (`courier-dev demo`), `deploy` (the template on LocalStack), `provision`,
//!   `simulate`, `harness`.

use std::time::{Duration, Instant};

/// Reads a required variable, failing the test with a clear message when it is missing.
pub fn require_env(name: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "{name} is not set: run the integration tests through `scripts/with-harness.sh moto -- cargo test -p courier-integration` (or `make test`)"
        ),
    }
}

/// Which emulator the run targets (`moto`, `localstack`, or `aws`).
pub fn emulator() -> String {
    std::env::var("COURIER_EMULATOR").unwrap_or_else(|_| "aws".into())
}

/// Whether the target serialises concurrent conditional writes to one item, as DynamoDB does.
/// moto's server handles requests on parallel threads without a per-item lock, so two
/// simultaneous conditional puts can both succeed there; races are asserted strictly on
/// LocalStack (DynamoDB Local) and AWS, and only for sanity on moto.
pub fn atomic_conditional_writes() -> bool {
    emulator() != "moto"
}

/// Shared SDK configuration from the environment (honours `AWS_ENDPOINT_URL[_<SERVICE>]`).
pub async fn aws_config() -> aws_config::SdkConfig {
    require_env("AWS_ENDPOINT_URL");
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(courier_adapters::aws::https_client())
        .load()
        .await
}

/// A name unique to this test run and process, safe for queues, tables and buckets.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{prefix}-{}-{call}-{nanos:09}", std::process::id())
}

/// Polls `f` every 200 ms until it returns `Some` or `timeout` passes.
pub async fn eventually<T, F, Fut>(timeout: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if start.elapsed() > timeout {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The account id the emulators use (moto and LocalStack both default to this one).
pub const ACCOUNT: &str = "000000000000";

/// A role ARN for resources that need one; the emulators do not check it.
pub fn role_arn() -> String {
    let account = if emulator() == "moto" {
        "123456789012"
    } else {
        ACCOUNT
    };
    format!("arn:aws:iam::{account}:role/courier-test")
}

/// A fresh set of Courier's resources on the target emulator, with unique names.
pub struct Stack {
    pub sdk: aws_config::SdkConfig,
    /// The functions' resources. Without a retry queue (`retry_queue_url: None`): copies that
    /// wait come back to the send queue, which the tests' driver polls; a test of the retry
    /// queue sets it to [`Stack::retry_queue_url`].
    pub resources: courier_send::config::Resources,
    /// The stack's retry queue (the template's `RetryQueue`).
    pub retry_queue_url: String,
    /// The queue SQS redrives raw messages to after maxReceiveCount.
    pub redrive_dlq_url: String,
    pub queue_arn: String,
    pub sender: String,
    pub archive_bucket: String,
}

/// maxReceiveCount of the send queue in tests.
pub const MAX_RECEIVE_COUNT: u32 = 3;

/// The debug `courierctl` binary the integration tests run (built by the Makefile's BINS line
/// before them); fails the test with what to build when it is missing.
pub fn courierctl() -> std::path::PathBuf {
    debug_binary("courierctl")
}

/// The debug `courier-dev` binary (demo, drive), as [`courierctl`].
pub fn courier_dev() -> std::path::PathBuf {
    debug_binary("courier-dev")
}

fn debug_binary(name: &str) -> std::path::PathBuf {
    let repo = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or(repo.join("target"), |d| repo.join(d));
    let path = target.join("debug").join(name);
    assert!(
        path.exists(),
        "{} is not built: run `cargo build -p {name}` first (`make it-moto` and `make it-localstack` do, through BINS)",
        path.display()
    );
    path
}

#[allow(clippy::expect_used)]
impl Stack {
    /// The stack's status table, as the functions use it (records kept an hour).
    pub fn status_store(&self) -> courier_adapters::aws::DynamoDbStatusStore {
        courier_adapters::aws::DynamoDbStatusStore::new(
            aws_sdk_dynamodb::Client::new(&self.sdk),
            &self.resources.status_table,
            Duration::from_secs(3600),
        )
    }

    /// The queue writer `courierctl dlq replay` uses: a replay is a later generation, sealed
    /// with the stack's key (unsealed, the send function would take it as a first copy and drop
    /// it).
    pub fn replay_scheduler(&self) -> courier_adapters::seal_secret::SealingScheduler {
        use std::sync::Arc;
        let clients = courier_adapters::aws::Clients::new(&self.sdk);
        courier_adapters::seal_secret::SealingScheduler::new(
            Arc::new(courier_adapters::aws::SqsRetryScheduler::new(
                clients.sqs.clone(),
                clients.sfn.clone(),
                &self.resources.queue_url,
                "",
            )),
            Arc::new(courier_adapters::seal_secret::SecretSealKeys::from_secret(
                &self.resources.envelope_key_secret,
                Arc::new(courier_adapters::aws::SecretsManagerSecretStore::new(
                    clients.secrets.clone(),
                )),
            )),
        )
    }

    /// `courierctl dlq replay` of `letters` by operator "ann", as it runs against this stack.
    pub async fn replay_as_ann(
        &self,
        letters: &[courier_core::letters::IndexedLetter],
        reason: &str,
    ) -> courierctl::workbench::Outcome {
        courierctl::workbench::replay(
            letters,
            &self.status_store(),
            &self.replay_scheduler(),
            &self.letter_index(),
            "ann",
            reason,
            100.0,
            chrono::Utc::now,
            &mut Vec::new(),
        )
        .await
        .expect("replay")
    }

    /// The stack's letter index.
    pub fn letter_index(&self) -> courier_adapters::aws::DynamoDbLetterIndex {
        courier_adapters::aws::DynamoDbLetterIndex::new(
            aws_sdk_dynamodb::Client::new(&self.sdk),
            &self.resources.letter_index_table,
        )
    }

    /// The archiver on this stack, archiving every letter at once (ages of zero).
    pub fn archiver_now(&self) -> courier_archiver::Archiver {
        courier_archiver::wiring::wire(
            &courier_adapters::aws::Clients::new(&self.sdk),
            &courier_archiver::wiring::Settings {
                dead_letter_queue_url: self.resources.dead_letter_queue_url.clone(),
                redrive_queue_url: self.redrive_dlq_url.clone(),
                letter_index_table: self.resources.letter_index_table.clone(),
                archive_bucket: self.archive_bucket.clone(),
                payload_bucket: self.resources.payload_bucket.clone(),
                ages: courier_core::letters::ArchiveAges::zero(),
            },
        )
    }

    /// The send function's pipeline on this stack (default settings and retry policy).
    pub fn send_pipeline(&self) -> std::sync::Arc<courier_send::Pipeline> {
        std::sync::Arc::new(
            courier_send::wiring::wire(
                &courier_adapters::aws::Clients::new(&self.sdk),
                courier_send::config::SendConfig::default(),
                &self.resources,
                courier_core::policy::RetryPolicy::default(),
            )
            .expect("wire the send pipeline"),
        )
    }

    pub async fn create(providers: &[&str]) -> Stack {
        let sdk = aws_config().await;
        let stack = courier_devkit::provision::provision(
            &sdk,
            &unique("courier"),
            &role_arn(),
            courier_devkit::provision::QueueSettings {
                max_receive_count: MAX_RECEIVE_COUNT,
                visibility_timeout: Duration::from_secs(30),
            },
        )
        .await
        .expect("provision");
        let sender = format!("sender-{}@courier.test", std::process::id());
        aws_sdk_sesv2::Client::new(&sdk)
            .create_email_identity()
            .email_identity(&sender)
            .send()
            .await
            .expect("create_email_identity");
        let smtp = std::env::var("COURIER_SMTP_PORT").ok().map(|port| {
            courier_send::config::SmtpSettings {
                host: require_env("COURIER_SMTP_HOST"),
                port: port.parse().expect("port"),
                tls: courier_adapters::smtp::SmtpSecurity::None,
                username: None,
                password: None,
                credentials_secret: None,
                timeout: Duration::from_secs(5),
                max_message_bytes: courier_adapters::smtp::DEFAULT_MAX_MESSAGE_BYTES,
            }
        });
        Stack {
            sdk,
            resources: courier_send::config::Resources {
                retry_queue_url: None,
                ..courier_dev::send_resources(
                    &stack,
                    &providers
                        .iter()
                        .map(|p| courier_core::ports::Provider::parse(p).expect("a provider name"))
                        .collect::<Vec<_>>(),
                    None,
                    smtp,
                )
            },
            retry_queue_url: stack.retry_queue_url.clone(),
            redrive_dlq_url: stack.redrive_dlq_url,
            queue_arn: stack.queue_arn,
            sender,
            archive_bucket: stack.archive_bucket,
        }
    }

    pub fn sqs(&self) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::new(&self.sdk)
    }

    /// The local event-source driver on this stack's send queue (batches of 10, 30 s function
    /// timeout), hiding received batches for `visibility_timeout` seconds.
    pub fn driver(&self, visibility_timeout: i32) -> courier_dev::driver::Driver {
        courier_dev::driver::Driver {
            sqs: self.sqs(),
            queue_url: self.resources.queue_url.clone(),
            queue_arn: self.queue_arn.clone(),
            batch_size: 10,
            visibility_timeout,
            wait_seconds: 1,
            function_timeout: Duration::from_secs(30),
        }
    }

    /// Receives every message currently visible on `url` (deleting them).
    pub async fn drain(&self, url: &str) -> Vec<aws_sdk_sqs::types::Message> {
        let sqs = self.sqs();
        let mut all = Vec::new();
        loop {
            let out = sqs
                .receive_message()
                .queue_url(url)
                .max_number_of_messages(10)
                .wait_time_seconds(1)
                .message_attribute_names("All")
                .send()
                .await
                .expect("receive");
            let batch = out.messages.unwrap_or_default();
            if batch.is_empty() {
                return all;
            }
            for m in &batch {
                if let Some(h) = &m.receipt_handle {
                    sqs.delete_message()
                        .queue_url(url)
                        .receipt_handle(h)
                        .send()
                        .await
                        .expect("delete");
                }
            }
            all.extend(batch);
        }
    }
}

/// moto's dump of its whole state (SES messages sent on it included), asked for again while
/// moto refuses it ([`courier_devkit::moto::state`]).
pub async fn moto_state(moto: &str) -> String {
    courier_devkit::moto::state(moto)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}
