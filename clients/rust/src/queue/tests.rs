use std::collections::HashMap;
use std::sync::Mutex;

use super::*;

/// A writer that answers from a script: per message id, the failures to give before sending.
#[derive(Default)]
struct Scripted {
    /// message id -> answers to give first, in order.
    script: Mutex<HashMap<String, Vec<EntryResult>>>,
    /// Whole calls to fail first.
    call_failures: Mutex<Vec<WriteError>>,
    /// Every call's message ids.
    calls: Mutex<Vec<Vec<String>>>,
}

/// A body's message id, or the key a claim-check pointer names.
fn id_of(body: &str) -> String {
    let job: serde_json::Value = serde_json::from_str(body).unwrap();
    job["message_id"]
        .as_str()
        .or(job["key"].as_str())
        .unwrap()
        .to_owned()
}

#[async_trait::async_trait]
impl QueueWriter for Scripted {
    async fn write_batch(&self, bodies: &[&str]) -> Result<Vec<EntryResult>, WriteError> {
        let ids: Vec<String> = bodies.iter().map(|b| id_of(b)).collect();
        self.calls.lock().unwrap().push(ids.clone());
        if let Some(e) = self.call_failures.lock().unwrap().pop() {
            return Err(e);
        }
        let mut script = self.script.lock().unwrap();
        Ok(ids
            .iter()
            .map(|id| match script.get_mut(id).filter(|s| !s.is_empty()) {
                Some(answers) => answers.remove(0),
                None => EntryResult::Sent {
                    sqs_message_id: format!("sqs-{id}"),
                },
            })
            .collect())
    }
}

fn email(id: &str, text_len: usize) -> Email {
    Email::builder()
        .message_id(id)
        .campaign("c")
        .from("a@b.com")
        .to("c@d.com")
        .subject("s")
        .text("x".repeat(text_len.max(1)))
        .build()
        .unwrap()
}

fn transient(code: &str) -> EntryResult {
    EntryResult::Failed {
        code: code.to_owned(),
        message: "try later".to_owned(),
        sender_fault: false,
    }
}

#[tokio::test(start_paused = true)]
async fn batches_split_by_count_and_by_size() {
    let writer = Scripted::default();
    let queue = CourierQueue::with_writer(writer);
    let mut emails: Vec<Email> = (0..12).map(|i| email(&format!("m{i}"), 10)).collect();
    // Three bodies of about 400 KB: two fit in 1 MiB, the third starts a new call.
    emails.extend((0..3).map(|i| email(&format!("big{i}"), 400_000)));
    let results = queue.send_batch(&emails).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let calls = queue.writer.calls.lock().unwrap().clone();
    let sizes: Vec<usize> = calls.iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![10, 4, 1], "{calls:?}");
    assert_eq!(results[12].as_ref().unwrap().sqs_message_id, "sqs-big0");
}

#[tokio::test(start_paused = true)]
async fn only_the_entries_that_failed_transiently_are_sent_again() {
    let writer = Scripted::default();
    writer.script.lock().unwrap().extend([
        ("m3".to_owned(), vec![transient("InternalError")]),
        (
            "m5".to_owned(),
            vec![EntryResult::Failed {
                code: "InvalidMessageContents".to_owned(),
                message: "bad".to_owned(),
                sender_fault: true,
            }],
        ),
    ]);
    let queue = CourierQueue::with_writer(writer);
    let emails: Vec<Email> = (0..8).map(|i| email(&format!("m{i}"), 10)).collect();
    let results = queue.send_batch(&emails).await;
    let calls = queue.writer.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1], vec!["m3"], "only m3 goes again");
    assert_eq!(results[3].as_ref().unwrap().attempts, 2);
    assert_eq!(results[0].as_ref().unwrap().attempts, 1);
    assert!(
        matches!(&results[5], Err(SendError::Refused { code, .. }) if code == "InvalidMessageContents"),
        "{:?}",
        results[5]
    );
}

