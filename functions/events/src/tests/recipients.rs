//! Per-recipient outcomes: each event moves the recipients it names, and the job's status
//! follows once every recipient's outcome is final.

use super::*;
use courier_core::recipients::{Recipient, RecipientStatus, Role, entries_of};

const ANN: &str = "ann@example.org";
const BOB: &str = "bob@example.org";
const CY: &str = "cy@example.org";

/// A job sent to Ann (to), Bob (cc) and Cy (bcc), its recipients as the send recorded them.
fn three(status: Status, each: RecipientStatus) -> World {
    let w = world(Some(status));
    {
        let mut records = w.status.records.lock().unwrap();
        let rec = records.get_mut("order-4711").unwrap();
        rec.recipients = [(ANN, Role::To), (BOB, Role::Cc), (CY, Role::Bcc)]
            .into_iter()
            .map(|(address, role)| Recipient {
                address: address.into(),
                role,
                status: each,
            })
            .collect();
        rec.recipient_log = entries_of(&rec.recipients, t0(), Some("accepted by ses"));
        rec.recipients_version = 1;
    }
    w
}

/// A fixture's event about `addresses` instead of Ann.
fn about(name: &str, addresses: &[&str]) -> String {
    let mut v: Value = serde_json::from_str(&fixture(name)).unwrap();
    match name {
        "delivery" => v["delivery"]["recipients"] = serde_json::json!(addresses),
        "bounce-permanent" => {
            let one = v["bounce"]["bouncedRecipients"][0].clone();
            v["bounce"]["bouncedRecipients"] = addresses
                .iter()
                .map(|a| {
                    let mut r = one.clone();
                    r["emailAddress"] = (*a).into();
                    r
                })
                .collect();
        }
        "complaint" => {
            v["complaint"]["complainedRecipients"] = serde_json::json!(
                addresses
                    .iter()
                    .map(|a| serde_json::json!({"emailAddress": a}))
                    .collect::<Vec<_>>()
            );
        }
        other => panic!("no recipients to set in {other}"),
    }
    v.to_string()
}

fn outcomes(w: &World) -> Vec<(String, RecipientStatus)> {
    w.record()
        .recipients
        .into_iter()
        .map(|r| (r.address, r.status))
        .collect()
}

fn of(list: &[(&str, RecipientStatus)]) -> Vec<(String, RecipientStatus)> {
    list.iter().map(|(a, s)| ((*a).to_owned(), *s)).collect()
}

#[tokio::test]
async fn one_delivery_one_bounce_one_complaint_each_recipient_its_own_and_the_job_complained() {
    use RecipientStatus::*;
    let w = three(Status::SentToProvider, Sent);
    // Ann's delivery: hers alone; the job waits for the others.
    let r = w.applier.handle(sqs(&[about("delivery", &[ANN])])).await;
    assert_eq!(r.applied, vec![Applied::Recipients]);
    assert_eq!(w.status(), Some(Status::SentToProvider));
    // Bob's permanent bounce: his alone, and he is suppressed; the job still waits.
    let r = w
        .applier
        .handle(sqs(&[about("bounce-permanent", &[BOB])]))
        .await;
    assert_eq!(r.applied, vec![Applied::Recipients]);
    assert_eq!(w.status(), Some(Status::SentToProvider));
    let now = t0();
    assert_eq!(
        w.suppression
            .suppressed(&[ANN.into(), BOB.into(), CY.into()], now)
            .await
            .unwrap(),
        vec![BOB.to_owned()]
    );
    // Cy's complaint: every recipient is final, and a complaint makes the job's status.
    let r = w.applier.handle(sqs(&[about("complaint", &[CY])])).await;
    assert_eq!(r.applied, vec![Applied::Changed(Status::Complained)]);
    assert_eq!(w.status(), Some(Status::Complained));
    assert_eq!(
        outcomes(&w),
        of(&[(ANN, Delivered), (BOB, BouncedPermanent), (CY, Complained)])
    );
    // Each recipient's timeline: the send, then its own event (none of the others').
    let log = w.record().recipient_log;
    let of_bob: Vec<RecipientStatus> = log
        .iter()
        .filter(|e| e.recipient == 1)
        .map(|e| e.status)
        .collect();
    assert_eq!(of_bob, vec![Sent, BouncedPermanent]);
    assert!(
        log.iter()
            .any(|e| e.recipient == 1
                && e.detail.as_deref().is_some_and(|d| d.contains("Permanent")))
    );
    // The outcome event the job's write marked carries every recipient's outcome.
    let event = courier_core::outcome::OutcomeEvent::pending(&w.record()).unwrap();
    assert_eq!(event.detail.outcome, "complained");
    let seen: Vec<(&str, &str, &str)> = event
        .detail
        .recipients
        .iter()
        .map(|r| (r.address.as_str(), r.role.as_str(), r.status.as_str()))
        .collect();
    assert_eq!(
        seen,
        vec![
            (ANN, "to", "delivered"),
            (BOB, "cc", "bounced_permanent"),
            (CY, "bcc", "complained")
        ]
    );
}

