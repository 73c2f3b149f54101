//! The Rust client (`clients/rust`, `courier-client`) on the emulators: its SQS adapter splits
//! and delivers every email (the port's contract test), refuses at once what SQS refuses for
//! good, and an email it enqueues goes through the real send pipeline to Postfix's mailbox.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers fail the test loudly

use std::time::{Duration, Instant};

use courier_client::{CourierQueue, Email, SendError};
use courier_core::status::Status;
use courier_integration::{Stack, require_env, unique};

fn email(stack: &Stack, id: &str, to: &str, text: String) -> Email {
    Email::builder()
        .message_id(id)
        .campaign("client")
        .from(stack.sender.clone())
        .to(to)
        .subject("From the client")
        .text(text)
        .build()
        .unwrap()
}

#[tokio::test]
async fn the_sqs_writer_splits_batches_by_size_and_every_email_arrives_once() {
    let stack = Stack::create(&["smtp"]).await;
    let queue = CourierQueue::new(stack.sqs(), &stack.resources.queue_url);
    // 12 small emails and 3 of about 400 KB: 10 + (2 small, 2 big) + 1 big calls.
    let mut emails: Vec<Email> = (0..12)
        .map(|i| {
            email(
                &stack,
                &format!("small-{i}"),
                "a@courier.test",
                format!("small {i}"),
            )
        })
        .collect();
    emails.extend((0..3).map(|i| {
        email(
            &stack,
            &format!("big-{i}"),
            "a@courier.test",
            format!("{i}").repeat(400_000),
        )
    }));
    let results = queue.send_batch(&emails).await;
    for result in &results {
        let sent = result.as_ref().unwrap();
        assert_eq!(sent.attempts, 1, "{sent:?}");
    }
    let mut received: Vec<String> = stack
        .drain(&stack.resources.queue_url)
        .await
        .into_iter()
        .map(|m| m.body.unwrap())
        .collect();
    let mut sent: Vec<String> = emails.iter().map(|e| e.body().to_owned()).collect();
    received.sort();
    sent.sort();
    assert_eq!(received.len(), 15);
    assert!(
        received == sent,
        "the queue holds other bodies than were sent"
    );
}

#[tokio::test]
async fn a_missing_queue_is_refused_at_once_not_retried() {
    let stack = Stack::create(&["smtp"]).await;
    let missing = format!("{}-missing", stack.resources.queue_url);
    let queue = CourierQueue::new(stack.sqs(), missing);
    let started = Instant::now();
    let result = queue
        .send(&email(&stack, "m", "a@courier.test", "x".into()))
        .await;
    assert!(
        matches!(result, Err(SendError::Refused { .. })),
        "{result:?}"
    );
    // No backoff was slept: the refusal is permanent.
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn an_email_enqueued_by_the_client_reaches_the_mailbox() {
    let stack = Stack::create(&["smtp"]).await;
    let rcpt = format!("{}@courier.test", unique("client"));
    let token = unique("token");
    let email = email(
        &stack,
        &unique("job"),
        &rcpt,
        format!("Hello from {token}."),
    );
    CourierQueue::new(stack.sqs(), &stack.resources.queue_url)
        .send(&email)
        .await
        .unwrap();
    let pipeline = stack.send_pipeline();
    let driver = stack.driver(2);
    let store = stack.status_store();
    let started = Instant::now();
    use courier_core::ports::StatusStore;
    let mut status = None;
    while started.elapsed() < Duration::from_secs(40) && status != Some(Status::SentToProvider) {
        driver.poll_once(&pipeline, "client").await.unwrap();
        status = store
            .get(email.message_id())
            .await
            .unwrap()
            .map(|r| r.status);
    }
    assert_eq!(status, Some(Status::SentToProvider));
    let maildir = require_env("COURIER_SMTP_CAPTURE_DIR");
    let delivered: Vec<String> = std::fs::read_dir(maildir)
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter(|mail| mail.contains(&format!("Delivered-To: {rcpt}")))
        .collect();
    assert_eq!(delivered.len(), 1);
    assert!(delivered[0].contains(&token), "{}", delivered[0]);
}
