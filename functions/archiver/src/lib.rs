//! The archiver function (scheduled): moves dead letters older than their category's age from the
//! dead-letter queues to S3 as gzip-compressed JSON Lines, partitioned by category and day.
//!
//! # The protocol, and why nothing is lost or archived twice
//! For each batch received from a queue (hidden from other receivers meanwhile):
//! 1. letters not yet indexed (raw messages SQS redrove) are indexed as `redriven`;
//! 2. settled letters (archived, replayed, discarded) are deleted from the queue; letters too
//!    young are hidden until they are old enough (at most 12 h at a time); letters a replay has
//!    claimed (`replaying`) are never archived: they are hidden for an hour and looked at again;
//! 3. the rest are claimed in the index `live -> archiving` with the object key they will go to,
//!    and the files their jobs attach are copied under `retained/attachments/`, which the
//!    payload bucket keeps as long as the archive keeps the letters;
//! 4. the object is written (never overwriting: a new key per run and batch);
//! 5. the claimed letters are marked `archiving -> archived`;
//! 6. their queue copies are deleted.
//!
//! A crash after 3 leaves letters `archiving` with a key: the next run finds them again (the
//! queue copies reappear) and checks that key: written -> finish 5 and 6; not written -> back to
//! `live`, archived afresh. A crash after 4 or 5 is finished the same way; after 6 there is
//! nothing left to do. A letter is deleted from the queue only once its object exists and the
//! index says so. The object holds each letter's payload from its queue copy when the index
//! entry has none (a record too large for a DynamoDB item is indexed without it).
//!
//! # Layout
//! - [`Archiver::run`]: one scheduled run, stopping before the deadline.
//! - [`function_handler`]: the Lambda handler (any scheduled event).
//! - [`wiring`]: settings from the environment and the AWS adapters.

pub mod wiring;

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use courier_core::classify::ErrorClass;
use courier_core::envelope::parse_body;
use courier_core::letters::{
    ArchiveAges, ArchiveStep, IndexedLetter, LetterState, REPLAY_WAIT, archive_key, archive_step,
};
use courier_core::policy::DeadLetterCategory;
use courier_core::ports::{
    ArchiveStore, Clock, DeadLetter, LetterIndex, LetterQueue, PayloadStore, QueuedLetter,
    StoreError,
};
use tracing::{info, warn};

/// Letters gathered before they are worked as one set (one object per category and day).
pub const GATHER: usize = 200;

/// Which kind of queue a letter came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKind {
    /// Courier's dead-letter queue: bodies are [`DeadLetter`] records.
    Letters,
    /// The send and retry queues' redrive DLQ: raw messages SQS moved after maxReceiveCount.
    Redrive,
}

/// Everything the archiver needs.
pub struct Archiver {
    pub queues: Vec<(QueueKind, Arc<dyn LetterQueue>)>,
    pub index: Arc<dyn LetterIndex>,
    pub archive: Arc<dyn ArchiveStore>,
    /// The payload bucket: the attachments of archived letters are retained there.
    pub payloads: Arc<dyn PayloadStore>,
    pub ages: ArchiveAges,
    pub clock: Arc<dyn Clock>,
    /// Stop receiving this long before the deadline.
    pub margin: Duration,
    /// How long a received batch stays hidden while it is worked on.
    pub hide: Duration,
}

/// What one run did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ArchiveReport {
    pub archived: usize,
    pub objects: Vec<String>,
    pub hidden: usize,
    pub dropped: usize,
    pub indexed_raw: usize,
    pub recovered: usize,
    /// Letters claimed by a replay (not archived; a stopped replay is finished by running
    /// `dlq replay` on them again).
    pub replaying: usize,
    /// Attachments of archived letters copied under `retained/attachments/`.
    pub attachments_retained: usize,
    /// Attachments of archived letters already gone from the bucket (the letter is archived
    /// without them; a replay dead-letters it as `local.attachment-missing`).
    pub attachments_missing: usize,
    /// Stopped because the deadline came near, with work left for the next run.
    pub out_of_time: bool,
}

/// Why a run stopped early. Whatever it had done is consistent (see the module docs).
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("archive object {0} already exists; refusing to overwrite it")]
    ObjectExists(String),
}

/// A raw message SQS redrove, turned into a letter.
pub fn raw_letter(queued: &QueuedLetter) -> DeadLetter {
    let (message_id, campaign_id, trace_id) = match parse_body(queued.body.as_bytes()) {
        Ok(incoming) => (
            Some(incoming.job.message_id),
            Some(incoming.job.campaign_id),
            incoming.job.trace_id,
        ),
        Err(rejected) => (rejected.message_id, rejected.campaign_id, rejected.trace_id),
    };
    DeadLetter {
        id: format!("redriven#{}", queued.queue_message_id),
        category: DeadLetterCategory::Redriven,
        reason: "moved to the dead-letter queue by SQS after maxReceiveCount receives".into(),
        message_id,
        campaign_id,
        trace_id,
        recipients: Vec::new(),
        provider: None,
        class: ErrorClass::Unknown,
        rule: "sqs.redrive".into(),
        raw_code: None,
        raw_text: None,
        attempts: 0,
        history: Vec::new(),
        first_failure_at: queued.sent_at,
        last_failure_at: queued.sent_at,
        fingerprint: courier_core::envelope::job_fingerprint(&queued.body),
        payload: Some(queued.body.clone()),
        payload_base64: None,
    }
}

