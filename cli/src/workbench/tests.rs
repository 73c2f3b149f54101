use super::*;
use courier_core::classify::ErrorClass;
use courier_core::policy::DeadLetterCategory;
use courier_core::ports::{DeadLetter, JobRecord};
use courier_core::status::Status;
use courier_devkit::memory::*;

fn t() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

fn letter(
    id: &str,
    message_id: Option<&str>,
    category: DeadLetterCategory,
    payload: Option<&str>,
) -> IndexedLetter {
    IndexedLetter {
        letter_id: id.into(),
        state: LetterState::Live,
        dead_lettered_at: t() - chrono::Duration::hours(3),
        archive_key: None,
        record: DeadLetter {
            id: id.into(),
            category,
            reason: "554 5.7.1 rejected by policy".into(),
            message_id: message_id.map(str::to_owned),
            campaign_id: Some("spring".into()),
            trace_id: None,
            recipients: vec![],
            provider: Some("smtp".into()),
            class: ErrorClass::ContentRejected,
            rule: "r".into(),
            raw_code: None,
            raw_text: None,
            attempts: 1,
            history: vec![],
            first_failure_at: t(),
            last_failure_at: t(),
            fingerprint: "f".into(),
            payload: payload.map(str::to_owned),
            payload_base64: None,
        },
        audit: vec![],
    }
}

/// Puts job `m1` with `status` and generation `attempt` in the store.
fn job_in(store: &MemoryStatusStore, status: Status, attempt: u32) {
    store.records.lock().unwrap().insert(
        "m1".into(),
        JobRecord {
            message_id: "m1".into(),
            status,
            attempt,
            lease_owner: None,
            lease_until: None,
            unknown_since: None,
            provider: None,
            provider_message_id: None,
            ..JobRecord::new("m1", status, attempt, t())
        },
    );
}

/// `dlq replay` by operator "ann" at [`t`], at full speed, without a progress display.
async fn by_ann(
    letters: &[IndexedLetter],
    status: &MemoryStatusStore,
    scheduler: &MemoryScheduler,
    index: &MemoryLetterIndex,
    reason: &str,
) -> Outcome {
    replay(
        letters,
        status,
        scheduler,
        index,
        "ann",
        reason,
        1000.0,
        t,
        &mut Vec::new(),
    )
    .await
    .unwrap()
}

const JOB: &str = r#"{"version":1,"message_id":"m1","campaign_id":"spring","from":"a@b.co","to":["x@y.co"],"content":{"subject":"s","text":"t"}}"#;

