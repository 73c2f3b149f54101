//! Handler tests on in-memory ports.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use courier_core::breaker::BreakerConfig;
use courier_core::classify::{ErrorClass, classify_smtp};
use courier_core::policy::{DeadLetterCategory, RetryPolicy};
use courier_core::ports::{Receipt, SendFailure, Template};
use courier_core::random::SeededRandom;
use courier_core::status::Status;
use courier_devkit::memory::*;

use super::*;
use courier_core::recipients::RecipientStatus;

mod attachments;
mod lane;
mod live;
mod outcomes;
mod pacing;
mod seal;
mod trace;
mod unsubscribe;

struct World {
    pipeline: Arc<Pipeline>,
    status: Arc<MemoryStatusStore>,
    mailer: Arc<MemoryMailer>,
    scheduler: Arc<MemoryScheduler>,
    dead: Arc<MemoryDeadLetters>,
    payloads: Arc<courier_devkit::memory::MemoryPayloads>,
    suppression: Arc<MemorySuppressionList>,
    poison: Arc<MemoryPoisonList>,
    clock: Arc<ManualClock>,
}

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

fn world_with(mailer: MemoryMailer) -> World {
    let suppression = Arc::new(MemorySuppressionList::default());
    let status = Arc::new(MemoryStatusStore {
        suppression: Some(suppression.clone()),
        ..MemoryStatusStore::default()
    });
    let mailer = Arc::new(mailer);
    let scheduler = Arc::new(MemoryScheduler::default());
    let dead = Arc::new(MemoryDeadLetters::default());
    let payloads = Arc::new(courier_devkit::memory::MemoryPayloads::default());
    let poison = Arc::new(MemoryPoisonList::default());
    let templates = Arc::new(MemoryTemplates::default());
    templates.templates.lock().unwrap().insert(
        "welcome".into(),
        Template {
            subject: "Hi {{ name }}".into(),
            text: Some("Welcome {{ name }}".into()),
            html: None,
        },
    );
    // Template amplification: a billion iterations from a few bytes.
    templates.templates.lock().unwrap().insert(
        "bomb".into(),
        Template {
            subject: "Hi".into(),
            text: Some(
                "{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}x{% endfor %}{% endfor %}{% endfor %}"
                    .into(),
            ),
            html: None,
        },
    );
    let clock = Arc::new(ManualClock::new(t0()));
    let pipeline = Arc::new(Pipeline {
        status: status.clone(),
        mailers: vec![mailer.clone()],
        scheduler: courier_devkit::memory::sealing(scheduler.clone()),
        dead_letters: dead.clone(),
        payloads: payloads.clone(),
        suppression: suppression.clone(),
        poison: poison.clone(),
        templates,
        breakers: breakers::Breakers::new(
            Arc::new(MemoryBreakerStore::default()),
            BreakerConfig::default(),
            std::time::Duration::from_secs(0),
        ),
        governor: unlimited(),
        policy: RetryPolicy::default(),
        clock: clock.clone(),
        // Four tries of a status write (about 350 ms) keep the tests short.
        config: SendConfig {
            status_write_tries: 4,
            ..SendConfig::default()
        },
        rng: std::sync::Mutex::new(SeededRandom::new(1)),
        sightings: Arc::new(courier_devkit::memory::MemorySightings::default()),
        new_codes: std::sync::Mutex::new(Vec::new()),
        sealing: crate::Sealing::new(courier_devkit::memory::test_seal_keys()),
        acceptances: Default::default(),
        live: None,
        attachment_budget: Default::default(),
        unsubscribing: Default::default(),
        outcomes: None,
    });
    World {
        pipeline,
        status,
        mailer,
        scheduler,
        dead,
        payloads,
        suppression,
        poison,
        clock,
    }
}

fn job(id: &str, to: &str) -> String {
    serde_json::json!({
        "version": 1, "message_id": id, "campaign_id": "c", "from": "shop@example.com",
        "to": [to], "content": {"subject": "Hi", "text": "Hello"}
    })
    .to_string()
}

fn rec(id: &str, body: String) -> RecordIn {
    RecordIn {
        sqs_message_id: id.into(),
        body,
        trace_header: None,
    }
}

impl World {
    async fn run(&self, records: Vec<RecordIn>) -> BatchReport {
        let deadline = self.clock.now() + chrono::Duration::seconds(60);
        self.pipeline
            .handle_records(records, deadline, "req-1")
            .await
    }

    /// Puts the job of `body` on the poison blocklist, as `courierctl dlq discard --blocklist`.
    fn blocklist(&self, body: &str) {
        self.poison
            .fingerprints
            .lock()
            .unwrap()
            .insert(courier_core::envelope::job_fingerprint(body));
    }

    /// Nothing was sent, and the job's letter is a poison one.
    fn assert_stopped_as_poison(&self) {
        assert_eq!(self.mailer.sent_count(), 0);
        assert_eq!(
            self.dead.letters.lock().unwrap()[0].category,
            DeadLetterCategory::Poison
        );
    }

    /// When the record says the copy of a waiting job is due back.
    fn copy_due_of(&self, id: &str) -> Option<chrono::DateTime<chrono::Utc>> {
        self.status.records.lock().unwrap().get(id)?.copy_due
    }

    fn status_of(&self, id: &str) -> Option<Status> {
        self.status
            .records
            .lock()
            .unwrap()
            .get(id)
            .map(|r| r.status)
    }
}

/// A governor with no rate limits.
fn unlimited() -> crate::governor::Governor {
    crate::governor::Governor::new(
        Arc::new(courier_devkit::memory::MemorySendSchedule::default()),
        std::collections::BTreeMap::new(),
    )
}

/// The world's pipeline with its breakers on `store` (shared state, no cache).
fn with_breaker_store(w: &World, store: Arc<MemoryBreakerStore>, seed: u64) -> Arc<Pipeline> {
    rebuilt(w, store, seed, unlimited(), None, None)
}

/// The world's pipeline with the send-rate `governor`.
fn with_governor(w: &World, governor: crate::governor::Governor) -> Arc<Pipeline> {
    rebuilt(
        w,
        Arc::new(MemoryBreakerStore::default()),
        3,
        governor,
        None,
        None,
    )
}

/// The world's pipeline with live settings.
fn with_live(w: &World, live: crate::live::Live) -> Arc<Pipeline> {
    rebuilt(
        w,
        Arc::new(MemoryBreakerStore::default()),
        3,
        unlimited(),
        Some(live),
        None,
    )
}

fn rebuilt(
    w: &World,
    store: Arc<dyn courier_core::ports::BreakerStore>,
    seed: u64,
    governor: crate::governor::Governor,
    live: Option<crate::live::Live>,
    bus: Option<Arc<dyn courier_core::ports::OutcomeBus>>,
) -> Arc<Pipeline> {
    let (status, outcomes) = match bus {
        Some(bus) => {
            let (status, relay) = Relay::wrap(w.pipeline.status.clone(), bus);
            (status, Some(relay))
        }
        None => (w.pipeline.status.clone(), None),
    };
    Arc::new(Pipeline {
        status,
        mailers: w.pipeline.mailers.clone(),
        scheduler: w.pipeline.scheduler.clone(),
        dead_letters: w.pipeline.dead_letters.clone(),
        payloads: w.pipeline.payloads.clone(),
        suppression: w.pipeline.suppression.clone(),
        poison: w.pipeline.poison.clone(),
        templates: w.pipeline.templates.clone(),
        breakers: breakers::Breakers::new(
            store,
            BreakerConfig::default(),
            std::time::Duration::from_secs(0),
        ),
        governor,
        policy: RetryPolicy::default(),
        clock: w.clock.clone(),
        config: SendConfig::default(),
        rng: std::sync::Mutex::new(SeededRandom::new(seed)),
        sightings: w.pipeline.sightings.clone(),
        new_codes: std::sync::Mutex::new(Vec::new()),
        sealing: crate::Sealing::new(w.pipeline.sealing.keys.clone()),
        // Another instance: it knows nothing this one kept.
        acceptances: Default::default(),
        live,
        attachment_budget: Default::default(),
        unsubscribing: Default::default(),
        outcomes,
    })
}

fn smtp_failure(reply: &'static str) -> MemoryMailer {
    MemoryMailer::with(
        courier_core::ports::Provider::Smtp,
        Box::new(move |_| {
            Err(SendFailure {
                verdict: classify_smtp(reply),
                ambiguous: false,
                source: None,
            })
        }),
    )
}

#[tokio::test]
async fn a_good_job_is_sent_once_and_duplicates_are_acknowledged() {
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let report = w
        .run(vec![
            rec("a", job("m1", "ann@example.org")),
            rec("b", job("m1", "ann@example.org")),
        ])
        .await;
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(w.mailer.sent_count(), 1);
    assert_eq!(w.status_of("m1"), Some(Status::SentToProvider));
    assert_eq!(report.metrics.counts.get("Sent"), Some(&1));
    // A later redelivery is a duplicate too.
    w.run(vec![rec("c", job("m1", "ann@example.org"))]).await;
    assert_eq!(w.mailer.sent_count(), 1);
}

#[tokio::test]
async fn bad_input_is_dead_lettered_without_disturbing_neighbours() {
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let report = w
        .run(vec![
            rec("bad1", "{not json".into()),
            rec("bad2", String::from_utf8_lossy(b"\xff\xfe").into_owned()),
            rec("bad3", job("m2", "not-an-address")),
            rec("good", job("m3", "bob@example.org")),
        ])
        .await;
    assert!(report.failures.is_empty());
    let letters = w.dead.letters.lock().unwrap();
    assert_eq!(letters.len(), 3);
    assert!(
        letters
            .iter()
            .all(|l| l.category == DeadLetterCategory::InvalidJob)
    );
    assert_eq!(
        letters
            .iter()
            .find(|l| l.message_id.as_deref() == Some("m2"))
            .unwrap()
            .raw_code
            .as_deref(),
        Some("invalid_address")
    );
    assert_eq!(w.status_of("m3"), Some(Status::SentToProvider));
}

#[tokio::test]
async fn a_failed_dead_letter_write_fails_only_that_record() {
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    w.dead.fail_puts.set(1);
    let report = w
        .run(vec![
            rec("bad", "[]".into()),
            rec("good", job("m4", "c@example.org")),
        ])
        .await;
    assert_eq!(report.failures, vec!["bad".to_owned()]);
    assert_eq!(w.status_of("m4"), Some(Status::SentToProvider));
}

/// A job stored apart, and the pointer the queue carries for it.
async fn claim_checked(w: &World, body: &str) -> String {
    use courier_core::ports::PayloadStore;
    let check = courier_core::claim_check::ClaimCheck::of(body);
    w.payloads
        .put(&check.key, body.as_bytes().to_vec())
        .await
        .unwrap();
    check.to_body()
}

#[tokio::test]
async fn a_claim_checked_job_is_redeemed_and_sent() {
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let pointer = claim_checked(&w, &job("cc1", "ann@example.org")).await;
    let report = w.run(vec![rec("a", pointer)]).await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.mailer.sent_count(), 1);
    assert_eq!(w.status_of("cc1"), Some(Status::SentToProvider));
}

#[tokio::test]
async fn a_claim_check_whose_body_is_gone_or_altered_is_dead_lettered_for_review() {
    use courier_core::ports::PayloadStore;
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    // GIVEN one pointer whose object is gone and one whose object was altered
    let gone = courier_core::claim_check::ClaimCheck::of(&job("cc2", "a@example.org")).to_body();
    let altered = courier_core::claim_check::ClaimCheck::of(&job("cc3", "b@example.org"));
    w.payloads
        .put(&altered.key, job("cc3", "eve@example.org").into_bytes())
        .await
        .unwrap();
    let report = w
        .run(vec![
            rec("gone", gone.clone()),
            rec("altered", altered.to_body()),
            rec("good", job("cc4", "c@example.org")),
        ])
        .await;
    // THEN both are dead letters for review, keeping the pointer; nothing was sent for them
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    let letters = w.dead.letters.lock().unwrap();
    assert_eq!(letters.len(), 2);
    assert!(
        letters
            .iter()
            .all(|l| l.category == DeadLetterCategory::NeedsReview && l.rule == "claim-check")
    );
    assert!(
        letters
            .iter()
            .any(|l| l.payload.as_deref() == Some(gone.as_str()))
    );
    assert_eq!(w.mailer.sent_count(), 1);
    assert_eq!(w.status_of("cc4"), Some(Status::SentToProvider));
}

#[tokio::test]
async fn an_unreachable_payload_store_leaves_the_record_for_redelivery() {
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let pointer = claim_checked(&w, &job("cc5", "ann@example.org")).await;
    w.payloads.fail_gets.set(1);
    let report = w.run(vec![rec("a", pointer.clone())]).await;
    assert_eq!(report.failures, vec!["a".to_owned()]);
    assert!(
        report.reasons[0].contains("payload get"),
        "{:?}",
        report.reasons
    );
    assert!(w.dead.letters.lock().unwrap().is_empty());
    // AND the redelivered copy is sent
    let report = w.run(vec![rec("a", pointer)]).await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.status_of("cc5"), Some(Status::SentToProvider));
}

#[tokio::test]
async fn a_sender_the_stack_does_not_allow_is_dead_lettered_unsent() {
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let mut pipeline = rebuilt(
        &w,
        Arc::new(MemoryBreakerStore::default()),
        3,
        unlimited(),
        None,
        None,
    );
    Arc::get_mut(&mut pipeline).unwrap().config.allowed_senders =
        Some(courier_core::mailbox::AllowedSenders::parse("example.com").unwrap());
    // `job` sends from shop@example.com (allowed); the same job from another domain is not.
    let forged = job("as2", "b@example.org").replace("shop@example.com", "ceo@evil.example");
    let deadline = w.clock.now() + chrono::Duration::seconds(60);
    let report = pipeline
        .handle_records(
            vec![
                rec("ok", job("as1", "a@example.org")),
                rec("forged", forged),
            ],
            deadline,
            "r",
        )
        .await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.mailer.sent_count(), 1);
    assert_eq!(w.status_of("as1"), Some(Status::SentToProvider));
    let letters = w.dead.letters.lock().unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].category, DeadLetterCategory::InvalidJob);
    assert_eq!(letters[0].rule, "local.sender_not_allowed");
    assert_eq!(letters[0].message_id.as_deref(), Some("as2"));
    assert!(letters[0].payload.is_some());
}

#[tokio::test]
async fn a_template_the_sender_may_not_use_is_dead_lettered_unsent() {
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let mut pipeline = rebuilt(
        &w,
        Arc::new(MemoryBreakerStore::default()),
        3,
        unlimited(),
        None,
        None,
    );
    Arc::get_mut(&mut pipeline).unwrap().config.sender_templates =
        Some(courier_core::senders::SenderTemplates::parse("example.com=welcome").unwrap());
    let templated = |id: &str, template: &str, from: &str| {
        let mut j: serde_json::Value = serde_json::from_str(&job(id, "a@example.org")).unwrap();
        j.as_object_mut().unwrap().remove("content");
        j["template"] = serde_json::json!({"id": template, "variables": {"name": "Ann"}});
        j["from"] = from.into();
        j.to_string()
    };
    let deadline = w.clock.now() + chrono::Duration::seconds(60);
    let report = pipeline
        .handle_records(
            vec![
                rec("ok", templated("st1", "welcome", "shop@example.com")),
                rec(
                    "other-template",
                    templated("st2", "bomb", "shop@example.com"),
                ),
                rec(
                    "other-sender",
                    templated("st3", "welcome", "x@other.example"),
                ),
                // Inline content is not a template: not affected.
                rec("content", job("st4", "b@example.org")),
            ],
            deadline,
            "r",
        )
        .await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.mailer.sent_count(), 2);
    let letters = w.dead.letters.lock().unwrap();
    let mut refused: Vec<_> = letters
        .iter()
        .map(|l| (l.message_id.clone().unwrap_or_default(), l.rule.clone()))
        .collect();
    refused.sort();
    assert_eq!(
        refused,
        [
            ("st2".to_owned(), "local.template_not_allowed".to_owned()),
            ("st3".to_owned(), "local.template_not_allowed".to_owned())
        ]
    );
}

