//! In-memory adapters of every port, for unit tests of the pure logic and for benchmarks.
//! They follow the same rules as the AWS adapters (the claim uses [`judge_claim`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::{DateTime, Utc};

use courier_core::breaker::BreakerState;
use courier_core::ports::{
    BreakerStore, ClaimJudgement, ClaimOutcome, ClaimRequest, Clock, DeadLetter, DeadLetterSink,
    HistoryEntry, JobRecord, Mailer, OpenState, OutgoingEmail, PoisonList, Receipt,
    ReputationStore, Requeue, Resend, RetryScheduler, SendFailure, SendSchedule, Sightings,
    StatusStore, StatusUpdate, StoreError, SuppressionList, SweepMark, Template, TemplateError,
    TemplateStore, judge_claim,
};
use courier_core::status::Status;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A switch to make calls of an adapter fail, for error-path tests: after `skip` more calls
/// succeed, the next `fail` calls fail.
#[derive(Debug, Default)]
pub struct FailNext {
    skip: AtomicUsize,
    fail: AtomicUsize,
}

impl FailNext {
    /// The next `calls` calls fail.
    pub fn set(&self, calls: usize) {
        self.set_after(0, calls);
    }

    /// `skip` calls succeed, then `fail` calls fail (a crash at a chosen step).
    pub fn set_after(&self, skip: usize, fail: usize) {
        self.skip.store(skip, Ordering::SeqCst);
        self.fail.store(fail, Ordering::SeqCst);
    }

    fn take(&self, operation: &'static str) -> Result<(), StoreError> {
        if self.fail.load(Ordering::SeqCst) == 0 {
            return Ok(());
        }
        let skip = self.skip.load(Ordering::SeqCst);
        if skip > 0 {
            self.skip.store(skip - 1, Ordering::SeqCst);
            return Ok(());
        }
        self.fail.fetch_sub(1, Ordering::SeqCst);
        Err(StoreError::msg(operation, "injected failure"))
    }
}

/// Status records in a map; claims check `suppression` like the DynamoDB store's transaction.
#[derive(Debug, Default)]
pub struct MemoryStatusStore {
    pub records: Mutex<HashMap<String, JobRecord>>,
    pub suppression: Option<std::sync::Arc<MemorySuppressionList>>,
    pub fail_claims: FailNext,
    pub fail_finishes: FailNext,
    pub writes: AtomicUsize,
}

#[async_trait::async_trait]
impl StatusStore for MemoryStatusStore {
    async fn claim(&self, req: &ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        self.fail_claims.take("claim")?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        let mut records = lock(&self.records);
        let existing = records.get(&req.message_id).cloned();
        let judgement = judge_claim(existing.as_ref(), req);
        if !matches!(judgement, ClaimJudgement::Refuse(_))
            && let Some(list) = &self.suppression
        {
            let hit: Vec<String> = req
                .check_suppressed
                .iter()
                .filter(|a| list.is_suppressed(a, req.now))
                .cloned()
                .collect();
            if !hit.is_empty() {
                return Ok(ClaimOutcome::Suppressed(hit));
            }
        }
        match judgement {
            ClaimJudgement::Take => {
                let mut rec = existing.unwrap_or_else(|| {
                    JobRecord::new(&req.message_id, Status::Processing, req.attempt, req.now)
                });
                rec.status = Status::Processing;
                rec.attempt = req.attempt;
                rec.lease_owner = Some(req.owner.clone());
                rec.lease_until = Some(req.lease_until);
                rec.unknown_since = None;
                rec.updated_at = req.now;
                rec.history.push(HistoryEntry {
                    at: req.now,
                    status: Status::Processing,
                    attempt: req.attempt,
                    by: "send".into(),
                    detail: Some(format!("claimed by {}", req.owner)),
                });
                records.insert(req.message_id.clone(), rec);
                Ok(ClaimOutcome::Claimed)
            }
            ClaimJudgement::Refuse(outcome) => Ok(outcome),
            ClaimJudgement::MarkUnknown => {
                if let Some(rec) = records.get_mut(&req.message_id) {
                    rec.status = Status::Unknown;
                    rec.unknown_since = Some(req.now);
                    rec.lease_owner = None;
                    rec.updated_at = req.now;
                    rec.history.push(HistoryEntry {
                        at: req.now,
                        status: Status::Unknown,
                        attempt: rec.attempt,
                        by: "send".into(),
                        detail: Some("the lease expired mid-send".into()),
                    });
                }
                Ok(ClaimOutcome::Ambiguous {
                    resolve_at: req.now + req.grace,
                })
            }
        }
    }

