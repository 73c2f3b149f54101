//! The outcome bus in memory.

use super::*;
use courier_core::outcome::{EVENTS_PER_CALL, OutcomeEvent};
use courier_core::ports::OutcomeBus;

/// Keeps what was published; `fail` refuses whole calls, `refuse` single entries (as
/// EventBridge answers an entry it could not take).
#[derive(Debug, Default)]
pub struct MemoryOutcomeBus {
    pub published: Mutex<Vec<OutcomeEvent>>,
    pub fail: FailNext,
    pub refuse: FailNext,
    pub calls: AtomicUsize,
}

impl MemoryOutcomeBus {
    /// What was published, in order.
    pub fn events(&self) -> Vec<OutcomeEvent> {
        lock(&self.published).clone()
    }
}

#[async_trait::async_trait]
impl OutcomeBus for MemoryOutcomeBus {
    async fn publish(&self, events: &[OutcomeEvent]) -> Vec<Result<(), StoreError>> {
        assert!(
            events.len() <= EVENTS_PER_CALL,
            "PutEvents takes 10 entries"
        );
        self.calls.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.fail.take("outcome publish") {
            return events
                .iter()
                .map(|_| Err(StoreError::msg(e.operation, e.message.clone())))
                .collect();
        }
        events
            .iter()
            .map(|event| {
                self.refuse.take("outcome publish")?;
                lock(&self.published).push(event.clone());
                Ok(())
            })
            .collect()
    }
}
