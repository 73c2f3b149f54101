//! `courierctl policy`: the live settings (`courier_core::live`) an operator changes without a
//! redeploy. A document is validated before it is stored, with the code every instance runs when
//! it reads it, against the deployment defaults (an instance whose own INIT settings differ
//! validates it again against those and keeps its last good settings if it does not hold).

use chrono::{DateTime, Utc};
use courier_core::live::{Baseline, Effective, LiveError};
use courier_core::ports::{LiveRecord, LiveSettingsStore, StoreError};

/// Why a policy command failed.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The document does not validate: nothing was stored.
    #[error("{0}")]
    Invalid(#[from] LiveError),
    /// Someone stored another version since this command read it.
    #[error(
        "the live settings changed while this command ran (now version {now}); nothing was stored: read them again and retry"
    )]
    Conflict { now: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The settings `text` puts in force over the deployment defaults, or why it cannot be stored.
pub fn validate(text: &str) -> Result<Effective, LiveError> {
    courier_core::live::effective(text, &Baseline::default())
}

/// Validates `text` and stores it over the version this call reads: the new version.
pub async fn set(
    store: &dyn LiveSettingsStore,
    text: &str,
    now: DateTime<Utc>,
    by: &str,
) -> Result<u64, PolicyError> {
    validate(text)?;
    let current = store.get().await?.map(|r| r.version);
    if store.put(text, current, now, by).await? {
        return Ok(current.unwrap_or(0) + 1);
    }
    let now = store
        .get()
        .await?
        .map_or_else(|| "none".to_owned(), |r| r.version.to_string());
    Err(PolicyError::Conflict { now })
}

/// What `policy show` prints: the stored document with its version, or that none is stored.
pub fn describe(record: Option<&LiveRecord>) -> String {
    let Some(r) = record else {
        return "no live settings are stored: the deployment's own settings apply\n".into();
    };
    let pretty = serde_json::from_str::<serde_json::Value>(&r.document)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_else(|_| r.document.clone());
    let valid = match validate(&r.document) {
        Ok(_) => "valid".to_owned(),
        Err(e) => format!("NOT VALID (instances keep their last good settings): {e}"),
    };
    format!(
        "version {} stored {} by {} ({valid})\n{pretty}\n",
        r.version,
        r.updated_at.format("%Y-%m-%d %H:%M:%S UTC"),
        if r.updated_by.is_empty() {
            "?"
        } else {
            &r.updated_by
        },
    )
}

/// A one-line summary of the settings a document puts in force.
pub fn summary(e: &Effective) -> String {
    let rates: Vec<String> = e
        .send_rates
        .iter()
        .map(|(p, r)| match r {
            Some(r) => format!("{p} {}/s", r.per_sec),
            None => format!("{p} off"),
        })
        .collect();
    format!(
        "breaker: min {} calls, {:.0}% failures, open {}..{} s; send rates: {}; destination pacing: {}",
        e.breaker.min_calls,
        e.breaker.failure_ratio * 100.0,
        e.breaker.open_secs,
        e.breaker.max_open_secs,
        if rates.is_empty() {
            "the deployment's".to_owned()
        } else {
            rates.join(", ")
        },
        e.destination_pacing.map_or_else(
            || "off".to_owned(),
            |p| format!(
                "{}..{}/s, +{}/s per minute, x{}",
                p.floor_per_sec, p.ceiling_per_sec, p.increase_per_min, p.decrease
            )
        ),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use courier_devkit::memory::MemoryLiveSettings;

    fn t() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    #[tokio::test]
    async fn set_stores_valid_documents_one_version_after_another() {
        let store = MemoryLiveSettings::default();
        assert_eq!(
            set(&store, r#"{"breaker": {"min_calls": 20}}"#, t(), "ann")
                .await
                .unwrap(),
            1
        );
        assert_eq!(set(&store, "{}", t(), "bob").await.unwrap(), 2);
        let record = store.get().await.unwrap().unwrap();
        assert_eq!(
            (record.document.as_str(), record.updated_by.as_str()),
            ("{}", "bob")
        );
        assert!(describe(Some(&record)).starts_with("version 2 stored 2027-01-15"));
    }

    #[tokio::test]
    async fn an_invalid_document_is_never_stored() {
        let store = MemoryLiveSettings::default();
        let e = set(&store, r#"{"send_rates": {"ses": 0}}"#, t(), "ann")
            .await
            .unwrap_err();
        assert!(matches!(e, PolicyError::Invalid(_)));
        assert!(e.to_string().contains("send_rates.ses"), "{e}");
        assert!(store.get().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_failed_store_is_reported_and_nothing_changes() {
        let store = MemoryLiveSettings::default();
        store.fail.set(1);
        assert!(matches!(
            set(&store, "{}", t(), "ann").await,
            Err(PolicyError::Store(_))
        ));
        assert!(store.get().await.unwrap().is_none());
    }

    #[test]
    fn show_says_when_nothing_is_stored_and_flags_an_invalid_document() {
        assert!(describe(None).contains("the deployment's own settings apply"));
        let record = LiveRecord {
            document: r#"{"breaker": {"probes": 0}}"#.into(),
            version: 3,
            updated_at: t(),
            updated_by: String::new(),
        };
        let text = describe(Some(&record));
        assert!(
            text.contains("NOT VALID") && text.contains("breaker.probes"),
            "{text}"
        );
    }

    #[test]
    fn the_summary_names_what_is_in_force() {
        let e = validate(r#"{"send_rates": {"ses": 14, "smtp": "off"}, "destination_pacing": {"enabled": false}}"#).unwrap();
        let s = summary(&e);
        assert!(s.contains("ses 14/s, smtp off"), "{s}");
        assert!(s.contains("destination pacing: off"), "{s}");
    }
}
