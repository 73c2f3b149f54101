//! Builds the pipeline from the environment at INIT: configuration parsed once, SDK clients and
//! adapters created once and reused by every invocation of the warm instance.

use std::sync::Arc;
use std::time::Duration;

use courier_adapters::aws::{
    Clients, DynamoDbBreakerStore, DynamoDbDestinationRates, DynamoDbLetterIndex,
    DynamoDbLiveSettings, DynamoDbPoisonList, DynamoDbSendSchedule, DynamoDbSightings,
    DynamoDbStatusStore, DynamoDbSuppressionList, IndexedDeadLetterSink, S3PayloadStore,
    S3TemplateStore, SesMailer, SesSendQuota, SqsDeadLetterSink, SqsRetryScheduler,
};
use courier_adapters::aws::{EventBridgeOutcomeBus, SecretsManagerSecretStore};
use courier_adapters::clock::SystemClock;
use courier_adapters::seal_secret::{SealingScheduler, SecretSealKeys};
use courier_adapters::smtp::{SmtpMailer, SmtpOptions, SmtpSetupError};
use courier_adapters::smtp_secret::{SecretSmtpError, SecretSmtpMailer};
use courier_core::outcome::Relay;
use courier_core::ports::{Mailer, PayloadStore, Provider};

use crate::breakers::Breakers;
use crate::config::{ConfigError, Resources, SendConfig};
use crate::governor::{Destinations, Governor, QuotaPacing};
use crate::{Pipeline, Sealing};
use courier_core::rate::RateLimit;