    async fn finish(&self, update: &StatusUpdate) -> Result<(), StoreError> {
        self.fail_finishes.take("finish")?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        let mut records = lock(&self.records);
        let rec = records
            .get_mut(&update.message_id)
            .ok_or_else(|| StoreError::msg("finish", "no record"))?;
        let ours = rec.lease_owner.as_deref() == Some(update.owner.as_str());
        if !ours && rec.status != Status::Unknown {
            return Err(StoreError::msg("finish", "lease lost"));
        }
        apply(rec, update);
        Ok(())
    }

    async fn record(&self, update: &StatusUpdate) -> Result<(), StoreError> {
        self.fail_finishes.take("record")?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        let mut records = lock(&self.records);
        if let Some(rec) = records.get(&update.message_id)
            && courier_core::status::transition(rec.status, update.status)
                != Ok(courier_core::status::Transition::Applied)
        {
            return Ok(());
        }
        let rec = records.entry(update.message_id.clone()).or_insert_with(|| {
            JobRecord::new(
                &update.message_id,
                update.status,
                update.attempt,
                update.now,
            )
        });
        // As the DynamoDB store: a provider message id is kept where the record has one.
        let kept = rec.provider_message_id.clone();
        apply(rec, update);
        if kept.is_some() {
            rec.provider_message_id = kept;
        }
        Ok(())
    }

    async fn get(&self, message_id: &str) -> Result<Option<JobRecord>, StoreError> {
        Ok(lock(&self.records).get(message_id).cloned())
    }

    async fn find_by_provider_message_id(
        &self,
        provider_message_id: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(lock(&self.records)
            .values()
            .find(|r| r.provider_message_id.as_deref() == Some(provider_message_id))
            .map(|r| r.message_id.clone()))
    }

