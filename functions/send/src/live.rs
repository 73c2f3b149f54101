//! This instance's side of the live settings (`courier_core::live`): the document read at most
//! once per cache period (`COURIER_LIVE_SETTINGS_CACHE`), validated against the deployment's own
//! settings, and put in force (breaker thresholds, send rates, per-destination pacing, the retry
//! policy). A document that does not validate is refused and the last good settings stay; a
//! failed read keeps them too, and is tried again after the next period.

use std::sync::Arc;

use chrono::{DateTime, Utc};
pub use courier_adapters::live_settings::LiveRead;
use courier_adapters::live_settings::LiveSettingsReader;
use courier_core::live::Baseline;
use courier_core::policy::RetryPolicy;
use courier_core::ports::LiveSettingsStore;

use crate::breakers::Breakers;
use crate::governor::Governor;

/// The live settings as this instance has them.
pub struct Live {
    reader: LiveSettingsReader,
    policy: std::sync::RwLock<Option<Arc<RetryPolicy>>>,
}

impl Live {
    pub fn new(
        store: Arc<dyn LiveSettingsStore>,
        every: chrono::Duration,
        baseline: Baseline,
    ) -> Live {
        Live {
            reader: LiveSettingsReader::new(store, every, baseline),
            policy: std::sync::RwLock::new(None),
        }
    }

