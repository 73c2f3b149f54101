//! The operator's workbench for dead letters (`courierctl dlq`), over the letter index (no
//! draining or re-receiving of queues): selections, stats, tables, replay and discard.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use crate::letters::{IndexedLetter, LetterFilter, LetterState};
use crate::ports::{LetterIndex, PoisonList, Requeue, RetryScheduler, StatusStore, StoreError};
use chrono::{DateTime, Utc};

/// Why a dlq command failed.
#[derive(Debug, thiserror::Error)]
pub enum DlqError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Usage(String),
    #[error("no dead letter with id {0:?}")]
    NotFound(String),
}

impl DlqError {
    /// 2 for mistakes of the caller, 1 for failures.
    pub fn exit_code(&self) -> i32 {
        match self {
            DlqError::Usage(_) | DlqError::NotFound(_) => 2,
            _ => 1,
        }
    }
}

/// Most letters a selection may cover (a larger replay is a whole-queue redrive).
pub const MAX_SELECTION: usize = 10_000;

/// Every letter matching `filter` (all pages), at most [`MAX_SELECTION`].
pub async fn select(
    index: &dyn LetterIndex,
    filter: &LetterFilter,
) -> Result<Vec<IndexedLetter>, DlqError> {
    let mut all = Vec::new();
    let mut cursor = None;
    loop {
        let (page, next) = index.search(filter, 500, cursor).await?;
        all.extend(page);
        if all.len() > MAX_SELECTION {
            return Err(DlqError::Usage(format!(
                "the selection holds more than {MAX_SELECTION} letters; narrow it, or use `dlq redrive-all`"
            )));
        }
        match next {
            Some(n) => cursor = Some(n),
            None => return Ok(all),
        }
    }
}

/// Letters by id (ids not indexed are an error, so a typo is never silently ignored).
pub async fn by_ids(
    index: &dyn LetterIndex,
    ids: &[String],
) -> Result<Vec<IndexedLetter>, DlqError> {
    let found = index.get_many(ids).await?;
    for id in ids {
        if !found.iter().any(|l| &l.letter_id == id) {
            return Err(DlqError::NotFound(id.clone()));
        }
    }
    Ok(found)
}

fn bar(count: usize, max: usize, width: usize) -> String {
    let n = if max == 0 {
        0
    } else {
        (count * width).div_ceil(max)
    };
    "█".repeat(n)
}

/// `dlq stats`: counts of live letters by category, class, campaign and provider.
pub fn stats(letters: &[IndexedLetter], json: bool, out: &mut dyn Write) -> std::io::Result<()> {
    let live: Vec<&IndexedLetter> = letters
        .iter()
        .filter(|l| l.state == LetterState::Live)
        .collect();
    let mut groups: BTreeMap<&str, BTreeMap<String, usize>> = BTreeMap::new();
    for l in &live {
        let r = &l.record;
        for (dim, key) in [
            ("category", r.category.as_str().to_owned()),
            ("class", r.class.as_str().to_owned()),
            (
                "campaign",
                r.campaign_id.clone().unwrap_or_else(|| "(none)".into()),
            ),
            (
                "provider",
                r.provider.clone().unwrap_or_else(|| "(none)".into()),
            ),
        ] {
            *groups.entry(dim).or_default().entry(key).or_default() += 1;
        }
    }
    if json {
        serde_json::to_writer(
            &mut *out,
            &serde_json::json!({"live": live.len(), "by": groups}),
        )
        .map_err(std::io::Error::other)?;
        return writeln!(out);
    }
    writeln!(out, "{} live dead letters", live.len())?;
    for (dim, counts) in &groups {
        writeln!(out, "\nby {dim}:")?;
        let mut rows: Vec<(&String, &usize)> = counts.iter().collect();
        rows.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let max = rows.first().map_or(0, |r| *r.1);
        for (key, count) in rows.iter().take(10) {
            writeln!(out, "  {key:<28} {count:>7}  {}", bar(**count, max, 40))?;
        }
        if rows.len() > 10 {
            writeln!(out, "  ... and {} more", rows.len() - 10)?;
        }
    }
    Ok(())
}

