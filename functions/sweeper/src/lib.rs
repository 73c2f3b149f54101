//! The sweeper (scheduled): finds jobs that stopped moving and marks them, so nothing waits
//! forever unnoticed.
//!
//! - `processing` long after its lease expired (the send function died mid-send and no copy
//!   came back to claim it): marked `unknown`, so provider events or the grace window decide
//!   whether it is sent again; counted as `SweptStuckProcessing`.
//! - `sent_to_provider` through SES with no delivery, bounce or complaint event within the
//!   period: flagged (`swept_at`, a history entry) and taken off the open index; counted as
//!   `SweptNoOutcome` (usually a configuration set without an event destination, or events
//!   that are failing to apply).
//! - `deferred` or `unknown` with the copy it waits for not back within the grace past its due
//!   time (the copy was lost: a purged or deleted queue, past the queue's retention, a delay
//!   execution that failed): flagged (`swept_at`, a history entry) and moved to the index's
//!   `overdue` state; counted as `SweptCopyOverdue`. Nothing is sent: `courierctl requeue
//!   --overdue` puts the jobs back.
//!
//! - an outcome whose writer did not publish it within [`OUTBOX_GRACE`] (it died, or the bus
//!   refused): published from the record and cleared ([`courier_core::outcome::relay`]);
//!   counted as `OutcomesRelayed`, and `OutcomesUnpublished` for those that failed again.
//!
//! Jobs are found through the status table's sparse `by_open` and `by_outbox` indexes (only
//! such jobs carry their keys), oldest first, a page at a time; every mark is a conditional
//! write, so a job that moved on meanwhile is left alone.
//!
//! # Layout
//! - [`Settings`]: the periods, parsed once at INIT; [`wire`] builds the [`Sweeper`].
//! - [`Sweeper`]: one sweep over the three open states; [`SweepReport`] its counts (EMF).
//! - [`function_handler`]: the scheduled invocation.

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use courier_adapters::aws::{Clients, DynamoDbStatusStore, EventBridgeOutcomeBus};
use courier_adapters::clock::SystemClock;
use courier_core::outcome::relay;
use courier_core::policy::parse_duration;
use courier_core::ports::{Clock, OpenState, OutcomeBus, StatusStore, StoreError, SweepMark};
use tracing::{info, warn};

/// The longest a lease can be (the Lambda timeout's maximum): a job opened earlier than this
/// plus the grace is certainly past its lease.
pub const MAX_LEASE: Duration = Duration::minutes(15);
/// Records read per page.
pub const PAGE: usize = 100;
/// An outcome still unpublished this long after its write is the sweeper's to publish (its
/// writer publishes it within a second or two, or died).
pub const OUTBOX_GRACE: Duration = Duration::minutes(1);

/// The sweeper's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub status_table: String,
    /// How long past a lease a `processing` job may stay before it is swept.
    pub lease_grace: Duration,
    /// How long a sent job may wait for its outcome event.
    pub no_outcome_after: Duration,
    /// How long past its due time the copy of a waiting job may be before it is swept.
    pub copy_grace: Duration,
    /// The outcome bus (`COURIER_OUTCOME_BUS`); none: outcomes are not published.
    pub outcome_bus: Option<String>,
}

