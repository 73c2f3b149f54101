//! The events function on in-memory ports, with fixtures in the shapes AWS delivers.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use courier_core::policy::RetryPolicy;
use courier_core::ports::{JobRecord, Requeue};
use courier_core::random::SeededRandom;
use courier_core::reputation::GuardConfig;
use courier_devkit::memory::*;

use super::*;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/fixtures/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

struct World {
    applier: Applier,
    status: Arc<MemoryStatusStore>,
    suppression: Arc<MemorySuppressionList>,
    scheduler: Arc<MemoryScheduler>,
    dead: Arc<MemoryDeadLetters>,
    breakers: Arc<MemoryBreakerStore>,
    reputation: Arc<MemoryReputationStore>,
    ledger: Arc<MemoryEventLedger>,
    payloads: Arc<MemoryPayloads>,
}

/// A job as the send function keeps it with a sent record (generation 0, as an envelope).
fn kept_payload(not_after: Option<&str>) -> String {
    let mut job = serde_json::json!({
        "version": 1, "message_id": "order-4711", "campaign_id": "receipts",
        "from": "shop@example.com", "to": ["ann@example.org"],
        "content": {"subject": "Your receipt", "text": "Thanks"}
    });
    if let Some(t) = not_after {
        job["not_after"] = t.into();
    }
    serde_json::json!({
        "courier_envelope": 1, "attempt": 0,
        "retry": courier_core::policy::RetryState::default(), "history": [], "job": job
    })
    .to_string()
}

fn world(status_now: Option<Status>) -> World {
    let status = Arc::new(MemoryStatusStore::default());
    if let Some(s) = status_now {
        status.records.lock().unwrap().insert(
            "order-4711".into(),
            JobRecord {
                message_id: "order-4711".into(),
                status: s,
                attempt: 0,
                lease_owner: None,
                lease_until: None,
                unknown_since: None,
                provider: Some("ses".into()),
                provider_message_id: None,
                ..JobRecord::new("order-4711", s, 0, t0())
            },
        );
    }
    let suppression = Arc::new(MemorySuppressionList::default());
    let scheduler = Arc::new(MemoryScheduler::default());
    let dead = Arc::new(MemoryDeadLetters::default());
    let breakers = Arc::new(MemoryBreakerStore::default());
    let reputation = Arc::new(MemoryReputationStore::default());
    let ledger = Arc::new(MemoryEventLedger::default());
    let payloads = Arc::new(MemoryPayloads::default());
    let applier = Applier {
        status: status.clone(),
        suppression: suppression.clone(),
        soft_suppression: chrono::Duration::days(14),
        clock: Arc::new(ManualClock::new(t0())),
        resender: Resender {
            live: None,
            live_policy: Default::default(),
            policy: RetryPolicy::default(),
            scheduler: scheduler.clone(),
            dead_letters: dead.clone(),
            payloads: payloads.clone(),
            rng: std::sync::Mutex::new(SeededRandom::new(3)),
        },
        guard: Guard {
            store: reputation.clone(),
            ledger: ledger.clone(),
            breakers: breakers.clone(),
            config: GuardConfig {
                min_volume: 100,
                ..GuardConfig::default()
            },
        },
        gate: Arc::new(Gate::new(Admission::Any, Arc::new(NoCertificates))),
        outcomes: None,
    };
    World {
        applier,
        status,
        suppression,
        scheduler,
        dead,
        breakers,
        reputation,
        ledger,
        payloads,
    }
}

impl World {
    /// Changes the job's record in place.
    fn edit(&self, change: impl FnOnce(&mut JobRecord)) {
        change(
            self.status
                .records
                .lock()
                .unwrap()
                .get_mut("order-4711")
                .unwrap(),
        );
    }

    fn keep_payload(&self, payload: String) {
        self.edit(|rec| rec.payload = Some(payload));
    }

    fn record(&self) -> JobRecord {
        self.status.records.lock().unwrap()["order-4711"].clone()
    }

    /// Whether Ann (the fixtures' recipient) is on the suppression list.
    fn ann_suppressed(&self) -> bool {
        self.suppression
            .entries
            .lock()
            .unwrap()
            .contains_key("ann@example.org")
    }

    fn scheduled(&self) -> Vec<Requeue> {
        let mut all = self.scheduler.queued.lock().unwrap().clone();
        all.extend(self.scheduler.waits.lock().unwrap().iter().cloned());
        all
    }

    fn status(&self) -> Option<Status> {
        self.status
            .records
            .lock()
            .unwrap()
            .get("order-4711")
            .map(|r| r.status)
    }
}

fn sqs(bodies: &[String]) -> SqsEvent {
    let records: Vec<Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| serde_json::json!({"messageId": format!("sqs-{i}"), "receiptHandle": "r", "body": b, "attributes": {}, "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs", "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:events", "awsRegion": "us-east-1"}))
        .collect();
    serde_json::from_value(serde_json::json!({ "Records": records })).unwrap()
}

/// Every event type's fixture in SES's own shape (`sns-*` and `eventbridge-*` wrap each).
const RAW_FIXTURES: [&str; 10] = [
    "send",
    "delivery",
    "bounce-permanent",
    "bounce-transient",
    "bounce-undetermined",
    "complaint",
    "delivery-delay",
    "reject",
    "rendering-failure",
    "open",
];

#[test]
fn every_fixture_parses_with_its_correlation() {
    for name in RAW_FIXTURES
        .iter()
        .copied()
        .chain(["sns-bounce-permanent", "eventbridge-delivery"])
    {
        let e = parse(&fixture(name)).unwrap_or_else(|err| panic!("{name}: {err}"));
        assert_eq!(e.message_id.as_deref(), Some("order-4711"), "{name}");
        assert!(e.provider_message_id.is_some(), "{name}");
        assert_eq!(e.recipients, vec!["ann@example.org".to_owned()], "{name}");
    }
    assert!(matches!(
        parse(&fixture("sns-bounce-permanent")).unwrap().kind,
        EventKind::Failure(SesFailureEvent::Bounce { .. })
    ));
    assert_eq!(
        parse(&fixture("eventbridge-delivery")).unwrap().kind,
        EventKind::Delivery
    );
}

