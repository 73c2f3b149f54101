//! What the send pipeline calls besides the status store: the mailer, the retry scheduler,
//! the dead-letter sink, the suppression and poison lists, templates and breaker state.

use super::*;
use courier_core::unsubscribe::{Scope, suppression_key};

/// What a [`MemoryMailer`] does with a message.
pub type Behaviour = Box<dyn Fn(&OutgoingEmail) -> Result<Receipt, SendFailure> + Send + Sync>;

/// A mailer that records what it was asked to send and answers per a behaviour function.
pub struct MemoryMailer {
    provider: Provider,
    behaviour: Behaviour,
    pub sent: Mutex<Vec<OutgoingEmail>>,
}

impl MemoryMailer {
    /// Accepts everything instantly.
    pub fn accepting(provider: Provider) -> MemoryMailer {
        MemoryMailer::with(
            provider,
            Box::new(|e| Ok(Receipt::new(format!("mem-{}", e.message_id)))),
        )
    }

    pub fn with(provider: Provider, behaviour: Behaviour) -> MemoryMailer {
        MemoryMailer {
            provider,
            behaviour,
            sent: Mutex::new(Vec::new()),
        }
    }

    pub fn sent_count(&self) -> usize {
        lock(&self.sent).len()
    }
}

#[async_trait::async_trait]
impl Mailer for MemoryMailer {
    fn provider(&self) -> Provider {
        self.provider
    }

    async fn send(&self, email: &OutgoingEmail) -> Result<Receipt, SendFailure> {
        lock(&self.sent).push(email.clone());
        (self.behaviour)(email)
    }
}

/// Records re-enqueues and started waits.
#[derive(Debug, Default)]
pub struct MemoryScheduler {
    pub queued: Mutex<Vec<Requeue>>,
    pub waits: Mutex<Vec<Requeue>>,
    pub fail_enqueues: FailNext,
    pub batches: AtomicUsize,
}

#[async_trait::async_trait]
impl RetryScheduler for MemoryScheduler {
    async fn enqueue(&self, items: &[Requeue]) -> Vec<Result<(), StoreError>> {
        self.batches.fetch_add(1, Ordering::Relaxed);
        items
            .iter()
            .map(|item| {
                self.fail_enqueues.take("enqueue")?;
                lock(&self.queued).push(item.clone());
                Ok(())
            })
            .collect()
    }

    async fn start_wait(&self, item: &Requeue) -> Result<(), StoreError> {
        self.fail_enqueues.take("start_wait")?;
        lock(&self.waits).push(item.clone());
        Ok(())
    }
}

/// Collects dead letters.
#[derive(Debug, Default)]
pub struct MemoryDeadLetters {
    pub letters: Mutex<Vec<DeadLetter>>,
    pub fail_puts: FailNext,
}

#[async_trait::async_trait]
impl DeadLetterSink for MemoryDeadLetters {
    async fn put(&self, letter: &DeadLetter) -> Result<(), StoreError> {
        self.fail_puts.take("dead_letter")?;
        lock(&self.letters).push(letter.clone());
        Ok(())
    }
}

/// A suppression list in a map (suppression keys -> reason; see
/// [`courier_core::unsubscribe::suppression_key`]).
#[derive(Debug, Default)]
pub struct MemorySuppressionList {
    /// Address (lower-cased) -> reason.
    pub entries: Mutex<BTreeMap<String, String>>,
    /// Soft entries' expiry.
    pub expiries: Mutex<BTreeMap<String, DateTime<Utc>>>,
    /// Fails the next writes (`suppress`, `suppress_until`), before their effect.
    pub fail_writes: FailNext,
}

impl MemorySuppressionList {
    /// Whether `address` is suppressed at `now`.
    pub fn is_suppressed(&self, address: &str, now: DateTime<Utc>) -> bool {
        let key = courier_core::mailbox::address_key(address);
        lock(&self.entries).contains_key(&key)
            && lock(&self.expiries)
                .get(&key)
                .is_none_or(|until| *until > now)
    }
}

#[async_trait::async_trait]
impl SuppressionList for MemorySuppressionList {
    async fn suppressed(
        &self,
        addresses: &[String],
        now: DateTime<Utc>,
    ) -> Result<Vec<String>, StoreError> {
        Ok(addresses
            .iter()
            .filter(|a| self.is_suppressed(a, now))
            .cloned()
            .collect())
    }

    async fn suppress_until(
        &self,
        address: &str,
        reason: &str,
        _now: DateTime<Utc>,
        until: Option<DateTime<Utc>>,
    ) -> Result<(), StoreError> {
        self.fail_writes.take("suppress")?;
        let key = courier_core::mailbox::address_key(address);
        lock(&self.entries).insert(key.clone(), reason.to_owned());
        match until {
            Some(t) => lock(&self.expiries).insert(key, t),
            None => lock(&self.expiries).remove(&key),
        };
        Ok(())
    }