/// Why the function could not start.
#[derive(Debug, thiserror::Error)]
pub enum WiringError {
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Smtp(#[from] SmtpSetupError),
    /// `COURIER_SMTP_CREDENTIALS_SECRET` could not be read or used.
    #[error("COURIER_SMTP_CREDENTIALS_SECRET: {0}")]
    SmtpSecret(#[from] SecretSmtpError),
    /// `COURIER_ENVELOPE_KEY_SECRET` could not be read or is not a set of seal keys.
    #[error("COURIER_ENVELOPE_KEY_SECRET: {0}")]
    EnvelopeKey(#[source] courier_core::ports::StoreError),
    /// `COURIER_UNSUBSCRIBE_KEY_SECRET` could not be read or is not a set of keys.
    #[error("COURIER_UNSUBSCRIBE_KEY_SECRET: {0}")]
    UnsubscribeKey(#[source] courier_core::ports::StoreError),
}

/// Wires the pipeline from the process environment; reads the SES quota when SES is paced by
/// it (a failed read leaves the fallback rate and is tried again in a minute).
pub async fn from_env() -> Result<Pipeline, WiringError> {
    let (config, resources, policy) = SendConfig::from_lookup(|k| std::env::var(k).ok())?;
    let sdk = courier_adapters::aws::sdk_config().await;
    let smtp = match resources.smtp.as_ref() {
        Some(smtp) => match &smtp.credentials_secret {
            Some(secret) => {
                let store = Arc::new(courier_adapters::aws::SecretsManagerSecretStore::new(
                    aws_sdk_secretsmanager::Client::new(&sdk),
                ));
                let mailer =
                    SecretSmtpMailer::connect(smtp_options(smtp, &config), secret, store).await?;
                Some(Arc::new(mailer) as Arc<dyn Mailer>)
            }
            None => None,
        },
        None => None,
    };
    let pipeline = wire_with(&Clients::new(&sdk), config, &resources, policy, smtp)?;
    // The seal keys are read at INIT: a missing or malformed secret stops the start.
    pipeline
        .sealing
        .keys
        .keys()
        .await
        .map_err(WiringError::EnvelopeKey)?;
    if let Some(keys) = pipeline.unsubscribing.keys() {
        keys.keys().await.map_err(WiringError::UnsubscribeKey)?;
    }
    pipeline.read_quota().await;
    Ok(pipeline)
}

/// The SMTP transport's options from the settings.
fn smtp_options(smtp: &crate::config::SmtpSettings, config: &SendConfig) -> SmtpOptions {
    SmtpOptions {
        host: smtp.host.clone(),
        port: smtp.port,
        security: smtp.tls,
        credentials: smtp.username.clone().zip(smtp.password.clone()),
        timeout: smtp.timeout,
        pool_size: u32::try_from(config.concurrency).unwrap_or(10),
        max_message_bytes: smtp.max_message_bytes,
    }
}

/// Wires the pipeline from parsed settings and SDK clients (tests pass their own). SMTP
/// credentials in a secret need [`from_env`] (the secret is read before wiring).
pub fn wire(
    clients: &Clients,
    config: SendConfig,
    resources: &Resources,
    policy: courier_core::policy::RetryPolicy,
) -> Result<Pipeline, WiringError> {
    wire_with(clients, config, resources, policy, None)
}

/// [`wire`], with the SMTP mailer already built (`None`: built from the settings).
fn wire_with(
    clients: &Clients,
    config: SendConfig,
    resources: &Resources,
    policy: courier_core::policy::RetryPolicy,
    smtp_mailer: Option<Arc<dyn Mailer>>,
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
            Provider::Smtp => match (&smtp_mailer, &resources.smtp) {
                (Some(mailer), _) => mailers.push(Arc::clone(mailer)),
                (None, Some(smtp)) if smtp.credentials_secret.is_some() => {
                    return Err(WiringError::Config(ConfigError::Invalid {
                        name: "COURIER_SMTP_CREDENTIALS_SECRET",
                        value: smtp.credentials_secret.clone().unwrap_or_default(),
                        problem: "the secret is read at INIT (wiring::from_env), not by wire"
                            .into(),
                    }));
                }
                (None, Some(smtp)) => {
                    mailers.push(Arc::new(SmtpMailer::new(&smtp_options(smtp, &config))?));
                }
                (None, None) => {}
            },
        }
    }
    let seal_keys = Arc::new(SecretSealKeys::from_secret(
        &resources.envelope_key_secret,
        Arc::new(SecretsManagerSecretStore::new(clients.secrets.clone())),
    ));
    let payloads: Arc<dyn PayloadStore> = Arc::new(S3PayloadStore::new(
        clients.s3.clone(),
        &resources.payload_bucket,
    ));
    let status: Arc<dyn courier_core::ports::StatusStore> = Arc::new(
        DynamoDbStatusStore::new(
            dynamodb.clone(),
            &resources.status_table,
            courier_core::status::RETENTION,
        )
        .with_suppression_table(&resources.suppression_table),
    );
    let (status, outcomes) = match &resources.outcome_bus {
        Some(bus) => {
            let bus = Arc::new(EventBridgeOutcomeBus::new(clients.eventbridge.clone(), bus));
            let (status, relay) = Relay::wrap(status, bus);
            (status, Some(relay))
        }
        None => (status, None),
    };
    Ok(Pipeline {
        status,
        outcomes,
        mailers,
        scheduler: Arc::new(SealingScheduler::new(
            Arc::new(
                SqsRetryScheduler::new(
                    sqs.clone(),
                    clients.sfn.clone(),
                    resources.requeue_url(),
                    &resources.delay_state_machine_arn,
                )
                .with_payloads(Arc::clone(&payloads)),
            ),
            Arc::clone(&seal_keys),
        )),
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
        sealing: Sealing::new(seal_keys),
        acceptances: Default::default(),
        live: Some(crate::live::Live::new(
            Arc::new(DynamoDbLiveSettings::new(dynamodb.clone(), control)),
            chrono::Duration::from_std(config.live_settings_cache)
                .unwrap_or(chrono::Duration::seconds(30)),
            courier_core::live::Baseline {
                breaker: config.breaker,
                destination_pacing: config.destination_pacing,
                policy: policy.clone(),
                rate_shape: config.rate_shape,
            },
        )),
        governor: {
            let governor = Governor::new(
                Arc::new(DynamoDbSendSchedule::new(dynamodb.clone(), control)),
                config.rate_limits.clone(),
            );
            let governor = match config.retry_horizon {
                Some(horizon) => governor.with_retry_horizon(horizon),
                None => governor,
            };
            let governor = match config.ses_quota_pacing {
                Some(shape) => governor.with_quota(QuotaPacing {
                    provider: Provider::Ses.as_str().to_owned(),
                    quota: Arc::new(SesSendQuota::new(clients.ses.clone())),
                    shape,
                    every: chrono::Duration::seconds(QuotaPacing::EVERY_SECS),
                }),
                None => governor,
            };
            // Always wired: the live settings may turn pacing on when INIT had it off.
            governor.with_destinations(Destinations::new(
                config.destination_pacing,
                Arc::new(DynamoDbDestinationRates::new(dynamodb.clone(), control)),
                RateLimit {
                    per_sec: 1.0,
                    max_ahead: courier_core::pacing::BOOKING_HORIZON,
                    chunk: 1,
                },
                chrono::Duration::from_std(config.breaker_cache)
                    .unwrap_or(chrono::Duration::seconds(2)),
            ))
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
        attachment_budget: Default::default(),
        unsubscribing: match &resources.unsubscribe {
            Some(u) => crate::unsubscribing::Unsubscribing::new(
                u.links.clone(),
                Arc::new(SecretSealKeys::from_secret(
                    &u.key_secret,
                    Arc::new(SecretsManagerSecretStore::new(clients.secrets.clone())),
                )),
            ),
            None => crate::unsubscribing::Unsubscribing::off(),
        },
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// SMTP credentials in a secret are read by `from_env` before wiring; `wire` alone (tests,
    /// local tools) refuses them rather than sending without a login.
    #[test]
    fn wire_alone_refuses_credentials_it_has_not_read() {
        let env = |k: &str| -> Option<String> {
            let v = match k {
                "COURIER_QUEUE_URL" => "q",
                "COURIER_DEAD_LETTER_QUEUE_URL" => "dlq",
                "COURIER_LETTER_INDEX_TABLE" => "idx",
                "COURIER_STATUS_TABLE" => "s",
                "COURIER_SUPPRESSION_TABLE" => "sup",
                "COURIER_CONTROL_TABLE" => "b",
                "COURIER_TEMPLATE_BUCKET" => "t",
                "COURIER_DELAY_STATE_MACHINE_ARN" => "arn",
                "COURIER_PAYLOAD_BUCKET" => "payloads",
                "COURIER_PROVIDERS" => "smtp",
                "COURIER_SMTP_HOST" => "relay.example",
                "COURIER_SMTP_CREDENTIALS_SECRET" => "courier-smtp",
                "COURIER_ENVELOPE_KEY_SECRET" => "courier-seal",
                _ => return None,
            };
            Some(v.to_owned())
        };
        let (config, resources, policy) = SendConfig::from_lookup(env).unwrap();
        let sdk = aws_config::SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("eu-west-1"))
            .build();
        match wire(&Clients::new(&sdk), config, &resources, policy) {
            Err(WiringError::Config(ConfigError::Invalid { name, .. })) => {
                assert_eq!(name, "COURIER_SMTP_CREDENTIALS_SECRET");
            }
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("wired without reading the secret"),
        }
    }
}