#[test]
fn the_tag_is_the_fallback_correlation_and_bad_input_is_a_parse_error() {
    let mut v: Value = serde_json::from_str(&fixture("delivery")).unwrap();
    v["mail"]["headers"] = serde_json::json!([]);
    assert_eq!(
        parse(&v.to_string()).unwrap().message_id.as_deref(),
        Some("order-4711")
    );
    v["mail"]["tags"] = serde_json::json!({});
    assert_eq!(parse(&v.to_string()).unwrap().message_id, None);
    assert!(matches!(parse("not json"), Err(ParseError::Json(_))));
    assert!(matches!(parse("{}"), Err(ParseError::Shape(_))));
    assert!(matches!(
        parse(r#"{"eventType": "Bounce", "mail": {}}"#),
        Err(ParseError::Shape(_))
    ));
    assert!(matches!(
        parse(r#"{"eventType": "Teleport", "mail": {}}"#),
        Err(ParseError::Shape(_))
    ));
    assert!(matches!(
        parse(r#"{"Type": "Notification", "Message": "{"}"#),
        Err(ParseError::Json(_))
    ));
}

#[tokio::test]
async fn the_jobs_trace_comes_back_with_its_event_and_names_every_log_line() {
    const ROOT: &str = "1-5759e988-bd862e3fe1be46a994272793";
    let mut v: Value = serde_json::from_str(&fixture("delivery")).unwrap();
    assert_eq!(parse(&v.to_string()).unwrap().trace_id, None);
    // The tag (SES's form of it) when the headers do not say.
    v["mail"]["tags"]["courier-trace-id"] = serde_json::json!([ROOT]);
    assert_eq!(
        parse(&v.to_string()).unwrap().trace_id.as_deref(),
        Some(ROOT)
    );
    // The header, exact, first.
    v["mail"]["headers"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "X-Courier-Trace-Id", "value": "order 4711"}));
    assert_eq!(
        parse(&v.to_string()).unwrap().trace_id.as_deref(),
        Some("order 4711")
    );
    let (logs, _guard) = courier_devkit::logs::Captured::start();
    // An event ahead of its record is logged (and retried later), in the event's span.
    let w = world(None);
    let report = w.applier.handle(sqs(&[v.to_string()])).await;
    assert_eq!(report.applied, vec![Applied::NotYet]);
    let text = logs.text();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("order-4711")).collect();
    assert!(!lines.is_empty(), "{text}");
    for line in lines {
        assert!(
            line.contains("trace_id=\"order 4711\""),
            "a line without the trace: {line}"
        );
    }
}

#[tokio::test]
async fn delivery_moves_a_sent_job_forward_and_late_send_is_absorbed() {
    let w = world(Some(Status::SentToProvider));
    let report = w
        .applier
        .handle(sqs(&[
            fixture("delivery"),
            fixture("send"),
            fixture("eventbridge-delivery"),
        ]))
        .await;
    assert!(report.failures.is_empty());
    assert_eq!(
        report.applied,
        vec![
            Applied::Changed(Status::Delivered),
            Applied::Absorbed,
            Applied::Absorbed
        ]
    );
    assert_eq!(w.status(), Some(Status::Delivered));
}

#[tokio::test]
async fn permanent_bounces_and_complaints_suppress_the_recipient() {
    let w = world(Some(Status::SentToProvider));
    w.applier
        .handle(sqs(&[fixture("sns-bounce-permanent")]))
        .await;
    assert_eq!(w.status(), Some(Status::BouncedPermanent));
    assert!(w.ann_suppressed());
    let w = world(Some(Status::Delivered));
    w.applier.handle(sqs(&[fixture("complaint")])).await;
    assert_eq!(w.status(), Some(Status::Complained));
    assert!(w.ann_suppressed());
}

