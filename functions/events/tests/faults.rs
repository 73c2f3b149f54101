//! Exhaustive fault injection of the events function. For one SES event on each path (a
//! delivery, a permanent bounce, a complaint, a send, a transient bounce resent through the
//! policy, a transient bounce past the job's `not_after` given up, a transient bounce of a send
//! SES's Send event recorded alone, whose recipients the event fills), every port call in turn
//! fails before its effect, fails after it (the write happened, the answer was lost), crashes
//! the invocation before it, or crashes it after it; then the event is redelivered as SQS would
//! until it is acknowledged. After every run:
//!
//! - the event is acknowledged within a few deliveries (it never ends in the events DLQ,
//!   which nothing consumes);
//! - the job ends as the event says (its status and its recipient's, the suppression of a dead
//!   address, a resend
//!   of the next generation with the record pointing at it, or a complete dead letter);
//! - a resend schedules only copies of the next generation, and never leaves the job `deferred`
//!   with no copy on its way;
//! - a transient bounce of one recipient of a job with several (resent to it alone, as a job of
//!   its own) leaves that job's record waiting for its copy, with the body to put it back from
//!   (what the sweeper's lost-copy check and `courierctl requeue` need), and marks the recipient
//!   `resent` only with both in place;
//! - the reputation guard counts the event at most once.
//!
//! It prints the number of injected points and runs; every one must hold.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers fail the test loudly

use std::sync::Arc;

use aws_lambda_events::sqs::SqsEvent;
use chrono::{DateTime, Utc};
use courier_core::claim_check::{self, ClaimCheck, MAX_KEPT_BYTES};
use courier_core::envelope::parse_body;
use courier_core::policy::{DeadLetterCategory, RetryPolicy, RetryState};
use courier_core::ports::{JobRecord, PayloadStore, Requeue};
use courier_core::random::SeededRandom;
use courier_core::recipients::{Recipient, RecipientStatus, Role};
use courier_core::reputation::GuardConfig;
use courier_core::status::Status;
use courier_devkit::faults::{FAULTS, Fault, Faults, Faulty};
use courier_devkit::memory::*;
use courier_events::{Admission, Applier, Gate, Guard, NoCertificates, Resender};

const JOB_ID: &str = "order-4711";
const RECIPIENT: &str = "ann@example.org";
/// Deliveries of one event before SQS would move it to the events DLQ.
const MAX_DELIVERIES: usize = 5;

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/fixtures/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// Where a path must end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// This status, and the recipient suppressed (for good) or not.
    Status(Status, bool),
    /// A resend: the record `deferred` at its next generation pointing at the bounced send, and
    /// copies of that generation (and only those) scheduled.
    Resent,
    /// Given up: a complete dead letter, the record `dead_lettered`, the recipient suppressed
    /// softly.
    GaveUp,
    /// The bounced recipient resent alone, as a job of its own: that job's record `deferred`
    /// at generation 1 with its due time and body, copies of it (and only of it) scheduled, the
    /// recipient `resent` and the job still sent.
    PartResent,
}

struct Path {
    name: &'static str,
    fixture: &'static str,
    /// The record's status when the event arrives.
    before: Status,
    /// The kept payload's `not_after`, if the path keeps a payload.
    payload: Option<Option<&'static str>>,
    /// Whether the send was recorded with its recipients (else by SES's Send event alone, with
    /// SES's id: the event's `mail.destination` fills them).
    listed: bool,
    /// The job's other recipients (`cc`), whom the event does not name.
    others: &'static [&'static str],
    /// Whether the kept body is over 300 KiB, kept in the payload bucket (the record holding
    /// a claim check of it).
    apart: bool,
    /// The record's generation when the event arrives (the kept body is generation 0's: an
    /// ambiguous send moved the record on to its retry's generation, where SES's Send event then
    /// recorded the send).
    generation: u32,
    end: End,
}

