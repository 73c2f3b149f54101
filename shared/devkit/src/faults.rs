//! Fault injection for the exhaustive crash-point tests: [`Faulty`] wraps any port and, through
//! one shared [`Faults`] plan, makes call number `at` fail before its effect, fail after it (the
//! write happened, the answer was lost), or crash the invocation before or after it.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use chrono::{DateTime, Utc};
use courier_core::breaker::BreakerState;
use courier_core::claim::{ClaimOutcome, ClaimRequest};
use courier_core::letters::DeadLetter;
use courier_core::ports::{
    BreakerStore, DeadLetterSink, EventLedger, Expected, HistoryEntry, JobRecord, OpenState,
    Outbox, PayloadStore, PoisonList, ReputationStore, Requeue, Resend, RetryScheduler,
    StatusStore, StatusUpdate, StoreError, SuppressionEntry, SuppressionList, SweepMark,
};
use courier_core::reputation::ReputationCounts;

/// How an injected point fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    FailBefore,
    FailAfter,
    CrashBefore,
    CrashAfter,
}

pub const FAULTS: [Fault; 4] = [
    Fault::FailBefore,
    Fault::FailAfter,
    Fault::CrashBefore,
    Fault::CrashAfter,
];

/// What a gated call does.
pub enum Gate {
    Go,
    Fail,
    FailAfter,
    Crash,
    CrashAfter,
}

/// Counts port calls and injects one fault at call `at`.
#[derive(Default)]
pub struct Faults {
    calls: AtomicUsize,
    plan: Mutex<Option<(usize, Fault)>>,
    fired: AtomicBool,
    /// Notified when the invocation "dies" (the caller abandons it).
    pub crashed: tokio::sync::Notify,
}

impl Faults {
    /// Injects `fault` at call number `at` from now on (counting from zero again).
    pub fn arm(&self, at: usize, fault: Fault) {
        self.calls.store(0, Ordering::SeqCst);
        self.fired.store(false, Ordering::SeqCst);
        *self.plan.lock().unwrap_or_else(|e| e.into_inner()) = Some((at, fault));
    }

    /// No more faults; counting goes on.
    pub fn disarm(&self) {
        *self.plan.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Calls counted since the last [`Faults::arm`] (or the start).
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Whether the armed fault was injected.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    pub fn gate(&self) -> Gate {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let plan = *self.plan.lock().unwrap_or_else(|e| e.into_inner());
        match plan {
            Some((at, fault)) if at == n => {
                self.fired.store(true, Ordering::SeqCst);
                match fault {
                    Fault::FailBefore => Gate::Fail,
                    Fault::FailAfter => Gate::FailAfter,
                    Fault::CrashBefore => Gate::Crash,
                    Fault::CrashAfter => Gate::CrashAfter,
                }
            }
            _ => Gate::Go,
        }
    }

    /// The process dies here: the invocation is abandoned (nothing after runs).
    pub async fn crash(&self) -> ! {
        self.crashed.notify_one();
        loop {
            std::future::pending::<()>().await;
        }
    }
}

/// The error of an injected failure.
pub fn injected(operation: &'static str) -> StoreError {
    StoreError::msg(operation, "injected fault")
}

/// A port whose every call goes through `faults` first.
pub struct Faulty<T: ?Sized> {
    pub inner: Arc<T>,
    pub faults: Arc<Faults>,
}

impl<T: ?Sized> Faulty<T> {
    pub fn new(inner: Arc<T>, faults: Arc<Faults>) -> Faulty<T> {
        Faulty { inner, faults }
    }