fn age(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (now - at).num_seconds().max(0);
    match secs {
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// `dlq list` / `dlq search`: one row per letter.
pub fn table(
    letters: &[IndexedLetter],
    now: DateTime<Utc>,
    json: bool,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    if json {
        for l in letters {
            serde_json::to_writer(&mut *out, l).map_err(std::io::Error::other)?;
            writeln!(out)?;
        }
        return Ok(());
    }
    writeln!(
        out,
        "{:<44} {:>4} {:<9} {:<17} {:<20} {:<18} {:<8} REASON",
        "ID", "AGE", "STATE", "CATEGORY", "CLASS", "CAMPAIGN", "PROVIDER"
    )?;
    for l in letters {
        let r = &l.record;
        let reason: String = r.reason.chars().take(60).collect();
        writeln!(
            out,
            "{:<44} {:>4} {:<9} {:<17} {:<20} {:<18} {:<8} {reason}",
            l.letter_id.chars().take(44).collect::<String>(),
            age(l.dead_lettered_at, now),
            l.state.as_str(),
            r.category.as_str(),
            r.class.as_str(),
            r.campaign_id
                .as_deref()
                .unwrap_or("-")
                .chars()
                .take(18)
                .collect::<String>(),
            r.provider.as_deref().unwrap_or("-"),
        )?;
    }
    Ok(())
}

/// What a replay or discard would do or did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub done: Vec<String>,
    /// (letter id, why it was skipped)
    pub skipped: Vec<(String, String)>,
}

fn progress(out: &mut dyn Write, done: usize, total: usize) -> std::io::Result<()> {
    let width = 30;
    let filled = (done * width).checked_div(total).unwrap_or(width);
    write!(
        out,
        "\r[{}{}] {done}/{total}",
        "#".repeat(filled),
        ".".repeat(width - filled)
    )?;
    out.flush()
}

/// Whether the job is `pending` because a replay reopened it (and nothing has happened since).
fn reopened_by_replay(rec: &crate::ports::JobRecord) -> bool {
    rec.status == crate::status::Status::Pending
        && rec
            .history
            .last()
            .is_some_and(|h| h.status == crate::status::Status::Pending && h.by == "operator")
}

/// `dlq replay`: puts each live letter's job back on the send queue as a new generation with a
/// fresh retry budget, and records who replayed it and why. Order per letter: reopen the status
/// record (only a `dead_lettered` job), enqueue, then mark the letter `replayed`. A payload that
/// cannot become a job is skipped before anything is written. A replay that stops between the
/// steps (an enqueue error, a crash) leaves the letter live and the job `pending` as reopened: a
/// second replay of the letter resumes it with the same generation (so it can be enqueued at
/// most once more, and the send function's idempotent claim sends it once).
#[allow(clippy::too_many_arguments)]
pub async fn replay(
    letters: &[IndexedLetter],
    status: &dyn StatusStore,
    scheduler: &dyn RetryScheduler,
    index: &dyn LetterIndex,
    operator: &str,
    reason: &str,
    per_second: f64,
    now: impl Fn() -> DateTime<Utc>,
    out: &mut dyn Write,
) -> Result<Outcome, DlqError> {
    let mut outcome = Outcome::default();
    let pause = Duration::from_secs_f64(1.0 / per_second.max(0.1));
    for (i, l) in letters.iter().enumerate() {
        progress(out, i, letters.len())?;
        if l.state != LetterState::Live {
            outcome.skipped.push((
                l.letter_id.clone(),
                format!("state is {}", l.state.as_str()),
            ));
            continue;
        }
        let Some(payload) = l.record.payload.as_deref() else {
            outcome.skipped.push((
                l.letter_id.clone(),
                "the index has no payload for it (too large); replay it from the archive".into(),
            ));
            continue;
        };
        // A payload that cannot become a job is skipped before the status record is touched.
        if let Err(why) = crate::envelope::replay_body(payload, 0, Vec::new()) {
            outcome.skipped.push((l.letter_id.clone(), why));
            continue;
        }
        let generation = match l.record.message_id.as_deref() {
            Some(id) => match status.reopen(id, now()).await? {
                Some(g) => g,
                None => match status.get(id).await? {
                    // Never claimed (invalid or redriven before any claim): a first generation.
                    None => 0,
                    // Reopened by a replay that stopped before it marked the letter (a failed
                    // enqueue, a crash): resume it. Enqueuing that generation again is safe, the
                    // send function's claim sends it once.
                    Some(rec) if reopened_by_replay(&rec) => rec.attempt,
                    Some(rec) => {
                        outcome.skipped.push((
                            l.letter_id.clone(),
                            format!("job status is {}, not dead_lettered", rec.status),
                        ));
                        continue;
                    }
                },
            },
            None => 0,
        };
        let body = match crate::envelope::replay_body(payload, generation, l.record.history.clone())
        {
            Ok(b) => b,
            Err(why) => {
                outcome.skipped.push((l.letter_id.clone(), why));
                continue;
            }
        };
        let requeue = Requeue {
            message_id: l.record.message_id.clone().unwrap_or_default(),
            body,
            delay_secs: 0,
        };
        if let Some(Err(e)) = scheduler
            .enqueue(std::slice::from_ref(&requeue))
            .await
            .pop()
        {
            return Err(e.into());
        }
        let audit = format!("{} replayed by {operator}: {reason}", now().to_rfc3339());
        if !index
            .transition(
                &l.letter_id,
                LetterState::Live,
                LetterState::Replayed,
                None,
                Some(&audit),
            )
            .await?
        {
            outcome.skipped.push((l.letter_id.clone(), "changed by someone else meanwhile (re-enqueued once; the send function sends it once)".into()));
            continue;
        }
        outcome.done.push(l.letter_id.clone());
        tokio::time::sleep(pause).await;
    }
    progress(out, letters.len(), letters.len())?;
    writeln!(out)?;
    Ok(outcome)
}

/// `dlq discard`: marks live letters discarded (the archiver then drops their queue copies), and
/// optionally blocklists their payloads so identical jobs go straight to the poison category.
pub async fn discard(
    letters: &[IndexedLetter],
    index: &dyn LetterIndex,
    poison: Option<&dyn PoisonList>,
    operator: &str,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<Outcome, DlqError> {
    let mut outcome = Outcome::default();
    for l in letters {
        let audit = format!("{} discarded by {operator}: {reason}", now.to_rfc3339());
        if !index
            .transition(
                &l.letter_id,
                LetterState::Live,
                LetterState::Discarded,
                None,
                Some(&audit),
            )
            .await?
        {
            outcome.skipped.push((
                l.letter_id.clone(),
                format!("state is {}", l.state.as_str()),
            ));
            continue;
        }
        if let Some(poison) = poison {
            // The blocklist keys on the application's payload, as the send function checks it.
            let payload = l.record.payload.as_deref().unwrap_or_default();
            let original = match serde_json::from_str::<serde_json::Value>(payload) {
                Ok(v) if v.get(crate::envelope::ENVELOPE_KEY).is_some() => {
                    v.get("job").map(|j| j.to_string()).unwrap_or_default()
                }
                _ => payload.to_owned(),
            };
            poison
                .block(&crate::job::fingerprint(original.as_bytes()), &audit, now)
                .await?;
        }
        outcome.done.push(l.letter_id.clone());
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::ErrorClass;
    use crate::memory::*;
    use crate::policy::DeadLetterCategory;
    use crate::ports::{DeadLetter, JobRecord};
    use crate::status::Status;

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

    const JOB: &str = r#"{"version":1,"message_id":"m1","campaign_id":"spring","from":"a@b.co","to":["x@y.co"],"content":{"subject":"s","text":"t"}}"#;

    #[tokio::test]
    async fn replay_reopens_enqueues_a_new_generation_and_records_who_and_why() {
        let index = MemoryLetterIndex::default();
        let status = MemoryStatusStore::default();
        let scheduler = MemoryScheduler::default();
        status.records.lock().unwrap().insert(
            "m1".into(),
            JobRecord {
                message_id: "m1".into(),
                status: Status::DeadLettered,
                attempt: 2,
                lease_owner: None,
                lease_until: None,
                unknown_since: None,
                provider: None,
                provider_message_id: None,
                updated_at: t(),
                history: Vec::new(),
                payload: None,
                resend_of: None,
                swept_at: None,
            },
        );
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
        let again = crate::envelope::parse_body(first.as_bytes()).unwrap();
        assert_eq!(
            (again.attempt, again.retry.spent),
            (3, 0),
            "new generation, fresh budget"
        );
        assert_eq!(status.records.lock().unwrap()["m1"].status, Status::Pending);
        let l1 = &index.get_many(&["l1".to_owned()]).await.unwrap()[0];
        assert_eq!(l1.state, LetterState::Replayed);
        assert!(l1.audit[0].contains("replayed by ann: template fixed"));
        assert!(String::from_utf8(out).unwrap().contains("3/3"));
        // Replaying again does nothing: the letter is no longer live.
        let again = index.get_many(&["l1".to_owned()]).await.unwrap();
        let outcome = replay(
            &again,
            &status,
            &scheduler,
            &index,
            "ann",
            "again",
            1000.0,
            t,
            &mut Vec::new(),
        )
        .await
        .unwrap();
        assert!(outcome.done.is_empty());
        assert_eq!(scheduler.queued.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_replay_that_failed_after_reopening_is_resumed_by_the_next() {
        // GIVEN a dead-lettered job whose replay fails to enqueue after reopening it
        let index = MemoryLetterIndex::default();
        let status = MemoryStatusStore::default();
        let scheduler = MemoryScheduler::default();
        status.records.lock().unwrap().insert(
            "m1".into(),
            JobRecord {
                message_id: "m1".into(),
                status: Status::DeadLettered,
                attempt: 2,
                lease_owner: None,
                lease_until: None,
                unknown_since: None,
                provider: None,
                provider_message_id: None,
                updated_at: t(),
                history: Vec::new(),
                payload: None,
                resend_of: None,
                swept_at: None,
            },
        );
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
        let queued = scheduler.queued.lock().unwrap();
        assert_eq!(queued.len(), 1);
        let body = crate::envelope::parse_body(queued[0].body.as_bytes()).unwrap();
        assert_eq!(body.attempt, 3, "the generation the first replay opened");
        assert_eq!(status.records.lock().unwrap()["m1"].attempt, 3);
        let l1 = &index.get_many(&["l1".to_owned()]).await.unwrap()[0];
        assert_eq!(l1.state, LetterState::Replayed);
    }

    #[tokio::test]
    async fn a_payload_that_cannot_be_replayed_leaves_the_job_untouched() {
        let index = MemoryLetterIndex::default();
        let status = MemoryStatusStore::default();
        status.records.lock().unwrap().insert(
            "m1".into(),
            JobRecord {
                message_id: "m1".into(),
                status: Status::DeadLettered,
                attempt: 2,
                lease_owner: None,
                lease_until: None,
                unknown_since: None,
                provider: None,
                provider_message_id: None,
                updated_at: t(),
                history: Vec::new(),
                payload: None,
                resend_of: None,
                swept_at: None,
            },
        );
        let letters = vec![letter(
            "l1",
            Some("m1"),
            DeadLetterCategory::InvalidJob,
            Some("{broken"),
        )];
        index.put_new(&letters[0]).await.unwrap();
        let outcome = replay(
            &letters,
            &status,
            &MemoryScheduler::default(),
            &index,
            "ann",
            "x",
            1000.0,
            t,
            &mut Vec::new(),
        )
        .await
        .unwrap();
        assert!(outcome.done.is_empty());
        let rec = &status.records.lock().unwrap()["m1"];
        assert_eq!((rec.status, rec.attempt), (Status::DeadLettered, 2));
    }

    #[tokio::test]
    async fn replay_skips_a_job_that_is_no_longer_dead_lettered() {
        let index = MemoryLetterIndex::default();
        let status = MemoryStatusStore::default();
        status.records.lock().unwrap().insert(
            "m1".into(),
            JobRecord {
                message_id: "m1".into(),
                status: Status::SentToProvider,
                attempt: 0,
                lease_owner: None,
                lease_until: None,
                unknown_since: None,
                provider: None,
                provider_message_id: None,
                updated_at: t(),
                history: Vec::new(),
                payload: None,
                resend_of: None,
                swept_at: None,
            },
        );
        let letters = vec![letter(
            "l1",
            Some("m1"),
            DeadLetterCategory::NeedsReview,
            Some(JOB),
        )];
        index.put_new(&letters[0]).await.unwrap();
        let outcome = replay(
            &letters,
            &status,
            &MemoryScheduler::default(),
            &index,
            "ann",
            "x",
            1000.0,
            t,
            &mut Vec::new(),
        )
        .await
        .unwrap();
        assert!(outcome.skipped[0].1.contains("sent_to_provider"));
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
        )
        .await
        .unwrap();
        assert_eq!(outcome.done, vec!["l1".to_owned()]);
        assert!(
            poison
                .is_blocked(&crate::job::fingerprint(JOB.as_bytes()))
                .await
                .unwrap()
        );
        let l1 = &index.get_many(&["l1".to_owned()]).await.unwrap()[0];
        assert_eq!(l1.state, LetterState::Discarded);
        assert!(l1.audit[0].contains("discarded by bob"));
        let outcome = discard(&letters, &index, None, "bob", "twice", t())
            .await
            .unwrap();
        assert!(outcome.done.is_empty());
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
        let mut out = Vec::new();
        stats(&all, false, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("12 live dead letters"), "{text}");
        assert!(
            text.contains("needs_review") && text.contains('█'),
            "{text}"
        );
        let mut out = Vec::new();
        stats(&all, true, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["by"]["category"]["poison"], 3);
        let mut out = Vec::new();
        table(&all[..2], t(), false, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("ID") && text.contains(" 3h ") && text.contains("rejected by policy"),
            "{text}"
        );
        assert!(
            matches!(by_ids(&index, &["l1".into(), "nope".into()]).await, Err(DlqError::NotFound(id)) if id == "nope")
        );
    }
}