#[tokio::test]
async fn replay_reopens_enqueues_a_new_generation_and_records_who_and_why() {
    let index = MemoryLetterIndex::default();
    let status = MemoryStatusStore::default();
    let scheduler = MemoryScheduler::default();
    job_in(&status, Status::DeadLettered, 2);
    let letters = vec![
        letter("l1", Some("m1"), DeadLetterCategory::NeedsReview, Some(JOB)),
        letter("l2", None, DeadLetterCategory::InvalidJob, Some("{broken")),
        letter("l3", Some("m3"), DeadLetterCategory::Redriven, None),
    ];
    for l in &letters {
        index.put_new(l).await.unwrap();
    }
    let mut out = Vec::new();
    let outcome = replay(
        &letters,
        &status,
        &scheduler,
        &index,
        "ann",
        "template fixed",
        1000.0,
        t,
        &mut out,
    )
    .await
    .unwrap();
    assert_eq!(outcome.done, vec!["l1".to_owned()]);
    assert_eq!(outcome.skipped.len(), 2);
    assert!(
        outcome.skipped[0].1.contains("not JSON"),
        "{:?}",
        outcome.skipped
    );
    assert!(
        outcome.skipped[1].1.contains("no payload"),
        "{:?}",
        outcome.skipped
    );
    let first = scheduler.queued.lock().unwrap()[0].body.clone();
    let again = courier_core::envelope::parse_body(first.as_bytes()).unwrap();
    assert_eq!(
        (again.attempt, again.retry.spent),
        (3, 0),
        "new generation, fresh budget"
    );
    assert_eq!(status.records.lock().unwrap()["m1"].status, Status::Pending);
    let l1 = &index.get_many(&["l1".to_owned()]).await.unwrap()[0];
    assert_eq!(l1.state, LetterState::Replayed);
    assert!(l1.audit[0].contains("replay started by ann: template fixed"));
    assert!(l1.audit[1].contains("replayed by ann: template fixed"));
    assert!(String::from_utf8(out).unwrap().contains("3/3"));
    // Replaying again does nothing: the letter is no longer live.
    let again = index.get_many(&["l1".to_owned()]).await.unwrap();
    let outcome = by_ann(&again, &status, &scheduler, &index, "again").await;
    assert!(outcome.done.is_empty());
    assert_eq!(scheduler.queued.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_replay_that_failed_after_reopening_is_resumed_by_the_next() {
    // GIVEN a dead-lettered job whose replay fails to enqueue after reopening it
    let index = MemoryLetterIndex::default();
    let status = MemoryStatusStore::default();
    let scheduler = MemoryScheduler::default();
    job_in(&status, Status::DeadLettered, 2);
    let letters = vec![letter(
        "l1",
        Some("m1"),
        DeadLetterCategory::NeedsReview,
        Some(JOB),
    )];
    index.put_new(&letters[0]).await.unwrap();
    scheduler.fail_enqueues.set(1);
    let (mut first, mut second) = (Vec::new(), Vec::new());
    let failed = replay(
        &letters, &status, &scheduler, &index, "ann", "x", 1000.0, t, &mut first,
    )
    .await;
    assert!(failed.is_err());
    assert_eq!(status.records.lock().unwrap()["m1"].status, Status::Pending);
    assert!(scheduler.queued.lock().unwrap().is_empty());
    // the letter stays claimed: the archiver leaves it alone
    let letters = index.get_many(&["l1".to_owned()]).await.unwrap();
    assert_eq!(letters[0].state, LetterState::Replaying);
    assert_eq!(
        courier_core::letters::archive_step(
            &letters[0],
            &courier_core::letters::ArchiveAges::default(),
            t() + chrono::Duration::days(30)
        ),
        courier_core::letters::ArchiveStep::AwaitReplay
    );
    assert!(
        !index
            .transition(
                "l1",
                LetterState::Live,
                LetterState::Archiving,
                Some("k"),
                None
            )
            .await
            .unwrap()
    );
    // WHEN it is replayed again THEN the same generation is enqueued and the letter marked
    let outcome = replay(
        &letters,
        &status,
        &scheduler,
        &index,
        "ann",
        "x",
        1000.0,
        t,
        &mut second,
    )
    .await
    .unwrap();
    assert_eq!(outcome.done, vec!["l1".to_owned()]);
    let queued = scheduler.queued.lock().unwrap().clone();
    assert_eq!(queued.len(), 1);
    let body = courier_core::envelope::parse_body(queued[0].body.as_bytes()).unwrap();
    assert_eq!(body.attempt, 3, "the generation the first replay opened");
    assert_eq!(status.records.lock().unwrap()["m1"].attempt, 3);
    let l1 = &index.get_many(&["l1".to_owned()]).await.unwrap()[0];
    assert_eq!(l1.state, LetterState::Replayed);
}

#[tokio::test]
async fn a_payload_that_cannot_be_replayed_leaves_the_job_untouched() {
    let index = MemoryLetterIndex::default();
    let status = MemoryStatusStore::default();
    job_in(&status, Status::DeadLettered, 2);
    let letters = vec![letter(
        "l1",
        Some("m1"),
        DeadLetterCategory::InvalidJob,
        Some("{broken"),
    )];
    index.put_new(&letters[0]).await.unwrap();
    let outcome = by_ann(&letters, &status, &MemoryScheduler::default(), &index, "x").await;
    assert!(outcome.done.is_empty());
    let rec = &status.records.lock().unwrap()["m1"];
    assert_eq!((rec.status, rec.attempt), (Status::DeadLettered, 2));
}

#[tokio::test]
async fn replay_skips_a_job_that_is_no_longer_dead_lettered() {
    let index = MemoryLetterIndex::default();
    let status = MemoryStatusStore::default();
    job_in(&status, Status::SentToProvider, 0);
    let letters = vec![letter(
        "l1",
        Some("m1"),
        DeadLetterCategory::NeedsReview,
        Some(JOB),
    )];
    index.put_new(&letters[0]).await.unwrap();
    let outcome = by_ann(&letters, &status, &MemoryScheduler::default(), &index, "x").await;
    assert!(outcome.skipped[0].1.contains("sent_to_provider"));
    // the letter is released, not left claimed
    let l1 = &index.get_many(&["l1".to_owned()]).await.unwrap()[0];
    assert_eq!(l1.state, LetterState::Live);
    assert!(l1.audit.last().unwrap().contains("replay refused"));
}

#[tokio::test]
async fn an_archived_letter_is_replayed_and_keeps_its_archive_key() {
    // GIVEN three archived letters: a dead-lettered job, a job that moved on since, and one
    // indexed without its payload
    let index = MemoryLetterIndex::default();
    let status = MemoryStatusStore::default();
    let scheduler = MemoryScheduler::default();
    job_in(&status, Status::DeadLettered, 1);
    let mut moved = status.records.lock().unwrap()["m1"].clone();
    moved.message_id = "m2".into();
    moved.status = Status::Delivered;
    status.records.lock().unwrap().insert("m2".into(), moved);
    let archived = |id: &str, message_id: &str, payload: Option<&str>| {
        let mut l = letter(
            id,
            Some(message_id),
            DeadLetterCategory::NeedsReview,
            payload,
        );
        l.state = LetterState::Archived;
        l.archive_key = Some(format!("dead-letters/{id}.jsonl.gz"));
        l
    };
    let letters = vec![
        archived("a1", "m1", Some(JOB)),
        archived("a2", "m2", Some(&JOB.replace("m1", "m2"))),
        archived("a3", "m3", None),
    ];
    for l in &letters {
        index.put_new(l).await.unwrap();
    }
    // WHEN they are replayed
    let outcome = by_ann(&letters, &status, &scheduler, &index, "SPF fixed").await;
    // THEN the dead-lettered job is enqueued as a new generation and its letter is replayed,
    // still pointing at its archive object
    assert_eq!(outcome.done, vec!["a1".to_owned()]);
    assert_eq!(scheduler.queued.lock().unwrap().len(), 1);
    assert_eq!(status.records.lock().unwrap()["m1"].status, Status::Pending);
    let after = index
        .get_many(&["a1".to_owned(), "a2".to_owned(), "a3".to_owned()])
        .await
        .unwrap();
    let of = |id: &str| after.iter().find(|l| l.letter_id == id).unwrap().clone();
    assert_eq!(of("a1").state, LetterState::Replayed);
    assert_eq!(
        of("a1").archive_key.as_deref(),
        Some("dead-letters/a1.jsonl.gz")
    );
    // AND the refused one goes back to archived with its key, the payload-less one is skipped
    // naming the object that holds it
    assert_eq!(of("a2").state, LetterState::Archived);
    assert_eq!(
        of("a2").archive_key.as_deref(),
        Some("dead-letters/a2.jsonl.gz")
    );
    let why = |id: &str| {
        outcome
            .skipped
            .iter()
            .find(|(l, _)| l == id)
            .map(|(_, why)| why.clone())
            .unwrap()
    };
    assert!(why("a2").contains("delivered"), "{}", why("a2"));
    assert!(
        why("a3").contains("archive object dead-letters/a3.jsonl.gz"),
        "{}",
        why("a3")
    );
    assert_eq!(of("a3").state, LetterState::Archived);
}

#[tokio::test]
async fn a_stopped_replay_whose_copy_was_taken_is_only_marked() {
    // GIVEN a letter left `replaying` by a replay that enqueued and then stopped, and a job
    // the send function has sent since
    let index = MemoryLetterIndex::default();
    let status = MemoryStatusStore::default();
    let scheduler = MemoryScheduler::default();
    job_in(&status, Status::SentToProvider, 3);
    let mut l = letter("l1", Some("m1"), DeadLetterCategory::NeedsReview, Some(JOB));
    l.state = LetterState::Replaying;
    index.put_new(&l).await.unwrap();
    // WHEN it is replayed again
    let outcome = by_ann(&[l], &status, &scheduler, &index, "x").await;
    // THEN nothing is enqueued again and the letter is marked replayed
    assert_eq!(outcome.done, vec!["l1".to_owned()]);
    assert!(scheduler.queued.lock().unwrap().is_empty());
    let l1 = &index.get_many(&["l1".to_owned()]).await.unwrap()[0];
    assert_eq!(l1.state, LetterState::Replayed);
    assert!(
        l1.audit
            .last()
            .unwrap()
            .contains("moved on to sent_to_provider")
    );
}

#[tokio::test]
async fn discard_marks_letters_and_can_blocklist_the_payload() {
    let index = MemoryLetterIndex::default();
    let poison = MemoryPoisonList::default();
    let letters = vec![letter(
        "l1",
        Some("m1"),
        DeadLetterCategory::Poison,
        Some(JOB),
    )];
    index.put_new(&letters[0]).await.unwrap();
    let outcome = discard(
        &letters,
        &index,
        Some(&poison),
        "bob",
        "crashes the renderer",
        t(),
        &mut Vec::new(),
    )
    .await
    .unwrap();
    assert_eq!(outcome.done, vec!["l1".to_owned()]);
    assert!(
        poison
            .is_blocked(&courier_core::envelope::job_fingerprint(JOB))
            .await
            .unwrap()
    );
    let l1 = &index.get_many(&["l1".to_owned()]).await.unwrap()[0];
    assert_eq!(l1.state, LetterState::Discarded);
    assert!(l1.audit[0].contains("discarded by bob"));
    let outcome = discard(&letters, &index, None, "bob", "twice", t(), &mut Vec::new())
        .await
        .unwrap();
    assert!(outcome.done.is_empty());
}

#[tokio::test]
async fn discarding_a_letter_indexed_without_its_payload_blocklists_its_fingerprint() {
    // GIVEN a letter too large for the index: its payload is only in the queue and the archive
    let index = MemoryLetterIndex::default();
    let poison = MemoryPoisonList::default();
    let mut big = letter("l9", Some("m9"), DeadLetterCategory::Poison, None);
    big.record.fingerprint = courier_core::envelope::job_fingerprint(JOB);
    index.put_new(&big).await.unwrap();
    // WHEN it is discarded as poison
    discard(
        &[big],
        &index,
        Some(&poison),
        "bob",
        "huge and broken",
        t(),
        &mut Vec::new(),
    )
    .await
    .unwrap();
    // THEN the job's own fingerprint is blocklisted (not the print of an empty payload)
    assert!(
        poison
            .is_blocked(&courier_core::envelope::job_fingerprint(JOB))
            .await
            .unwrap()
    );
    assert!(
        !poison
            .is_blocked(&courier_core::envelope::job_fingerprint(""))
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn stats_tables_and_selections() {
    let index = MemoryLetterIndex::default();
    for i in 0..12 {
        let category = if i < 9 {
            DeadLetterCategory::NeedsReview
        } else {
            DeadLetterCategory::Poison
        };
        index
            .put_new(&letter(&format!("l{i}"), Some("m"), category, None))
            .await
            .unwrap();
    }
    let all = select(&index, &LetterFilter::default()).await.unwrap();
    assert_eq!(all.len(), 12);
    index
        .transition("l0", LetterState::Live, LetterState::Discarded, None, None)
        .await
        .unwrap();
    let live = LetterFilter {
        state: Some(LetterState::Live),
        ..Default::default()
    };
    let mut progress = Vec::new();
    let counted = count(&index, &live, &mut progress).await.unwrap();
    assert!(
        String::from_utf8(progress)
            .unwrap()
            .contains("counted 11 letters")
    );
    let mut out = Vec::new();
    stats(&counted, false, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("11 live dead letters"), "{text}");
    assert!(
        text.contains("needs_review") && text.contains('█') && !text.contains("by state"),
        "{text}"
    );
    let mut out = Vec::new();
    stats(&counted, true, &mut out).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["by"]["category"]["poison"], 3);
    assert_eq!(
        (v["live"].as_u64(), v["state"].as_str()),
        (Some(11), Some("live"))
    );
    // every state: counted by state too
    let every = count(&index, &LetterFilter::default(), &mut Vec::new())
        .await
        .unwrap();
    let mut out = Vec::new();
    stats(&every, true, &mut out).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["letters"], 12);
    assert_eq!(v["by"]["state"]["discarded"], 1);
    assert!(v.get("live").is_none());
    let mut out = Vec::new();
    table(&all[..2], t(), false, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.starts_with("ID") && text.contains(" 3h ") && text.contains("rejected by policy"),
        "{text}"
    );
    // a long id is printed whole
    let mut long = all[0].clone();
    long.letter_id = format!("{}#0123456789abcdef#g12#retries_exhausted", "m".repeat(40));
    let mut out = Vec::new();
    table(std::slice::from_ref(&long), t(), false, &mut out).unwrap();
    assert!(String::from_utf8(out).unwrap().contains(&long.letter_id));
    assert!(
        matches!(by_ids(&index, &["l1".into(), "nope".into()]).await, Err(DlqError::NotFound(id)) if id == "nope")
    );
}

#[tokio::test]
async fn stats_count_past_the_selection_cap() {
    let index = MemoryLetterIndex::default();
    for i in 0..MAX_SELECTION + 5 {
        index
            .put_new(&letter(
                &format!("l{i}"),
                None,
                DeadLetterCategory::Poison,
                None,
            ))
            .await
            .unwrap();
    }
    assert!(select(&index, &LetterFilter::default()).await.is_err());
    let counted = count(&index, &LetterFilter::default(), &mut std::io::sink())
        .await
        .unwrap();
    assert_eq!(counted.letters, MAX_SELECTION + 5);
}

#[tokio::test]
async fn tables_print_aligned_columns_with_ids_and_campaigns_whole() {
    let index = MemoryLetterIndex::default();
    let mut all = Vec::new();
    for (i, campaign) in [Some("a-campaign-id-longer-than-eighteen"), None]
        .into_iter()
        .enumerate()
    {
        let mut l = letter(
            &format!("m{i}#0123#g1#needs_review"),
            Some("m"),
            DeadLetterCategory::NeedsReview,
            None,
        );
        l.record.campaign_id = campaign.map(str::to_owned);
        index.put_new(&l).await.unwrap();
        all.push(l);
    }
    all[1].record.reason = "x".repeat(70);
    let mut out = Vec::new();
    table(&all, t(), false, &mut out).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        format!(
            "ID                       AGE  STATE  CATEGORY      CLASS             CAMPAIGN                            PROVIDER  REASON\n\
             m0#0123#g1#needs_review   3h  live   needs_review  content_rejected  a-campaign-id-longer-than-eighteen  smtp      554 5.7.1 rejected by policy\n\
             m1#0123#g1#needs_review   3h  live   needs_review  content_rejected  -                                   smtp      {}\n",
            "x".repeat(60)
        )
    );
    // no letters: the header alone
    let mut out = Vec::new();
    table(&[], t(), false, &mut out).unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "ID  AGE  STATE  CATEGORY  CLASS  CAMPAIGN  PROVIDER  REASON\n"
    );
    let counted = count(&index, &LetterFilter::default(), &mut std::io::sink())
        .await
        .unwrap();
    let mut out = Vec::new();
    stats(&counted, false, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.starts_with(&format!(
            "2 (every state) dead letters\n\nby campaign:\n  \
             (none)                              1  {}\n  \
             a-campaign-id-longer-than-eighteen  1  {}\n\nby category:\n  needs_review  2  {}\n",
            "█".repeat(40),
            "█".repeat(40),
            "█".repeat(40)
        )),
        "{text}"
    );
}