    /// Runs `call` through the gate: `Err` before or after its effect, or a crash.
    async fn gated<R, F>(&self, op: &'static str, call: F) -> Result<R, StoreError>
    where
        F: std::future::Future<Output = Result<R, StoreError>>,
    {
        match self.faults.gate() {
            Gate::Go => call.await,
            Gate::Fail => Err(injected(op)),
            Gate::FailAfter => {
                let _ = call.await;
                Err(injected(op))
            }
            Gate::Crash => self.faults.crash().await,
            Gate::CrashAfter => {
                let _ = call.await;
                self.faults.crash().await
            }
        }
    }
}

#[async_trait::async_trait]
impl<T: StatusStore + ?Sized> StatusStore for Faulty<T> {
    async fn claim(&self, req: &ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        self.gated("claim", self.inner.claim(req)).await
    }
    async fn finish(&self, update: &StatusUpdate) -> Result<(), StoreError> {
        self.gated("finish", self.inner.finish(update)).await
    }
    async fn record(&self, update: &StatusUpdate) -> Result<(), StoreError> {
        self.gated("record", self.inner.record(update)).await
    }
    async fn abandon(&self, update: &StatusUpdate) -> Result<bool, StoreError> {
        self.gated("abandon", self.inner.abandon(update)).await
    }
    async fn get(&self, message_id: &str) -> Result<Option<JobRecord>, StoreError> {
        self.gated("get", self.inner.get(message_id)).await
    }
    async fn get_many(&self, ids: &[String]) -> Result<Vec<JobRecord>, StoreError> {
        self.gated("get_many", self.inner.get_many(ids)).await
    }
    async fn find_by_provider_message_id(&self, id: &str) -> Result<Option<String>, StoreError> {
        self.gated("find", self.inner.find_by_provider_message_id(id))
            .await
    }
    async fn note(&self, message_id: &str, entry: &HistoryEntry) -> Result<bool, StoreError> {
        self.gated("note", self.inner.note(message_id, entry)).await
    }
    async fn rewait(
        &self,
        message_id: &str,
        entry: &HistoryEntry,
        copy_due: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.gated("rewait", self.inner.rewait(message_id, entry, copy_due))
            .await
    }
    async fn expect(&self, expected: &Expected) -> Result<bool, StoreError> {
        self.gated("expect", self.inner.expect(expected)).await
    }
    async fn reopen(&self, id: &str, now: DateTime<Utc>) -> Result<Option<u32>, StoreError> {
        self.gated("reopen", self.inner.reopen(id, now)).await
    }
    async fn resend(&self, resend: &Resend) -> Result<bool, StoreError> {
        self.gated("resend", self.inner.resend(resend)).await
    }
    async fn open_before(
        &self,
        state: OpenState,
        before: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<JobRecord>, StoreError> {
        self.gated("open_before", self.inner.open_before(state, before, limit))
            .await
    }
    async fn outbox_before(
        &self,
        before: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        self.gated("outbox_before", self.inner.outbox_before(before, limit))
            .await
    }
    async fn update_recipients(
        &self,
        id: &str,
        change: &courier_core::recipients::RecipientChange,
    ) -> Result<bool, StoreError> {
        self.gated(
            "update_recipients",
            self.inner.update_recipients(id, change),
        )
        .await
    }
    async fn fill_recipients(
        &self,
        id: &str,
        fill: &courier_core::recipients::RecipientFill,
    ) -> Result<bool, StoreError> {
        self.gated("fill_recipients", self.inner.fill_recipients(id, fill))
            .await
    }
    async fn outcome_published(&self, id: &str, outbox: &Outbox) -> Result<bool, StoreError> {
        self.gated(
            "outcome_published",
            self.inner.outcome_published(id, outbox),
        )
        .await
    }
    async fn sweep(
        &self,
        found: &JobRecord,
        mark: SweepMark,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.gated("sweep", self.inner.sweep(found, mark, now))
            .await
    }
}

#[async_trait::async_trait]
impl<T: RetryScheduler + ?Sized> RetryScheduler for Faulty<T> {
    async fn enqueue(&self, items: &[Requeue]) -> Vec<Result<(), StoreError>> {
        let all = |r: fn() -> Result<(), StoreError>| items.iter().map(|_| r()).collect();
        match self.faults.gate() {
            Gate::Go => self.inner.enqueue(items).await,
            Gate::Fail => all(|| Err(injected("enqueue"))),
            Gate::FailAfter => {
                let _ = self.inner.enqueue(items).await;
                all(|| Err(injected("enqueue")))
            }
            Gate::Crash => self.faults.crash().await,
            Gate::CrashAfter => {
                let _ = self.inner.enqueue(items).await;
                self.faults.crash().await
            }
        }
    }