#[tokio::test]
async fn transient_bounces_and_delays_do_not_suppress() {
    let w = world(Some(Status::SentToProvider));
    w.applier
        .handle(sqs(&[
            fixture("delivery-delay"),
            fixture("bounce-transient"),
        ]))
        .await;
    assert_eq!(w.status(), Some(Status::BouncedTransient));
    assert!(w.suppression.entries.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_unknown_outcome_is_resolved_as_sent_by_provider_evidence() {
    let w = world(Some(Status::Unknown));
    w.applier.handle(sqs(&[fixture("send")])).await;
    assert_eq!(w.status(), Some(Status::SentToProvider));
}

#[tokio::test]
async fn an_event_ahead_of_its_record_is_retried_later() {
    // The send is still being recorded (processing), or not recorded at all.
    for status in [Some(Status::Processing), None] {
        let w = world(status);
        let report = w.applier.handle(sqs(&[fixture("delivery")])).await;
        assert_eq!(report.failures, vec!["sqs-0".to_owned()], "{status:?}");
        assert_eq!(w.status(), status);
    }
    // Once the record says sent, the redelivered event applies.
    let w = world(Some(Status::SentToProvider));
    assert!(
        w.applier
            .handle(sqs(&[fixture("delivery")]))
            .await
            .failures
            .is_empty()
    );
}

#[tokio::test]
async fn foreign_and_broken_messages_are_acknowledged_not_retried_forever() {
    let w = world(Some(Status::SentToProvider));
    let mut foreign: Value = serde_json::from_str(&fixture("delivery")).unwrap();
    foreign["mail"]["headers"] = serde_json::json!([]);
    foreign["mail"]["tags"] = serde_json::json!({});
    let report = w
        .applier
        .handle(sqs(&[
            "garbage".into(),
            r#"{"hello": "world"}"#.into(),
            foreign.to_string(),
            fixture("open"),
        ]))
        .await;
    assert!(report.failures.is_empty());
    assert_eq!(report.refused, vec![Forgery::NotJson]);
    assert_eq!(report.unparseable, 1);
    assert_eq!(
        report.applied,
        vec![Applied::Uncorrelated, Applied::Absorbed]
    );
    assert_eq!(w.status(), Some(Status::SentToProvider));
}

#[tokio::test]
async fn a_store_failure_reports_the_record() {
    let w = world(Some(Status::SentToProvider));
    w.status.fail_finishes.set(1);
    let report = w.applier.handle(sqs(&[fixture("delivery")])).await;
    assert_eq!(report.failures, vec!["sqs-0".to_owned()]);
}

#[tokio::test]
async fn a_transient_bounce_sends_the_job_again_on_the_soft_bounce_schedule() {
    let w = world(Some(Status::SentToProvider));
    w.keep_payload(kept_payload(None));
    let report = w.applier.handle(sqs(&[fixture("bounce-transient")])).await;
    assert!(report.failures.is_empty());
    assert_eq!(report.applied, vec![Applied::Resent]);
    let rec = w.record();
    assert_eq!(rec.status, Status::Deferred);
    assert_eq!(rec.attempt, 1);
    assert!(rec.resend_of.is_some());
    let steps: Vec<Status> = rec.history.iter().map(|h| h.status).collect();
    assert_eq!(steps, vec![Status::BouncedTransient, Status::Deferred]);
    let scheduled = w.scheduled();
    assert_eq!(scheduled.len(), 1);
    // The record names when the resend's copy is due (the sweeper's waiting index).
    let delay = chrono::Duration::seconds(i64::try_from(scheduled[0].delay_secs).unwrap());
    assert_eq!(rec.copy_due, Some(rec.updated_at + delay));
    // The timeline says what happens next in the words of the shared plan (class, rule, wait).
    let detail = rec.history[1].detail.clone().unwrap_or_default();
    assert!(
        detail.contains("mailbox_temporary")
            && detail.contains(&format!("retry in {} s", scheduled[0].delay_secs)),
        "{detail}"
    );
    // The copy is the next generation, carrying the bounce in its retry state and history.
    let incoming = courier_core::envelope::parse_body(scheduled[0].body.as_bytes()).unwrap();
    assert_eq!(incoming.attempt, 1);
    assert_eq!(incoming.history.len(), 1);
    assert_eq!(
        incoming.history[0].class,
        courier_core::classify::ErrorClass::MailboxTemporary
    );
    assert!(scheduled[0].delay_secs >= 60, "{}", scheduled[0].delay_secs);
    // The same event again (a redelivery) may schedule another copy of the same generation,
    // never a newer one: the claim lets one copy send and drops the other as a duplicate.
    w.applier.handle(sqs(&[fixture("bounce-transient")])).await;
    assert_eq!(w.record().attempt, 1);
    for copy in w.scheduled() {
        assert_eq!(
            courier_core::envelope::parse_body(copy.body.as_bytes())
                .unwrap()
                .attempt,
            1
        );
    }
}

#[tokio::test]
async fn a_late_copy_of_a_bounce_already_resent_changes_nothing() {
    // GIVEN a transient bounce whose resend (generation 1) was scheduled
    let w = world(Some(Status::SentToProvider));
    w.keep_payload(kept_payload(None));
    let report = w.applier.handle(sqs(&[fixture("bounce-transient")])).await;
    assert_eq!(report.applied, vec![Applied::Resent]);
    let resend_copy = w.scheduled()[0].body.clone();
    // WHEN the resend's copy took the job and was deferred again (generation 2, its body kept by
    // its claim), and the bounce comes again (SES's duplicate, or a redelivery)
    w.edit(|rec| {
        for (status, attempt) in [(Status::Processing, 1), (Status::Deferred, 2)] {
            rec.history.push(courier_core::ports::HistoryEntry {
                at: t0(),
                status,
                attempt,
                by: "send".into(),
                detail: None,
            });
        }
        rec.status = Status::Deferred;
        rec.attempt = 2;
        rec.payload = Some(resend_copy.clone());
        rec.provider_message_id = None;
    });
    let report = w.applier.handle(sqs(&[fixture("bounce-transient")])).await;
    // THEN nothing is scheduled for it: generation 2's own copy is on its way
    assert_eq!(report.applied, vec![Applied::Absorbed], "{report:?}");
    assert_eq!(w.scheduled().len(), 1);
    assert_eq!(
        (w.record().status, w.record().attempt),
        (Status::Deferred, 2)
    );
    // AND once the resend is sent (another SES message), the old bounce does not mark it
    w.edit(|rec| {
        rec.status = Status::SentToProvider;
        rec.attempt = 1;
        rec.provider_message_id = Some("the-resend".into());
    });
    let report = w.applier.handle(sqs(&[fixture("bounce-transient")])).await;
    assert!(report.failures.is_empty(), "{report:?}");
    assert_eq!(report.applied, vec![Applied::Absorbed]);
    assert_eq!(w.record().status, Status::SentToProvider);
    assert_eq!(w.scheduled().len(), 1);
}

#[tokio::test]
async fn a_transient_bounce_of_an_earlier_send_leaves_the_later_one_alone() {
    // GIVEN the job sent again since (the record holds the later send's SES id)
    let w = world(Some(Status::SentToProvider));
    w.keep_payload(kept_payload(None));
    w.edit(|rec| {
        rec.attempt = 1;
        rec.provider_message_id = Some("the-later-send".into());
    });
    // WHEN a transient bounce of the earlier send arrives
    let report = w.applier.handle(sqs(&[fixture("bounce-transient")])).await;
    // THEN the later send stays as it is and nothing is sent again
    assert!(report.failures.is_empty(), "{report:?}");
    assert_eq!(report.applied, vec![Applied::Absorbed]);
    assert_eq!(
        (w.record().status, w.record().attempt),
        (Status::SentToProvider, 1)
    );
    assert!(w.scheduled().is_empty());
}

#[tokio::test]
async fn a_permanent_bounce_ahead_of_the_sent_status_waits_for_it_and_suppresses_at_once() {
    // GIVEN a job SES took while its send is not recorded yet (`processing`: the send function
    // is still writing, or died and SES's Send event is on its way; or a later generation is in
    // flight and this bounce is a late one of the earlier send)
    let w = world(Some(Status::Processing));
    w.keep_payload(kept_payload(None));
    let report = w.applier.handle(sqs(&[fixture("bounce-permanent")])).await;
    // THEN the dead address is suppressed now, and the job waits for its send's record (which
    // brings the recipients the bounce is applied to)
    assert_eq!(report.applied, vec![Applied::NotYet]);
    assert_eq!(w.record().status, Status::Processing);
    assert!(w.ann_suppressed());
    // WHEN the sent status lands and the event comes back THEN it applies
    w.edit(|rec| rec.status = Status::SentToProvider);
    let report = w.applier.handle(sqs(&[fixture("bounce-permanent")])).await;
    assert!(report.failures.is_empty(), "{report:?}");
    assert_eq!(
        report.applied,
        vec![Applied::Changed(Status::BouncedPermanent)]
    );
}

#[tokio::test]
async fn a_late_bounce_on_a_job_that_moved_on_is_absorbed_not_redelivered_for_ever() {
    // GIVEN a job that can never take the bounce of an earlier send: it ended otherwise, or
    // waits to be sent again (this generation has not reached SES)
    for now in [
        Status::Suppressed,
        Status::DeadLettered,
        Status::Delivered,
        Status::Deferred,
    ] {
        for fixture_name in ["bounce-permanent", "bounce-transient"] {
            let w = world(Some(now));
            let report = w.applier.handle(sqs(&[fixture(fixture_name)])).await;
            // THEN it is acknowledged (it would otherwise end in the events DLQ), the job is
            // as it was, and a dead address is suppressed all the same
            assert!(
                report.failures.is_empty(),
                "{now} {fixture_name}: {report:?}"
            );
            assert_eq!(
                report.applied,
                vec![Applied::Absorbed],
                "{now} {fixture_name}"
            );
            assert_eq!(w.record().status, now);
            assert_eq!(w.ann_suppressed(), fixture_name == "bounce-permanent");
        }
    }
}

#[tokio::test]
async fn a_transient_bounce_ahead_of_the_sent_status_waits_for_it() {
    // GIVEN a job SES took while the send function's status write has not landed yet (the
    // record is still `processing`, with the body its claim wrote, without SES's id and the
    // recipients that write brings)
    let w = world(Some(Status::Processing));
    w.keep_payload(kept_payload(None));
    let report = w.applier.handle(sqs(&[fixture("bounce-transient")])).await;
    // THEN the bounce is left for redelivery: nothing recorded, nothing scheduled
    assert_eq!(report.applied, vec![Applied::NotYet]);
    assert_eq!(report.failures.len(), 1);
    assert_eq!(w.record().status, Status::Processing);
    assert!(w.scheduled().is_empty());
    // WHEN the sent status lands and the event comes back
    w.edit(|rec| rec.status = Status::SentToProvider);
    let report = w.applier.handle(sqs(&[fixture("bounce-transient")])).await;
    // THEN the job is sent again, as for any transient bounce
    assert!(report.failures.is_empty(), "{report:?}");
    assert_eq!(report.applied, vec![Applied::Resent]);
    assert_eq!(w.scheduled().len(), 1);
}

#[tokio::test]
async fn a_transient_bounce_of_an_acceptance_kept_as_unknown_sends_the_job_again() {
    // GIVEN a job SES took whose sent status could not be written: the acceptance was kept as
    // `unknown`, with SES's id and the body
    let w = world(Some(Status::Unknown));
    w.keep_payload(kept_payload(None));
    w.edit(|rec| {
        rec.provider_message_id =
            Some("0100018c1a2b3c4d-5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9-000000".into());
    });
    // WHEN SES reports a transient bounce of that send
    let report = w.applier.handle(sqs(&[fixture("bounce-transient")])).await;
    // THEN it is sent again as for any transient bounce (the returning copy of generation 0
    // would find it bounced and stop)
    assert!(report.failures.is_empty(), "{report:?}");
    assert_eq!(report.applied, vec![Applied::Resent]);
    let rec = w.record();
    assert_eq!((rec.status, rec.attempt), (Status::Deferred, 1));
    assert_eq!(w.scheduled().len(), 1);
}

#[tokio::test]
async fn a_resend_is_the_records_next_generation_when_the_kept_body_is_of_an_earlier_one() {
    // GIVEN an ambiguous send of generation 0 (the record moved on to its retry's generation 1,
    // the body kept still generation 0's), then SES's Send event recorded the send there
    let w = world(Some(Status::SentToProvider));
    w.keep_payload(kept_payload(None));
    w.edit(|rec| rec.attempt = 1);
    // WHEN SES reports a transient bounce of that send
    let report = w.applier.handle(sqs(&[fixture("bounce-transient")])).await;
    // THEN the record waits for generation 2, and the copy scheduled is generation 2 (a copy of
    // generation 1 would be dropped as stale by its claim, the job left waiting for ever)
    assert!(report.failures.is_empty(), "{report:?}");
    assert_eq!(report.applied, vec![Applied::Resent]);
    let rec = w.record();
    assert_eq!((rec.status, rec.attempt), (Status::Deferred, 2));
    let scheduled = w.scheduled();
    assert_eq!(scheduled.len(), 1);
    let copy = courier_core::envelope::parse_body(scheduled[0].body.as_bytes()).unwrap();
    assert_eq!(copy.attempt, 2);
}

#[tokio::test]
async fn a_transient_bounce_of_an_ambiguous_send_is_recorded_only() {
    // GIVEN an `unknown` without SES's id (the send's answer was lost): a late bounce of an
    // earlier generation cannot be told from one of this send
    let w = world(Some(Status::Unknown));
    w.keep_payload(kept_payload(None));
    let report = w.applier.handle(sqs(&[fixture("bounce-transient")])).await;
    // THEN the bounce is recorded and nothing is sent again on its word
    assert!(report.failures.is_empty(), "{report:?}");
    assert_eq!(
        report.applied,
        vec![Applied::Changed(Status::BouncedTransient)]
    );
    assert!(w.scheduled().is_empty());
}

#[tokio::test]
async fn a_resend_too_large_for_the_state_machine_hops_through_the_queue() {
    use courier_core::classify::ErrorClass;
    use courier_core::policy::{Jitter, Schedule};
    // GIVEN a soft-bounce wait of an hour, and a kept payload of 270 KiB (past the state
    // machine's 256 KiB input)
    let mut w = world(Some(Status::SentToProvider));
    let rule = w
        .applier
        .resender
        .policy
        .transactional
        .classes
        .get_mut(&ErrorClass::MailboxTemporary)
        .unwrap();
    rule.schedule = Schedule::Delays(vec![3_600]);
    rule.jitter = Jitter::None;
    let mut payload: Value = serde_json::from_str(&kept_payload(None)).unwrap();
    payload["job"]["content"]["text"] = "x".repeat(270 * 1024).into();
    w.keep_payload(payload.to_string());
    // WHEN the transient bounce arrives
    let report = w.applier.handle(sqs(&[fixture("bounce-transient")])).await;
    // THEN the copy goes on the queue for 900 s, due in an hour, and no wait is started
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert!(w.scheduler.waits.lock().unwrap().is_empty());
    let queued = w.scheduler.queued.lock().unwrap().clone();
    assert_eq!(queued.len(), 1);
    assert_eq!(
        queued[0].delay_secs,
        courier_core::delay::MAX_QUEUE_DELAY_SECS
    );
    let hop = courier_core::envelope::parse_body(queued[0].body.as_bytes()).unwrap();
    assert_eq!(hop.attempt, 1);
    assert_eq!(
        hop.not_before,
        Some(t0() + chrono::Duration::seconds(3_600))
    );
    assert_eq!(w.record().status, Status::Deferred);
}

#[tokio::test]
async fn a_resend_whose_scheduling_failed_is_scheduled_when_the_event_returns() {
    let w = world(Some(Status::SentToProvider));
    w.keep_payload(kept_payload(None));
    w.scheduler.fail_enqueues.set(10);
    let report = w.applier.handle(sqs(&[fixture("bounce-transient")])).await;
    // Whether the delay went to the queue or the state machine, the event must come back.
    if w.scheduled().is_empty() {
        assert_eq!(report.failures, vec!["sqs-0".to_owned()]);
        // The job is the bounce it was, not `deferred` with no copy coming (which nothing
        // would ever move if the event never came back).
        assert_eq!(w.record().status, Status::BouncedTransient);
        assert_eq!(w.record().attempt, 0);
        w.scheduler.fail_enqueues.set(0);
        let again = w.applier.handle(sqs(&[fixture("bounce-transient")])).await;
        assert!(again.failures.is_empty());
        assert_eq!(again.applied, vec![Applied::Resent]);
    }
    assert_eq!(w.scheduled().len(), 1);
    assert_eq!(w.record().attempt, 1);
}

#[tokio::test]
async fn a_transient_bounce_past_the_horizon_is_dead_lettered_with_its_record() {
    let w = world(Some(Status::SentToProvider));
    // `not_after` passed before the bounce arrived.
    w.keep_payload(kept_payload(Some("2026-01-01T00:00:00Z")));
    let report = w.applier.handle(sqs(&[fixture("bounce-transient")])).await;
    assert!(report.failures.is_empty());
    assert_eq!(
        report.applied,
        vec![Applied::GaveUp(
            courier_core::policy::DeadLetterCategory::RetriesExhausted
        )]
    );
    assert_eq!(w.status(), Some(Status::DeadLettered));
    assert!(w.scheduled().is_empty());
    // counted where the dead-letter alarms look (`DeadLettered_<category>`, Function=events)
    let emf = report.to_emf(0);
    assert_eq!(emf["DeadLettered_retries_exhausted"], 1);
    assert_eq!(emf["SoftBounceGaveUp"], 1);
    let declared = emf["_aws"]["CloudWatchMetrics"][0]["Metrics"].to_string();
    assert!(
        declared.contains("\"DeadLettered_retries_exhausted\""),
        "{declared}"
    );
    let letters = w.dead.letters.lock().unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].message_id.as_deref(), Some("order-4711"));
    assert!(
        letters[0]
            .payload
            .as_deref()
            .unwrap()
            .contains("Your receipt")
    );
}