/// A setting that cannot be used, naming the variable.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("{0} is required")]
    Missing(&'static str),
    #[error("{name}: {value:?} is not a positive duration (e.g. 6h, 5m)")]
    Invalid { name: &'static str, value: String },
}

impl Settings {
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Settings, SettingsError> {
        let duration =
            |name: &'static str, default: Duration| match lookup(name).filter(|v| !v.is_empty()) {
                None => Ok(default),
                Some(value) => parse_duration(&value)
                    .ok()
                    .filter(|s| *s > 0)
                    .and_then(|s| i64::try_from(s).ok())
                    .map(Duration::seconds)
                    .ok_or(SettingsError::Invalid { name, value }),
            };
        Ok(Settings {
            status_table: lookup("COURIER_STATUS_TABLE")
                .filter(|v| !v.is_empty())
                .ok_or(SettingsError::Missing("COURIER_STATUS_TABLE"))?,
            lease_grace: duration("COURIER_SWEEP_LEASE_GRACE", Duration::minutes(5))?,
            no_outcome_after: duration("COURIER_SWEEP_NO_OUTCOME_AFTER", Duration::hours(6))?,
            copy_grace: duration("COURIER_SWEEP_COPY_GRACE", Duration::hours(6))?,
            outcome_bus: lookup("COURIER_OUTCOME_BUS").filter(|v| !v.is_empty()),
        })
    }
}

/// What one run did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SweepReport {
    pub stuck_processing: usize,
    pub no_outcome: usize,
    pub copy_overdue: usize,
    /// Found, but changed before the mark (left alone).
    pub moved_on: usize,
    /// Unpublished outcomes published now.
    pub outcomes_relayed: usize,
    /// Unpublished outcomes that failed again (left for the next run).
    pub outcomes_unpublished: usize,
    /// Stopped at the deadline with work left for the next run.
    pub stopped_early: bool,
}

impl SweepReport {
    /// The run's metrics as one EMF document (namespace `Courier`, dimension `Function`).
    pub fn to_emf(&self, timestamp_ms: i64) -> serde_json::Value {
        serde_json::json!({
            "_aws": {"Timestamp": timestamp_ms, "CloudWatchMetrics": [{
                "Namespace": "Courier", "Dimensions": [["Function"]],
                "Metrics": [
                    {"Name": "SweptStuckProcessing", "Unit": "Count"},
                    {"Name": "SweptNoOutcome", "Unit": "Count"},
                    {"Name": "SweptCopyOverdue", "Unit": "Count"},
                    {"Name": "OutcomesRelayed", "Unit": "Count"},
                    {"Name": "OutcomesUnpublished", "Unit": "Count"}
                ]}]},
            "Function": "sweeper",
            "SweptStuckProcessing": self.stuck_processing,
            "SweptNoOutcome": self.no_outcome,
            "SweptCopyOverdue": self.copy_overdue,
            "SweepMovedOn": self.moved_on,
            "OutcomesRelayed": self.outcomes_relayed,
            "OutcomesUnpublished": self.outcomes_unpublished,
            "SweepStoppedEarly": self.stopped_early,
        })
    }
}

/// The sweeper over its ports.
pub struct Sweeper {
    pub status: Arc<dyn StatusStore>,
    pub clock: Arc<dyn Clock>,
    pub settings: Settings,
    /// Where unpublished outcomes go; `None`: not published.
    pub outcomes: Option<Arc<dyn OutcomeBus>>,
}

/// Wires the sweeper from settings and SDK clients.
pub fn wire(clients: &Clients, settings: Settings) -> Sweeper {
    Sweeper {
        status: Arc::new(DynamoDbStatusStore::new(
            clients.dynamodb.clone(),
            &settings.status_table,
            std::time::Duration::from_secs(30 * 24 * 3600),
        )),
        clock: Arc::new(SystemClock),
        outcomes: settings.outcome_bus.as_ref().map(|bus| {
            Arc::new(EventBridgeOutcomeBus::new(clients.eventbridge.clone(), bus))
                as Arc<dyn OutcomeBus>
        }),
        settings,
    }
}

