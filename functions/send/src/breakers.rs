//! Circuit breakers, one per provider, whose state is shared by every concurrent instance through
//! a [`BreakerStore`] (DynamoDB) and cached locally for `cache_ttl` so the hot path does not read
//! it per message. Successes while closed are counted locally and folded in with the next write.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use courier::breaker::{self, Admission, BreakerConfig, BreakerState, Mode, ModeChange};
use courier::ports::BreakerStore;
use tracing::{info, warn};

#[derive(Debug, Clone)]
struct Cached {
    state: BreakerState,
    fetched: Instant,
    /// Successes seen while closed, not yet written.
    unsaved_successes: u32,
}

/// The breakers of all providers.
pub struct Breakers {
    store: Arc<dyn BreakerStore>,
    config: BreakerConfig,
    cache_ttl: Duration,
    cache: Mutex<HashMap<String, Cached>>,
    /// Mode changes seen by this instance (for metrics).
    pub changes: Mutex<Vec<(String, ModeChange)>>,
}

impl Breakers {
    pub fn new(
        store: Arc<dyn BreakerStore>,
        config: BreakerConfig,
        cache_ttl: Duration,
    ) -> Breakers {
        Breakers {
            store,
            config,
            cache_ttl,
            cache: Mutex::new(HashMap::new()),
            changes: Mutex::new(Vec::new()),
        }
    }

    fn cached(&self, provider: &str) -> Option<Cached> {
        let cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        cache
            .get(provider)
            .filter(|c| c.fetched.elapsed() < self.cache_ttl)
            .cloned()
    }

    fn put_cache(&self, provider: &str, state: BreakerState, unsaved: u32) {
        let mut cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        cache.insert(
            provider.to_owned(),
            Cached {
                state,
                fetched: Instant::now(),
                unsaved_successes: unsaved,
            },
        );
    }

    async fn load(&self, provider: &str, now: DateTime<Utc>) -> Cached {
        if let Some(c) = self.cached(provider) {
            return c;
        }
        let unsaved = {
            let cache = self
                .cache
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            cache.get(provider).map_or(0, |c| c.unsaved_successes)
        };
        let state = match self.store.load(provider).await {
            Ok(Some(s)) => s,
            Ok(None) => BreakerState::new(now, &self.config),
            Err(e) => {
                // Fail open: a breaker store outage must not stop sending.
                warn!(provider, error = %e, "breaker state unavailable; treating the circuit as closed");
                BreakerState::new(now, &self.config)
            }
        };
        self.put_cache(provider, state.clone(), unsaved);
        Cached {
            state,
            fetched: Instant::now(),
            unsaved_successes: unsaved,
        }
    }

    fn note(&self, provider: &str, change: Option<ModeChange>) {
        if let Some(change) = change {
            info!(provider, from = ?change.from, to = ?change.to, "circuit breaker changed mode");
            self.changes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push((provider.to_owned(), change));
        }
    }

    /// Whether a send to `provider` may go ahead now.
    pub async fn admit(&self, provider: &str, now: DateTime<Utc>) -> Admission {
        let cached = self.load(provider, now).await;
        let (admission, next, change) = breaker::admit(&cached.state, now, &self.config);
        if next == cached.state {
            return admission;
        }
        // Moving to half-open or taking a probe slot is shared: write it conditionally.
        let expected = (cached.state.version > 0).then_some(cached.state.version);
        match self.store.save(provider, &next, expected).await {
            Ok(true) => {
                self.note(provider, change);
                self.put_cache(provider, next, cached.unsaved_successes);
                admission
            }
            Ok(false) | Err(_) => {
                // Someone else changed it first: re-read next time, and do not probe now.
                self.invalidate(provider);
                Admission::Reject {
                    retry_at: now + chrono::Duration::seconds(self.config.open_secs.max(1)),
                }
            }
        }
    }

    fn invalidate(&self, provider: &str) {
        let mut cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = cache.get_mut(provider) {
            c.fetched = Instant::now() - self.cache_ttl - Duration::from_secs(1);
        }
    }

    /// Records a send's result; `failed` only for failures that count against the provider.
    pub async fn record(&self, provider: &str, failed: bool, now: DateTime<Utc>) {
        let cached = self.load(provider, now).await;
        if !failed && cached.state.mode == Mode::Closed {
            self.put_cache(provider, cached.state, cached.unsaved_successes + 1);
            // keep the original fetch time: put_cache resets it, which only delays a refresh
            return;
        }
        for _ in 0..3 {
            let fresh = match self.store.load(provider).await {
                Ok(s) => s.unwrap_or_else(|| BreakerState::new(now, &self.config)),
                Err(e) => {
                    warn!(provider, error = %e, "breaker state unavailable; result not recorded");
                    return;
                }
            };
            let mut state = fresh.clone();
            if state.mode == Mode::Closed {
                for _ in 0..cached.unsaved_successes {
                    state = breaker::record(&state, false, now, &self.config).0;
                }
            }
            let (next, change) = breaker::record(&state, failed, now, &self.config);
            let expected = (fresh.version > 0).then_some(fresh.version);
            let next = BreakerState {
                version: fresh.version + 1,
                ..next
            };
            match self.store.save(provider, &next, expected).await {
                Ok(true) => {
                    self.note(provider, change);
                    self.put_cache(provider, next, 0);
                    return;
                }
                Ok(false) => continue,
                Err(e) => {
                    warn!(provider, error = %e, "breaker state write failed");
                    return;
                }
            }
        }
    }
}