    /// The retry policy in force when the live settings name one.
    pub fn policy(&self) -> Option<Arc<RetryPolicy>> {
        self.policy
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Reads the document when it is due and puts a new valid version in force on `breakers`
    /// and `governor`; `None` when nothing was due or nothing changed.
    pub async fn refresh(
        &self,
        now: DateTime<Utc>,
        breakers: &Breakers,
        governor: &Governor,
    ) -> Option<LiveRead> {
        let read = self.reader.refresh(now).await?;
        if let LiveRead::Applied { effective, .. } = &read {
            breakers.set_config(effective.breaker);
            governor.set_live_rates(effective.send_rates.clone());
            governor.set_destination_pacing(effective.destination_pacing);
            *self
                .policy
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) =
                Some(Arc::new(effective.policy.clone()));
        }
        Some(read)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use courier_core::breaker::BreakerConfig;
    use courier_core::ports::LiveSettingsStore;
    use courier_core::rate::RateLimit;
    use courier_devkit::memory::{MemoryBreakerStore, MemoryLiveSettings, MemorySendSchedule};
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn baseline() -> Baseline {
        Baseline::default()
    }

    struct World {
        store: Arc<MemoryLiveSettings>,
        live: Live,
        breakers: Breakers,
        governor: Governor,
    }

    fn world() -> World {
        let store = Arc::new(MemoryLiveSettings::default());
        let ses = RateLimit::per_second(10.0).unwrap();
        World {
            live: Live::new(store.clone(), chrono::Duration::seconds(30), baseline()),
            store,
            breakers: Breakers::new(
                Arc::new(MemoryBreakerStore::default()),
                BreakerConfig::default(),
                Duration::from_secs(2),
            ),
            governor: Governor::new(
                Arc::new(MemorySendSchedule::default()),
                BTreeMap::from([("ses".to_owned(), ses)]),
            ),
        }
    }

    impl World {
        async fn refresh(&self, at: i64) -> Option<LiveRead> {
            self.live
                .refresh(t(at), &self.breakers, &self.governor)
                .await
        }

        async fn write(&self, document: &str) {
            let current = self.store.get().await.unwrap().map(|r| r.version);
            assert!(
                self.store
                    .put(document, current, t(0), "test")
                    .await
                    .unwrap()
            );
        }
    }

    #[tokio::test]
    async fn a_change_is_in_force_after_the_cache_period_and_removing_it_restores_the_deployments()
    {
        let w = world();
        // GIVEN nothing stored: the deployment's settings stay, nothing to apply
        assert!(w.refresh(0).await.is_none());
        assert!(w.live.policy().is_none());
        // WHEN an operator changes the breaker and SES's rate
        w.write(r#"{"breaker": {"min_calls": 25}, "send_rates": {"ses": 2}}"#)
            .await;
        // THEN nothing changes within the cache period
        assert!(w.refresh(10).await.is_none());
        assert_eq!(w.breakers.config().min_calls, 10);
        // AND after it the change is in force
        assert!(matches!(
            w.refresh(30).await,
            Some(LiveRead::Applied { version: 1, .. })
        ));
        assert_eq!(w.breakers.config().min_calls, 25);
        assert_eq!(w.governor.limit("ses").unwrap().per_sec, 2.0);
        // AND an unchanged document is not applied again
        assert!(w.refresh(60).await.is_none());
        // AND an empty document brings the deployment's settings back
        w.write("{}").await;
        assert!(matches!(
            w.refresh(90).await,
            Some(LiveRead::Applied { version: 2, .. })
        ));
        assert_eq!(w.breakers.config().min_calls, 10);
        assert_eq!(w.governor.limit("ses").unwrap().per_sec, 10.0);
    }

    #[tokio::test]
    async fn a_bad_change_is_refused_once_and_the_last_good_settings_stay() {
        let w = world();
        w.write(r#"{"breaker": {"min_calls": 25}}"#).await;
        w.refresh(0).await;
        w.write(r#"{"breaker": {"failure_ratio": 7}}"#).await;
        match w.refresh(30).await {
            Some(LiveRead::Refused { version: 2, error }) => {
                assert!(
                    error.to_string().contains("breaker.failure_ratio"),
                    "{error}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(w.breakers.config().min_calls, 25);
        // reported once per version
        assert!(w.refresh(60).await.is_none());
        // a fixed version is taken
        w.write(r#"{"breaker": {"failure_ratio": 0.7}}"#).await;
        assert!(matches!(
            w.refresh(90).await,
            Some(LiveRead::Applied { version: 3, .. })
        ));
        assert_eq!(w.breakers.config().failure_ratio, 0.7);
    }

    #[tokio::test]
    async fn a_version_number_written_again_with_another_document_is_a_change() {
        let w = world();
        w.write(r#"{"breaker": {"min_calls": 25}}"#).await;
        w.refresh(0).await;
        assert_eq!(w.breakers.config().min_calls, 25);
        // WHEN the item is deleted by hand and written anew before the next read: version 1
        // again, with another document
        *w.store.record.lock().unwrap() = None;
        w.write(r#"{"breaker": {"min_calls": 40}}"#).await;
        // THEN it is put in force
        assert!(matches!(
            w.refresh(30).await,
            Some(LiveRead::Applied { version: 1, .. })
        ));
        assert_eq!(w.breakers.config().min_calls, 40);
        // AND deleted: the deployment's settings come back
        let kept = w.store.record.lock().unwrap().take();
        assert!(matches!(
            w.refresh(60).await,
            Some(LiveRead::Applied { version: 0, .. })
        ));
        assert_eq!(w.breakers.config().min_calls, 10);
        *w.store.record.lock().unwrap() = kept;
        w.refresh(90).await;
        assert_eq!(w.breakers.config().min_calls, 40);
        // AND a hand edit of the document that keeps its version is read too
        w.store.record.lock().unwrap().as_mut().unwrap().document =
            r#"{"breaker": {"probes": 0}}"#.into();
        assert!(matches!(
            w.refresh(120).await,
            Some(LiveRead::Refused { version: 1, .. })
        ));
        assert_eq!(w.breakers.config().min_calls, 40);
        assert!(w.refresh(150).await.is_none());
    }

    #[tokio::test]
    async fn a_failed_read_keeps_the_settings_and_is_tried_again_next_period() {
        let w = world();
        w.write(r#"{"send_rates": {"ses": "off"}}"#).await;
        w.refresh(0).await;
        assert_eq!(w.governor.limit("ses"), None);
        w.store.fail.set(1);
        assert!(matches!(w.refresh(30).await, Some(LiveRead::Failed(_))));
        assert_eq!(w.governor.limit("ses"), None);
        assert!(w.refresh(45).await.is_none());
        w.write(r#"{"send_rates": {"ses": 3}}"#).await;
        assert!(matches!(
            w.refresh(60).await,
            Some(LiveRead::Applied { .. })
        ));
        assert_eq!(w.governor.limit("ses").unwrap().per_sec, 3.0);
    }
}
