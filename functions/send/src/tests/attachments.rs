//! Attachments: fetched from the payload store, checked against their references, attached;
//! a missing or altered file dead-letters the job, a store failure leaves it for redelivery.

use courier_core::job::AttachmentRef;

use super::*;

const PDF: &[u8] = b"%PDF-1.7 the invoice";

fn with_attachment(id: &str, reference: &AttachmentRef) -> String {
    let mut job: serde_json::Value = serde_json::from_str(&job(id, "ann@example.org")).unwrap();
    job["attachments"] = serde_json::json!([reference]);
    job.to_string()
}

fn invoice() -> AttachmentRef {
    AttachmentRef::of("invoice 4711.pdf", "application/pdf", PDF)
}

fn store(w: &World, reference: &AttachmentRef, content: &[u8]) {
    w.payloads
        .objects
        .lock()
        .unwrap()
        .insert(reference.key.clone(), content.to_vec());
}

#[tokio::test]
async fn a_stored_attachment_is_sent_with_the_message() {
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Smtp));
    let reference = invoice();
    store(&w, &reference, PDF);
    let report = w
        .run(vec![rec("q", with_attachment("m-att", &reference))])
        .await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    let sent = w.mailer.sent.lock().unwrap().clone();
    assert_eq!(sent.len(), 1);
    let file = &sent[0].attachments[0];
    assert_eq!(
        (
            file.filename.as_str(),
            file.content_type.as_str(),
            file.content.as_slice()
        ),
        ("invoice 4711.pdf", "application/pdf", PDF)
    );
    assert_eq!(w.status_of("m-att"), Some(Status::SentToProvider));
}

#[tokio::test]
async fn a_missing_or_altered_attachment_dead_letters_the_job_unsent() {
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Smtp));
    let missing = invoice();
    let altered = AttachmentRef::of("other.pdf", "application/pdf", b"the real one");
    store(&w, &altered, b"something else");
    let report = w
        .run(vec![
            rec("q1", with_attachment("m-missing", &missing)),
            rec("q2", with_attachment("m-altered", &altered)),
        ])
        .await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.mailer.sent_count(), 0);
    let letters = w.dead.letters.lock().unwrap().clone();
    let rule = |id: &str| {
        letters
            .iter()
            .find(|l| l.message_id.as_deref() == Some(id))
            .map(|l| (l.category, l.rule.clone()))
    };
    assert_eq!(
        rule("m-missing"),
        Some((
            DeadLetterCategory::InvalidJob,
            "local.attachment-missing".to_owned()
        ))
    );
    assert_eq!(
        rule("m-altered"),
        Some((
            DeadLetterCategory::InvalidJob,
            "local.attachment-altered".to_owned()
        ))
    );
}

#[tokio::test]
async fn a_replayed_letters_file_is_found_where_the_archiver_retained_it() {
    // GIVEN a file gone from `attachments/` (expired) but retained with its archived letter
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Smtp));
    let reference = invoice();
    w.payloads
        .objects
        .lock()
        .unwrap()
        .insert(reference.retained_key(), PDF.to_vec());
    // WHEN the replayed job is sent
    let report = w
        .run(vec![rec("q", with_attachment("m-replayed", &reference))])
        .await;
    // THEN it goes out with the file, byte for byte
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    let sent = w.mailer.sent.lock().unwrap().clone();
    assert_eq!(sent[0].attachments[0].content, PDF);
    // AND a retained copy that was altered is refused like any other
    let altered = AttachmentRef::of("x.pdf", "application/pdf", b"x");
    w.payloads
        .objects
        .lock()
        .unwrap()
        .insert(altered.retained_key(), b"y".to_vec());
    w.run(vec![rec("q2", with_attachment("m-altered", &altered))])
        .await;
    let letters = w.dead.letters.lock().unwrap().clone();
    assert_eq!(letters[0].rule, "local.attachment-altered");
}

#[tokio::test]
async fn a_failing_payload_store_leaves_the_record_for_redelivery() {
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Smtp));
    let reference = invoice();
    store(&w, &reference, PDF);
    w.payloads.fail_gets.set(1);
    let report = w
        .run(vec![rec("q", with_attachment("m-later", &reference))])
        .await;
    assert_eq!(report.failures, vec!["q".to_owned()]);
    assert_eq!(w.mailer.sent_count(), 0);
    assert!(w.dead.letters.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_instance_holds_at_most_its_budget_of_attachments_at_once() {
    let budget = crate::AttachmentBudget::default();
    let ten_mib = 10 * 1024 * 1024;
    let first = budget.reserve(ten_mib).await;
    assert_eq!(budget.available_kib(), 6 * 1024);
    // A second 10 MiB job does not fit while the first is held...
    let second = tokio::time::timeout(std::time::Duration::from_secs(60), budget.reserve(ten_mib));
    assert!(second.await.is_err(), "it waited");
    // ...and goes once the first is sent.
    drop(first);
    let second = budget.reserve(ten_mib).await;
    assert!(second.is_some());
    drop(second);
    // A job without attachments takes nothing; one above the budget takes all of it.
    assert!(budget.reserve(0).await.is_none());
    let all = budget.reserve(u64::MAX).await;
    assert_eq!(budget.available_kib(), 0);
    drop(all);
}
