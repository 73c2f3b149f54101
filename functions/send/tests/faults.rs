//! Exhaustive fault injection of the send path. For one job on each path (first-try success,
//! a transient failure, a long wait, a permanent bounce, a content rejection, an invalid job, a
//! suppressed recipient, a duplicate copy, a stale copy, an ambiguous send, all through SMTP;
//! success and an ambiguous send through SES, whose payload must be kept), every port call in
//! turn fails before its effect, fails after it (the write happened, the answer was lost),
//! crashes the invocation before it, or crashes it after it; then the copies are delivered as
//! SQS would (redelivery after the visibility timeout, delays, the state machine's waits) until
//! none is left. After every run:
//!
//! - at most one provider acceptance per job, unless `unknown` was durably recorded after the
//!   earlier acceptance and before the next provider call; and no SES call before the body of
//!   its generation, which a transient bounce is sent again from, is on the record (SES's Send
//!   event may record the send before the send function, or instead of it);
//! - the job ends in exactly one home: a final status, or a dead letter whose payload is
//!   complete (never both a sent status and a letter, never the redrive DLQ);
//! - no copy is acknowledged before the job's next home is durable (a final status, a dead
//!   letter, or another copy on its way).
//!
//! It prints the number of injected points and runs; every one must hold.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers fail the test loudly

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use courier_core::breaker::BreakerConfig;
use courier_core::classify::{ErrorClass, Verdict, classify_smtp};
use courier_core::ports::{
    Clock, Mailer, OutgoingEmail, Provider, Receipt, Requeue, RetryScheduler, SendFailure,
    StoreError, SuppressionList,
};
use courier_core::random::SeededRandom;
use courier_core::status::Status;
use courier_devkit::faults::{FAULTS, Fault, Faults, Faulty, Gate};
use courier_devkit::memory::*;
use courier_send::{Pipeline, RecordIn, SendConfig};

/// SQS as the driver sees it: copies with the time they become visible and their receives.
#[derive(Debug, Clone)]
struct Copy {
    sqs_id: String,
    body: String,
    visible_at: DateTime<Utc>,
    receives: u32,
}

#[derive(Default)]
struct Queue {
    copies: Mutex<Vec<Copy>>,
    next_id: AtomicUsize,
    redriven: Mutex<Vec<Copy>>,
}

impl Queue {
    fn push(&self, body: String, visible_at: DateTime<Utc>) {
        let n = self.next_id.fetch_add(1, Ordering::SeqCst);
        self.copies.lock().unwrap().push(Copy {
            sqs_id: format!("sqs-{n}"),
            body,
            visible_at,
            receives: 0,
        });
    }
}

/// The retry scheduler onto the simulated queue: a re-enqueue is a copy after its delay; a
/// started wait (the state machine, durable once started) is a copy after its delay too.
struct QueueScheduler {
    queue: Arc<Queue>,
    clock: Arc<ManualClock>,
}

impl QueueScheduler {
    fn put(&self, item: &Requeue) {
        let at = self.clock.now() + chrono::Duration::seconds(item.delay_secs as i64);
        self.queue.push(item.body.clone(), at);
    }
}

#[async_trait::async_trait]
impl RetryScheduler for QueueScheduler {
    async fn enqueue(&self, items: &[Requeue]) -> Vec<Result<(), StoreError>> {
        items.iter().for_each(|i| self.put(i));
        items.iter().map(|_| Ok(())).collect()
    }

    async fn start_wait(&self, item: &Requeue) -> Result<(), StoreError> {
        self.put(item);
        Ok(())
    }
}

/// What the provider answers to each call, in turn (the last repeats).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// 250: accepted.
    Accept,
    /// Accepted, and the answer lost on the way back (an ambiguous failure).
    AcceptLost,
    /// An SMTP reply refusing the message.
    Refuse(&'static str),
}

/// The provider, with the acceptance ledger the invariants read.
struct FaultyMailer {
    provider: Provider,
    answers: Vec<Answer>,
    calls: AtomicUsize,
    faults: Arc<Faults>,
    status: Arc<MemoryStatusStore>,
    clock: Arc<ManualClock>,
    /// Times the provider accepted the message.
    accepted: Mutex<Vec<DateTime<Utc>>>,
    violations: Mutex<Vec<String>>,
}

