//! The sweeper on in-memory ports, on a manual clock.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use courier_core::ports::{JobRecord, StatusStore};
use courier_core::status::Status;
use courier_devkit::memory::{ManualClock, MemoryOutcomeBus, MemoryStatusStore};

use super::*;

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

struct World {
    sweeper: Sweeper,
    status: Arc<MemoryStatusStore>,
    clock: Arc<ManualClock>,
    bus: Arc<MemoryOutcomeBus>,
}

fn world() -> World {
    let status = Arc::new(MemoryStatusStore::default());
    let clock = Arc::new(ManualClock::new(t0()));
    let bus = Arc::new(MemoryOutcomeBus::default());
    World {
        sweeper: Sweeper {
            status: status.clone(),
            clock: clock.clone(),
            settings: Settings {
                status_table: "status".into(),
                lease_grace: Duration::minutes(5),
                no_outcome_after: Duration::hours(6),
                copy_grace: Duration::hours(1),
                outcome_bus: Some("outcomes".into()),
            },
            outcomes: Some(bus.clone()),
        },
        status,
        clock,
        bus,
    }
}

impl World {
    fn put(&self, id: &str, status: Status, provider: &str, age: Duration) {
        let at = t0() - age;
        let mut rec = JobRecord::new(id, status, 1, at);
        rec.provider = Some(provider.into());
        if status == Status::Processing {
            rec.lease_owner = Some("dead-worker".into());
            rec.lease_until = Some(at + Duration::minutes(2));
        }
        self.status.records.lock().unwrap().insert(id.into(), rec);
    }

    /// A `deferred` or `unknown` job written `age` ago whose copy is due at `due`.
    fn put_waiting(&self, id: &str, status: Status, age: Duration, due: DateTime<Utc>) {
        let mut rec = JobRecord::new(id, status, 2, t0() - age);
        rec.copy_due = Some(due);
        self.status.records.lock().unwrap().insert(id.into(), rec);
    }

    async fn get(&self, id: &str) -> JobRecord {
        self.status.get(id).await.unwrap().unwrap()
    }

    fn far(&self) -> DateTime<Utc> {
        self.clock.now() + Duration::minutes(5)
    }
}

#[tokio::test]
async fn stuck_and_silent_jobs_are_marked_and_the_rest_left_alone() {
    let w = world();
    w.put("stuck", Status::Processing, "ses", Duration::hours(1));
    w.put("leased", Status::Processing, "ses", Duration::minutes(3));
    w.put("silent", Status::SentToProvider, "ses", Duration::hours(7));
    w.put("recent", Status::SentToProvider, "ses", Duration::hours(1));
    w.put("smtp", Status::SentToProvider, "smtp", Duration::hours(30));
    w.put("done", Status::Delivered, "ses", Duration::hours(30));
    let report = w.sweeper.run(w.far()).await.unwrap();
    assert_eq!(
        report,
        SweepReport {
            stuck_processing: 1,
            no_outcome: 1,
            moved_on: 0,
            stopped_early: false,
            ..SweepReport::default()
        }
    );
    let stuck = w.get("stuck").await;
    assert_eq!(stuck.status, Status::Unknown);
    assert_eq!(stuck.unknown_since, Some(t0()));
    assert_eq!(stuck.history.last().unwrap().by, "sweeper");
    let silent = w.get("silent").await;
    assert_eq!(silent.status, Status::SentToProvider);
    assert_eq!(silent.swept_at, Some(t0()));
    for (id, status) in [
        ("leased", Status::Processing),
        ("recent", Status::SentToProvider),
        ("smtp", Status::SentToProvider),
        ("done", Status::Delivered),
    ] {
        let rec = w.get(id).await;
        assert_eq!(rec.status, status, "{id}");
        assert!(rec.history.is_empty(), "{id}");
    }
    // Marked jobs are not found again.
    assert_eq!(
        w.sweeper.run(w.far()).await.unwrap(),
        SweepReport::default()
    );
    let emf = report.to_emf(0);
    assert_eq!(emf["SweptStuckProcessing"], 1);
    assert_eq!(emf["SweptNoOutcome"], 1);
}

#[tokio::test]
async fn many_pages_are_swept_and_the_deadline_is_kept() {
    let w = world();
    for i in 0..(PAGE * 2 + 7) {
        w.put(
            &format!("s{i}"),
            Status::SentToProvider,
            "ses",
            Duration::hours(8),
        );
    }
    let report = w.sweeper.run(w.far()).await.unwrap();
    assert_eq!(report.no_outcome, PAGE * 2 + 7);
    // Too close to the deadline: nothing is done, the next run has it.
    w.put("late", Status::SentToProvider, "ses", Duration::hours(8));
    let report = w
        .sweeper
        .run(w.clock.now() + Duration::seconds(2))
        .await
        .unwrap();
    assert!(report.stopped_early);
    assert!(w.get("late").await.swept_at.is_none());
}

