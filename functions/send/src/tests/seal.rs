//! The retry envelope's seal in the send path: a copy back from the queue is a later generation
//! only when its seal verifies; a forged or altered envelope is the first copy of its job.

use super::*;
use courier_core::seal::{SealCheck, check};

const GREYLISTED: &str = "450 4.2.0 <g@x>: Recipient address rejected: Greylisted";

/// The copy the last run put back (on the queue or into a wait).
fn last_copy(w: &World) -> Requeue {
    let waits = w.scheduler.waits.lock().unwrap().clone();
    let queued = w.scheduler.queued.lock().unwrap().clone();
    waits
        .into_iter()
        .chain(queued)
        .last()
        .expect("a copy was put back")
}

fn copies(w: &World) -> usize {
    w.scheduler.waits.lock().unwrap().len() + w.scheduler.queued.lock().unwrap().len()
}

#[tokio::test]
async fn a_copy_back_from_the_queue_is_a_later_generation_only_if_its_seal_verifies() {
    // GIVEN a job whose first send was greylisted: its retry copy is sealed
    let w = world_with(smtp_failure(GREYLISTED));
    w.run(vec![rec("a", job("m1", "g@example.org"))]).await;
    let sealed = last_copy(&w).body;
    let keys = w.pipeline.sealing.keys.keys().await.unwrap();
    assert_eq!(check(sealed.as_bytes(), &keys), SealCheck::Verified);
    assert_eq!(w.status_of("m1"), Some(Status::Deferred));
    assert_eq!(w.mailer.sent_count(), 1);

    // WHEN a producer replays that copy with a higher generation (the seal no longer matches),
    // or writes an envelope of its own with no seal
    let altered = sealed.replace("\"attempt\":1", "\"attempt\":6");
    assert_ne!(altered, sealed);
    let unsealed = {
        let mut value: serde_json::Value = serde_json::from_str(&sealed).unwrap();
        value.as_object_mut().unwrap().remove("seal");
        value["attempt"] = 9.into();
        value.to_string()
    };
    let report = w.run(vec![rec("b", altered), rec("c", unsealed)]).await;

    // THEN each is the job's first copy again: a duplicate of a job already under way, not sent,
    // not re-enqueued, counted and the job's state untouched
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(w.mailer.sent_count(), 1, "no send for a forged generation");
    assert_eq!(copies(&w), 1, "no copy put back for a forged generation");
    assert_eq!(report.metrics.counts.get("EnvelopesUnverified"), Some(&2));
    assert_eq!(w.status_of("m1"), Some(Status::Deferred));

    // AND the genuine copy still goes on: sent again, and its own retry is sealed at generation 2
    let report = w.run(vec![rec("d", sealed)]).await;
    assert_eq!(report.metrics.counts.get("EnvelopesUnverified"), None);
    assert_eq!(w.mailer.sent_count(), 2);
    let next = last_copy(&w).body;
    assert_eq!(check(next.as_bytes(), &keys), SealCheck::Verified);
    assert_eq!(
        courier_core::envelope::parse_body(next.as_bytes())
            .unwrap()
            .attempt,
        2
    );
}

#[tokio::test]
async fn a_forged_envelope_of_a_new_job_is_sent_as_its_first_copy_once() {
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let job_value: serde_json::Value = serde_json::from_str(&job("m2", "ann@example.org")).unwrap();
    let forged = serde_json::json!({
        "courier_envelope": 1, "attempt": 7,
        "retry": {"spent": 2}, "history": [], "job": job_value,
        "seal": format!("v1.{}", "0".repeat(64)),
    })
    .to_string();
    let report = w.run(vec![rec("a", forged)]).await;
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(w.mailer.sent_count(), 1);
    assert_eq!(report.metrics.counts.get("EnvelopesUnverified"), Some(&1));
    // Recorded as generation 0, so the application's own first copy is a duplicate.
    let attempt = w.status.records.lock().unwrap()["m2"].attempt;
    assert_eq!(attempt, 0);
    w.run(vec![rec("b", job("m2", "ann@example.org"))]).await;
    assert_eq!(w.mailer.sent_count(), 1);
}

#[tokio::test]
async fn unreadable_seal_keys_leave_an_envelope_for_redelivery_and_bare_jobs_unaffected() {
    struct Down;
    #[async_trait::async_trait]
    impl courier_core::ports::SecretStore for Down {
        async fn secret_string(&self, _: &str) -> Result<String, StoreError> {
            Err(StoreError::msg("GetSecretValue", "unreachable"))
        }
    }
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let mut pipeline = rebuilt(
        &w,
        Arc::new(MemoryBreakerStore::default()),
        3,
        unlimited(),
        None,
        None,
    );
    Arc::get_mut(&mut pipeline).unwrap().sealing = Sealing::new(Arc::new(
        courier_adapters::seal_secret::SecretSealKeys::from_secret("seal", Arc::new(Down)),
    ));
    let first = courier_core::envelope::parse_body(job("m3", "a@example.org").as_bytes()).unwrap();
    let envelope = courier_core::envelope::next_body(&first, Default::default(), vec![]);
    // An envelope whose job no longer validates is judged by its seal too (whether it speaks
    // for its record), so it waits for the keys as well.
    let invalid = envelope.replace(r#""version":1"#, r#""version":2"#);
    let deadline = w.clock.now() + chrono::Duration::seconds(60);
    let report = pipeline
        .handle_records(
            vec![
                rec("a", envelope),
                rec("b", job("m4", "b@example.org")),
                rec("c", invalid),
            ],
            deadline,
            "req",
        )
        .await;
    assert_eq!(report.failures, vec!["a".to_owned(), "c".to_owned()]);
    assert_eq!(w.mailer.sent_count(), 1, "the bare job is sent");
    assert_eq!(w.status_of("m3"), None);
    assert!(w.dead.letters.lock().unwrap().is_empty());
}
