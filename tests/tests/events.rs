//! SES events end to end on the emulators: a job sent through SES (moto), then its events in the
//! shapes SES publishes, applied to the real status and suppression tables.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers fail the test loudly

use std::sync::Arc;
use std::time::Duration;

use courier_adapters::aws::{
    Clients, DynamoDbBreakerStore, DynamoDbReputationStore, DynamoDbSuppressionList,
};
use courier_core::policy::RetryPolicy;
use courier_core::ports::{BreakerStore, StatusStore, StatusUpdate, SuppressionList};
use courier_core::reputation::GuardConfig;
use courier_core::status::Status;
use courier_events::Admission;
use courier_events::wiring::{Settings, wire};
use courier_events::{Applied, Applier};
use courier_integration::{Stack, unique};
use courier_send::config::SendConfig;
use courier_send::{RecordIn, wiring};

/// The events function wired to the stack's real tables and queues.
fn applier(stack: &Stack, policy: RetryPolicy, guard: GuardConfig) -> Applier {
    let r = &stack.resources;
    wire(
        &Clients::new(&stack.sdk),
        &Settings {
            status_table: r.status_table.clone(),
            suppression_table: r.suppression_table.clone(),
            control_table: r.control_table.clone(),
            queue_url: r.queue_url.clone(),
            retry_queue_url: r.retry_queue_url.clone(),
            delay_state_machine_arn: r.delay_state_machine_arn.clone(),
            dead_letter_queue_url: r.dead_letter_queue_url.clone(),
            letter_index_table: r.letter_index_table.clone(),
            payload_bucket: r.payload_bucket.clone(),
            policy,
            guard,
            soft_suppression: chrono::Duration::days(14),
            // The fixtures come in every envelope, unsigned; the gate has its own tests.
            admission: Admission::Any,
            archive_retention_days: 365,
            envelope_key_secret: r.envelope_key_secret.clone(),
            live_settings_cache: chrono::Duration::seconds(30),
            outcome_bus: r.outcome_bus.clone(),
        },
    )
    .expect("wired")
}

/// Soft bounces retried after 2 s (queue delay), twice at most.
const SOFT_POLICY: &str = r#"{
  "transactional": {"classes": {
    "mailbox_temporary": {"retries": 2, "schedule": {"delays": [2]}, "jitter": {"kind": "none"}, "spends_attempt": true, "horizon": "10m"}
  }},
  "bulk": {"classes": {
    "mailbox_temporary": {"retries": 2, "schedule": {"delays": [2]}, "jitter": {"kind": "none"}, "spends_attempt": true, "horizon": "10m"}
  }}
}"#;

fn event(kind: &str, message_id: &str, provider_id: &str, detail: serde_json::Value) -> String {
    event_from(
        "Shop <shop@example.com>",
        kind,
        message_id,
        provider_id,
        detail,
    )
}