#[tokio::test]
async fn blocklisted_payloads_go_to_poison() {
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let body = job("m5", "d@example.org");
    w.blocklist(&body);
    w.run(vec![rec("p", body)]).await;
    w.assert_stopped_as_poison();
}

#[tokio::test]
async fn a_blocklisted_job_is_stopped_in_every_copy_whichever_copy_was_blocked() {
    // GIVEN a job's first copy as the application wrote it, and a retry copy of it
    let raw = r#"{"to": ["d@example.org"],   "version": 1, "message_id": "m5b",
        "campaign_id": "c", "from": "shop@example.com", "content": {"text": "Hello", "subject": "Hi"}}"#;
    let first = courier_core::envelope::parse_body(raw.as_bytes()).unwrap();
    let retry = courier_core::envelope::next_body(&first, Default::default(), Vec::new());
    for (blocked, arriving) in [(raw.to_owned(), retry.clone()), (retry, raw.to_owned())] {
        // WHEN the operator blocklists one copy's payload (as `courierctl dlq discard --poison`)
        let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
        w.blocklist(&blocked);
        // THEN the other copy is stopped too
        w.run(vec![rec("p", arriving)]).await;
        w.assert_stopped_as_poison();
    }
}

#[tokio::test]
async fn a_retry_copy_dead_lettered_before_its_claim_leaves_its_record_dead_lettered() {
    for failed_writes in [0, 1, 4] {
        // GIVEN a job deferred after a throttle, its retry copy (generation 1) on its way
        let w = world_with(smtp_failure("421 4.7.0 Too many connections, slow down"));
        let first = job("m5c", "d@example.org");
        w.run(vec![rec("a", first.clone())]).await;
        assert_eq!(w.status_of("m5c"), Some(Status::Deferred));
        let retry = w.scheduler.queued.lock().unwrap().pop().expect("a retry");
        // WHEN the operator blocklists the job and its retry copy arrives (the status write
        // failing `failed_writes` times)
        w.blocklist(&first);
        w.status.fail_finishes.set(failed_writes);
        let report = w.run(vec![rec("b", retry.body.clone())]).await;
        // THEN the copy is dead-lettered unsent, its letter its home whatever the write did
        assert!(report.failures.is_empty(), "{:?}", report.reasons);
        let letters = w.dead.letters.lock().unwrap().clone();
        assert_eq!(letters.len(), 1);
        assert_eq!(
            (letters[0].category, letters[0].attempts),
            (DeadLetterCategory::Poison, 1)
        );
        let record = w.status.records.lock().unwrap()["m5c"].clone();
        if failed_writes >= 4 {
            // Every try failed: the record still waits (the sweeper flags it when overdue).
            assert_eq!((record.status, record.attempt), (Status::Deferred, 1));
            continue;
        }
        // AND the record says so at the copy's generation (`dlq replay` can reopen it), off
        // the waiting index, its outcome marked for publishing
        assert_eq!(
            (record.status, record.attempt, record.copy_due),
            (Status::DeadLettered, 1, None)
        );
        assert_eq!(record.outbox.map(|o| o.status), Some(Status::DeadLettered));
        let last = record.history.last().unwrap();
        assert!(
            last.detail
                .as_deref()
                .unwrap()
                .contains("poison (poison): local.blocklisted (dead-lettered before its claim)"),
            "{last:?}"
        );
        // AND a redelivered copy writes nothing more
        w.run(vec![rec("b", retry.body.clone())]).await;
        let again = w.status.records.lock().unwrap()["m5c"].clone();
        assert_eq!(again.history.len(), record.history.len());
    }
    // A first copy dead-lettered before any claim has no record, and gets none.
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let body = job("m5d", "d@example.org");
    w.blocklist(&body);
    w.run(vec![rec("p", body)]).await;
    w.assert_stopped_as_poison();
    assert_eq!(w.status_of("m5d"), None);
    // A generation-0 copy (it may be a producer's duplicate, with another payload) leaves a
    // record waiting after a released lease as it is.
    let w = world_with(smtp_failure("421 4.7.0 Too many connections, slow down"));
    w.scheduler.fail_enqueues.set(1);
    let body = job("m5e", "d@example.org");
    w.run(vec![rec("a", body.clone())]).await;
    w.blocklist(&body);
    w.run(vec![rec("a", body)]).await;
    assert_eq!(w.dead.letters.lock().unwrap().len(), 1);
    let record = w.status.records.lock().unwrap()["m5e"].clone();
    assert_eq!((record.status, record.attempt), (Status::Deferred, 0));
}