#[tokio::test(start_paused = true)]
async fn a_whole_call_that_failed_transiently_is_repeated() {
    let writer = Scripted::default();
    writer.call_failures.lock().unwrap().push(WriteError {
        code: "ServiceUnavailable".to_owned(),
        message: "503".to_owned(),
        transient: true,
    });
    let queue = CourierQueue::with_writer(writer);
    let emails: Vec<Email> = (0..3).map(|i| email(&format!("m{i}"), 10)).collect();
    let results = queue.send_batch(&emails).await;
    assert!(
        results
            .iter()
            .all(|r| r.as_ref().is_ok_and(|s| s.attempts == 2)),
        "{results:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_permanent_call_failure_refuses_its_entries_without_retrying() {
    let writer = Scripted::default();
    writer.call_failures.lock().unwrap().push(WriteError {
        code: "AWS.SimpleQueueService.NonExistentQueue".to_owned(),
        message: "no queue".to_owned(),
        transient: false,
    });
    let queue = CourierQueue::with_writer(writer);
    let result = queue.send(&email("m0", 10)).await;
    assert!(
        matches!(result, Err(SendError::Refused { ref code, .. }) if code.contains("NonExistentQueue")),
        "{result:?}"
    );
    assert_eq!(queue.writer.calls.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn attempts_run_out_and_say_what_failed_last() {
    let writer = Scripted::default();
    writer
        .script
        .lock()
        .unwrap()
        .insert("m0".to_owned(), vec![transient("RequestThrottled"); 10]);
    let queue = CourierQueue::with_writer(writer).max_attempts(3);
    let started = tokio::time::Instant::now();
    let result = queue.send(&email("m0", 10)).await;
    match result {
        Err(SendError::GaveUp { attempts, last, .. }) => {
            assert_eq!(attempts, 3);
            assert!(last.starts_with("RequestThrottled"), "{last}");
        }
        other => panic!("expected GaveUp, got {other:?}"),
    }
    // Backoff 100 ms, then 200 ms.
    assert_eq!(started.elapsed(), Duration::from_millis(300));
}

#[test]
fn the_backoff_doubles_up_to_its_cap() {
    let queue = CourierQueue::with_writer(Scripted::default());
    let delays: Vec<u128> = (1..=8).map(|a| queue.delay(a).as_millis()).collect();
    assert_eq!(delays, vec![100, 200, 400, 800, 1600, 3200, 5000, 5000]);
}

/// A file store that records puts (in call order, shared with the writer's calls) and can fail.
#[derive(Debug, Default)]
struct Files {
    puts: Mutex<Vec<String>>,
    fail: Mutex<Vec<WriteError>>,
    stored: Mutex<HashMap<String, Vec<u8>>>,
}

#[async_trait::async_trait]
impl FileStore for std::sync::Arc<Files> {
    async fn put(&self, key: &str, content: &[u8]) -> Result<(), WriteError> {
        self.puts.lock().unwrap().push(key.to_owned());
        self.stored
            .lock()
            .unwrap()
            .insert(key.to_owned(), content.to_vec());
        match self.fail.lock().unwrap().pop() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

fn with_file(id: &str, content: &[u8]) -> Email {
    Email::builder()
        .message_id(id)
        .campaign("c")
        .from("a@b.com")
        .to("c@d.com")
        .subject("s")
        .text("t")
        .attach("invoice.pdf", "application/pdf", content)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn attachments_are_stored_before_their_email_is_enqueued() {
    let files = std::sync::Arc::new(Files::default());
    let queue = CourierQueue::with_writer(Scripted::default()).with_files(files.clone());
    let email = with_file("m-att", b"%PDF");
    let key = email.job().attachments[0].key.clone();
    assert_eq!(email.files(), &[(key.clone(), b"%PDF".to_vec())]);
    let results = queue.send_batch(&[email, email_of("m-plain")]).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(*files.puts.lock().unwrap(), vec![key]);
    assert_eq!(
        queue.writer.calls.lock().unwrap()[0],
        vec!["m-att", "m-plain"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_upload_keeps_only_its_email_off_the_queue() {
    let files = std::sync::Arc::new(Files::default());
    files.fail.lock().unwrap().push(WriteError {
        code: "AccessDenied".to_owned(),
        message: "no".to_owned(),
        transient: false,
    });
    let queue = CourierQueue::with_writer(Scripted::default()).with_files(files.clone());
    let results = queue
        .send_batch(&[with_file("m-att", b"%PDF"), email_of("m-plain")])
        .await;
    assert!(
        matches!(&results[0], Err(SendError::Upload { reason, .. }) if reason.contains("AccessDenied")),
        "{:?}",
        results[0]
    );
    assert!(results[1].is_ok());
    assert_eq!(
        queue.writer.calls.lock().unwrap().clone(),
        vec![vec!["m-plain".to_owned()]]
    );
}

#[tokio::test(start_paused = true)]
async fn a_transient_upload_failure_is_retried() {
    let files = std::sync::Arc::new(Files::default());
    files.fail.lock().unwrap().push(WriteError {
        code: "SlowDown".to_owned(),
        message: "503".to_owned(),
        transient: true,
    });
    let queue = CourierQueue::with_writer(Scripted::default()).with_files(files.clone());
    let result = queue.send(&with_file("m-att", b"%PDF")).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(files.puts.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn attachments_without_a_payload_bucket_are_refused_with_the_setting_to_fix() {
    let queue = CourierQueue::with_writer(Scripted::default());
    let result = queue.send(&with_file("m-att", b"%PDF")).await;
    let error = result.unwrap_err();
    assert!(matches!(error, SendError::NoPayloadBucket { .. }));
    assert!(error.to_string().contains("COURIER_PAYLOAD_BUCKET"));
    assert!(queue.writer.calls.lock().unwrap().is_empty());
}

fn email_of(id: &str) -> Email {
    email(id, 10)
}

#[tokio::test(start_paused = true)]
async fn a_body_above_the_threshold_goes_through_the_claim_check() {
    let files = std::sync::Arc::new(Files::default());
    // GIVEN a queue that claim-checks bodies above SQS's old 256 KiB limit
    let queue = CourierQueue::with_writer(Scripted::default())
        .with_files(files.clone())
        .claim_check_above(256 * 1024);
    let large = email("m-large", 300 * 1024);
    let small = email("m-small", 10);
    let results = queue.send_batch(&[large.clone(), small]).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    // THEN the large body is stored whole and the queue carries a pointer the send function
    // redeems (well formed, and its size and digest verify against what was stored)
    let check = courier_core::claim_check::ClaimCheck::of(large.body());
    let stored = files.stored.lock().unwrap()[&check.key].clone();
    assert_eq!(check.verify(stored).unwrap(), large.body());
    assert!(check.well_formed());
    let calls = queue.writer.calls.lock().unwrap().clone();
    assert_eq!(calls, vec![vec![check.key.clone(), "m-small".to_owned()]]);
    // AND the small one went as it is
    assert_eq!(files.puts.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_body_above_sqs_limit_is_sent_through_the_claim_check_by_default() {
    // 512 KiB of quotes are a valid body, and twice that once escaped in JSON: over 1 MiB.
    let quotes = "\"".repeat(courier_core::job::MAX_BODY_BYTES - 20);
    let email = Email::builder()
        .message_id("m-quotes")
        .campaign("c")
        .from("a@b.com")
        .to("c@d.com")
        .subject("s")
        .text(quotes)
        .build()
        .unwrap();
    assert!(email.body().len() > courier_core::limits::SQS_MAX_BYTES);
    let files = std::sync::Arc::new(Files::default());
    let queue = CourierQueue::with_writer(Scripted::default()).with_files(files.clone());
    let sent = queue.send(&email).await.unwrap();
    assert_eq!(sent.message_id, "m-quotes");
    let check = courier_core::claim_check::ClaimCheck::of(email.body());
    assert_eq!(
        queue.writer.calls.lock().unwrap().clone(),
        vec![vec![check.key.clone()]]
    );
    assert!(check.to_body().len() < 300, "the pointer is small");
    // Without a payload bucket it cannot go at all, and says which setting is missing.
    let bare = CourierQueue::with_writer(Scripted::default());
    assert!(matches!(
        bare.send(&email).await,
        Err(SendError::NoPayloadBucket { .. })
    ));
    assert!(bare.writer.calls.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_claim_checked_body_that_cannot_be_stored_stays_off_the_queue() {
    let files = std::sync::Arc::new(Files::default());
    files.fail.lock().unwrap().push(WriteError {
        code: "AccessDenied".to_owned(),
        message: "no claim-check/ grant".to_owned(),
        transient: false,
    });
    let queue = CourierQueue::with_writer(Scripted::default())
        .with_files(files.clone())
        .claim_check_above(1024);
    let result = queue.send(&email("m-big", 4096)).await;
    assert!(
        matches!(&result, Err(SendError::Upload { key, .. }) if key.starts_with("claim-check/")),
        "{result:?}"
    );
    assert!(queue.writer.calls.lock().unwrap().is_empty());
    // The threshold is kept within SQS's limit and above 1 KiB.
    assert_eq!(
        CourierQueue::with_writer(Scripted::default())
            .claim_check_above(usize::MAX)
            .inline_limit,
        MAX_INLINE_BYTES
    );
    assert_eq!(
        CourierQueue::with_writer(Scripted::default())
            .claim_check_above(1)
            .inline_limit,
        1024
    );
}