impl Sweeper {
    /// Sweeps the three kinds until nothing is left or `deadline` is 5 s away.
    pub async fn run(&self, deadline: DateTime<Utc>) -> Result<SweepReport, StoreError> {
        let mut report = SweepReport::default();
        let now = self.clock.now();
        let kinds = [
            (
                OpenState::Processing,
                now - MAX_LEASE - self.settings.lease_grace,
                SweepMark::LeaseExpired,
            ),
            (
                OpenState::AwaitingOutcome,
                now - self.settings.no_outcome_after,
                SweepMark::NoOutcome,
            ),
            (
                OpenState::Waiting,
                now - self.settings.copy_grace,
                SweepMark::CopyOverdue,
            ),
        ];
        for (state, before, mark) in kinds {
            // The index is eventually consistent: a record already marked may show up again
            // for a moment; never act on one twice in a run, and stop when a page is all old.
            let mut seen = HashSet::new();
            loop {
                if self.clock.now() + Duration::seconds(5) >= deadline {
                    report.stopped_early = true;
                    return Ok(report);
                }
                let page = self.status.open_before(state, before, PAGE).await?;
                let fresh: Vec<_> = page
                    .into_iter()
                    .filter(|r| seen.insert(r.message_id.clone()))
                    .collect();
                if fresh.is_empty() {
                    break;
                }
                for record in fresh {
                    if self
                        .status
                        .sweep(&record, mark.clone(), self.clock.now())
                        .await?
                    {
                        warn!(message_id = %record.message_id, trace_id = record.trace_id.as_deref().unwrap_or_default(), status = %record.status, attempt = record.attempt, copy_due = ?record.copy_due, ?mark, "swept");
                        match mark {
                            SweepMark::LeaseExpired => report.stuck_processing += 1,
                            SweepMark::NoOutcome => report.no_outcome += 1,
                            SweepMark::CopyOverdue => report.copy_overdue += 1,
                        }
                    } else {
                        report.moved_on += 1;
                    }
                }
            }
        }
        self.relay_outbox(deadline, &mut report).await?;
        info!(?report, "sweep finished");
        Ok(report)
    }

    /// Publishes the outcomes their writers left unpublished, oldest first.
    async fn relay_outbox(
        &self,
        deadline: DateTime<Utc>,
        report: &mut SweepReport,
    ) -> Result<(), StoreError> {
        let Some(bus) = &self.outcomes else {
            return Ok(());
        };
        let before = self.clock.now() - OUTBOX_GRACE;
        let mut seen = HashSet::new();
        loop {
            if self.clock.now() + Duration::seconds(5) >= deadline {
                report.stopped_early = true;
                return Ok(());
            }
            let page = self.status.outbox_before(before, PAGE).await?;
            let fresh: Vec<String> = page
                .into_iter()
                .filter(|id| seen.insert(id.clone()))
                .collect();
            if fresh.is_empty() {
                return Ok(());
            }
            let relayed = relay(self.status.as_ref(), bus.as_ref(), &fresh).await;
            report.outcomes_relayed += relayed.published;
            report.outcomes_unpublished += relayed.failed.len();
            for (message_id, error, what) in relayed.problems() {
                warn!(%message_id, %error, "{what}");
            }
        }
    }
}

/// The Lambda handler: sweeps until shortly before the invocation's deadline.
pub async fn function_handler(
    sweeper: &Arc<Sweeper>,
    event: lambda_runtime::LambdaEvent<serde_json::Value>,
) -> Result<serde_json::Value, lambda_runtime::Error> {
    let deadline =
        DateTime::from_timestamp_millis(i64::try_from(event.context.deadline).unwrap_or(i64::MAX))
            .unwrap_or_else(|| Utc::now() + Duration::seconds(60));
    let report = sweeper.run(deadline).await?;
    println!("{}", report.to_emf(sweeper.clock.now().timestamp_millis()));
    Ok(serde_json::json!({
        "stuck_processing": report.stuck_processing,
        "no_outcome": report.no_outcome,
        "copy_overdue": report.copy_overdue,
        "moved_on": report.moved_on,
        "outcomes_relayed": report.outcomes_relayed,
        "outcomes_unpublished": report.outcomes_unpublished,
        "stopped_early": report.stopped_early,
    }))
}

#[cfg(test)]
mod tests;