/// A body over 300 KiB is kept in the payload bucket, the record holding a claim check of it
/// (the send function's claim): a transient bounce sends the job again from it. The bucket
/// failing returns the event (nothing moved); the stored body gone or altered leaves the bounce
/// recorded only, as a record with no body.
#[tokio::test]
async fn a_transient_bounce_of_a_body_kept_in_the_payload_bucket_sends_it_again() {
    use courier_core::claim_check::{ClaimCheck, MAX_KEPT_BYTES};
    let mut payload: Value = serde_json::from_str(&kept_payload(None)).unwrap();
    payload["job"]["content"]["text"] = "x".repeat(MAX_KEPT_BYTES).into();
    let body = payload.to_string();
    let apart = |w: &World| {
        let check = ClaimCheck::of(&body);
        w.payloads
            .objects
            .lock()
            .unwrap()
            .insert(check.key.clone(), body.clone().into_bytes());
        w.keep_payload(check.to_body());
        check
    };
    let w = world(Some(Status::SentToProvider));
    let check = apart(&w);
    // The bucket failing: the event comes back, nothing moved
    w.payloads.fail_gets.set(1);
    let report = w.applier.handle(sqs(&[fixture("bounce-transient")])).await;
    assert_eq!(report.failures, vec!["sqs-0".to_owned()]);
    assert_eq!(
        (w.status(), w.scheduled().len()),
        (Some(Status::SentToProvider), 0)
    );
    // Then the job is sent again from the stored body
    let report = w.applier.handle(sqs(&[fixture("bounce-transient")])).await;
    assert_eq!(report.applied, vec![Applied::Resent]);
    let rec = w.record();
    assert_eq!((rec.status, rec.attempt), (Status::Deferred, 1));
    assert_eq!(
        rec.payload,
        Some(check.to_body()),
        "the record keeps its claim check"
    );
    let copy = courier_core::envelope::parse_body(w.scheduled()[0].body.as_bytes()).unwrap();
    assert_eq!(
        (copy.job.message_id.as_str(), copy.attempt),
        ("order-4711", 1)
    );
    assert_eq!(copy.job.content, parse_body_content(&body));
    // A bounce of an earlier send needs no body: the bucket is not read (its failure does not
    // return the event)
    let w = world(Some(Status::SentToProvider));
    apart(&w);
    w.edit(|rec| {
        rec.provider_message_id = Some("a-later-send".into());
        rec.recipients = vec![courier_core::recipients::Recipient {
            address: "ann@example.org".into(),
            role: courier_core::recipients::Role::To,
            status: courier_core::recipients::RecipientStatus::Sent,
        }];
    });
    w.payloads.fail_gets.set(1);
    let report = w.applier.handle(sqs(&[fixture("bounce-transient")])).await;
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert!(w.scheduled().is_empty());
    // The stored body gone (expired), or another one under its key: recorded only
    for object in [None, Some(b"{}".to_vec())] {
        let w = world(Some(Status::SentToProvider));
        let check = apart(&w);
        {
            let mut objects = w.payloads.objects.lock().unwrap();
            match object {
                Some(other) => objects.insert(check.key.clone(), other),
                None => objects.remove(&check.key),
            };
        }
        let report = w.applier.handle(sqs(&[fixture("bounce-transient")])).await;
        assert!(report.failures.is_empty(), "{:?}", report.failures);
        assert_eq!(
            report.applied,
            vec![Applied::Changed(Status::BouncedTransient)]
        );
        assert!(w.scheduled().is_empty());
    }
}

