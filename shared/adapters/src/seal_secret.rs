//! The retry envelope's seal keys from a secret ([`SecretSealKeys`]), and the scheduler that
//! seals every copy it puts back on the queue ([`SealingScheduler`]).
//!
//! The keys are read on first use (the functions' INIT reads them eagerly) and read again when
//! an envelope does not verify (a rotation: another instance already seals with the new key),
//! at most once a minute. The key never appears in `Debug`, logs or errors.

use std::sync::Arc;
use std::time::{Duration, Instant};

use courier_core::ports::{Requeue, RetryScheduler, SecretStore, StoreError};
use courier_core::seal::{SealKeys, seal};
use tracing::info;

/// The least time between two reads of the secret after a seal did not verify.
pub const REREAD_AFTER: Duration = Duration::from_secs(60);

/// The seal keys, from a secret or fixed (tests, the emulators' demo).
pub struct SecretSealKeys {
    source: Option<(String, Arc<dyn SecretStore>)>,
    current: std::sync::RwLock<Option<Arc<SealKeys>>>,
    /// When the secret was last read again after a failed check (`None`: never).
    last_reread: tokio::sync::Mutex<Option<Instant>>,
}

impl std::fmt::Debug for SecretSealKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let id = self.source.as_ref().map(|(id, _)| id.as_str());
        write!(f, "SecretSealKeys({id:?})")
    }
}

impl SecretSealKeys {
    /// Keys read from the secret `id` (`{"key": "...", "previous": [...]}`) when first needed.
    pub fn from_secret(id: &str, secrets: Arc<dyn SecretStore>) -> SecretSealKeys {
        SecretSealKeys {
            source: Some((id.to_owned(), secrets)),
            current: std::sync::RwLock::new(None),
            last_reread: tokio::sync::Mutex::new(None),
        }
    }

    /// Keys that are never read again.
    pub fn fixed(keys: SealKeys) -> SecretSealKeys {
        SecretSealKeys {
            source: None,
            current: std::sync::RwLock::new(Some(Arc::new(keys))),
            last_reread: tokio::sync::Mutex::new(None),
        }
    }

    /// The keys, read from the secret if not yet read.
    pub async fn keys(&self) -> Result<Arc<SealKeys>, StoreError> {
        if let Some(keys) = self.cached() {
            return Ok(keys);
        }
        self.read().await
    }

    /// Reads the secret again, unless it was read again within [`REREAD_AFTER`]: the new keys,
    /// or `None` when not read (fixed keys, too soon).
    pub async fn reread(&self) -> Result<Option<Arc<SealKeys>>, StoreError> {
        if self.source.is_none() {
            return Ok(None);
        }
        let mut last = self.last_reread.lock().await;
        if last.is_some_and(|at| at.elapsed() < REREAD_AFTER) {
            return Ok(None);
        }
        *last = Some(Instant::now());
        let keys = self.read().await?;
        info!("a retry envelope's seal did not verify; the seal keys were read again");
        Ok(Some(keys))
    }

    fn cached(&self) -> Option<Arc<SealKeys>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    async fn read(&self) -> Result<Arc<SealKeys>, StoreError> {
        let Some((id, secrets)) = &self.source else {
            return self
                .cached()
                .ok_or_else(|| StoreError::msg("GetSecretValue", "no seal keys"));
        };
        let text = secrets.secret_string(id).await?;
        let keys = Arc::new(SealKeys::parse(&text).map_err(|problem| {
            StoreError::msg("GetSecretValue", format!("key secret {id} {problem}"))
        })?);
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&keys));
        Ok(keys)
    }
}

/// A [`RetryScheduler`] that seals each copy's envelope before the inner scheduler puts it on
/// the queue or into a wait. Without the keys nothing is scheduled (each item fails).
pub struct SealingScheduler {
    inner: Arc<dyn RetryScheduler>,
    keys: Arc<SecretSealKeys>,
}

impl SealingScheduler {
    pub fn new(inner: Arc<dyn RetryScheduler>, keys: Arc<SecretSealKeys>) -> SealingScheduler {
        SealingScheduler { inner, keys }
    }
}

fn sealed(item: &Requeue, keys: &SealKeys) -> Requeue {
    Requeue {
        body: seal(&item.body, keys),
        ..item.clone()
    }
}

#[async_trait::async_trait]
impl RetryScheduler for SealingScheduler {
    async fn enqueue(&self, items: &[Requeue]) -> Vec<Result<(), StoreError>> {
        match self.keys.keys().await {
            Ok(keys) => {
                let items: Vec<Requeue> = items.iter().map(|i| sealed(i, &keys)).collect();
                self.inner.enqueue(&items).await
            }
            Err(e) => items
                .iter()
                .map(|_| Err(StoreError::msg(e.operation, e.message.clone())))
                .collect(),
        }
    }

