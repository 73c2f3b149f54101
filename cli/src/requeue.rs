//! `courierctl requeue`: puts back the copy of a job the sweeper found waiting for one that never
//! came (`SweptCopyOverdue`: a purged or deleted queue, past its retention, a failed delay
//! execution), from the body its status record keeps.
//!
//! The copy is the job at the record's generation, with a fresh retry budget (as a dead letter's
//! replay), sealed by the scheduler it is given; the job then waits again for it (in the sweeper's
//! index, due at once: lost too, it is flagged again). The send function's claim takes it like the
//! lost copy: at most one send per generation, so a late original arriving too is dropped as a
//! duplicate. An `unknown` job whose record keeps the provider's acceptance is refused (it was
//! sent); another `unknown` job is sent again once its grace window is over, as its lost copy
//! would have been (a recorded duplicate if the provider had it).

use chrono::{DateTime, Utc};
use courier_core::claim_check::{self, RedeemError};
use courier_core::envelope::{parse_body, replay_body};
use courier_core::ports::{
    HistoryEntry, JobRecord, OpenState, PayloadStore, Requeue, RetryScheduler, StatusStore,
};
use courier_core::status::Status;

use crate::workbench::DlqError;

/// What `requeue` did, or would do, job by job.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Put back (or, in a dry run, to be put back).
    pub done: Vec<String>,
    /// (message id, why not): nothing was written or sent.
    pub skipped: Vec<(String, String)>,
    /// (message id, error): the copy could not be put back (or the job's record not read or
    /// written); trying again is safe.
    pub failed: Vec<(String, String)>,
}

/// The body `record` keeps to put its copy back from (as kept: a body over 300 KiB is a claim
/// check of it, [`kept_body`]), or why there is none to put back.
pub fn waiting_copy(record: &JobRecord) -> Result<&str, String> {
    if !matches!(record.status, Status::Deferred | Status::Unknown) {
        return Err(format!(
            "the job is {}: it waits for no copy",
            record.status
        ));
    }
    if record.status == Status::Unknown
        && let Some(id) = &record.provider_message_id
    {
        return Err(format!(
            "the provider accepted it as {id} (kept on its record): it was sent and is not sent \
             again (SES's events record it; an SMTP send stays unknown for review)"
        ));
    }
    if record.swept_at.is_none() {
        return Err(match record.copy_due {
            Some(due) => format!(
                "not flagged by the sweeper: its copy is due back at {} (wait for it, or for the sweeper)",
                due.to_rfc3339()
            ),
            None => "not flagged by the sweeper (its record names no due time)".into(),
        });
    }
    record.payload.as_deref().ok_or_else(|| {
        "its record keeps no body (the stack sends through SMTP only, or the job was over \
         300 KiB and claimed before such bodies were kept in the payload bucket): its producer \
         must send it again under a new message_id"
            .into()
    })
}

/// The copy to put back for `record`, from `body`, the body it keeps.
pub fn copy_of(record: &JobRecord, body: &str) -> Result<String, String> {
    // The kept body's own attempt history goes with it (the envelope's, not the record's).
    let history = parse_body(body.as_bytes())
        .map(|kept| kept.history)
        .unwrap_or_default();
    replay_body(body, record.attempt, history, record.trace_id.as_deref())
}

/// The body a record keeps: as it is, or, over 300 KiB, read from the payload bucket its claim
/// check names. `Ok(Err(why))` when that body is gone or altered.
pub async fn kept_body(
    payloads: Option<&dyn PayloadStore>,
    kept: &str,
) -> Result<Result<String, String>, DlqError> {
    match claim_check::redeem(payloads, kept).await {
        Ok(body) => Ok(Ok(body.into_owned())),
        Err(RedeemError::Store(e)) if payloads.is_none() => {
            Err(courier_core::ports::StoreError::msg(
                "requeue",
                format!(
                    "{e}: its body is kept in the payload bucket; set COURIER_PAYLOAD_BUCKET (or \
                 --stack)"
                ),
            )
            .into())
        }
        Err(RedeemError::Store(e)) => Err(e.into()),
        Err(e) => Ok(Err(format!(
            "{e}: kept for PayloadRetentionDays; its producer must send it again under a new \
             message_id"
        ))),
    }
}

/// The jobs the sweeper flagged as overdue by `now` (their copy never came back), oldest flag
/// first, at most `limit` (the status table's `by_open` index, eventually consistent: each is
/// read again before it is put back).
pub async fn overdue(
    status: &dyn StatusStore,
    limit: usize,
    now: DateTime<Utc>,
) -> Result<Vec<String>, DlqError> {
    let found = status
        .open_before(
            OpenState::Overdue,
            now + chrono::Duration::seconds(1),
            limit,
        )
        .await?;
    Ok(found.into_iter().map(|r| r.message_id).collect())
}