#[tokio::test]
async fn a_retry_copy_that_no_longer_validates_leaves_its_record_dead_lettered() {
    let keys = test_keys();
    let reversion = |body: &str| body.replace(r#""version":1"#, r#""version":2"#);
    let later_field = |body: &str| body.replacen('{', r#"{"from_a_later_version":true,"#, 1);
    // A retry copy as a later deploy reads it: its job no longer valid (a rolled-back version
    // number), or the envelope carrying a field this version does not know; sealed by Courier,
    // or forged. (case, change, sealed, the letter's message id, the record's last detail)
    type Change = fn(&str) -> String;
    let abandoned =
        |code: &str| format!("invalid_job (invalid_job): {code} (dead-lettered before its claim)");
    let cases: [(&str, Change, bool, bool, Option<String>); 4] = [
        (
            "job",
            reversion,
            true,
            true,
            Some(abandoned("unknown_version")),
        ),
        (
            "envelope",
            later_field,
            true,
            true,
            Some(abandoned("schema")),
        ),
        // A forged copy proves nothing: its job's own ids as for any invalid job, ...
        ("forged", reversion, false, true, None),
        // ... and none from an envelope this version cannot read.
        ("forged-envelope", later_field, false, false, None),
    ];
    for (case, change, sealed, named, detail) in cases {
        // GIVEN a job deferred after a throttle, its retry copy (generation 1) on its way
        let w = world_with(smtp_failure("421 4.7.0 Too many connections, slow down"));
        let id = format!("inv-{case}");
        w.run(vec![rec("a", job(&id, "d@example.org"))]).await;
        assert_eq!(w.status_of(&id), Some(Status::Deferred));
        let retry = w.scheduler.queued.lock().unwrap().pop().expect("a retry");
        let changed = change(&retry.body);
        assert_ne!(changed, retry.body, "{case}");
        let copy = if sealed {
            courier_core::seal::seal(&changed, &keys)
        } else {
            changed
        };
        // WHEN it arrives and fails validation
        let report = w.run(vec![rec("b", copy.clone())]).await;
        // THEN it is dead-lettered unsent as an invalid job
        assert!(report.failures.is_empty(), "{case}: {:?}", report.reasons);
        assert_eq!(w.mailer.sent_count(), 1, "{case}");
        let letters = w.dead.letters.lock().unwrap().clone();
        assert_eq!(letters.len(), 1, "{case}");
        let letter = &letters[0];
        assert_eq!(letter.category, DeadLetterCategory::InvalidJob, "{case}");
        let message_id = named.then_some(id.as_str());
        assert_eq!(letter.message_id.as_deref(), message_id, "{case}");
        let record = w.status.records.lock().unwrap()[&id].clone();
        let Some(detail) = detail else {
            // Not trusted: the record is left waiting, the letter one of a first copy.
            assert_eq!(
                (record.status, record.attempt),
                (Status::Deferred, 1),
                "{case}"
            );
            let first = letter_id(message_id, &letter.fingerprint, 0, letter.category);
            assert_eq!(letter.id, first, "{case}");
            continue;
        };
        // AND a sealed one takes its waiting record along, which `dlq replay` can reopen, its
        // letter one of that generation
        assert_eq!(
            (record.status, record.attempt, record.copy_due),
            (Status::DeadLettered, 1, None),
            "{case}"
        );
        assert_eq!(record.outbox.map(|o| o.status), Some(Status::DeadLettered));
        let last = record.history.last().unwrap();
        assert_eq!(last.detail.as_deref(), Some(detail.as_str()), "{case}");
        assert_eq!(
            letter.id,
            letter_id(message_id, &letter.fingerprint, 1, letter.category),
            "{case}"
        );
        // AND when it is replayed (generation 2) and refused again, that copy has a letter of
        // its own (not one the index already holds as replayed), and the record follows again
        assert_eq!(
            w.pipeline.status.reopen(&id, w.clock.now()).await.unwrap(),
            Some(2)
        );
        let again =
            courier_core::seal::seal(&copy.replace(r#""attempt":1"#, r#""attempt":2"#), &keys);
        w.run(vec![rec("c", again)]).await;
        let letters = w.dead.letters.lock().unwrap().clone();
        assert_eq!(letters.len(), 2, "{case}");
        assert_ne!(letters[0].id, letters[1].id, "{case}");
        let record = w.status.records.lock().unwrap()[&id].clone();
        assert_eq!(
            (record.status, record.attempt),
            (Status::DeadLettered, 2),
            "{case}"
        );
    }
    // A sealed copy naming another generation than the record's, or generation 0 (which may be
    // a producer's duplicate), leaves the record as it is.
    for (generation, waiting) in [(2, 1), (0, 0)] {
        let w = world_with(smtp_failure("421 4.7.0 Too many connections, slow down"));
        if waiting == 0 {
            // The retry could not be queued: the lease released, the record waits at 0.
            w.scheduler.fail_enqueues.set(1);
        }
        let body = job("inv-other", "d@example.org");
        w.run(vec![rec("a", body.clone())]).await;
        let record = w.status.records.lock().unwrap()["inv-other"].clone();
        assert_eq!((record.status, record.attempt), (Status::Deferred, waiting));
        let first = courier_core::envelope::parse_body(body.as_bytes()).unwrap();
        let envelope = courier_core::envelope::next_body(&first, Default::default(), Vec::new())
            .replace(r#""attempt":1"#, &format!(r#""attempt":{generation}"#));
        let copy = courier_core::seal::seal(&reversion(&envelope), &keys);
        w.run(vec![rec("b", copy)]).await;
        assert_eq!(w.dead.letters.lock().unwrap().len(), 1, "{generation}");
        let after = w.status.records.lock().unwrap()["inv-other"].clone();
        assert_eq!(
            (after.status, after.attempt),
            (Status::Deferred, waiting),
            "{generation}"
        );
    }
}

#[tokio::test]
async fn suppressed_recipients_are_not_sent_to() {
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    w.suppression
        .entries
        .lock()
        .unwrap()
        .insert("e@example.org".into(), "bounce".into());
    w.run(vec![rec("s", job("m6", "E@example.org"))]).await;
    assert_eq!(w.mailer.sent_count(), 0);
    assert_eq!(w.status_of("m6"), Some(Status::Suppressed));
}

#[tokio::test]
async fn a_suppressed_address_written_with_a_display_name_is_not_sent_to() {
    // GIVEN addresses suppressed as the stores keep them: bare, one with an IDN domain
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    for (address, reason) in [
        ("e@example.org", "complaint"),
        ("k@bücher.example", "bounce"),
    ] {
        w.pipeline
            .suppression
            .suppress(address, reason, t0())
            .await
            .unwrap();
    }
    // WHEN jobs name them with display names, other cases and the other form of the domain
    let report = w
        .run(vec![
            rec("a", job("dn1", "Erin Example <E@Example.ORG>")),
            rec(
                "b",
                job("dn2", "\"K, the reader\" <k@xn--bcher-kva.example>"),
            ),
            rec("c", job("dn3", "K <K@BÜCHER.example>")),
        ])
        .await;
    // THEN none is sent to: each job ends suppressed
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.mailer.sent_count(), 0);
    for id in ["dn1", "dn2", "dn3"] {
        assert_eq!(w.status_of(id), Some(Status::Suppressed), "{id}");
    }
}

#[tokio::test]
async fn a_permanent_bounce_suppresses_the_bare_address_of_a_named_recipient() {
    let w = world_with(smtp_failure(
        "550 5.1.1 <u@x>: Recipient address rejected: User unknown",
    ));
    w.run(vec![rec("u", job("dn4", "Uma <U@Example.org>"))])
        .await;
    assert_eq!(w.status_of("dn4"), Some(Status::BouncedPermanent));
    let entries = w.suppression.entries.lock().unwrap();
    assert_eq!(entries.keys().collect::<Vec<_>>(), ["u@example.org"]);
}

#[tokio::test]
async fn unknown_users_bounce_permanently_and_are_suppressed() {
    let w = world_with(smtp_failure(
        "550 5.1.1 <u@x>: Recipient address rejected: User unknown",
    ));
    w.run(vec![rec("u", job("m7", "u@example.org"))]).await;
    assert_eq!(w.status_of("m7"), Some(Status::BouncedPermanent));
    assert!(
        w.suppression
            .entries
            .lock()
            .unwrap()
            .contains_key("u@example.org")
    );
}

#[tokio::test]
async fn greylisting_is_re_enqueued_with_history_and_a_new_generation() {
    let w = world_with(smtp_failure(
        "450 4.2.0 <g@x>: Recipient address rejected: Greylisted",
    ));
    let report = w.run(vec![rec("g", job("m8", "g@example.org"))]).await;
    assert!(report.failures.is_empty());
    // 15 min plus jitter is past SQS's 900 s, so the state machine waits.
    let waits = w.scheduler.waits.lock().unwrap().clone();
    let queued = w.scheduler.queued.lock().unwrap().clone();
    let requeue = waits.first().or(queued.first()).expect("a retry").clone();
    assert!(requeue.delay_secs >= 900);
    let next = courier_core::envelope::parse_body(requeue.body.as_bytes()).unwrap();
    assert_eq!(next.attempt, 1);
    assert_eq!(next.history[0].class, ErrorClass::MailboxTemporary);
    assert_eq!(w.status_of("m8"), Some(Status::Deferred));
    // The record names when the copy is due, for the sweeper to notice one that never comes.
    let delay = chrono::Duration::seconds(i64::try_from(requeue.delay_secs).unwrap());
    assert_eq!(w.copy_due_of("m8"), Some(t0() + delay));
    assert_eq!(
        report.metrics.counts.get("Retried_mailbox_temporary"),
        Some(&1)
    );
}

#[tokio::test]
async fn an_unknown_reply_with_a_permanent_code_goes_to_review_at_once_not_retried() {
    let w = world_with(smtp_failure(
        "554 5.9.9 the flux capacitor refused the message",
    ));
    let report = w.run(vec![rec("u", job("m-u", "u@example.org"))]).await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.mailer.sent_count(), 1, "one try");
    assert!(w.scheduler.queued.lock().unwrap().is_empty(), "not retried");
    assert!(w.scheduler.waits.lock().unwrap().is_empty(), "not retried");
    assert_eq!(w.status_of("m-u"), Some(Status::DeadLettered));
    let letters = w.dead.letters.lock().unwrap();
    let letter = letters.last().unwrap();
    assert_eq!(letter.category, DeadLetterCategory::NeedsReview);
    assert_eq!(letter.class, ErrorClass::Unknown);
    assert_eq!(letter.rule, "smtp.basic.554");
    assert!(
        letter
            .raw_text
            .as_deref()
            .unwrap()
            .contains("flux capacitor")
    );
    assert!(
        letter.reason.contains("permanent signal"),
        "{}",
        letter.reason
    );
}

#[tokio::test]
async fn throttling_uses_the_queue_delay_in_one_batched_call() {
    let w = world_with(smtp_failure("421 4.7.0 Too many connections, slow down"));
    let records = (0..10)
        .map(|i| rec(&format!("r{i}"), job(&format!("t{i}"), "x@example.org")))
        .collect();
    let report = w.run(records).await;
    assert!(report.failures.is_empty());
    assert_eq!(w.scheduler.queued.lock().unwrap().len(), 10);
    assert_eq!(
        w.scheduler
            .batches
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

#[tokio::test]
async fn a_failed_re_enqueue_reports_the_record_and_releases_its_lease() {
    let w = world_with(smtp_failure("421 4.7.0 Too many connections, slow down"));
    w.scheduler.fail_enqueues.set(1);
    let report = w.run(vec![rec("f", job("m9", "x@example.org"))]).await;
    assert_eq!(report.failures, vec!["f".to_owned()]);
    assert_eq!(w.status_of("m9"), Some(Status::Deferred));
    // Released for SQS's redelivery: due back within the longest visibility timeout.
    assert_eq!(
        w.copy_due_of("m9"),
        Some(t0() + courier_core::ports::REDELIVERY_BOUND)
    );
    // The redelivered copy can claim at once and is re-enqueued this time.
    let report = w.run(vec![rec("f", job("m9", "x@example.org"))]).await;
    assert!(report.failures.is_empty());
    assert_eq!(w.scheduler.queued.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn content_rejections_and_rendering_failures_go_to_review() {
    let w = world_with(smtp_failure(
        "554 5.7.1 <p@x>: Recipient address rejected: message rejected by policy",
    ));
    w.run(vec![rec("p", job("m10", "p@example.org"))]).await;
    let template_job = serde_json::json!({
        "version": 1, "message_id": "m11", "campaign_id": "c", "from": "shop@example.com",
        "to": ["r@example.org"], "template": {"id": "welcome", "variables": {}}
    })
    .to_string();
    w.run(vec![rec("r", template_job)]).await;
    let letters = w.dead.letters.lock().unwrap();
    assert_eq!(letters.len(), 2);
    assert!(
        letters
            .iter()
            .all(|l| l.category == DeadLetterCategory::NeedsReview)
    );
    assert_eq!(letters[1].class, ErrorClass::Rendering);
    assert_eq!(w.status_of("m10"), Some(Status::DeadLettered));
    // Only the policy rejection reached the provider; the rendering failure cost no send.
    assert_eq!(w.mailer.sent_count(), 1);
}

#[tokio::test]
async fn a_live_lease_leaves_the_record_for_later_and_an_expired_one_is_ambiguous() {
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    // GIVEN another invocation leased the job and crashed mid-send
    w.status.records.lock().unwrap().insert(
        "m12".into(),
        courier_core::ports::JobRecord {
            message_id: "m12".into(),
            status: Status::Processing,
            attempt: 0,
            lease_owner: Some("other".into()),
            lease_until: Some(t0() + chrono::Duration::seconds(30)),
            unknown_since: None,
            provider: None,
            provider_message_id: None,
            ..courier_core::ports::JobRecord::new("m12", Status::Processing, 0, t0())
        },
    );
    let report = w.run(vec![rec("x", job("m12", "y@example.org"))]).await;
    assert_eq!(report.failures, vec!["x".to_owned()]);
    // WHEN the lease has expired THEN the job becomes unknown and waits out the grace window
    w.clock.advance(31);
    let report = w.run(vec![rec("x", job("m12", "y@example.org"))]).await;
    assert!(report.failures.is_empty());
    assert_eq!(w.status_of("m12"), Some(Status::Unknown));
    assert_eq!(w.mailer.sent_count(), 0);
    // AND after the grace window without evidence it is sent again
    w.clock.advance(901);
    w.run(vec![rec("x", job("m12", "y@example.org"))]).await;
    assert_eq!(w.mailer.sent_count(), 1);
    assert_eq!(w.status_of("m12"), Some(Status::SentToProvider));
}

#[tokio::test]
async fn a_panicking_provider_fails_only_its_record() {
    let w = world_with(MemoryMailer::with(
        courier_core::ports::Provider::Ses,
        Box::new(|e| {
            if e.message_id == "boom" {
                panic!("provider adapter bug");
            }
            Ok(Receipt::new("ok"))
        }),
    ));
    let report = w
        .run(vec![
            rec("a", job("boom", "a@example.org")),
            rec("b", job("fine", "b@example.org")),
        ])
        .await;
    assert_eq!(report.failures, vec!["a".to_owned()]);
    assert_eq!(w.status_of("fine"), Some(Status::SentToProvider));
}

/// The world's pipeline with `change` made to it (a port swapped for a faulty one).
fn altered(w: &World, change: impl FnOnce(&mut Pipeline)) -> Arc<Pipeline> {
    let mut pipeline = rebuilt(
        w,
        Arc::new(MemoryBreakerStore::default()),
        1,
        unlimited(),
        None,
        None,
    );
    change(Arc::get_mut(&mut pipeline).unwrap());
    pipeline
}

/// A job `id` rendered from the `welcome` template.
fn templated_job(id: &str) -> String {
    serde_json::json!({
        "version": 1, "message_id": id, "campaign_id": "c", "from": "shop@example.com",
        "to": ["r@example.org"], "template": {"id": "welcome", "variables": {}}
    })
    .to_string()
}

/// A template store with a bug: it panics on every lookup.
struct PanickingTemplates;

#[async_trait::async_trait]
impl courier_core::ports::TemplateStore for PanickingTemplates {
    async fn get(&self, _id: &str) -> Result<Template, courier_core::ports::TemplateError> {
        panic!("template store bug");
    }
}

#[tokio::test]
async fn a_job_that_crashes_the_worker_before_sending_is_poison() {
    // GIVEN a worker that panics while rendering templated jobs
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let pipeline = altered(&w, |p| p.templates = Arc::new(PanickingTemplates));
    let templated = templated_job("crash");
    // AND the same kind of job arriving as a claim check
    let pointer = claim_checked(&w, &templated.replace("\"crash\"", "\"crash2\"")).await;
    // WHEN a batch holds them and a plain job
    let deadline = w.clock.now() + chrono::Duration::seconds(60);
    let report = pipeline
        .handle_records(
            vec![
                rec("a", templated),
                rec("b", job("plain", "b@example.org")),
                rec("c", pointer),
            ],
            deadline,
            "req-1",
        )
        .await;
    // THEN it is dead-lettered as poison at once (no redelivery loop), with the panic's text;
    // the other record is sent
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    let mut letters = w.dead.letters.lock().unwrap().clone();
    letters.sort_by(|a, b| a.message_id.cmp(&b.message_id));
    assert_eq!(letters.len(), 2);
    // The claim-checked one is judged by its job, whose payload its letter keeps.
    assert_eq!(letters[1].message_id.as_deref(), Some("crash2"));
    assert_eq!(letters[1].category, DeadLetterCategory::Poison);
    let kept = letters[1].payload.as_deref().unwrap();
    assert!(
        kept.contains("crash2") && !kept.contains("courier_claim_check"),
        "{kept}"
    );
    assert_eq!(w.status_of("crash2"), Some(Status::DeadLettered));
    assert_eq!(letters[0].category, DeadLetterCategory::Poison);
    assert_eq!(letters[0].class, ErrorClass::Poison);
    assert!(
        letters[0].reason.contains("template store bug"),
        "{}",
        letters[0].reason
    );
    assert!(letters[0].payload.is_some());
    assert_eq!(w.status_of("crash"), Some(Status::DeadLettered));
    assert_eq!(w.status_of("plain"), Some(Status::SentToProvider));
    assert_eq!(w.mailer.sent_count(), 1);
}

/// A poison list with a bug: it panics on every lookup (before any claim).
struct PanickingPoisonList;

#[async_trait::async_trait]
impl courier_core::ports::PoisonList for PanickingPoisonList {
    async fn is_blocked(&self, _: &str) -> Result<bool, courier_core::ports::StoreError> {
        panic!("poison list bug");
    }
    async fn block(
        &self,
        _: &str,
        _: &str,
        _: DateTime<Utc>,
    ) -> Result<(), courier_core::ports::StoreError> {
        panic!("poison list bug");
    }
}

#[tokio::test]
async fn a_crash_before_the_claim_leaves_a_record_it_never_took() {
    // (record's status at generation 1, the crashed copy's generation, the record after)
    for (status, copy, after) in [
        // A first copy, or a producer's duplicate: never speaks for the record.
        (Status::Unknown, 0, Status::Unknown),
        (Status::Deferred, 0, Status::Deferred),
        // The copy the record waits for: as any copy dead-lettered before its claim.
        (Status::Deferred, 1, Status::DeadLettered),
        // `unknown` (the provider may have it) is never turned dead_lettered by it.
        (Status::Unknown, 1, Status::Unknown),
    ] {
        // GIVEN a job whose record is `status`, not leased, at generation 1
        let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
        let mut record = courier_core::ports::JobRecord::new("pc", status, 1, t0());
        record.copy_due = Some(t0());
        w.status.records.lock().unwrap().insert("pc".into(), record);
        let body = if copy == 0 {
            job("pc", "r@example.org")
        } else {
            sealed_retry(&w, &job("pc", "r@example.org")).await
        };
        let pipeline = altered(&w, |p| p.poison = Arc::new(PanickingPoisonList));
        // WHEN a copy of generation `copy` crashes the worker before its claim
        let deadline = w.clock.now() + chrono::Duration::seconds(60);
        let report = pipeline
            .handle_records(vec![rec("a", body)], deadline, "r")
            .await;
        // THEN it is dead-lettered as poison, and the record is what an unclaimed copy leaves
        assert!(report.failures.is_empty(), "{:?}", report.reasons);
        let letters = w.dead.letters.lock().unwrap().clone();
        assert_eq!(letters.len(), 1);
        assert_eq!(letters[0].rule, "local.worker-panic");
        assert_eq!(
            w.status_of("pc"),
            Some(after),
            "{status} with a copy of {copy}"
        );
        assert_eq!(w.mailer.sent_count(), 0);
    }
}

/// The sealed retry copy (generation 1) of `body`, as the send function queues it.
async fn sealed_retry(w: &World, body: &str) -> String {
    let first = courier_core::envelope::parse_body(body.as_bytes()).unwrap();
    let next = courier_core::envelope::next_body(&first, Default::default(), Vec::new());
    let requeue = courier_core::ports::Requeue {
        message_id: first.job.message_id.clone(),
        body: next,
        delay_secs: 0,
    };
    let sent = w.pipeline.scheduler.enqueue(&[requeue]).await;
    assert!(sent.iter().all(Result::is_ok));
    w.scheduler.queued.lock().unwrap().pop().unwrap().body
}

/// A template store whose lookup outlives the lease: the record is marked `unknown` (as the
/// sweeper does with an expired lease) while it runs, and then it panics.
struct OutlivedTemplates(Arc<MemoryStatusStore>);

#[async_trait::async_trait]
impl courier_core::ports::TemplateStore for OutlivedTemplates {
    async fn get(&self, _id: &str) -> Result<Template, courier_core::ports::TemplateError> {
        if let Some(rec) = self.0.records.lock().unwrap().get_mut("outlived") {
            rec.status = Status::Unknown;
            rec.lease_owner = None;
            rec.lease_until = None;
        }
        panic!("template store bug after the lease expired");
    }
}

#[tokio::test]
async fn a_crash_after_the_lease_expired_into_unknown_still_dead_letters_the_job_it_took() {
    // GIVEN a worker whose rendering outlives its lease (marked unknown meanwhile), then panics
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let outlived = OutlivedTemplates(w.status.clone());
    let pipeline = altered(&w, |p| p.templates = Arc::new(outlived));
    let templated = templated_job("outlived");
    // WHEN it crashes (no provider was called)
    let deadline = w.clock.now() + chrono::Duration::seconds(60);
    let report = pipeline
        .handle_records(vec![rec("a", templated)], deadline, "r")
        .await;
    // THEN the job it took is dead-lettered with its letter (replayable), not left unknown
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.dead.letters.lock().unwrap().len(), 1);
    assert_eq!(w.status_of("outlived"), Some(Status::DeadLettered));
    assert_eq!(w.mailer.sent_count(), 0);
}

#[tokio::test]
async fn a_panic_after_the_provider_call_is_left_for_redelivery_not_poisoned() {
    let w = world_with(MemoryMailer::with(
        courier_core::ports::Provider::Ses,
        Box::new(|_| panic!("adapter bug after the request went out")),
    ));
    let report = w
        .run(vec![rec("a", job("maybe-sent", "a@example.org"))])
        .await;
    assert_eq!(report.failures, vec!["a".to_owned()]);
    assert!(
        report.reasons[0].contains("after calling the provider"),
        "{:?}",
        report.reasons
    );
    assert!(w.dead.letters.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_open_circuit_waits_without_spending_an_attempt() {
    let w = world_with(smtp_failure(
        "421 4.3.2 System not accepting network messages",
    ));
    // Ten provider failures open the circuit (min_calls 10, ratio 0.5).
    let records = (0..10)
        .map(|i| rec(&format!("o{i}"), job(&format!("o{i}"), "x@example.org")))
        .collect();
    w.run(records).await;
    let before = w.mailer.sent_count();
    let report = w.run(vec![rec("n", job("n1", "x@example.org"))]).await;
    assert!(report.failures.is_empty());
    assert_eq!(
        w.mailer.sent_count(),
        before,
        "sent through an open circuit"
    );
    assert_eq!(report.metrics.counts.get("Retried_circuit_open"), Some(&1));
    let queued = w.scheduler.queued.lock().unwrap();
    let last = courier_core::envelope::parse_body(queued.last().unwrap().body.as_bytes()).unwrap();
    assert_eq!(last.retry.spent, 0);
    // The cached state already said open: the job waits unclaimed (no status write), as the
    // same generation, with the wait in its envelope.
    assert_eq!(w.status_of("n1"), None);
    assert_eq!(last.attempt, 0);
    assert_eq!(last.retry.streak, Some((ErrorClass::CircuitOpen, 1)));
    assert_eq!(last.history.last().unwrap().class, ErrorClass::CircuitOpen);
}

#[tokio::test]
async fn an_ambiguous_send_is_marked_unknown_not_resent() {
    let w = world_with(MemoryMailer::with(
        courier_core::ports::Provider::Ses,
        Box::new(|_| {
            Err(SendFailure {
                verdict: courier_core::classify::Verdict::local(
                    ErrorClass::Network,
                    "timeout",
                    "timed out after sending",
                ),
                ambiguous: true,
                source: None,
            })
        }),
    ));
    let report = w.run(vec![rec("a", job("amb", "a@example.org"))]).await;
    assert!(report.failures.is_empty());
    assert_eq!(w.status_of("amb"), Some(Status::Unknown));
    // Its recipient is as ambiguous as the send (an SES event about it resolves both).
    let record = w.status.records.lock().unwrap()["amb"].clone();
    let roll = roll_of(&record);
    assert_eq!(roll, vec![("a@example.org", RecipientStatus::Unknown)]);
    let queued = w.scheduler.queued.lock().unwrap();
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].delay_secs, 900);
}

fn ambiguous_mailer() -> MemoryMailer {
    MemoryMailer::with(
        courier_core::ports::Provider::Ses,
        Box::new(|_| {
            Err(SendFailure {
                verdict: courier_core::classify::Verdict::local(
                    ErrorClass::Network,
                    "timeout",
                    "timed out after sending",
                ),
                ambiguous: true,
                source: None,
            })
        }),
    )
}

#[tokio::test]
async fn an_accepted_send_whose_status_write_fails_once_is_written_again_not_resent() {
    // GIVEN the provider accepts, and the first status write fails
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    w.status.fail_finishes.set(1);
    let report = w.run(vec![rec("a", job("acc1", "a@example.org"))]).await;
    // THEN the write is made again in the same invocation: acknowledged, sent once
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.status_of("acc1"), Some(Status::SentToProvider));
    // AND a duplicate delivery of the copy sends nothing
    w.run(vec![rec("a", job("acc1", "a@example.org"))]).await;
    assert_eq!(w.mailer.sent_count(), 1);
}

/// A breaker store that notes, at each read of the shared state, the status job `watched` has.
struct StatusAtEachRead {
    inner: MemoryBreakerStore,
    status: Arc<MemoryStatusStore>,
    watched: &'static str,
    seen: std::sync::Mutex<Vec<Option<Status>>>,
}

#[async_trait::async_trait]
impl courier_core::ports::BreakerStore for StatusAtEachRead {
    async fn load(
        &self,
        provider: &str,
    ) -> Result<Option<courier_core::breaker::BreakerState>, courier_core::ports::StoreError> {
        let status = self
            .status
            .records
            .lock()
            .unwrap()
            .get(self.watched)
            .map(|r| r.status);
        self.seen.lock().unwrap().push(status);
        self.inner.load(provider).await
    }

    async fn save(
        &self,
        provider: &str,
        state: &courier_core::breaker::BreakerState,
        expected: Option<u64>,
    ) -> Result<bool, courier_core::ports::StoreError> {
        self.inner.save(provider, state, expected).await
    }
}

#[tokio::test]
async fn an_acceptance_is_written_before_the_breaker_counts_it() {
    // GIVEN breakers that read their shared state at every use (no cache): a read that a slow
    // or unreachable table can hold up
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Smtp));
    let store = Arc::new(StatusAtEachRead {
        inner: MemoryBreakerStore::default(),
        status: w.status.clone(),
        watched: "first1",
        seen: Default::default(),
    });
    let pipeline = rebuilt(&w, store.clone(), 3, unlimited(), None, None);
    // WHEN the provider accepts a job
    let deadline = w.clock.now() + chrono::Duration::seconds(60);
    let report = pipeline
        .handle_records(
            vec![rec("a", job("first1", "a@example.org"))],
            deadline,
            "r",
        )
        .await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    // THEN a read before the send saw the lease, and the read that counts the success came
    // after the sent status was written: a crash in between cannot leave the mail unrecorded
    let seen = store.seen.lock().unwrap().clone();
    assert!(seen.contains(&Some(Status::Processing)), "{seen:?}");
    assert_eq!(seen.last(), Some(&Some(Status::SentToProvider)), "{seen:?}");
    assert_eq!(w.mailer.sent_count(), 1);
}

#[tokio::test]
async fn a_status_write_whose_answer_was_lost_after_it_landed_counts_as_made() {
    use courier_devkit::faults::{Fault, Faults, Faulty};
    // GIVEN the provider accepts, and the sent status lands but its answer is lost (the
    // status store's calls: 0 the claim, 1 the sent status)
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Smtp));
    let faults = Arc::new(Faults::default());
    faults.arm(1, Fault::FailAfter);
    let mut pipeline = rebuilt(
        &w,
        Arc::new(MemoryBreakerStore::default()),
        3,
        unlimited(),
        None,
        None,
    );
    Arc::get_mut(&mut pipeline).unwrap().status =
        Arc::new(Faulty::new(w.status.clone(), faults.clone()));
    let deadline = w.clock.now() + chrono::Duration::seconds(60);
    let report = pipeline
        .handle_records(vec![rec("a", job("lost1", "a@example.org"))], deadline, "r")
        .await;
    // THEN the record is read back, found written, and nothing is written again: acknowledged
    // as sent (writing it again would fail, the lease being gone, and keep it `unknown`)
    assert!(faults.fired());
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.status_of("lost1"), Some(Status::SentToProvider));
    assert_eq!(faults.calls(), 3, "the claim, the write, the read-back");
    assert_eq!(w.mailer.sent_count(), 1);
}

