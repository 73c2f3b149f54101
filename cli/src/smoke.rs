//! `courierctl smoke`: after a deploy, one job to each of SES's mailbox simulator addresses,
//! each followed through the status table to the end SES's answer must lead to.
//!
//! The simulator (SES Developer Guide, "Using the mailbox simulator") answers by address:
//! `success@` is delivered, `bounce@` bounces (hard), `ooto@` is delivered and answered by an
//! out-of-office reply, `complaint@` is delivered and then complained about, `suppressionlist@`
//! bounces as an address on SES's suppression list would. Each address carries a label
//! (`bounce+RUN@`), so that a run never meets the suppressions an earlier run caused.
//! Sends to the simulator count against the sending quota but not the bounce and complaint
//! rates.

use std::time::Duration;

use courier_core::ports::StatusStore;
use courier_core::status::Status;

/// The domain of SES's mailbox simulator.
pub const SIMULATOR: &str = "simulator.amazonses.com";

/// One simulator address and the status its job must end in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    pub name: &'static str,
    pub recipient: String,
    pub message_id: String,
    pub expected: Status,
}

/// The cases of run `run` (a label of letters, digits and `-`).
pub fn cases(run: &str) -> Vec<Case> {
    [
        ("success", Status::Delivered),
        ("bounce", Status::BouncedPermanent),
        ("ooto", Status::Delivered),
        ("complaint", Status::Complained),
        ("suppressionlist", Status::BouncedPermanent),
    ]
    .into_iter()
    .map(|(name, expected)| Case {
        name,
        recipient: format!("{name}+{run}@{SIMULATOR}"),
        message_id: format!("smoke-{run}-{name}"),
        expected,
    })
    .collect()
}

/// The job of a case, as an application would enqueue it, sent through SES.
pub fn job(case: &Case, from: &str) -> serde_json::Value {
    serde_json::json!({
        "version": 1,
        "message_id": case.message_id,
        "campaign_id": "courier-smoke",
        "from": from,
        "to": [case.recipient],
        "provider": "ses",
        "content": {
            "subject": format!("Courier smoke test: {}", case.name),
            "text": format!("courierctl smoke sent this to SES's mailbox simulator ({}).", case.name),
        },
    })
}

/// Where a case stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Fail(String),
    Waiting,
}

/// A case's verdict from its job's status (`None`: no record yet).
pub fn judge(expected: Status, seen: Option<Status>) -> Verdict {
    match seen {
        Some(s) if s == expected => Verdict::Pass,
        // An end that is not the expected one (a delivery may still turn into a complaint).
        Some(s)
            if s.is_terminal() && !(s == Status::Delivered && expected == Status::Complained) =>
        {
            Verdict::Fail(format!("ended {}", s.as_str()))
        }
        _ => Verdict::Waiting,
    }
}

/// A case's result.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Outcome {
    pub case: &'static str,
    pub recipient: String,
    pub message_id: String,
    pub expected: &'static str,
    /// The last status read (`None`: no record).
    pub status: Option<&'static str>,
    pub passed: bool,
    pub detail: String,
    /// Seconds from the start of the wait to the verdict.
    pub seconds: u64,
}

/// Reads every case's status every `poll` until each has a verdict or `timeout` has passed
/// (then the waiting ones fail, saying where they stood).
pub async fn wait(
    cases: &[Case],
    status: &dyn StatusStore,
    timeout: Duration,
    poll: Duration,
) -> Vec<Outcome> {
    let started = tokio::time::Instant::now();
    let mut done: Vec<Option<Outcome>> = vec![None; cases.len()];
    let mut last: Vec<Option<Status>> = vec![None; cases.len()];
    let mut errors: Vec<Option<String>> = vec![None; cases.len()];
    loop {
        for (i, case) in cases.iter().enumerate() {
            if done[i].is_some() {
                continue;
            }
            match status.get(&case.message_id).await {
                Ok(record) => {
                    last[i] = record.map(|r| r.status);
                    errors[i] = None;
                }
                Err(e) => errors[i] = Some(e.to_string()),
            }
            let verdict = judge(case.expected, last[i]);
            if verdict != Verdict::Waiting {
                done[i] = Some(outcome(case, last[i], verdict, started.elapsed()));
            }
        }
        if done.iter().all(Option::is_some) || started.elapsed() >= timeout {
            break;
        }
        tokio::time::sleep(poll).await;
    }
    cases
        .iter()
        .enumerate()
        .map(|(i, case)| {
            done[i].take().unwrap_or_else(|| {
                let why = match (&errors[i], last[i]) {
                    (Some(e), _) => format!("status not readable: {e}"),
                    (None, None) => "no status record: is the send function running?".into(),
                    (None, Some(s)) => format!("still {}", s.as_str()),
                };
                let verdict = Verdict::Fail(format!("{why} after {} s", timeout.as_secs()));
                outcome(case, last[i], verdict, started.elapsed())
            })
        })
        .collect()
}

