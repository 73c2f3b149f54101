//! One trace id follows a job: from the producer's X-Ray header (or its `trace_id`) into every
//! log line of its records, the status record, the provider's message, the retry copy and the
//! dead letter.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

const HEADER: &str = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
const ROOT: &str = "1-5759e988-bd862e3fe1be46a994272793";

/// Busy the first time (a short retry), refused by policy the second (a dead letter).
fn busy_then_refused() -> MemoryMailer {
    let calls = AtomicUsize::new(0);
    MemoryMailer::with(
        courier_core::ports::Provider::Smtp,
        Box::new(move |_| {
            let reply = match calls.fetch_add(1, Ordering::Relaxed) {
                0 => "421 4.3.2 Service not available, closing transmission channel",
                _ => "550 5.7.1 Message rejected by policy",
            };
            Err(SendFailure {
                verdict: classify_smtp(reply),
                ambiguous: false,
                source: None,
            })
        }),
    )
}

/// The copy the first attempt scheduled (on the queue or through the state machine).
fn retry_copy(w: &World) -> courier_core::ports::Requeue {
    let queued = w.scheduler.queued.lock().unwrap();
    let waits = w.scheduler.waits.lock().unwrap();
    queued
        .first()
        .or(waits.first())
        .expect("a retry copy")
        .clone()
}

#[tokio::test]
async fn the_trace_of_a_producers_xray_header_follows_the_job_to_its_dead_letter() {
    let (logs, _guard) = courier_devkit::logs::Captured::start();
    let w = world_with(busy_then_refused());
    let first = RecordIn {
        trace_header: Some(HEADER.into()),
        ..rec("q-1", job("m-trace", "ann@example.org"))
    };
    let report = w.run(vec![first]).await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    let retry = retry_copy(&w);
    // The copy carries the trace, since the job itself has none.
    let envelope: serde_json::Value = serde_json::from_str(&retry.body).unwrap();
    assert_eq!(envelope["trace"], ROOT);
    let record = w.status.records.lock().unwrap()["m-trace"].clone();
    assert_eq!(record.trace_id.as_deref(), Some(ROOT));

    // The retry arrives without the header: the trace comes from the copy.
    w.clock
        .advance(i64::try_from(retry.delay_secs).unwrap() + 1);
    let report = w.run(vec![rec("q-2", retry.body)]).await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    let sent = w.mailer.sent.lock().unwrap().clone();
    assert_eq!(sent.len(), 2);
    assert!(sent.iter().all(|e| e.trace_id.as_deref() == Some(ROOT)));
    let letters = w.dead.letters.lock().unwrap().clone();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].trace_id.as_deref(), Some(ROOT));

    // Every line logged about the job names its trace.
    let text = logs.text();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("m-trace")).collect();
    assert!(lines.len() >= 2, "{text}");
    for line in lines {
        assert!(line.contains(ROOT), "a line without the trace: {line}");
    }
}

#[tokio::test]
async fn a_jobs_own_trace_id_wins_and_is_not_repeated_in_its_copies() {
    let w = world_with(busy_then_refused());
    let mut body: serde_json::Value =
        serde_json::from_str(&job("m-own", "ann@example.org")).unwrap();
    body["trace_id"] = "order-4711".into();
    let first = RecordIn {
        trace_header: Some(HEADER.into()),
        ..rec("q-1", body.to_string())
    };
    w.run(vec![first]).await;
    let retry = retry_copy(&w);
    let envelope: serde_json::Value = serde_json::from_str(&retry.body).unwrap();
    assert!(envelope.get("trace").is_none(), "{envelope}");
    let record = w.status.records.lock().unwrap()["m-own"].clone();
    assert_eq!(record.trace_id.as_deref(), Some("order-4711"));
    assert_eq!(
        w.mailer.sent.lock().unwrap()[0].trace_id.as_deref(),
        Some("order-4711")
    );
}