/// The index entry for a letter first seen on a queue.
pub fn indexed(record: DeadLetter) -> IndexedLetter {
    IndexedLetter {
        letter_id: record.id.clone(),
        state: LetterState::Live,
        dead_lettered_at: record.last_failure_at,
        archive_key: None,
        record,
        audit: Vec::new(),
    }
}

/// Gzip-compressed JSON Lines, one indexed letter per line.
pub fn encode(letters: &[IndexedLetter]) -> Result<Vec<u8>, StoreError> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    for l in letters {
        let archived = IndexedLetter {
            state: LetterState::Archived,
            ..l.clone()
        };
        serde_json::to_writer(&mut gz, &archived)
            .map_err(|e| StoreError::new("encode archive", e))?;
        gz.write_all(b"\n")
            .map_err(|e| StoreError::new("encode archive", e))?;
    }
    gz.finish()
        .map_err(|e| StoreError::new("encode archive", e))
}

/// Reads an archive object back.
pub fn decode(bytes: &[u8]) -> Result<Vec<IndexedLetter>, StoreError> {
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(bytes), &mut text)
        .map_err(|e| StoreError::new("decode archive", e))?;
    text.lines()
        .map(|l| serde_json::from_str(l).map_err(|e| StoreError::new("decode archive", e)))
        .collect()
}

impl Archiver {
    /// One run: works every queue until it is empty of due work or the deadline nears.
    pub async fn run(
        &self,
        run_id: &str,
        deadline: DateTime<Utc>,
    ) -> Result<ArchiveReport, ArchiveError> {
        let mut report = ArchiveReport::default();
        let mut seq = 0;
        let stop_at = deadline - chrono::Duration::from_std(self.margin).unwrap_or_default();
        for (kind, queue) in &self.queues {
            loop {
                if self.clock.now() >= stop_at {
                    report.out_of_time = true;
                    info!(
                        ?report,
                        "stopping before the deadline; the rest is left for the next run"
                    );
                    return Ok(report);
                }
                // Gather up to GATHER letters (receives of 10) so objects hold many letters.
                let mut batch = Vec::new();
                while batch.len() < GATHER {
                    let got = queue.receive(10, self.hide).await?;
                    if got.is_empty() {
                        break;
                    }
                    batch.extend(got);
                }
                if batch.is_empty() {
                    break;
                }
                self.work_batch(*kind, queue.as_ref(), batch, run_id, &mut seq, &mut report)
                    .await?;
            }
        }
        info!(?report, "archiver run finished");
        Ok(report)
    }