fn parse_body_content(body: &str) -> Option<courier_core::job::Content> {
    courier_core::envelope::parse_body(body.as_bytes())
        .unwrap()
        .job
        .content
}

#[tokio::test]
async fn a_transient_bounce_without_a_kept_payload_is_recorded_only() {
    let w = world(Some(Status::SentToProvider));
    let report = w.applier.handle(sqs(&[fixture("bounce-transient")])).await;
    assert_eq!(
        report.applied,
        vec![Applied::Changed(Status::BouncedTransient)]
    );
    assert!(w.scheduled().is_empty());
}

#[tokio::test]
async fn a_kept_payload_that_does_not_parse_is_logged_without_its_addresses() {
    let (captured, _guard) = courier_devkit::logs::Captured::start();
    let w = world(Some(Status::SentToProvider));
    let mut payload: Value = serde_json::from_str(&kept_payload(None)).unwrap();
    payload["job"]["to"] = serde_json::json!(["Ann <ann@@example.org>"]);
    w.keep_payload(payload.to_string());
    let report = w.applier.handle(sqs(&[fixture("bounce-transient")])).await;
    assert_eq!(
        report.applied,
        vec![Applied::Changed(Status::BouncedTransient)]
    );
    let logs = captured.text();
    assert!(logs.contains("the kept payload does not parse"), "{logs}");
    assert!(
        logs.contains("<addr:") && !logs.contains("ann@@example.org"),
        "{logs}"
    );
}

/// A bounce wave from one sending domain: 200 sends, then permanent bounces.
fn wave(bounces: usize) -> Vec<String> {
    let send: Value = serde_json::from_str(&fixture("send")).unwrap();
    let bounce: Value = serde_json::from_str(&fixture("bounce-permanent")).unwrap();
    let mut bodies = Vec::new();
    for i in 0..200 {
        let mut e = send.clone();
        e["mail"]["tags"]["courier-message-id"] = serde_json::json!([format!("wave-{i}")]);
        e["mail"]["headers"] = serde_json::json!([]);
        e["mail"]["messageId"] = serde_json::json!(format!("ses-wave-{i}"));
        bodies.push(e.to_string());
    }
    for i in 0..bounces {
        let mut e = bounce.clone();
        e["mail"]["tags"]["courier-message-id"] = serde_json::json!([format!("wave-{i}")]);
        e["mail"]["headers"] = serde_json::json!([]);
        e["mail"]["messageId"] = serde_json::json!(format!("ses-wave-{i}"));
        bodies.push(e.to_string());
    }
    bodies
}

#[tokio::test]
async fn the_reputation_guard_pauses_a_domain_in_a_bounce_wave() {
    let w = world(None);
    for i in 0..200 {
        w.status.records.lock().unwrap().insert(
            format!("wave-{i}"),
            JobRecord {
                provider: Some("ses".into()),
                ..JobRecord::new(format!("wave-{i}"), Status::SentToProvider, 0, t0())
            },
        );
    }
    // 3% bounces: below the 4% trip.
    let mut total = courier_core::reputation::ReputationCounts::default();
    for chunk in wave(6).chunks(10) {
        let report = w.applier.handle(sqs(chunk)).await;
        assert!(report.tripped.is_empty());
        if let Some((bounce, _)) = report.rates.get("example.com") {
            assert!(*bounce < 0.04);
        }
    }
    assert!(w.breakers.states.lock().unwrap().is_empty());
    total.merge(
        &w.reputation.buckets.lock().unwrap().values().copied().fold(
            courier_core::reputation::ReputationCounts::default(),
            |mut a, b| {
                a.merge(&b);
                a
            },
        ),
    );
    assert_eq!(total.sent, 200);
    assert_eq!(total.bounced, 6);
    // Three more bounces: 9 of 200 is 4.5%, past the trip, still below SES's 5%.
    let more: Vec<String> = wave(9).split_off(206);
    let report = w.applier.handle(sqs(&more)).await;
    assert_eq!(report.tripped.len(), 1, "{report:?}");
    assert_eq!(report.tripped[0].0, "example.com");
    let emf = report.to_emf(0);
    assert_eq!(emf["ReputationGuardTripped"], 1);
    assert!(emf["BounceRate"].as_f64().unwrap() >= 4.0);
    let state = w.breakers.states.lock().unwrap()["reputation:example.com"].clone();
    assert_eq!(state.mode, courier_core::breaker::Mode::Open);
    assert_eq!(state.open_until, Some(t0() + chrono::Duration::hours(1)));
    // Already paused: more bounces do not trip it again.
    let report = w.applier.handle(sqs(&wave(10)[209..])).await;
    assert!(report.tripped.is_empty());
}