const PATHS: [Path; 11] = [
    Path {
        name: "delivery",
        fixture: "delivery",
        before: Status::SentToProvider,
        payload: None,
        listed: true,
        others: &[],
        apart: false,
        generation: 0,
        end: End::Status(Status::Delivered, false),
    },
    Path {
        name: "permanent bounce",
        fixture: "bounce-permanent",
        before: Status::SentToProvider,
        payload: None,
        listed: true,
        others: &[],
        apart: false,
        generation: 0,
        end: End::Status(Status::BouncedPermanent, true),
    },
    Path {
        name: "complaint",
        fixture: "complaint",
        before: Status::SentToProvider,
        payload: None,
        listed: true,
        others: &[],
        apart: false,
        generation: 0,
        end: End::Status(Status::Complained, true),
    },
    Path {
        name: "send after an ambiguous outcome",
        fixture: "send",
        before: Status::Unknown,
        payload: None,
        listed: true,
        others: &[],
        apart: false,
        generation: 0,
        end: End::Status(Status::SentToProvider, false),
    },
    Path {
        name: "transient bounce resent",
        fixture: "bounce-transient",
        before: Status::SentToProvider,
        payload: Some(None),
        listed: true,
        others: &[],
        apart: false,
        generation: 0,
        end: End::Resent,
    },
    Path {
        name: "transient bounce given up",
        fixture: "bounce-transient",
        before: Status::SentToProvider,
        payload: Some(Some("2026-01-01T00:00:00Z")),
        listed: true,
        others: &[],
        apart: false,
        generation: 0,
        end: End::GaveUp,
    },
    Path {
        name: "transient bounce of a send recorded by SES's Send event alone",
        fixture: "bounce-transient",
        before: Status::SentToProvider,
        payload: Some(None),
        listed: false,
        others: &[],
        apart: false,
        generation: 0,
        end: End::Resent,
    },
    Path {
        name: "transient bounce of one recipient of three",
        fixture: "bounce-transient",
        before: Status::SentToProvider,
        payload: Some(None),
        listed: true,
        others: &["bob@example.org", "cy@example.org"],
        apart: false,
        generation: 0,
        end: End::PartResent,
    },
    Path {
        name: "transient bounce resent from a body kept in the payload bucket",
        fixture: "bounce-transient",
        before: Status::SentToProvider,
        payload: Some(None),
        listed: true,
        others: &[],
        apart: true,
        generation: 0,
        end: End::Resent,
    },
    Path {
        name: "transient bounce of one recipient of three, from a body kept in the payload bucket",
        fixture: "bounce-transient",
        before: Status::SentToProvider,
        payload: Some(None),
        listed: true,
        others: &["bob@example.org", "cy@example.org"],
        apart: true,
        generation: 0,
        end: End::PartResent,
    },
    Path {
        name: "transient bounce of a send recorded by SES's Send event after an ambiguous one moved the record on",
        fixture: "bounce-transient",
        before: Status::SentToProvider,
        payload: Some(None),
        listed: false,
        others: &[],
        apart: false,
        generation: 1,
        end: End::Resent,
    },
];

/// SES's message id in the fixtures.
const SES_ID: &str = "0100018c1a2b3c4d-5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9-000000";

/// The job as the send function keeps it with a sent record (generation 0, as an envelope).
/// `apart`: with a text long enough to be kept in the payload bucket.
fn kept_payload(not_after: Option<&str>, others: &[&str], apart: bool) -> String {
    let text = if apart {
        "Thanks ".repeat(MAX_KEPT_BYTES / 6)
    } else {
        "Thanks".into()
    };
    let mut job = serde_json::json!({
        "version": 1, "message_id": JOB_ID, "campaign_id": "receipts",
        "from": "shop@example.com", "to": [RECIPIENT],
        "content": {"subject": "Your receipt", "text": text}
    });
    if !others.is_empty() {
        job["cc"] = others.into();
    }
    if let Some(t) = not_after {
        job["not_after"] = t.into();
    }
    serde_json::json!({
        "courier_envelope": 1, "attempt": 0, "retry": RetryState::default(), "history": [],
        "job": job
    })
    .to_string()
}

fn sqs(body: &str) -> SqsEvent {
    serde_json::from_value(serde_json::json!({"Records": [{
        "messageId": "sqs-0", "receiptHandle": "r", "body": body, "attributes": {},
        "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:events", "awsRegion": "us-east-1"
    }]}))
    .unwrap()
}

#[derive(Debug, Default)]
struct Run {
    violations: Vec<String>,
    calls: usize,
    fired: bool,
}

