//! Proves the harness: every emulated AWS behaviour Courier relies on, and every scripted SMTP
//! reply, works on the emulator this run targets.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers fail the test loudly
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use aws_sdk_sqs::types::QueueAttributeName;
use courier_integration::{aws_config, eventually, require_env, role_arn, unique};
use lettre::message::Mailbox;
use lettre::transport::smtp::AsyncSmtpTransport;
use lettre::{AsyncTransport, Message, Tokio1Executor};

async fn sqs() -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::new(&aws_config().await)
}

async fn create_queue(
    client: &aws_sdk_sqs::Client,
    name: &str,
    attrs: &[(QueueAttributeName, String)],
) -> String {
    let mut req = client.create_queue().queue_name(name);
    for (k, v) in attrs {
        req = req.attributes(k.clone(), v.clone());
    }
    req.send()
        .await
        .expect("create_queue")
        .queue_url
        .expect("queue url")
}

async fn queue_arn(client: &aws_sdk_sqs::Client, url: &str) -> String {
    client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("get_queue_attributes")
        .attributes
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .expect("queue arn")
}

async fn receive_one(
    client: &aws_sdk_sqs::Client,
    url: &str,
    visibility: i32,
) -> Option<aws_sdk_sqs::types::Message> {
    client
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(1)
        .visibility_timeout(visibility)
        .wait_time_seconds(1)
        .send()
        .await
        .expect("receive_message")
        .messages
        .and_then(|mut m| m.pop())
}

#[tokio::test]
async fn delay_seconds_holds_a_message_back() {
    let client = sqs().await;
    let url = create_queue(&client, &unique("delay"), &[]).await;
    let sent_at = Instant::now();
    client
        .send_message()
        .queue_url(&url)
        .message_body("later")
        .delay_seconds(3)
        .send()
        .await
        .expect("send_message");
    assert!(
        receive_one(&client, &url, 30).await.is_none(),
        "a delayed message was visible at once"
    );
    let msg = eventually(Duration::from_secs(20), || receive_one(&client, &url, 30))
        .await
        .expect("the delayed message never arrived");
    assert_eq!(msg.body.as_deref(), Some("later"));
    assert!(sent_at.elapsed() >= Duration::from_secs(3));
}

#[tokio::test]
async fn max_receive_count_moves_a_message_to_the_dlq() {
    let client = sqs().await;
    let dlq = create_queue(&client, &unique("dlq"), &[]).await;
    let dlq_arn = queue_arn(&client, &dlq).await;
    let redrive = format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":"2"}}"#);
    let url = create_queue(
        &client,
        &unique("src"),
        &[(QueueAttributeName::RedrivePolicy, redrive)],
    )
    .await;
    client
        .send_message()
        .queue_url(&url)
        .message_body("poison")
        .send()
        .await
        .expect("send_message");
    // Receive it maxReceiveCount times without deleting (visibility 1 s, as a failing consumer).
    for n in 1..=2 {
        let got = eventually(Duration::from_secs(15), || receive_one(&client, &url, 1)).await;
        assert!(got.is_some(), "receive {n} found nothing");
    }
    let moved = eventually(Duration::from_secs(20), || async {
        // A receive past maxReceiveCount is what triggers the move on the emulators.
        let _ = receive_one(&client, &url, 1).await;
        receive_one(&client, &dlq, 30).await
    })
    .await
    .expect("the message never reached the DLQ");
    assert_eq!(moved.body.as_deref(), Some("poison"));
}