fn event_from(
    source: &str,
    kind: &str,
    message_id: &str,
    provider_id: &str,
    detail: serde_json::Value,
) -> String {
    let mut e = serde_json::json!({
        "eventType": kind,
        "mail": {
            "timestamp": "2026-11-30T10:00:00.000Z",
            "source": source,
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
    sqs_batch(vec![body])
}

fn sqs_batch(bodies: Vec<String>) -> aws_lambda_events::sqs::SqsEvent {
    let records: Vec<serde_json::Value> = bodies
        .into_iter()
        .enumerate()
        .map(|(i, body)| serde_json::json!({"messageId": format!("e{}", i + 1), "receiptHandle": "r", "body": body, "attributes": {}, "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs", "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:events", "awsRegion": "us-east-1"}))
        .collect();
    serde_json::from_value(serde_json::json!({ "Records": records })).unwrap()
}

#[tokio::test]
async fn delivery_and_bounce_events_reach_the_status_and_suppression_tables() {
    let stack = Stack::create(&["ses"]).await;
    let clients = Clients::new(&stack.sdk);
    let pipeline = stack.send_pipeline();
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
                    trace_header: None,
                },
                RecordIn {
                    sqs_message_id: "b".into(),
                    body: job("ev-2"),
                    trace_header: None,
                },
            ],
            deadline,
            "ev",
        )
        .await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    let status = Arc::new(stack.status_store());
    let suppression = Arc::new(DynamoDbSuppressionList::new(
        clients.dynamodb.clone(),
        &stack.resources.suppression_table,
    ));
    let applier = applier(&stack, RetryPolicy::default(), GuardConfig::default());
    let provider_id = |rec: courier_core::ports::JobRecord| rec.provider_message_id.unwrap();
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

/// The send function on `stack` with the short soft-bounce policy.
fn soft_pipeline(stack: &Stack) -> Arc<courier_send::Pipeline> {
    Arc::new(soft_send_function(stack))
}

/// The send function with the compressed soft-bounce policy.
fn soft_send_function(stack: &Stack) -> courier_send::Pipeline {
    wiring::wire(
        &Clients::new(&stack.sdk),
        SendConfig::default(),
        &stack.resources,
        RetryPolicy::from_json(SOFT_POLICY).unwrap(),
    )
    .unwrap()
}

/// The events function with the compressed soft-bounce policy.
fn soft_applier(stack: &Stack) -> Applier {
    applier(
        stack,
        RetryPolicy::from_json(SOFT_POLICY).unwrap(),
        GuardConfig::default(),
    )
}

/// One queue message through the send function; it must be handled. Its outcome counts.
async fn send_one(
    pipeline: &Arc<courier_send::Pipeline>,
    sqs_message_id: &str,
    body: String,
) -> std::collections::BTreeMap<String, u64> {
    let report = pipeline
        .handle_records(
            vec![RecordIn {
                sqs_message_id: sqs_message_id.into(),
                body,
                trace_header: None,
            }],
            chrono::Utc::now() + chrono::Duration::seconds(30),
            "soft",
        )
        .await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    report.metrics.counts.clone()
}

/// The one copy a resend put on the retry queue (the send queue without one), once its delay
/// is over.
async fn the_resent_copy(stack: &Stack) -> String {
    let copies = courier_integration::eventually(Duration::from_secs(20), || async {
        let got = stack.drain(stack.resources.requeue_url()).await;
        (!got.is_empty()).then_some(got)
    })
    .await
    .expect("the resent copy reaches the queue");
    assert_eq!(copies.len(), 1);
    copies[0].body().unwrap().to_owned()
}

/// SES's transient bounce of `address` (a full mailbox).
fn mailbox_full(address: &str) -> serde_json::Value {
    serde_json::json!({"bounce": {"bounceType": "Transient", "bounceSubType": "MailboxFull", "bouncedRecipients": [{"emailAddress": address, "status": "4.2.2", "diagnosticCode": "smtp; 452 4.2.2 mailbox full"}]}})
}

#[tokio::test]
async fn a_transient_bounce_sends_the_job_again_through_the_real_queue() {
    soft_bounce_round_trip("t".into()).await;
}

/// A body over 300 KiB is kept in the real payload bucket (the record holds a claim check of
/// it), and the events function sends the job again from there.
#[tokio::test]
async fn a_transient_bounce_of_a_body_over_300_kib_is_sent_again_from_the_payload_bucket() {
    soft_bounce_round_trip("t".repeat(courier_core::claim_check::MAX_KEPT_BYTES)).await;
}

/// A job with this text sent through SES, bounced transiently, sent again through the retry
/// queue.
async fn soft_bounce_round_trip(text: String) {
    // The stack as deployed: resends go to the retry queue.
    let mut stack = Stack::create(&["ses"]).await;
    stack.resources.retry_queue_url = Some(stack.retry_queue_url.clone());
    let pipeline = soft_pipeline(&stack);
    let id = unique("soft");
    let job = serde_json::json!({"version": 1, "message_id": id, "campaign_id": "soft", "from": stack.sender, "to": ["ann@example.org"], "content": {"subject": "s", "text": text}}).to_string();
    send_one(&pipeline, "a", job).await;
    let status = stack.status_store();
    let sent = status.get(&id).await.unwrap().unwrap();
    let kept = sent
        .payload
        .clone()
        .expect("the SES send keeps its payload");
    let payloads = courier_adapters::aws::S3PayloadStore::new(
        aws_sdk_s3::Client::new(&stack.sdk),
        &stack.resources.payload_bucket,
    );
    let body = courier_core::claim_check::redeem(Some(&payloads), &kept)
        .await
        .expect("the kept body, from the bucket if it is kept there");
    let check = courier_core::claim_check::ClaimCheck::parse(&kept);
    assert_eq!(
        check.is_some(),
        body.len() > courier_core::claim_check::MAX_KEPT_BYTES,
        "kept apart exactly when over the limit"
    );
    let first = sent.provider_message_id.clone().unwrap();

    let events = soft_applier(&stack);
    let applied = events
        .handle(sqs(event(
            "Bounce",
            &id,
            &first,
            mailbox_full("ann@example.org"),
        )))
        .await;
    assert_eq!(applied.applied, vec![Applied::Resent], "{applied:?}");
    let rec = status.get(&id).await.unwrap().unwrap();
    assert_eq!((rec.status, rec.attempt), (Status::Deferred, 1));

    // The copy is on the retry queue after its delay, none on the send queue; the send
    // function sends it again.
    let copy = the_resent_copy(&stack).await;
    assert!(stack.drain(&stack.resources.queue_url).await.is_empty());
    let resent = courier_core::envelope::parse_body(copy.as_bytes()).unwrap();
    assert_eq!(
        resent.job.content.as_ref().and_then(|c| c.text.as_deref()),
        Some(text.as_str())
    );
    // A copy that waits unclaimed (a send-rate slot not free yet) comes back to the retry
    // queue as itself: that one is sent. Any other end of the copy fails here with its counts.
    let mut copy = copy;
    let mut handled = Vec::new();
    let rec = loop {
        handled.push(send_one(&pipeline, "b", copy).await);
        let rec = status.get(&id).await.unwrap().unwrap();
        if rec.status != Status::Deferred || handled.len() == 3 {
            break rec;
        }
        eprintln!("the copy was not sent: {handled:?}");
        copy = the_resent_copy(&stack).await;
    };
    assert_eq!(
        (rec.status, rec.attempt),
        (Status::SentToProvider, 1),
        "{handled:?}"
    );
    assert_ne!(rec.provider_message_id.as_deref(), Some(first.as_str()));
    let timeline: Vec<Status> = rec.history.iter().map(|h| h.status).collect();
    assert_eq!(
        timeline,
        vec![
            Status::Processing,
            Status::SentToProvider,
            Status::BouncedTransient,
            Status::Deferred,
            Status::Processing,
            Status::SentToProvider
        ]
    );
}

/// SES as the send function calls it, then the process gone: the answer is kept for the test
/// and the call never returns, so the invocation writes nothing after it (its task waits for
/// ever, as a process killed between SES's acceptance and its status write).
struct KilledAfterSes {
    ses: Arc<dyn courier_core::ports::Mailer>,
    took: Arc<tokio::sync::Notify>,
    id: std::sync::Mutex<Option<String>>,
}

#[async_trait::async_trait]
impl courier_core::ports::Mailer for KilledAfterSes {
    fn provider(&self) -> courier_core::ports::Provider {
        self.ses.provider()
    }

    async fn send(
        &self,
        email: &courier_core::ports::OutgoingEmail,
    ) -> Result<courier_core::ports::Receipt, courier_core::ports::SendFailure> {
        let receipt = self.ses.send(email).await?;
        *self.id.lock().unwrap() = Some(receipt.provider_message_id.clone());
        self.took.notify_one();
        std::future::pending().await
    }
}

/// `body` through a send function that SES takes it from and that is killed right after;
/// SES's message id.
async fn killed_after_ses(stack: &Stack, body: String) -> String {
    let mut doomed = soft_send_function(stack);
    let took = Arc::new(tokio::sync::Notify::new());
    let killed = Arc::new(KilledAfterSes {
        ses: doomed.mailers[0].clone(),
        took: took.clone(),
        id: std::sync::Mutex::new(None),
    });
    assert_eq!(
        courier_core::ports::Mailer::provider(&*killed),
        courier_core::ports::Provider::Ses
    );
    doomed.mailers = vec![killed.clone()];
    let record = RecordIn {
        sqs_message_id: "doomed".into(),
        body,
        trace_header: None,
    };
    let deadline = chrono::Utc::now() + chrono::Duration::seconds(30);
    let doomed = Arc::new(doomed);
    tokio::select! {
        _ = doomed.handle_records(vec![record], deadline, "doomed") => panic!("the send was to be killed"),
        () = took.notified() => {}
    }
    killed.id.lock().unwrap().clone().unwrap()
}

#[tokio::test]
async fn a_send_killed_after_ses_took_it_is_sent_again_on_its_transient_bounce() {
    // The order chaos-ci seed 63531 found: the send function dies after SES accepted and
    // before its own status write; SES's Send event records the send first, then SES reports
    // a transient bounce; SQS redelivers the job's copy later. Then the same for the resend.
    let stack = Stack::create(&["ses"]).await;
    let id = unique("killed");
    let job = serde_json::json!({"version": 1, "message_id": id, "campaign_id": "soft", "from": stack.sender, "to": ["ann@example.org"], "content": {"subject": "s", "text": "t"}}).to_string();
    let status = stack.status_store();
    let events = soft_applier(&stack);
    let pipeline = soft_pipeline(&stack);
    let mut copy = job.clone();
    let mut taken = Vec::new();
    for generation in 0..2 {
        let ses_id = killed_after_ses(&stack, copy.clone()).await;
        let rec = status.get(&id).await.unwrap().unwrap();
        assert_eq!(
            (rec.status, rec.attempt),
            (Status::Processing, generation),
            "nothing written after the send"
        );
        assert!(rec.payload.is_some(), "the claim kept the body");
        assert_eq!(rec.provider_message_id, None, "no earlier send's id");

        // SES's Send event records the send; its transient bounce sends the job again.
        let sent = events
            .handle(sqs(event(
                "Send",
                &id,
                &ses_id,
                serde_json::json!({"send": {}}),
            )))
            .await;
        assert!(sent.failures.is_empty(), "{sent:?}");
        let rec = status.get(&id).await.unwrap().unwrap();
        assert_eq!(
            (rec.status, rec.provider_message_id.as_deref()),
            (Status::SentToProvider, Some(ses_id.as_str()))
        );
        let bounced = events
            .handle(sqs(event(
                "Bounce",
                &id,
                &ses_id,
                mailbox_full("ann@example.org"),
            )))
            .await;
        assert_eq!(bounced.applied, vec![Applied::Resent], "{bounced:?}");
        let rec = status.get(&id).await.unwrap().unwrap();
        assert_eq!(
            (rec.status, rec.attempt),
            (Status::Deferred, generation + 1)
        );

        // The killed invocation's copy comes back: a stale generation, dropped without a send.
        let report = redelivered(&pipeline, copy).await;
        assert!(report.failures.is_empty(), "{:?}", report.reasons);
        assert_eq!(report.metrics.counts.get("StaleCopiesDropped"), Some(&1));
        assert_eq!(
            status.get(&id).await.unwrap().unwrap().attempt,
            generation + 1,
            "nothing sent by the stale copy"
        );
        taken.push(ses_id);
        copy = the_resent_copy(&stack).await;
    }

    // The second resend's copy is sent: a third SES message, generation 2.
    send_one(&pipeline, "b", copy).await;
    let rec = status.get(&id).await.unwrap().unwrap();
    assert_eq!((rec.status, rec.attempt), (Status::SentToProvider, 2));
    assert!(!taken.contains(rec.provider_message_id.as_ref().unwrap()));
}

/// The send function's run of a job's copy SQS delivered again (the killed invocation's).
async fn redelivered(
    pipeline: &Arc<courier_send::Pipeline>,
    body: String,
) -> courier_send::BatchReport {
    pipeline
        .handle_records(
            vec![RecordIn {
                sqs_message_id: "redelivered".into(),
                body,
                trace_header: None,
            }],
            chrono::Utc::now() + chrono::Duration::seconds(30),
            "redelivered",
        )
        .await
}

/// `sns` (an event as [`event`] makes it) for a message SES sent to `addresses`.
fn sent_to(sns: String, addresses: &[&str]) -> String {
    let mut outer: serde_json::Value = serde_json::from_str(&sns).unwrap();
    let mut inner: serde_json::Value =
        serde_json::from_str(outer["Message"].as_str().unwrap()).unwrap();
    inner["mail"]["destination"] = serde_json::json!(addresses);
    outer["Message"] = inner.to_string().into();
    outer.to_string()
}

#[tokio::test]
async fn a_send_of_three_killed_after_ses_took_it_resends_only_the_bounced_recipient() {
    use courier_core::recipients::RecipientStatus;
    // GIVEN a job to Ann (to), Bob (cc) and Cy (bcc) whose send function died after SES took
    // it; SES's Send event recorded the send, without the recipients the function would have
    let stack = Stack::create(&["ses"]).await;
    let id = unique("killed3");
    let job = serde_json::json!({"version": 1, "message_id": id, "campaign_id": "soft", "from": stack.sender, "to": ["Ann <ann@example.org>"], "cc": ["Bob <bob@example.org>"], "bcc": ["cy@example.org"], "content": {"subject": "s", "text": "t"}}).to_string();
    let status = stack.status_store();
    let events = soft_applier(&stack);
    let pipeline = soft_pipeline(&stack);
    let ses_id = killed_after_ses(&stack, job.clone()).await;
    let all = ["ann@example.org", "bob@example.org", "cy@example.org"];
    let sent = sent_to(
        event("Send", &id, &ses_id, serde_json::json!({"send": {}})),
        &all,
    );
    let report = events.handle(sqs(sent)).await;
    assert!(report.failures.is_empty(), "{report:?}");
    let rec = status.get(&id).await.unwrap().unwrap();
    assert_eq!(rec.status, Status::SentToProvider);
    assert!(
        rec.recipients.is_empty(),
        "the Send event alone wrote no list"
    );
    // WHEN SES reports Bob's mailbox full
    let bounce = sent_to(
        event("Bounce", &id, &ses_id, mailbox_full("bob@example.org")),
        &all,
    );
    let bounced = events.handle(sqs(bounce.clone())).await;
    // THEN the record takes its recipients from SES's event, and Bob alone is sent again
    assert_eq!(bounced.applied, vec![Applied::Resent], "{bounced:?}");
    let rec = status.get(&id).await.unwrap().unwrap();
    assert_eq!((rec.status, rec.attempt), (Status::SentToProvider, 0));
    let roll: Vec<(&str, &str, RecipientStatus)> = rec
        .recipients
        .iter()
        .map(|r| (r.address.as_str(), r.role.as_str(), r.status))
        .collect();
    assert_eq!(
        roll,
        vec![
            ("ann@example.org", "to", RecipientStatus::Sent),
            ("bob@example.org", "cc", RecipientStatus::Resent),
            ("cy@example.org", "bcc", RecipientStatus::Sent),
        ]
    );
    // AND the killed invocation's copy, redelivered, sends nothing
    let report = redelivered(&pipeline, job).await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    let rec = status.get(&id).await.unwrap().unwrap();
    assert_eq!(rec.provider_message_id.as_deref(), Some(ses_id.as_str()));
    // AND the resend's copy goes to Bob alone, as Cc
    send_one(&pipeline, "b", the_resent_copy(&stack).await).await;
    let part = courier_core::recipients::part_id(&id, &ses_id, &["bob@example.org".into()]);
    let resent = status.get(&part).await.unwrap().expect("the part's record");
    assert_eq!(resent.status, Status::SentToProvider);
    let recipients: Vec<(&str, &str)> = resent
        .recipients
        .iter()
        .map(|r| (r.address.as_str(), r.role.as_str()))
        .collect();
    assert_eq!(recipients, vec![("bob@example.org", "cc")]);
    // AND the same bounce again changes nothing
    let again = events.handle(sqs(bounce)).await;
    assert_eq!(again.applied, vec![Applied::Absorbed]);
}

#[tokio::test]
async fn a_transient_bounce_of_one_of_three_recipients_resends_to_it_alone_through_the_real_queue()
{
    use courier_core::recipients::RecipientStatus;
    // GIVEN a job to Ann (to), Bob (cc) and Cy (bcc) sent through SES
    let stack = Stack::create(&["ses"]).await;
    let pipeline = soft_pipeline(&stack);
    let id = unique("part");
    let job = serde_json::json!({"version": 1, "message_id": id, "campaign_id": "soft", "from": stack.sender, "to": ["Ann <ann@example.org>"], "cc": ["Bob <bob@example.org>"], "bcc": ["cy@example.org"], "content": {"subject": "s", "text": "t"}}).to_string();
    send_one(&pipeline, "a", job).await;
    let status = stack.status_store();
    let first = status
        .get(&id)
        .await
        .unwrap()
        .unwrap()
        .provider_message_id
        .unwrap();
    // WHEN SES reports Bob's mailbox full
    let events = soft_applier(&stack);
    let bounce = event("Bounce", &id, &first, mailbox_full("bob@example.org"));
    let applied = events.handle(sqs(bounce.clone())).await;
    assert_eq!(applied.applied, vec![Applied::Resent], "{applied:?}");
    // THEN the job keeps its send, and Bob is resent as a job of its own
    let rec = status.get(&id).await.unwrap().unwrap();
    assert_eq!((rec.status, rec.attempt), (Status::SentToProvider, 0));
    let part = courier_core::recipients::part_id(&id, &first, &["bob@example.org".into()]);
    let roll: Vec<RecipientStatus> = rec.recipients.iter().map(|r| r.status).collect();
    assert_eq!(
        roll,
        vec![
            RecipientStatus::Sent,
            RecipientStatus::Resent,
            RecipientStatus::Sent
        ]
    );
    // AND the part's own record waits for that copy, where the sweeper looks for lost copies
    let waiting = status.get(&part).await.unwrap().expect("the part's record");
    assert_eq!((waiting.status, waiting.attempt), (Status::Deferred, 1));
    let due = waiting.copy_due.expect("when its copy is due");
    let overdue = status
        .open_before(
            courier_core::ports::OpenState::Waiting,
            due + chrono::Duration::seconds(1),
            100,
        )
        .await
        .unwrap();
    assert!(overdue.iter().any(|r| r.message_id == part), "{overdue:?}");
    // AND its copy reaches the send queue, and the send function sends it to Bob alone, as Cc
    send_one(&pipeline, "b", the_resent_copy(&stack).await).await;
    let resent = status.get(&part).await.unwrap().expect("the part's record");
    assert_eq!(resent.status, Status::SentToProvider);
    assert_ne!(resent.provider_message_id.as_deref(), Some(first.as_str()));
    let recipients: Vec<(&str, &str, RecipientStatus)> = resent
        .recipients
        .iter()
        .map(|r| (r.address.as_str(), r.role.as_str(), r.status))
        .collect();
    assert_eq!(
        recipients,
        vec![("bob@example.org", "cc", RecipientStatus::Sent)]
    );
    // AND the same bounce again changes nothing and schedules nothing
    let again = events.handle(sqs(bounce)).await;
    assert_eq!(again.applied, vec![Applied::Absorbed]);
}

#[tokio::test]
async fn the_reputation_guard_pauses_a_domain_in_a_synthetic_bounce_wave() {
    let stack = Stack::create(&["ses"]).await;
    let clients = Clients::new(&stack.sdk);
    let status = stack.status_store();
    let domain = format!("{}.example", unique("wave"));
    let source = format!("News <news@{domain}>");
    let now = chrono::Utc::now();
    let ids: Vec<String> = (0..120).map(|i| format!("{domain}-{i}")).collect();
    for id in &ids {
        let mut sent = StatusUpdate::new(id.clone(), "send", Status::SentToProvider, 0, now);
        sent.provider = Some("ses".into());
        status.record(&sent).await.unwrap();
    }
    let guard = GuardConfig {
        min_volume: 100,
        ..GuardConfig::default()
    };
    let events = applier(&stack, RetryPolicy::default(), guard);
    let mut bodies: Vec<String> = ids
        .iter()
        .map(|id| {
            event_from(
                &source,
                "Send",
                id,
                &format!("p-{id}"),
                serde_json::json!({"send": {}}),
            )
        })
        .collect();
    let bounce = |id: &String| {
        event_from(
            &source,
            "Bounce",
            id,
            &format!("p-{id}"),
            serde_json::json!({"bounce": {"bounceType": "Permanent", "bounceSubType": "General", "bouncedRecipients": [{"emailAddress": "ann@example.org", "diagnosticCode": "smtp; 550 5.1.1 user unknown"}]}}),
        )
    };
    // 4 bounces in 120 sends (3.3%): below the trip.
    bodies.extend(ids[..4].iter().map(bounce));
    let mut tripped = Vec::new();
    for chunk in bodies.chunks(10) {
        let report = events.handle(sqs_batch(chunk.to_vec())).await;
        assert!(report.failures.is_empty(), "{report:?}");
        tripped.extend(report.tripped);
    }
    assert!(tripped.is_empty());
    // Two more: 6 in 120 (5%) trips it.
    let report = events
        .handle(sqs_batch(ids[4..6].iter().map(bounce).collect()))
        .await;
    assert_eq!(report.tripped.len(), 1, "{report:?}");
    let control =
        DynamoDbBreakerStore::new(clients.dynamodb.clone(), &stack.resources.control_table);
    let pause = control
        .load(&courier_core::reputation::pause_key(&domain))
        .await
        .unwrap()
        .expect("the pause is stored where the send function reads it");
    assert_eq!(pause.mode, courier_core::breaker::Mode::Open);

    // The send function holds back SES sends from that domain, and only from it.
    let pipeline = stack.send_pipeline();
    let job = |id: &str, from: &str| {
        serde_json::json!({"version": 1, "message_id": id, "campaign_id": "wave", "from": from, "to": ["carl@example.org"], "content": {"subject": "s", "text": "t"}}).to_string()
    };
    let held = unique("held");
    let free = unique("free");
    let report = pipeline
        .handle_records(
            vec![
                RecordIn {
                    sqs_message_id: "a".into(),
                    body: job(&held, &format!("news@{domain}")),
                    trace_header: None,
                },
                RecordIn {
                    sqs_message_id: "b".into(),
                    body: job(&free, &stack.sender),
                    trace_header: None,
                },
            ],
            chrono::Utc::now() + chrono::Duration::seconds(30),
            "wave",
        )
        .await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(
        status.get(&held).await.unwrap().unwrap().status,
        Status::Deferred
    );
    assert_eq!(
        status.get(&free).await.unwrap().unwrap().status,
        Status::SentToProvider
    );
}

/// A fixture (the shapes SES publishes) re-addressed to one of our jobs.
fn fixture_for(name: &str, message_id: &str, provider_id: &str) -> String {
    let path = format!(
        "{}/../functions/events/fixtures/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut e: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let readdress = |e: &mut serde_json::Value| {
        e["mail"]["messageId"] = provider_id.into();
        e["mail"]["headers"] =
            serde_json::json!([{"name": "X-Courier-Message-Id", "value": message_id}]);
        e["mail"]["tags"]["courier-message-id"] = serde_json::json!([message_id]);
    };
    if e.get("detail").is_some() {
        readdress(&mut e["detail"]);
    } else if e["Type"] == "Notification" {
        let mut inner: serde_json::Value =
            serde_json::from_str(e["Message"].as_str().unwrap()).unwrap();
        readdress(&mut inner);
        e["Message"] = inner.to_string().into();
    } else {
        readdress(&mut e);
    }
    e.to_string()
}

#[tokio::test]
async fn every_event_type_lands_on_the_real_tables() {
    let stack = Stack::create(&["ses"]).await;
    let status = stack.status_store();
    let events = applier(&stack, RetryPolicy::default(), GuardConfig::default());
    // (fixture, the record's status before, the status after, what the batch reports)
    let cases = [
        (
            "send",
            Status::Unknown,
            Status::SentToProvider,
            Applied::Changed(Status::SentToProvider),
        ),
        (
            "delivery",
            Status::SentToProvider,
            Status::Delivered,
            Applied::Changed(Status::Delivered),
        ),
        (
            "bounce-permanent",
            Status::SentToProvider,
            Status::BouncedPermanent,
            Applied::Changed(Status::BouncedPermanent),
        ),
        // No payload kept (e.g. sent before payloads were kept): recorded, not resent.
        (
            "bounce-transient",
            Status::SentToProvider,
            Status::BouncedTransient,
            Applied::Changed(Status::BouncedTransient),
        ),
        (
            "complaint",
            Status::Delivered,
            Status::Complained,
            Applied::Changed(Status::Complained),
        ),
        // SES is still trying: status unchanged, a note in the timeline.
        (
            "delivery-delay",
            Status::SentToProvider,
            Status::SentToProvider,
            Applied::Noted,
        ),
        // SES cannot tell: status unchanged, a note, the recipient soft-suppressed.
        (
            "bounce-undetermined",
            Status::SentToProvider,
            Status::SentToProvider,
            Applied::Noted,
        ),
        (
            "reject",
            Status::SentToProvider,
            Status::BouncedPermanent,
            Applied::Changed(Status::BouncedPermanent),
        ),
        (
            "rendering-failure",
            Status::SentToProvider,
            Status::BouncedPermanent,
            Applied::Changed(Status::BouncedPermanent),
        ),
        (
            "open",
            Status::Delivered,
            Status::Delivered,
            Applied::Absorbed,
        ),
    ];
    let now = chrono::Utc::now();
    // Every type as SES writes it, as SNS delivers it and as EventBridge delivers it.
    let cases = cases
        .into_iter()
        .flat_map(|(name, before, after, applied)| {
            ["", "sns-", "eventbridge-"]
                .map(|envelope| (format!("{envelope}{name}"), before, after, applied.clone()))
        });
    for (name, before, after, applied) in cases {
        let name = name.as_str();
        let id = unique(name);
        // The record as the send function (or, for `unknown`, a lease that expired) left it.
        let mut path = vec![Status::SentToProvider];
        if before == Status::Delivered {
            path.push(Status::Delivered);
        }
        if before == Status::Unknown {
            path = vec![Status::Unknown];
        }
        for s in path {
            let mut u = StatusUpdate::new(id.clone(), "send", s, 0, now);
            u.provider = Some("ses".into());
            status.record(&u).await.unwrap();
        }
        assert_eq!(
            status.get(&id).await.unwrap().unwrap().status,
            before,
            "{name}"
        );
        let report = events
            .handle(sqs(fixture_for(name, &id, &format!("p-{id}"))))
            .await;
        assert!(report.failures.is_empty(), "{name}: {report:?}");
        assert_eq!(report.applied, vec![applied.clone()], "{name}");
        let rec = status.get(&id).await.unwrap().unwrap();
        assert_eq!(rec.status, after, "{name}");
        if after != before || applied == Applied::Noted {
            assert_eq!(rec.history.last().unwrap().by, "events", "{name}");
        }
        let history = rec.history.len();
        // Applied twice (SNS and SQS deliver at least once): nothing more changes.
        let again = events
            .handle(sqs(fixture_for(name, &id, &format!("p-{id}"))))
            .await;
        assert!(again.failures.is_empty(), "{name}");
        let rec = status.get(&id).await.unwrap().unwrap();
        assert_eq!(rec.status, after, "{name}");
        assert_eq!(rec.history.len(), history, "{name}: noted once");
    }
}

/// A fixture as [`fixture_for`] makes it, without Courier's header and tag, sent at `sent_at`.
fn anonymous(name: &str, provider_id: &str, sent_at: chrono::DateTime<chrono::Utc>) -> String {
    let mut e: serde_json::Value =
        serde_json::from_str(&fixture_for(name, "unused", provider_id)).unwrap();
    e["mail"]["headers"] = serde_json::json!([]);
    e["mail"]["tags"] = serde_json::json!({});
    e["mail"]["timestamp"] = sent_at.to_rfc3339().into();
    e.to_string()
}

#[tokio::test]
async fn events_without_our_id_find_their_job_suppress_and_count_once() {
    let stack = Stack::create(&["ses"]).await;
    let clients = Clients::new(&stack.sdk);
    let status = stack.status_store();
    let suppression =
        DynamoDbSuppressionList::new(clients.dynamodb.clone(), &stack.resources.suppression_table);
    let control =
        DynamoDbReputationStore::new(clients.dynamodb.clone(), &stack.resources.control_table);
    let events = applier(&stack, RetryPolicy::default(), GuardConfig::default());
    let now = chrono::Utc::now();
    // GIVEN a job sent through SES, its SES message id recorded
    let id = unique("anon");
    let ses_id = unique("ses-anon");
    let mut sent = StatusUpdate::new(id.clone(), "send", Status::SentToProvider, 0, now);
    sent.provider = Some("ses".into());
    sent.provider_message_id = Some(ses_id.clone());
    status.record(&sent).await.unwrap();
    // WHEN its delivery arrives without our header and tag (retried while the index catches up)
    let mut applied = Vec::new();
    for _ in 0..20 {
        let report = events
            .handle(sqs(anonymous("delivery", &ses_id, now)))
            .await;
        applied = report.applied;
        if applied != vec![Applied::NotYet] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // THEN it is applied to the job
    assert_eq!(applied, vec![Applied::Changed(Status::Delivered)]);
    assert_eq!(
        status.get(&id).await.unwrap().unwrap().status,
        Status::Delivered
    );

    // GIVEN no job at all WHEN an old permanent bounce and a complaint arrive without our id
    for (name, address) in [
        ("bounce-permanent", "ann@example.org"),
        ("complaint", "ann@example.org"),
    ] {
        let report = events
            .handle(sqs(anonymous(
                name,
                &unique("ses-foreign"),
                now - chrono::Duration::hours(1),
            )))
            .await;
        // THEN uncorrelated, acknowledged, and the recipient suppressed for good
        assert!(report.failures.is_empty(), "{name}");
        assert_eq!(report.applied, vec![Applied::Uncorrelated], "{name}");
        let entries = suppression.list(1000, None).await.unwrap().0;
        let entry = entries.iter().find(|e| e.address == address).unwrap();
        assert_eq!(entry.expires_at, None, "{name}");
        suppression.remove(address).await.unwrap();
    }

    // GIVEN a bounce from a fresh domain WHEN it is delivered twice (SNS, then EventBridge)
    let domain = format!("{}.example", unique("dup"));
    let source = format!("News <news@{domain}>");
    let bounce_id = unique("dup-job");
    let mut rec = StatusUpdate::new(bounce_id.clone(), "send", Status::SentToProvider, 0, now);
    rec.provider = Some("ses".into());
    status.record(&rec).await.unwrap();
    let bounce = event_from(
        &source,
        "Bounce",
        &bounce_id,
        &format!("p-{bounce_id}"),
        serde_json::json!({"bounce": {"bounceType": "Permanent", "bounceSubType": "General", "bouncedRecipients": [{"emailAddress": "cat@example.org", "diagnosticCode": "smtp; 550 5.1.1 user unknown"}]}}),
    );
    let first = events.handle(sqs(bounce.clone())).await;
    let second = events.handle(sqs(bounce)).await;
    assert_eq!(
        first.applied,
        vec![Applied::Changed(Status::BouncedPermanent)]
    );
    assert_eq!(second.applied, vec![Applied::Absorbed]);
    assert_eq!(second.recounts_skipped, 1);
    // THEN the window counts it once
    let window = courier_core::ports::ReputationStore::window(
        &control,
        &domain,
        courier_core::reputation::bucket_of(now - chrono::Duration::hours(1)),
    )
    .await
    .unwrap();
    assert_eq!(window.bounced, 1);
}

/// The ordering races with real concurrency: every event of a job applied at once by separate
/// invocations, in a different order per job, each redelivered (as SQS would) while the function
/// leaves it for later. On moto a job's events come one at a time (see below).
#[tokio::test]
async fn concurrent_out_of_order_events_end_in_the_furthest_status() {
    // GIVEN jobs sent through SES
    let stack = Stack::create(&["ses"]).await;
    let ids: Vec<String> = (0..6).map(|i| format!("race-{i}")).collect();
    let applier = send_through_ses(&stack, &ids, |id| serde_json::json!({"version": 1, "message_id": id, "campaign_id": "race", "from": stack.sender, "to": ["ann@example.org"], "content": {"subject": "s", "text": "t"}})).await;
    let status = stack.status_store();
    // WHEN each job's SEND, DELIVERY, DELIVERY_DELAY and COMPLAINT arrive at once, in an order of
    // their own
    let mut tasks = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let provider_id = status
            .get(id)
            .await
            .unwrap()
            .unwrap()
            .provider_message_id
            .unwrap();
        let mut events = vec![
            event("Send", id, &provider_id, serde_json::json!({"send": {}})),
            event(
                "Delivery",
                id,
                &provider_id,
                serde_json::json!({"delivery": {"recipients": ["ann@example.org"], "smtpResponse": "250 ok"}}),
            ),
            event(
                "DeliveryDelay",
                id,
                &provider_id,
                serde_json::json!({"deliveryDelay": {"delayType": "MailboxFull", "delayedRecipients": [{"emailAddress": "ann@example.org", "status": "4.2.2", "diagnosticCode": "smtp; 452 4.2.2 mailbox full"}]}}),
            ),
            event(
                "Complaint",
                id,
                &provider_id,
                serde_json::json!({"complaint": {"complainedRecipients": [{"emailAddress": "ann@example.org"}], "complaintFeedbackType": "abuse"}}),
            ),
        ];
        events.rotate_left(i % 4);
        if i % 2 == 1 {
            events.reverse();
        }
        if !courier_integration::atomic_conditional_writes() {
            // moto applies concurrent conditional writes to one item without isolation (both
            // can pass their condition, the later write wins), so there a job's events arrive
            // one at a time, in its own order, each left for later going to the back as SQS
            // would redeliver it; jobs still run at once. The same-item race is asserted on
            // LocalStack (DynamoDB Local).
            let applier = Arc::clone(&applier);
            tasks.push(tokio::spawn(async move {
                let mut queue: std::collections::VecDeque<String> = events.into();
                for _ in 0..120 {
                    let Some(body) = queue.pop_front() else {
                        return;
                    };
                    if !applier.handle(sqs(body.clone())).await.failures.is_empty() {
                        queue.push_back(body);
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
                panic!("events still left for redelivery after 120 deliveries: {queue:?}");
            }));
            continue;
        }
        for body in events {
            let applier = Arc::clone(&applier);
            tasks.push(tokio::spawn(async move {
                for _ in 0..30 {
                    let report = applier.handle(sqs(body.clone())).await;
                    if report.failures.is_empty() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                panic!("an event was left for redelivery 30 times: {body}");
            }));
        }
    }
    for task in futures::future::join_all(tasks).await {
        task.unwrap();
    }
    // THEN every job ends `complained`, its history only moves forward, and the delay is in its
    // timeline once
    for id in &ids {
        let rec = status.get(id).await.unwrap().unwrap();
        assert_eq!(rec.status, Status::Complained, "{id}: {:?}", rec.history);
        for pair in rec.history.windows(2) {
            assert!(
                pair[0].status == pair[1].status
                    || matches!(
                        courier_core::status::transition(pair[0].status, pair[1].status),
                        Ok(courier_core::status::Transition::Applied)
                    ),
                "{id}: {:?} then {:?}",
                pair[0],
                pair[1]
            );
        }
        let delays = rec
            .history
            .iter()
            .filter(|h| {
                h.detail
                    .as_deref()
                    .is_some_and(|d| d.contains("delivery delayed"))
            })
            .count();
        assert_eq!(delays, 1, "{id}: {:?}", rec.history);
    }
}

/// Sends the jobs `job` makes of `ids` through the send function (SES on the emulator), and
/// gives the events function with the default policy.
async fn send_through_ses(
    stack: &Stack,
    ids: &[String],
    job: impl Fn(&str) -> serde_json::Value,
) -> Arc<Applier> {
    let records = ids
        .iter()
        .map(|id| RecordIn {
            sqs_message_id: id.clone(),
            body: job(id).to_string(),
            trace_header: None,
        })
        .collect();
    let deadline = chrono::Utc::now() + chrono::Duration::seconds(30);
    let report = stack
        .send_pipeline()
        .handle_records(records, deadline, "events-it")
        .await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    Arc::new(applier(
        stack,
        RetryPolicy::default(),
        GuardConfig::default(),
    ))
}

/// Applies `bodies` at once (on moto, which does not isolate concurrent conditional writes to
/// one item, one at a time in the order given), each redelivered until it is acknowledged.
async fn deliver_all(applier: &Arc<Applier>, bodies: Vec<String>) {
    let deliver = |body: String| {
        let applier = Arc::clone(applier);
        async move {
            for _ in 0..30 {
                if applier.handle(sqs(body.clone())).await.failures.is_empty() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            panic!("an event was left for redelivery 30 times: {body}");
        }
    };
    if courier_integration::atomic_conditional_writes() {
        let tasks: Vec<_> = bodies
            .into_iter()
            .map(|b| tokio::spawn(deliver(b)))
            .collect();
        for task in futures::future::join_all(tasks).await {
            task.unwrap();
        }
    } else {
        for body in bodies {
            deliver(body).await;
        }
    }
}

#[tokio::test]
async fn a_job_to_three_recipients_ends_with_one_delivery_one_bounce_and_one_complaint() {
    use courier_core::recipients::RecipientStatus;
    // GIVEN two jobs to Ann (to), Bob (cc) and Cy (bcc) sent through SES
    let stack = Stack::create(&["ses"]).await;
    let ids = [unique("three"), unique("partly")];
    let applier = send_through_ses(&stack, &ids, |id| serde_json::json!({"version": 1, "message_id": id, "campaign_id": "rcpt", "from": stack.sender, "to": ["Ann <ann@example.org>"], "cc": ["bob@example.org"], "bcc": ["cy@example.org"], "content": {"subject": "s", "text": "t"}})).await;
    let status = stack.status_store();
    let provider = |id: &str| {
        let status = &status;
        let id = id.to_owned();
        async move {
            status
                .get(&id)
                .await
                .unwrap()
                .unwrap()
                .provider_message_id
                .unwrap()
        }
    };
    let (p0, p1) = (provider(&ids[0]).await, provider(&ids[1]).await);
    let delivery = |id: &str, p: &str, to: &[&str]| {
        event(
            "Delivery",
            id,
            p,
            serde_json::json!({"delivery": {"recipients": to, "smtpResponse": "250 ok"}}),
        )
    };
    let bounce = |id: &str, p: &str| {
        event(
            "Bounce",
            id,
            p,
            serde_json::json!({"bounce": {"bounceType": "Permanent", "bounceSubType": "General", "bouncedRecipients": [{"emailAddress": "bob@example.org", "status": "5.1.1", "diagnosticCode": "smtp; 550 5.1.1 user unknown"}]}}),
        )
    };
    // WHEN the first job's delivery to Ann, bounce from Bob and complaint from Cy arrive at once,
    // and the second's deliveries to Ann and Cy and bounce from Bob
    deliver_all(
        &applier,
        vec![
            delivery(&ids[0], &p0, &["ann@example.org"]),
            bounce(&ids[0], &p0),
            event("Complaint", &ids[0], &p0, serde_json::json!({"complaint": {"complainedRecipients": [{"emailAddress": "cy@example.org"}], "complaintFeedbackType": "abuse"}})),
            delivery(&ids[1], &p1, &["ann@example.org", "cy@example.org"]),
            bounce(&ids[1], &p1),
        ],
    )
    .await;
    // THEN each recipient has its own outcome, and each job the status they make
    let outcomes = |rec: &courier_core::ports::JobRecord| {
        rec.recipients
            .iter()
            .map(|r| (r.address.clone(), r.role.as_str(), r.status))
            .collect::<Vec<_>>()
    };
    let first = status.get(&ids[0]).await.unwrap().unwrap();
    assert_eq!(first.status, Status::Complained, "{:?}", first.history);
    assert_eq!(
        outcomes(&first),
        vec![
            (
                "ann@example.org".to_owned(),
                "to",
                RecipientStatus::Delivered
            ),
            (
                "bob@example.org".to_owned(),
                "cc",
                RecipientStatus::BouncedPermanent
            ),
            (
                "cy@example.org".to_owned(),
                "bcc",
                RecipientStatus::Complained
            ),
        ]
    );
    // Every recipient's timeline: its send, then its own event.
    assert_eq!(first.recipient_log.len(), 6, "{:?}", first.recipient_log);
    let second = status.get(&ids[1]).await.unwrap().unwrap();
    assert_eq!(
        second.status,
        Status::PartiallyDelivered,
        "{:?}",
        second.history
    );
    // Bob's bounce suppressed him alone.
    let suppression = DynamoDbSuppressionList::new(
        Clients::new(&stack.sdk).dynamodb,
        &stack.resources.suppression_table,
    );
    let listed = suppression
        .suppressed(
            &["ann@example.org".into(), "bob@example.org".into()],
            chrono::Utc::now(),
        )
        .await
        .unwrap();
    assert_eq!(listed, vec!["bob@example.org".to_owned()]);
    // AND `courierctl status` shows a row per recipient with its outcome and timeline
    let out = std::process::Command::new(courier_integration::courierctl())
        .envs(stack.resources.resource_env())
        .args(["status", &ids[1]])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.lines().next().unwrap().contains("partially_delivered"),
        "{text}"
    );
    let row = |address: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(address))
            .unwrap_or_else(|| panic!("no row for {address}:\n{text}"))
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        row("ann@example.org"),
        ["ann@example.org", "to", "delivered"]
    );
    assert_eq!(
        row("bob@example.org"),
        ["bob@example.org", "cc", "bounced_permanent"]
    );
    assert_eq!(
        row("cy@example.org"),
        ["cy@example.org", "bcc", "delivered"]
    );
}