#[tokio::test]
async fn an_acceptance_that_cannot_be_written_as_sent_is_kept_as_unknown_and_never_resent() {
    // GIVEN the provider accepts, and every try of the sent status fails
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    w.status
        .fail_finishes
        .set(w.pipeline.config.status_write_tries as usize);
    let report = w.run(vec![rec("a", job("acc2", "a@example.org"))]).await;
    // THEN the record is left for redelivery, kept `unknown` with the provider's id
    assert_eq!(report.failures, vec!["a".to_owned()]);
    let record = w.status.records.lock().unwrap()["acc2"].clone();
    assert_eq!(record.status, Status::Unknown);
    assert_eq!(record.provider_message_id.as_deref(), Some("mem-acc2"));
    // WHEN SQS redelivers the copy
    w.clock.advance(30);
    let report = w.run(vec![rec("a", job("acc2", "a@example.org"))]).await;
    // THEN it is recorded sent and acknowledged, without a second send
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.mailer.sent_count(), 1);
    assert_eq!(w.status_of("acc2"), Some(Status::SentToProvider));
    // AND the copy carrying the acceptance, queued after the first failed write, is the only
    // copy queued, and it finds the job recorded: acknowledged without a send
    let queued = w.scheduler.queued.lock().unwrap().clone();
    assert_eq!(queued.len(), 1, "{queued:?}");
    assert!(
        queued[0].body.contains("\"accepted\""),
        "{}",
        queued[0].body
    );
    let report = w.run(vec![rec("c", queued[0].body.clone())]).await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.mailer.sent_count(), 1);
    assert_eq!(w.status_of("acc2"), Some(Status::SentToProvider));
}

#[tokio::test]
async fn an_acceptance_with_no_write_possible_keeps_the_lease_and_expires_into_unknown() {
    // GIVEN the provider accepts, no status write can be made at all, and the queue cannot take
    // the copy carrying the acceptance either
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    w.status
        .fail_finishes
        .set(w.pipeline.config.status_write_tries as usize + 1);
    w.scheduler
        .fail_enqueues
        .set(w.pipeline.config.status_write_tries as usize + 1);
    let report = w.run(vec![rec("a", job("acc3", "a@example.org"))]).await;
    // THEN the lease is not released as `deferred`, and nothing was queued
    assert_eq!(report.failures, vec!["a".to_owned()]);
    assert!(
        report.reasons[0].contains("could not be queued either"),
        "{:?}",
        report.reasons
    );
    assert_eq!(w.status_of("acc3"), Some(Status::Processing));
    assert!(w.scheduler.queued.lock().unwrap().is_empty());
    // WHEN the copy comes back after the lease to another instance (which knows nothing)
    w.clock.advance(130);
    let other = rebuilt(
        &w,
        Arc::new(MemoryBreakerStore::default()),
        3,
        unlimited(),
        None,
        None,
    );
    let deadline = w.clock.now() + chrono::Duration::seconds(60);
    let report = other
        .handle_records(vec![rec("a", job("acc3", "a@example.org"))], deadline, "r2")
        .await;
    // THEN the job is `unknown` and waits out the grace window: no second send
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.mailer.sent_count(), 1);
    assert_eq!(w.status_of("acc3"), Some(Status::Unknown));
    let queued = w.scheduler.queued.lock().unwrap().clone();
    assert!(queued[0].delay_secs >= 1, "{queued:?}");
    // AND when that copy comes back to the instance that saw the provider accept it, the kept
    // answer records it sent, with the provider's id: no second send after the grace window
    w.clock.advance(60);
    let report = w.run(vec![rec("b", queued[0].body.clone())]).await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.mailer.sent_count(), 1);
    assert_eq!(w.status_of("acc3"), Some(Status::SentToProvider));
    let record = w.status.records.lock().unwrap()["acc3"].clone();
    assert_eq!(record.provider_message_id.as_deref(), Some("mem-acc3"));
    assert!(
        record
            .history
            .last()
            .unwrap()
            .detail
            .as_deref()
            .unwrap()
            .contains("recorded later"),
        "{:?}",
        record.history.last()
    );
}

#[tokio::test]
async fn an_acceptance_the_events_function_recorded_first_is_not_written_again() {
    // GIVEN SES takes the mail, and before this send's own status write SES's events record it
    // (its Send event: sent with SES's id, the lease ended), or the events function already
    // resent it after its transient bounce (the next generation, naming this send)
    for resent in [false, true] {
        let store: Arc<std::sync::OnceLock<Arc<MemoryStatusStore>>> = Arc::default();
        let seen = store.clone();
        let w = world_with(MemoryMailer::with(
            courier_core::ports::Provider::Ses,
            Box::new(move |e| {
                let id = format!("ses-{}", e.message_id);
                let mut records = seen.get().unwrap().records.lock().unwrap();
                let rec = records.get_mut(&e.message_id).unwrap();
                rec.lease_owner = None;
                rec.lease_until = None;
                if resent {
                    rec.status = Status::Deferred;
                    rec.attempt += 1;
                    rec.resend_of = Some(id.clone());
                } else {
                    rec.status = Status::SentToProvider;
                    rec.provider_message_id = Some(id.clone());
                }
                Ok(courier_core::ports::Receipt::new(id))
            }),
        ));
        store.set(w.status.clone()).unwrap();
        let report = w.run(vec![rec("a", job("first", "a@example.org"))]).await;
        // THEN the send is done: no failed write reported, no carrier copy queued, no
        // redelivery, and the record is the events function's
        assert!(report.failures.is_empty(), "{:?}", report.reasons);
        assert_eq!(
            report.metrics.counts.get("Sent"),
            Some(&1),
            "resent: {resent}"
        );
        assert!(w.scheduler.queued.lock().unwrap().is_empty());
        assert_eq!(w.mailer.sent_count(), 1);
        let want = if resent {
            Status::Deferred
        } else {
            Status::SentToProvider
        };
        assert_eq!(w.status_of("first"), Some(want));
    }
}

#[tokio::test]
async fn an_acceptance_no_status_write_can_keep_outlives_its_instance_on_the_queue() {
    // GIVEN the provider accepts and no status write can be made at all (the table is down)
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    w.status
        .fail_finishes
        .set(w.pipeline.config.status_write_tries as usize + 1);
    let report = w.run(vec![rec("a", job("acc4", "a@example.org"))]).await;
    // THEN the record is left for redelivery with its lease kept, and a sealed copy of the same
    // generation carrying the acceptance is on the queue, due at once
    assert_eq!(report.failures, vec!["a".to_owned()]);
    assert!(
        report.reasons[0].contains("will record it sent"),
        "{:?}",
        report.reasons
    );
    assert_eq!(w.status_of("acc4"), Some(Status::Processing));
    let queued = w.scheduler.queued.lock().unwrap().clone();
    assert_eq!(queued.len(), 1, "{queued:?}");
    assert_eq!(queued[0].delay_secs, 0);
    let carrier = courier_core::envelope::parse_body(queued[0].body.as_bytes()).unwrap();
    assert_eq!(carrier.attempt, 0);
    assert_eq!(
        carrier
            .accepted
            .as_ref()
            .map(|a| a.provider_message_id.as_str()),
        Some("mem-acc4")
    );
    // WHEN the instance is gone (its memory with it) and another one takes the carrier copy
    // while the lost instance's lease still stands
    let other = rebuilt(
        &w,
        Arc::new(MemoryBreakerStore::default()),
        3,
        unlimited(),
        None,
        None,
    );
    let deadline = w.clock.now() + chrono::Duration::seconds(60);
    let report = other
        .handle_records(vec![rec("c", queued[0].body.clone())], deadline, "r2")
        .await;
    // THEN it waits on the queue, acknowledged, until the lease ends (its sender may yet write)
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.status_of("acc4"), Some(Status::Processing));
    let queued = w.scheduler.queued.lock().unwrap().clone();
    assert_eq!(queued.len(), 2, "{queued:?}");
    let lease_left = (w.status.records.lock().unwrap()["acc4"]
        .lease_until
        .unwrap()
        - w.clock.now())
    .num_seconds();
    assert_eq!(queued[1].delay_secs, lease_left as u64 + 1);
    // WHEN that copy comes back after the lease
    w.clock.advance(queued[1].delay_secs as i64);
    let deadline = w.clock.now() + chrono::Duration::seconds(60);
    let report = other
        .handle_records(vec![rec("d", queued[1].body.clone())], deadline, "r3")
        .await;
    // THEN the job is recorded sent with the provider's id, without a second send
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.mailer.sent_count(), 1);
    assert_eq!(w.status_of("acc4"), Some(Status::SentToProvider));
    let record = w.status.records.lock().unwrap()["acc4"].clone();
    assert_eq!(record.provider_message_id.as_deref(), Some("mem-acc4"));
    assert!(
        record
            .history
            .last()
            .unwrap()
            .detail
            .as_deref()
            .unwrap()
            .contains("the copy its sender queued"),
        "{:?}",
        record.history.last()
    );
    // AND the SES body is kept for a resend after a transient bounce
    assert!(record.payload.is_some());
    // AND the original copy, redelivered after the lease, is acknowledged without sending
    w.clock.advance(130);
    let deadline = w.clock.now() + chrono::Duration::seconds(60);
    let report = other
        .handle_records(vec![rec("a", job("acc4", "a@example.org"))], deadline, "r4")
        .await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.mailer.sent_count(), 1);
    assert_eq!(w.status_of("acc4"), Some(Status::SentToProvider));
}

#[tokio::test]
async fn a_copy_carrying_an_acceptance_that_crashes_the_worker_is_never_poison() {
    // GIVEN a sealed copy carrying SES's acceptance, which took its job's lease
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let keys = test_keys();
    let first =
        courier_core::envelope::parse_body(job("acc-p", "a@example.org").as_bytes()).unwrap();
    let carrier = courier_core::seal::seal(
        &courier_core::envelope::accepted_body(
            &first,
            courier_core::envelope::ProviderAcceptance {
                provider: "ses".into(),
                provider_message_id: "ses-1".into(),
                at: t0(),
            },
        ),
        &keys,
    );
    let mut record = courier_core::ports::JobRecord::new("acc-p", Status::Processing, 0, t0());
    record.lease_owner = Some("req/c".into());
    record.lease_until = Some(t0() + chrono::Duration::seconds(60));
    w.status
        .records
        .lock()
        .unwrap()
        .insert("acc-p".into(), record);
    // WHEN it crashes the worker
    let step = w
        .pipeline
        .poison_after_panic(&carrier, "req/c", "bug while recording")
        .await;
    // THEN it is left for redelivery (which records the send), with no dead letter and the
    // record not dead_lettered: the mail is out, and a replay would send it again
    assert!(
        matches!(step, Step::Redeliver(Cause::PanickedAfterCall(_))),
        "{step:?}"
    );
    assert!(w.dead.letters.lock().unwrap().is_empty());
    assert_eq!(w.status_of("acc-p"), Some(Status::Processing));
}

#[tokio::test]
async fn a_carried_acceptance_of_an_earlier_generation_records_nothing() {
    // GIVEN a copy carrying generation 0's acceptance, and the job meanwhile at generation 1
    // with an ambiguous send (a soft bounce's resend, say): `unknown`
    let w = world_with(ambiguous_mailer());
    let keys = test_keys();
    let seal_body = |body: &str| courier_core::seal::seal(body, &keys);
    let first =
        courier_core::envelope::parse_body(job("acc7", "a@example.org").as_bytes()).unwrap();
    let carrier = seal_body(&courier_core::envelope::accepted_body(
        &first,
        courier_core::envelope::ProviderAcceptance {
            provider: "ses".into(),
            provider_message_id: "generation-0".into(),
            at: t0(),
        },
    ));
    let second = seal_body(&courier_core::envelope::next_body(
        &first,
        first.retry.clone(),
        Vec::new(),
    ));
    let report = w.run(vec![rec("g1", second)]).await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.status_of("acc7"), Some(Status::Unknown));
    // WHEN the carrier arrives
    let report = w.run(vec![rec("c", carrier)]).await;
    // THEN it is dropped: generation 1 stays `unknown` (its own evidence decides), nothing sent
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.status_of("acc7"), Some(Status::Unknown));
    let record = w.status.records.lock().unwrap()["acc7"].clone();
    assert!(record.attempt >= 1, "{record:?}");
    assert_ne!(record.provider_message_id.as_deref(), Some("generation-0"));
    assert_eq!(w.mailer.sent_count(), 1);
}

