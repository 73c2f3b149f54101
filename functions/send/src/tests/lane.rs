//! The retry lane in the send path: with the provider's schedule booked past the retry horizon,
//! a copy that already waited is not sent (it waits as `rate_limited`, no attempt spent) while
//! fresh mail still gets a slot.

use super::*;

const GREYLISTED: &str = "450 4.2.0 <g@x>: Recipient address rejected: Greylisted";

#[tokio::test]
async fn a_retry_yields_to_fresh_mail_when_the_schedule_is_booked_past_its_horizon() {
    let w = world_with(smtp_failure(GREYLISTED));
    let schedule = Arc::new(MemorySendSchedule::default());
    let limit = courier_core::rate::RateLimit {
        per_sec: 10.0,
        max_ahead: std::time::Duration::from_secs(5),
        chunk: 1,
    };
    let governor = crate::governor::Governor::new(
        schedule.clone(),
        std::collections::BTreeMap::from([("smtp".to_owned(), limit)]),
    )
    .with_retry_horizon(std::time::Duration::from_millis(500));
    let p = with_governor(&w, governor);
    let deadline = w.clock.now() + chrono::Duration::seconds(60);
    // GIVEN a job greylisted once: its copy is a retry
    p.handle_records(vec![rec("a", job("m1", "g@example.org"))], deadline, "i")
        .await;
    let copies = |w: &World| -> Vec<Requeue> {
        let waits = w.scheduler.waits.lock().unwrap().clone();
        let queued = w.scheduler.queued.lock().unwrap().clone();
        waits.into_iter().chain(queued).collect()
    };
    let retry = copies(&w).last().expect("a retry copy").body.clone();
    let calls = w.mailer.sent_count();
    // AND the schedule booked 800 ms ahead (fresh mail's bookings)
    schedule.tats.lock().unwrap().insert(
        "smtp".into(),
        (w.clock.now() + chrono::Duration::milliseconds(800)).timestamp_micros(),
    );
    // WHEN the retry and a fresh job come in
    let report = p
        .handle_records(
            vec![rec("b", retry), rec("c", job("m2", "g2@example.org"))],
            deadline,
            "i",
        )
        .await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    // THEN only the fresh job is sent; the retry waits as rate_limited without spending
    let sent: Vec<String> = w.mailer.sent.lock().unwrap()[calls..]
        .iter()
        .map(|e| e.message_id.clone())
        .collect();
    assert_eq!(sent, vec!["m2".to_owned()]);
    let all = copies(&w);
    let copy = all.iter().rev().find(|r| r.message_id == "m1").unwrap();
    let incoming = courier_core::envelope::parse_body(copy.body.as_bytes()).unwrap();
    assert_eq!(
        incoming.history.last().map(|h| h.class),
        Some(ErrorClass::RateLimited)
    );
    assert_eq!(
        incoming.retry.spent, 1,
        "only the greylisting spent an attempt"
    );
}
