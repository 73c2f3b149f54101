//! Builds the pipeline from the environment at INIT: configuration parsed once, SDK clients and
//! adapters created once and reused by every invocation of the warm instance.

use std::sync::Arc;
use std::time::Duration;

use courier_adapters::aws::{
    Clients, DynamoDbBreakerStore, DynamoDbLetterIndex, DynamoDbPoisonList, DynamoDbSendSchedule,
    DynamoDbSightings, DynamoDbStatusStore, DynamoDbSuppressionList, IndexedDeadLetterSink,
    S3PayloadStore, S3TemplateStore, SesMailer, SesSendQuota, SqsDeadLetterSink, SqsRetryScheduler,
};
use courier_adapters::clock::SystemClock;
use courier_adapters::smtp::{SmtpMailer, SmtpOptions, SmtpSetupError};
use courier_core::ports::{Mailer, PayloadStore, Provider};

use crate::Pipeline;
use crate::breakers::Breakers;
use crate::config::{ConfigError, Resources, SendConfig};
use crate::governor::{Governor, QuotaPacing};

/// Why the function could not start.
#[derive(Debug, thiserror::Error)]
pub enum WiringError {
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Smtp(#[from] SmtpSetupError),
}

/// Wires the pipeline from the process environment; reads the SES quota when SES is paced by
/// it (a failed read leaves the fallback rate and is tried again in a minute).
pub async fn from_env() -> Result<Pipeline, WiringError> {
    let (config, resources, policy) = SendConfig::from_lookup(|k| std::env::var(k).ok())?;
    let sdk = courier_adapters::aws::sdk_config().await;
    let pipeline = wire(&Clients::new(&sdk), config, &resources, policy)?;
    pipeline.read_quota().await;
    Ok(pipeline)
}

/// Wires the pipeline from parsed settings and SDK clients (tests pass their own).
pub fn wire(
    clients: &Clients,
    config: SendConfig,
    resources: &Resources,
    policy: courier_core::policy::RetryPolicy,
) -> Result<Pipeline, WiringError> {
    let dynamodb = clients.dynamodb.clone();
    let sqs = clients.sqs.clone();
    let control = &resources.control_table;
    let mut mailers: Vec<Arc<dyn Mailer>> = Vec::new();
    for provider in &resources.providers {
        match provider {
            Provider::Ses => mailers.push(Arc::new(SesMailer::new(
                clients.ses.clone(),
                resources.ses_configuration_set.clone(),
            ))),
            Provider::Smtp => {
                if let Some(smtp) = &resources.smtp {
                    let credentials = smtp.username.clone().zip(smtp.password.clone());
                    mailers.push(Arc::new(SmtpMailer::new(&SmtpOptions {
                        host: smtp.host.clone(),
                        port: smtp.port,
                        security: smtp.tls,
                        credentials,
                        timeout: smtp.timeout,
                        pool_size: u32::try_from(config.concurrency).unwrap_or(10),
                    })?));
                }
            }
        }
    }
    let payloads: Arc<dyn PayloadStore> = Arc::new(S3PayloadStore::new(
        clients.s3.clone(),
        &resources.payload_bucket,
    ));
    Ok(Pipeline {
        status: Arc::new(
            DynamoDbStatusStore::new(
                dynamodb.clone(),
                &resources.status_table,
                courier_core::status::RETENTION,
            )
            .with_suppression_table(&resources.suppression_table),
        ),
        mailers,
        scheduler: Arc::new(
            SqsRetryScheduler::new(
                sqs.clone(),
                clients.sfn.clone(),
                &resources.queue_url,
                &resources.delay_state_machine_arn,
            )
            .with_payloads(Arc::clone(&payloads)),
        ),
        dead_letters: Arc::new(IndexedDeadLetterSink::new(
            DynamoDbLetterIndex::new(dynamodb.clone(), &resources.letter_index_table)
                .outliving(config.archive_retention_days),
            SqsDeadLetterSink::new(sqs, &resources.dead_letter_queue_url)
                .with_payloads(Arc::clone(&payloads)),
        )),
        payloads,
        suppression: Arc::new(DynamoDbSuppressionList::new(
            dynamodb.clone(),
            &resources.suppression_table,
        )),
        poison: Arc::new(DynamoDbPoisonList::new(
            dynamodb.clone(),
            control,
            Duration::from_secs(60),
        )),
        templates: Arc::new(S3TemplateStore::new(
            clients.s3.clone(),
            &resources.template_bucket,
            Duration::from_secs(60),
        )),
        sightings: Arc::new(DynamoDbSightings::new(dynamodb.clone(), control)),
        new_codes: std::sync::Mutex::new(Vec::new()),
        governor: {
            let governor = Governor::new(
                Arc::new(DynamoDbSendSchedule::new(dynamodb.clone(), control)),
                config.rate_limits.clone(),
            );
            match config.ses_quota_pacing {
                Some(shape) => governor.with_quota(QuotaPacing {
                    provider: Provider::Ses.as_str().to_owned(),
                    quota: Arc::new(SesSendQuota::new(clients.ses.clone())),
                    shape,
                    every: chrono::Duration::seconds(QuotaPacing::EVERY_SECS),
                }),
                None => governor,
            }
        },
        breakers: Breakers::new(
            Arc::new(DynamoDbBreakerStore::new(dynamodb, control)),
            config.breaker,
            config.breaker_cache,
        ),
        policy,
        clock: Arc::new(SystemClock),
        config,
        rng: std::sync::Mutex::new(courier_adapters::clock::seeded_from_entropy()),
    })
}