impl FaultyMailer {
    fn accept(&self) {
        self.accepted.lock().unwrap().push(self.clock.now());
    }

    /// A provider call after an earlier acceptance needs `unknown` recorded since then.
    fn check_before_call(&self, message_id: &str) {
        let accepted = self.accepted.lock().unwrap();
        let Some(last) = accepted.last() else { return };
        let record = self.status.records.lock().unwrap().get(message_id).cloned();
        let unknown_since = record.is_some_and(|r| {
            r.history
                .iter()
                .any(|h| h.status == Status::Unknown && h.at >= *last)
        });
        if !unknown_since {
            self.violations.lock().unwrap().push(format!(
                "provider called again after an acceptance at {last} without unknown recorded"
            ));
        }
    }

    /// SES may take the mail in this call, and SES's Send event may then record the send
    /// before (or instead of) the send function: the body a transient bounce is sent again from
    /// must be on the record already, and be this generation's.
    fn check_body_kept(&self, message_id: &str) {
        let kept = self
            .status
            .records
            .lock()
            .unwrap()
            .get(message_id)
            .is_some_and(|r| {
                r.payload.as_deref().is_some_and(|body| {
                    courier_core::envelope::parse_body(body.as_bytes())
                        .is_ok_and(|kept| kept.attempt == r.attempt)
                })
            });
        if self.provider == Provider::Ses && !kept {
            self.violations.lock().unwrap().push(
                "SES called without this generation's body on the record to resend from".into(),
            );
        }
    }
}

fn lost() -> SendFailure {
    SendFailure {
        verdict: Verdict::local(
            ErrorClass::Network,
            "connection-lost",
            "the connection dropped after DATA",
        ),
        ambiguous: true,
        source: None,
    }
}

fn refused() -> SendFailure {
    SendFailure {
        verdict: Verdict::local(
            ErrorClass::Network,
            "connection-refused",
            "connection refused",
        ),
        ambiguous: false,
        source: None,
    }
}

#[async_trait::async_trait]
impl Mailer for FaultyMailer {
    fn provider(&self) -> Provider {
        self.provider
    }

    async fn send(&self, email: &OutgoingEmail) -> Result<Receipt, SendFailure> {
        self.check_before_call(&email.message_id);
        self.check_body_kept(&email.message_id);
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let answer = self.answers[n.min(self.answers.len() - 1)];
        let receipt = Receipt::new(format!("smtp-{n}"));
        let effect = || match answer {
            Answer::Accept => {
                self.accept();
                Ok(receipt.clone())
            }
            Answer::AcceptLost => {
                self.accept();
                Err(lost())
            }
            Answer::Refuse(reply) => Err(SendFailure {
                verdict: classify_smtp(reply),
                ambiguous: false,
                source: None,
            }),
        };
        match self.faults.gate() {
            Gate::Go => effect(),
            // Never reached the server.
            Gate::Fail => Err(refused()),
            // The server acted; its answer was lost.
            Gate::FailAfter => match effect() {
                Ok(_) => Err(lost()),
                Err(e) => Err(e),
            },
            Gate::Crash => self.faults.crash().await,
            Gate::CrashAfter => {
                let _ = effect();
                self.faults.crash().await
            }
        }
    }
}

/// One job's path.
#[derive(Debug, Clone, Copy)]
struct Path {
    name: &'static str,
    provider: Provider,
    answers: &'static [Answer],
    /// Copies on the queue at the start: (generation-0 body, visible after seconds).
    copies: &'static [i64],
    suppressed: bool,
    invalid: bool,
    /// What happens to the job once its record is `deferred` for a later generation: the copy
    /// it waits for is dead-lettered before its claim, and the record must end `dead_lettered`
    /// with it (what `dlq replay` reopens).
    when_deferred: Option<Spoil>,
    /// The final statuses the job may reach (empty: no status record, a dead letter only).
    end: &'static [Status],
}