#[tokio::test]
async fn a_carried_acceptance_that_takes_the_record_keeps_the_body_to_resend_from() {
    // GIVEN copies carrying SES's acceptance of generation 0, and no record the claim must
    // wait for (none written: a table restored without it, or a record an earlier version
    // claimed without its body and whose lease lapsed)
    let keys = test_keys();
    let carrier = |id: &str, provider: &str| {
        let first =
            courier_core::envelope::parse_body(job(id, "a@example.org").as_bytes()).unwrap();
        courier_core::seal::seal(
            &courier_core::envelope::accepted_body(
                &first,
                courier_core::envelope::ProviderAcceptance {
                    provider: provider.into(),
                    provider_message_id: format!("{provider}-{id}"),
                    at: t0(),
                },
            ),
            &keys,
        )
    };
    for (mailer, id, kept) in [
        (courier_core::ports::Provider::Ses, "carried-ses", true),
        (courier_core::ports::Provider::Smtp, "carried-smtp", false),
    ] {
        let w = world_with(MemoryMailer::accepting(mailer));
        // WHEN the carrier arrives
        let report = w.run(vec![rec("c", carrier(id, mailer.as_str()))]).await;
        // THEN the job is recorded sent with the provider's id, nothing sent again
        assert!(report.failures.is_empty(), "{:?}", report.reasons);
        assert_eq!(w.mailer.sent_count(), 0);
        assert_eq!(w.status_of(id), Some(Status::SentToProvider));
        let record = w.status.records.lock().unwrap()[id].clone();
        let expected_id = format!("{}-{id}", mailer.as_str());
        assert_eq!(
            record.provider_message_id.as_deref(),
            Some(expected_id.as_str())
        );
        // AND its claim kept the body a transient bounce resends from, as every claim of a
        // stack that sends through SES does (SMTP reports no bounces to resend on)
        assert_eq!(record.payload.is_some(), kept, "{id}: {:?}", record.payload);
        if mailer == courier_core::ports::Provider::Ses {
            // A body over 300 KiB with the payload bucket failing: the acceptance is recorded
            // all the same, with the claim check of its body (its first claim stored it)
            let large_id = format!("{id}-large");
            let large = job(&large_id, "a@example.org").replace(
                "\"text\":",
                &format!(
                    "\"html\": \"<p>{}</p>\", \"text\":",
                    "x".repeat(MAX_KEPT_PAYLOAD)
                ),
            );
            let first = courier_core::envelope::parse_body(large.as_bytes()).unwrap();
            let kept_body = courier_core::envelope::current_body(&first);
            let carried = courier_core::seal::seal(
                &courier_core::envelope::accepted_body(
                    &first,
                    courier_core::envelope::ProviderAcceptance {
                        provider: "ses".into(),
                        provider_message_id: "ses-large".into(),
                        at: t0(),
                    },
                ),
                &keys,
            );
            w.payloads.fail_puts.set(1);
            let report = w.run(vec![rec("l", carried)]).await;
            assert!(report.failures.is_empty(), "{:?}", report.reasons);
            assert_eq!(w.status_of(&large_id), Some(Status::SentToProvider));
            assert_eq!(
                w.status.records.lock().unwrap()[&large_id].payload,
                Some(courier_core::claim_check::ClaimCheck::of(&kept_body).to_body())
            );
        }
        if let Some(body) = &record.payload {
            let body = courier_core::envelope::parse_body(body.as_bytes()).unwrap();
            assert_eq!(body.job.message_id, id);
            assert!(
                body.accepted.is_none(),
                "the kept body is the job, not the carrier"
            );
        }
    }
}

#[tokio::test]
async fn an_acceptance_whose_first_write_hangs_is_carried_on_the_queue_too() {
    // GIVEN the provider accepts and the first status write hangs past `carrier_after`
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Smtp));
    let hang = w.pipeline.config.carrier_after.as_millis() as usize * 2;
    w.status
        .slow_next_finish_ms
        .store(hang, std::sync::atomic::Ordering::SeqCst);
    let report = w.run(vec![rec("a", job("acc5", "a@example.org"))]).await;
    // THEN the write still lands (the job is sent, acknowledged), and while it hung a copy
    // carrying the acceptance was queued (had the instance died then, it would record it)
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.status_of("acc5"), Some(Status::SentToProvider));
    let queued = w.scheduler.queued.lock().unwrap().clone();
    assert_eq!(queued.len(), 1, "{queued:?}");
    let carrier = courier_core::envelope::parse_body(queued[0].body.as_bytes()).unwrap();
    assert!(carrier.accepted.is_some());
    // AND that copy, taken later, changes nothing and sends nothing
    let report = w.run(vec![rec("c", queued[0].body.clone())]).await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.mailer.sent_count(), 1);
    assert_eq!(w.status_of("acc5"), Some(Status::SentToProvider));
    // AND a write that answers in time queues nothing
    let report = w.run(vec![rec("b", job("acc6", "a@example.org"))]).await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.scheduler.queued.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_producers_envelope_claiming_an_acceptance_records_nothing() {
    // GIVEN a job whose send was ambiguous (`unknown`: its outcome waits for evidence)
    let w = world_with(ambiguous_mailer());
    let report = w
        .run(vec![rec("a", job("forged-acc", "a@example.org"))])
        .await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.status_of("forged-acc"), Some(Status::Unknown));
    // WHEN a producer sends an envelope of that job claiming the provider took it (no seal)
    let mut envelope: serde_json::Value =
        serde_json::from_str(&courier_core::envelope::accepted_body(
            &courier_core::envelope::parse_body(job("forged-acc", "a@example.org").as_bytes())
                .unwrap(),
            courier_core::envelope::ProviderAcceptance {
                provider: "ses".into(),
                provider_message_id: "fake".into(),
                at: t0(),
            },
        ))
        .unwrap();
    envelope.as_object_mut().unwrap().remove("seal");
    let report = w.run(vec![rec("f", envelope.to_string())]).await;
    // THEN the claim is not taken for evidence: the job stays `unknown`, nothing is sent
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.mailer.sent_count(), 1);
    assert_eq!(w.status_of("forged-acc"), Some(Status::Unknown));
    let record = w.status.records.lock().unwrap()["forged-acc"].clone();
    assert_ne!(record.provider_message_id.as_deref(), Some("fake"));
}

#[tokio::test]
async fn nothing_follows_an_ambiguous_send_until_unknown_is_durable() {
    // GIVEN an ambiguous send, and the `unknown` write after it fails every try
    let w = world_with(ambiguous_mailer());
    w.status
        .fail_finishes
        .set(w.pipeline.config.status_write_tries as usize);
    let report = w.run(vec![rec("a", job("amb2", "a@example.org"))]).await;
    // THEN no retry is scheduled and the lease is kept (not released as `deferred`)
    assert_eq!(report.failures, vec!["a".to_owned()]);
    assert!(w.scheduler.queued.lock().unwrap().is_empty());
    assert!(w.scheduler.waits.lock().unwrap().is_empty());
    assert_eq!(w.status_of("amb2"), Some(Status::Processing));
    // WHEN the copy comes back after the lease
    w.clock.advance(130);
    w.run(vec![rec("a", job("amb2", "a@example.org"))]).await;
    // THEN it is `unknown` and waits for evidence: still one send
    assert_eq!(w.mailer.sent_count(), 1);
    assert_eq!(w.status_of("amb2"), Some(Status::Unknown));
}

#[tokio::test]
async fn a_failed_dead_letter_after_an_ambiguous_send_keeps_unknown() {
    // GIVEN a job whose ambiguous send is its last allowed attempt, and the dead-letter put fails
    let w = world_with(ambiguous_mailer());
    let mut body = job("amb3", "a@example.org");
    loop {
        w.run(vec![rec("a", body.clone())]).await;
        let next = w.scheduler.queued.lock().unwrap().pop();
        let Some(requeue) = next else { break };
        let incoming = courier_core::envelope::parse_body(requeue.body.as_bytes()).unwrap();
        body = requeue.body;
        w.clock.advance(requeue.delay_secs as i64);
        if incoming.attempt == 5 {
            break;
        }
    }
    let sends = w.mailer.sent_count();
    w.dead.fail_puts.set(1);
    let report = w.run(vec![rec("a", body.clone())]).await;
    // THEN the record is redelivered and the job stays `unknown` (never `deferred`)
    assert_eq!(report.failures, vec!["a".to_owned()]);
    assert_eq!(w.status_of("amb3"), Some(Status::Unknown));
    assert_eq!(w.mailer.sent_count(), sends + 1);
    // AND the redelivered copy waits for evidence instead of sending again
    w.clock.advance(30);
    w.run(vec![rec("a", body)]).await;
    assert_eq!(w.mailer.sent_count(), sends + 1);
}

#[tokio::test]
async fn a_long_wait_too_large_for_the_state_machine_hops_through_the_queue_until_due() {
    // GIVEN a job of 300 KiB (past the state machine's 256 KiB input) greylisted on its first
    // try: the policy waits 15 minutes plus jitter, past SQS's 900 s delay
    let greylisted = std::sync::atomic::AtomicUsize::new(0);
    let w = world_with(MemoryMailer::with(
        courier_core::ports::Provider::Smtp,
        Box::new(move |_| {
            if greylisted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                Err(SendFailure {
                    verdict: classify_smtp(
                        "450 4.2.0 <g@x>: Recipient address rejected: Greylisted",
                    ),
                    ambiguous: false,
                    source: None,
                })
            } else {
                Ok(Receipt::new("after-the-wait"))
            }
        }),
    ));
    let body = serde_json::json!({
        "version": 1, "message_id": "big-wait", "campaign_id": "c", "from": "shop@example.com",
        "to": ["g@example.org"], "content": {"subject": "Hi", "text": "x".repeat(300 * 1024)}
    })
    .to_string();
    let report = w.run(vec![rec("g", body)]).await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    // THEN no state machine is started: the copy goes on the queue for 900 s, marked due
    assert!(w.scheduler.waits.lock().unwrap().is_empty());
    let first = w.scheduler.queued.lock().unwrap().pop().expect("a hop");
    assert_eq!(first.delay_secs, 900);
    let hop = courier_core::envelope::parse_body(first.body.as_bytes()).unwrap();
    let due = hop.not_before.expect("marked due");
    assert!(due > t0() + chrono::Duration::seconds(900), "{due}");
    assert_eq!(w.status_of("big-wait"), Some(Status::Deferred));
    // Due when the last hop is, not the first.
    assert_eq!(w.copy_due_of("big-wait"), Some(due));
    // WHEN the hop comes back before it is due
    w.clock.advance(900);
    let report = w.run(vec![rec("g", first.body.clone())]).await;
    // THEN it goes back on the queue for what is left, unclaimed and unsent
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(report.metrics.counts.get("WaitHops"), Some(&1));
    let second = w
        .scheduler
        .queued
        .lock()
        .unwrap()
        .pop()
        .expect("another hop");
    assert_eq!(
        second.delay_secs,
        u64::try_from((due - w.clock.now()).num_seconds()).unwrap()
    );
    assert_eq!(second.body, first.body);
    assert_eq!(w.mailer.sent_count(), 1);
    // AND once due, it is sent
    w.clock.advance(second.delay_secs as i64);
    let report = w.run(vec![rec("g", second.body)]).await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.mailer.sent_count(), 2);
    assert_eq!(w.status_of("big-wait"), Some(Status::SentToProvider));
}

/// A record's recipients, each with its outcome.
fn roll_of(record: &courier_core::ports::JobRecord) -> Vec<(&str, RecipientStatus)> {
    record
        .recipients
        .iter()
        .map(|r| (r.address.as_str(), r.status))
        .collect()
}

#[tokio::test]
async fn only_the_suppressed_recipients_of_a_job_are_skipped() {
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    w.suppression
        .entries
        .lock()
        .unwrap()
        .insert("gone@example.org".into(), "bounce".into());
    let body = serde_json::json!({
        "version": 1, "message_id": "two", "campaign_id": "c", "from": "shop@example.com",
        "to": ["Gone@example.org", "here@example.org"], "content": {"subject": "Hi", "text": "Hello"}
    })
    .to_string();
    let report = w.run(vec![rec("t", body)]).await;
    assert!(report.failures.is_empty());
    let sent = w.mailer.sent.lock().unwrap();
    assert_eq!(sent.len(), 1);
    let to: Vec<String> = sent[0].to.iter().map(|m| m.email.to_string()).collect();
    assert_eq!(to, vec!["here@example.org".to_owned()]);
    assert_eq!(w.status_of("two"), Some(Status::SentToProvider));
    // The record lists both recipients: the one sent to, and the one left out.
    let record = w.status.records.lock().unwrap()["two"].clone();
    let roll = roll_of(&record);
    assert_eq!(
        roll,
        vec![
            ("gone@example.org", RecipientStatus::Suppressed),
            ("here@example.org", RecipientStatus::Sent)
        ]
    );
    assert_eq!(record.recipient_log.len(), 2);
    assert_eq!(record.recipients_version, 1);
}

#[tokio::test]
async fn a_recipient_the_relay_refuses_is_bounced_and_suppressed_and_the_others_are_sent() {
    // GIVEN a relay that takes the message but refuses one of its three recipients by name
    let w = world_with(MemoryMailer::with(
        courier_core::ports::Provider::Smtp,
        Box::new(|e| {
            let mut receipt = Receipt::new(format!("queued as {}", e.message_id));
            receipt.refused.push(courier_core::ports::Refusal {
                address: "gone@example.org".into(),
                verdict: courier_core::classify::classify_smtp(
                    "550 5.1.1 <gone@example.org>: Recipient address rejected: User unknown",
                ),
            });
            receipt.refused.push(courier_core::ports::Refusal {
                address: "policy@example.org".into(),
                verdict: courier_core::classify::classify_smtp(
                    "554 5.7.1 <policy@example.org>: Recipient address rejected: message rejected by policy",
                ),
            });
            Ok(receipt)
        }),
    ));
    let body = serde_json::json!({
        "version": 1, "message_id": "three", "campaign_id": "c", "from": "shop@example.com",
        "to": ["here@example.org"], "cc": ["Gone <gone@example.org>"], "bcc": ["policy@example.org"],
        "content": {"subject": "Hi", "text": "Hello"}
    })
    .to_string();
    // WHEN the job is sent
    let report = w.run(vec![rec("t", body)]).await;
    // THEN the job is sent, the refused recipients bounced with the relay's reply in their
    // timeline, and only the dead address (not the policy refusal) is suppressed
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.status_of("three"), Some(Status::SentToProvider));
    let record = w.status.records.lock().unwrap()["three"].clone();
    let roll = roll_of(&record);
    assert_eq!(
        roll,
        vec![
            ("here@example.org", RecipientStatus::Sent),
            ("gone@example.org", RecipientStatus::BouncedPermanent),
            ("policy@example.org", RecipientStatus::BouncedPermanent),
        ]
    );
    let details: Vec<&str> = record
        .recipient_log
        .iter()
        .map(|e| e.detail.as_deref().unwrap_or(""))
        .collect();
    assert_eq!(details[0], "accepted by smtp");
    assert!(
        details[1].starts_with("refused by smtp (") && details[1].contains("): 550 5.1.1 <gone"),
        "{details:?}"
    );
    assert!(details[2].contains("): 554 5.7.1 <policy"), "{details:?}");
    let now = w.clock.now();
    assert!(w.suppression.is_suppressed("gone@example.org", now));
    assert!(!w.suppression.is_suppressed("policy@example.org", now));
    assert!(!w.suppression.is_suppressed("here@example.org", now));
}

#[tokio::test]
async fn a_refused_recipient_that_cannot_be_suppressed_does_not_resend_the_message() {
    // GIVEN a relay that refuses one of two recipients, and a suppression list that fails
    let w = world_with(MemoryMailer::with(
        courier_core::ports::Provider::Smtp,
        Box::new(|_| {
            let mut receipt = Receipt::new("queued");
            receipt.refused.push(courier_core::ports::Refusal {
                address: "gone@example.org".into(),
                verdict: courier_core::classify::classify_smtp(
                    "550 5.1.1 <gone@example.org>: User unknown",
                ),
            });
            Ok(receipt)
        }),
    ));
    w.suppression.fail_writes.set(1);
    let body = serde_json::json!({
        "version": 1, "message_id": "two-r", "campaign_id": "c", "from": "shop@example.com",
        "to": ["here@example.org", "gone@example.org"], "content": {"subject": "Hi", "text": "Hello"}
    })
    .to_string();
    // WHEN it is sent
    let report = w.run(vec![rec("t", body)]).await;
    // THEN the acceptance stands (acknowledged, recorded sent, one provider call); the address
    // is suppressed by its next refusal
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.mailer.sent_count(), 1);
    assert_eq!(w.status_of("two-r"), Some(Status::SentToProvider));
    assert!(
        !w.suppression
            .is_suppressed("gone@example.org", w.clock.now())
    );
}

