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

/// Runs the send pipeline until the job `message_id` is sent to its provider.
async fn send_through_the_pipeline(stack: &Stack, message_id: &str) {
    use courier_core::ports::StatusStore;
    let pipeline = stack.send_pipeline();
    let driver = stack.driver(2);
    let store = stack.status_store();
    let started = Instant::now();
    let mut status = None;
    while started.elapsed() < Duration::from_secs(40) && status != Some(Status::SentToProvider) {
        driver.poll_once(&pipeline, "client").await.unwrap();
        status = store.get(message_id).await.unwrap().map(|r| r.status);
    }
    assert_eq!(status, Some(Status::SentToProvider), "job {message_id}");
}

/// The mails Postfix delivered to `rcpt`, once there is one (Postfix accepts a message, then
/// its queue manager delivers it to the Maildir a moment later), or none after 20 s.
async fn mailbox(rcpt: &str) -> Vec<String> {
    let maildir = require_env("COURIER_SMTP_CAPTURE_DIR");
    let read = || -> Vec<String> {
        std::fs::read_dir(&maildir)
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .filter(|mail| mail.contains(&format!("Delivered-To: {rcpt}")))
            .collect()
    };
    let started = Instant::now();
    loop {
        let mails = read();
        if !mails.is_empty() || started.elapsed() > Duration::from_secs(20) {
            return mails;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
    send_through_the_pipeline(&stack, email.message_id()).await;
    let delivered = mailbox(&rcpt).await;
    assert_eq!(delivered.len(), 1);
    assert!(delivered[0].contains(&token), "{}", delivered[0]);
}

#[tokio::test]
async fn an_email_enqueued_by_the_client_is_sent_through_ses() {
    let stack = Stack::create(&["ses"]).await;
    let token = unique("ses-token");
    let email = email(
        &stack,
        &unique("job"),
        "ann@example.org",
        format!("Hello from {token}."),
    );
    CourierQueue::new(stack.sqs(), &stack.resources.queue_url)
        .send(&email)
        .await
        .unwrap();
    send_through_the_pipeline(&stack, email.message_id()).await;
    // SES v2 is moto's on both emulators; its state holds the message sent.
    let state = courier_integration::moto_state(&require_env("COURIER_MOTO_URL")).await;
    assert!(
        state.contains(&token),
        "moto's SES has no message with {token}"
    );
}

fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The venv `make client-python` (and `scripts/install-deps.sh python-client`) makes.
fn python() -> std::path::PathBuf {
    let cache = std::env::var("COURIER_CACHE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| repo().join(".cache"));
    let python = cache.join("venv-client-py/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `scripts/install-deps.sh python-client`",
        python.display()
    );
    python
}

#[tokio::test]
async fn an_email_enqueued_by_the_python_client_reaches_the_mailbox() {
    let stack = Stack::create(&["smtp"]).await;
    let rcpt = format!("{}@courier.test", unique("python"));
    let token = unique("py-token");
    let key = unique("order");
    let script = r#"
import sys
from courier_client import CourierQueue, build_job
sender, rcpt, key, token = sys.argv[1:]
job = build_job(idempotency_key=key, campaign_id="client", from_=sender, to=rcpt,
                subject="From Python", text="Hello from " + token + ".")
result = CourierQueue.from_env().send(job)
print(result)
sys.exit(0 if result.ok else 1)
"#;
    let out = tokio::process::Command::new(python())
        .arg("-c")
        .arg(script)
        .args([&stack.sender, &rcpt, &key, &token])
        .env("COURIER_QUEUE_URL", &stack.resources.queue_url)
        .env("PYTHONPATH", repo().join("clients/python/src"))
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "the Python client failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // One key, one message id, in both clients.
    send_through_the_pipeline(&stack, &courier_client::message_id_for(&key)).await;
    let delivered = mailbox(&rcpt).await;
    assert_eq!(delivered.len(), 1);
    assert!(delivered[0].contains(&token), "{}", delivered[0]);
}

/// The content of the first base64 part of `mail`, decoded.
fn first_base64_part(mail: &str) -> Vec<u8> {
    use base64::Engine;
    let start = mail
        .find("Content-Transfer-Encoding: base64")
        .expect("a base64 part");
    let body = &mail[start..];
    let body = &body[body
        .find("\r\n\r\n")
        .map_or_else(|| body.find("\n\n").unwrap() + 2, |i| i + 4)..];
    let text: String = body
        .lines()
        .take_while(|l| !l.starts_with("--") && !l.trim().is_empty())
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .expect("base64")
}

#[tokio::test]
async fn an_attachment_from_the_client_arrives_byte_for_byte() {
    let stack = Stack::create(&["smtp"]).await;
    let rcpt = format!("{}@courier.test", unique("attach"));
    // Every byte value, so no encoding may alter any of them.
    let content: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let email = Email::builder()
        .message_id(unique("job"))
        .campaign("client")
        .from(stack.sender.clone())
        .to(&rcpt)
        .subject("Your invoice")
        .text("Attached.")
        .attach("invoice 4711.pdf", "application/pdf", content.clone())
        .build()
        .unwrap();
    let files = courier_client::S3FileStore::new(
        aws_sdk_s3::Client::new(&stack.sdk),
        &stack.resources.payload_bucket,
    );
    CourierQueue::new(stack.sqs(), &stack.resources.queue_url)
        .with_files(files)
        .send(&email)
        .await
        .unwrap();
    send_through_the_pipeline(&stack, email.message_id()).await;
    let delivered = mailbox(&rcpt).await;
    assert_eq!(delivered.len(), 1);
    assert!(
        delivered[0].contains("invoice 4711.pdf"),
        "{}",
        delivered[0]
    );
    assert!(
        first_base64_part(&delivered[0]) == content,
        "the attachment changed on the way"
    );
}

/// An attachment outlives the payload bucket's 60 days with its archived dead letter: a job
/// whose file was uploaded late is dead-lettered (`local.attachment-missing`); the archiver
/// archives the letter and retains the file (now uploaded); the file then expires from
/// `attachments/` (deleted here); `dlq replay --state archived` sends the job again and the
/// file reaches the mailbox byte for byte, from where the archiver kept it.
#[tokio::test]
async fn an_archived_letters_attachment_is_retained_and_its_replay_arrives_byte_for_byte() {
    use courier_core::letters::{LetterFilter, LetterState};
    use courier_core::ports::{LetterIndex, StatusStore};
    let stack = Stack::create(&["smtp"]).await;
    let rcpt = format!("{}@courier.test", unique("retained"));
    let id = unique("late-file");
    let content: Vec<u8> = (0..=255u8).rev().cycle().take(30_000).collect();
    let file = courier_core::job::AttachmentRef::of("report.pdf", "application/pdf", &content);
    let job = serde_json::json!({
        "version": 1, "message_id": id, "campaign_id": "retained", "from": stack.sender,
        "to": [rcpt], "content": {"subject": "Your report", "text": "Attached."},
        "attachments": [file],
    });
    stack
        .sqs()
        .send_message()
        .queue_url(&stack.resources.queue_url)
        .message_body(job.to_string())
        .send()
        .await
        .unwrap();
    // GIVEN the job dead-lettered because its file was not there yet
    let pipeline = stack.send_pipeline();
    let driver = stack.driver(2);
    let store = stack.status_store();
    let started = Instant::now();
    while store.get(&id).await.unwrap().map(|r| r.status) != Some(Status::DeadLettered) {
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "not dead-lettered"
        );
        driver.poll_once(&pipeline, "late").await.unwrap();
    }
    let s3 = aws_sdk_s3::Client::new(&stack.sdk);
    let bucket = &stack.resources.payload_bucket;
    s3.put_object()
        .bucket(bucket)
        .key(&file.key)
        .body(content.clone().into())
        .send()
        .await
        .unwrap();
    // WHEN the archiver archives the letter, and the file then expires from `attachments/`
    let report = stack
        .archiver_now()
        .run("retain", chrono::Utc::now() + chrono::Duration::seconds(60))
        .await
        .unwrap();
    assert_eq!(
        (
            report.archived,
            report.attachments_retained,
            report.attachments_missing
        ),
        (1, 1, 0),
        "{report:?}"
    );
    s3.delete_object()
        .bucket(bucket)
        .key(&file.key)
        .send()
        .await
        .unwrap();
    // AND the archived letter is replayed
    let index = stack.letter_index();
    let archived = courierctl::workbench::select(
        &index,
        &LetterFilter {
            state: Some(LetterState::Archived),
            ..LetterFilter::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(archived.len(), 1);
    assert_eq!(archived[0].record.rule, "local.attachment-missing");
    let outcome = stack.replay_as_ann(&archived, "file uploaded").await;
    assert_eq!(outcome.done.len(), 1, "{outcome:?}");
    let letter = &index.get_many(&outcome.done).await.unwrap()[0];
    assert_eq!(letter.state, LetterState::Replayed);
    assert_eq!(letter.archive_key, archived[0].archive_key);
    // THEN the job is sent with its file, byte for byte
    send_through_the_pipeline(&stack, &id).await;
    let delivered = mailbox(&rcpt).await;
    assert_eq!(delivered.len(), 1);
    assert!(
        first_base64_part(&delivered[0]) == content,
        "the attachment changed on the way"
    );
}

/// SQS's limits exercised for real: a job whose message body is over 1 MiB (a 512 KiB text of
/// quotes, which JSON escapes to twice its size) and one over 256 KiB with the threshold set
/// there both go through the claim check (S3, a pointer on the queue), are redeemed by the send
/// function and reach the mailbox whole.
#[tokio::test]
async fn bodies_above_the_queues_limits_reach_the_mailbox_through_the_claim_check() {
    let stack = Stack::create(&["smtp"]).await;
    let files = || {
        courier_client::S3FileStore::new(
            aws_sdk_s3::Client::new(&stack.sdk),
            &stack.resources.payload_bucket,
        )
    };
    let cases = [
        (
            "\"".repeat(courier_core::job::MAX_BODY_BYTES - 100),
            courier_client::MAX_INLINE_BYTES,
        ),
        ("y".repeat(300 * 1024), 256 * 1024),
    ];
    for (text, threshold) in cases {
        let rcpt = format!("{}@courier.test", unique("large"));
        let email = email(&stack, &unique("job"), &rcpt, text.clone());
        assert!(email.body().len() > threshold, "{}", email.body().len());
        CourierQueue::new(stack.sqs(), &stack.resources.queue_url)
            .with_files(files())
            .claim_check_above(threshold)
            .send(&email)
            .await
            .unwrap();
        // What is on the queue is the pointer, far below the limit.
        let on_queue = stack
            .sqs()
            .receive_message()
            .queue_url(&stack.resources.queue_url)
            .visibility_timeout(0)
            .send()
            .await
            .unwrap();
        let body = on_queue.messages()[0].body().unwrap();
        assert!(body.starts_with("{\"courier_claim_check\""), "{body}");
        assert!(body.len() < 300);
        send_through_the_pipeline(&stack, email.message_id()).await;
        let delivered = mailbox(&rcpt).await;
        assert_eq!(delivered.len(), 1);
        // Whatever transfer encoding the relay got, none is shorter than the text.
        assert!(
            delivered[0].len() >= text.len(),
            "the body arrived cut: {} bytes for a text of {}",
            delivered[0].len(),
            text.len()
        );
    }
}

/// A CloudFormation stack on the emulator whose outputs are `outputs` (literal values), with
/// one queue as its resource (a stack needs one); waits for it.
async fn stack_with_outputs(stack: &Stack, outputs: serde_json::Value) -> String {
    let cfn = aws_sdk_cloudformation::Client::new(&stack.sdk);
    let name = unique("outputs");
    let template = serde_json::json!({
        "Resources": {"Unused": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": unique("unused")}}},
        "Outputs": outputs,
    });
    cfn.create_stack()
        .stack_name(&name)
        .template_body(template.to_string())
        .send()
        .await
        .unwrap();
    let started = Instant::now();
    loop {
        let out = cfn
            .describe_stacks()
            .stack_name(&name)
            .send()
            .await
            .unwrap();
        let status = out.stacks()[0].stack_status().unwrap().as_str().to_owned();
        if status == "CREATE_COMPLETE" {
            return name;
        }
        assert!(
            !status.ends_with("FAILED") && started.elapsed() < Duration::from_secs(60),
            "stack {name}: {status}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `CourierQueue::from_stack` finds the queue and the payload bucket in a stack's outputs (as a
/// producer names its Courier stack instead of copying URLs), and says what is wrong when the
/// stack is missing or is not a Courier stack.
#[tokio::test]
async fn the_client_finds_its_queue_and_bucket_in_the_stacks_outputs() {
    let stack = Stack::create(&["smtp"]).await;
    let name = stack_with_outputs(
        &stack,
        serde_json::json!({
            "SendQueueUrl": {"Value": stack.resources.queue_url},
            "PayloadBucketName": {"Value": stack.resources.payload_bucket},
        }),
    )
    .await;
    let queue = CourierQueue::from_stack(&stack.sdk, &name).await.unwrap();
    let rcpt = format!("{}@courier.test", unique("stack"));
    let email = Email::builder()
        .message_id(unique("job"))
        .campaign("client")
        .from(stack.sender.clone())
        .to(&rcpt)
        .subject("Found through the stack")
        .text("Attached.")
        .attach(
            "note.txt",
            "text/plain",
            b"from the stack's bucket".to_vec(),
        )
        .build()
        .unwrap();
    // The attachment needs the bucket from the outputs, the job the queue.
    queue.send(&email).await.unwrap();
    send_through_the_pipeline(&stack, email.message_id()).await;
    assert_eq!(mailbox(&rcpt).await.len(), 1);

    let missing = unique("no-such-stack");
    assert!(matches!(
        CourierQueue::from_stack(&stack.sdk, &missing).await,
        Err(courier_client::ConfigError::Stack { stack, .. }) if stack == missing
    ));
    let other = stack_with_outputs(&stack, serde_json::json!({"Other": {"Value": "x"}})).await;
    let error = CourierQueue::from_stack(&stack.sdk, &other)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, courier_client::ConfigError::NoOutput { stack } if *stack == other),
        "{error}"
    );
    assert!(error.to_string().contains("SendQueueUrl"));
}