    async fn start_wait(&self, item: &Requeue) -> Result<(), StoreError> {
        let keys = self.keys.keys().await?;
        self.inner.start_wait(&sealed(item, &keys)).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::smtp_secret::test_secrets::script;
    use courier_core::envelope::{next_body, parse_body};
    use courier_core::seal::{SealCheck, check};
    use std::sync::atomic::Ordering;

    fn secret(key: &str, previous: &[&str]) -> String {
        serde_json::json!({"key": key.repeat(32), "previous": previous.iter().map(|p| p.repeat(32)).collect::<Vec<_>>()}).to_string()
    }

    fn retry_body() -> String {
        let job = r#"{"version":1,"message_id":"m","campaign_id":"c","from":"a@b.co","to":["x@y.co"],"content":{"subject":"s","text":"t"}}"#;
        next_body(
            &parse_body(job.as_bytes()).unwrap(),
            Default::default(),
            vec![],
        )
    }

    /// Keeps what it is given.
    #[derive(Default)]
    struct Kept(std::sync::Mutex<Vec<Requeue>>);

    #[async_trait::async_trait]
    impl RetryScheduler for Kept {
        async fn enqueue(&self, items: &[Requeue]) -> Vec<Result<(), StoreError>> {
            self.0.lock().unwrap().extend_from_slice(items);
            items.iter().map(|_| Ok(())).collect()
        }
        async fn start_wait(&self, item: &Requeue) -> Result<(), StoreError> {
            self.0.lock().unwrap().push(item.clone());
            Ok(())
        }
    }

    #[tokio::test]
    async fn keys_are_read_once_then_again_at_most_once_a_minute() {
        let store = script(&[Ok(&secret("a", &[])), Ok(&secret("b", &["a"]))]);
        let keys = SecretSealKeys::from_secret("arn:seal", store.clone());
        let first = keys.keys().await.unwrap();
        let _ = keys.keys().await.unwrap();
        assert_eq!(store.reads.load(Ordering::SeqCst), 1, "cached");
        let rotated = keys.reread().await.unwrap().expect("read again");
        assert_ne!(first, rotated);
        assert_eq!(keys.keys().await.unwrap(), rotated);
        assert!(keys.reread().await.unwrap().is_none(), "not twice a minute");
        assert_eq!(store.reads.load(Ordering::SeqCst), 2);
        assert!(format!("{keys:?}").contains("arn:seal"));
        assert!(!format!("{keys:?}{rotated:?}").contains(&"b".repeat(32)));
    }

    #[tokio::test]
    async fn an_unreadable_or_malformed_secret_is_an_error_that_does_not_quote_it() {
        let keys = SecretSealKeys::from_secret("arn:seal", script(&[Err("AccessDenied")]));
        assert!(
            keys.keys()
                .await
                .unwrap_err()
                .to_string()
                .contains("AccessDenied")
        );
        let keys =
            SecretSealKeys::from_secret("arn:seal", script(&[Ok(r#"{"key":"short-secret"}"#)]));
        let err = keys.keys().await.unwrap_err().to_string();
        assert!(err.contains("arn:seal") && err.contains("shorter"), "{err}");
        assert!(!err.contains("short-secret"));
    }

    #[tokio::test]
    async fn the_scheduler_seals_what_it_enqueues_and_schedules_nothing_without_keys() {
        let kept = Arc::new(Kept::default());
        let keys = Arc::new(SecretSealKeys::from_secret(
            "s",
            script(&[Ok(&secret("a", &[]))]),
        ));
        let scheduler = SealingScheduler::new(kept.clone(), keys.clone());
        let item = Requeue {
            message_id: "m".into(),
            body: retry_body(),
            delay_secs: 5,
        };
        assert!(scheduler.enqueue(std::slice::from_ref(&item)).await[0].is_ok());
        scheduler.start_wait(&item).await.unwrap();
        let verify = keys.keys().await.unwrap();
        for copy in kept.0.lock().unwrap().iter() {
            assert_eq!(check(copy.body.as_bytes(), &verify), SealCheck::Verified);
            assert_eq!((copy.message_id.as_str(), copy.delay_secs), ("m", 5));
        }
        assert_eq!(kept.0.lock().unwrap().len(), 2);
        // Without keys, nothing reaches the queue and each item fails.
        let none = SealingScheduler::new(
            kept.clone(),
            Arc::new(SecretSealKeys::from_secret("s", script(&[Err("down")]))),
        );
        let results = none.enqueue(&[item.clone(), item.clone()]).await;
        assert!(results.iter().all(Result::is_err) && results.len() == 2);
        assert!(none.start_wait(&item).await.is_err());
        assert_eq!(kept.0.lock().unwrap().len(), 2);
    }
}
