//! SES events end to end on the emulators: a job sent through SES (moto), then its events in the
//! shapes SES publishes, applied to the real status and suppression tables.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers fail the test loudly

use std::sync::Arc;
use std::time::Duration;

use courier::aws::{Clients, DynamoDbStatusStore, DynamoDbSuppressionList};
use courier::policy::RetryPolicy;
use courier::ports::{StatusStore, SuppressionList, SystemClock};
use courier::status::Status;
use courier_events::{Applied, Applier};
use courier_integration::Stack;
use courier_send::config::SendConfig;
use courier_send::{RecordIn, wiring};

fn event(kind: &str, message_id: &str, provider_id: &str, detail: serde_json::Value) -> String {
    let mut e = serde_json::json!({
        "eventType": kind,
        "mail": {
            "timestamp": "2026-11-30T10:00:00.000Z",
            "messageId": provider_id,
            "destination": ["ann@example.org"],
            "headers": [{"name": "X-Courier-Message-Id", "value": message_id}],
            "tags": {"courier-message-id": [message_id]}
        }
    });
    if let (Some(obj), Some(d)) = (e.as_object_mut(), detail.as_object()) {
        for (k, v) in d {
            obj.insert(k.clone(), v.clone());
        }
    }
    // As SNS delivers it to the events queue.
    serde_json::json!({"Type": "Notification", "MessageId": "n", "TopicArn": "arn:aws:sns:us-east-1:123456789012:ses", "Message": e.to_string()}).to_string()
}

fn sqs(body: String) -> aws_lambda_events::sqs::SqsEvent {
    serde_json::from_value(serde_json::json!({"Records": [{"messageId": "e1", "receiptHandle": "r", "body": body, "attributes": {}, "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs", "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:events", "awsRegion": "us-east-1"}]})).unwrap()
}

#[tokio::test]
async fn delivery_and_bounce_events_reach_the_status_and_suppression_tables() {
    let stack = Stack::create(&["ses"]).await;
    let clients = Clients::new(&stack.sdk);
    let pipeline = Arc::new(
        wiring::wire(
            &clients,
            SendConfig::default(),
            &stack.resources,
            RetryPolicy::default(),
        )
        .unwrap(),
    );
    let job = |id: &str| {
        serde_json::json!({"version": 1, "message_id": id, "campaign_id": "ev", "from": stack.sender, "to": ["ann@example.org"], "content": {"subject": "s", "text": "t"}}).to_string()
    };
    let deadline = chrono::Utc::now() + chrono::Duration::seconds(30);
    let report = pipeline
        .handle_records(
            vec![
                RecordIn {
                    sqs_message_id: "a".into(),
                    body: job("ev-1"),
                },
                RecordIn {
                    sqs_message_id: "b".into(),
                    body: job("ev-2"),
                },
            ],
            deadline,
            "ev",
        )
        .await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    let status = Arc::new(DynamoDbStatusStore::new(
        clients.dynamodb.clone(),
        &stack.resources.status_table,
        Duration::from_secs(3600),
    ));
    let suppression = Arc::new(DynamoDbSuppressionList::new(
        clients.dynamodb.clone(),
        &stack.resources.suppression_table,
    ));
    let applier = Applier {
        status: status.clone(),
        suppression: suppression.clone(),
        clock: Arc::new(SystemClock),
    };
    let provider_id = |rec: courier::ports::JobRecord| rec.provider_message_id.unwrap();
    let p1 = provider_id(status.get("ev-1").await.unwrap().unwrap());
    let p2 = provider_id(status.get("ev-2").await.unwrap().unwrap());

    let delivered = applier.handle(sqs(event("Delivery", "ev-1", &p1, serde_json::json!({"delivery": {"recipients": ["ann@example.org"], "smtpResponse": "250 ok"}})))).await;
    assert_eq!(delivered.applied, vec![Applied::Changed(Status::Delivered)]);
    assert_eq!(
        status.get("ev-1").await.unwrap().unwrap().status,
        Status::Delivered
    );
    // The same event again, and a late Send: absorbed.
    let again = applier
        .handle(sqs(event(
            "Delivery",
            "ev-1",
            &p1,
            serde_json::json!({"delivery": {"recipients": ["ann@example.org"]}}),
        )))
        .await;
    let late = applier
        .handle(sqs(event(
            "Send",
            "ev-1",
            &p1,
            serde_json::json!({"send": {}}),
        )))
        .await;
    assert_eq!(
        (again.applied, late.applied),
        (vec![Applied::Absorbed], vec![Applied::Absorbed])
    );

    let bounce = serde_json::json!({"bounce": {"bounceType": "Permanent", "bounceSubType": "General", "bouncedRecipients": [{"emailAddress": "bob@example.org", "diagnosticCode": "smtp; 550 5.1.1 user unknown"}]}});
    let bounced = applier
        .handle(sqs(event("Bounce", "ev-2", &p2, bounce)))
        .await;
    assert_eq!(
        bounced.applied,
        vec![Applied::Changed(Status::BouncedPermanent)]
    );
    assert_eq!(
        suppression
            .suppressed(&["bob@example.org".into()], chrono::Utc::now())
            .await
            .unwrap()
            .len(),
        1
    );
    // An event for a job that does not exist yet is left for redelivery.
    let early = applier
        .handle(sqs(event(
            "Delivery",
            "ev-3",
            "p3",
            serde_json::json!({"delivery": {"recipients": []}}),
        )))
        .await;
    assert_eq!(early.failures, vec!["e1".to_owned()]);
}
