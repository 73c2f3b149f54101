//! `courierctl requeue`: puts back the copy of a job the sweeper found waiting for one that never
//! came (`SweptCopyOverdue`: a purged or deleted queue, past its retention, a failed delay
//! execution), from the body its status record keeps.
//!
//! The copy is the job at the record's generation, with a fresh retry budget (as a dead letter's
//! replay), sealed by the scheduler it is given. The send function's claim takes it like the lost
//! copy: at most one send per generation, so a late original arriving too is dropped as a
//! duplicate. An `unknown` job is sent again once its grace window is over, as its lost copy would
//! have been (a recorded duplicate if the provider had it).

use chrono::{DateTime, Utc};
use courier_core::envelope::{parse_body, replay_body};
use courier_core::ports::{HistoryEntry, JobRecord, Requeue, RetryScheduler, StatusStore};
use courier_core::status::Status;

use crate::workbench::{DlqError, Outcome};

/// The copy to put back for `record`, or why there is none to put back.
pub fn copy_of(record: &JobRecord) -> Result<String, String> {
    if !matches!(record.status, Status::Deferred | Status::Unknown) {
        return Err(format!(
            "the job is {}: it waits for no copy",
            record.status
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
    let payload = record.payload.as_deref().ok_or(
        "its record keeps no body (the stack sends through SMTP only, or the job is over \
         300 KiB): its producer must send it again under a new message_id",
    )?;
    // The kept body's own attempt history goes with it (the envelope's, not the record's).
    let history = parse_body(payload.as_bytes())
        .map(|kept| kept.history)
        .unwrap_or_default();
    replay_body(payload, record.attempt, history, record.trace_id.as_deref())
}

/// Where put-back copies go, and who puts them back and why.
pub struct PutBack<'a> {
    pub scheduler: &'a dyn RetryScheduler,
    pub operator: &'a str,
    pub reason: &'a str,
}

/// Puts back the copies of `message_ids` (see [`copy_of`]) as `put_back` says, with no delay,
/// each after a history entry that says who and why (written only while the job is still as it
/// was read: one that moved on meanwhile is skipped). `put_back` `None`: only checks each job.
pub async fn requeue(
    message_ids: &[String],
    status: &dyn StatusStore,
    put_back: Option<&PutBack<'_>>,
    now: DateTime<Utc>,
) -> Result<Outcome, DlqError> {
    let mut outcome = Outcome::default();
    for id in message_ids {
        let Some(record) = status.get(id).await? else {
            outcome.skipped.push((id.clone(), "no such job".into()));
            continue;
        };
        let body = match copy_of(&record) {
            Ok(body) => body,
            Err(why) => {
                outcome.skipped.push((id.clone(), why));
                continue;
            }
        };
        let Some(PutBack {
            scheduler,
            operator,
            reason,
        }) = put_back
        else {
            outcome.done.push(id.clone());
            continue;
        };
        let entry = HistoryEntry {
            at: now,
            status: record.status,
            attempt: record.attempt,
            by: "operator".into(),
            detail: Some(format!("its lost copy put back by {operator}: {reason}")),
        };
        if !status.note(id, &entry).await? {
            outcome
                .skipped
                .push((id.clone(), "the job moved on meanwhile".into()));
            continue;
        }
        let copy = Requeue {
            message_id: id.clone(),
            body,
            delay_secs: 0,
        };
        if let Some(Err(e)) = scheduler.enqueue(std::slice::from_ref(&copy)).await.pop() {
            return Err(e.into());
        }
        outcome.done.push(id.clone());
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use courier_core::ports::{ClaimOutcome, ClaimRequest, SweepMark};
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
            payload: Some(
                r#"{"version": 1, "message_id": "lost", "campaign_id": "c", "from": "a@example.com",
                    "to": ["b@example.org"], "content": {"subject": "Hi", "text": "x"}}"#
                    .into(),
            ),
        }
    }

    fn put_back<'a>(scheduler: &'a MemoryScheduler, reason: &'a str) -> PutBack<'a> {
        PutBack {
            scheduler,
            operator: "ann",
            reason,
        }
    }

    /// A job claimed as generation 0, deferred to generation 1 with its copy due at 60 s, and
    /// flagged by the sweeper at an hour past that.
    async fn flagged(store: &MemoryStatusStore, id: &str) -> JobRecord {
        store.claim(&claim(id, 0, t(0))).await.unwrap();
        let mut deferred =
            courier_core::ports::StatusUpdate::new(id, "worker-0", Status::Deferred, 1, t(0));
        deferred.copy_due = Some(t(60));
        store.finish(&deferred).await.unwrap();
        let found = store.get(id).await.unwrap().unwrap();
        assert!(
            store
                .sweep(&found, SweepMark::CopyOverdue, t(3700))
                .await
                .unwrap()
        );
        store.get(id).await.unwrap().unwrap()
    }

    #[tokio::test]
    async fn a_flagged_jobs_copy_is_put_back_at_its_generation_and_claimed_once() {
        let store = MemoryStatusStore::default();
        let scheduler = MemoryScheduler::default();
        flagged(&store, "lost").await;
        let ids = vec!["lost".to_owned()];
        // A dry run changes nothing.
        let dry = requeue(&ids, &store, None, t(4000)).await.unwrap();
        assert_eq!(dry.done, ids);
        assert!(scheduler.queued.lock().unwrap().is_empty());
        let before = store.get("lost").await.unwrap().unwrap();
        // Confirmed: one copy, no delay, of generation 1, the job's trace kept, and who and why
        // in the timeline.
        let done = requeue(
            &ids,
            &store,
            Some(&put_back(&scheduler, "queue purged")),
            t(4000),
        )
        .await
        .unwrap();
        assert_eq!((done.done, done.skipped), (ids.clone(), Vec::new()));
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
        // The copy claims generation 1 once; the late original, arriving too, is a duplicate.
        assert_eq!(
            store
                .claim(&claim("lost", copy.attempt, t(4001)))
                .await
                .unwrap(),
            ClaimOutcome::Claimed
        );
        let mut sent = courier_core::ports::StatusUpdate::new(
            "lost",
            "worker-1",
            Status::SentToProvider,
            1,
            t(4002),
        );
        sent.provider = Some("smtp".into());
        store.finish(&sent).await.unwrap();
        assert_eq!(
            store.claim(&claim("lost", 1, t(4003))).await.unwrap(),
            ClaimOutcome::Duplicate(Status::SentToProvider)
        );
        // And a job that moved on is not put back again.
        let again = requeue(&ids, &store, Some(&put_back(&scheduler, "again")), t(4004))
            .await
            .unwrap();
        assert!(again.done.is_empty());
        assert!(again.skipped[0].1.contains("sent_to_provider"), "{again:?}");
        assert_eq!(scheduler.queued.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn only_a_flagged_waiting_job_with_a_kept_body_is_put_back() {
        let store = MemoryStatusStore::default();
        let scheduler = MemoryScheduler::default();
        // Waiting, but not flagged: its copy may still come.
        store.claim(&claim("waiting", 0, t(0))).await.unwrap();
        let mut deferred = courier_core::ports::StatusUpdate::new(
            "waiting",
            "worker-0",
            Status::Deferred,
            1,
            t(0),
        );
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
        // Not waiting at all.
        store.claim(&claim("busy", 0, t(0))).await.unwrap();
        let ids: Vec<String> = ["waiting", "bodiless", "busy", "absent"]
            .map(str::to_owned)
            .to_vec();
        let outcome = requeue(&ids, &store, Some(&put_back(&scheduler, "x")), t(4000))
            .await
            .unwrap();
        assert!(outcome.done.is_empty());
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
        assert!(why[2].1.contains("processing"), "{why:?}");
        assert_eq!(why[3], ("absent", "no such job"));
        assert!(scheduler.queued.lock().unwrap().is_empty());
        // Nothing was written to any of them.
        assert_eq!(
            store.get("waiting").await.unwrap().unwrap().history.len(),
            2
        );
    }
}
