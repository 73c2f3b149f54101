//! `courier-dev demo` end to end on the emulator and Postfix: the debug binary runs a short
//! campaign (100 jobs: the whole SMTP failure mix and ten jobs through SES), publishes SES's
//! events for the SES sends and drives the events function with them; then the stack's tables
//! are read back: each SES job ends where its recipient's script says, the events function
//! suppressed the bounced and complaining recipients, and the soft-bounced job was sent again.
//! Build the binary first (`cargo build -p courier-dev`; `make it-localstack` does).
//!
//! Also `courierctl smoke` against `courier-dev serve` (the same functions and SES stand-in).
//!
//! Run on LocalStack (`make it-localstack`), as `make demo` is; `make it-moto` skips both by name:
//! moto's DynamoDB applies concurrent writes without isolation (a failed transaction restores a
//! copy of the tables taken before writes other requests made meanwhile), and the demo's six
//! concurrent instances (serve's three) lose status writes there (docs/local-run.md).

#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers fail the test loudly

use std::process::Command;
use std::time::Duration;

use courier_adapters::aws::{DynamoDbStatusStore, DynamoDbSuppressionList};
use courier_core::ports::{JobRecord, StatusStore, SuppressionList};
use courier_core::status::Status;
use courier_devkit::provision::kebab;
use courier_integration::{aws_config, courier_dev, courierctl, require_env, unique};

/// The report line starting with `label`, trimmed.
fn line<'a>(report: &'a str, label: &str) -> &'a str {
    report
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} line in the report:\n{report}"))
}

/// The first number after `label` on its report line.
fn number(report: &str, label: &str) -> u64 {
    let l = line(report, label);
    l[label.len()..]
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {label:?} in {l:?}"))
}

#[tokio::test]
async fn the_demo_drives_ses_events_through_the_events_function() {
    require_env("AWS_ENDPOINT_URL");
    require_env("COURIER_SMTP_PORT");
    let prefix = unique("demo");
    // GIVEN a 100-job demo campaign on its own stack
    let out = Command::new(courier_dev())
        .args(["demo", "--jobs", "100", "--prefix", &prefix])
        .output()
        .expect("run courier-dev demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // THEN it exits 0: every job reached a known end
    assert!(
        out.status.success(),
        "demo exited {:?}\n{stdout}\n{stderr}",
        out.status
    );
    // AND the report accounts for the SES slice and the events applied
    assert!(
        line(&stdout, "SES jobs at their end").contains("of 10 (read back from the status table: bounced_permanent 1, complained 2, delivered 7)"),
        "{stdout}"
    );
    // The counts below are of applications: the events queue delivers at least once, so an event
    // handled twice (a redelivery, or two pollers given one message) counts twice while changing
    // nothing; the read-back above is exact.
    assert!(number(&stdout, "bounced permanently  ") >= 1, "{stdout}");
    assert!(
        line(&stdout, "bounced permanently  ").contains("recipients suppressed: 4 of 4"),
        "{stdout}"
    );
    assert!(number(&stdout, "complaints") >= 2, "{stdout}");
    // AND the message to three recipients has an outcome per recipient
    assert_eq!(
        line(&stdout, "one message to 3 recipients:"),
        "one message to 3 recipients: demo-00035 complained (reader35@courier.test delivered, bounce+35@courier.test bounced_permanent, complaint+35@courier.test complained)",
        "{stdout}"
    );
    assert!(number(&stdout, "transient bounces resent") >= 1, "{stdout}");
    assert_eq!(number(&stdout, "delivery delays"), 1, "{stdout}");
    // AND a reader unsubscribed through the one-click link of a delivered message, and the next
    // job of that list to them was not sent
    assert_eq!(
        line(&stdout, "one-click unsubscribe:"),
        "one-click unsubscribe: reader19@courier.test POSTed the link of its newsletter message (200); the next newsletter job to it: suppressed (unsubscribed: every recipient unsubscribed from list newsletter)",
        "{stdout}"
    );

    // AND the tables agree, read back directly
    let sdk = aws_config().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let table = |logical: &str| format!("{prefix}-{}", kebab(logical));
    let status = DynamoDbStatusStore::new(
        dynamodb.clone(),
        table("StatusTable"),
        Duration::from_secs(3600),
    );
    let suppression = DynamoDbSuppressionList::new(dynamodb, table("SuppressionTable"));
    let record = |id: &'static str| {
        let status = &status;
        async move {
            status
                .get(id)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("no record for {id}"))
        }
    };
    let by_events =
        |r: &JobRecord, s: Status| r.history.iter().any(|h| h.by == "events" && h.status == s);
    let suppressed = |address: &'static str| {
        let suppression = &suppression;
        async move {
            !suppression
                .suppressed(&[address.to_owned()], chrono::Utc::now())
                .await
                .unwrap()
                .is_empty()
        }
    };

    // A job delivered through SES: its Delivery event made it `delivered`.
    let delivered = record("demo-00030").await;
    assert_eq!(delivered.status, Status::Delivered, "{delivered:?}");
    assert_eq!(delivered.provider.as_deref(), Some("ses"));
    assert!(by_events(&delivered, Status::Delivered), "{delivered:?}");
    assert!(!suppressed("reader30@courier.test").await);

    // A permanent bounce: `bounced_permanent` by the events function, the recipient suppressed.
    let bounced = record("demo-00036").await;
    assert_eq!(bounced.status, Status::BouncedPermanent, "{bounced:?}");
    assert!(by_events(&bounced, Status::BouncedPermanent), "{bounced:?}");
    assert!(suppressed("bounce+36@courier.test").await);

    // A transient bounce: recorded, resent through the retry queue, sent again, then delivered.
    let soft = record("demo-00037").await;
    assert_eq!(soft.status, Status::Delivered, "{soft:?}");
    assert!(by_events(&soft, Status::BouncedTransient), "{soft:?}");
    assert!(soft.resend_of.is_some(), "{soft:?}");
    let sends = soft
        .history
        .iter()
        .filter(|h| h.status == Status::SentToProvider && h.by != "events")
        .count();
    assert_eq!(sends, 2, "{soft:?}");
    assert!(!suppressed("softbounce+37@courier.test").await);

    // A delivery delay changes nothing; the later delivery does.
    let delayed = record("demo-00038").await;
    assert_eq!(delayed.status, Status::Delivered, "{delayed:?}");

    // A complaint after the delivery: `complained`, the recipient suppressed.
    let complained = record("demo-00039").await;
    assert_eq!(complained.status, Status::Complained, "{complained:?}");
    assert!(by_events(&complained, Status::Delivered), "{complained:?}");
    assert!(suppressed("complaint+39@courier.test").await);

    // A job without a hint went through SMTP and stays `sent_to_provider` (SMTP has no events).
    let smtp = record("demo-00050").await;
    assert_eq!(smtp.status, Status::SentToProvider, "{smtp:?}");
    assert_eq!(smtp.provider.as_deref(), Some("smtp"));
}