#[tokio::test]
async fn some_delivered_and_the_others_bounced_is_partially_delivered_then_a_complaint_wins() {
    use RecipientStatus::*;
    let w = three(Status::SentToProvider, Sent);
    let r = w
        .applier
        .handle(sqs(&[
            about("delivery", &[ANN, CY]),
            about("bounce-permanent", &[BOB]),
        ]))
        .await;
    assert_eq!(
        r.applied,
        vec![
            Applied::Recipients,
            Applied::Changed(Status::PartiallyDelivered)
        ]
    );
    assert_eq!(
        outcomes(&w),
        of(&[(ANN, Delivered), (BOB, BouncedPermanent), (CY, Delivered)])
    );
    // A later complaint from a recipient who got it moves the job on.
    let r = w.applier.handle(sqs(&[about("complaint", &[ANN])])).await;
    assert_eq!(r.applied, vec![Applied::Changed(Status::Complained)]);
}

#[tokio::test]
async fn every_recipient_delivered_is_delivered_and_repeats_change_nothing() {
    let w = three(Status::SentToProvider, RecipientStatus::Sent);
    let all = about("delivery", &[ANN, BOB, CY]);
    let r = w.applier.handle(sqs(std::slice::from_ref(&all))).await;
    assert_eq!(r.applied, vec![Applied::Changed(Status::Delivered)]);
    let before = w.record();
    // The same event again (an SNS or SQS redelivery), and a bounce after the delivery.
    let r = w
        .applier
        .handle(sqs(&[all, about("bounce-permanent", &[ANN])]))
        .await;
    assert_eq!(r.applied, vec![Applied::Absorbed, Applied::Absorbed]);
    let after = w.record();
    assert_eq!(after.recipients, before.recipients);
    assert_eq!(after.recipient_log, before.recipient_log);
    assert_eq!(after.recipients_version, before.recipients_version);
    assert_eq!(after.status, Status::Delivered);
}

#[tokio::test]
async fn one_recipients_delivery_resolves_an_ambiguous_send_so_it_is_not_sent_again() {
    let w = three(Status::Unknown, RecipientStatus::Unknown);
    let r = w.applier.handle(sqs(&[about("delivery", &[BOB])])).await;
    assert_eq!(r.applied, vec![Applied::Changed(Status::SentToProvider)]);
    assert_eq!(
        outcomes(&w),
        of(&[
            (ANN, RecipientStatus::Unknown),
            (BOB, RecipientStatus::Delivered),
            (CY, RecipientStatus::Unknown)
        ])
    );
}

/// A delivery to all three whose `nth` write (0: the recipients', 1: the job's status) fails:
/// the event is left for redelivery with the recipients as `then`, and its redelivery applies it.
async fn fails_then_redelivered(nth: usize, then: RecipientStatus) {
    let w = three(Status::SentToProvider, RecipientStatus::Sent);
    let event = about("delivery", &[ANN, BOB, CY]);
    w.status.fail_finishes.set_after(nth, 1);
    let r = w.applier.handle(sqs(std::slice::from_ref(&event))).await;
    assert_eq!(r.failures, vec!["sqs-0".to_owned()]);
    assert_eq!(w.status(), Some(Status::SentToProvider));
    assert!(
        outcomes(&w).iter().all(|(_, s)| *s == then),
        "{:?}",
        outcomes(&w)
    );
    // The redelivered event moves what is left, and gives the job its status.
    let r = w.applier.handle(sqs(&[event])).await;
    assert_eq!(r.applied, vec![Applied::Changed(Status::Delivered)]);
}

#[tokio::test]
async fn a_failed_recipient_write_leaves_the_event_for_redelivery_and_loses_nothing() {
    fails_then_redelivered(0, RecipientStatus::Sent).await;
}

#[tokio::test]
async fn the_job_status_write_failing_after_the_recipients_moved_is_finished_by_the_redelivery() {
    fails_then_redelivered(1, RecipientStatus::Delivered).await;
}

#[tokio::test]
async fn an_event_naming_none_of_the_recipients_applies_to_the_job_as_before() {
    let w = three(Status::SentToProvider, RecipientStatus::Sent);
    let r = w
        .applier
        .handle(sqs(&[about("delivery", &["dee@example.org"])]))
        .await;
    assert_eq!(r.applied, vec![Applied::Changed(Status::Delivered)]);
    assert!(
        outcomes(&w)
            .iter()
            .all(|(_, s)| *s == RecipientStatus::Sent)
    );
    // A record written before recipients were kept: the job as a whole.
    let w = world(Some(Status::SentToProvider));
    let r = w.applier.handle(sqs(&[about("delivery", &[ANN])])).await;
    assert_eq!(r.applied, vec![Applied::Changed(Status::Delivered)]);
}
