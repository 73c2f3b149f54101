//! The events function on in-memory ports, with fixtures in the shapes AWS delivers.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use courier::memory::*;
use courier::ports::JobRecord;

use super::*;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/fixtures/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

struct World {
    applier: Applier,
    status: Arc<MemoryStatusStore>,
    suppression: Arc<MemorySuppressionList>,
}

fn world(status_now: Option<Status>) -> World {
    let status = Arc::new(MemoryStatusStore::default());
    if let Some(s) = status_now {
        status.records.lock().unwrap().insert(
            "order-4711".into(),
            JobRecord {
                message_id: "order-4711".into(),
                status: s,
                attempt: 0,
                lease_owner: None,
                lease_until: None,
                unknown_since: None,
                provider: Some("ses".into()),
                provider_message_id: None,
                updated_at: t0(),
            },
        );
    }
    let suppression = Arc::new(MemorySuppressionList::default());
    let applier = Applier {
        status: status.clone(),
        suppression: suppression.clone(),
        clock: Arc::new(ManualClock::new(t0())),
    };
    World {
        applier,
        status,
        suppression,
    }
}

impl World {
    fn status(&self) -> Option<Status> {
        self.status
            .records
            .lock()
            .unwrap()
            .get("order-4711")
            .map(|r| r.status)
    }
}

fn sqs(bodies: &[String]) -> SqsEvent {
    let records: Vec<Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| serde_json::json!({"messageId": format!("sqs-{i}"), "receiptHandle": "r", "body": b, "attributes": {}, "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs", "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:events", "awsRegion": "us-east-1"}))
        .collect();
    serde_json::from_value(serde_json::json!({ "Records": records })).unwrap()
}

#[test]
fn every_fixture_parses_with_its_correlation() {
    for name in [
        "send",
        "delivery",
        "bounce-permanent",
        "bounce-transient",
        "complaint",
        "delivery-delay",
        "reject",
        "rendering-failure",
        "open",
        "sns-bounce-permanent",
        "eventbridge-delivery",
    ] {
        let e = parse(&fixture(name)).unwrap_or_else(|err| panic!("{name}: {err}"));
        assert_eq!(e.message_id.as_deref(), Some("order-4711"), "{name}");
        assert!(e.provider_message_id.is_some(), "{name}");
        assert_eq!(e.recipients, vec!["ann@example.org".to_owned()], "{name}");
    }
    assert!(matches!(
        parse(&fixture("sns-bounce-permanent")).unwrap().kind,
        EventKind::Failure(SesFailureEvent::Bounce { .. })
    ));
    assert_eq!(
        parse(&fixture("eventbridge-delivery")).unwrap().kind,
        EventKind::Delivery
    );
}

#[test]
fn the_tag_is_the_fallback_correlation_and_bad_input_is_a_parse_error() {
    let mut v: Value = serde_json::from_str(&fixture("delivery")).unwrap();
    v["mail"]["headers"] = serde_json::json!([]);
    assert_eq!(
        parse(&v.to_string()).unwrap().message_id.as_deref(),
        Some("order-4711")
    );
    v["mail"]["tags"] = serde_json::json!({});
    assert_eq!(parse(&v.to_string()).unwrap().message_id, None);
    assert!(matches!(parse("not json"), Err(ParseError::Json(_))));
    assert!(matches!(parse("{}"), Err(ParseError::Shape(_))));
    assert!(matches!(
        parse(r#"{"eventType": "Bounce", "mail": {}}"#),
        Err(ParseError::Shape(_))
    ));
    assert!(matches!(
        parse(r#"{"eventType": "Teleport", "mail": {}}"#),
        Err(ParseError::Shape(_))
    ));
    assert!(matches!(
        parse(r#"{"Type": "Notification", "Message": "{"}"#),
        Err(ParseError::Json(_))
    ));
}

#[tokio::test]
async fn delivery_moves_a_sent_job_forward_and_late_send_is_absorbed() {
    let w = world(Some(Status::SentToProvider));
    let report = w
        .applier
        .handle(sqs(&[
            fixture("delivery"),
            fixture("send"),
            fixture("eventbridge-delivery"),
        ]))
        .await;
    assert!(report.failures.is_empty());
    assert_eq!(
        report.applied,
        vec![
            Applied::Changed(Status::Delivered),
            Applied::Absorbed,
            Applied::Absorbed
        ]
    );
    assert_eq!(w.status(), Some(Status::Delivered));
}

#[tokio::test]
async fn permanent_bounces_and_complaints_suppress_the_recipient() {
    let w = world(Some(Status::SentToProvider));
    w.applier
        .handle(sqs(&[fixture("sns-bounce-permanent")]))
        .await;
    assert_eq!(w.status(), Some(Status::BouncedPermanent));
    assert!(
        w.suppression
            .entries
            .lock()
            .unwrap()
            .contains_key("ann@example.org")
    );
    let w = world(Some(Status::Delivered));
    w.applier.handle(sqs(&[fixture("complaint")])).await;
    assert_eq!(w.status(), Some(Status::Complained));
    assert!(
        w.suppression
            .entries
            .lock()
            .unwrap()
            .contains_key("ann@example.org")
    );
}

#[tokio::test]
async fn transient_bounces_and_delays_do_not_suppress() {
    let w = world(Some(Status::SentToProvider));
    w.applier
        .handle(sqs(&[
            fixture("delivery-delay"),
            fixture("bounce-transient"),
        ]))
        .await;
    assert_eq!(w.status(), Some(Status::BouncedTransient));
    assert!(w.suppression.entries.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_unknown_outcome_is_resolved_as_sent_by_provider_evidence() {
    let w = world(Some(Status::Unknown));
    w.applier.handle(sqs(&[fixture("send")])).await;
    assert_eq!(w.status(), Some(Status::SentToProvider));
}

#[tokio::test]
async fn an_event_ahead_of_its_record_is_retried_later() {
    // The send is still being recorded (processing), or not recorded at all.
    for status in [Some(Status::Processing), None] {
        let w = world(status);
        let report = w.applier.handle(sqs(&[fixture("delivery")])).await;
        assert_eq!(report.failures, vec!["sqs-0".to_owned()], "{status:?}");
        assert_eq!(w.status(), status);
    }
    // Once the record says sent, the redelivered event applies.
    let w = world(Some(Status::SentToProvider));
    assert!(
        w.applier
            .handle(sqs(&[fixture("delivery")]))
            .await
            .failures
            .is_empty()
    );
}

#[tokio::test]
async fn foreign_and_broken_messages_are_acknowledged_not_retried_forever() {
    let w = world(Some(Status::SentToProvider));
    let mut foreign: Value = serde_json::from_str(&fixture("delivery")).unwrap();
    foreign["mail"]["headers"] = serde_json::json!([]);
    foreign["mail"]["tags"] = serde_json::json!({});
    let report = w
        .applier
        .handle(sqs(&[
            "garbage".into(),
            foreign.to_string(),
            fixture("open"),
        ]))
        .await;
    assert!(report.failures.is_empty());
    assert_eq!(report.unparseable, 1);
    assert_eq!(
        report.applied,
        vec![Applied::Uncorrelated, Applied::Absorbed]
    );
    assert_eq!(w.status(), Some(Status::SentToProvider));
}

#[tokio::test]
async fn a_store_failure_reports_the_record() {
    let w = world(Some(Status::SentToProvider));
    w.status.fail_finishes.set(1);
    let report = w.applier.handle(sqs(&[fixture("delivery")])).await;
    assert_eq!(report.failures, vec!["sqs-0".to_owned()]);
}
