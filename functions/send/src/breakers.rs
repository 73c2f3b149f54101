//! Circuit breakers, one per provider, whose state is shared by every concurrent instance through
//! a [`BreakerStore`] (DynamoDB), cached locally for `cache_ttl` so the hot path does not read it
//! per message, and written at most once per batch: results are counted locally and folded into
//! the shared state by [`Breakers::flush`] (a half-open probe's result is written at once).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use courier_core::breaker::{self, Admission, BreakerConfig, BreakerState, Mode, ModeChange};
use courier_core::ports::BreakerStore;
use tracing::{info, warn};

#[derive(Debug, Clone)]
struct Cached {
    state: BreakerState,
    fetched: Instant,
    /// Results seen by this instance and not yet written.
    unsaved_successes: u32,
    unsaved_failures: u32,
}

/// The breakers of all providers.
pub struct Breakers {
    store: Arc<dyn BreakerStore>,
    /// The thresholds in force (the live settings may change them).
    config: std::sync::RwLock<BreakerConfig>,
    cache_ttl: Duration,
    cache: Mutex<HashMap<String, Cached>>,
    /// Held while loading or writing, so concurrent records of one instance make one call.
    io: tokio::sync::Mutex<()>,
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
            config: std::sync::RwLock::new(config),
            cache_ttl,
            cache: Mutex::new(HashMap::new()),
            io: tokio::sync::Mutex::new(()),
            changes: Mutex::new(Vec::new()),
        }
    }

    /// The thresholds in force.
    pub fn config(&self) -> BreakerConfig {
        *self
            .config
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Changes the thresholds (live settings); the shared states keep their counts.
    pub fn set_config(&self, config: BreakerConfig) {
        *self
            .config
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = config;
    }

    fn with_cache<T>(&self, f: impl FnOnce(&mut HashMap<String, Cached>) -> T) -> T {
        let mut cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut cache)
    }

    fn fresh(&self, provider: &str) -> Option<Cached> {
        self.with_cache(|c| {
            c.get(provider)
                .filter(|c| c.fetched.elapsed() < self.cache_ttl)
                .cloned()
        })
    }

    /// Replaces the cached state (keeping results counted meanwhile unless `clear` says they are
    /// now written).
    fn store_state(&self, provider: &str, state: BreakerState, clear: Option<(u32, u32)>) {
        self.with_cache(|c| {
            let entry = c.entry(provider.to_owned()).or_insert_with(|| Cached {
                state: state.clone(),
                fetched: Instant::now(),
                unsaved_successes: 0,
                unsaved_failures: 0,
            });
            entry.state = state;
            entry.fetched = Instant::now();
            if let Some((s, f)) = clear {
                entry.unsaved_successes = entry.unsaved_successes.saturating_sub(s);
                entry.unsaved_failures = entry.unsaved_failures.saturating_sub(f);
            }
        });
    }

    async fn read(&self, provider: &str, now: DateTime<Utc>) -> Option<BreakerState> {
        match self.store.load(provider).await {
            Ok(state) => Some(state.unwrap_or_else(|| BreakerState::new(now, &self.config()))),
            Err(e) => {
                warn!(provider, error = %e, "breaker state unavailable; treating the circuit as closed");
                None
            }
        }
    }

    async fn state(&self, provider: &str, now: DateTime<Utc>) -> BreakerState {
        if let Some(c) = self.fresh(provider) {
            return c.state;
        }
        let _io = self.io.lock().await;
        if let Some(c) = self.fresh(provider) {
            return c.state;
        }
        match self.read(provider, now).await {
            Some(state) => {
                self.store_state(provider, state.clone(), None);
                state
            }
            // Fail open: a breaker store outage must not stop sending.
            None => BreakerState::new(now, &self.config()),
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

    /// A pause set from outside (the reputation guard opens `reputation:<domain>`): when it
    /// ends, while it lasts. Read through the same cache; never written from here.
    pub async fn paused(&self, key: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let state = self.state(key, now).await;
        if state.mode != Mode::Open {
            return None;
        }
        state.open_until.filter(|until| *until > now)
    }

    /// Whether a send to `provider` may go ahead now.
    pub async fn admit(&self, provider: &str, now: DateTime<Utc>) -> Admission {
        let state = self.state(provider, now).await;
        let (admission, next, change) = breaker::admit(&state, now, &self.config());
        if next == state {
            return admission;
        }
        // Moving to half-open or taking a probe slot is shared: write it conditionally.
        let expected = (state.version > 0).then_some(state.version);
        match self.store.save(provider, &next, expected).await {
            Ok(true) => {
                self.note(provider, change);
                self.store_state(provider, next, None);
                admission
            }
            Ok(false) | Err(_) => {
                // Someone else changed it first: re-read next time, and do not probe now.
                self.with_cache(|c| {
                    if let Some(e) = c.get_mut(provider) {
                        e.fetched = Instant::now() - self.cache_ttl - Duration::from_secs(1);
                    }
                });
                Admission::Reject {
                    retry_at: now + chrono::Duration::seconds(self.config().open_secs.max(1)),
                }
            }
        }
    }

    /// Records a send's result; `failed` only for failures that count against the provider.
    pub async fn record(&self, provider: &str, failed: bool, now: DateTime<Utc>) {
        let state = self.state(provider, now).await;
        let half_open = state.mode == Mode::HalfOpen;
        self.with_cache(|c| {
            if let Some(e) = c.get_mut(provider) {
                if half_open {
                    // Results counted before the circuit opened say nothing about the provider
                    // now (as results arriving while open): only the probe's may close it.
                    e.unsaved_successes = 0;
                    e.unsaved_failures = 0;
                }
                if failed {
                    e.unsaved_failures += 1;
                } else {
                    e.unsaved_successes += 1;
                }
            }
        });
        if half_open {
            // A probe's result decides the circuit: write it now.
            self.flush_one(provider, now).await;
        }
    }

    /// Folds this instance's counted results into the shared state: one read and one
    /// conditional write per provider that saw a failure or a probe (successes alone while
    /// closed are written only together with a failure, they cannot change the mode).
    pub async fn flush(&self, now: DateTime<Utc>) {
        let pending: Vec<String> = self.with_cache(|c| {
            c.iter()
                .filter(|(_, e)| e.unsaved_failures > 0)
                .map(|(p, _)| p.clone())
                .collect()
        });
        for provider in pending {
            self.flush_one(&provider, now).await;
        }
    }

    async fn flush_one(&self, provider: &str, now: DateTime<Utc>) {
        let _io = self.io.lock().await;
        let Some((successes, failures)) = self.with_cache(|c| {
            c.get(provider)
                .map(|e| (e.unsaved_successes, e.unsaved_failures))
        }) else {
            return;
        };
        if successes == 0 && failures == 0 {
            return;
        }
        for _ in 0..3 {
            let Some(fresh) = self.read(provider, now).await else {
                return;
            };
            let mut state = fresh.clone();
            let mut changes = Vec::new();
            // Beyond a few thousand, more successes change nothing but the loop's length.
            let results = std::iter::repeat_n(false, successes.min(5_000) as usize)
                .chain(std::iter::repeat_n(true, failures as usize));
            for failed in results {
                let (next, change) = breaker::record(&state, failed, now, &self.config());
                state = next;
                changes.extend(change);
            }
            let next = BreakerState {
                version: fresh.version + 1,
                ..state
            };
            let expected = (fresh.version > 0).then_some(fresh.version);
            match self.store.save(provider, &next, expected).await {
                Ok(true) => {
                    for change in changes {
                        self.note(provider, Some(change));
                    }
                    self.store_state(provider, next, Some((successes, failures)));
                    return;
                }
                Ok(false) => continue,
                Err(e) => {
                    warn!(provider, error = %e, "breaker state write failed; results kept for the next flush");
                    return;
                }
            }
        }
    }
}