    async fn note(&self, message_id: &str, entry: &HistoryEntry) -> Result<bool, StoreError> {
        self.fail_finishes.take("note")?;
        let mut records = lock(&self.records);
        match records.get_mut(message_id) {
            Some(rec) if rec.status == entry.status && rec.attempt == entry.attempt => {
                self.writes.fetch_add(1, Ordering::Relaxed);
                rec.history.push(entry.clone());
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn reopen(
        &self,
        message_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<u32>, StoreError> {
        let mut records = lock(&self.records);
        match records.get_mut(message_id) {
            Some(rec) if rec.status == Status::DeadLettered => {
                rec.status = Status::Pending;
                rec.attempt += 1;
                rec.updated_at = now;
                rec.history.push(HistoryEntry {
                    at: now,
                    status: Status::Pending,
                    attempt: rec.attempt,
                    by: "operator".into(),
                    detail: Some("replayed from the dead letters".into()),
                });
                Ok(Some(rec.attempt))
            }
            _ => Ok(None),
        }
    }

    async fn resend(&self, resend: &Resend) -> Result<bool, StoreError> {
        self.fail_finishes.take("resend")?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        let mut records = lock(&self.records);
        match records.get_mut(&resend.message_id) {
            Some(rec)
                if rec.attempt == resend.attempt
                    && matches!(
                        rec.status,
                        Status::SentToProvider | Status::BouncedTransient
                    ) =>
            {
                rec.status = Status::Deferred;
                rec.attempt += 1;
                rec.updated_at = resend.now;
                rec.resend_of = Some(resend.bounced.clone());
                rec.history.push(HistoryEntry {
                    at: resend.now,
                    status: Status::Deferred,
                    attempt: rec.attempt,
                    by: "events".into(),
                    detail: Some(resend.detail.clone()),
                });
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn open_before(
        &self,
        state: OpenState,
        before: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<JobRecord>, StoreError> {
        let records = lock(&self.records);
        let mut found: Vec<JobRecord> = records
            .values()
            .filter(|r| {
                r.swept_at.is_none()
                    && OpenState::of(r.status, r.provider.as_deref()) == Some(state)
                    && r.updated_at < before
            })
            .cloned()
            .collect();
        found.sort_by_key(|r| r.updated_at);
        found.truncate(limit);
        Ok(found)
    }

    async fn sweep(
        &self,
        found: &JobRecord,
        mark: SweepMark,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.fail_finishes.take("sweep")?;
        let mut records = lock(&self.records);
        let Some(rec) = records.get_mut(&found.message_id) else {
            return Ok(false);
        };
        if rec.status != found.status || rec.updated_at != found.updated_at {
            return Ok(false);
        }
        self.writes.fetch_add(1, Ordering::Relaxed);
        match mark {
            SweepMark::LeaseExpired => {
                if rec.status != Status::Processing || rec.lease_until.is_some_and(|l| l > now) {
                    return Ok(false);
                }
                rec.status = Status::Unknown;
                rec.unknown_since = Some(now);
                rec.lease_owner = None;
                rec.lease_until = None;
                rec.updated_at = now;
                rec.history.push(HistoryEntry {
                    at: now,
                    status: Status::Unknown,
                    attempt: rec.attempt,
                    by: "sweeper".into(),
                    detail: Some("still processing long after its lease expired".into()),
                });
            }
            SweepMark::NoOutcome => {
                rec.swept_at = Some(now);
                rec.history.push(HistoryEntry {
                    at: now,
                    status: rec.status,
                    attempt: rec.attempt,
                    by: "sweeper".into(),
                    detail: Some("no delivery, bounce or complaint event arrived".into()),
                });
            }
        }
        Ok(true)
    }
}

fn apply(rec: &mut JobRecord, update: &StatusUpdate) {
    rec.history.push(HistoryEntry {
        at: update.now,
        status: update.status,
        attempt: rec.attempt.max(update.attempt),
        by: update.owner.clone(),
        detail: update.detail.clone(),
    });
    if update.payload.is_some() {
        rec.payload.clone_from(&update.payload);
    }
    if update.status == Status::Unknown {
        rec.unknown_since = Some(update.now);
    }
    rec.status = update.status;
    rec.attempt = rec.attempt.max(update.attempt);
    rec.lease_owner = None;
    rec.lease_until = None;
    rec.updated_at = update.now;
    if update.provider.is_some() {
        rec.provider.clone_from(&update.provider);
    }
    if update.provider_message_id.is_some() {
        rec.provider_message_id
            .clone_from(&update.provider_message_id);
    }
}

/// What a [`MemoryMailer`] does with a message.
pub type Behaviour = Box<dyn Fn(&OutgoingEmail) -> Result<Receipt, SendFailure> + Send + Sync>;

/// A mailer that records what it was asked to send and answers per a behaviour function.
pub struct MemoryMailer {
    name: String,
    behaviour: Behaviour,
    pub sent: Mutex<Vec<OutgoingEmail>>,
}

impl MemoryMailer {
    /// Accepts everything instantly.
    pub fn accepting(name: &str) -> MemoryMailer {
        MemoryMailer::with(
            name,
            Box::new(|e| {
                Ok(Receipt {
                    provider_message_id: format!("mem-{}", e.message_id),
                })
            }),
        )
    }

    pub fn with(name: &str, behaviour: Behaviour) -> MemoryMailer {
        MemoryMailer {
            name: name.to_owned(),
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
    fn name(&self) -> &str {
        &self.name
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

/// A suppression list in a map (lower-cased addresses -> reason).
#[derive(Debug, Default)]
pub struct MemorySuppressionList {
    /// Address (lower-cased) -> reason.
    pub entries: Mutex<BTreeMap<String, String>>,
    /// Soft entries' expiry.
    pub expiries: Mutex<BTreeMap<String, DateTime<Utc>>>,
}

impl MemorySuppressionList {
    /// Whether `address` is suppressed at `now`.
    pub fn is_suppressed(&self, address: &str, now: DateTime<Utc>) -> bool {
        let key = address.trim().to_lowercase();
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
        let key = address.trim().to_lowercase();
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
        let key = address.trim().to_lowercase();
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
        let key = address.trim().to_lowercase();
        lock(&self.expiries).remove(&key);
        Ok(lock(&self.entries).remove(&key).is_some())
    }

    async fn list(
        &self,
        limit: usize,
        cursor: Option<String>,
    ) -> Result<(Vec<courier_core::ports::SuppressionEntry>, Option<String>), StoreError> {
        let entries = lock(&self.entries);
        let expiries = lock(&self.expiries);
        let page: Vec<courier_core::ports::SuppressionEntry> = entries
            .iter()
            .filter(|(a, _)| cursor.as_ref().is_none_or(|c| *a > c))
            .take(limit.max(1))
            .map(|(a, r)| courier_core::ports::SuppressionEntry {
                address: a.clone(),
                reason: r.clone(),
                suppressed_at: DateTime::default(),
                expires_at: expiries.get(a).copied(),
            })
            .collect();
        let next = page
            .last()
            .filter(|last| entries.keys().next_back() != Some(&last.address))
            .map(|l| l.address.clone());
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

/// A clock that stands still until moved.
#[derive(Debug)]
pub struct ManualClock(Mutex<DateTime<Utc>>);

impl ManualClock {
    pub fn new(at: DateTime<Utc>) -> ManualClock {
        ManualClock(Mutex::new(at))
    }

    pub fn advance(&self, secs: i64) {
        let mut t = lock(&self.0);
        *t += chrono::Duration::seconds(secs);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *lock(&self.0)
    }
}

/// One message of a [`MemoryLetterQueue`].
#[derive(Debug, Clone)]
pub struct QueuedCopy {
    pub id: String,
    pub body: String,
    pub sent_at: DateTime<Utc>,
    pub visible_at: DateTime<Utc>,
    pub receipt: Option<String>,
}

/// A dead-letter queue in memory with SQS's visibility semantics on the given clock.
pub struct MemoryLetterQueue {
    clock: std::sync::Arc<dyn Clock>,
    pub messages: Mutex<Vec<QueuedCopy>>,
    receipts: AtomicUsize,
    pub fail_deletes: FailNext,
}

impl MemoryLetterQueue {
    pub fn new(clock: std::sync::Arc<dyn Clock>) -> Self {
        MemoryLetterQueue {
            clock,
            messages: Mutex::new(Vec::new()),
            receipts: AtomicUsize::new(0),
            fail_deletes: FailNext::default(),
        }
    }

    pub fn push(&self, body: String) {
        let now = self.clock.now();
        let mut m = lock(&self.messages);
        let id = format!("q{}", m.len());
        m.push(QueuedCopy {
            id,
            body,
            sent_at: now,
            visible_at: now,
            receipt: None,
        });
    }

    /// Makes every message visible again (as if every visibility timeout ran out).
    pub fn reveal_all(&self) {
        let now = self.clock.now();
        for m in lock(&self.messages).iter_mut() {
            m.visible_at = now;
        }
    }

    pub fn len(&self) -> usize {
        lock(&self.messages).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[async_trait::async_trait]
impl courier_core::ports::LetterQueue for MemoryLetterQueue {
    async fn receive(
        &self,
        max: usize,
        hide: std::time::Duration,
    ) -> Result<Vec<courier_core::ports::QueuedLetter>, StoreError> {
        let now = self.clock.now();
        let until = now + chrono::Duration::from_std(hide).unwrap_or_default();
        let mut out = Vec::new();
        for m in lock(&self.messages)
            .iter_mut()
            .filter(|m| m.visible_at <= now)
            .take(max.clamp(1, 10))
        {
            let receipt = format!(
                "{}#r{}",
                m.id,
                self.receipts.fetch_add(1, Ordering::Relaxed)
            );
            m.visible_at = until;
            m.receipt = Some(receipt.clone());
            out.push(courier_core::ports::QueuedLetter {
                receipt,
                queue_message_id: m.id.clone(),
                body: m.body.clone(),
                sent_at: m.sent_at,
            });
        }
        Ok(out)
    }

    async fn delete(&self, receipts: &[String]) -> Result<(), StoreError> {
        self.fail_deletes.take("delete letters")?;
        lock(&self.messages).retain(|m| !m.receipt.as_ref().is_some_and(|r| receipts.contains(r)));
        Ok(())
    }

    async fn hide(&self, receipt: &str, hide: std::time::Duration) -> Result<(), StoreError> {
        let until = self.clock.now() + chrono::Duration::from_std(hide).unwrap_or_default();
        for m in lock(&self.messages)
            .iter_mut()
            .filter(|m| m.receipt.as_deref() == Some(receipt))
        {
            m.visible_at = until;
        }
        Ok(())
    }
}

/// The dead-letter index in a map.
#[derive(Debug, Default)]
pub struct MemoryLetterIndex {
    pub letters: Mutex<BTreeMap<String, courier_core::letters::IndexedLetter>>,
    pub fail_transitions: FailNext,
}

#[async_trait::async_trait]
impl courier_core::ports::LetterIndex for MemoryLetterIndex {
    async fn put_new(
        &self,
        letter: &courier_core::letters::IndexedLetter,
    ) -> Result<bool, StoreError> {
        let mut letters = lock(&self.letters);
        if letters.contains_key(&letter.letter_id) {
            return Ok(false);
        }
        letters.insert(letter.letter_id.clone(), letter.clone());
        Ok(true)
    }

    async fn get_many(
        &self,
        ids: &[String],
    ) -> Result<Vec<courier_core::letters::IndexedLetter>, StoreError> {
        let letters = lock(&self.letters);
        let unique: std::collections::BTreeSet<&String> = ids.iter().collect();
        Ok(unique
            .into_iter()
            .filter_map(|id| letters.get(id).cloned())
            .collect())
    }

    async fn transition(
        &self,
        id: &str,
        from: courier_core::letters::LetterState,
        to: courier_core::letters::LetterState,
        archive_key: Option<&str>,
        audit: Option<&str>,
    ) -> Result<bool, StoreError> {
        self.fail_transitions.take("letter transition")?;
        let mut letters = lock(&self.letters);
        let Some(l) = letters.get_mut(id).filter(|l| l.state == from) else {
            return Ok(false);
        };
        l.state = to;
        l.archive_key = archive_key.map(str::to_owned);
        if let Some(a) = audit {
            l.audit.push(a.to_owned());
        }
        Ok(true)
    }

    async fn search(
        &self,
        filter: &courier_core::letters::LetterFilter,
        limit: usize,
        cursor: Option<String>,
    ) -> Result<(Vec<courier_core::letters::IndexedLetter>, Option<String>), StoreError> {
        let letters = lock(&self.letters);
        let mut all: Vec<&courier_core::letters::IndexedLetter> =
            letters.values().filter(|l| filter.matches(l)).collect();
        all.sort_by(|a, b| {
            b.dead_lettered_at
                .cmp(&a.dead_lettered_at)
                .then(a.letter_id.cmp(&b.letter_id))
        });
        let skip: usize = cursor.and_then(|c| c.parse().ok()).unwrap_or(0);
        let page: Vec<_> = all
            .iter()
            .skip(skip)
            .take(limit)
            .map(|l| (*l).clone())
            .collect();
        let next = (skip + page.len() < all.len()).then(|| (skip + page.len()).to_string());
        Ok((page, next))
    }
}

/// An archive bucket in a map.
#[derive(Debug, Default)]
pub struct MemoryArchive {
    pub objects: Mutex<BTreeMap<String, Vec<u8>>>,
    pub fail_puts: FailNext,
}

#[async_trait::async_trait]
impl courier_core::ports::ArchiveStore for MemoryArchive {
    async fn put_new(&self, key: &str, bytes: Vec<u8>) -> Result<bool, StoreError> {
        self.fail_puts.take("archive put")?;
        let mut objects = lock(&self.objects);
        if objects.contains_key(key) {
            return Ok(false);
        }
        objects.insert(key.to_owned(), bytes);
        Ok(true)
    }

    async fn exists(&self, key: &str) -> Result<bool, StoreError> {
        Ok(lock(&self.objects).contains_key(key))
    }
}

/// Error-code sightings in a set.
#[derive(Debug, Default)]
pub struct MemorySightings {
    pub seen: Mutex<HashSet<String>>,
}

#[async_trait::async_trait]
impl Sightings for MemorySightings {
    async fn first_sighting(&self, key: &str, _now: DateTime<Utc>) -> Result<bool, StoreError> {
        Ok(lock(&self.seen).insert(key.to_owned()))
    }
}

/// Counted events in a map (key -> kept until).
#[derive(Debug, Default)]
pub struct MemoryEventLedger {
    pub entries: Mutex<BTreeMap<String, DateTime<Utc>>>,
    pub fail: FailNext,
}

#[async_trait::async_trait]
impl courier_core::ports::EventLedger for MemoryEventLedger {
    async fn first_entry(
        &self,
        key: &str,
        now: DateTime<Utc>,
        keep_until: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.fail.take("event ledger")?;
        let mut entries = lock(&self.entries);
        if entries.get(key).is_some_and(|until| *until > now) {
            return Ok(false);
        }
        entries.insert(key.to_owned(), keep_until);
        Ok(true)
    }
}

/// Reputation buckets in a map.
#[derive(Debug, Default)]
pub struct MemoryReputationStore {
    pub buckets:
        Mutex<BTreeMap<(String, DateTime<Utc>), courier_core::reputation::ReputationCounts>>,
    pub fail: FailNext,
}

#[async_trait::async_trait]
impl ReputationStore for MemoryReputationStore {
    async fn add(
        &self,
        domain: &str,
        bucket: DateTime<Utc>,
        counts: &courier_core::reputation::ReputationCounts,
    ) -> Result<(), StoreError> {
        self.fail.take("reputation add")?;
        lock(&self.buckets)
            .entry((domain.to_owned(), bucket))
            .or_default()
            .merge(counts);
        Ok(())
    }

    async fn window(
        &self,
        domain: &str,
        since: DateTime<Utc>,
    ) -> Result<courier_core::reputation::ReputationCounts, StoreError> {
        let mut sum = courier_core::reputation::ReputationCounts::default();
        for ((d, bucket), counts) in lock(&self.buckets).iter() {
            if d == domain && *bucket >= since {
                sum.merge(counts);
            }
        }
        Ok(sum)
    }
}

/// Send-rate schedules in a map: [`courier_core::rate::reserve`] under a lock.
#[derive(Debug, Default)]
pub struct MemorySendSchedule {
    pub tats: Mutex<BTreeMap<String, i64>>,
    pub fail: FailNext,
}

#[async_trait::async_trait]
impl SendSchedule for MemorySendSchedule {
    async fn reserve(
        &self,
        key: &str,
        now_us: i64,
        cost_us: i64,
        max_ahead_us: i64,
    ) -> Result<courier_core::rate::Reservation, StoreError> {
        self.fail.take("send schedule")?;
        let mut tats = lock(&self.tats);
        let (answer, next) =
            courier_core::rate::reserve(tats.get(key).copied(), now_us, cost_us, max_ahead_us);
        if let Some(next) = next {
            tats.insert(key.to_owned(), next);
        }
        Ok(answer)
    }
}
