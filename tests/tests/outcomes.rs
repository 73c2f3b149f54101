//! Outcome events on the emulators: the status store's outbox (memory and DynamoDB alike), the
//! EventBridge adapter through a rule to an SQS queue, and a job sent by the send function whose
//! outcome reaches a subscriber with the producer's metadata.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers fail the test loudly

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_eventbridge::types::Target;
use chrono::{DateTime, Utc};
use courier_adapters::aws::{Clients, DynamoDbStatusStore, EventBridgeOutcomeBus};
use courier_core::outcome::{OutcomeEvent, relay};
use courier_core::policy::RetryPolicy;
use courier_core::ports::{
    ClaimOutcome, ClaimRequest, JobFacts, Outbox, OutcomeBus, StatusStore, StatusUpdate,
};
use courier_core::status::Status;
use courier_devkit::memory::MemoryStatusStore;
use courier_integration::{Stack, unique};
use courier_send::config::SendConfig;
use courier_send::{RecordIn, wiring};

fn now() -> DateTime<Utc> {
    // Whole milliseconds: DynamoDB stores epoch milliseconds.
    DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).unwrap()
}

fn facts() -> JobFacts {
    JobFacts {
        campaign_id: Some("spring".into()),
        metadata: BTreeMap::from([("order".into(), "o-42".into())]),
    }
}

async fn outbox_contract(store: &dyn StatusStore) {
    let t = now();
    // GIVEN a claimed job WHEN its send is recorded THEN the record holds the outcome, unpublished
    let id = unique("out");
    let claim = ClaimRequest {
        message_id: id.clone(),
        attempt: 1,
        owner: "o".into(),
        now: t,
        lease_until: t + chrono::Duration::seconds(60),
        grace: chrono::Duration::seconds(600),
        check_suppressed: Vec::new(),
        trace_id: Some("t-1".into()),
        facts: facts(),
        payload: None,
    };
    assert_eq!(store.claim(&claim).await.unwrap(), ClaimOutcome::Claimed);
    let record = store.get(&id).await.unwrap().unwrap();
    assert_eq!((record.facts.clone(), record.outbox), (facts(), None));
    let mut sent = StatusUpdate::new(&id, "o", Status::SentToProvider, 1, t);
    sent.provider = Some("smtp".into());
    store.finish(&sent).await.unwrap();
    let record = store.get(&id).await.unwrap().unwrap();
    let outbox = Outbox {
        status: Status::SentToProvider,
        attempt: 1,
        at: t,
    };
    assert_eq!(record.outbox, Some(outbox));
    // The relay reads the batch's records in one call; jobs without a record are left out.
    let many = store
        .get_many(&[id.clone(), unique("never"), id.clone()])
        .await
        .unwrap();
    assert_eq!(many, vec![record.clone()]);
    let event = OutcomeEvent::pending(&record).unwrap();
    assert_eq!(event.detail.metadata["order"], "o-42");
    assert_eq!(event.detail.trace_id.as_deref(), Some("t-1"));
    // AND the sweeper finds it once it is older than its cut-off, not before
    let later = t + chrono::Duration::seconds(1);
    assert!(
        store
            .outbox_before(later, 1000)
            .await
            .unwrap()
            .contains(&id)
    );
    assert!(!store.outbox_before(t, 1000).await.unwrap().contains(&id));
    // WHEN a later outcome replaces it THEN clearing the earlier one changes nothing
    let delivered = StatusUpdate::new(&id, "events", Status::Delivered, 1, later);
    store.record(&delivered).await.unwrap();
    assert!(!store.outcome_published(&id, &outbox).await.unwrap());
    let newer = store.get(&id).await.unwrap().unwrap().outbox.unwrap();
    assert_eq!((newer.status, newer.at), (Status::Delivered, later));
    // AND clearing the one it holds empties the outbox and the index
    assert!(store.outcome_published(&id, &newer).await.unwrap());
    assert_eq!(store.get(&id).await.unwrap().unwrap().outbox, None);
    let far = later + chrono::Duration::hours(1);
    assert!(!store.outbox_before(far, 1000).await.unwrap().contains(&id));
    // A status on the way is no outcome: nothing marked.
    let other = unique("way");
    let mut claim = claim.clone();
    claim.message_id = other.clone();
    store.claim(&claim).await.unwrap();
    store
        .finish(&StatusUpdate::new(&other, "o", Status::Deferred, 1, t))
        .await
        .unwrap();
    assert_eq!(store.get(&other).await.unwrap().unwrap().outbox, None);
    // A write before any claim keeps the facts it brings, and not over facts already kept.
    let suppressed = unique("sup");
    let mut update = StatusUpdate::new(&suppressed, "o", Status::Suppressed, 0, t);
    update.facts = Some(Box::new(facts()));
    store.record(&update).await.unwrap();
    let record = store.get(&suppressed).await.unwrap().unwrap();
    assert_eq!(record.facts, facts());
    assert_eq!(record.outbox.map(|o| o.status), Some(Status::Suppressed));
}

