//! No log line of the events function names a recipient in clear, whatever a message says: SES
//! quotes the address in bounce and delay diagnostics, and a garbled or forged message may put
//! one anywhere (an unknown `eventType`, a topic, a certificate URL). Log lines hash or redact
//! addresses (`courier_core::mailbox::redact`); dead letters keep the raw text, behind IAM.

use super::*;

const ANN: &str = "ann@example.org";

/// A fixture whose recipients' diagnostic codes quote the address after `reply` (`550 5.1.1`),
/// as receiving servers do.
fn quoting(name: &str, object: &str, recipients: &str, reply: &str) -> String {
    let mut v: Value = serde_json::from_str(&fixture(name)).unwrap();
    for r in v[object][recipients].as_array_mut().unwrap() {
        r["diagnosticCode"] = format!("smtp; {reply} <{ANN}>: mailbox of {ANN} unavailable").into();
    }
    v.to_string()
}

#[tokio::test]
async fn no_log_line_of_the_events_function_names_a_recipient_in_clear() {
    let (captured, _guard) = courier_devkit::logs::Captured::start();
    let transient = || {
        quoting(
            "bounce-transient",
            "bounce",
            "bouncedRecipients",
            "452 4.2.2",
        )
    };

    // A transient bounce quoting the address: the job is sent again.
    let w = world(Some(Status::SentToProvider));
    w.keep_payload(kept_payload(None));
    let report = w.applier.handle(sqs(&[transient()])).await;
    assert_eq!(report.applied, vec![Applied::Resent]);

    // The same past the job's horizon: dead-lettered (the letter keeps what it keeps).
    let w = world(Some(Status::SentToProvider));
    w.keep_payload(kept_payload(Some("2026-01-01T00:00:00Z")));
    let report = w.applier.handle(sqs(&[transient()])).await;
    assert_eq!(
        report.applied,
        vec![Applied::GaveUp(DeadLetterCategory::RetriesExhausted)]
    );

    // Its kept payload unreadable, and it names the address too.
    let w = world(Some(Status::SentToProvider));
    let mut payload: Value = serde_json::from_str(&kept_payload(None)).unwrap();
    payload["job"]["to"] = serde_json::json!([format!("Ann <{ANN}")]);
    w.keep_payload(payload.to_string());
    let report = w.applier.handle(sqs(&[transient()])).await;
    assert_eq!(
        report.applied,
        vec![Applied::Changed(Status::BouncedTransient)]
    );

    // A delay, an undetermined and a permanent bounce, each quoting it; a complaint.
    let w = world(Some(Status::SentToProvider));
    let report = w
        .applier
        .handle(sqs(&[
            quoting(
                "delivery-delay",
                "deliveryDelay",
                "delayedRecipients",
                "421 4.4.1",
            ),
            quoting(
                "bounce-undetermined",
                "bounce",
                "bouncedRecipients",
                "554 5.0.0",
            ),
            quoting(
                "bounce-permanent",
                "bounce",
                "bouncedRecipients",
                "550 5.1.1",
            ),
        ]))
        .await;
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(w.status(), Some(Status::BouncedPermanent));
    assert!(w.suppression.entries.lock().unwrap().contains_key(ANN));
    let w = world(Some(Status::Delivered));
    let report = w.applier.handle(sqs(&[fixture("complaint")])).await;
    assert_eq!(report.applied, vec![Applied::Changed(Status::Complained)]);

    // Events that match no job: young (retried later), old (dropped), and no job at all.
    let w = world(None);
    let mut young: Value = serde_json::from_str(&without_our_id("bounce-permanent")).unwrap();
    young["mail"]["timestamp"] =
        serde_json::json!((t0() - chrono::Duration::minutes(1)).to_rfc3339());
    young["bounce"]["bouncedRecipients"][0]["diagnosticCode"] =
        format!("smtp; 550 <{ANN}> unknown").into();
    let report = w
        .applier
        .handle(sqs(&[
            young.to_string(),
            without_our_id("bounce-permanent"),
        ]))
        .await;
    assert_eq!(report.applied, vec![Applied::NotYet, Applied::Uncorrelated]);

    // Messages that are no SES event but name the address: an unknown eventType, JSON that is
    // not an event, and text that is not JSON.
    let w = world(Some(Status::SentToProvider));
    let mut garbled: Value = serde_json::from_str(&fixture("bounce-permanent")).unwrap();
    garbled["eventType"] = format!("Bounce for {ANN}").into();
    let report = w
        .applier
        .handle(sqs(&[
            garbled.to_string(),
            serde_json::json!({ "to": ANN }).to_string(),
            format!("bounce: {ANN}"),
        ]))
        .await;
    assert_eq!(report.unparseable, 2);
    assert_eq!(report.refused, vec![Forgery::NotJson]);

    // Through SNS: a notification from another topic, and one whose certificate URL is off the
    // trusted host, each naming the address.
    let w = world(Some(Status::SentToProvider));
    let trust = SnsTrust {
        topic_arn: "arn:aws:sns:eu-west-1:123456789012:courier-ses-events".into(),
        certificate_host: "sns.eu-west-1.amazonaws.com".into(),
    };
    let applier = Applier {
        gate: Arc::new(Gate::new(
            Admission::Sns(trust.clone()),
            Arc::new(NoCertificates),
        )),
        ..w.applier
    };
    let notification = |topic: &str, url: &str| {
        serde_json::json!({
            "Type": "Notification", "MessageId": "n-1", "TopicArn": topic,
            "Message": fixture("bounce-permanent"), "Timestamp": "2026-11-30T10:00:03.000Z",
            "SignatureVersion": "2", "Signature": "AA==", "SigningCertURL": url,
        })
        .to_string()
    };
    let report = applier
        .handle(sqs(&[
            notification(
                &format!("arn:aws:sns:eu-west-1:123456789012:{ANN}"),
                "https://sns.eu-west-1.amazonaws.com/cert.pem",
            ),
            notification(&trust.topic_arn, &format!("https://{ANN}/cert.pem")),
        ]))
        .await;
    assert_eq!(report.refused.len(), 2, "{:?}", report.refused);
    assert!(matches!(report.refused[0], Forgery::OtherTopic(_)));
    assert!(matches!(
        report.refused[1],
        Forgery::UntrustedCertificateUrl(_)
    ));

    let logs = captured.text();
    for line in [
        "transient bounce; resend scheduled",
        "transient bounce past the give-up horizon",
        "the kept payload does not parse",
        "recipient soft-suppressed",
        "event ahead of its record",
        "not an SES event",
        "event refused",
    ] {
        assert!(logs.contains(line), "no {line:?} in {logs}");
    }
    assert!(logs.contains("<addr:"), "addresses are hashed: {logs}");
    assert!(!logs.to_lowercase().contains(ANN), "{logs}");
}
