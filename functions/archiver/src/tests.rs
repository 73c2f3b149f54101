//! The archiver on in-memory ports, with a crash injected at every step.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use courier_core::classify::ErrorClass;
use courier_core::letters::{ArchiveAges, LetterState};
use courier_core::policy::DeadLetterCategory;
use courier_core::ports::{Clock, DeadLetter, LetterIndex};
use courier_devkit::memory::*;

use super::*;

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

struct World {
    archiver: Archiver,
    letters: Arc<MemoryLetterQueue>,
    redrive: Arc<MemoryLetterQueue>,
    index: Arc<MemoryLetterIndex>,
    archive: Arc<MemoryArchive>,
    payloads: Arc<MemoryPayloads>,
    clock: Arc<ManualClock>,
    old_ids: Vec<String>,
}

fn record(id: &str, category: DeadLetterCategory, at: DateTime<Utc>) -> DeadLetter {
    DeadLetter {
        id: id.into(),
        category,
        reason: "r".into(),
        message_id: Some(id.into()),
        campaign_id: Some("c".into()),
        trace_id: None,
        recipients: vec!["a@example.org".into()],
        provider: Some("smtp".into()),
        class: ErrorClass::ContentRejected,
        rule: "rule".into(),
        raw_code: Some("554".into()),
        raw_text: Some("no".into()),
        attempts: 1,
        history: vec![],
        first_failure_at: at,
        last_failure_at: at,
        fingerprint: "f".into(),
        payload: Some("{}".into()),
        payload_base64: None,
    }
}

