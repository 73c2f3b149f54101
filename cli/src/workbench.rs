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

use crate::progress::Progress;
use crate::table::{self, Cell};

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
/// counts), reporting the running count to `progress`.
pub async fn count(
    index: &dyn LetterIndex,
    filter: &LetterFilter,
    progress: &mut dyn Progress,
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
        progress.update(stats.letters, None)?;
        match next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    progress.finish(stats.letters, None)?;
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
        let mut t = table::new(&[]);
        for (key, count) in rows.iter().take(10) {
            t.add_row(vec![
                Cell::new(key),
                table::right(count),
                Cell::new(bar(**count, max, 40)),
            ]);
        }
        table::write(out, &mut t, "  ")?;
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
    // Ids (and campaign ids) are printed whole, to be copied into `show`, `replay`, `discard`
    // and `--campaign`; the reason is cut at 60 characters (`show` has it whole).
    let mut t = table::new(&[
        "ID", "AGE", "STATE", "CATEGORY", "CLASS", "CAMPAIGN", "PROVIDER", "REASON",
    ]);
    if let Some(age_column) = t.column_mut(1) {
        age_column.set_cell_alignment(table::CellAlignment::Right);
    }
    for l in letters {
        let r = &l.record;
        t.add_row(vec![
            Cell::new(&l.letter_id),
            Cell::new(age(l.dead_lettered_at, now)),
            Cell::new(l.state.as_str()),
            Cell::new(r.category.as_str()),
            Cell::new(r.class.as_str()),
            Cell::new(r.campaign_id.as_deref().unwrap_or("-")),
            Cell::new(r.provider.as_deref().unwrap_or("-")),
            Cell::new(r.reason.chars().take(60).collect::<String>()),
        ]);
    }
    table::write(out, &mut t, "")
}

/// What a replay or discard would do or did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub done: Vec<String>,
    /// (letter id, why it was skipped)
    pub skipped: Vec<(String, String)>,
}

/// Whether the job is `pending` because a replay reopened it (and nothing has happened since).
fn reopened_by_replay(rec: &courier_core::ports::JobRecord) -> bool {
    rec.status == courier_core::status::Status::Pending
        && rec.history.last().is_some_and(|h| {
            h.status == courier_core::status::Status::Pending && h.by == "operator"
        })
}

/// `dlq replay`: puts each live or archived letter's job back on the send queue as a new
/// generation with a fresh retry budget, and records who replayed it and why. Order per letter:
/// claim the letter (`live`/`archived -> replaying`, so the archiver leaves it alone; an
/// archived letter keeps its archive key), reopen the status record (only a `dead_lettered`
/// job), enqueue, then mark the letter `replayed`. A payload that cannot become a job is skipped
/// before anything is written; a job that is no longer dead-lettered releases the letter
/// (`replaying -> live`, or `archived` when it has an archive object). A replay that stops between the steps (an enqueue error, a
/// crash) leaves the letter `replaying` and the job `pending` as reopened: replaying the letter
/// again resumes it with the same generation (so it can be enqueued at most once more, and the
/// send function's idempotent claim sends it once), or, when the job has moved on since (the
/// enqueue had happened), only marks it `replayed`. Progress is reported to `progress`.
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
    progress: &mut dyn Progress,
) -> Result<Outcome, DlqError> {
    let mut outcome = Outcome::default();
    let pause = Duration::from_secs_f64(1.0 / per_second.max(0.1));
    for (i, l) in letters.iter().enumerate() {
        progress.update(i, Some(letters.len()))?;
        // An archived letter is replayed from its index entry like a live one (its queue copy
        // is gone; the archiver retained its job's attachments).
        let (resuming, from) = match l.state {
            LetterState::Live => (false, LetterState::Live),
            LetterState::Archived => (false, LetterState::Archived),
            LetterState::Replaying => (true, LetterState::Replaying),
            other => {
                outcome
                    .skipped
                    .push((l.letter_id.clone(), format!("state is {}", other.as_str())));
                continue;
            }
        };
        let Some(payload) = l.record.payload.as_deref() else {
            let whole = match &l.archive_key {
                Some(key) => format!("its archive object {key} holds it whole"),
                None => "its queue copy holds it whole until it is archived".into(),
            };
            outcome.skipped.push((
                l.letter_id.clone(),
                format!("the index has no payload for it (over 300 KiB); {whole}"),
            ));
            continue;
        };
        // A payload that cannot become a job is skipped before anything is written.
        if let Err(why) = courier_core::envelope::replay_body(payload, 0, Vec::new(), None) {
            outcome.skipped.push((l.letter_id.clone(), why));
            continue;
        }
        let mark = |what: String| format!("{} {what} by {operator}: {reason}", now().to_rfc3339());
        if !resuming
            && !index
                .transition(
                    &l.letter_id,
                    from,
                    LetterState::Replaying,
                    l.archive_key.as_deref(),
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
                                home(l),
                                l.archive_key.as_deref(),
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
            l.record.trace_id.as_deref(),
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
    progress.finish(letters.len(), Some(letters.len()))?;
    Ok(outcome)
}

/// Where a refused replay leaves a letter: archived when it has an archive object (its queue
/// copy is gone), live otherwise.
fn home(l: &IndexedLetter) -> LetterState {
    if l.archive_key.is_some() {
        LetterState::Archived
    } else {
        LetterState::Live
    }
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
            l.archive_key.as_deref(),
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
/// Progress is reported to `progress`.
pub async fn discard(
    letters: &[IndexedLetter],
    index: &dyn LetterIndex,
    poison: Option<&dyn PoisonList>,
    operator: &str,
    reason: &str,
    now: DateTime<Utc>,
    progress: &mut dyn Progress,
) -> Result<Outcome, DlqError> {
    let mut outcome = Outcome::default();
    for (i, l) in letters.iter().enumerate() {
        progress.update(i, Some(letters.len()))?;
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
            // The blocklist keys on the job's fingerprint, as the send function checks it: from
            // the payload, or the letter's own print when the index holds no payload (too large).
            let print = match l.record.payload.as_deref() {
                Some(payload) => courier_core::envelope::job_fingerprint(payload),
                None => l.record.fingerprint.clone(),
            };
            poison.block(&print, &audit, now).await?;
        }
        outcome.done.push(l.letter_id.clone());
    }
    progress.finish(letters.len(), Some(letters.len()))?;
    Ok(outcome)
}

#[cfg(test)]
mod tests;
