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
        rec.recipient_log = entries_of(&rec.recipients, t0(), Some("accepted by ses"), &[]);
        rec.recipients_version = 1;
    }
    w
}

/// A fixture's event about `addresses` instead of Ann.
fn about(name: &str, addresses: &[&str]) -> String {
    let mut v: Value = serde_json::from_str(&fixture(name)).unwrap();
    match name {
        "delivery" => v["delivery"]["recipients"] = serde_json::json!(addresses),
        "bounce-permanent" | "bounce-transient" => {
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

/// The payload the send kept for the three-recipient job (generation 0, as an envelope).
fn kept_three(not_after: Option<&str>) -> String {
    let mut v: Value = serde_json::from_str(&kept_payload(not_after)).unwrap();
    v["job"]["to"] = serde_json::json!(["Ann <ann@example.org>"]);
    v["job"]["cc"] = serde_json::json!(["Bob <Bob@example.org>"]);
    v["job"]["bcc"] = serde_json::json!([CY]);
    v.to_string()
}

/// The SES message id of the fixtures' send.
const SES_ID: &str = "0100018c1a2b3c4d-5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9-000000";

fn copy(w: &World, n: usize) -> courier_core::envelope::Incoming {
    courier_core::envelope::parse_body(w.scheduled()[n].body.as_bytes()).unwrap()
}

/// The one copy scheduled, checked to be a job of its own, to Bob alone, as Cc: its id.
fn bobs_part(w: &World) -> String {
    assert_eq!(w.scheduled().len(), 1);
    let part = copy(w, 0);
    let id = courier_core::recipients::part_id("order-4711", SES_ID, &[BOB.into()]);
    assert_eq!(part.job.message_id, id);
    assert!(part.job.to.is_empty() && part.job.bcc.is_empty());
    assert_eq!(part.job.cc, vec!["Bob <Bob@example.org>".to_owned()]);
    id
}

#[tokio::test]
async fn a_transient_bounce_of_one_recipient_resends_to_it_alone_as_a_job_of_its_own() {
    use RecipientStatus::*;
    // GIVEN a job sent to Ann (to), Bob (cc) and Cy (bcc)
    let w = three(Status::SentToProvider, Sent);
    w.keep_payload(kept_three(None));
    // WHEN Bob's mailbox is full
    let bounce = about("bounce-transient", &[BOB]);
    let r = w.applier.handle(sqs(std::slice::from_ref(&bounce))).await;
    // THEN one copy is scheduled: a job of its own, to Bob alone, still as Cc
    assert_eq!(r.applied, vec![Applied::Resent]);
    let id = bobs_part(&w);
    let part = copy(&w, 0);
    assert_eq!(part.job.content, three_content());
    assert_eq!(
        part.attempt, 1,
        "the copy is a retry, on the soft-bounce schedule"
    );
    assert_eq!(
        part.history[0].class,
        courier_core::classify::ErrorClass::MailboxTemporary
    );
    // AND this job keeps its status and its generation; Bob is `resent`, naming that job
    let rec = w.record();
    assert_eq!((rec.status, rec.attempt), (Status::SentToProvider, 0));
    assert_eq!(outcomes(&w), of(&[(ANN, Sent), (BOB, Resent), (CY, Sent)]));
    let last = rec.recipient_log.last().unwrap();
    assert_eq!((last.recipient, last.status), (1, Resent));
    assert_eq!(
        last.detail.as_deref(),
        Some(format!("resent as {id}").as_str())
    );
    // AND the same event again schedules nothing more
    let r = w.applier.handle(sqs(&[bounce])).await;
    assert_eq!(r.applied, vec![Applied::Absorbed]);
    assert_eq!(w.scheduled().len(), 1);
    // AND once Ann and Cy are delivered, the job is partially delivered (Bob's outcome is the
    // resend's)
    let r = w
        .applier
        .handle(sqs(&[about("delivery", &[ANN, CY])]))
        .await;
    assert_eq!(
        r.applied,
        vec![Applied::Changed(Status::PartiallyDelivered)]
    );
}

fn three_content() -> Option<courier_core::job::Content> {
    let v: Value = serde_json::from_str(&kept_payload(None)).unwrap();
    Some(serde_json::from_value(v["job"]["content"].clone()).unwrap())
}

#[tokio::test]
async fn every_recipient_bounced_for_now_is_resent_together_and_the_job_is_bounced_transient() {
    use RecipientStatus::*;
    let w = three(Status::SentToProvider, Sent);
    w.keep_payload(kept_three(None));
    let r = w
        .applier
        .handle(sqs(&[about("bounce-transient", &[ANN, BOB, CY])]))
        .await;
    assert_eq!(r.applied, vec![Applied::Changed(Status::BouncedTransient)]);
    let part = copy(&w, 0);
    assert_eq!(part.job.to, vec!["Ann <ann@example.org>".to_owned()]);
    assert_eq!(part.job.cc, vec!["Bob <Bob@example.org>".to_owned()]);
    assert_eq!(part.job.bcc, vec![CY.to_owned()]);
    assert_ne!(part.job.message_id, "order-4711");
    assert_eq!(
        outcomes(&w),
        of(&[(ANN, Resent), (BOB, Resent), (CY, Resent)])
    );
    assert_eq!(w.record().attempt, 0, "this job is not sent again itself");
}

#[tokio::test]
async fn a_part_whose_scheduling_failed_is_scheduled_when_the_event_returns_and_only_once_marked() {
    use RecipientStatus::*;
    let w = three(Status::SentToProvider, Sent);
    w.keep_payload(kept_three(None));
    w.scheduler.fail_enqueues.set(10);
    let bounce = about("bounce-transient", &[BOB]);
    let r = w.applier.handle(sqs(std::slice::from_ref(&bounce))).await;
    // Nothing scheduled: the event comes back, Bob waits as bounced (never `resent` with no
    // copy coming)
    assert_eq!(r.failures, vec!["sqs-0".to_owned()]);
    assert!(w.scheduled().is_empty());
    assert_eq!(
        outcomes(&w),
        of(&[(ANN, Sent), (BOB, BouncedTransient), (CY, Sent)])
    );
    w.scheduler.fail_enqueues.set(0);
    let r = w.applier.handle(sqs(&[bounce])).await;
    assert_eq!(r.applied, vec![Applied::Resent]);
    assert_eq!(w.scheduled().len(), 1);
    assert_eq!(
        copy(&w, 0).job.message_id,
        courier_core::recipients::part_id("order-4711", SES_ID, &[BOB.into()])
    );
    assert_eq!(outcomes(&w), of(&[(ANN, Sent), (BOB, Resent), (CY, Sent)]));
}

#[tokio::test]
async fn a_recipients_write_failing_after_the_copy_reschedules_the_same_part() {
    use RecipientStatus::*;
    let w = three(Status::SentToProvider, Sent);
    w.keep_payload(kept_three(None));
    // The first recipients' write (bounced) and the part's record land; the second
    // recipients' write (resent) fails.
    w.status.fail_finishes.set_after(2, 1);
    let bounce = bobs_bounce_comes_back(&w).await;
    let r = w.applier.handle(sqs(&[bounce])).await;
    assert_eq!(r.applied, vec![Applied::Resent]);
    // Two copies of one part: one id, one generation, so its claim sends one.
    let copies: Vec<(String, u32)> = (0..2)
        .map(|n| copy(&w, n))
        .map(|c| (c.job.message_id, c.attempt))
        .collect();
    assert_eq!(copies[0], copies[1]);
    assert_eq!(outcomes(&w), of(&[(ANN, Sent), (BOB, Resent), (CY, Sent)]));
}

/// Bob's transient bounce handled while a write fails: the event comes back and Bob waits as
/// bounced (never `resent` with no copy, or no record waiting for it, behind him). The event,
/// for its redelivery.
async fn bobs_bounce_comes_back(w: &World) -> String {
    use RecipientStatus::*;
    let bounce = about("bounce-transient", &[BOB]);
    let r = w.applier.handle(sqs(std::slice::from_ref(&bounce))).await;
    assert_eq!(r.failures, vec!["sqs-0".to_owned()]);
    assert_eq!(
        outcomes(w),
        of(&[(ANN, Sent), (BOB, BouncedTransient), (CY, Sent)])
    );
    bounce
}

/// A part's copy has no record of its own job until its claim: the record that waits for it is
/// written with the copy, so the sweeper finds a part whose copy is lost (`SweptCopyOverdue`)
/// and `courierctl requeue` can put it back from the body it keeps.
#[tokio::test]
async fn a_part_waits_for_its_copy_in_a_record_of_its_own_written_once() {
    use RecipientStatus::*;
    let w = three(Status::SentToProvider, Sent);
    w.keep_payload(kept_three(None));
    w.edit(|rec| rec.trace_id = Some("1-5759e988-bd862e3fe1be46a994272793".into()));
    // The part's record fails to be written once: the event comes back, and Bob waits as bounced.
    w.status.fail_finishes.set_after(1, 1);
    let bounce = bobs_bounce_comes_back(&w).await;
    let r = w.applier.handle(sqs(std::slice::from_ref(&bounce))).await;
    assert_eq!(r.applied, vec![Applied::Resent]);
    assert_eq!(outcomes(&w), of(&[(ANN, Sent), (BOB, Resent), (CY, Sent)]));
    let id = courier_core::recipients::part_id("order-4711", SES_ID, &[BOB.into()]);
    let copy = copy(&w, 1);
    let part = w.status.get(&id).await.unwrap().expect("the part's record");
    // Waiting at the copy's generation, due when the copy's wait ends
    assert_eq!(
        (part.status, part.attempt),
        (Status::Deferred, copy.attempt)
    );
    let delay = w.scheduled()[1].delay_secs;
    assert_eq!(
        part.copy_due,
        Some(t0() + chrono::Duration::seconds(i64::try_from(delay).unwrap()))
    );
    assert_eq!(
        courier_core::ports::OpenState::of(part.status, None),
        Some(courier_core::ports::OpenState::Waiting)
    );
    // with the part's body (Bob alone), the trace and the facts of the job it came from
    let kept =
        courier_core::envelope::parse_body(part.payload.as_deref().unwrap().as_bytes()).unwrap();
    assert_eq!(kept.job.message_id, id);
    assert_eq!(kept.job.cc, vec!["Bob <Bob@example.org>".to_owned()]);
    assert!(kept.job.to.is_empty() && kept.job.bcc.is_empty());
    assert_eq!(part.trace_id, copy.trace);
    assert_eq!(part.facts.campaign_id.as_deref(), Some("receipts"));
    assert_eq!(part.history.len(), 1);
    assert!(
        part.history[0]
            .detail
            .as_deref()
            .unwrap()
            .contains("of order-4711"),
        "{:?}",
        part.history[0]
    );
    // AND the part's copy claims its record
    let claim = courier_core::claim::ClaimRequest {
        message_id: id.clone(),
        attempt: copy.attempt,
        owner: "send".into(),
        now: t0(),
        lease_until: t0() + chrono::Duration::seconds(60),
        grace: chrono::Duration::seconds(600),
        check_suppressed: Vec::new(),
        trace_id: None,
        facts: Default::default(),
        payload: None,
    };
    assert_eq!(
        w.status.claim(&claim).await.unwrap(),
        courier_core::ports::ClaimOutcome::Claimed
    );
    // AND a part whose copy was claimed first is not written back to waiting
    w.status
        .records
        .lock()
        .unwrap()
        .get_mut("order-4711")
        .unwrap()
        .recipients[1]
        .status = BouncedTransient;
    let again = w.applier.handle(sqs(&[bounce])).await;
    assert_eq!(again.applied, vec![Applied::Resent]);
    assert_eq!(
        w.status.get(&id).await.unwrap().unwrap().status,
        Status::Processing
    );
}

#[tokio::test]
async fn a_part_past_the_horizon_is_dead_lettered_as_its_own_job_and_soft_suppressed() {
    use RecipientStatus::*;
    let w = three(Status::SentToProvider, Sent);
    w.keep_payload(kept_three(Some("2026-01-01T00:00:00Z")));
    let r = w
        .applier
        .handle(sqs(&[about("bounce-transient", &[BOB])]))
        .await;
    assert_eq!(
        r.applied,
        vec![Applied::GaveUp(
            courier_core::policy::DeadLetterCategory::RetriesExhausted
        )]
    );
    assert!(w.scheduled().is_empty());
    let id = courier_core::recipients::part_id("order-4711", SES_ID, &[BOB.into()]);
    {
        let letters = w.dead.letters.lock().unwrap();
        assert_eq!(letters.len(), 1);
        assert_eq!(letters[0].message_id.as_deref(), Some(id.as_str()));
        // Replayed, the letter sends to Bob alone.
        let payload: Value = serde_json::from_str(letters[0].payload.as_deref().unwrap()).unwrap();
        assert_eq!(payload["to"], serde_json::json!([]));
        assert_eq!(payload["cc"], serde_json::json!(["Bob <Bob@example.org>"]));
    }
    assert!(w.suppression.is_suppressed(BOB, t0()));
    assert!(!w.suppression.is_suppressed(ANN, t0()));
    assert_eq!(w.status(), Some(Status::SentToProvider));
    assert_eq!(outcomes(&w), of(&[(ANN, Sent), (BOB, Resent), (CY, Sent)]));
    let last = w.record().recipient_log.last().unwrap().clone();
    assert_eq!(last.detail, Some(format!("gave up: dead-lettered as {id}")));
}

#[tokio::test]
async fn a_transient_bounce_of_one_recipient_of_an_ambiguous_send_resolves_it_as_sent() {
    use RecipientStatus::*;
    // GIVEN a three-recipient send left ambiguous (`unknown`), its payload kept
    let w = three(Status::Unknown, Unknown);
    w.keep_payload(kept_three(None));
    // WHEN Bob's transient bounce arrives
    let r = w
        .applier
        .handle(sqs(&[about("bounce-transient", &[BOB])]))
        .await;
    // THEN SES evidently took the message: the job is sent (never sent whole again after the
    // grace window), and Bob alone is resent
    assert_eq!(r.applied, vec![Applied::Resent]);
    assert_eq!(w.status(), Some(Status::SentToProvider));
    assert_eq!(
        outcomes(&w),
        of(&[(ANN, Unknown), (BOB, Resent), (CY, Unknown)])
    );
    assert_eq!(copy(&w, 0).job.cc, vec!["Bob <Bob@example.org>".to_owned()]);
}

#[tokio::test]
async fn a_transient_bounce_without_a_kept_payload_or_of_an_earlier_send_resends_nothing() {
    use RecipientStatus::*;
    // Without a kept payload there is nothing to send again from: the bounce is recorded on
    // its recipient, and nothing is scheduled.
    let w = three(Status::SentToProvider, Sent);
    let r = w
        .applier
        .handle(sqs(&[about("bounce-transient", &[BOB])]))
        .await;
    assert_eq!(r.applied, vec![Applied::Recipients]);
    assert!(w.scheduled().is_empty());
    assert_eq!(
        outcomes(&w),
        of(&[(ANN, Sent), (BOB, BouncedTransient), (CY, Sent)])
    );
    // A bounce of an earlier send (the job was sent again whole since, under another SES
    // message id): recorded on its recipient, and the later send is not resent from.
    let w = three(Status::SentToProvider, Sent);
    w.keep_payload(kept_three(None));
    w.edit(|rec| rec.provider_message_id = Some("a-later-send".into()));
    let r = w
        .applier
        .handle(sqs(&[about("bounce-transient", &[BOB])]))
        .await;
    assert_eq!(r.applied, vec![Applied::Recipients]);
    assert!(w.scheduled().is_empty());
    assert_eq!(w.status(), Some(Status::SentToProvider));
}

/// `event` (a fixture's JSON) as SES sends it for a message it sent to `addresses`.
fn sent_to(event: &str, addresses: &[&str]) -> String {
    let mut v: Value = serde_json::from_str(event).unwrap();
    v["mail"]["destination"] = serde_json::json!(addresses);
    v.to_string()
}

/// A job to Ann, Bob and Cy whose send SES's Send event recorded (the send function died
/// before its own status write): SES's id and the body its claim kept, and no recipients.
fn recorded_by_ses_alone() -> World {
    let w = world(Some(Status::SentToProvider));
    w.keep_payload(kept_three(None));
    w.edit(|rec| rec.provider_message_id = Some(SES_ID.into()));
    assert!(w.record().recipients.is_empty());
    w
}

#[tokio::test]
async fn a_send_recorded_without_its_recipients_takes_them_from_ses_and_resends_only_the_bounced_one()
 {
    use RecipientStatus::*;
    // GIVEN a job to Ann, Bob and Cy recorded by SES's Send event alone, which SES sent to Ann
    // and Bob (Cy was suppressed when it was sent)
    let w = recorded_by_ses_alone();
    // WHEN Bob's transient bounce arrives (its `mail.destination`: Ann and Bob)
    let bounce = sent_to(&about("bounce-transient", &[BOB]), &[ANN, BOB]);
    let r = w.applier.handle(sqs(std::slice::from_ref(&bounce))).await;
    // THEN the record takes its recipients from the event, in their roles (Cy suppressed), and
    // Bob alone is sent again, as a job of his own, as Cc: Ann does not get the message twice
    assert!(r.failures.is_empty(), "{r:?}");
    assert_eq!(r.applied, vec![Applied::Resent]);
    assert_eq!(
        outcomes(&w),
        of(&[(ANN, Sent), (BOB, Resent), (CY, Suppressed)])
    );
    let roles: Vec<Role> = w.record().recipients.iter().map(|r| r.role).collect();
    assert_eq!(roles, vec![Role::To, Role::Cc, Role::Bcc]);
    assert_eq!(
        w.record().recipient_log[0].detail.as_deref(),
        Some("accepted by ses (the recipients its event names)")
    );
    bobs_part(&w);
    let rec = w.record();
    assert_eq!((rec.status, rec.attempt), (Status::SentToProvider, 0));
    // AND the same event again changes nothing
    let r = w.applier.handle(sqs(&[bounce])).await;
    assert_eq!(r.applied, vec![Applied::Absorbed]);
    assert_eq!(w.scheduled().len(), 1);
    // AND Ann's delivery makes the job partially delivered (Bob's outcome is his resend's)
    let delivery = sent_to(&about("delivery", &[ANN]), &[ANN, BOB]);
    let r = w.applier.handle(sqs(&[delivery])).await;
    assert_eq!(
        r.applied,
        vec![Applied::Changed(Status::PartiallyDelivered)]
    );
}

#[tokio::test]
async fn a_delivery_to_one_recipient_of_a_send_recorded_without_its_recipients_waits_for_the_others()
 {
    use RecipientStatus::*;
    // GIVEN a job to three recorded by SES's Send event alone
    let w = recorded_by_ses_alone();
    // WHEN Ann's delivery arrives first
    let delivery = sent_to(&about("delivery", &[ANN]), &[ANN, BOB, CY]);
    let r = w.applier.handle(sqs(&[delivery])).await;
    // THEN it is hers alone: the job is not delivered while Bob's and Cy's outcomes are open
    assert_eq!(r.applied, vec![Applied::Recipients]);
    assert_eq!(w.status(), Some(Status::SentToProvider));
    assert_eq!(
        outcomes(&w),
        of(&[(ANN, Delivered), (BOB, Sent), (CY, Sent)])
    );
}

#[tokio::test]
async fn a_send_recorded_without_its_recipients_keeps_none_unless_ses_names_this_send() {
    // An event naming no destination (not what SES sends), an event of another send, and a
    // record without a kept body write no list: the job keeps its status as a whole, and is
    // not sent again to all three for one recipient's bounce.
    let no_destination = sent_to(&about("bounce-transient", &[BOB]), &[]);
    let w = recorded_by_ses_alone();
    let r = w.applier.handle(sqs(&[no_destination])).await;
    assert_eq!(r.applied, vec![Applied::Absorbed]);
    assert!(w.record().recipients.is_empty() && w.scheduled().is_empty());

    let bounce = sent_to(&about("bounce-transient", &[BOB]), &[ANN, BOB, CY]);
    let w = recorded_by_ses_alone();
    w.edit(|rec| rec.provider_message_id = Some("a-later-send".into()));
    let r = w.applier.handle(sqs(std::slice::from_ref(&bounce))).await;
    assert_eq!(r.applied, vec![Applied::Absorbed]);
    assert!(w.record().recipients.is_empty() && w.scheduled().is_empty());

    let w = recorded_by_ses_alone();
    w.edit(|rec| rec.payload = None);
    let r = w.applier.handle(sqs(&[bounce])).await;
    assert!(r.failures.is_empty(), "{r:?}");
    assert!(w.record().recipients.is_empty() && w.scheduled().is_empty());
    assert_eq!(w.status(), Some(Status::BouncedTransient));
}