#[tokio::test]
async fn the_outbox_memory_and_dynamodb() {
    outbox_contract(&MemoryStatusStore::default()).await;
    let stack = Stack::create(&["smtp"]).await;
    let store = DynamoDbStatusStore::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk),
        &stack.resources.status_table,
        Duration::from_secs(3600),
    );
    outbox_contract(&store).await;
}

/// A queue subscribed to everything Courier publishes on the stack's bus.
async fn subscriber(stack: &Stack) -> String {
    let sqs = stack.sqs();
    let queue_url = sqs
        .create_queue()
        .queue_name(unique("outcomes"))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&queue_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()[&aws_sdk_sqs::types::QueueAttributeName::QueueArn]
        .clone();
    let events = aws_sdk_eventbridge::Client::new(&stack.sdk);
    let bus = stack.resources.outcome_bus.clone().unwrap();
    let rule = unique("outcomes-rule");
    events
        .put_rule()
        .name(&rule)
        .event_bus_name(&bus)
        .event_pattern(r#"{"source": ["courier"]}"#)
        .send()
        .await
        .unwrap();
    events
        .put_targets()
        .rule(&rule)
        .event_bus_name(&bus)
        .targets(Target::builder().id("q").arn(arn).build().unwrap())
        .send()
        .await
        .unwrap();
    queue_url
}

/// The EventBridge envelopes on `queue_url`, waiting up to 20 s for `count`.
async fn received(stack: &Stack, queue_url: &str, count: usize) -> Vec<serde_json::Value> {
    let sqs = stack.sqs();
    let mut found = Vec::new();
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while found.len() < count && std::time::Instant::now() < until {
        let out = sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap();
        for m in out.messages() {
            found.push(serde_json::from_str(m.body().unwrap()).unwrap());
        }
    }
    found
}

fn event(i: usize) -> OutcomeEvent {
    let mut record =
        courier_core::ports::JobRecord::new(format!("m-{i}"), Status::Delivered, 1, now());
    record.facts = facts();
    record.outbox = Some(Outbox {
        status: Status::Delivered,
        attempt: 1,
        at: now(),
    });
    OutcomeEvent::pending(&record).unwrap()
}

#[tokio::test]
async fn the_eventbridge_bus_reaches_a_rules_queue_in_calls_of_ten() {
    let stack = Stack::create(&["smtp"]).await;
    let queue_url = subscriber(&stack).await;
    let bus = EventBridgeOutcomeBus::new(
        aws_sdk_eventbridge::Client::new(&stack.sdk),
        stack.resources.outcome_bus.clone().unwrap(),
    );
    // WHEN 12 events are published (two PutEvents calls)
    let events: Vec<OutcomeEvent> = (0..12).map(event).collect();
    let results = bus.publish(&events).await;
    assert_eq!(results.len(), 12);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    // THEN the rule delivers each, as EventBridge's envelope around our detail
    let got = received(&stack, &queue_url, 12).await;
    assert_eq!(got.len(), 12);
    let mut ids: Vec<String> = got
        .iter()
        .map(|e| {
            assert_eq!(e["source"], "courier");
            assert_eq!(e["detail-type"], "Email Delivered");
            assert_eq!(e["detail"]["metadata"]["order"], "o-42");
            e["detail"]["event_id"].as_str().unwrap().to_owned()
        })
        .collect();
    ids.sort();
    let mut want: Vec<String> = (0..12).map(|i| format!("m-{i}/1/delivered")).collect();
    want.sort();
    assert_eq!(ids, want);
    // A bus that cannot be reached fails every event of the call, each with the reason.
    let unreachable = aws_sdk_eventbridge::config::Builder::from(&stack.sdk)
        .endpoint_url("http://127.0.0.1:9")
        .build();
    let missing = EventBridgeOutcomeBus::new(
        aws_sdk_eventbridge::Client::from_conf(unreachable),
        stack.resources.outcome_bus.clone().unwrap(),
    );
    let results = missing.publish(&events[..2]).await;
    assert_eq!(results.len(), 2);
    assert!(
        results.iter().all(|r| r
            .as_ref()
            .is_err_and(|e| e.to_string().contains("outcome publish"))),
        "{results:?}"
    );
}

#[tokio::test]
async fn a_job_sent_by_the_send_function_tells_its_subscriber_with_its_metadata() {
    let stack = Stack::create(&["ses"]).await;
    let queue_url = subscriber(&stack).await;
    let pipeline = Arc::new(
        wiring::wire(
            &Clients::new(&stack.sdk),
            SendConfig::default(),
            &stack.resources,
            RetryPolicy::default(),
        )
        .unwrap(),
    );
    let job = serde_json::json!({
        "version": 1, "message_id": unique("e2e"), "campaign_id": "spring",
        "trace_id": "t-e2e", "from": stack.sender, "to": ["ann@example.org"],
        "content": {"subject": "Hi", "text": "Hello"},
        "metadata": {"order": "o-42", "tenant": "acme"}
    });
    let id = job["message_id"].as_str().unwrap().to_owned();
    let deadline = Utc::now() + chrono::Duration::seconds(60);
    let report = pipeline
        .handle_records(
            vec![RecordIn {
                sqs_message_id: "q-1".into(),
                body: job.to_string(),
                trace_header: None,
            }],
            deadline,
            "req-e2e",
        )
        .await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    let got = received(&stack, &queue_url, 1).await;
    assert_eq!(got.len(), 1, "{got:?}");
    let detail = &got[0]["detail"];
    assert_eq!(got[0]["detail-type"], "Email Sent");
    assert_eq!(detail["message_id"], id.as_str());
    assert_eq!(detail["campaign_id"], "spring");
    assert_eq!(detail["trace_id"], "t-e2e");
    assert_eq!(detail["metadata"]["tenant"], "acme");
    assert_eq!(detail["provider"], "ses");
    // SES reports deliveries and bounces later: "sent" is not final there.
    assert_eq!(detail["final"], false);
    // AND the record's outbox is cleared: the sweeper has nothing to publish again
    let store = DynamoDbStatusStore::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk),
        &stack.resources.status_table,
        Duration::from_secs(3600),
    );
    assert_eq!(store.get(&id).await.unwrap().unwrap().outbox, None);
    let relayed = relay(
        &store,
        &EventBridgeOutcomeBus::new(
            aws_sdk_eventbridge::Client::new(&stack.sdk),
            stack.resources.outcome_bus.clone().unwrap(),
        ),
        std::slice::from_ref(&id),
    )
    .await;
    assert_eq!((relayed.published, relayed.failed.len()), (0, 0));
}
