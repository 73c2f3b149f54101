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
    /// The stored version is not the one the change was made from: someone stored another
    /// since (or the operator edited an older one).
    #[error(
        "version {now} of the live settings is stored, not version {expected} this change was made from; nothing was stored: `courierctl policy show`, merge the change into what is stored, and set it again with --expect-version {now}"
    )]
    Conflict { now: u64, expected: u64 },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The settings `text` puts in force over the deployment defaults, or why it cannot be stored.
pub fn validate(text: &str) -> Result<Effective, LiveError> {
    courier_core::live::effective(text, &Baseline::default())
}

/// Which stored version a change replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// The version the operator's change was made from (`policy show`'s; 0: none stored). Any
    /// other stored version refuses the change, so two operators' edits never silently
    /// overwrite each other.
    Version(u64),
    /// Whatever is stored when the command runs (`--force`).
    Current,
}

/// Validates `text` and stores it as the version after `expect`: the new version.
pub async fn set(
    store: &dyn LiveSettingsStore,
    text: &str,
    expect: Expect,
    now: DateTime<Utc>,
    by: &str,
) -> Result<u64, PolicyError> {
    validate(text)?;
    let expected = match expect {
        Expect::Version(0) => None,
        Expect::Version(v) => Some(v),
        Expect::Current => store.get().await?.map(|r| r.version),
    };
    let next = expected.unwrap_or(0) + 1;
    if store.put(text, expected, now, by).await? {
        return Ok(next);
    }
    let stored = store.get().await?;
    // A write retried after its answer was lost (the first try landed): the stored version is
    // this very change.
    if let Some(r) = &stored
        && r.version == next
        && r.document == text
        && r.updated_by == by
    {
        return Ok(next);
    }
    Err(PolicyError::Conflict {
        now: stored.map_or(0, |r| r.version),
        expected: expected.unwrap_or(0),
    })
}

/// What `policy show` prints: the stored document with its version, or that none is stored.
pub fn describe(record: Option<&LiveRecord>) -> String {
    let Some(r) = record else {
        return "no live settings are stored (version 0): the deployment's own settings apply\n"
            .into();
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
        r.updated_at.map_or_else(
            || "at an unknown time".to_owned(),
            |at| at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
        ),
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
            set(
                &store,
                r#"{"breaker": {"min_calls": 20}}"#,
                Expect::Version(0),
                t(),
                "ann"
            )
            .await
            .unwrap(),
            1
        );
        assert_eq!(
            set(&store, "{}", Expect::Version(1), t(), "bob")
                .await
                .unwrap(),
            2
        );
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
        let e = set(
            &store,
            r#"{"send_rates": {"ses": 0}}"#,
            Expect::Current,
            t(),
            "ann",
        )
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
            set(&store, "{}", Expect::Current, t(), "ann").await,
            Err(PolicyError::Store(_))
        ));
        assert!(store.get().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_change_made_from_an_older_version_is_refused_and_force_overrides() {
        // GIVEN Ann and Bob both read version 1, and Bob stores his change first (version 2)
        let store = MemoryLiveSettings::default();
        set(&store, "{}", Expect::Version(0), t(), "ops")
            .await
            .unwrap();
        let bob = r#"{"breaker": {"min_calls": 30}}"#;
        assert_eq!(
            set(&store, bob, Expect::Version(1), t(), "bob")
                .await
                .unwrap(),
            2
        );
        // WHEN Ann stores hers, made from version 1
        let ann = r#"{"breaker": {"min_calls": 5}}"#;
        let e = set(&store, ann, Expect::Version(1), t(), "ann")
            .await
            .unwrap_err();
        // THEN it is refused, naming both versions, and Bob's stays
        assert!(
            matches!(
                e,
                PolicyError::Conflict {
                    now: 2,
                    expected: 1
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("--expect-version 2"), "{e}");
        assert_eq!(store.get().await.unwrap().unwrap().document, bob);
        // AND a first version made as if none were stored is refused too
        assert!(matches!(
            set(&store, ann, Expect::Version(0), t(), "ann").await,
            Err(PolicyError::Conflict {
                now: 2,
                expected: 0
            })
        ));
        // AND --force stores it over whatever is there
        assert_eq!(
            set(&store, ann, Expect::Current, t(), "ann").await.unwrap(),
            3
        );
        assert_eq!(store.get().await.unwrap().unwrap().document, ann);
    }

    #[tokio::test]
    async fn a_write_retried_after_its_answer_was_lost_is_not_a_conflict() {
        // GIVEN Ann's change landed as version 1 but her command never heard so
        let store = MemoryLiveSettings::default();
        let ann = r#"{"breaker": {"min_calls": 5}}"#;
        set(&store, ann, Expect::Version(0), t(), "ann")
            .await
            .unwrap();
        // WHEN the same change is written again from the same version
        // THEN it is version 1, stored once
        assert_eq!(
            set(&store, ann, Expect::Version(0), t(), "ann")
                .await
                .unwrap(),
            1
        );
        // AND another operator's same text is still a conflict (it is not their write)
        assert!(matches!(
            set(&store, ann, Expect::Version(0), t(), "bob").await,
            Err(PolicyError::Conflict { .. })
        ));
    }

    #[test]
    fn show_says_when_nothing_is_stored_and_flags_an_invalid_document() {
        assert!(describe(None).contains("the deployment's own settings apply"));
        let record = LiveRecord {
            document: r#"{"breaker": {"probes": 0}}"#.into(),
            version: 3,
            updated_at: Some(t()),
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