/// Where put-back copies go, and who puts them back and why.
pub struct PutBack<'a> {
    pub scheduler: &'a dyn RetryScheduler,
    pub operator: &'a str,
    pub reason: &'a str,
}

/// Puts back the copies of `message_ids` (see [`copy_of`]) as `put_back` says, with no delay;
/// then the job waits again for that copy, with who and why in its timeline (written only while
/// the job is still as it was read: a job a copy claimed meanwhile has its claim's entry
/// instead). A body over 300 KiB is read from `payloads` (`None`: no payload bucket is named;
/// such a job fails). A job that fails is reported and the others are tried. `put_back` `None`:
/// a dry run, which reads each job and its body and builds its copy, so it reports what a run
/// would skip or fail, and writes and sends nothing.
pub async fn requeue(
    message_ids: &[String],
    status: &dyn StatusStore,
    payloads: Option<&dyn PayloadStore>,
    put_back: Option<&PutBack<'_>>,
    now: DateTime<Utc>,
) -> Outcome {
    let mut outcome = Outcome::default();
    for id in message_ids {
        match requeue_one(id, status, payloads, put_back, now).await {
            Ok(Ok(())) => outcome.done.push(id.clone()),
            Ok(Err(why)) => outcome.skipped.push((id.clone(), why)),
            Err(e) => outcome.failed.push((id.clone(), e.to_string())),
        }
    }
    outcome
}

