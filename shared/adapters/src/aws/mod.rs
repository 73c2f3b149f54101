//! Adapters over the AWS SDK clients, one per port: DynamoDB (status, suppression, breaker,
//! poison), SQS and Step Functions (retries, dead letters), S3 (templates), SES v2 (mailer,
//! quota), Secrets Manager (SMTP credentials), EventBridge (outcome events).
//! Endpoints come from the environment (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_<SERVICE>`), so
//! the same code runs against the emulators and AWS.

pub mod dynamodb;
pub mod eventbridge;
pub mod letters;
pub mod s3;
pub mod secrets;
pub mod ses;
pub mod sqs;

pub use dynamodb::{
    DynamoDbBreakerStore, DynamoDbDestinationRates, DynamoDbEventLedger, DynamoDbLiveSettings,
    DynamoDbPoisonList, DynamoDbReputationStore, DynamoDbSendSchedule, DynamoDbSightings,
    DynamoDbStatusStore, DynamoDbSuppressionList, item_size,
};
pub use eventbridge::EventBridgeOutcomeBus;
pub use letters::{DynamoDbLetterIndex, IndexedDeadLetterSink, S3ArchiveStore, SqsLetterQueue};
pub use s3::{S3PayloadStore, S3TemplateStore};
pub use secrets::SecretsManagerSecretStore;
pub use ses::{SesMailer, SesSendQuota};
pub use sqs::{SqsDeadLetterSink, SqsRetryScheduler};

use aws_smithy_runtime_api::client::result::SdkError;

use courier_core::ports::StoreError;

/// Turns an SDK error into a [`StoreError`] that keeps the SDK error as its source and the
/// full context (code, message, request id) in its message.
pub fn store_error<E, R>(operation: &'static str) -> impl FnOnce(SdkError<E, R>) -> StoreError
where
    E: std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    move |e| StoreError {
        operation,
        message: aws_smithy_types::error::display::DisplayErrorContext(&e).to_string(),
        source: Some(Box::new(e)),
    }
}

/// A conditional write's result: `Some(output)` when it applied, `None` when its condition did
/// not hold (`ConditionalCheckFailedException`), an error for anything else.
pub(crate) fn conditional<T, E, R>(
    result: Result<T, SdkError<E, R>>,
    operation: &'static str,
) -> Result<Option<T>, StoreError>
where
    E: aws_smithy_types::error::metadata::ProvideErrorMetadata
        + std::error::Error
        + Send
        + Sync
        + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match result {
        Ok(output) => Ok(Some(output)),
        Err(e)
            if e.as_service_error().and_then(|s| s.code())
                == Some("ConditionalCheckFailedException") =>
        {
            Ok(None)
        }
        Err(e) => Err(store_error(operation)(e)),
    }
}

/// Loads the SDK configuration from the environment.
pub async fn sdk_config() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(https_client())
        .load()
        .await
}

/// The HTTP client of every SDK client (and of the credential providers): hyper with rustls on the
/// ring crypto provider, trusting the system's roots. Built here rather than by the SDK's
/// `default-https-client` feature, which brings rustls on aws-lc-rs, a larger library (the
/// deployment zip's size, BENCHMARKS.md). Every `aws_config` loader must set it: without it the
/// SDK has no HTTP client and every call fails.
pub fn https_client() -> aws_smithy_runtime_api::client::http::SharedHttpClient {
    use aws_smithy_http_client::tls;
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https()
}

/// Counts AWS API calls by `service.operation`: operations Courier issued, and HTTP attempts
/// (operations plus the SDK's own retries of transient errors), for the API-calls-per-job
/// figures. Attach with [`Clients::counted`].
#[derive(Debug, Clone, Default)]
pub struct CallCounter {
    operations: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, u64>>>,
    attempts: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, u64>>>,
}

type Counts = std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, u64>>>;

fn bump(counts: &Counts, cfg: &aws_smithy_types::config_bag::ConfigBag) {
    let name = cfg
        .load::<aws_smithy_runtime_api::client::orchestrator::Metadata>()
        .map_or_else(
            || "unknown".to_owned(),
            |m| format!("{}.{}", m.service(), m.name()),
        );
    if let Ok(mut c) = counts.lock() {
        *c.entry(name).or_default() += 1;
    }
}