fn outcome(case: &Case, seen: Option<Status>, verdict: Verdict, after: Duration) -> Outcome {
    let (passed, detail) = match verdict {
        Verdict::Pass => (true, String::new()),
        Verdict::Fail(why) => (false, why),
        Verdict::Waiting => (false, "waiting".into()),
    };
    Outcome {
        case: case.name,
        recipient: case.recipient.clone(),
        message_id: case.message_id.clone(),
        expected: case.expected.as_str(),
        status: seen.map(Status::as_str),
        passed,
        detail,
        seconds: after.as_secs(),
    }
}

/// The pass/fail table.
pub fn table(outcomes: &[Outcome]) -> comfy_table::Table {
    let mut t = crate::table::new(&[
        "CASE",
        "MESSAGE_ID",
        "EXPECTED",
        "STATUS",
        "RESULT",
        "SECONDS",
        "DETAIL",
    ]);
    for o in outcomes {
        t.add_row(vec![
            comfy_table::Cell::new(o.case),
            comfy_table::Cell::new(&o.message_id),
            comfy_table::Cell::new(o.expected),
            comfy_table::Cell::new(o.status.unwrap_or("-")),
            comfy_table::Cell::new(if o.passed { "pass" } else { "FAIL" }),
            crate::table::right(o.seconds),
            comfy_table::Cell::new(&o.detail),
        ]);
    }
    t
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use courier_core::ports::JobRecord;
    use courier_devkit::memory::MemoryStatusStore;

    #[test]
    fn every_simulator_address_is_labelled_and_its_job_is_valid() {
        let cases = cases("r1");
        assert_eq!(cases.len(), 5);
        for case in &cases {
            assert!(case.recipient.ends_with("+r1@simulator.amazonses.com"));
            let body = job(case, "ops@example.com").to_string();
            let parsed =
                courier_core::job::EmailJob::from_value(serde_json::from_str(&body).unwrap());
            assert!(parsed.is_ok(), "{body}");
        }
    }

    #[test]
    fn a_case_passes_at_its_end_and_fails_at_another() {
        use Status::*;
        assert_eq!(judge(Delivered, Some(Delivered)), Verdict::Pass);
        assert_eq!(judge(Delivered, Some(SentToProvider)), Verdict::Waiting);
        assert_eq!(judge(Delivered, None), Verdict::Waiting);
        // A complaint comes after the delivery.
        assert_eq!(judge(Complained, Some(Delivered)), Verdict::Waiting);
        assert_eq!(
            judge(Delivered, Some(Complained)),
            Verdict::Fail("ended complained".into())
        );
        assert_eq!(
            judge(BouncedPermanent, Some(Suppressed)),
            Verdict::Fail("ended suppressed".into())
        );
        assert_eq!(
            judge(Delivered, Some(DeadLettered)),
            Verdict::Fail("ended dead_lettered".into())
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_ends_with_a_verdict_for_every_case() {
        let store = MemoryStatusStore::default();
        let cases = cases("r2");
        let now = chrono::Utc::now();
        // success delivered; bounce dead-lettered; the rest never seen
        for (case, end) in [
            (&cases[0], Status::Delivered),
            (&cases[1], Status::DeadLettered),
        ] {
            store.records.lock().unwrap().insert(
                case.message_id.clone(),
                JobRecord::new(case.message_id.clone(), end, 0, now),
            );
        }
        let outcomes = wait(
            &cases,
            &store,
            Duration::from_secs(30),
            Duration::from_secs(2),
        )
        .await;
        assert!(outcomes[0].passed);
        assert_eq!(outcomes[1].detail, "ended dead_lettered");
        assert!(!outcomes[2].passed);
        assert!(
            outcomes[2].detail.contains("no status record"),
            "{}",
            outcomes[2].detail
        );
        assert!(outcomes[2].detail.contains("after 30 s"));
        let lines = crate::table::lines(&mut table(&outcomes));
        assert_eq!(lines.len(), 6);
        assert!(lines[1].contains("pass") && lines[2].contains("FAIL"));
    }
}