#[test]
fn settings_name_the_variable_that_is_wrong() {
    use crate::wiring::{Settings, SettingsError};
    let base = |k: &str| -> Option<String> {
        match k {
            "COURIER_STATUS_TABLE" => Some("status".into()),
            "COURIER_SUPPRESSION_TABLE" => Some("suppression".into()),
            "COURIER_CONTROL_TABLE" => Some("control".into()),
            "COURIER_QUEUE_URL" => Some("http://q".into()),
            "COURIER_DELAY_STATE_MACHINE_ARN" => Some("arn:sm".into()),
            "COURIER_DEAD_LETTER_QUEUE_URL" => Some("http://dlq".into()),
            "COURIER_LETTER_INDEX_TABLE" => Some("letters".into()),
            "COURIER_SES_EVENTS_VIA" => Some("eventbridge".into()),
            "COURIER_ENVELOPE_KEY_SECRET" => Some("arn:seal".into()),
            "COURIER_PAYLOAD_BUCKET" => Some("payloads".into()),
            _ => None,
        }
    };
    let ok = Settings::from_lookup(base).unwrap();
    assert_eq!(ok.payload_bucket, "payloads");
    assert_eq!(ok.envelope_key_secret, "arn:seal");
    assert_eq!(ok.guard, GuardConfig::default());
    assert_eq!(ok.admission, Admission::EventBridge);
    assert_eq!(ok.archive_retention_days, 365);
    let with = |key: &'static str, value: &'static str| {
        move |k: &str| {
            if k == key {
                Some(value.to_owned())
            } else {
                base(k)
            }
        }
    };
    // Resends go to the retry queue when there is one, else to the send queue.
    assert_eq!(
        (ok.retry_queue_url.as_deref(), ok.requeue_url()),
        (None, "http://q")
    );
    let s = Settings::from_lookup(with("COURIER_RETRY_QUEUE_URL", "http://rq")).unwrap();
    assert_eq!(s.requeue_url(), "http://rq");
    let s = Settings::from_lookup(with("COURIER_RETRY_QUEUE_URL", "")).unwrap();
    assert_eq!(s.requeue_url(), "http://q");
    let s = Settings::from_lookup(with("COURIER_REPUTATION_BOUNCE_TRIP", "0.03")).unwrap();
    assert!((s.guard.bounce_trip - 0.03).abs() < 1e-12);
    let s = Settings::from_lookup(with("COURIER_REPUTATION_WINDOW", "6h")).unwrap();
    assert_eq!(s.guard.window, chrono::Duration::hours(6));
    assert_eq!(ok.soft_suppression, chrono::Duration::days(14));
    let s = Settings::from_lookup(with("COURIER_ARCHIVE_RETENTION_DAYS", "731")).unwrap();
    assert_eq!(s.archive_retention_days, 731);
    let s = Settings::from_lookup(with("COURIER_SOFT_SUPPRESSION_PERIOD", "3d")).unwrap();
    assert_eq!(s.soft_suppression, chrono::Duration::days(3));
    for (key, value) in [
        ("COURIER_REPUTATION_BOUNCE_TRIP", "5%"),
        ("COURIER_REPUTATION_COMPLAINT_TRIP", "2"),
        ("COURIER_REPUTATION_WINDOW", "forever"),
        ("COURIER_REPUTATION_PAUSE", "0s"),
        ("COURIER_REPUTATION_MIN_VOLUME", "-1"),
        ("COURIER_SOFT_SUPPRESSION_PERIOD", "two weeks"),
        ("COURIER_SOFT_SUPPRESSION_PERIOD", "0"),
        ("COURIER_RETRY_POLICY_JSON", "{"),
        ("COURIER_ARCHIVE_RETENTION_DAYS", "0"),
        ("COURIER_ARCHIVE_RETENTION_DAYS", "a year"),
        ("COURIER_LIVE_SETTINGS_CACHE", "30d"),
        ("COURIER_LIVE_SETTINGS_CACHE", "0s"),
    ] {
        match Settings::from_lookup(with(key, value)) {
            Err(SettingsError::Invalid { name, .. }) => assert_eq!(name, key),
            other => panic!("{key}={value}: {other:?}"),
        }
    }
    for required in [
        "COURIER_QUEUE_URL",
        "COURIER_ENVELOPE_KEY_SECRET",
        "COURIER_PAYLOAD_BUCKET",
    ] {
        let missing = |k: &str| if k == required { None } else { base(k) };
        match Settings::from_lookup(missing) {
            Err(SettingsError::Missing(name)) => assert_eq!(name, required),
            other => panic!("{required}: {other:?}"),
        }
    }
    // The events path: required, one of two; through SNS the topic is required, and the
    // certificate host is the region's SNS host unless named.
    let via = |pairs: Vec<(&'static str, &'static str)>| {
        move |k: &str| match pairs.iter().find(|(key, _)| *key == k) {
            Some((_, v)) => Some((*v).to_owned()),
            None if k == "COURIER_SES_EVENTS_VIA" => None,
            None => base(k),
        }
    };
    assert!(matches!(
        Settings::from_lookup(via(vec![])),
        Err(SettingsError::Missing("COURIER_SES_EVENTS_VIA"))
    ));
    assert!(matches!(
        Settings::from_lookup(via(vec![("COURIER_SES_EVENTS_VIA", "kinesis")])),
        Err(SettingsError::Invalid {
            name: "COURIER_SES_EVENTS_VIA",
            ..
        })
    ));
    assert!(matches!(
        Settings::from_lookup(via(vec![
            ("COURIER_SES_EVENTS_VIA", "sns"),
            ("AWS_REGION", "eu-west-1")
        ])),
        Err(SettingsError::Missing("COURIER_SES_EVENTS_TOPIC_ARN"))
    ));
    let topic = ("COURIER_SES_EVENTS_TOPIC_ARN", "arn:aws:sns:eu-west-1:1:t");
    assert!(matches!(
        Settings::from_lookup(via(vec![("COURIER_SES_EVENTS_VIA", "sns"), topic])),
        Err(SettingsError::Missing("AWS_REGION"))
    ));
    let s = Settings::from_lookup(via(vec![
        ("COURIER_SES_EVENTS_VIA", "sns"),
        topic,
        ("AWS_REGION", "eu-west-1"),
    ]))
    .unwrap();
    assert_eq!(
        s.admission,
        Admission::Sns(SnsTrust {
            topic_arn: topic.1.into(),
            certificate_host: "sns.eu-west-1.amazonaws.com".into()
        })
    );
    let s = Settings::from_lookup(via(vec![
        ("COURIER_SES_EVENTS_VIA", "sns"),
        topic,
        ("COURIER_SNS_CERTIFICATE_HOST", "sns.test.invalid"),
    ]))
    .unwrap();
    assert!(matches!(s.admission, Admission::Sns(t) if t.certificate_host == "sns.test.invalid"));
}

const SES_ID: &str = "0100018c1a2b3c4d-5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9-000000";

/// A fixture without Courier's header and tag (headers truncated, a tag SES refused).
fn without_our_id(name: &str) -> String {
    let mut v: Value = serde_json::from_str(&fixture(name)).unwrap();
    v["mail"]["headers"] = serde_json::json!([]);
    v["mail"]["tags"] = serde_json::json!({});
    v.to_string()
}

#[test]
fn every_eventbridge_and_sns_fixture_parses_as_its_raw_event() {
    for name in RAW_FIXTURES {
        let raw = parse(&fixture(name)).unwrap();
        for envelope in ["sns", "eventbridge"] {
            let wrapped = parse(&fixture(&format!("{envelope}-{name}")))
                .unwrap_or_else(|e| panic!("{envelope}-{name}: {e}"));
            assert_eq!(wrapped, raw, "{envelope}-{name}");
        }
    }
    // The undetermined bounce keeps SES's type and subtype, and changes no status.
    let undetermined = parse(&fixture("bounce-undetermined")).unwrap();
    assert_eq!(
        undetermined.kind,
        EventKind::Failure(SesFailureEvent::Bounce {
            bounce_type: "Undetermined".into(),
            bounce_subtype: "Undetermined".into(),
            diagnostic: None,
        })
    );
    assert_eq!(target(&undetermined.kind), None);
}