#[tokio::test]
async fn breaker_state_is_shared_between_instances_and_written_once_per_batch() {
    let failing = || smtp_failure("421 4.3.2 System not accepting network messages");
    let a = world_with(failing());
    let b = world_with(failing());
    // Both instances share one breaker store, as they share one DynamoDB item.
    let shared = Arc::new(MemoryBreakerStore::default());
    let with_store = |w: &World| with_breaker_store(w, shared.clone(), 2);
    let (pa, pb) = (with_store(&a), with_store(&b));
    let deadline = t0() + chrono::Duration::seconds(60);
    let records = (0..10)
        .map(|i| rec(&format!("a{i}"), job(&format!("a{i}"), "x@example.org")))
        .collect();
    pa.handle_records(records, deadline, "a").await;
    // Ten failures in one batch: one read and one write, and the circuit is open.
    assert_eq!(shared.saves.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(
        shared.states.lock().unwrap()["smtp"].mode,
        courier_core::breaker::Mode::Open
    );
    // Instance B has never failed itself, yet it does not send.
    let report = pb
        .handle_records(vec![rec("b", job("b1", "x@example.org"))], deadline, "b")
        .await;
    assert_eq!(b.mailer.sent_count(), 0);
    assert_eq!(report.metrics.counts.get("Retried_circuit_open"), Some(&1));
}

#[tokio::test]
async fn a_relay_refusing_one_recipient_does_not_open_the_providers_circuit() {
    // GIVEN a relay that answers `421` at RCPT TO, naming the recipient (Postfix's form)
    let refusing =
        smtp_failure("421 4.7.0 <busy@example.org>: Recipient address rejected: try again later");
    let w = world_with(refusing);
    let store = Arc::new(MemoryBreakerStore::default());
    let pipeline = with_breaker_store(&w, store.clone(), 2);
    let deadline = t0() + chrono::Duration::seconds(60);
    // WHEN ten jobs to that recipient fail in one batch
    let records = (0..10)
        .map(|i| rec(&format!("r{i}"), job(&format!("r{i}"), "busy@example.org")))
        .collect();
    let report = pipeline.handle_records(records, deadline, "a").await;
    // THEN each is retried as throttled, and the circuit stays closed: the relay answered
    assert_eq!(report.metrics.counts.get("Retried_throttled"), Some(&10));
    let mode = store.states.lock().unwrap().get("smtp").map(|s| s.mode);
    assert_ne!(mode, Some(courier_core::breaker::Mode::Open), "{mode:?}");
    // AND the same reply naming no recipient (the relay's own state) opens it
    let w = world_with(smtp_failure("421 4.7.0 try again later"));
    let store = Arc::new(MemoryBreakerStore::default());
    let pipeline = with_breaker_store(&w, store.clone(), 2);
    let records = (0..10)
        .map(|i| rec(&format!("s{i}"), job(&format!("s{i}"), "busy@example.org")))
        .collect();
    pipeline.handle_records(records, deadline, "a").await;
    assert_eq!(
        store.states.lock().unwrap()["smtp"].mode,
        courier_core::breaker::Mode::Open
    );
}

/// Breakers over an in-memory store (state cached for `cache`) after `n` admitted successes to
/// `ses` at `t0()`.
async fn breakers_after_successes(
    n: usize,
    cache: std::time::Duration,
) -> (Arc<MemoryBreakerStore>, breakers::Breakers) {
    let store = Arc::new(MemoryBreakerStore::default());
    let breakers = breakers::Breakers::new(store.clone(), BreakerConfig::default(), cache);
    for _ in 0..n {
        breakers.admit("ses", t0()).await;
        breakers.record("ses", false, t0()).await;
    }
    (store, breakers)
}

#[tokio::test]
async fn successes_while_closed_write_nothing() {
    let (store, breakers) = breakers_after_successes(100, std::time::Duration::from_secs(60)).await;
    breakers.flush(t0()).await;
    assert_eq!(store.saves.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert_eq!(store.loads.load(std::sync::atomic::Ordering::Relaxed), 1);
}

#[tokio::test]
async fn a_failed_probe_reopens_the_circuit_whatever_successes_were_counted_before_it() {
    // GIVEN an instance that counted successes while the circuit was closed (unwritten: no
    // failure among them), then the circuit opened elsewhere and is due for a probe
    let (store, breakers) = breakers_after_successes(5, std::time::Duration::ZERO).await;
    let mut open = courier_core::breaker::BreakerState::new(t0(), &BreakerConfig::default());
    open.mode = courier_core::breaker::Mode::Open;
    open.open_until = Some(t0() + chrono::Duration::seconds(30));
    open.version = 1;
    store.states.lock().unwrap().insert("ses".into(), open);
    // WHEN this instance's probe fails
    let later = t0() + chrono::Duration::seconds(31);
    assert_eq!(
        breakers.admit("ses", later).await,
        courier_core::breaker::Admission::Probe
    );
    breakers.record("ses", true, later).await;
    // THEN the circuit opens again: the earlier successes are not taken for the probe's
    let state = store.states.lock().unwrap()["ses"].clone();
    assert_eq!(state.mode, courier_core::breaker::Mode::Open, "{state:?}");
    assert_eq!(state.open_secs, 60, "{state:?}");
}

#[tokio::test]
async fn an_all_failed_batch_reports_every_record() {
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    w.status.fail_claims.set(3);
    let records = (0..3)
        .map(|i| rec(&format!("f{i}"), job(&format!("f{i}"), "x@example.org")))
        .collect();
    let report = w.run(records).await;
    let mut failures = report.failures.clone();
    failures.sort();
    assert_eq!(failures, vec!["f0", "f1", "f2"]);
    assert_eq!(report.response().batch_item_failures.len(), 3);
    assert_eq!(w.mailer.sent_count(), 0);
}

#[tokio::test]
async fn repeated_ambiguous_sends_are_bounded_by_the_policy() {
    let w = world_with(MemoryMailer::with(
        courier_core::ports::Provider::Ses,
        Box::new(|_| {
            Err(SendFailure {
                verdict: courier_core::classify::Verdict::local(
                    ErrorClass::Network,
                    "timeout",
                    "timed out after sending",
                ),
                ambiguous: true,
                source: None,
            })
        }),
    ));
    let mut body = job("amb-loop", "a@example.org");
    for round in 0..10 {
        let report = w.run(vec![rec("a", body.clone())]).await;
        assert!(report.failures.is_empty(), "round {round}");
        let next = w.scheduler.queued.lock().unwrap().pop();
        match next {
            Some(requeue) => {
                assert!(requeue.delay_secs >= 900, "waits out the grace window");
                assert_eq!(w.status_of("amb-loop"), Some(Status::Unknown));
                body = requeue.body;
                w.clock.advance(requeue.delay_secs as i64);
            }
            None => {
                // Network allows 5 retries: the sixth ambiguous failure is dead-lettered, with
                // the uncertainty in the reason.
                assert_eq!(round, 5);
                let letters = w.dead.letters.lock().unwrap();
                assert_eq!(letters.len(), 1);
                assert!(
                    letters[0].reason.contains("unknown"),
                    "{}",
                    letters[0].reason
                );
                assert_eq!(w.status_of("amb-loop"), Some(Status::DeadLettered));
                return;
            }
        }
    }
    panic!("ambiguous retries never ended");
}

/// The bad-input suite: hostile or broken jobs, each in a batch between two good ones. Every one
/// must end in its dead-letter category with its specific error, and the good ones must be sent.
#[tokio::test]
async fn hostile_and_broken_jobs_each_end_in_the_right_category() {
    use serde_json::json;
    let good = || json!({"version": 1, "message_id": "x", "campaign_id": "c", "from": "shop@example.com", "to": ["a@example.org"], "content": {"subject": "Hi", "text": "Hello"}});
    let with = |key: &str, value: serde_json::Value| {
        let mut j = good();
        j[key] = value;
        j.to_string()
    };
    let without = |key: &str| {
        let mut j = good();
        j.as_object_mut().unwrap().remove(key);
        j.to_string()
    };
    let content = |c: serde_json::Value| with("content", c);
    let header = |name: &str, value: &str| with("headers", json!({ name: value }));
    let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
    let mut nested = good();
    nested["template"] = json!({"id": "welcome", "variables": {"v": serde_json::from_str::<serde_json::Value>(&format!("{}1{}", "[".repeat(100), "]".repeat(100))).unwrap()}});
    nested.as_object_mut().unwrap().remove("content");
    let template = |id: &str, vars: serde_json::Value| {
        let mut j = good();
        j.as_object_mut().unwrap().remove("content");
        j["template"] = json!({"id": id, "variables": vars});
        j.to_string()
    };
    // (payload, category, error code in the dead letter's raw_code or rule)
    let cases: Vec<(String, &str, &str)> = vec![
        ("".into(), "invalid_job", "malformed_json"),
        ("   ".into(), "invalid_job", "malformed_json"),
        ("null".into(), "invalid_job", "not_an_object"),
        ("[]".into(), "invalid_job", "not_an_object"),
        ("42".into(), "invalid_job", "not_an_object"),
        ("\"a job\"".into(), "invalid_job", "not_an_object"),
        ("{".into(), "invalid_job", "malformed_json"),
        ("{}".into(), "invalid_job", "missing_version"),
        (deep, "invalid_job", "malformed_json"),
        ("\u{fffd}\u{fffd} binary garbage \u{1}\u{2}".into(), "invalid_job", "malformed_json"),
        (with("version", json!("1")), "invalid_job", "unknown_version"),
        (with("version", json!(2)), "invalid_job", "unknown_version"),
        (with("version", json!(1.5)), "invalid_job", "unknown_version"),
        (with("version", json!(-1)), "invalid_job", "unknown_version"),
        (json!({"version": 1}).to_string(), "invalid_job", "schema"),
        (with("message_id", json!(7)), "invalid_job", "schema"),
        (with("message_id", json!("")), "invalid_job", "empty_field"),
        (with("message_id", json!("x".repeat(300))), "invalid_job", "too_long"),
        (with("message_id", json!("x".repeat(10_000))), "invalid_job", "too_long"),
        (with("message_id", json!("a\nb")), "invalid_job", "header_injection"),
        (with("campaign_id", json!(null)), "invalid_job", "schema"),
        (with("trace_id", json!("t\u{0}")), "invalid_job", "header_injection"),
        (with("from", json!("")), "invalid_job", "invalid_address"),
        (with("from", json!("no at sign")), "invalid_job", "invalid_address"),
        (with("from", json!("a@b.com\r\nBcc: spy@evil.example")), "invalid_job", "header_injection"),
        (with("from", json!("<a@b.com")), "invalid_job", "invalid_address"),
        (with("to", json!("a@example.org")), "invalid_job", "schema"),
        (with("to", json!([])), "invalid_job", "no_recipients"),
        (with("to", json!([""])), "invalid_job", "invalid_address"),
        (with("to", json!(["a@@b.com"])), "invalid_job", "invalid_address"),
        (with("to", json!([42])), "invalid_job", "schema"),
        (with("to", json!(vec!["a@example.org"; 51])), "invalid_job", "too_many_recipients"),
        (with("cc", json!(["not valid"])), "invalid_job", "invalid_address"),
        (with("bcc", json!(["a@b.com\u{0}"])), "invalid_job", "header_injection"),
        (with("template", json!({"id": "welcome"})), "invalid_job", "template_xor_content"),
        (without("content"), "invalid_job", "template_xor_content"),
        (content(json!({})), "invalid_job", "schema"),
        (content(json!({"subject": "", "text": "x"})), "invalid_job", "empty_field"),
        (content(json!({"subject": "Hi\r\nBcc: spy@evil.example", "text": "x"})), "invalid_job", "header_injection"),
        (content(json!({"subject": "Hi"})), "invalid_job", "no_body"),
        (content(json!({"subject": "Hi", "text": "a\u{0}b"})), "invalid_job", "header_injection"),
        (content(json!({"subject": "Hi", "text": "x".repeat(600 * 1024)})), "invalid_job", "body_too_large"),
        (content(json!({"subject": "Hi", "text": "x", "script": "alert(1)"})), "invalid_job", "schema"),
        (template("", json!({})), "invalid_job", "empty_field"),
        (template("welcome", json!(["not", "an object"])), "invalid_job", "schema"),
        (template("welcome", json!({"name": "x".repeat(600 * 1024)})), "invalid_job", "body_too_large"),
        (header("Bcc", "spy@evil.example"), "invalid_job", "header_not_allowed"),
        (header("X-Mailer", "evil"), "invalid_job", "header_not_allowed"),
        (header("Reply-To", "nope"), "invalid_job", "invalid_address"),
        (header("List-Unsubscribe", "<https://x.example>\r\nBcc: spy@evil.example"), "invalid_job", "header_injection"),
        (header("References", &"x".repeat(2000)), "invalid_job", "too_long"),
        (with("priority", json!("urgent")), "invalid_job", "schema"),
        (with("provider", json!("pigeon")), "invalid_job", "schema"),
        (with("not_after", json!("tomorrow")), "invalid_job", "schema"),
        (with("surprise", json!(1)), "invalid_job", "schema"),
        (r#"{"courier_envelope": 1, "attempt": "x"}"#.into(), "invalid_job", "schema"),
        (json!({"courier_envelope": 1, "attempt": 1, "retry": {"spent": 0}, "job": {"version": 1}}).to_string(), "invalid_job", "schema"),
        (template("../secrets/key", json!({})), "invalid_job", "invalid_template_id"),
        (template("bomb", json!({})), "needs_review", "render"),
        // Unicode tricks: a bidi override in the subject, a zero-width space in a display
        // name, a look-alike (mixed-script) domain.
        (content(json!({"subject": "Invoice \u{202E}fdp.exe", "text": "x"})), "invalid_job", "deceptive_text"),
        (with("to", json!(["Ann\u{200B} <a@example.org>"])), "invalid_job", "deceptive_text"),
        (with("to", json!(["a@\u{430}pple.example"])), "invalid_job", "invalid_address"),
        // A forged retry envelope naming another job's generation is still parsed as a job:
        // an envelope whose job is broken is rejected like a job.
        (json!({"courier_envelope": 1, "attempt": 7, "retry": {}, "job": {"version": 1, "message_id": "x"}}).to_string(), "invalid_job", "schema"),
        (template("no-such-template", json!({})), "needs_review", "template-not-found"),
        (template("welcome", json!({})), "needs_review", "render"),
        (nested.to_string(), "needs_review", "render"),
    ];
    assert!(cases.len() >= 50, "{} cases", cases.len());
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    for (i, (payload, category, code)) in cases.iter().enumerate() {
        let mut a = good();
        a["message_id"] = json!(format!("good-a-{i}"));
        let mut b = good();
        b["message_id"] = json!(format!("good-b-{i}"));
        let before = w.dead.letters.lock().unwrap().len();
        let report = w
            .run(vec![
                rec("a", a.to_string()),
                rec(
                    "bad",
                    payload.replace(
                        "\"message_id\":\"x\"",
                        &format!("\"message_id\":\"hostile-{i}\""),
                    ),
                ),
                rec("b", b.to_string()),
            ])
            .await;
        assert!(report.failures.is_empty(), "case {i}: {:?}", report.reasons);
        assert_eq!(
            w.status_of(&format!("good-a-{i}")),
            Some(Status::SentToProvider),
            "case {i}"
        );
        assert_eq!(
            w.status_of(&format!("good-b-{i}")),
            Some(Status::SentToProvider),
            "case {i}"
        );
        let letters = w.dead.letters.lock().unwrap();
        assert_eq!(letters.len(), before + 1, "case {i}: one dead letter");
        let letter = letters.last().unwrap();
        assert_eq!(
            letter.category.as_str(),
            *category,
            "case {i}: {payload:.80}"
        );
        let code_seen = letter.raw_code.as_deref().unwrap_or("").to_owned() + " " + &letter.rule;
        assert!(
            code_seen.contains(code),
            "case {i}: expected {code}, got {code_seen:?} ({payload:.80})"
        );
        assert!(
            letter.raw_text.as_deref().is_some_and(|t| !t.is_empty()),
            "case {i}: a clear message"
        );
    }
    // Forged retry envelopes of one well-formed job (no seal, a seal of another key, a sealed
    // copy whose generation was raised): the first is taken as the job's first copy and sent
    // once; the others are duplicates of it; none is a later generation.
    let mut target = good();
    target["message_id"] = json!("forged");
    let forged = |attempt: u32, seal: Option<String>| {
        let mut e = json!({"courier_envelope": 1, "attempt": attempt, "retry": {"spent": 2}, "history": [], "job": target.clone()});
        if let Some(seal) = seal {
            e["seal"] = json!(seal);
        }
        e.to_string()
    };
    let other_key = courier_core::seal::SealKeys::new(&"k".repeat(40), &[]).unwrap();
    let sent_before = w.mailer.sent_count();
    let report = w
        .run(vec![
            rec("f1", forged(5, None)),
            rec("f2", courier_core::seal::seal(&forged(6, None), &other_key)),
        ])
        .await;
    let keys = w.pipeline.sealing.keys.keys().await.unwrap();
    let raised =
        courier_core::seal::seal(&forged(1, None), &keys).replace("\"attempt\":1", "\"attempt\":9");
    let again = w.run(vec![rec("f3", raised)]).await;
    assert_eq!(
        w.mailer.sent_count(),
        sent_before + 1,
        "sent once, as a first copy"
    );
    assert_eq!(report.metrics.counts.get("EnvelopesUnverified"), Some(&2));
    assert_eq!(again.metrics.counts.get("EnvelopesUnverified"), Some(&1));
    assert_eq!(w.status.records.lock().unwrap()["forged"].attempt, 0);
    // A valid but exotic job is sent: internationalised addresses (IDN domain, UTF-8 local part).
    let mut idn = good();
    idn["message_id"] = json!("idn");
    idn["to"] = json!(["用户@例子.广告", "josé@bücher.example"]);
    w.run(vec![rec("idn", idn.to_string())]).await;
    assert_eq!(w.status_of("idn"), Some(Status::SentToProvider));
}

/// The good side of the bad-input suite: jobs at each size limit AWS sets on their way, each in
/// a batch between two ordinary jobs; all are sent, their neighbours too.
///
/// - The job's own body limit, `MAX_BODY_BYTES` (512 KiB of subject, text and html), in
///   characters JSON writes as two bytes each (`"` and `\`): the job is then larger than an SQS
///   message (`SQS_MAX_BYTES`, 1 MiB), so a producer can only send it through the claim check
///   (the clients do, above their threshold). Sent through SES and through SMTP.
/// - The payload the claim keeps beside an SES job's record for a soft-bounce resend,
///   `MAX_KEPT_PAYLOAD` (300 KiB, under DynamoDB's 400 KB item): one byte under and at it are
///   kept on the record, one byte over in the payload bucket, the record holding a claim check
///   of it (and the job is sent all the same).
/// - A transient failure of the largest job: its retry copy is larger than a queue message may
///   be (`MAX_INLINE_BYTES`), so the retry scheduler stores it apart (`claim_check::stow`, as
///   `SqsRetryScheduler` does); the pointer comes back and the copy is sent.
/// - SES v2's 50 recipients (`MAX_RECIPIENTS`), each address 254 characters (RFC 5321's
///   longest path less its angle brackets: a 64-character local part, a 189-character domain);
///   ids of exactly `MAX_ID_LEN` characters.
///
/// Not reachable from a job's body: SES's 40 MB message (`MAX_MESSAGE_BYTES` in the adapter;
/// a valid body is at most 512 KiB, attachments have their own budget). Step Functions' 256 KiB
/// input: a copy over it that waits longer than 900 s hops through the queue instead
/// (`a_long_wait_too_large_for_the_state_machine_hops_through_the_queue_until_due`).
#[tokio::test]
async fn jobs_near_each_aws_size_limit_are_sent_and_their_neighbours_too() {
    use courier_core::claim_check::{ClaimCheck, MAX_INLINE_BYTES};
    use courier_core::envelope::{current_body, parse_body};
    use courier_core::job::{MAX_BODY_BYTES, MAX_ID_LEN, MAX_RECIPIENTS};
    use courier_core::limits::SQS_MAX_BYTES;
    use courier_core::ports::{PayloadStore, Provider};
    use serde_json::json;

    /// `near` (the job `near_id`, or a pointer to it) between two ordinary jobs: all three sent.
    async fn sandwiched(w: &World, tag: &str, near: String, near_id: &str) {
        let (before, after) = (format!("{tag}-before"), format!("{tag}-after"));
        let report = w
            .run(vec![
                rec("a", job(&before, "a@example.org")),
                rec("near", near),
                rec("b", job(&after, "b@example.org")),
            ])
            .await;
        assert!(report.failures.is_empty(), "{tag}: {:?}", report.reasons);
        for id in [before.as_str(), near_id, after.as_str()] {
            assert_eq!(w.status_of(id), Some(Status::SentToProvider), "{tag}: {id}");
        }
        assert!(w.dead.letters.lock().unwrap().is_empty(), "{tag}");
    }
    let job_with = |id: &str, content: serde_json::Value| {
        json!({
            "version": 1, "message_id": id, "campaign_id": "c", "from": "shop@example.com",
            "to": ["r@example.org"], "content": content
        })
        .to_string()
    };

    // The body limit, in two-byte characters: only the claim check can carry the job.
    let subject = "Hi";
    let escaped: String = "\"\\"
        .chars()
        .cycle()
        .take(MAX_BODY_BYTES - subject.len())
        .collect();
    let largest = |id: &str| job_with(id, json!({"subject": subject, "text": escaped}));
    let body = largest("largest");
    assert!(body.len() > SQS_MAX_BYTES, "{} bytes", body.len());
    let over = job_with(
        "over",
        json!({"subject": subject, "text": format!("{escaped}x")}),
    );
    let refused = parse_body(over.as_bytes()).map(|_| ()).unwrap_err();
    assert_eq!(refused.error.code(), "body_too_large", "the limit is exact");
    for (provider, tag) in [(Provider::Ses, "ses"), (Provider::Smtp, "smtp")] {
        let w = world_with(MemoryMailer::accepting(provider));
        let id = format!("largest-{tag}");
        let pointer = claim_checked(&w, &largest(&id)).await;
        sandwiched(&w, &id, pointer, &id).await;
        {
            let sent = w.mailer.sent.lock().unwrap();
            let email = sent.iter().find(|e| e.message_id == id).unwrap();
            assert_eq!(email.text.as_deref(), Some(escaped.as_str()), "{tag}");
        }
        // Too large to keep beside the record: kept in the payload bucket (SES), or nothing kept
        // (SMTP).
        let payload = w.status.records.lock().unwrap()[&id].payload.clone();
        match provider {
            Provider::Ses => {
                let kept = kept_apart(&w, payload.as_deref()).await;
                assert_eq!(kept.job.message_id, id);
                assert_eq!(
                    kept.job.content,
                    parse_body(largest(&id).as_bytes()).unwrap().job.content
                );
            }
            _ => assert_eq!(payload, None, "{tag}"),
        }
    }

    // The kept payload: one byte under the limit, at it, one byte over.
    let w = world_with(MemoryMailer::accepting(Provider::Ses));
    let kept_len = |body: &str| current_body(&parse_body(body.as_bytes()).unwrap()).len();
    let sized = |id: &str, kept: usize| {
        let with_text = |n: usize| job_with(id, json!({"subject": "Hi", "text": "x".repeat(n)}));
        let body = with_text(kept + 1 - kept_len(&with_text(1)));
        assert_eq!(kept_len(&body), kept, "{id}");
        body
    };
    for (id, kept, is_kept) in [
        ("kept-under", MAX_KEPT_PAYLOAD - 1, true),
        ("kept-at", MAX_KEPT_PAYLOAD, true),
        ("kept-over", MAX_KEPT_PAYLOAD + 1, false),
    ] {
        sandwiched(&w, id, sized(id, kept), id).await;
        let payload = w.status.records.lock().unwrap()[id].payload.clone();
        if is_kept {
            assert_eq!(payload.map(|p| p.len()), Some(kept), "{id}");
        } else {
            let apart = kept_apart(&w, payload.as_deref()).await;
            assert_eq!(current_body(&apart).len(), kept, "{id}");
        }
    }

    // A transient failure of the largest job: its retry copy goes through the claim check.
    let failed = std::sync::atomic::AtomicBool::new(false);
    let w = world_with(MemoryMailer::with(
        Provider::Ses,
        Box::new(move |e| {
            if e.message_id == "largest-retried"
                && !failed.swap(true, std::sync::atomic::Ordering::SeqCst)
            {
                return Err(SendFailure {
                    verdict: Verdict::local(
                        ErrorClass::Network,
                        "connection-reset",
                        "connection reset by peer",
                    ),
                    ambiguous: false,
                    source: None,
                });
            }
            Ok(Receipt::new(format!("mem-{}", e.message_id)))
        }),
    ));
    let pointer = claim_checked(&w, &largest("largest-retried")).await;
    let report = w
        .run(vec![
            rec("a", job("retried-before", "a@example.org")),
            rec("near", pointer),
            rec("b", job("retried-after", "b@example.org")),
        ])
        .await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    for id in ["retried-before", "retried-after"] {
        assert_eq!(w.status_of(id), Some(Status::SentToProvider), "{id}");
    }
    assert_eq!(w.status_of("largest-retried"), Some(Status::Deferred));
    assert!(
        w.scheduler.waits.lock().unwrap().is_empty(),
        "the queue's delay"
    );
    let copy = w
        .scheduler
        .queued
        .lock()
        .unwrap()
        .pop()
        .expect("a retry copy");
    assert!(copy.delay_secs <= 900, "{}", copy.delay_secs);
    assert!(
        copy.body.len() > MAX_INLINE_BYTES,
        "{} bytes",
        copy.body.len()
    );
    let store: &dyn PayloadStore = &*w.payloads;
    let pointer = courier_core::claim_check::stow(Some(store), &copy.body)
        .await
        .unwrap()
        .into_owned();
    assert!(
        ClaimCheck::parse(&pointer).is_some() && pointer.len() < 1_024,
        "{pointer}"
    );
    w.clock.advance(copy.delay_secs as i64);
    sandwiched(&w, "retried-again", pointer, "largest-retried").await;
    let record = w.status.records.lock().unwrap()["largest-retried"].clone();
    assert_eq!(record.attempt, 1);
    assert_eq!(w.mailer.sent_count(), 6, "two tries of it, four neighbours");

    // The job-level limits, exactly: 50 recipients of the longest address, ids of MAX_ID_LEN.
    let w = world_with(MemoryMailer::accepting(Provider::Ses));
    let domain = format!(
        "{}.{}.{}.example",
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(53)
    );
    let longest: Vec<String> = (0..MAX_RECIPIENTS)
        .map(|i| format!("r{i:063}@{domain}"))
        .collect();
    assert!(longest.iter().all(|a| a.len() == 254), "{}", longest[0]);
    let parsed = |body: String| serde_json::from_str::<serde_json::Value>(&body).unwrap();
    let mut all_to = parsed(job("longest-to", "x@example.org"));
    all_to["to"] = json!(longest);
    let mut spread = parsed(job("longest-spread", "x@example.org"));
    spread["to"] = json!(longest[..MAX_RECIPIENTS - 2]);
    spread["cc"] = json!([longest[MAX_RECIPIENTS - 2]]);
    spread["bcc"] = json!([longest[MAX_RECIPIENTS - 1]]);
    let long_id = "i".repeat(MAX_ID_LEN);
    let mut ids = parsed(job(&long_id, "x@example.org"));
    ids["campaign_id"] = json!("é".repeat(MAX_ID_LEN));
    for (near, id) in [
        (all_to, "longest-to"),
        (spread, "longest-spread"),
        (ids, long_id.as_str()),
    ] {
        sandwiched(&w, &id[..id.len().min(16)], near.to_string(), id).await;
    }
    let sent = w.mailer.sent.lock().unwrap();
    for id in ["longest-to", "longest-spread"] {
        let email = sent.iter().find(|e| e.message_id == id).unwrap();
        assert_eq!(
            email.to.len() + email.cc.len() + email.bcc.len(),
            MAX_RECIPIENTS,
            "{id}"
        );
    }
    // One more of each is refused (the bad-input suite above dead-letters them in a batch).
    let refusal = |body: &serde_json::Value| {
        parse_body(body.to_string().as_bytes())
            .map(|_| ())
            .unwrap_err()
            .error
            .code()
    };
    let mut over = parsed(job(&format!("{long_id}i"), "x@example.org"));
    assert_eq!(refusal(&over), "too_long");
    over["message_id"] = json!("m");
    over["to"] = json!(longest);
    over["cc"] = json!(["one-more@example.org"]);
    assert_eq!(refusal(&over), "too_many_recipients");
}

/// The body a record keeps apart (over `MAX_KEPT_PAYLOAD`): the record holds a claim check of
/// it, and the payload bucket the body.
async fn kept_apart(w: &World, payload: Option<&str>) -> courier_core::envelope::Incoming {
    let payload = payload.expect("a kept payload");
    let check = courier_core::claim_check::ClaimCheck::parse(payload).expect("a claim check");
    assert!(check.bytes > MAX_KEPT_PAYLOAD, "{} bytes", check.bytes);
    let store: &dyn courier_core::ports::PayloadStore = &*w.payloads;
    let body = courier_core::claim_check::redeem(Some(store), payload)
        .await
        .unwrap();
    courier_core::envelope::parse_body(body.as_bytes()).unwrap()
}

#[tokio::test]
async fn a_sent_job_keeps_its_history_and_for_ses_its_payload() {
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let report = w.run(vec![rec("a", job("m1", "ann@example.org"))]).await;
    assert_eq!(report.metrics.counts["Outcomes"], 1);
    let record = w.status.records.lock().unwrap()["m1"].clone();
    let steps: Vec<Status> = record.history.iter().map(|h| h.status).collect();
    assert_eq!(steps, vec![Status::Processing, Status::SentToProvider]);
    assert_eq!(record.history[1].detail.as_deref(), Some("accepted by ses"));
    let kept = courier_core::envelope::parse_body(record.payload.unwrap().as_bytes()).unwrap();
    assert_eq!(kept.attempt, 0);
    assert_eq!(kept.job.message_id, "m1");
    // Too big to keep beside the record: sent, recorded, kept in the payload bucket.
    let w2 = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let big = serde_json::json!({
        "version": 1, "message_id": "big", "campaign_id": "c", "from": "shop@example.com",
        "to": ["ann@example.org"], "content": {"subject": "Hi", "text": "x".repeat(MAX_KEPT_PAYLOAD)}
    })
    .to_string();
    let report = w2.run(vec![rec("a", big.clone())]).await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w2.status_of("big"), Some(Status::SentToProvider));
    let payload = w2.status.records.lock().unwrap()["big"].payload.clone();
    let kept = kept_apart(&w2, payload.as_deref()).await;
    assert_eq!((kept.job.message_id.as_str(), kept.attempt), ("big", 0));
    // The payload bucket failing: nothing claimed or sent, the copy redelivered; the next
    // delivery keeps it and sends.
    let w3 = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let big3 = big.replace("\"big\"", "\"big3\"");
    w3.payloads.fail_puts.set(1);
    let report = w3.run(vec![rec("a", big3.clone())]).await;
    assert_eq!(report.failures, vec!["a".to_owned()]);
    assert_eq!(w3.status_of("big3"), None);
    assert!(w3.mailer.sent.lock().unwrap().is_empty());
    let report = w3.run(vec![rec("a", big3)]).await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w3.status_of("big3"), Some(Status::SentToProvider));
    assert_eq!(w3.mailer.sent.lock().unwrap().len(), 1);
    // SMTP reports no outcomes, so nothing is kept for a resend.
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Smtp));
    w.run(vec![rec("a", job("m2", "ann@example.org"))]).await;
    assert_eq!(w.status.records.lock().unwrap()["m2"].payload, None);
}