/// `courierctl smoke` against a stack `courier-dev serve` runs as Lambda and SES would (the demo's
/// SES stand-in answers the mailbox simulator's addresses): every case passes with a sender the
/// emulator's SES has verified, and every case fails, exit 1, with one it has not.
#[tokio::test]
async fn the_smoke_test_follows_each_simulator_case_to_its_end() {
    use std::io::BufRead;
    require_env("AWS_ENDPOINT_URL");
    let prefix = unique("serve");
    // GIVEN a served stack
    let mut serve = Command::new(courier_dev())
        .args(["serve", "--seconds", "300", "--prefix", &prefix])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run courier-dev serve");
    let mut exports = Vec::new();
    for line in std::io::BufReader::new(serve.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if line == "serving" {
            break;
        }
        if let Some((k, v)) = line.strip_prefix("export ").and_then(|l| l.split_once('=')) {
            exports.push((k.to_owned(), v.trim_matches('\'').to_owned()));
        }
    }
    assert!(
        exports.iter().any(|(k, _)| k == "COURIER_QUEUE_URL"),
        "courier-dev serve did not start: {exports:?}"
    );
    let smoke = |from: &str, run: &str| {
        Command::new(courierctl())
            .args(["smoke", "--from", from, "--run", run, "--timeout", "90s"])
            .envs(exports.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
            .expect("run courierctl smoke")
    };
    // WHEN the smoke test runs with the verified sender
    let good = smoke("ops@courier.test", "ok1");
    let table = String::from_utf8_lossy(&good.stdout).into_owned();
    // THEN it passes, one row per simulator address
    assert!(
        good.status.success(),
        "{table}\n{}",
        String::from_utf8_lossy(&good.stderr)
    );
    for (case, status) in [
        ("success", "delivered"),
        ("bounce", "bounced_permanent"),
        ("ooto", "delivered"),
        ("complaint", "complained"),
        ("suppressionlist", "bounced_permanent"),
    ] {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("{case} ")))
            .unwrap_or_else(|| panic!("no row {case}: {table}"));
        assert!(row.contains(status) && row.contains("pass"), "{row}");
    }
    // AND with a sender SES has not verified, every case fails and the exit code says so
    let bad = smoke("ops@unverified.example", "bad1");
    let table = String::from_utf8_lossy(&bad.stdout).into_owned();
    assert_eq!(bad.status.code(), Some(1), "{table}");
    assert_eq!(table.matches("FAIL").count(), 5, "{table}");
    assert!(table.contains("ended dead_lettered"), "{table}");
    serve.kill().unwrap();
    let _ = serve.wait();
}