async fn world() -> World {
    let clock = Arc::new(ManualClock::new(t0()));
    let letters = Arc::new(MemoryLetterQueue::new(clock.clone()));
    let redrive = Arc::new(MemoryLetterQueue::new(clock.clone()));
    let index = Arc::new(MemoryLetterIndex::default());
    let archive = Arc::new(MemoryArchive::default());
    let payloads = Arc::new(MemoryPayloads::default());
    let categories = [
        DeadLetterCategory::Poison,
        DeadLetterCategory::NeedsReview,
        DeadLetterCategory::InvalidJob,
    ];
    let mut old_ids = Vec::new();
    for i in 0..25 {
        let category = categories[i % 3];
        // 20 old (past every age), 5 young (1 day).
        let at = if i < 20 {
            t0() - chrono::Duration::days(20 + (i as i64 % 2))
        } else {
            t0() - chrono::Duration::days(1)
        };
        let r = record(&format!("l{i}"), category, at);
        // The send function indexes the letter, then queues it.
        index.put_new(&indexed(r.clone())).await.unwrap();
        letters.push(serde_json::to_string(&r).unwrap());
        if i < 20 {
            old_ids.push(r.id.clone());
        }
    }
    for i in 0..3 {
        redrive.push(format!(r#"{{"version":1,"message_id":"raw-{i}"}}"#));
    }
    let archiver = Archiver {
        queues: vec![
            (QueueKind::Letters, letters.clone()),
            (QueueKind::Redrive, redrive.clone()),
        ],
        index: index.clone(),
        archive: archive.clone(),
        payloads: payloads.clone(),
        ages: ArchiveAges::default(),
        clock: clock.clone(),
        margin: Duration::from_secs(10),
        hide: Duration::from_secs(300),
    };
    World {
        archiver,
        letters,
        redrive,
        index,
        archive,
        payloads,
        clock,
        old_ids,
    }
}

impl World {
    /// Every letter id in every archive object, with how often it appears.
    fn archived(&self) -> BTreeMap<String, usize> {
        let mut seen = BTreeMap::new();
        for bytes in self.archive.objects.lock().unwrap().values() {
            for l in decode(bytes).unwrap() {
                *seen.entry(l.letter_id).or_insert(0) += 1;
            }
        }
        seen
    }

    fn deadline(&self) -> DateTime<Utc> {
        self.clock.now() + chrono::Duration::seconds(300)
    }
}

#[tokio::test]
async fn old_letters_are_archived_once_young_ones_wait_and_raw_ones_are_indexed() {
    let w = world().await;
    let report = w.archiver.run("run1", w.deadline()).await.unwrap();
    assert_eq!(report.archived, 20);
    assert_eq!(report.indexed_raw, 3);
    let archived = w.archived();
    assert_eq!(archived.keys().cloned().collect::<Vec<_>>().len(), 20);
    assert!(archived.values().all(|n| *n == 1));
    assert!(w.old_ids.iter().all(|id| archived.contains_key(id)));
    // Objects are partitioned by category and day, and compressed.
    for key in w.archive.objects.lock().unwrap().keys() {
        assert!(
            key.starts_with("dead-letters/category=")
                && key.contains("/dt=")
                && key.ends_with(".jsonl.gz"),
            "{key}"
        );
    }
    // Young letters and raw redrives stay queued (hidden), indexed as live.
    assert_eq!(w.letters.len(), 5);
    assert_eq!(w.redrive.len(), 3);
    let raw = w.index.get_many(&["redriven#q0".to_owned()]).await.unwrap();
    assert_eq!(
        (raw[0].record.category, raw[0].state),
        (DeadLetterCategory::Redriven, LetterState::Live)
    );
    assert_eq!(raw[0].record.message_id.as_deref(), Some("raw-0"));
    // A later run, after the young ones aged, archives them too; nothing twice.
    w.clock.advance(15 * 86_400);
    w.letters.reveal_all();
    w.redrive.reveal_all();
    let report = w.archiver.run("run2", w.deadline()).await.unwrap();
    assert_eq!(report.archived, 8);
    assert_eq!(w.archived().len(), 28);
    assert!(w.archived().values().all(|n| *n == 1));
    assert!(w.letters.is_empty() && w.redrive.is_empty());
}

#[tokio::test]
async fn replayed_and_discarded_letters_are_dropped_not_archived() {
    let w = world().await;
    w.index
        .transition(
            "l0",
            LetterState::Live,
            LetterState::Replayed,
            None,
            Some("replayed by ann"),
        )
        .await
        .unwrap();
    w.index
        .transition(
            "l1",
            LetterState::Live,
            LetterState::Discarded,
            None,
            Some("discarded by bob"),
        )
        .await
        .unwrap();
    let report = w.archiver.run("run1", w.deadline()).await.unwrap();
    assert_eq!(report.dropped, 2);
    assert_eq!(report.archived, 18);
    assert!(!w.archived().contains_key("l0") && !w.archived().contains_key("l1"));
}

#[tokio::test]
async fn a_letter_claimed_by_a_replay_is_never_archived() {
    // GIVEN an old letter a replay has claimed (running, or stopped before it finished)
    let w = world().await;
    w.index
        .transition(
            "l0",
            LetterState::Live,
            LetterState::Replaying,
            None,
            Some("replay started by ann"),
        )
        .await
        .unwrap();
    // WHEN the archiver runs
    let report = w.archiver.run("run1", w.deadline()).await.unwrap();
    // THEN it is neither archived nor deleted: hidden for an hour, counted, still replaying
    assert_eq!((report.replaying, report.archived), (1, 19));
    assert!(!w.archived().contains_key("l0"));
    assert_eq!(w.letters.len(), 6, "5 young letters and the claimed one");
    let l0 = &w.index.get_many(&["l0".to_owned()]).await.unwrap()[0];
    assert_eq!(l0.state, LetterState::Replaying);
    // and once the replay marks it, the next run drops the queue copy
    w.index
        .transition(
            "l0",
            LetterState::Replaying,
            LetterState::Replayed,
            None,
            None,
        )
        .await
        .unwrap();
    w.clock.advance(2 * 3600);
    let report = w.archiver.run("run2", w.deadline()).await.unwrap();
    assert_eq!((report.dropped, report.archived), (1, 0));
}

/// Crashes the first run at the k-th call of one kind, then lets a clean run finish: every old
/// letter must end archived exactly once, and none may be missing from both queue and archive.
#[tokio::test]
async fn a_crash_at_any_step_loses_nothing_and_archives_nothing_twice() {
    // transitions: 2 per archived letter plus recoveries; puts: one per object; deletes: one per batch
    let cases: Vec<(&str, usize)> = (0..45)
        .map(|k| ("transition", k))
        .chain((0..8).map(|k| ("put", k)))
        .chain((0..4).map(|k| ("delete", k)))
        .collect();
    let mut crashed = 0;
    for (kind, k) in cases {
        let w = world().await;
        match kind {
            "transition" => w.index.fail_transitions.set_after(k, 1),
            "put" => w.archive.fail_puts.set_after(k, 1),
            _ => w.letters.fail_deletes.set_after(k, 1),
        }
        let first = w.archiver.run("run1", w.deadline()).await;
        crashed += usize::from(first.is_err());
        // The crashed run's hidden copies reappear after their visibility timeout.
        w.clock.advance(600);
        w.letters.reveal_all();
        w.redrive.reveal_all();
        w.archiver
            .run("run2", w.deadline())
            .await
            .unwrap_or_else(|e| panic!("{kind} {k}: second run failed: {e}"));
        let archived = w.archived();
        for id in &w.old_ids {
            assert_eq!(
                archived.get(id),
                Some(&1),
                "{kind} crash at {k} (first run: {first:?}): {id} archived {:?} times",
                archived.get(id)
            );
        }
        let states: Vec<LetterState> = w
            .index
            .get_many(&w.old_ids)
            .await
            .unwrap()
            .iter()
            .map(|l| l.state)
            .collect();
        assert!(
            states.iter().all(|s| *s == LetterState::Archived),
            "{kind} {k}: {states:?}"
        );
        assert_eq!(
            w.letters.len(),
            5,
            "{kind} {k}: only the young letters remain queued"
        );
    }
    assert!(crashed >= 45, "only {crashed} injected crashes took effect");
}

#[tokio::test]
async fn a_run_stops_before_the_deadline_and_leaves_the_rest() {
    let w = world().await;
    let report = w
        .archiver
        .run("run1", w.clock.now() + chrono::Duration::seconds(5))
        .await
        .unwrap();
    assert!(report.out_of_time);
    assert_eq!(report.archived, 0);
    assert_eq!(w.letters.len(), 25);
}

#[tokio::test]
async fn a_letter_indexed_without_its_payload_is_archived_with_the_queue_copys() {
    // GIVEN a letter whose index entry lost its payload (too large for a DynamoDB item) while
    // the queue copy holds it whole
    let w = world().await;
    let at = t0() - chrono::Duration::days(30);
    let mut full = record("big", DeadLetterCategory::Poison, at);
    full.payload = Some(format!("{{\"text\":\"{}\"}}", "x".repeat(400 * 1024)));
    let mut slim = full.clone();
    slim.payload = None;
    w.index.put_new(&indexed(slim)).await.unwrap();
    w.letters.push(serde_json::to_string(&full).unwrap());
    // WHEN it is archived
    w.archiver.run("run-big", w.deadline()).await.unwrap();
    // THEN the archive holds the whole payload, and only then is the queue copy gone
    let archived: Vec<IndexedLetter> = w
        .archive
        .objects
        .lock()
        .unwrap()
        .values()
        .flat_map(|bytes| decode(bytes).unwrap())
        .filter(|l| l.letter_id == "big")
        .collect();
    assert_eq!(archived.len(), 1);
    assert_eq!(archived[0].record.payload, full.payload);
    let indexed = w.index.get_many(&["big".to_owned()]).await.unwrap();
    assert_eq!(indexed[0].state, LetterState::Archived);
}

#[tokio::test]
async fn an_archived_letters_attachments_are_retained_as_long_as_the_archive() {
    use courier_core::job::AttachmentRef;
    // GIVEN two old letters whose jobs attach files: one as the producer wrote it (a file in the
    // bucket and one already gone), one a retry envelope naming the same file
    let w = world().await;
    let at = t0() - chrono::Duration::days(12);
    let kept = AttachmentRef::of("a.pdf", "application/pdf", b"%PDF");
    let gone = AttachmentRef::of("b.pdf", "application/pdf", b"%PDF-gone");
    w.payloads
        .objects
        .lock()
        .unwrap()
        .insert(kept.key.clone(), b"%PDF".to_vec());
    let job =
        serde_json::json!({"version": 1, "message_id": "with-files", "attachments": [kept, gone]});
    let mut first = record("files-1", DeadLetterCategory::NeedsReview, at);
    first.payload = Some(job.to_string());
    let mut retry = record("files-2", DeadLetterCategory::NeedsReview, at);
    retry.payload = Some(
        serde_json::json!({"courier_envelope": 1, "attempt": 1, "job": {"attachments": [kept]}})
            .to_string(),
    );
    for r in [&first, &retry] {
        w.index.put_new(&indexed(r.clone())).await.unwrap();
        w.letters.push(serde_json::to_string(r).unwrap());
    }
    // AND a first run stopped by the bucket failing on the first copy
    w.payloads.fail_copies.set(1);
    assert!(w.archiver.run("run1", w.deadline()).await.is_err());
    assert!(
        !w.payloads
            .objects
            .lock()
            .unwrap()
            .contains_key(&kept.retained_key())
    );
    // WHEN the next run works them
    w.clock.advance(600);
    w.letters.reveal_all();
    w.redrive.reveal_all();
    let report = w.archiver.run("run2", w.deadline()).await.unwrap();
    // THEN the file in the bucket is retained (once per letter naming it) and the gone one is
    // counted, and both letters are archived all the same
    assert_eq!(
        (report.attachments_retained, report.attachments_missing),
        (2, 1)
    );
    let objects = w.payloads.objects.lock().unwrap().clone();
    assert_eq!(
        objects.get(&kept.retained_key()).map(Vec::as_slice),
        Some(&b"%PDF"[..])
    );
    assert!(!objects.contains_key(&gone.retained_key()));
    let archived = w.archived();
    assert_eq!(
        (archived.get("files-1"), archived.get("files-2")),
        (Some(&1), Some(&1))
    );
}

#[tokio::test]
async fn the_handler_reports_the_run_as_json() {
    let w = world().await;
    let mut context = lambda_runtime::Context::default();
    context.request_id = "req-1".into();
    context.deadline = u64::try_from(w.deadline().timestamp_millis()).unwrap();
    let archiver = Arc::new(w.archiver);
    let out = function_handler(
        &archiver,
        lambda_runtime::LambdaEvent::new(serde_json::json!({}), context),
    )
    .await
    .unwrap();
    assert_eq!(out["archived"], 20);
    assert_eq!(out["indexed_raw"], 3);
    assert_eq!(
        (&out["attachments_retained"], &out["attachments_missing"]),
        (&serde_json::json!(0), &serde_json::json!(0))
    );
    assert_eq!(out["out_of_time"], false);
}

#[test]
fn archives_round_trip() {
    let l = indexed(record("x", DeadLetterCategory::Poison, t0()));
    let back = decode(&encode(std::slice::from_ref(&l)).unwrap()).unwrap();
    assert_eq!(back.len(), 1);
    assert_eq!(
        (back[0].letter_id.as_str(), back[0].state),
        ("x", LetterState::Archived)
    );
    assert_eq!(back[0].record, l.record);
}