#[tokio::test]
async fn an_event_without_our_id_finds_its_job_by_the_ses_message_id() {
    // GIVEN a sent job whose record has SES's message id
    let w = world(Some(Status::SentToProvider));
    w.status
        .records
        .lock()
        .unwrap()
        .get_mut("order-4711")
        .unwrap()
        .provider_message_id = Some(SES_ID.into());
    // WHEN its delivery arrives without our header and tag THEN it applies to that job
    let report = w.applier.handle(sqs(&[without_our_id("delivery")])).await;
    assert!(report.failures.is_empty());
    assert_eq!(report.applied, vec![Applied::Changed(Status::Delivered)]);
    assert_eq!(w.status(), Some(Status::Delivered));
}

#[tokio::test]
async fn an_uncorrelated_event_is_retried_while_young_and_dropped_when_old() {
    // GIVEN no record with the event's SES message id (the send is still being recorded)
    let w = world(Some(Status::SentToProvider));
    let mut young: Value = serde_json::from_str(&without_our_id("delivery")).unwrap();
    young["mail"]["timestamp"] =
        serde_json::json!((t0() - chrono::Duration::minutes(1)).to_rfc3339());
    // WHEN it arrives a minute after the send THEN it is retried later
    let report = w.applier.handle(sqs(&[young.to_string()])).await;
    assert_eq!(report.failures, vec!["sqs-0".to_owned()]);
    assert_eq!(report.applied, vec![Applied::NotYet]);
    // WHEN it is older than the window THEN it is acknowledged as uncorrelated
    let report = w.applier.handle(sqs(&[without_our_id("delivery")])).await;
    assert!(report.failures.is_empty());
    assert_eq!(report.applied, vec![Applied::Uncorrelated]);
    assert_eq!(w.status(), Some(Status::SentToProvider));
}

#[tokio::test]
async fn uncorrelated_permanent_bounces_and_complaints_still_suppress() {
    for name in ["bounce-permanent", "complaint"] {
        // GIVEN no job at all for the event
        let w = world(None);
        let report = w.applier.handle(sqs(&[without_our_id(name)])).await;
        assert_eq!(report.applied, vec![Applied::Uncorrelated], "{name}");
        assert!(
            w.suppression
                .is_suppressed("ann@example.org", t0() + chrono::Duration::days(3650)),
            "{name}: a hard entry"
        );
    }
    // A store failure while suppressing leaves the event for a redelivery.
    let w = world(None);
    let failing = Arc::new(FailingSuppression);
    let applier = Applier {
        suppression: failing,
        ..w.applier
    };
    let report = applier
        .handle(sqs(&[without_our_id("bounce-permanent")]))
        .await;
    assert_eq!(report.failures, vec!["sqs-0".to_owned()]);
}

/// A suppression list whose writes fail.
struct FailingSuppression;

#[async_trait::async_trait]
impl SuppressionList for FailingSuppression {
    async fn suppressed(&self, _: &[String], _: DateTime<Utc>) -> Result<Vec<String>, StoreError> {
        Ok(Vec::new())
    }
    async fn suppress_until(
        &self,
        _: &str,
        _: &str,
        _: DateTime<Utc>,
        _: Option<DateTime<Utc>>,
    ) -> Result<(), StoreError> {
        Err(StoreError::msg("suppress", "injected failure"))
    }
    async fn suppress_soft(
        &self,
        _: &str,
        _: &str,
        _: DateTime<Utc>,
        _: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        Err(StoreError::msg("suppress soft", "injected failure"))
    }
    async fn remove(&self, _: &str) -> Result<bool, StoreError> {
        Ok(false)
    }
    async fn unsubscribed(&self, _: &[String], _: &str) -> Result<Vec<String>, StoreError> {
        Ok(Vec::new())
    }
    async fn unsubscribe(
        &self,
        _: &str,
        _: &courier_core::unsubscribe::Scope,
        _: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        Err(StoreError::msg("unsubscribe", "injected failure"))
    }
    async fn remove_from_list(&self, _: &str, _: &str) -> Result<bool, StoreError> {
        Ok(false)
    }
    async fn list(
        &self,
        _: usize,
        _: Option<String>,
    ) -> Result<(Vec<courier_core::ports::SuppressionEntry>, Option<String>), StoreError> {
        Ok((Vec::new(), None))
    }
}

