//! In-memory adapters of every port, for unit tests of the pure logic and for benchmarks.
//! They follow the same rules as the AWS adapters (the claim uses [`judge_claim`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::{DateTime, Utc};

use courier_core::breaker::BreakerState;
use courier_core::ports::{
    BreakerStore, ClaimJudgement, ClaimOutcome, ClaimRequest, Clock, DeadLetter, DeadLetterSink,
    Expected, HistoryEntry, JobRecord, Mailer, OpenState, OutgoingEmail, PoisonList, Provider,
    REDELIVERY_BOUND, Receipt, RecipientChange, RecipientFill, ReputationStore, Requeue, Resend,
    RetryScheduler, SendFailure, SendSchedule, Sightings, StatusStore, StatusUpdate, StoreError,
    SuppressionList, SweepMark, Template, TemplateError, TemplateStore, judge_claim,
};
use courier_core::status::Status;

mod control;
mod letters;
mod outcomes;
mod sending;
mod status;

pub use control::*;
pub use letters::*;
pub use outcomes::*;
pub use sending::*;
pub use status::*;

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

/// The seal key of unit tests and benchmarks: one fixed key (never a deployed stack's).
pub fn test_keys() -> courier_core::seal::SealKeys {
    courier_core::seal::SealKeys::new("courier-unit-tests-seal-key-0123456789", &[])
        .unwrap_or_else(|e| unreachable!("the test key is long enough: {e}"))
}

/// [`test_keys`], as the functions read their keys.
pub fn test_seal_keys() -> std::sync::Arc<courier_adapters::seal_secret::SecretSealKeys> {
    std::sync::Arc::new(courier_adapters::seal_secret::SecretSealKeys::fixed(
        test_keys(),
    ))
}

/// `scheduler`, sealing what it is given with [`test_seal_keys`] (as the functions' wiring
/// seals with the stack's keys).
pub fn sealing(
    scheduler: std::sync::Arc<dyn courier_core::ports::RetryScheduler>,
) -> std::sync::Arc<courier_adapters::seal_secret::SealingScheduler> {
    std::sync::Arc::new(courier_adapters::seal_secret::SealingScheduler::new(
        scheduler,
        test_seal_keys(),
    ))
}