impl CallCounter {
    /// Operations issued so far, by `service.operation`.
    pub fn snapshot(&self) -> std::collections::BTreeMap<String, u64> {
        self.operations
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default()
    }

    /// HTTP attempts so far (operations plus SDK retries), by `service.operation`.
    pub fn attempts(&self) -> std::collections::BTreeMap<String, u64> {
        self.attempts.lock().map(|c| c.clone()).unwrap_or_default()
    }

    pub fn total(&self) -> u64 {
        self.snapshot().values().sum()
    }

    pub fn reset(&self) {
        for counts in [&self.operations, &self.attempts] {
            if let Ok(mut c) = counts.lock() {
                c.clear();
            }
        }
    }
}

impl aws_smithy_runtime_api::client::interceptors::Intercept for CallCounter {
    fn name(&self) -> &'static str {
        "CallCounter"
    }

    // Once per operation, after the operation's metadata is in the config bag.
    fn read_before_serialization(
        &self,
        _context: &aws_smithy_runtime_api::client::interceptors::context::BeforeSerializationInterceptorContextRef<'_>,
        _components: &aws_smithy_runtime_api::client::runtime_components::RuntimeComponents,
        cfg: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        bump(&self.operations, cfg);
        Ok(())
    }

    fn read_before_transmit(
        &self,
        _context: &aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef<'_>,
        _components: &aws_smithy_runtime_api::client::runtime_components::RuntimeComponents,
        cfg: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        bump(&self.attempts, cfg);
        Ok(())
    }
}

/// One client per service, built once at INIT from one SDK configuration.
#[derive(Debug, Clone)]
pub struct Clients {
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub sfn: aws_sdk_sfn::Client,
    pub s3: aws_sdk_s3::Client,
    pub ses: aws_sdk_sesv2::Client,
    /// Secrets Manager (the retry envelopes' seal keys, SMTP credentials).
    pub secrets: aws_sdk_secretsmanager::Client,
    pub eventbridge: aws_sdk_eventbridge::Client,
}

impl Clients {
    pub fn new(sdk: &aws_config::SdkConfig) -> Clients {
        Clients {
            dynamodb: aws_sdk_dynamodb::Client::new(sdk),
            sqs: aws_sdk_sqs::Client::new(sdk),
            sfn: aws_sdk_sfn::Client::new(sdk),
            s3: aws_sdk_s3::Client::new(sdk),
            ses: aws_sdk_sesv2::Client::new(sdk),
            secrets: aws_sdk_secretsmanager::Client::new(sdk),
            eventbridge: aws_sdk_eventbridge::Client::new(sdk),
        }
    }

    /// Clients whose every request is counted by `counter`.
    pub fn counted(sdk: &aws_config::SdkConfig, counter: &CallCounter) -> Clients {
        Clients {
            dynamodb: aws_sdk_dynamodb::Client::from_conf(
                aws_sdk_dynamodb::config::Builder::from(sdk)
                    .interceptor(counter.clone())
                    .build(),
            ),
            sqs: aws_sdk_sqs::Client::from_conf(
                aws_sdk_sqs::config::Builder::from(sdk)
                    .interceptor(counter.clone())
                    .build(),
            ),
            sfn: aws_sdk_sfn::Client::from_conf(
                aws_sdk_sfn::config::Builder::from(sdk)
                    .interceptor(counter.clone())
                    .build(),
            ),
            s3: aws_sdk_s3::Client::from_conf(
                aws_sdk_s3::config::Builder::from(sdk)
                    .interceptor(counter.clone())
                    .build(),
            ),
            ses: aws_sdk_sesv2::Client::from_conf(
                aws_sdk_sesv2::config::Builder::from(sdk)
                    .interceptor(counter.clone())
                    .build(),
            ),
            secrets: aws_sdk_secretsmanager::Client::from_conf(
                aws_sdk_secretsmanager::config::Builder::from(sdk)
                    .interceptor(counter.clone())
                    .build(),
            ),
            eventbridge: aws_sdk_eventbridge::Client::from_conf(
                aws_sdk_eventbridge::config::Builder::from(sdk)
                    .interceptor(counter.clone())
                    .build(),
            ),
        }
    }
}