#[tokio::test]
async fn a_store_failure_is_an_error_not_a_silent_success() {
    let w = world();
    w.put("silent", Status::SentToProvider, "ses", Duration::hours(7));
    w.status.fail_finishes.set(1);
    assert!(w.sweeper.run(w.far()).await.is_err());
    // The next run does it.
    assert_eq!(w.sweeper.run(w.far()).await.unwrap().no_outcome, 1);
}

#[test]
fn settings_name_the_variable_that_is_wrong() {
    let lookup = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    let s = Settings::from_lookup(lookup(&[("COURIER_STATUS_TABLE", "t")])).unwrap();
    assert_eq!(s.outcome_bus, None);
    assert_eq!(s.no_outcome_after, Duration::hours(6));
    assert_eq!(s.lease_grace, Duration::minutes(5));
    let s = Settings::from_lookup(lookup(&[
        ("COURIER_STATUS_TABLE", "t"),
        ("COURIER_SWEEP_NO_OUTCOME_AFTER", "90m"),
        ("COURIER_OUTCOME_BUS", "stack-outcomes"),
    ]))
    .unwrap();
    assert_eq!(s.no_outcome_after, Duration::minutes(90));
    assert_eq!(s.outcome_bus.as_deref(), Some("stack-outcomes"));
    assert!(matches!(
        Settings::from_lookup(lookup(&[])),
        Err(SettingsError::Missing("COURIER_STATUS_TABLE"))
    ));
    for (name, value) in [
        ("COURIER_SWEEP_NO_OUTCOME_AFTER", "soon"),
        ("COURIER_SWEEP_LEASE_GRACE", "0s"),
    ] {
        let pairs: &'static [(&'static str, &'static str)] =
            Box::leak(Box::new([("COURIER_STATUS_TABLE", "t"), (name, value)]));
        match Settings::from_lookup(lookup(pairs)) {
            Err(SettingsError::Invalid { name: n, .. }) => assert_eq!(n, name),
            other => panic!("{name}={value}: {other:?}"),
        }
    }
}

impl World {
    /// A job whose outcome was written `age` ago and never published.
    fn unpublished(&self, id: &str, status: Status, age: Duration) {
        let at = t0() - age;
        let mut rec = JobRecord::new(id, status, 2, at);
        rec.provider = Some("smtp".into());
        rec.facts.campaign_id = Some("c-1".into());
        rec.facts.metadata.insert("order".into(), "o-42".into());
        rec.outbox = Some(courier_core::ports::Outbox {
            status,
            attempt: 2,
            at,
        });
        self.status.records.lock().unwrap().insert(id.into(), rec);
    }
}

#[tokio::test]
async fn outcomes_their_writer_left_unpublished_are_published_once_cleared() {
    let w = world();
    // GIVEN two outcomes unpublished for two minutes and one written 30 s ago
    w.unpublished("old-sent", Status::SentToProvider, Duration::minutes(2));
    w.unpublished("old-dead", Status::DeadLettered, Duration::minutes(3));
    w.unpublished("fresh", Status::Delivered, Duration::seconds(30));
    // WHEN the sweeper runs
    let report = w.sweeper.run(w.far()).await.unwrap();
    // THEN the two old ones are published, oldest first, and cleared; the fresh one is its
    // writer's for now
    assert_eq!(report.outcomes_relayed, 2);
    let emf = report.to_emf(0);
    assert_eq!(emf["OutcomesRelayed"], 2);
    assert_eq!(emf["OutcomesUnpublished"], 0);
    let ids: Vec<String> = w
        .bus
        .events()
        .iter()
        .map(|e| e.detail.event_id.clone())
        .collect();
    assert_eq!(ids, ["old-dead/2/dead_lettered", "old-sent/2/sent"]);
    let event = &w.bus.events()[1];
    assert_eq!(event.detail_type, "Email Sent");
    assert_eq!(event.detail.metadata["order"], "o-42");
    assert_eq!(event.detail.campaign_id.as_deref(), Some("c-1"));
    assert_eq!(w.get("old-sent").await.outbox, None);
    assert!(w.get("fresh").await.outbox.is_some());
    // AND a second run publishes nothing again
    let again = w.sweeper.run(w.far()).await.unwrap();
    assert_eq!((again.outcomes_relayed, w.bus.events().len()), (0, 2));
}