#[tokio::test]
async fn a_domain_paused_by_the_reputation_guard_is_not_sent_through_ses() {
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let store = Arc::new(MemoryBreakerStore::default());
    let mut paused = courier_core::breaker::BreakerState::new(t0(), &BreakerConfig::default());
    paused.mode = courier_core::breaker::Mode::Open;
    paused.open_until = Some(t0() + chrono::Duration::hours(1));
    paused.version = 1;
    store
        .states
        .lock()
        .unwrap()
        .insert(courier_core::reputation::pause_key("example.com"), paused);
    let pipeline = with_breaker_store(&w, store, 5);
    let other_domain = serde_json::json!({
        "version": 1, "message_id": "m2", "campaign_id": "c", "from": "news@other.example",
        "to": ["bob@example.org"], "content": {"subject": "Hi", "text": "Hello"}
    })
    .to_string();
    let report = pipeline
        .handle_records(
            vec![
                rec("a", job("m1", "ann@example.org")),
                rec("b", other_domain),
            ],
            t0() + chrono::Duration::seconds(60),
            "req-1",
        )
        .await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    // The paused domain waits (a circuit-open retry that spends no attempt); the other is sent.
    assert_eq!(w.mailer.sent_count(), 1);
    assert_eq!(w.status_of("m1"), Some(Status::Deferred));
    assert_eq!(w.status_of("m2"), Some(Status::SentToProvider));
    assert_eq!(report.metrics.counts["Retried_circuit_open"], 1);
    let waits: Vec<Requeue> = w
        .scheduler
        .queued
        .lock()
        .unwrap()
        .iter()
        .chain(w.scheduler.waits.lock().unwrap().iter())
        .cloned()
        .collect();
    assert_eq!(waits.len(), 1);
    assert_eq!(waits[0].message_id, "m1");
}

