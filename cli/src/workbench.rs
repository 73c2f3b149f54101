//! The operator's workbench for dead letters (`courierctl dlq`), over the letter index (no
//! draining or re-receiving of queues): selections, stats, tables, replay and discard.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use chrono::{DateTime, Utc};
use courier_core::letters::{IndexedLetter, LetterFilter, LetterState};
use courier_core::ports::{
    LetterIndex, PoisonList, Requeue, RetryScheduler, StatusStore, StoreError,
};

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

/// Letter counts by category, class, campaign and provider (and state, when not filtered on).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stats {
    /// The state counted (`None`: every state).
    pub state: Option<LetterState>,
    pub letters: usize,
    pub by: BTreeMap<&'static str, BTreeMap<String, usize>>,
}

impl Stats {
    pub fn add(&mut self, l: &IndexedLetter) {
        let r = &l.record;
        self.letters += 1;
        let state = self
            .state
            .is_none()
            .then(|| ("state", l.state.as_str().to_owned()));
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
        ]
        .into_iter()
        .chain(state)
        {
            *self.by.entry(dim).or_default().entry(key).or_default() += 1;
        }
    }
}

/// Counts every letter matching `filter`, a page at a time (no cap, nothing kept but the
/// counts), drawing a running count on `progress`.
pub async fn count(
    index: &dyn LetterIndex,
    filter: &LetterFilter,
    progress: &mut dyn Write,
) -> Result<Stats, DlqError> {
    let mut stats = Stats {
        state: filter.state,
        ..Stats::default()
    };
    let mut cursor = None;
    loop {
        let (page, next) = index.search(filter, 1000, cursor).await?;
        for l in &page {
            stats.add(l);
        }
        write!(progress, "\rcounted {} letters", stats.letters)?;
        progress.flush()?;
        match next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    writeln!(progress)?;
    Ok(stats)
}

/// `dlq stats`: the counts, with the top keys of each dimension drawn as bars; or JSON
/// (`{"state": "live", "letters": n, "live": n, "by": {"category": {...}, ...}}`, `live`
/// only when live letters were counted).
pub fn stats(stats: &Stats, json: bool, out: &mut dyn Write) -> std::io::Result<()> {
    let state = stats.state.map(LetterState::as_str);
    if json {
        let mut v = serde_json::json!({"state": state, "letters": stats.letters, "by": stats.by});
        if stats.state == Some(LetterState::Live) {
            v["live"] = stats.letters.into();
        }
        serde_json::to_writer(&mut *out, &v).map_err(std::io::Error::other)?;
        return writeln!(out);
    }
    writeln!(
        out,
        "{} {} dead letters",
        stats.letters,
        state.unwrap_or("(every state)")
    )?;
    for (dim, counts) in &stats.by {
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
    // Ids are printed whole, to be copied into `show`, `replay` and `discard`.
    let w = letters
        .iter()
        .map(|l| l.letter_id.chars().count())
        .max()
        .unwrap_or(0)
        .max(2);
    writeln!(
        out,
        "{:<w$} {:>4} {:<9} {:<17} {:<20} {:<18} {:<8} REASON",
        "ID", "AGE", "STATE", "CATEGORY", "CLASS", "CAMPAIGN", "PROVIDER"
    )?;
    for l in letters {
        let r = &l.record;
        let reason: String = r.reason.chars().take(60).collect();
        writeln!(
            out,
            "{:<w$} {:>4} {:<9} {:<17} {:<20} {:<18} {:<8} {reason}",
            l.letter_id,
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

/// Draws a progress bar (`\r`-redrawn) of `done` out of `total`.
fn draw(out: &mut dyn Write, done: usize, total: usize) -> std::io::Result<()> {
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
fn reopened_by_replay(rec: &courier_core::ports::JobRecord) -> bool {
    rec.status == courier_core::status::Status::Pending
        && rec.history.last().is_some_and(|h| {
            h.status == courier_core::status::Status::Pending && h.by == "operator"
        })
}

/// `dlq replay`: puts each live letter's job back on the send queue as a new generation with a
/// fresh retry budget, and records who replayed it and why. Order per letter: claim the letter
/// (`live -> replaying`, so the archiver leaves it alone), reopen the status record (only a
/// `dead_lettered` job), enqueue, then mark the letter `replayed`. A payload that cannot become
/// a job is skipped before anything is written; a job that is no longer dead-lettered releases
/// the letter (`replaying -> live`). A replay that stops between the steps (an enqueue error, a
/// crash) leaves the letter `replaying` and the job `pending` as reopened: replaying the letter
/// again resumes it with the same generation (so it can be enqueued at most once more, and the
/// send function's idempotent claim sends it once), or, when the job has moved on since (the
/// enqueue had happened), only marks it `replayed`. Progress goes to `progress`.
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
    progress: &mut dyn Write,
) -> Result<Outcome, DlqError> {
    let mut outcome = Outcome::default();
    let pause = Duration::from_secs_f64(1.0 / per_second.max(0.1));
    for (i, l) in letters.iter().enumerate() {
        draw(progress, i, letters.len())?;
        let resuming = match l.state {
            LetterState::Live => false,
            LetterState::Replaying => true,
            other => {
                outcome
                    .skipped
                    .push((l.letter_id.clone(), format!("state is {}", other.as_str())));
                continue;
            }
        };
        let Some(payload) = l.record.payload.as_deref() else {
            outcome.skipped.push((
                l.letter_id.clone(),
                "the index has no payload for it (too large); replay it from the archive".into(),
            ));
            continue;
        };
        // A payload that cannot become a job is skipped before anything is written.
        if let Err(why) = courier_core::envelope::replay_body(payload, 0, Vec::new()) {
            outcome.skipped.push((l.letter_id.clone(), why));
            continue;
        }
        let mark = |what: String| format!("{} {what} by {operator}: {reason}", now().to_rfc3339());
        if !resuming
            && !index
                .transition(
                    &l.letter_id,
                    LetterState::Live,
                    LetterState::Replaying,
                    None,
                    Some(&mark("replay started".into())),
                )
                .await?
        {
            outcome.skipped.push((
                l.letter_id.clone(),
                "changed by someone else meanwhile (archived, replayed or discarded)".into(),
            ));
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
                    // A stopped replay whose enqueued copy the send function has taken since.
                    Some(rec) if resuming => {
                        let audit = mark(format!(
                            "replay finished (the job had moved on to {})",
                            rec.status
                        ));
                        finish(index, l, &audit, &mut outcome).await?;
                        continue;
                    }
                    Some(rec) => {
                        index
                            .transition(
                                &l.letter_id,
                                LetterState::Replaying,
                                LetterState::Live,
                                None,
                                Some(&mark(format!("replay refused (job is {})", rec.status))),
                            )
                            .await?;
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
        let body = match courier_core::envelope::replay_body(
            payload,
            generation,
            l.record.history.clone(),
        ) {
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
        finish(index, l, &mark("replayed".into()), &mut outcome).await?;
        tokio::time::sleep(pause).await;
    }
    draw(progress, letters.len(), letters.len())?;
    writeln!(progress)?;
    Ok(outcome)
}

/// Marks a claimed letter `replayed`.
async fn finish(
    index: &dyn LetterIndex,
    l: &IndexedLetter,
    audit: &str,
    outcome: &mut Outcome,
) -> Result<(), DlqError> {
    if index
        .transition(
            &l.letter_id,
            LetterState::Replaying,
            LetterState::Replayed,
            None,
            Some(audit),
        )
        .await?
    {
        outcome.done.push(l.letter_id.clone());
    } else {
        // Only a concurrent resume of the same letter gets here; its job was enqueued and
        // the send function's claim sends it once.
        outcome.skipped.push((
            l.letter_id.clone(),
            "finished by another replay meanwhile".into(),
        ));
    }
    Ok(())
}

/// `dlq discard`: marks live letters discarded (the archiver then drops their queue copies), and
/// optionally blocklists their payloads so identical jobs go straight to the poison category.
/// Progress goes to `progress`.
pub async fn discard(
    letters: &[IndexedLetter],
    index: &dyn LetterIndex,
    poison: Option<&dyn PoisonList>,
    operator: &str,
    reason: &str,
    now: DateTime<Utc>,
    progress: &mut dyn Write,
) -> Result<Outcome, DlqError> {
    let mut outcome = Outcome::default();
    for (i, l) in letters.iter().enumerate() {
        draw(progress, i, letters.len())?;
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
                Ok(v) if v.get(courier_core::envelope::ENVELOPE_KEY).is_some() => {
                    v.get("job").map(|j| j.to_string()).unwrap_or_default()
                }
                _ => payload.to_owned(),
            };
            poison
                .block(
                    &courier_core::job::fingerprint(original.as_bytes()),
                    &audit,
                    now,
                )
                .await?;
        }
        outcome.done.push(l.letter_id.clone());
    }
    draw(progress, letters.len(), letters.len())?;
    writeln!(progress)?;
    Ok(outcome)
}

#[cfg(test)]
mod tests {
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
                updated_at: t(),
                history: Vec::new(),
                payload: None,
                resend_of: None,
                swept_at: None,
            },
        );
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
        job_in(&status, Status::SentToProvider, 0);
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
        // the letter is released, not left claimed
        let l1 = &index.get_many(&["l1".to_owned()]).await.unwrap()[0];
        assert_eq!(l1.state, LetterState::Live);
        assert!(l1.audit.last().unwrap().contains("replay refused"));
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
        let outcome = replay(
            &[l],
            &status,
            &scheduler,
            &index,
            "ann",
            "x",
            1000.0,
            t,
            &mut Vec::new(),
        )
        .await
        .unwrap();
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
                .is_blocked(&courier_core::job::fingerprint(JOB.as_bytes()))
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
}