/// What makes a job's waiting copy a dead letter before its claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spoil {
    /// The operator blocklists it (`courierctl dlq discard --blocklist`).
    Blocklist,
    /// A deploy makes its copies invalid (a job version it no longer reads); Courier's seal
    /// still verifies.
    Invalidate,
}

const GREYLISTED: &str = "450 4.2.0 <r@x>: Recipient address rejected: Greylisted";
const BUSY: &str = "421 4.7.0 Too many connections, slow down";
const UNKNOWN_USER: &str = "550 5.1.1 <r@x>: Recipient address rejected: User unknown";
const SPAM: &str = "554 5.7.1 <r@x>: Recipient address rejected: message rejected by policy";

const PATHS: &[Path] = &[
    Path {
        provider: Provider::Smtp,
        name: "first-try success",
        answers: &[Answer::Accept],
        copies: &[0],
        suppressed: false,
        invalid: false,
        when_deferred: None,
        end: &[Status::SentToProvider],
    },
    Path {
        provider: Provider::Smtp,
        name: "transient failure, then sent",
        answers: &[Answer::Refuse(BUSY), Answer::Accept],
        copies: &[0],
        suppressed: false,
        invalid: false,
        when_deferred: None,
        end: &[Status::SentToProvider],
    },
    Path {
        provider: Provider::Smtp,
        name: "greylisted: a wait through the state machine, then sent",
        answers: &[Answer::Refuse(GREYLISTED), Answer::Accept],
        copies: &[0],
        suppressed: false,
        invalid: false,
        when_deferred: None,
        end: &[Status::SentToProvider],
    },
    Path {
        provider: Provider::Smtp,
        name: "permanent bounce",
        answers: &[Answer::Refuse(UNKNOWN_USER)],
        copies: &[0],
        suppressed: false,
        invalid: false,
        when_deferred: None,
        // A crash between the suppression and the status write: the redelivered copy finds
        // the recipient suppressed (one send, the recipient protected, the bounce in the
        // suppression's reason).
        end: &[Status::BouncedPermanent, Status::Suppressed],
    },
    Path {
        provider: Provider::Smtp,
        name: "content rejected: dead letter",
        answers: &[Answer::Refuse(SPAM)],
        copies: &[0],
        suppressed: false,
        invalid: false,
        when_deferred: None,
        end: &[Status::DeadLettered],
    },
    Path {
        provider: Provider::Smtp,
        name: "invalid job: dead letter",
        answers: &[Answer::Accept],
        copies: &[0],
        suppressed: false,
        invalid: true,
        when_deferred: None,
        end: &[],
    },
    Path {
        provider: Provider::Smtp,
        name: "suppressed recipient",
        answers: &[Answer::Accept],
        copies: &[0],
        suppressed: true,
        invalid: false,
        when_deferred: None,
        end: &[Status::Suppressed],
    },
    Path {
        provider: Provider::Smtp,
        name: "duplicate copy",
        answers: &[Answer::Accept],
        copies: &[0, 0],
        suppressed: false,
        invalid: false,
        when_deferred: None,
        end: &[Status::SentToProvider],
    },
    Path {
        provider: Provider::Smtp,
        name: "stale copy after a retry",
        answers: &[Answer::Refuse(BUSY), Answer::Accept],
        copies: &[0, 400],
        suppressed: false,
        invalid: false,
        when_deferred: None,
        end: &[Status::SentToProvider],
    },
    Path {
        provider: Provider::Smtp,
        name: "ambiguous send",
        answers: &[Answer::AcceptLost, Answer::Accept],
        copies: &[0],
        suppressed: false,
        invalid: false,
        when_deferred: None,
        end: &[Status::SentToProvider],
    },
    Path {
        provider: Provider::Ses,
        name: "SES: first-try success (the payload kept for a resend)",
        answers: &[Answer::Accept],
        copies: &[0],
        suppressed: false,
        invalid: false,
        when_deferred: None,
        end: &[Status::SentToProvider],
    },
    Path {
        provider: Provider::Ses,
        name: "SES: ambiguous send (a 5xx after acceptance)",
        answers: &[Answer::AcceptLost, Answer::Accept],
        copies: &[0],
        suppressed: false,
        invalid: false,
        when_deferred: None,
        end: &[Status::SentToProvider],
    },
    Path {
        provider: Provider::Smtp,
        name: "a retry copy blocklisted before its claim: dead letter, the record dead_lettered",
        answers: &[Answer::Refuse(BUSY), Answer::Accept],
        copies: &[0],
        suppressed: false,
        invalid: false,
        when_deferred: Some(Spoil::Blocklist),
        // Sent: a fault kept the record from ever waiting for a later generation (a crash
        // mid-send: `unknown`, then the copy after the grace window; a lease released at
        // generation 0, whose copy then claims), so the job was never blocklisted. (Blocklisted
        // while `deferred` at generation 0, the record would stay `deferred` next to the letter:
        // a generation-0 copy may be a producer's duplicate, so it never speaks for the record.)
        end: &[Status::DeadLettered, Status::SentToProvider],
    },
    Path {
        provider: Provider::Smtp,
        name: "a retry copy that no longer validates: dead letter, the record dead_lettered",
        answers: &[Answer::Refuse(BUSY), Answer::Accept],
        copies: &[0],
        suppressed: false,
        invalid: false,
        when_deferred: Some(Spoil::Invalidate),
        // Sent: as above, the record never waited for a later generation.
        end: &[Status::DeadLettered, Status::SentToProvider],
    },
];