#[tokio::test]
async fn an_outcome_the_bus_refuses_stays_marked_for_the_next_run() {
    let w = world();
    w.unpublished("j", Status::Complained, Duration::minutes(5));
    // GIVEN a bus that fails its next call
    w.bus.fail.set(1);
    let report = w.sweeper.run(w.far()).await.unwrap();
    // THEN nothing is cleared and the run says so
    assert_eq!(
        (report.outcomes_relayed, report.outcomes_unpublished),
        (0, 1)
    );
    assert_eq!(report.to_emf(0)["OutcomesUnpublished"], 1);
    assert!(w.get("j").await.outbox.is_some());
    // AND a clear that fails after the publication leaves it marked (published, so not counted
    // as unpublished, which would page): published again later
    w.status.fail_clears.set(1);
    let report = w.sweeper.run(w.far()).await.unwrap();
    assert_eq!(
        (report.outcomes_relayed, report.outcomes_unpublished),
        (1, 0)
    );
    assert!(w.get("j").await.outbox.is_some());
    let report = w.sweeper.run(w.far()).await.unwrap();
    assert_eq!(report.outcomes_relayed, 1);
    assert_eq!(w.get("j").await.outbox, None);
    // At least once: the same event twice, with one id to dedupe on.
    let ids: Vec<String> = w
        .bus
        .events()
        .iter()
        .map(|e| e.detail.event_id.clone())
        .collect();
    assert_eq!(ids, ["j/2/complained", "j/2/complained"]);
}

#[tokio::test]
async fn without_a_bus_outcomes_are_left_alone() {
    let mut w = world();
    w.sweeper.outcomes = None;
    w.unpublished("j", Status::Delivered, Duration::minutes(5));
    let report = w.sweeper.run(w.far()).await.unwrap();
    assert_eq!(report.outcomes_relayed, 0);
    assert!(w.get("j").await.outbox.is_some());
}

#[tokio::test]
async fn a_waiting_job_whose_copy_is_long_overdue_is_flagged_once_and_its_late_copy_still_counts() {
    let w = world();
    w.put_waiting(
        "lost",
        Status::Deferred,
        Duration::hours(3),
        t0() - Duration::hours(2),
    );
    w.put_waiting(
        "lost-unknown",
        Status::Unknown,
        Duration::hours(4),
        t0() - Duration::minutes(61),
    );
    // Due 30 minutes ago: within the grace (a backlog may hold it).
    w.put_waiting(
        "late",
        Status::Deferred,
        Duration::hours(1),
        t0() - Duration::minutes(30),
    );
    // Deferred four days ago for a five-day wait: the due time decides, not the age.
    w.put_waiting(
        "long-wait",
        Status::Deferred,
        Duration::days(4),
        t0() + Duration::days(1),
    );
    let report = w.sweeper.run(w.far()).await.unwrap();
    assert_eq!(
        report,
        SweepReport {
            copy_overdue: 2,
            ..SweepReport::default()
        }
    );
    for (id, status) in [
        ("lost", Status::Deferred),
        ("lost-unknown", Status::Unknown),
    ] {
        let rec = w.get(id).await;
        assert_eq!((rec.status, rec.swept_at), (status, Some(t0())), "{id}");
        let last = rec.history.last().unwrap();
        assert_eq!((last.by.as_str(), last.status), ("sweeper", status), "{id}");
        assert!(
            last.detail.as_deref().unwrap().contains("due back at"),
            "{last:?}"
        );
    }
    for id in ["late", "long-wait"] {
        let rec = w.get(id).await;
        assert!(rec.swept_at.is_none() && rec.history.is_empty(), "{id}");
    }
    assert_eq!(report.to_emf(0)["SweptCopyOverdue"], 2);
    // Flagged once: the next run finds nothing new until the late one is overdue.
    assert_eq!(
        w.sweeper.run(w.far()).await.unwrap(),
        SweepReport::default()
    );
    w.clock.advance(31 * 60);
    assert_eq!(w.sweeper.run(w.far()).await.unwrap().copy_overdue, 1);
    // A flagged job's copy that does come back is claimed as ever.
    let claim = courier_core::ports::ClaimRequest {
        message_id: "lost".into(),
        attempt: 2,
        owner: "late-copy".into(),
        now: w.clock.now(),
        lease_until: w.clock.now() + Duration::minutes(1),
        grace: Duration::minutes(10),
        check_suppressed: Vec::new(),
        trace_id: None,
        facts: Default::default(),
        payload: None,
    };
    assert_eq!(
        w.status.claim(&claim).await.unwrap(),
        courier_core::ports::ClaimOutcome::Claimed
    );
    let rec = w.get("lost").await;
    assert_eq!(
        (rec.status, rec.swept_at, rec.copy_due),
        (Status::Processing, None, None)
    );
}