#[tokio::test]
async fn a_transient_bounce_that_gives_up_soft_suppresses_for_the_configured_period() {
    // GIVEN a job past its `not_after`
    let w = world(Some(Status::SentToProvider));
    w.keep_payload(kept_payload(Some("2026-01-01T00:00:00Z")));
    let report = w.applier.handle(sqs(&[fixture("bounce-transient")])).await;
    assert_eq!(
        report.applied,
        vec![Applied::GaveUp(
            courier_core::policy::DeadLetterCategory::RetriesExhausted
        )]
    );
    // THEN the recipient is suppressed for 14 days, then no longer
    let until = w.suppression.expiries.lock().unwrap()["ann@example.org"];
    assert_eq!(until, t0() + chrono::Duration::days(14));
    assert!(w.suppression.entries.lock().unwrap()["ann@example.org"].starts_with("soft: "));
    assert!(
        w.suppression
            .is_suppressed("ann@example.org", until - chrono::Duration::seconds(1))
    );
    assert!(!w.suppression.is_suppressed("ann@example.org", until));
    // A failed soft suppression leaves the event for a redelivery, before the dead letter.
    let w = world(Some(Status::SentToProvider));
    w.keep_payload(kept_payload(Some("2026-01-01T00:00:00Z")));
    let applier = Applier {
        suppression: Arc::new(FailingSuppression),
        ..w.applier
    };
    let report = applier.handle(sqs(&[fixture("bounce-transient")])).await;
    assert_eq!(report.failures, vec!["sqs-0".to_owned()]);
    assert!(w.dead.letters.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_undetermined_bounce_soft_suppresses_and_is_noted_once() {
    // GIVEN a sent job WHEN an undetermined bounce arrives (twice)
    let w = world(Some(Status::SentToProvider));
    let report = w
        .applier
        .handle(sqs(&[
            fixture("sns-bounce-undetermined"),
            fixture("eventbridge-bounce-undetermined"),
        ]))
        .await;
    assert!(report.failures.is_empty());
    assert_eq!(report.applied, vec![Applied::Noted, Applied::Absorbed]);
    // THEN the status stays, the timeline has it once, the recipient is soft-suppressed
    let rec = w.record();
    assert_eq!(rec.status, Status::SentToProvider);
    assert_eq!(rec.history.len(), 1);
    assert_eq!(rec.history[0].status, Status::SentToProvider);
    assert!(
        rec.history[0]
            .detail
            .as_deref()
            .unwrap()
            .contains("undetermined")
    );
    assert_eq!(
        w.suppression.expiries.lock().unwrap()["ann@example.org"],
        t0() + chrono::Duration::days(14)
    );
    // A hard entry is never weakened to a soft one.
    let w = world(Some(Status::SentToProvider));
    w.applier
        .handle(sqs(&[
            fixture("bounce-permanent"),
            fixture("bounce-undetermined"),
        ]))
        .await;
    assert!(w.suppression.expiries.lock().unwrap().is_empty());
    assert!(
        w.suppression
            .is_suppressed("ann@example.org", t0() + chrono::Duration::days(3650))
    );
}

#[tokio::test]
async fn a_delivery_delay_is_in_the_timeline_once_and_changes_nothing() {
    let w = world(Some(Status::SentToProvider));
    let report = w
        .applier
        .handle(sqs(&[
            fixture("delivery-delay"),
            fixture("sns-delivery-delay"),
        ]))
        .await;
    assert_eq!(report.applied, vec![Applied::Noted, Applied::Absorbed]);
    let rec = w.record();
    assert_eq!(rec.status, Status::SentToProvider);
    assert_eq!(rec.history.len(), 1);
    assert!(
        rec.history[0]
            .detail
            .as_deref()
            .unwrap()
            .contains("delivery delayed")
    );
    // The delivery still moves it on afterwards.
    w.applier.handle(sqs(&[fixture("delivery")])).await;
    assert_eq!(w.status(), Some(Status::Delivered));
    // Without a record there is nothing to note: acknowledged, not retried.
    let w = world(None);
    let report = w.applier.handle(sqs(&[fixture("delivery-delay")])).await;
    assert!(report.failures.is_empty());
    assert_eq!(report.applied, vec![Applied::Absorbed]);
}

#[tokio::test]
async fn a_redelivered_event_counts_once_in_the_rates() {
    // GIVEN a sent job WHEN its bounce arrives three times (SQS redelivery, SNS, EventBridge)
    let w = world(Some(Status::SentToProvider));
    let report = w
        .applier
        .handle(sqs(&[
            fixture("bounce-permanent"),
            fixture("sns-bounce-permanent"),
        ]))
        .await;
    assert_eq!(report.recounts_skipped, 1);
    w.applier
        .handle(sqs(&[fixture("eventbridge-bounce-permanent")]))
        .await;
    // THEN it counts once
    let total = w.reputation.buckets.lock().unwrap().values().fold(
        courier_core::reputation::ReputationCounts::default(),
        |mut a, b| {
            a.merge(b);
            a
        },
    );
    assert_eq!(total.bounced, 1);
    // AND a ledger failure leaves the (applied) event for a redelivery, which counts it once
    let w = world(Some(Status::SentToProvider));
    w.ledger.fail.set(1);
    let report = w.applier.handle(sqs(&[fixture("send")])).await;
    assert_eq!(report.failures, vec!["sqs-0".to_owned()]);
    assert!(w.reputation.buckets.lock().unwrap().is_empty());
    let report = w.applier.handle(sqs(&[fixture("send")])).await;
    assert!(report.failures.is_empty());
    let sent: u64 = w
        .reputation
        .buckets
        .lock()
        .unwrap()
        .values()
        .map(|c| c.sent)
        .sum();
    assert_eq!(sent, 1);
}

#[test]
fn count_keys_tell_events_apart_and_not_their_copies() {
    let key = |name: &str| count_key(&parse(&fixture(name)).unwrap());
    assert_eq!(key("bounce-permanent"), key("sns-bounce-permanent"));
    assert_ne!(key("send"), key("delivery"));
    assert_eq!(key("delivery-delay"), None);
    assert_eq!(key("bounce-transient"), None);
    let mut other: Value = serde_json::from_str(&fixture("delivery")).unwrap();
    other["mail"]["messageId"] = serde_json::json!("another-ses-id");
    assert_ne!(
        count_key(&parse(&other.to_string()).unwrap()),
        key("delivery")
    );
}

mod gate;
mod logs;
mod recipients;

/// The live settings' retry policy decides a transient bounce's resend: with no
/// `mailbox_temporary` retries stored, the bounced job is dead-lettered instead of resent; a
/// stored version that does not validate is refused and reported, and the last good policy stays.
#[tokio::test]
async fn the_live_retry_policy_decides_the_resend_and_a_bad_version_is_refused() {
    use courier_core::ports::LiveSettingsStore;
    let mut w = world(Some(Status::SentToProvider));
    w.keep_payload(kept_payload(None));
    let store = Arc::new(MemoryLiveSettings::default());
    store
        .put(
            r#"{"retry_policy": {"transactional": {"classes": {"mailbox_temporary":
                {"retries": 0, "schedule": {"delays": [60]}, "jitter": {"kind": "none"},
                 "spends_attempt": true, "horizon": "1h"}}}}}"#,
            None,
            t0(),
            "ops",
        )
        .await
        .unwrap();
    // (read at every batch here: a cache period of zero)
    w.applier.resender.live = Some(courier_adapters::live_settings::LiveSettingsReader::new(
        store.clone(),
        chrono::Duration::zero(),
        courier_core::live::Baseline::default(),
    ));
    let report = w.applier.handle(sqs(&[fixture("bounce-transient")])).await;
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert!(!report.live_refused);
    assert!(w.scheduled().is_empty(), "resent despite the live policy");
    assert!(
        matches!(report.applied[..], [Applied::GaveUp(_)]),
        "{:?}",
        report.applied
    );
    // a bad version is refused and reported; the last good policy stays in force
    store
        .put(
            r#"{"retry_policy": {"bulk": {"max_total_attempts": "x"}}}"#,
            Some(1),
            t0(),
            "ops",
        )
        .await
        .unwrap();
    let report = w.applier.handle(sqs(&[fixture("delivery")])).await;
    assert!(report.live_refused);
    assert!(w.applier.resender.live_policy.read().unwrap().is_some());
}

#[tokio::test]
async fn each_outcome_an_event_writes_is_published_once_from_the_record() {
    let mut w = world(Some(Status::SentToProvider));
    let bus = Arc::new(MemoryOutcomeBus::default());
    let (status, relay) = courier_core::outcome::Relay::wrap(w.applier.status.clone(), bus.clone());
    w.applier.status = status;
    w.applier.outcomes = Some(relay);
    {
        let mut records = w.status.records.lock().unwrap();
        let rec = records.get_mut("order-4711").unwrap();
        rec.facts.campaign_id = Some("receipts".into());
        rec.facts.metadata.insert("order".into(), "4711".into());
    }
    // GIVEN a delivery, its duplicate and a late send event WHEN applied
    let report = w
        .applier
        .handle(sqs(&[
            fixture("delivery"),
            fixture("delivery"),
            fixture("send"),
        ]))
        .await;
    // THEN one "Email Delivered" event, with the job's facts, and nothing for the absorbed ones
    assert_eq!(report.outcomes_published, 1);
    assert_eq!(report.to_emf(0)["OutcomesPublished"], 1);
    let events = bus.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].detail_type, "Email Delivered");
    assert_eq!(events[0].detail.event_id, "order-4711/0/delivered");
    assert_eq!(events[0].detail.metadata["order"], "4711");
    assert_eq!(w.record().outbox, None);
    // AND a complaint after the delivery is an outcome of its own
    w.applier.handle(sqs(&[fixture("complaint")])).await;
    let kinds: Vec<&str> = bus.events().iter().map(|e| e.detail_type).collect();
    assert_eq!(kinds, ["Email Delivered", "Email Complained"]);
}
