//! Builds the archiver from the environment at INIT.

use std::sync::Arc;
use std::time::Duration;

use courier_adapters::aws::{
    Clients, DynamoDbLetterIndex, S3ArchiveStore, S3PayloadStore, SqsLetterQueue,
};
use courier_adapters::clock::SystemClock;
use courier_core::letters::ArchiveAges;
use courier_core::ports::PayloadStore;

use crate::{Archiver, QueueKind};

/// The archiver's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub dead_letter_queue_url: String,
    /// The send and retry queues' redrive DLQ (raw messages SQS moved after maxReceiveCount).
    pub redrive_queue_url: String,
    pub letter_index_table: String,
    pub archive_bucket: String,
    /// Where claim-checked letters are redeemed from.
    pub payload_bucket: String,
    pub ages: ArchiveAges,
}

/// A setting that cannot be used, naming the variable.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("{0} is required")]
    Missing(&'static str),
    #[error("{0}")]
    Invalid(String),
}

impl Settings {
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Settings, SettingsError> {
        let required = |name: &'static str| {
            lookup(name)
                .filter(|v| !v.is_empty())
                .ok_or(SettingsError::Missing(name))
        };
        Ok(Settings {
            dead_letter_queue_url: required("COURIER_DEAD_LETTER_QUEUE_URL")?,
            redrive_queue_url: required("COURIER_REDRIVE_DLQ_URL")?,
            letter_index_table: required("COURIER_LETTER_INDEX_TABLE")?,
            archive_bucket: required("COURIER_ARCHIVE_BUCKET")?,
            payload_bucket: required("COURIER_PAYLOAD_BUCKET")?,
            ages: ArchiveAges::from_lookup(&lookup).map_err(SettingsError::Invalid)?,
        })
    }
}

/// Wires the archiver from settings and SDK clients.
pub fn wire(clients: &Clients, settings: &Settings) -> Archiver {
    let payloads: Arc<dyn PayloadStore> = Arc::new(S3PayloadStore::new(
        clients.s3.clone(),
        &settings.payload_bucket,
    ));
    Archiver {
        queues: vec![
            (
                QueueKind::Letters,
                Arc::new(
                    SqsLetterQueue::new(clients.sqs.clone(), &settings.dead_letter_queue_url)
                        .with_payloads(Arc::clone(&payloads)),
                ),
            ),
            (
                QueueKind::Redrive,
                Arc::new(
                    SqsLetterQueue::new(clients.sqs.clone(), &settings.redrive_queue_url)
                        .with_payloads(Arc::clone(&payloads)),
                ),
            ),
        ],
        index: Arc::new(DynamoDbLetterIndex::new(
            clients.dynamodb.clone(),
            &settings.letter_index_table,
        )),
        archive: Arc::new(S3ArchiveStore::new(
            clients.s3.clone(),
            &settings.archive_bucket,
        )),
        payloads,
        ages: settings.ages.clone(),
        clock: Arc::new(SystemClock),
        margin: Duration::from_secs(20),
        hide: Duration::from_secs(300),
    }
}

/// Wires the archiver from the process environment.
pub async fn from_env() -> Result<Archiver, SettingsError> {
    let settings = Settings::from_lookup(|k| std::env::var(k).ok())?;
    let sdk = courier_adapters::aws::sdk_config().await;
    Ok(wire(&Clients::new(&sdk), &settings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_name_what_is_missing_or_wrong() {
        let full = |k: &str| match k {
            "COURIER_DEAD_LETTER_QUEUE_URL"
            | "COURIER_REDRIVE_DLQ_URL"
            | "COURIER_LETTER_INDEX_TABLE"
            | "COURIER_ARCHIVE_BUCKET"
            | "COURIER_PAYLOAD_BUCKET" => Some("x".to_owned()),
            _ => None,
        };
        assert!(Settings::from_lookup(full).is_ok());
        let err = Settings::from_lookup(|k| {
            if k == "COURIER_ARCHIVE_BUCKET" {
                None
            } else {
                full(k)
            }
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "COURIER_ARCHIVE_BUCKET is required");
        let err = Settings::from_lookup(|k| {
            if k == "COURIER_ARCHIVE_AGE_POISON" {
                Some("later".into())
            } else {
                full(k)
            }
        })
        .unwrap_err();
        assert!(
            err.to_string().contains("COURIER_ARCHIVE_AGE_POISON"),
            "{err}"
        );
    }
}
