//! Live settings in the send path: a stored document changes the retry policy of the next
//! batches without a redeploy; a bad one is refused, counted, and the last good one stays.

use super::*;
use courier_core::live::Baseline;
use courier_core::ports::LiveSettingsStore;

const GREYLISTED: &str = "450 4.2.0 <g@x>: Recipient address rejected: Greylisted";

/// `mailbox_temporary` is not retried at all: such a job is dead-lettered at once.
const NO_MAILBOX_RETRIES: &str = r#"{"retry_policy": {"transactional": {"classes": {
    "mailbox_temporary": {"retries": 0, "schedule": {"delays": [60]}, "jitter": {"kind": "none"},
                          "spends_attempt": true, "horizon": "1h"}}}}}"#;

fn live(store: Arc<MemoryLiveSettings>) -> crate::live::Live {
    crate::live::Live::new(
        store,
        chrono::Duration::seconds(30),
        Baseline {
            breaker: BreakerConfig::default(),
            destination_pacing: None,
            policy: RetryPolicy::default(),
            rate_shape: courier_core::rate::RateLimit::per_second(1.0).unwrap(),
        },
    )
}

#[tokio::test]
async fn a_stored_retry_policy_decides_the_next_batches_and_a_bad_one_is_refused() {
    let w = world_with(smtp_failure(GREYLISTED));
    let store = Arc::new(MemoryLiveSettings::default());
    let p = with_live(&w, live(store.clone()));
    let deadline = w.clock.now() + chrono::Duration::seconds(60);
    // GIVEN the deployment's policy: a greylisted job is retried
    p.handle_records(vec![rec("a", job("m1", "g@example.org"))], deadline, "i")
        .await;
    assert_eq!(w.status_of("m1"), Some(Status::Deferred));
    // WHEN an operator stores a policy without mailbox_temporary retries, and the cache passes
    assert!(
        store
            .put(NO_MAILBOX_RETRIES, None, w.clock.now(), "ops")
            .await
            .unwrap()
    );
    w.clock.advance(31);
    let deadline = w.clock.now() + chrono::Duration::seconds(60);
    p.handle_records(vec![rec("b", job("m2", "g@example.org"))], deadline, "i")
        .await;
    // THEN the next job is dead-lettered at once
    assert_eq!(w.status_of("m2"), Some(Status::DeadLettered));
    // AND a bad change is refused and counted; the stored good one stays in force
    assert!(
        store
            .put(
                r#"{"retry_policy": {"bulk": {"max_total_attempts": "many"}}}"#,
                Some(1),
                w.clock.now(),
                "ops"
            )
            .await
            .unwrap()
    );
    w.clock.advance(31);
    let deadline = w.clock.now() + chrono::Duration::seconds(60);
    let report = p
        .handle_records(vec![rec("c", job("m3", "g@example.org"))], deadline, "i")
        .await;
    assert_eq!(report.metrics.counts.get("LiveSettingsRefused"), Some(&1));
    assert_eq!(w.status_of("m3"), Some(Status::DeadLettered));
}