    async fn start_wait(&self, item: &Requeue) -> Result<(), StoreError> {
        self.gated("start_wait", self.inner.start_wait(item)).await
    }
}

#[async_trait::async_trait]
impl<T: DeadLetterSink + ?Sized> DeadLetterSink for Faulty<T> {
    async fn put(&self, letter: &DeadLetter) -> Result<(), StoreError> {
        self.gated("dead letter", self.inner.put(letter)).await
    }
}

#[async_trait::async_trait]
impl<T: PayloadStore + ?Sized> PayloadStore for Faulty<T> {
    async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), StoreError> {
        self.gated("payload put", self.inner.put(key, bytes)).await
    }
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.gated("payload get", self.inner.get(key)).await
    }
    async fn copy(&self, from: &str, to: &str) -> Result<bool, StoreError> {
        self.gated("payload copy", self.inner.copy(from, to)).await
    }
}

#[async_trait::async_trait]
impl<T: SuppressionList + ?Sized> SuppressionList for Faulty<T> {
    async fn suppressed(
        &self,
        addresses: &[String],
        now: DateTime<Utc>,
    ) -> Result<Vec<String>, StoreError> {
        self.gated("suppressed", self.inner.suppressed(addresses, now))
            .await
    }
    async fn suppress_until(
        &self,
        address: &str,
        reason: &str,
        now: DateTime<Utc>,
        until: Option<DateTime<Utc>>,
    ) -> Result<(), StoreError> {
        self.gated(
            "suppress",
            self.inner.suppress_until(address, reason, now, until),
        )
        .await
    }
    async fn suppress_soft(
        &self,
        address: &str,
        reason: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.gated(
            "suppress soft",
            self.inner.suppress_soft(address, reason, now, until),
        )
        .await
    }
    async fn remove(&self, address: &str) -> Result<bool, StoreError> {
        self.gated("remove", self.inner.remove(address)).await
    }
    async fn unsubscribed(
        &self,
        addresses: &[String],
        list: &str,
    ) -> Result<Vec<String>, StoreError> {
        self.gated("unsubscribed", self.inner.unsubscribed(addresses, list))
            .await
    }
    async fn unsubscribe(
        &self,
        address: &str,
        scope: &courier_core::unsubscribe::Scope,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.gated("unsubscribe", self.inner.unsubscribe(address, scope, now))
            .await
    }
    async fn remove_from_list(&self, address: &str, list: &str) -> Result<bool, StoreError> {
        self.gated(
            "remove from list",
            self.inner.remove_from_list(address, list),
        )
        .await
    }
    async fn list(
        &self,
        limit: usize,
        cursor: Option<String>,
    ) -> Result<(Vec<SuppressionEntry>, Option<String>), StoreError> {
        self.gated("list", self.inner.list(limit, cursor)).await
    }
}

#[async_trait::async_trait]
impl<T: PoisonList + ?Sized> PoisonList for Faulty<T> {
    async fn is_blocked(&self, fingerprint: &str) -> Result<bool, StoreError> {
        self.gated("poison", self.inner.is_blocked(fingerprint))
            .await
    }
    async fn block(&self, fp: &str, reason: &str, now: DateTime<Utc>) -> Result<(), StoreError> {
        self.gated("block", self.inner.block(fp, reason, now)).await
    }
}

#[async_trait::async_trait]
impl<T: ReputationStore + ?Sized> ReputationStore for Faulty<T> {
    async fn add(
        &self,
        domain: &str,
        bucket: DateTime<Utc>,
        counts: &ReputationCounts,
    ) -> Result<(), StoreError> {
        self.gated("reputation add", self.inner.add(domain, bucket, counts))
            .await
    }
    async fn window(
        &self,
        domain: &str,
        since: DateTime<Utc>,
    ) -> Result<ReputationCounts, StoreError> {
        self.gated("reputation window", self.inner.window(domain, since))
            .await
    }
}

#[async_trait::async_trait]
impl<T: EventLedger + ?Sized> EventLedger for Faulty<T> {
    async fn first_entry(
        &self,
        key: &str,
        now: DateTime<Utc>,
        keep_until: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.gated("ledger", self.inner.first_entry(key, now, keep_until))
            .await
    }
}

#[async_trait::async_trait]
impl<T: BreakerStore + ?Sized> BreakerStore for Faulty<T> {
    async fn load(&self, provider: &str) -> Result<Option<BreakerState>, StoreError> {
        self.gated("breaker load", self.inner.load(provider)).await
    }
    async fn save(
        &self,
        provider: &str,
        state: &BreakerState,
        expected_version: Option<u64>,
    ) -> Result<bool, StoreError> {
        self.gated(
            "breaker save",
            self.inner.save(provider, state, expected_version),
        )
        .await
    }
}