async fn run(path: &Path, plan: Option<(usize, Fault)>) -> Run {
    let faults = Arc::new(Faults::default());
    let status = Arc::new(MemoryStatusStore::default());
    let payloads = Arc::new(MemoryPayloads::default());
    let kept = match path.payload {
        Some(not_after) => {
            let body = kept_payload(not_after, path.others, path.apart);
            let kept = claim_check::keep(&*payloads, body).await.unwrap();
            assert_eq!(
                ClaimCheck::parse(&kept).is_some(),
                path.apart,
                "{}",
                path.name
            );
            Some(kept)
        }
        None => None,
    };
    status.records.lock().unwrap().insert(
        JOB_ID.into(),
        JobRecord {
            message_id: JOB_ID.into(),
            status: path.before,
            attempt: path.generation,
            lease_owner: None,
            lease_until: None,
            unknown_since: (path.before == Status::Unknown).then(t0),
            provider: Some("ses".into()),
            provider_message_id: (!path.listed).then(|| SES_ID.into()),
            payload: kept,
            // The recipients as the send records them: every path moves Ann's outcome too.
            recipients: if path.listed {
                let each = RecipientStatus::of_status(path.before).unwrap();
                std::iter::once((RECIPIENT, Role::To))
                    .chain(path.others.iter().map(|a| (*a, Role::Cc)))
                    .map(|(address, role)| Recipient {
                        address: address.into(),
                        role,
                        status: each,
                    })
                    .collect()
            } else {
                Vec::new()
            },
            recipients_version: u32::from(path.listed),
            ..JobRecord::new(JOB_ID, path.before, 0, t0())
        },
    );
    let suppression = Arc::new(MemorySuppressionList::default());
    let scheduler = Arc::new(MemoryScheduler::default());
    let letters = Arc::new(MemoryDeadLetters::default());
    let reputation = Arc::new(MemoryReputationStore::default());
    let faulty = |f: &Arc<Faults>| f.clone();
    let applier = Applier {
        status: Arc::new(Faulty::new(status.clone(), faulty(&faults))),
        suppression: Arc::new(Faulty::new(suppression.clone(), faulty(&faults))),
        soft_suppression: chrono::Duration::days(14),
        clock: Arc::new(ManualClock::new(t0())),
        resender: Resender {
            live: None,
            live_policy: Default::default(),
            policy: RetryPolicy::default(),
            scheduler: Arc::new(Faulty::new(scheduler.clone(), faulty(&faults))),
            dead_letters: Arc::new(Faulty::new(letters.clone(), faulty(&faults))),
            payloads: Arc::new(Faulty::new(payloads.clone(), faulty(&faults))),
            rng: std::sync::Mutex::new(SeededRandom::new(3)),
        },
        guard: Guard {
            store: Arc::new(Faulty::new(reputation.clone(), faulty(&faults))),
            ledger: Arc::new(Faulty::new(
                Arc::new(MemoryEventLedger::default()),
                faulty(&faults),
            )),
            breakers: Arc::new(Faulty::new(
                Arc::new(MemoryBreakerStore::default()),
                faulty(&faults),
            )),
            config: GuardConfig::default(),
        },
        gate: Arc::new(Gate::new(Admission::Any, Arc::new(NoCertificates))),
        outcomes: None,
    };
    if let Some((at, fault)) = plan {
        faults.arm(at, fault);
    }
    let body = fixture(path.fixture);
    let mut out = Run::default();
    let mut acknowledged = false;
    for _ in 0..MAX_DELIVERIES {
        let handled = tokio::select! {
            report = applier.handle(sqs(&body)) => Some(report),
            () = faults.crashed.notified() => None,
        };
        if handled.is_some_and(|report| report.failures.is_empty()) {
            acknowledged = true;
            break;
        }
    }
    out.calls = faults.calls();
    out.fired = faults.fired();
    if !acknowledged {
        out.violations.push(format!(
            "not acknowledged after {MAX_DELIVERIES} deliveries: it would end in the events DLQ"
        ));
    }
    let record = status.records.lock().unwrap()[JOB_ID].clone();
    let part_id = courier_core::recipients::part_id(JOB_ID, SES_ID, &[RECIPIENT.into()]);
    let part = status.records.lock().unwrap().get(&part_id).cloned();
    let listed = suppression.entries.lock().unwrap().get(RECIPIENT).cloned();
    let soft = suppression.expiries.lock().unwrap().contains_key(RECIPIENT);
    let mut scheduled: Vec<Requeue> = scheduler.queued.lock().unwrap().clone();
    scheduled.extend(scheduler.waits.lock().unwrap().iter().cloned());
    let letters = letters.letters.lock().unwrap().clone();
    match path.end {
        End::Status(want, suppressed) => {
            if record.status != want {
                out.violations
                    .push(format!("ended {}, expected {want}", record.status));
            }
            let ann = record.recipients.first().map(|r| r.status);
            if ann != RecipientStatus::of_status(want) {
                out.violations.push(format!(
                    "the recipient ended {ann:?}, expected as the job: {want}"
                ));
            }
            if suppressed != (listed.is_some() && !soft) {
                out.violations.push(format!(
                    "suppression {listed:?} (soft: {soft}), expected suppressed: {suppressed}"
                ));
            }
            if !scheduled.is_empty() || !letters.is_empty() {
                out.violations
                    .push("scheduled a copy or wrote a letter".into());
            }
        }
        End::Resent => {
            let next = path.generation + 1;
            if record.status != Status::Deferred
                || record.attempt != next
                || record.resend_of.is_none()
            {
                out.violations.push(format!(
                    "ended {} at generation {} (resend_of {:?}), expected deferred at {next}",
                    record.status, record.attempt, record.resend_of
                ));
            }
            if scheduled.is_empty() {
                out.violations
                    .push("deferred with no copy on its way".into());
            }
            let ann = record.recipients.first().map(|r| r.status);
            if ann != Some(RecipientStatus::BouncedTransient) {
                out.violations.push(format!(
                    "the recipient ended {ann:?}, expected bounced_transient"
                ));
            }
            for copy in &scheduled {
                let generation = parse_body(copy.body.as_bytes()).map(|i| i.attempt);
                if generation.as_ref().ok() != Some(&next) {
                    out.violations
                        .push(format!("a copy of generation {generation:?} scheduled"));
                }
            }
        }
        End::PartResent => {
            let roll: Vec<RecipientStatus> = record.recipients.iter().map(|r| r.status).collect();
            let sent = RecipientStatus::Sent;
            if (record.status, record.attempt) != (Status::SentToProvider, 0)
                || roll != [RecipientStatus::Resent, sent, sent]
            {
                out.violations.push(format!(
                    "the job ended {} at generation {} with its recipients {roll:?}, expected \
                     sent at 0 with Ann resent",
                    record.status, record.attempt
                ));
            }
            match &part {
                Some(p)
                    if p.status == Status::Deferred && p.attempt == 1 && p.copy_due.is_some() =>
                {
                    let store: &dyn PayloadStore = &*payloads;
                    let kept = match p.payload.as_deref() {
                        Some(b) => claim_check::redeem(Some(store), b)
                            .await
                            .ok()
                            .map(|b| parse_body(b.as_bytes())),
                        None => None,
                    };
                    let alone = kept.and_then(Result::ok).is_some_and(|k| {
                        k.job.message_id == part_id
                            && k.job.to == [RECIPIENT]
                            && k.job.cc.is_empty()
                    });
                    if !alone {
                        out.violations
                            .push("the part's record keeps no body to Ann alone".into());
                    }
                }
                other => out.violations.push(format!(
                    "the part's record is {other:?}, expected deferred at 1, due"
                )),
            }
            if scheduled.is_empty() {
                out.violations.push("resent with no copy on its way".into());
            }
            for copy in &scheduled {
                let copy = parse_body(copy.body.as_bytes()).map(|i| (i.job.message_id, i.attempt));
                if copy.as_ref().ok() != Some(&(part_id.clone(), 1)) {
                    out.violations
                        .push(format!("scheduled {copy:?}, expected the part at 1"));
                }
            }
        }
        End::GaveUp => {
            if record.status != Status::DeadLettered {
                out.violations
                    .push(format!("ended {}, expected dead_lettered", record.status));
            }
            let complete = letters
                .iter()
                .any(|l| l.category == DeadLetterCategory::RetriesExhausted && l.payload.is_some());
            if !complete {
                out.violations.push("no complete dead letter".into());
            }
            if !soft {
                out.violations
                    .push("the recipient is not suppressed softly".into());
            }
            if !scheduled.is_empty() {
                out.violations
                    .push("a copy scheduled after giving up".into());
            }
        }
    }
    // Counted at most once, whatever was redelivered.
    let counted: u64 = reputation
        .buckets
        .lock()
        .unwrap()
        .values()
        .map(|c| c.sent + c.delivered + c.bounced + c.complained)
        .sum();
    if counted > 1 {
        out.violations
            .push(format!("the event was counted {counted} times"));
    }
    out
}

#[tokio::test]
async fn every_fault_at_every_point_of_every_events_path_keeps_the_promises() {
    let (mut points, mut runs) = (0, 0);
    let mut violations: Vec<String> = Vec::new();
    for path in &PATHS {
        let clean = run(path, None).await;
        assert!(
            clean.violations.is_empty(),
            "{}: the clean run fails: {:?}",
            path.name,
            clean.violations
        );
        assert!(clean.calls > 0, "{}: no port call", path.name);
        points += clean.calls;
        for at in 0..clean.calls {
            for fault in FAULTS {
                let result = run(path, Some((at, fault))).await;
                runs += 1;
                assert!(result.fired, "{}: call {at} was not reached", path.name);
                violations.extend(
                    result
                        .violations
                        .iter()
                        .map(|v| format!("{} / call {at} / {fault:?}: {v}", path.name)),
                );
            }
        }
    }
    println!(
        "events fault injection: {} paths, {points} injected points, {runs} runs, {} violations",
        PATHS.len(),
        violations.len()
    );
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}
