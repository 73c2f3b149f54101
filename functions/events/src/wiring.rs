//! Builds the events function from the environment at INIT.

use std::sync::Arc;

use courier_adapters::aws::{
    Clients, DynamoDbBreakerStore, DynamoDbEventLedger, DynamoDbLetterIndex,
    DynamoDbReputationStore, DynamoDbStatusStore, DynamoDbSuppressionList, IndexedDeadLetterSink,
    S3PayloadStore, SecretsManagerSecretStore, SqsDeadLetterSink, SqsRetryScheduler,
};
use courier_adapters::clock::SystemClock;
use courier_adapters::https::HttpsSigningCertificates;
use courier_adapters::seal_secret::{SealingScheduler, SecretSealKeys};
use courier_core::policy::{RetryPolicy, parse_duration};
use courier_core::ports::{PayloadStore, SigningCertificates, StoreError};
use courier_core::reputation::GuardConfig;

use crate::sns::{Admission, Gate, NoCertificates, SnsTrust};
use crate::{Applier, Guard, Resender};

/// The events function's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub status_table: String,
    pub suppression_table: String,
    /// The control table: reputation buckets and the pauses (breaker items).
    pub control_table: String,
    pub queue_url: String,
    /// `COURIER_RETRY_QUEUE_URL`: where resends go (the send function's retry queue); unset,
    /// the send queue.
    pub retry_queue_url: Option<String>,
    pub delay_state_machine_arn: String,
    pub dead_letter_queue_url: String,
    pub letter_index_table: String,
    /// `COURIER_PAYLOAD_BUCKET`: the payload bucket, where a body over 300 KiB is kept for a
    /// resend (and a resend or letter too large for its queue is stored, as by the send function).
    pub payload_bucket: String,
    /// `COURIER_OUTCOME_BUS`: the event bus for outcome events; none: not published.
    pub outcome_bus: Option<String>,
    pub policy: RetryPolicy,
    pub guard: GuardConfig,
    /// How long automatic soft suppressions last (`COURIER_SOFT_SUPPRESSION_PERIOD`).
    pub soft_suppression: chrono::Duration,
    /// The path SES events come through (`COURIER_SES_EVENTS_VIA`: `sns` or `eventbridge`;
    /// for `sns`, `COURIER_SES_EVENTS_TOPIC_ARN` and optionally `COURIER_SNS_CERTIFICATE_HOST`,
    /// by default `sns.$AWS_REGION.amazonaws.com`).
    pub admission: Admission,
    /// How long the S3 archive keeps dead letters (`COURIER_ARCHIVE_RETENTION_DAYS`, default
    /// 365): the letter index entries this function writes outlive it by a margin.
    pub archive_retention_days: i64,
    /// `COURIER_ENVELOPE_KEY_SECRET`: the secret holding the seal keys of the copies this
    /// function re-enqueues (transient-bounce resends; [`courier_core::seal`]).
    pub envelope_key_secret: String,
    /// How long the live settings are used before they are read again
    /// (`COURIER_LIVE_SETTINGS_CACHE`, default 30 s).
    pub live_settings_cache: chrono::Duration,
}

/// The default of `COURIER_SOFT_SUPPRESSION_PERIOD`: 14 days.
pub const DEFAULT_SOFT_SUPPRESSION_DAYS: i64 = 14;

