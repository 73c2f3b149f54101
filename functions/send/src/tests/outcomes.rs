//! Outcome events: published after the status write that makes them durable, from the record,
//! with the job's campaign, metadata and trace; a bus that fails delays them, never the job.

use super::*;
use courier_core::outcome::relay;

/// The world's pipeline publishing outcomes to a bus in memory.
fn publishing(w: &World) -> (Arc<Pipeline>, Arc<MemoryOutcomeBus>) {
    let bus = Arc::new(MemoryOutcomeBus::default());
    let pipeline = rebuilt(
        w,
        Arc::new(MemoryBreakerStore::default()),
        3,
        unlimited(),
        None,
        Some(bus.clone()),
    );
    (pipeline, bus)
}

fn job_with_metadata(id: &str, to: &str) -> String {
    serde_json::json!({
        "version": 1, "message_id": id, "campaign_id": "spring", "trace_id": "t-9",
        "from": "shop@example.com", "to": [to], "content": {"subject": "Hi", "text": "Hello"},
        "metadata": {"order": "o-42", "tenant": "acme"}
    })
    .to_string()
}

async fn run(pipeline: &Arc<Pipeline>, w: &World, records: Vec<RecordIn>) -> BatchReport {
    let deadline = w.clock.now() + chrono::Duration::seconds(60);
    pipeline.handle_records(records, deadline, "req-1").await
}

#[tokio::test]
async fn a_sent_job_publishes_one_event_from_its_record_and_clears_its_outbox() {
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Smtp));
    let (pipeline, bus) = publishing(&w);
    let report = run(
        &pipeline,
        &w,
        vec![rec("a", job_with_metadata("m1", "ann@example.org"))],
    )
    .await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    let events = bus.events();
    assert_eq!(events.len(), 1);
    let event = &events[0];
    assert_eq!(event.detail_type, "Email Sent");
    let d = &event.detail;
    assert_eq!(d.event_id, "m1/0/sent");
    // Through SMTP, nothing follows "sent".
    assert!(d.is_final);
    assert_eq!(d.campaign_id.as_deref(), Some("spring"));
    assert_eq!(d.trace_id.as_deref(), Some("t-9"));
    assert_eq!(d.metadata["order"], "o-42");
    assert_eq!(d.provider.as_deref(), Some("smtp"));
    assert_eq!(report.metrics.counts.get("OutcomesPublished"), Some(&1));
    assert_eq!(w.status.records.lock().unwrap()["m1"].outbox, None);
    // A duplicate delivery writes no outcome and publishes nothing.
    run(
        &pipeline,
        &w,
        vec![rec("b", job_with_metadata("m1", "ann@example.org"))],
    )
    .await;
    assert_eq!(bus.events().len(), 1);
}

#[tokio::test]
async fn a_bounce_and_a_suppression_are_outcomes_with_the_jobs_facts() {
    let w = world_with(smtp_failure(
        "550 5.1.1 <u@x>: Recipient address rejected: User unknown",
    ));
    let (pipeline, bus) = publishing(&w);
    run(
        &pipeline,
        &w,
        vec![rec("u", job_with_metadata("b1", "u@example.org"))],
    )
    .await;
    // The address is now suppressed: the next job to it is never claimed, only recorded.
    run(
        &pipeline,
        &w,
        vec![rec("v", job_with_metadata("s1", "u@example.org"))],
    )
    .await;
    let events = bus.events();
    let kinds: Vec<(&str, &str)> = events
        .iter()
        .map(|e| (e.detail_type, e.detail.event_id.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("Email Bounced", "b1/0/bounced"),
            ("Email Suppressed", "s1/0/suppressed")
        ]
    );
    assert_eq!(
        events[0].detail.reason.as_deref(),
        Some("recipient_permanent (smtp.text.recipient-unknown)")
    );
    // The suppressed job was never claimed: its facts came with the status write.
    assert_eq!(events[1].detail.metadata["tenant"], "acme");
    assert_eq!(events[1].detail.campaign_id.as_deref(), Some("spring"));
}

#[tokio::test]
async fn a_bus_that_fails_delays_the_event_and_never_the_job() {
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Smtp));
    let (pipeline, bus) = publishing(&w);
    // GIVEN a bus that refuses the call
    bus.fail.set(1);
    let report = run(
        &pipeline,
        &w,
        vec![rec("a", job_with_metadata("m2", "ann@example.org"))],
    )
    .await;
    // THEN the job is sent and acknowledged, and its outcome stays marked
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.mailer.sent_count(), 1);
    assert!(bus.events().is_empty());
    let outbox = w.status.records.lock().unwrap()["m2"].outbox;
    assert!(outbox.is_some());
    // AND the sweeper's relay publishes it later, once
    let ids = w
        .status
        .outbox_before(t0() + chrono::Duration::hours(1), 10)
        .await
        .unwrap();
    assert_eq!(ids, ["m2"]);
    let relayed = relay(w.status.as_ref(), bus.as_ref(), &ids).await;
    assert_eq!(relayed.published, 1);
    assert_eq!(bus.events()[0].detail.event_id, "m2/0/sent");
    assert_eq!(w.status.records.lock().unwrap()["m2"].outbox, None);
}

#[tokio::test]
async fn nothing_is_published_for_a_status_write_that_failed() {
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Smtp));
    w.suppression
        .entries
        .lock()
        .unwrap()
        .insert("e@example.org".into(), "bounce".into());
    let (pipeline, bus) = publishing(&w);
    // GIVEN the write that would record "suppressed" fails
    w.status.fail_finishes.set(1);
    let report = run(
        &pipeline,
        &w,
        vec![rec("s", job_with_metadata("m3", "e@example.org"))],
    )
    .await;
    // THEN the record is left for redelivery and no event went out ahead of the status
    assert_eq!(report.failures.len(), 1);
    assert!(bus.events().is_empty());
    // AND the redelivery records it and publishes it
    run(
        &pipeline,
        &w,
        vec![rec("s", job_with_metadata("m3", "e@example.org"))],
    )
    .await;
    assert_eq!(bus.events().len(), 1);
    assert_eq!(bus.events()[0].detail_type, "Email Suppressed");
}

#[tokio::test]
async fn a_retry_copy_dead_lettered_before_its_claim_publishes_its_dead_letter_at_once() {
    // GIVEN a job deferred after a throttle, its retry copy on its way
    let w = world_with(smtp_failure("421 4.7.0 Too many connections, slow down"));
    let (pipeline, bus) = publishing(&w);
    let first = job_with_metadata("m-dl", "ann@example.org");
    run(&pipeline, &w, vec![rec("a", first.clone())]).await;
    let retry = w.scheduler.queued.lock().unwrap().pop().expect("a retry");
    // WHEN the job is blocklisted and its retry copy arrives
    w.blocklist(&first);
    let report = run(&pipeline, &w, vec![rec("b", retry.body)]).await;
    // THEN its dead letter's outcome is published after the batch, not left to the sweeper
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    let events = bus.events();
    let last = events.last().expect("an outcome");
    assert_eq!(last.detail_type, "Email Dead-Lettered");
    assert_eq!(last.detail.event_id, "m-dl/1/dead_lettered");
    assert_eq!(last.detail.metadata["order"], "o-42");
    assert_eq!(w.status.records.lock().unwrap()["m-dl"].outbox, None);
}