    async fn work_batch(
        &self,
        kind: QueueKind,
        queue: &dyn LetterQueue,
        batch: Vec<QueuedLetter>,
        run_id: &str,
        seq: &mut usize,
        report: &mut ArchiveReport,
    ) -> Result<(), ArchiveError> {
        let now = self.clock.now();
        // 1. The letters and their index entries (raw redrives indexed when first seen).
        let records: Vec<DeadLetter> = batch
            .iter()
            .map(|q| match kind {
                QueueKind::Letters => {
                    serde_json::from_str(&q.body).unwrap_or_else(|_| raw_letter(q))
                }
                QueueKind::Redrive => raw_letter(q),
            })
            .collect();
        let ids: Vec<String> = records.iter().map(|r| r.id.clone()).collect();
        // The queue copy is the only complete one: the index drops the payload of a letter too
        // large for a DynamoDB item, and the archive must hold it.
        let payloads: BTreeMap<String, (Option<String>, Option<String>)> = records
            .iter()
            .map(|r| (r.id.clone(), (r.payload.clone(), r.payload_base64.clone())))
            .collect();
        let mut known: BTreeMap<String, IndexedLetter> = self
            .index
            .get_many(&ids)
            .await?
            .into_iter()
            .map(|l| (l.letter_id.clone(), l))
            .collect();
        for record in records {
            if !known.contains_key(&record.id) {
                let letter = indexed(record);
                if self.index.put_new(&letter).await? {
                    report.indexed_raw += 1;
                }
                known.insert(letter.letter_id.clone(), letter);
            }
        }
        // 2. Decide each letter's step.
        let mut to_delete = Vec::new();
        let mut groups: BTreeMap<(DeadLetterCategory, String), Vec<(IndexedLetter, String)>> =
            BTreeMap::new();
        for (queued, id) in batch.iter().zip(&ids) {
            let Some(letter) = known.get(id) else {
                continue;
            };
            match archive_step(letter, &self.ages, now) {
                ArchiveStep::Drop => {
                    to_delete.push(queued.receipt.clone());
                    report.dropped += 1;
                }
                ArchiveStep::Hide(for_) => {
                    queue.hide(&queued.receipt, for_).await?;
                    report.hidden += 1;
                }
                ArchiveStep::AwaitReplay => {
                    warn!(letter = %id, "a replay has claimed this letter; not archived (if no replay is running, finish it with `courierctl dlq replay --state replaying`)");
                    queue.hide(&queued.receipt, REPLAY_WAIT).await?;
                    report.replaying += 1;
                }
                ArchiveStep::Recover(key) => {
                    report.recovered += 1;
                    if self.archive.exists(&key).await? {
                        self.index
                            .transition(
                                id,
                                LetterState::Archiving,
                                LetterState::Archived,
                                Some(&key),
                                None,
                            )
                            .await?;
                        to_delete.push(queued.receipt.clone());
                    } else {
                        // Never written: back to live; the copy is visible again at once.
                        self.index
                            .transition(id, LetterState::Archiving, LetterState::Live, None, None)
                            .await?;
                        queue.hide(&queued.receipt, Duration::ZERO).await?;
                    }
                }
                ArchiveStep::Archive => {
                    let day = letter.dead_lettered_at.format("%Y-%m-%d").to_string();
                    let mut letter = letter.clone();
                    if letter.record.payload.is_none()
                        && letter.record.payload_base64.is_none()
                        && let Some((payload, payload_base64)) = payloads.get(id)
                    {
                        letter.record.payload.clone_from(payload);
                        letter.record.payload_base64.clone_from(payload_base64);
                    }
                    groups
                        .entry((letter.record.category, day))
                        .or_default()
                        .push((letter, queued.receipt.clone()));
                }
            }
        }
        // 3-6. One object per category and day.
        for ((category, _), members) in groups {
            let key = archive_key(category, members[0].0.dead_lettered_at, run_id, *seq);
            *seq += 1;
            let mut claimed = Vec::new();
            for (letter, receipt) in members {
                if self
                    .index
                    .transition(
                        &letter.letter_id,
                        LetterState::Live,
                        LetterState::Archiving,
                        Some(&key),
                        None,
                    )
                    .await?
                {
                    claimed.push((letter, receipt));
                }
            }
            if claimed.is_empty() {
                continue;
            }
            for (letter, _) in &claimed {
                self.retain_attachments(letter, report).await?;
            }
            let letters: Vec<IndexedLetter> = claimed.iter().map(|(l, _)| l.clone()).collect();
            if !self.archive.put_new(&key, encode(&letters)?).await? {
                return Err(ArchiveError::ObjectExists(key));
            }
            for (letter, _) in &claimed {
                let done = self
                    .index
                    .transition(
                        &letter.letter_id,
                        LetterState::Archiving,
                        LetterState::Archived,
                        Some(&key),
                        None,
                    )
                    .await?;
                if !done {
                    warn!(letter = %letter.letter_id, "letter left the archiving state meanwhile");
                }
            }
            to_delete.extend(claimed.iter().map(|(_, r)| r.clone()));
            report.archived += claimed.len();
            report.objects.push(key);
        }
        if !to_delete.is_empty() {
            queue.delete(&to_delete).await?;
        }
        Ok(())
    }

    /// Copies the files a letter's job attaches to where they outlive the payload bucket's
    /// 60 days, for as long as the archive keeps the letter (before its object is written, so a
    /// run that stops here redoes it: copies are idempotent).
    async fn retain_attachments(
        &self,
        letter: &IndexedLetter,
        report: &mut ArchiveReport,
    ) -> Result<(), StoreError> {
        let Some(payload) = letter.record.payload.as_deref() else {
            return Ok(());
        };
        for (key, retained) in courier_core::job::attachment::named_in(payload) {
            if self.payloads.copy(&key, &retained).await? {
                report.attachments_retained += 1;
            } else {
                warn!(letter = %letter.letter_id, %key, "an archived letter's attachment is gone; a replay of it will be dead-lettered as local.attachment-missing");
                report.attachments_missing += 1;
            }
        }
        Ok(())
    }
}

/// The Lambda handler: one run per scheduled event; returns the run's report as JSON.
pub async fn function_handler(
    archiver: &Arc<Archiver>,
    event: lambda_runtime::LambdaEvent<serde_json::Value>,
) -> Result<serde_json::Value, lambda_runtime::Error> {
    let deadline =
        DateTime::from_timestamp_millis(i64::try_from(event.context.deadline).unwrap_or(i64::MAX))
            .unwrap_or_else(|| Utc::now() + chrono::Duration::seconds(60));
    let report = archiver.run(&event.context.request_id, deadline).await?;
    Ok(serde_json::json!({
        "archived": report.archived,
        "objects": report.objects,
        "hidden": report.hidden,
        "dropped": report.dropped,
        "indexed_raw": report.indexed_raw,
        "recovered": report.recovered,
        "replaying": report.replaying,
        "attachments_retained": report.attachments_retained,
        "attachments_missing": report.attachments_missing,
        "out_of_time": report.out_of_time,
    }))
}

#[cfg(test)]
mod tests;