/// A setting that cannot be used, naming the variable.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("{0} is required")]
    Missing(&'static str),
    #[error("{name}: {message}")]
    Invalid { name: &'static str, message: String },
}

impl Settings {
    /// Where resends go: the retry queue, or the send queue without one.
    pub fn requeue_url(&self) -> &str {
        self.retry_queue_url.as_deref().unwrap_or(&self.queue_url)
    }

    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Settings, SettingsError> {
        let required = |name: &'static str| {
            lookup(name)
                .filter(|v| !v.is_empty())
                .ok_or(SettingsError::Missing(name))
        };
        let defaults = GuardConfig::default();
        let rate = |name: &'static str, default: f64| -> Result<f64, SettingsError> {
            match lookup(name).filter(|v| !v.is_empty()) {
                None => Ok(default),
                Some(v) => v
                    .parse::<f64>()
                    .ok()
                    .filter(|r| *r > 0.0 && *r < 1.0)
                    .ok_or_else(|| SettingsError::Invalid {
                        name,
                        message: format!("{v:?} is not a fraction between 0 and 1 (e.g. 0.04)"),
                    }),
            }
        };
        let duration = |name: &'static str,
                        default: chrono::Duration|
         -> Result<chrono::Duration, SettingsError> {
            match lookup(name).filter(|v| !v.is_empty()) {
                None => Ok(default),
                Some(v) => parse_duration(&v)
                    .ok()
                    .filter(|s| *s > 0)
                    .and_then(|s| i64::try_from(s).ok())
                    .map(chrono::Duration::seconds)
                    .ok_or_else(|| SettingsError::Invalid {
                        name,
                        message: format!("{v:?} is not a positive duration (e.g. 24h, 90m)"),
                    }),
            }
        };
        let min_volume = match lookup("COURIER_REPUTATION_MIN_VOLUME").filter(|v| !v.is_empty()) {
            None => defaults.min_volume,
            Some(v) => v.parse().map_err(|_| SettingsError::Invalid {
                name: "COURIER_REPUTATION_MIN_VOLUME",
                message: format!("{v:?} is not a whole number"),
            })?,
        };
        let policy = RetryPolicy::from_lookup(&lookup).map_err(|e| SettingsError::Invalid {
            name: "COURIER_RETRY_POLICY_JSON",
            message: e.to_string(),
        })?;
        let admission = match lookup("COURIER_SES_EVENTS_VIA").filter(|v| !v.is_empty()) {
            None => return Err(SettingsError::Missing("COURIER_SES_EVENTS_VIA")),
            Some(via) if via == "sns" => Admission::Sns(SnsTrust {
                topic_arn: required("COURIER_SES_EVENTS_TOPIC_ARN")?,
                certificate_host: match lookup("COURIER_SNS_CERTIFICATE_HOST")
                    .filter(|v| !v.is_empty())
                {
                    Some(host) => host,
                    None => SnsTrust::default_host(&required("AWS_REGION")?),
                },
            }),
            Some(via) if via == "eventbridge" => Admission::EventBridge,
            Some(via) => {
                return Err(SettingsError::Invalid {
                    name: "COURIER_SES_EVENTS_VIA",
                    message: format!("{via:?} is neither sns nor eventbridge"),
                });
            }
        };
        let archive_retention_days =
            match lookup("COURIER_ARCHIVE_RETENTION_DAYS").filter(|v| !v.is_empty()) {
                None => courier_adapters::aws::letters::DEFAULT_ARCHIVE_RETENTION_DAYS,
                Some(v) => courier_adapters::aws::letters::parse_archive_retention_days(&v)
                    .map_err(|message| SettingsError::Invalid {
                        name: "COURIER_ARCHIVE_RETENTION_DAYS",
                        message,
                    })?,
            };
        // The send function's range for the same variable (1 s to 1 h).
        let live_settings_cache =
            duration("COURIER_LIVE_SETTINGS_CACHE", chrono::Duration::seconds(30))?;
        if live_settings_cache > chrono::Duration::hours(1) {
            return Err(SettingsError::Invalid {
                name: "COURIER_LIVE_SETTINGS_CACHE",
                message: format!(
                    "{:?} is not between 1s and 1h",
                    lookup("COURIER_LIVE_SETTINGS_CACHE").unwrap_or_default()
                ),
            });
        }
        Ok(Settings {
            admission,
            archive_retention_days,
            envelope_key_secret: required("COURIER_ENVELOPE_KEY_SECRET")?,
            status_table: required("COURIER_STATUS_TABLE")?,
            suppression_table: required("COURIER_SUPPRESSION_TABLE")?,
            control_table: required("COURIER_CONTROL_TABLE")?,
            queue_url: required("COURIER_QUEUE_URL")?,
            retry_queue_url: lookup("COURIER_RETRY_QUEUE_URL").filter(|v| !v.is_empty()),
            delay_state_machine_arn: required("COURIER_DELAY_STATE_MACHINE_ARN")?,
            dead_letter_queue_url: required("COURIER_DEAD_LETTER_QUEUE_URL")?,
            letter_index_table: required("COURIER_LETTER_INDEX_TABLE")?,
            payload_bucket: required("COURIER_PAYLOAD_BUCKET")?,
            outcome_bus: lookup("COURIER_OUTCOME_BUS").filter(|v| !v.is_empty()),
            policy,
            live_settings_cache,
            soft_suppression: duration(
                "COURIER_SOFT_SUPPRESSION_PERIOD",
                chrono::Duration::days(DEFAULT_SOFT_SUPPRESSION_DAYS),
            )?,
            guard: GuardConfig {
                bounce_trip: rate("COURIER_REPUTATION_BOUNCE_TRIP", defaults.bounce_trip)?,
                complaint_trip: rate("COURIER_REPUTATION_COMPLAINT_TRIP", defaults.complaint_trip)?,
                min_volume,
                window: duration("COURIER_REPUTATION_WINDOW", defaults.window)?,
                pause: duration("COURIER_REPUTATION_PAUSE", defaults.pause)?,
            },
        })
    }
}