#[tokio::test]
async fn a_new_error_code_that_classifies_as_unknown_is_counted_once() {
    let w = world_with(smtp_failure("599 9.9.9 the flux capacitor is misaligned"));
    let verdict = classify_smtp("599 9.9.9 the flux capacitor is misaligned");
    assert_eq!(verdict.class, ErrorClass::Unknown, "{verdict:?}");
    let first = w
        .run(vec![
            rec("a", job("m1", "ann@example.org")),
            rec("b", job("m2", "bob@example.org")),
        ])
        .await;
    assert_eq!(first.metrics.counts.get("NewUnknownErrorCode"), Some(&1));
    assert_eq!(first.metrics.counts.get("Failures_unknown"), Some(&2));
    let second = w.run(vec![rec("c", job("m3", "cy@example.org"))]).await;
    assert_eq!(second.metrics.counts.get("NewUnknownErrorCode"), None);
}

/// A governor limiting `ses` to 10 calls/s (horizon 5 s, not the default 1 s, so a slot can be
/// later than a lease allows; chunks of 10) on `schedule`, whose next free slot is `booked_from`
/// (None: unused).
fn ses_governor(
    schedule: &Arc<MemorySendSchedule>,
    booked_from: Option<DateTime<Utc>>,
) -> crate::governor::Governor {
    if let Some(t) = booked_from {
        schedule
            .tats
            .lock()
            .unwrap()
            .insert("ses".into(), t.timestamp_micros());
    }
    crate::governor::Governor::new(
        schedule.clone(),
        std::collections::BTreeMap::from([(
            "ses".to_owned(),
            courier_core::rate::RateLimit {
                per_sec: 10.0,
                max_ahead: std::time::Duration::from_secs(5),
                chunk: 10,
            },
        )]),
    )
}

#[tokio::test]
async fn a_send_waits_for_its_slot_in_the_shared_schedule() {
    // GIVEN a schedule whose next free slot is 150 ms away
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let schedule = Arc::new(MemorySendSchedule::default());
    let booked = t0() + chrono::Duration::milliseconds(150);
    let pipeline = with_governor(&w, ses_governor(&schedule, Some(booked)));
    // THEN a job goes out after waiting for the slot, and only the one slot a one-record batch
    // needs is booked
    sent_in_the_slot_booked_from(&w, &pipeline, &schedule, booked).await;
}

/// Sends one job through `pipeline` (a `ses_governor` on `schedule`, booked from `booked`) and
/// checks that it went out after waiting for its slot and booked only that one (10 calls/s:
/// 100 ms).
async fn sent_in_the_slot_booked_from(
    w: &World,
    pipeline: &Arc<Pipeline>,
    schedule: &MemorySendSchedule,
    booked: DateTime<Utc>,
) {
    let started = std::time::Instant::now();
    let report = pipeline
        .handle_records(
            vec![rec("a", job("slot", "a@example.org"))],
            t0() + chrono::Duration::seconds(60),
            "req",
        )
        .await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.mailer.sent_count(), 1);
    assert!(started.elapsed() >= std::time::Duration::from_millis(150));
    assert_eq!(
        schedule.tats.lock().unwrap()["ses"],
        (booked + chrono::Duration::milliseconds(100)).timestamp_micros()
    );
}

/// A breaker store whose `ses` circuit is open and due for its half-open probe.
fn due_for_a_probe() -> Arc<MemoryBreakerStore> {
    let store = Arc::new(MemoryBreakerStore::default());
    let mut open = courier_core::breaker::BreakerState::new(t0(), &BreakerConfig::default());
    open.mode = courier_core::breaker::Mode::Open;
    open.open_until = Some(t0() - chrono::Duration::seconds(1));
    open.version = 1;
    store.states.lock().unwrap().insert("ses".into(), open);
    store
}

#[tokio::test]
async fn a_half_open_probe_takes_its_slot_in_the_shared_schedule() {
    // GIVEN the circuit due for a probe and a schedule whose next free slot is 150 ms away
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let schedule = Arc::new(MemorySendSchedule::default());
    let booked = t0() + chrono::Duration::milliseconds(150);
    let pipeline = rebuilt(
        &w,
        due_for_a_probe(),
        3,
        ses_governor(&schedule, Some(booked)),
        None,
        None,
    );
    // THEN the probe waits for its slot and books it: the calls after it keep the quota
    sent_in_the_slot_booked_from(&w, &pipeline, &schedule, booked).await;
}

#[tokio::test]
async fn a_half_open_probe_goes_even_when_the_schedule_is_booked_out_or_unreadable() {
    for unreadable in [false, true] {
        // GIVEN the circuit due for a probe and a schedule booked 30 s ahead, or failing
        let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
        let schedule = Arc::new(MemorySendSchedule::default());
        let governor = ses_governor(&schedule, Some(t0() + chrono::Duration::seconds(30)));
        if unreadable {
            schedule.fail.set(1);
        }
        let pipeline = rebuilt(&w, due_for_a_probe(), 3, governor, None, None);
        let report = pipeline
            .handle_records(
                vec![rec("a", job("probe", "a@example.org"))],
                t0() + chrono::Duration::seconds(60),
                "req",
            )
            .await;
        // THEN the probe is not held back (its result closes or reopens the circuit)
        assert!(
            report.failures.is_empty(),
            "{unreadable}: {:?}",
            report.reasons
        );
        assert_eq!(w.mailer.sent_count(), 1, "{unreadable}");
        assert_eq!(w.status_of("probe"), Some(Status::SentToProvider));
    }
}

#[tokio::test]
async fn a_booked_out_schedule_defers_the_job_without_a_call_or_an_attempt() {
    // GIVEN a schedule booked 30 s ahead (past the 5 s horizon)
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let schedule = Arc::new(MemorySendSchedule::default());
    let pipeline = with_governor(
        &w,
        ses_governor(&schedule, Some(t0() + chrono::Duration::seconds(30))),
    );
    let report = pipeline
        .handle_records(
            vec![rec("a", job("later", "a@example.org"))],
            t0() + chrono::Duration::seconds(60),
            "req",
        )
        .await;
    // THEN nothing was sent; the job waits in the queue like one behind an open circuit
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.mailer.sent_count(), 0);
    assert_eq!(report.metrics.counts.get("Retried_rate_limited"), Some(&1));
    let queued = w.scheduler.queued.lock().unwrap();
    let copy = courier_core::envelope::parse_body(queued.last().unwrap().body.as_bytes()).unwrap();
    assert_eq!(copy.retry.spent, 0);
    let record = w.status.records.lock().unwrap()["later"].clone();
    let last = record.history.last().unwrap();
    assert!(
        last.detail.as_deref().unwrap_or("").contains("send-rate"),
        "{last:?}"
    );
    // AND nothing was booked for it
    assert_eq!(
        schedule.tats.lock().unwrap()["ses"],
        (t0() + chrono::Duration::seconds(30)).timestamp_micros()
    );
}

#[tokio::test]
async fn a_slot_later_than_the_lease_allows_defers_the_job() {
    // GIVEN a slot 4 s away (within the horizon) but an invocation with 8 s left and a 5 s
    // lease margin
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let schedule = Arc::new(MemorySendSchedule::default());
    let pipeline = with_governor(
        &w,
        ses_governor(&schedule, Some(t0() + chrono::Duration::seconds(4))),
    );
    let report = pipeline
        .handle_records(
            vec![rec("a", job("tight", "a@example.org"))],
            t0() + chrono::Duration::seconds(8),
            "req",
        )
        .await;
    // THEN it does not sleep past its lease: deferred, not sent
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.mailer.sent_count(), 0);
    assert_eq!(report.metrics.counts.get("Retried_rate_limited"), Some(&1));
    // AND it was the lease, not a refused booking: the slot was booked (the schedule moved on)
    assert!(
        schedule.tats.lock().unwrap()["ses"]
            > (t0() + chrono::Duration::seconds(4)).timestamp_micros()
    );
}

#[tokio::test]
async fn an_unreachable_schedule_leaves_the_record_for_redelivery_and_releases_it() {
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let schedule = Arc::new(MemorySendSchedule::default());
    schedule.fail.set(1);
    let pipeline = with_governor(&w, ses_governor(&schedule, None));
    let report = pipeline
        .handle_records(
            vec![rec("a", job("nosched", "a@example.org"))],
            t0() + chrono::Duration::seconds(60),
            "req",
        )
        .await;
    assert_eq!(report.failures, vec!["a".to_owned()]);
    assert!(
        report.reasons[0].contains("send schedule"),
        "{:?}",
        report.reasons
    );
    assert_eq!(w.mailer.sent_count(), 0);
    assert_eq!(w.status_of("nosched"), Some(Status::Deferred));
}

#[tokio::test]
async fn after_a_refused_booking_the_next_jobs_wait_unclaimed_without_asking_again() {
    // GIVEN a schedule booked 30 s ahead: the first job's booking is refused (after its claim)
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let schedule = Arc::new(MemorySendSchedule::default());
    let pipeline = with_governor(
        &w,
        ses_governor(&schedule, Some(t0() + chrono::Duration::seconds(30))),
    );
    let deadline = t0() + chrono::Duration::seconds(60);
    pipeline
        .handle_records(
            vec![rec("a", job("first", "a@example.org"))],
            deadline,
            "r1",
        )
        .await;
    assert_eq!(w.status_of("first"), Some(Status::Deferred));
    // WHEN more jobs come while the schedule is still booked (and unreachable, to be sure it is
    // not asked)
    schedule.fail.set(100);
    let report = pipeline
        .handle_records(
            vec![
                rec("b", job("second", "b@example.org")),
                rec("c", job("third", "c@example.org")),
            ],
            deadline,
            "r2",
        )
        .await;
    // THEN they wait as rate_limited without a claim, a status write or a provider call
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(report.metrics.counts.get("Retried_rate_limited"), Some(&2));
    assert_eq!(w.status_of("second"), None);
    assert_eq!(w.status_of("third"), None);
    assert_eq!(w.mailer.sent_count(), 0);
    let queued = w.scheduler.queued.lock().unwrap();
    for copy in queued.iter().skip(1) {
        let copy = courier_core::envelope::parse_body(copy.body.as_bytes()).unwrap();
        assert_eq!(copy.attempt, 0, "same generation");
        assert_eq!(copy.retry.streak, Some((ErrorClass::RateLimited, 1)));
        assert_eq!(copy.retry.spent, 0);
    }
}

#[tokio::test]
async fn no_log_line_names_a_recipient_in_clear() {
    let (captured, _guard) = courier_devkit::logs::Captured::start();
    // An invalid job whose error quotes the address, and a reply that names the recipient in a
    // code never seen before (both logged as warnings).
    let w = world_with(smtp_failure(
        "599 9.9.9 <ann@example.org>: the flux capacitor refused ann@example.org",
    ));
    let mut invalid: serde_json::Value = serde_json::from_str(&job("m0", "x@example.org")).unwrap();
    invalid["to"] = serde_json::json!(["Ann <ann@@example.org>"]);
    w.run(vec![
        rec("a", invalid.to_string()),
        rec("b", job("m1", "ann@example.org")),
    ])
    .await;
    let logs = captured.text();
    assert!(logs.contains("invalid job"), "{logs}");
    assert!(
        logs.contains("a new error code classified as unknown"),
        "{logs}"
    );
    assert!(logs.contains("<addr:"), "addresses are hashed: {logs}");
    assert!(
        !logs.contains("ann@example.org") && !logs.contains("ann@@example.org"),
        "{logs}"
    );
    // The dead letters keep the raw text, behind IAM.
    let letters = w.dead.letters.lock().unwrap();
    assert!(letters.iter().any(|l| {
        l.reason.contains("ann@@example.org")
            || l.raw_text
                .as_deref()
                .is_some_and(|t| t.contains("ann@example.org"))
    }));
}

/// A template store whose bug quotes the recipient in its panic.
struct RecipientQuotingTemplates;

#[async_trait::async_trait]
impl courier_core::ports::TemplateStore for RecipientQuotingTemplates {
    async fn get(&self, _id: &str) -> Result<Template, courier_core::ports::TemplateError> {
        panic!("template store bug while rendering for ann@example.org");
    }
}

/// A panic's message can quote a recipient: the log lines it reaches (the poison warning
/// before any provider call, the redelivery warning after one) and the batch report's reasons
/// show it redacted; the poison letter keeps it whole, behind IAM.
#[tokio::test]
async fn a_panic_that_quotes_a_recipient_is_logged_redacted() {
    let (captured, _guard) = courier_devkit::logs::Captured::start();
    // After the provider call: left for redelivery.
    let w = world_with(MemoryMailer::with(
        courier_core::ports::Provider::Ses,
        Box::new(|_| panic!("adapter bug after sending to ann@example.org")),
    ));
    let report = w
        .run(vec![rec("a", job("maybe-sent", "ann@example.org"))])
        .await;
    assert_eq!(report.failures, vec!["a".to_owned()]);
    assert!(
        report.reasons[0].contains("after calling the provider")
            && report.reasons[0].contains("<addr:")
            && !report.reasons[0].contains("ann@example.org"),
        "{:?}",
        report.reasons
    );
    // Before it: poison.
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let mut pipeline = rebuilt(
        &w,
        Arc::new(MemoryBreakerStore::default()),
        1,
        unlimited(),
        None,
        None,
    );
    Arc::get_mut(&mut pipeline).unwrap().templates = Arc::new(RecipientQuotingTemplates);
    let templated = serde_json::json!({
        "version": 1, "message_id": "crash", "campaign_id": "c", "from": "shop@example.com",
        "to": ["ann@example.org"], "template": {"id": "welcome", "variables": {}}
    })
    .to_string();
    let deadline = w.clock.now() + chrono::Duration::seconds(60);
    let report = pipeline
        .handle_records(vec![rec("b", templated)], deadline, "req-1")
        .await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    let logs = captured.text();
    assert!(logs.contains("the job crashed the worker"), "{logs}");
    assert!(logs.contains("record left for redelivery"), "{logs}");
    assert!(logs.contains("<addr:"), "addresses are hashed: {logs}");
    assert!(!logs.contains("ann@example.org"), "{logs}");
    let letters = w.dead.letters.lock().unwrap();
    assert_eq!(letters.len(), 1);
    assert!(
        letters[0].reason.contains("ann@example.org"),
        "{}",
        letters[0].reason
    );
}