#[tokio::test]
async fn a_conditional_put_fails_the_second_time() {
    let client = aws_sdk_dynamodb::Client::new(&aws_config().await);
    let table = unique("claims");
    client
        .create_table()
        .table_name(&table)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("message_id")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("attr"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("message_id")
                .key_type(KeyType::Hash)
                .build()
                .expect("key"),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .expect("create_table");
    let put = || {
        client
            .put_item()
            .table_name(&table)
            .item("message_id", AttributeValue::S("m-1".into()))
            .condition_expression("attribute_not_exists(message_id)")
            .send()
    };
    put().await.expect("first conditional put");
    let err = put().await.expect_err("second conditional put succeeded");
    let service = err.into_service_error();
    assert!(
        service.is_conditional_check_failed_exception(),
        "unexpected error: {service:?}"
    );
}

#[tokio::test]
async fn s3_stores_and_returns_an_object() {
    let client = aws_sdk_s3::Client::new(&aws_config().await);
    let bucket = unique("archive");
    client
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .expect("create_bucket");
    client
        .put_object()
        .bucket(&bucket)
        .key("a/b.jsonl")
        .body(b"{\"x\":1}\n".to_vec().into())
        .send()
        .await
        .expect("put_object");
    let got = client
        .get_object()
        .bucket(&bucket)
        .key("a/b.jsonl")
        .send()
        .await
        .expect("get_object");
    let bytes = got.body.collect().await.expect("body").into_bytes();
    assert_eq!(&bytes[..], b"{\"x\":1}\n");
}

#[tokio::test]
async fn the_delay_state_machine_waits_then_sends_to_the_queue() {
    let config = aws_config().await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let sfn = aws_sdk_sfn::Client::new(&config);
    let url = create_queue(&sqs, &unique("delayed"), &[]).await;
    let machine = sfn
        .create_state_machine()
        .name(unique("courier-delay"))
        .definition(courier_core::delay::DEFINITION)
        .role_arn(role_arn())
        .send()
        .await
        .expect("create_state_machine")
        .state_machine_arn;
    let input = courier_core::delay::DelayInput {
        delay_seconds: 2,
        queue_url: url.clone(),
        body: "after the wait".into(),
    };
    let started = Instant::now();
    sfn.start_execution()
        .state_machine_arn(&machine)
        .input(serde_json::to_string(&input).expect("json"))
        .send()
        .await
        .expect("start_execution");
    let msg = eventually(Duration::from_secs(60), || receive_one(&sqs, &url, 30))
        .await
        .expect("the state machine never delivered the message");
    assert_eq!(msg.body.as_deref(), Some("after the wait"));
    assert!(started.elapsed() >= Duration::from_secs(2));
}

fn smtp(port_var: &str, timeout: Duration) -> AsyncSmtpTransport<Tokio1Executor> {
    let host = require_env("COURIER_SMTP_HOST");
    let port: u16 = require_env(port_var).parse().expect("port number");
    AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host)
        .port(port)
        .timeout(Some(timeout))
        .build()
}

fn message(to: &str) -> Message {
    Message::builder()
        .from("sender@courier.test".parse::<Mailbox>().expect("from"))
        .to(to.parse::<Mailbox>().expect("to"))
        .subject(format!("harness {to}"))
        .body(format!("hello {to}"))
        .expect("message")
}

#[tokio::test]
async fn each_scripted_smtp_recipient_gets_its_reply() {
    let transport = smtp("COURIER_SMTP_PORT", Duration::from_secs(10));
    for (rcpt, code) in [
        ("unknown@courier.test", "550"),
        ("full@courier.test", "552"),
        ("insufficient@courier.test", "452"),
        ("busy@courier.test", "421"),
        ("greylist@courier.test", "450"),
        ("policy@courier.test", "554"),
    ] {
        let err = transport
            .send(message(rcpt))
            .await
            .expect_err("scripted recipient was accepted");
        let status = err
            .status()
            .map(|c| c.to_string())
            .unwrap_or_else(|| panic!("{rcpt}: no SMTP status in {err}"));
        assert_eq!(status, code, "{rcpt}: {err}");
        let verdict = courier_core::classify::classify_smtp(&err.to_string());
        assert!(!verdict.rule.is_empty(), "{rcpt}");
    }
}

#[tokio::test]
async fn an_accepted_message_is_captured() {
    let capture = require_env("COURIER_SMTP_CAPTURE_DIR");
    let rcpt = format!("{}@courier.test", unique("ok"));
    smtp("COURIER_SMTP_PORT", Duration::from_secs(10))
        .send(message(&rcpt))
        .await
        .expect("accepted recipient");
    let found = eventually(Duration::from_secs(20), || {
        let capture = capture.clone();
        let rcpt = rcpt.clone();
        async move {
            let mut stack = vec![std::path::PathBuf::from(capture)];
            while let Some(dir) = stack.pop() {
                for entry in std::fs::read_dir(dir).ok()?.flatten() {
                    let path = entry.path();
                    if path.is_dir() {
                        stack.push(path);
                    } else if std::fs::read_to_string(&path).is_ok_and(|t| t.contains(&rcpt)) {
                        return Some(path);
                    }
                }
            }
            None
        }
    })
    .await;
    assert!(found.is_some(), "no captured message for {rcpt}");
}

#[tokio::test]
async fn a_dropped_connection_and_a_slow_reply_fail_as_network_errors() {
    let err = smtp("COURIER_SMTP_DROP_PORT", Duration::from_secs(10))
        .send(message("drop@courier.test"))
        .await
        .expect_err("drop port accepted the message");
    assert!(
        err.status().is_none(),
        "dropped connection gave a reply: {err}"
    );

    let slow_secs: u64 = require_env("COURIER_SMTP_SLOW_SECONDS")
        .parse()
        .expect("seconds");
    assert!(
        slow_secs >= 3,
        "the slow reply must outlast the 2 s client timeout"
    );
    // lettre's async transport applies its timeout to connecting only; a mailer bounds the whole
    // exchange itself, as the SMTP adapter does.
    let started = Instant::now();
    let outcome = tokio::time::timeout(
        Duration::from_secs(2),
        smtp("COURIER_SMTP_SLOW_PORT", Duration::from_secs(2)).send(message("slow@courier.test")),
    )
    .await;
    assert!(outcome.is_err(), "slow reply answered in time: {outcome:?}");
    assert!(started.elapsed() < Duration::from_secs(slow_secs));
}