/// One job: `Ok(Err(why))` when it is not put back.
async fn requeue_one(
    id: &str,
    status: &dyn StatusStore,
    payloads: Option<&dyn PayloadStore>,
    put_back: Option<&PutBack<'_>>,
    now: DateTime<Utc>,
) -> Result<Result<(), String>, DlqError> {
    let Some(record) = status.get(id).await? else {
        return Ok(Err("no such job".into()));
    };
    let kept = match waiting_copy(&record) {
        Ok(kept) => kept,
        Err(why) => return Ok(Err(why)),
    };
    let body = match kept_body(payloads, kept).await? {
        Ok(kept) => copy_of(&record, &kept),
        Err(why) => Err(why),
    };
    let body = match body {
        Ok(body) => body,
        Err(why) => return Ok(Err(why)),
    };
    let Some(PutBack {
        scheduler,
        operator,
        reason,
    }) = put_back
    else {
        return Ok(Ok(()));
    };
    // The copy first: if the record's write then fails, the copy is one more the claim takes
    // once; the other way round, a timeline would say a copy went back that never did.
    let copy = Requeue {
        message_id: id.to_owned(),
        body,
        delay_secs: 0,
    };
    match scheduler.enqueue(std::slice::from_ref(&copy)).await.pop() {
        Some(Ok(())) => {}
        Some(Err(e)) => return Err(e.into()),
        None => {
            return Err(courier_core::ports::StoreError::msg(
                "requeue",
                "the queue gave no answer",
            )
            .into());
        }
    }
    let entry = HistoryEntry {
        at: now,
        status: record.status,
        attempt: record.attempt,
        by: "operator".into(),
        detail: Some(format!("its lost copy put back by {operator}: {reason}")),
    };
    // False when the job moved on since it was read: a copy (this one, or the late original)
    // claimed it, and the other is dropped by its claim. The copy is queued either way.
    status.rewait(id, &entry, now).await?;
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use courier_core::ports::{ClaimOutcome, ClaimRequest, StatusUpdate, SweepMark};
    use courier_devkit::memory::{MemoryScheduler, MemoryStatusStore};

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn claim(id: &str, attempt: u32, at: DateTime<Utc>) -> ClaimRequest {
        ClaimRequest {
            message_id: id.into(),
            attempt,
            owner: format!("worker-{attempt}"),
            now: at,
            lease_until: at + chrono::Duration::seconds(60),
            grace: chrono::Duration::seconds(900),
            check_suppressed: Vec::new(),
            trace_id: Some("trace-1".into()),
            facts: Default::default(),
            payload: Some(format!(
                r#"{{"version": 1, "message_id": "{id}", "campaign_id": "c", "from": "a@example.com",
                    "to": ["b@example.org"], "content": {{"subject": "Hi", "text": "x"}}}}"#
            )),
        }
    }

    fn put_back<'a>(scheduler: &'a MemoryScheduler, reason: &'a str) -> PutBack<'a> {
        PutBack {
            scheduler,
            operator: "ann",
            reason,
        }
    }

    /// A job claimed as generation 0, left `status` at generation 1 with its copy due at 60 s
    /// (`provider_message_id`: an acceptance kept with it), then flagged by the sweeper an hour
    /// past that.
    async fn flagged_as(
        store: &MemoryStatusStore,
        id: &str,
        status: Status,
        provider_message_id: Option<&str>,
    ) -> JobRecord {
        store.claim(&claim(id, 0, t(0))).await.unwrap();
        let mut waiting = StatusUpdate::new(id, "worker-0", status, 1, t(0));
        waiting.copy_due = Some(t(60));
        waiting.provider_message_id = provider_message_id.map(str::to_owned);
        store.finish(&waiting).await.unwrap();
        let found = store.get(id).await.unwrap().unwrap();
        assert!(
            store
                .sweep(&found, SweepMark::CopyOverdue, t(3700))
                .await
                .unwrap()
        );
        store.get(id).await.unwrap().unwrap()
    }

    async fn flagged(store: &MemoryStatusStore, id: &str) -> JobRecord {
        flagged_as(store, id, Status::Deferred, None).await
    }

    async fn waiting(store: &MemoryStatusStore, id: &str, before: DateTime<Utc>) -> bool {
        store
            .open_before(OpenState::Waiting, before, 100)
            .await
            .unwrap()
            .iter()
            .any(|r| r.message_id == id)
    }

    #[tokio::test]
    async fn a_flagged_jobs_copy_is_put_back_at_its_generation_and_claimed_once() {
        let store = MemoryStatusStore::default();
        let scheduler = MemoryScheduler::default();
        flagged(&store, "lost").await;
        let ids = vec!["lost".to_owned()];
        // A dry run changes nothing.
        let dry = requeue(&ids, &store, None, None, t(4000)).await;
        assert_eq!(dry.done, ids);
        assert!(scheduler.queued.lock().unwrap().is_empty());
        let before = store.get("lost").await.unwrap().unwrap();
        // Confirmed: one copy, no delay, of generation 1, the job's trace kept, and who and why
        // in the timeline.
        let done = requeue(
            &ids,
            &store,
            None,
            Some(&put_back(&scheduler, "queue purged")),
            t(4000),
        )
        .await;
        assert_eq!(
            done,
            Outcome {
                done: ids.clone(),
                ..Outcome::default()
            }
        );
        let queued = scheduler.queued.lock().unwrap().clone();
        assert_eq!(queued.len(), 1);
        assert_eq!(queued[0].delay_secs, 0);
        let copy = parse_body(queued[0].body.as_bytes()).unwrap();
        assert_eq!(copy.attempt, 1);
        assert_eq!(copy.job.message_id, "lost");
        assert_eq!(copy.trace.as_deref(), Some("trace-1"));
        let rec = store.get("lost").await.unwrap().unwrap();
        assert_eq!(rec.history.len(), before.history.len() + 1);
        let last = rec.history.last().unwrap();
        assert_eq!(
            (last.by.as_str(), last.status, last.attempt),
            ("operator", Status::Deferred, 1)
        );
        assert!(
            last.detail
                .as_deref()
                .unwrap()
                .contains("ann: queue purged")
        );
        // The job waits for the put-back copy: flagged again if it is lost too.
        assert_eq!((rec.copy_due, rec.swept_at), (Some(t(4000)), None));
        assert!(waiting(&store, "lost", t(4001)).await);
        // The copy claims generation 1 once; the late original, arriving too, is a duplicate.
        assert_eq!(
            store
                .claim(&claim("lost", copy.attempt, t(4001)))
                .await
                .unwrap(),
            ClaimOutcome::Claimed
        );
        let mut sent = StatusUpdate::new("lost", "worker-1", Status::SentToProvider, 1, t(4002));
        sent.provider = Some("smtp".into());
        store.finish(&sent).await.unwrap();
        assert_eq!(
            store.claim(&claim("lost", 1, t(4003))).await.unwrap(),
            ClaimOutcome::Duplicate(Status::SentToProvider)
        );
        // And a job that moved on is not put back again.
        let again = requeue(
            &ids,
            &store,
            None,
            Some(&put_back(&scheduler, "again")),
            t(4004),
        )
        .await;
        assert!(again.done.is_empty());
        assert!(again.skipped[0].1.contains("sent_to_provider"), "{again:?}");
        assert_eq!(scheduler.queued.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn only_a_flagged_waiting_job_with_a_kept_body_and_no_kept_acceptance_is_put_back() {
        let store = MemoryStatusStore::default();
        let scheduler = MemoryScheduler::default();
        // Waiting, but not flagged: its copy may still come.
        store.claim(&claim("waiting", 0, t(0))).await.unwrap();
        let mut deferred = StatusUpdate::new("waiting", "worker-0", Status::Deferred, 1, t(0));
        deferred.copy_due = Some(t(60));
        store.finish(&deferred).await.unwrap();
        // Flagged, but no body kept (an SMTP-only stack).
        flagged(&store, "bodiless").await;
        store
            .records
            .lock()
            .unwrap()
            .get_mut("bodiless")
            .unwrap()
            .payload = None;
        // Flagged `unknown` with the provider's acceptance kept: it was sent.
        flagged_as(&store, "accepted", Status::Unknown, Some("ses-1")).await;
        // Not waiting at all.
        store.claim(&claim("busy", 0, t(0))).await.unwrap();
        let ids: Vec<String> = ["waiting", "bodiless", "accepted", "busy", "absent"]
            .map(str::to_owned)
            .to_vec();
        let before = store.records.lock().unwrap().clone();
        let outcome = requeue(
            &ids,
            &store,
            None,
            Some(&put_back(&scheduler, "x")),
            t(4000),
        )
        .await;
        assert!(
            outcome.done.is_empty() && outcome.failed.is_empty(),
            "{outcome:?}"
        );
        let why: Vec<(&str, &str)> = outcome
            .skipped
            .iter()
            .map(|(id, why)| (id.as_str(), why.as_str()))
            .collect();
        assert!(
            why[0].1.contains("not flagged") && why[0].1.contains("due back at"),
            "{why:?}"
        );
        assert!(why[1].1.contains("new message_id"), "{why:?}");
        assert!(
            why[2].1.contains("accepted it as ses-1") && why[2].1.contains("not sent again"),
            "{why:?}"
        );
        assert!(why[3].1.contains("processing"), "{why:?}");
        assert_eq!(why[4], ("absent", "no such job"));
        assert!(scheduler.queued.lock().unwrap().is_empty());
        assert_eq!(*store.records.lock().unwrap(), before, "nothing written");
    }

    #[tokio::test]
    async fn overdue_lists_the_flagged_waiting_jobs_until_each_is_put_back() {
        let store = MemoryStatusStore::default();
        let scheduler = MemoryScheduler::default();
        flagged(&store, "a").await;
        flagged(&store, "b").await;
        // Waiting, not flagged; and a job that moved on after its flag.
        store.claim(&claim("waiting", 0, t(0))).await.unwrap();
        let mut deferred = StatusUpdate::new("waiting", "worker-0", Status::Deferred, 1, t(0));
        deferred.copy_due = Some(t(60));
        store.finish(&deferred).await.unwrap();
        flagged(&store, "moved").await;
        store.claim(&claim("moved", 1, t(3800))).await.unwrap();
        let mut listed = overdue(&store, 10, t(4000)).await.unwrap();
        listed.sort();
        assert_eq!(listed, ["a", "b"]);
        assert_eq!(
            overdue(&store, 1, t(4000)).await.unwrap().len(),
            1,
            "--limit"
        );
        assert!(
            overdue(&store, 10, t(3000)).await.unwrap().is_empty(),
            "flagged at 3700"
        );
        let done = requeue(
            &["a".to_owned()],
            &store,
            None,
            Some(&put_back(&scheduler, "x")),
            t(4000),
        )
        .await;
        assert_eq!(done.done, ["a"]);
        assert_eq!(overdue(&store, 10, t(4001)).await.unwrap(), ["b"]);
    }

    #[tokio::test]
    async fn an_unknown_job_without_a_kept_acceptance_is_put_back_to_wait_out_its_grace() {
        let store = MemoryStatusStore::default();
        let scheduler = MemoryScheduler::default();
        flagged_as(&store, "ambiguous", Status::Unknown, None).await;
        let ids = vec!["ambiguous".to_owned()];
        let outcome = requeue(
            &ids,
            &store,
            None,
            Some(&put_back(&scheduler, "purged")),
            t(4000),
        )
        .await;
        assert_eq!(outcome.done, ids);
        let rec = store.get("ambiguous").await.unwrap().unwrap();
        assert_eq!((rec.status, rec.copy_due), (Status::Unknown, Some(t(4000))));
    }

    #[tokio::test]
    async fn a_copy_the_queue_refuses_is_reported_and_the_next_job_is_still_put_back() {
        let store = MemoryStatusStore::default();
        let scheduler = MemoryScheduler::default();
        flagged(&store, "first").await;
        flagged(&store, "second").await;
        let first_before = store.get("first").await.unwrap().unwrap();
        scheduler.fail_enqueues.set(1);
        let ids = vec!["first".to_owned(), "second".to_owned()];
        let outcome = requeue(
            &ids,
            &store,
            None,
            Some(&put_back(&scheduler, "purged")),
            t(4000),
        )
        .await;
        assert_eq!(outcome.done, vec!["second".to_owned()]);
        assert_eq!(outcome.failed.len(), 1);
        assert_eq!(outcome.failed[0].0, "first");
        // Nothing says the first was put back; it stays flagged for another try.
        assert_eq!(store.get("first").await.unwrap().unwrap(), first_before);
        let queued = scheduler.queued.lock().unwrap().clone();
        assert_eq!(queued.len(), 1);
        assert_eq!(queued[0].message_id, "second");
    }

    /// A body over 300 KiB is kept in the payload bucket, its record holding a claim check: the
    /// copy is put back from the bucket. Without a bucket to read it from the job fails (named
    /// in the error; trying again is safe); a body gone from it is skipped with why.
    #[tokio::test]
    async fn a_body_kept_in_the_payload_bucket_is_read_back_from_it() {
        use courier_core::claim_check::{ClaimCheck, MAX_KEPT_BYTES, keep};
        use courier_devkit::memory::MemoryPayloads;
        let store = MemoryStatusStore::default();
        let scheduler = MemoryScheduler::default();
        let payloads = MemoryPayloads::default();
        let large = format!(
            r#"{{"version": 1, "message_id": "large", "campaign_id": "c", "from": "a@example.com",
                "to": ["b@example.org"], "content": {{"subject": "Hi", "text": "{}"}}}}"#,
            "x".repeat(MAX_KEPT_BYTES)
        );
        let kept = keep(&payloads, large.clone()).await.unwrap();
        let check = ClaimCheck::parse(&kept).expect("kept apart");
        for id in ["large", "gone"] {
            flagged(&store, id).await;
            store.records.lock().unwrap().get_mut(id).unwrap().payload = Some(kept.clone());
        }
        let ids = vec!["large".to_owned()];
        // No payload bucket named: failed, nothing sent or written
        let before = store.get("large").await.unwrap().unwrap();
        let outcome = requeue(
            &ids,
            &store,
            None,
            Some(&put_back(&scheduler, "x")),
            t(4000),
        )
        .await;
        assert_eq!(outcome.failed.len(), 1, "{outcome:?}");
        assert!(
            outcome.failed[0].1.contains("COURIER_PAYLOAD_BUCKET"),
            "{outcome:?}"
        );
        assert!(scheduler.queued.lock().unwrap().is_empty());
        assert_eq!(store.get("large").await.unwrap().unwrap(), before);
        // ... and a dry run says so too
        let dry = requeue(&ids, &store, None, None, t(4000)).await;
        assert!(
            dry.failed.len() == 1 && dry.failed[0].1.contains("COURIER_PAYLOAD_BUCKET"),
            "{dry:?}"
        );
        // With the bucket: the copy is the stored job at its generation
        let with_bucket = put_back(&scheduler, "x");
        let dry = requeue(&ids, &store, Some(&payloads), None, t(4000)).await;
        assert_eq!(dry.done, ids, "{dry:?}");
        assert!(scheduler.queued.lock().unwrap().is_empty());
        let outcome = requeue(&ids, &store, Some(&payloads), Some(&with_bucket), t(4000)).await;
        assert_eq!(outcome.done, ids, "{outcome:?}");
        let queued = scheduler.queued.lock().unwrap().clone();
        let copy = parse_body(queued[0].body.as_bytes()).unwrap();
        assert_eq!((copy.job.message_id.as_str(), copy.attempt), ("large", 1));
        assert_eq!(
            copy.job.content,
            parse_body(large.as_bytes()).unwrap().job.content
        );
        // The stored body gone (expired): skipped, saying so
        payloads.objects.lock().unwrap().remove(&check.key);
        let gone = ["gone".to_owned()];
        let before = store.get("gone").await.unwrap().unwrap();
        for put_back in [None, Some(&with_bucket)] {
            let outcome = requeue(&gone, &store, Some(&payloads), put_back, t(4000)).await;
            assert_eq!(outcome.skipped.len(), 1, "{outcome:?}");
            assert!(
                outcome.skipped[0].1.contains("not in the payload store")
                    && outcome.skipped[0].1.contains("new message_id"),
                "{outcome:?}"
            );
        }
        assert_eq!(store.get("gone").await.unwrap().unwrap(), before);
    }
}