/// The seal keys of the copies the function re-enqueues, from `COURIER_ENVELOPE_KEY_SECRET`
/// (read on first use; `main` reads them at INIT).
pub fn seal_keys(clients: &Clients, settings: &Settings) -> SecretSealKeys {
    SecretSealKeys::from_secret(
        &settings.envelope_key_secret,
        Arc::new(SecretsManagerSecretStore::new(clients.secrets.clone())),
    )
}

/// Wires the function from settings and SDK clients (through SNS, an HTTPS client for the
/// signing certificates, trusting the system's roots: it fails when none can be loaded).
pub fn wire(clients: &Clients, settings: &Settings) -> Result<Applier, StoreError> {
    let dynamodb = clients.dynamodb.clone();
    let control = &settings.control_table;
    let certificates: Arc<dyn SigningCertificates> = match settings.admission {
        Admission::Sns(_) => Arc::new(HttpsSigningCertificates::new()?),
        Admission::EventBridge | Admission::Any => Arc::new(NoCertificates),
    };
    let status: Arc<dyn courier_core::ports::StatusStore> = Arc::new(DynamoDbStatusStore::new(
        dynamodb.clone(),
        &settings.status_table,
        courier_core::status::RETENTION,
    ));
    let payloads: Arc<dyn PayloadStore> = Arc::new(S3PayloadStore::new(
        clients.s3.clone(),
        &settings.payload_bucket,
    ));
    let (status, outcomes) = match &settings.outcome_bus {
        Some(bus) => {
            let bus = Arc::new(courier_adapters::aws::EventBridgeOutcomeBus::new(
                clients.eventbridge.clone(),
                bus,
            ));
            let (status, relay) = courier_core::outcome::Relay::wrap(status, bus);
            (status, Some(relay))
        }
        None => (status, None),
    };
    Ok(Applier {
        gate: Arc::new(Gate::new(settings.admission.clone(), certificates)),
        status,
        outcomes,
        suppression: Arc::new(DynamoDbSuppressionList::new(
            dynamodb.clone(),
            &settings.suppression_table,
        )),
        soft_suppression: settings.soft_suppression,
        clock: Arc::new(SystemClock),
        resender: Resender {
            policy: settings.policy.clone(),
            live: Some(courier_adapters::live_settings::LiveSettingsReader::new(
                Arc::new(courier_adapters::aws::DynamoDbLiveSettings::new(
                    dynamodb.clone(),
                    control,
                )),
                settings.live_settings_cache,
                courier_core::live::Baseline {
                    policy: settings.policy.clone(),
                    ..courier_core::live::Baseline::default()
                },
            )),
            live_policy: Default::default(),
            scheduler: Arc::new(SealingScheduler::new(
                Arc::new(
                    SqsRetryScheduler::new(
                        clients.sqs.clone(),
                        clients.sfn.clone(),
                        settings.requeue_url(),
                        &settings.delay_state_machine_arn,
                    )
                    .with_payloads(Arc::clone(&payloads)),
                ),
                Arc::new(seal_keys(clients, settings)),
            )),
            dead_letters: Arc::new(IndexedDeadLetterSink::new(
                DynamoDbLetterIndex::new(dynamodb.clone(), &settings.letter_index_table)
                    .outliving(settings.archive_retention_days),
                SqsDeadLetterSink::new(clients.sqs.clone(), &settings.dead_letter_queue_url)
                    .with_payloads(Arc::clone(&payloads)),
            )),
            payloads,
            rng: std::sync::Mutex::new(courier_adapters::clock::seeded_from_entropy()),
        },
        guard: Guard {
            store: Arc::new(DynamoDbReputationStore::new(dynamodb.clone(), control)),
            ledger: Arc::new(DynamoDbEventLedger::new(dynamodb.clone(), control)),
            breakers: Arc::new(DynamoDbBreakerStore::new(dynamodb.clone(), control)),
            config: settings.guard.clone(),
        },
    })
}