const JOB_ID: &str = "fault-job";
const RECIPIENT: &str = "Reader <r@example.org>";
/// Visibility timeout of the send queue (the template's default for the send function).
const VISIBILITY_SECS: i64 = 90;
/// SQS moves a copy to the redrive DLQ after this many receives.
const MAX_RECEIVES: u32 = 10;

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

fn body(path: &Path) -> String {
    if path.invalid {
        return format!(r#"{{"version":1,"message_id":"{JOB_ID}","to":[]}}"#);
    }
    serde_json::json!({
        "version": 1, "message_id": JOB_ID, "campaign_id": "faults", "from": "shop@example.com",
        "to": [RECIPIENT], "content": {"subject": "Hi", "text": "Hello"}
    })
    .to_string()
}

/// What one run found.
#[derive(Debug, Default)]
struct Run {
    violations: Vec<String>,
    /// Port calls made (of a clean run: the points to inject at).
    calls: usize,
    fired: bool,
    /// The job was spoiled on the way ([`Path::when_deferred`]).
    spoiled: bool,
}

async fn run(path: &Path, plan: Option<(usize, Fault)>) -> Run {
    let clock = Arc::new(ManualClock::new(t0()));
    let faults = Arc::new(Faults::default());
    if let Some((at, fault)) = plan {
        faults.arm(at, fault);
    }
    let suppression = Arc::new(MemorySuppressionList::default());
    if path.suppressed {
        suppression
            .suppress("r@example.org", "complaint", t0())
            .await
            .unwrap();
    }
    let status = Arc::new(MemoryStatusStore {
        suppression: Some(suppression.clone()),
        ..MemoryStatusStore::default()
    });
    let letters = Arc::new(MemoryDeadLetters::default());
    let poison = Arc::new(MemoryPoisonList::default());
    let queue = Arc::new(Queue::default());
    let mailer = Arc::new(FaultyMailer {
        provider: path.provider,
        answers: path.answers.to_vec(),
        calls: AtomicUsize::new(0),
        faults: faults.clone(),
        status: status.clone(),
        clock: clock.clone(),
        accepted: Mutex::new(Vec::new()),
        violations: Mutex::new(Vec::new()),
    });
    let pipeline = Arc::new(Pipeline {
        status: Arc::new(Faulty::new(status.clone(), faults.clone())),
        mailers: vec![mailer.clone()],
        // Sealed as the wiring seals: a copy back from the queue is trusted only if sealed.
        scheduler: courier_devkit::memory::sealing(Arc::new(Faulty::new(
            Arc::new(QueueScheduler {
                queue: queue.clone(),
                clock: clock.clone(),
            }),
            faults.clone(),
        ))),
        dead_letters: Arc::new(Faulty::new(letters.clone(), faults.clone())),
        payloads: Arc::new(courier_devkit::memory::MemoryPayloads::default()),
        suppression: Arc::new(Faulty::new(suppression.clone(), faults.clone())),
        poison: Arc::new(Faulty::new(poison.clone(), faults.clone())),
        templates: Arc::new(MemoryTemplates::default()),
        // Breakers that never open: one failure must not change the path.
        breakers: courier_send::breakers::Breakers::new(
            Arc::new(MemoryBreakerStore::default()),
            BreakerConfig {
                min_calls: 1_000,
                ..BreakerConfig::default()
            },
            std::time::Duration::from_secs(0),
        ),
        governor: courier_send::governor::Governor::new(
            Arc::new(MemorySendSchedule::default()),
            BTreeMap::new(),
        ),
        policy: courier_core::policy::RetryPolicy::default(),
        clock: clock.clone(),
        config: SendConfig::default(),
        rng: Mutex::new(SeededRandom::new(7)),
        sightings: Arc::new(MemorySightings::default()),
        new_codes: Mutex::new(Vec::new()),
        sealing: courier_send::Sealing::new(courier_devkit::memory::test_seal_keys()),
        acceptances: Default::default(),
        live: None,
        attachment_budget: Default::default(),
        unsubscribing: Default::default(),
        outcomes: None,
    });
    for &after in path.copies {
        queue.push(body(path), t0() + chrono::Duration::seconds(after));
    }
    let mut out = Run::default();
    let mut invocations = 0;
    loop {
        // The earliest visible copy.
        let next = {
            let mut copies = queue.copies.lock().unwrap();
            copies.sort_by_key(|c| c.visible_at);
            if copies.is_empty() {
                break;
            }
            copies.remove(0)
        };
        invocations += 1;
        if invocations > 200 {
            out.violations.push("the job never settled".into());
            break;
        }
        let mut copy = next;
        if let Some(spoil) = path.when_deferred
            && !out.spoiled
            && waits_for_a_later_copy(&status)
        {
            match spoil {
                Spoil::Blocklist => {
                    let print = courier_core::envelope::job_fingerprint(&body(path));
                    poison.fingerprints.lock().unwrap().insert(print);
                }
                Spoil::Invalidate => {
                    let keys = courier_devkit::memory::test_seal_keys()
                        .keys()
                        .await
                        .unwrap();
                    let spoiled = |body: &str| {
                        let changed = body.replace(r#""version":1"#, r#""version":2"#);
                        assert_ne!(changed, body, "a copy without the job's version");
                        courier_core::seal::seal(&changed, &keys)
                    };
                    copy.body = spoiled(&copy.body);
                    for other in queue.copies.lock().unwrap().iter_mut() {
                        other.body = spoiled(&other.body);
                    }
                }
            }
            out.spoiled = true;
        }
        let now = clock.now();
        if copy.visible_at > now {
            clock.advance((copy.visible_at - now).num_seconds().max(0) + 1);
        }
        copy.receives += 1;
        if copy.receives > MAX_RECEIVES {
            out.violations
                .push(format!("{} moved to the redrive DLQ", copy.sqs_id));
            queue.redriven.lock().unwrap().push(copy);
            continue;
        }
        let deadline = clock.now() + chrono::Duration::seconds(60);
        let record = RecordIn {
            sqs_message_id: copy.sqs_id.clone(),
            body: copy.body.clone(),
            trace_header: None,
        };
        let handled = {
            let pipeline = pipeline.clone();
            let request = format!("req-{invocations}");
            tokio::select! {
                report = async move { pipeline.handle_records(vec![record], deadline, &request).await } => Some(report),
                () = faults.crashed.notified() => None,
            }
        };
        let acknowledged = handled.is_some_and(|report| report.failures.is_empty());
        if acknowledged {
            // The copy is deleted: the job's next home must be durable now.
            if !has_home(path, &status, &letters, &queue) {
                out.violations.push(format!(
                    "{} acknowledged with no durable next home (status {:?})",
                    copy.sqs_id,
                    status_of(&status)
                ));
            }
        } else {
            copy.visible_at = clock.now() + chrono::Duration::seconds(VISIBILITY_SECS);
            queue.copies.lock().unwrap().push(copy);
        }
    }
    // The end: exactly one home, as the path expects.
    let end = status_of(&status);
    let complete_letters = letters
        .letters
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.payload.is_some() || l.payload_base64.is_some())
        .count();
    let lettered = end.is_none_or(|s| s == Status::DeadLettered);
    if lettered && complete_letters == 0 {
        out.violations
            .push("dead-lettered without a complete letter".into());
    }
    if !lettered && complete_letters > 0 {
        out.violations
            .push(format!("ended {end:?} and also dead-lettered"));
    }
    let status_ok = match end {
        None => path.end.is_empty(),
        Some(s) => path.end.contains(&s),
    };
    if !status_ok {
        out.violations
            .push(format!("ended {end:?}, expected one of {:?}", path.end));
    }
    if out.spoiled && end != Some(Status::DeadLettered) {
        out.violations.push(format!(
            "spoiled while its record waited, yet it ended {end:?} (not what `dlq replay` reopens)"
        ));
    }
    // An SES send keeps its payload with the record, for a resend after a transient bounce.
    let kept = status
        .records
        .lock()
        .unwrap()
        .get(JOB_ID)
        .is_some_and(|r| r.payload.is_some());
    if path.provider == Provider::Ses && end == Some(Status::SentToProvider) && !kept {
        out.violations
            .push("sent through SES without the payload kept".into());
    }
    out.violations
        .extend(mailer.violations.lock().unwrap().iter().cloned());
    out.calls = faults.calls();
    out.fired = faults.fired();
    out
}

/// The job is `deferred` for a later generation's copy (a retry's, sealed): the copies whose
/// dead letter before the claim the record follows (a generation-0 copy may be a producer's
/// duplicate, which leaves the record as it is).
fn waits_for_a_later_copy(status: &MemoryStatusStore) -> bool {
    let records = status.records.lock().unwrap();
    records
        .get(JOB_ID)
        .is_some_and(|r| r.status == Status::Deferred && r.attempt > 0)
}

fn status_of(status: &MemoryStatusStore) -> Option<Status> {
    status.records.lock().unwrap().get(JOB_ID).map(|r| r.status)
}

/// A durable next home: a final status, a complete dead letter, or another copy on its way.
fn has_home(
    path: &Path,
    status: &MemoryStatusStore,
    letters: &MemoryDeadLetters,
    queue: &Queue,
) -> bool {
    let settled = status_of(status).is_some_and(|s| {
        matches!(
            s,
            Status::SentToProvider
                | Status::BouncedPermanent
                | Status::Suppressed
                | Status::DeadLettered
        )
    });
    let lettered = letters.letters.lock().unwrap().iter().any(|l| {
        l.message_id.as_deref() == Some(JOB_ID)
            && (l.payload.is_some() || l.payload_base64.is_some())
    });
    let copy_coming = !queue.copies.lock().unwrap().is_empty();
    let _ = path;
    settled || lettered || copy_coming
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_at_every_port_call_of_every_path_keeps_both_promises() {
    let mut points = 0;
    let mut runs = 0;
    let mut failures: Vec<String> = Vec::new();
    for path in PATHS {
        let clean = run(path, None).await;
        assert!(
            clean.violations.is_empty(),
            "{}: the clean run fails: {:?}",
            path.name,
            clean.violations
        );
        assert_eq!(
            clean.spoiled,
            path.when_deferred.is_some(),
            "{}: the clean run's spoiling",
            path.name
        );
        for at in 0..clean.calls {
            points += 1;
            for fault in FAULTS {
                runs += 1;
                let found = run(path, Some((at, fault))).await;
                assert!(found.fired, "{}: call {at} never reached", path.name);
                for v in found.violations {
                    failures.push(format!("{} / call {at} / {fault:?}: {v}", path.name));
                }
            }
        }
    }
    println!(
        "fault injection: {} paths, {points} injected points, {runs} runs, {} violations",
        PATHS.len(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {runs} runs broke a promise:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