    async fn suppress_soft(
        &self,
        address: &str,
        reason: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let key = courier_core::mailbox::address_key(address);
        let listed = lock(&self.entries).contains_key(&key);
        let current = lock(&self.expiries).get(&key).copied();
        match (listed, current) {
            // A hard entry, or a soft one that lasts at least as long.
            (true, None) => return Ok(false),
            (true, Some(t)) if t >= until => return Ok(false),
            _ => {}
        }
        self.suppress_until(address, reason, now, Some(until))
            .await
            .map(|()| true)
    }

    async fn remove(&self, address: &str) -> Result<bool, StoreError> {
        let key = courier_core::mailbox::address_key(address);
        lock(&self.expiries).remove(&key);
        Ok(lock(&self.entries).remove(&key).is_some())
    }

    async fn unsubscribed(
        &self,
        addresses: &[String],
        list: &str,
    ) -> Result<Vec<String>, StoreError> {
        let scope = Scope::List(list.to_owned());
        let entries = lock(&self.entries);
        Ok(addresses
            .iter()
            .filter(|a| entries.contains_key(&suppression_key(a, &scope)))
            .cloned()
            .collect())
    }

    async fn unsubscribe(
        &self,
        address: &str,
        scope: &Scope,
        _now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let key = suppression_key(address, scope);
        let mut entries = lock(&self.entries);
        let mut expiries = lock(&self.expiries);
        // Absent, or a soft entry: written; a hard entry (or this unsubscription) is kept.
        if entries.contains_key(&key) && !expiries.contains_key(&key) {
            return Ok(false);
        }
        expiries.remove(&key);
        entries.insert(key, courier_core::unsubscribe::REASON.to_owned());
        Ok(true)
    }

    async fn remove_from_list(&self, address: &str, list: &str) -> Result<bool, StoreError> {
        let key = suppression_key(address, &Scope::List(list.to_owned()));
        Ok(lock(&self.entries).remove(&key).is_some())
    }

    async fn list(
        &self,
        limit: usize,
        cursor: Option<String>,
    ) -> Result<(Vec<courier_core::ports::SuppressionEntry>, Option<String>), StoreError> {
        let entries = lock(&self.entries);
        let expiries = lock(&self.expiries);
        let mut last_key: Option<String> = None;
        let page: Vec<courier_core::ports::SuppressionEntry> = entries
            .iter()
            .filter(|(a, _)| cursor.as_ref().is_none_or(|c| *a > c))
            .take(limit.max(1))
            .map(|(key, r)| {
                (
                    key.clone(),
                    courier_core::ports::SuppressionEntry::from_key(
                        key,
                        r.clone(),
                        DateTime::default(),
                        expiries.get(key).copied(),
                    ),
                )
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|(key, entry)| {
                last_key = Some(key);
                entry
            })
            .collect();
        let next = last_key.filter(|last| entries.keys().next_back() != Some(last));
        Ok((page, next))
    }
}

/// A poison blocklist in a set.
#[derive(Debug, Default)]
pub struct MemoryPoisonList {
    pub fingerprints: Mutex<HashSet<String>>,
}

#[async_trait::async_trait]
impl PoisonList for MemoryPoisonList {
    async fn is_blocked(&self, fingerprint: &str) -> Result<bool, StoreError> {
        Ok(lock(&self.fingerprints).contains(fingerprint))
    }

    async fn block(
        &self,
        fingerprint: &str,
        _reason: &str,
        _now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        lock(&self.fingerprints).insert(fingerprint.to_owned());
        Ok(())
    }
}

/// Templates in a map.
#[derive(Debug, Default)]
pub struct MemoryTemplates {
    pub templates: Mutex<HashMap<String, Template>>,
}

#[async_trait::async_trait]
impl TemplateStore for MemoryTemplates {
    async fn get(&self, id: &str) -> Result<Template, TemplateError> {
        lock(&self.templates)
            .get(id)
            .cloned()
            .ok_or_else(|| TemplateError::NotFound(id.to_owned()))
    }
}

/// Breaker states in a map, with the same version check as DynamoDB's conditional write.
#[derive(Debug, Default)]
pub struct MemoryBreakerStore {
    pub states: Mutex<HashMap<String, BreakerState>>,
    /// Reads and writes made (the shared state's cost).
    pub loads: AtomicUsize,
    pub saves: AtomicUsize,
}

#[async_trait::async_trait]
impl BreakerStore for MemoryBreakerStore {
    async fn load(&self, provider: &str) -> Result<Option<BreakerState>, StoreError> {
        self.loads.fetch_add(1, Ordering::Relaxed);
        Ok(lock(&self.states).get(provider).cloned())
    }

    async fn save(
        &self,
        provider: &str,
        state: &BreakerState,
        expected: Option<u64>,
    ) -> Result<bool, StoreError> {
        self.saves.fetch_add(1, Ordering::Relaxed);
        let mut states = lock(&self.states);
        let current = states.get(provider).map(|s| s.version);
        if current != expected {
            return Ok(false);
        }
        states.insert(provider.to_owned(), state.clone());
        Ok(true)
    }
}
