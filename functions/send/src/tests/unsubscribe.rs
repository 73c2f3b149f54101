//! One-click unsubscribe on the send path: the headers a message gets, and recipients
//! unsubscribed from a job's list left out.

use super::*;
use courier_core::unsubscribe::{Links, Scope, verify};

const KEY: &str = "courier-unit-tests-unsubscribe-key-0123456789";

fn keys() -> courier_core::seal::SealKeys {
    courier_core::seal::SealKeys::new(KEY, &[]).unwrap()
}

/// A world whose send function links to `https://u.example/` (and a mailto form).
fn linking(mailer: MemoryMailer) -> World {
    let mut w = world_with(mailer);
    let mut pipeline = Arc::try_unwrap(w.pipeline).unwrap_or_else(|_| unreachable!());
    pipeline.unsubscribing = crate::unsubscribing::Unsubscribing::new(
        Links::new("https://u.example/", Some("unsubscribe@shop.example")).unwrap(),
        Arc::new(courier_adapters::seal_secret::SecretSealKeys::fixed(keys())),
    );
    w.pipeline = Arc::new(pipeline);
    w
}

fn ses() -> MemoryMailer {
    MemoryMailer::accepting(courier_core::ports::Provider::Ses)
}

fn bulk(id: &str, extra: serde_json::Value) -> String {
    let mut j = serde_json::json!({
        "version": 1, "message_id": id, "campaign_id": "news", "priority": "bulk",
        "from": "shop@example.com", "to": ["Ann <ann@example.org>"],
        "content": {"subject": "Our news", "text": "Hello"}
    });
    for (k, v) in extra.as_object().unwrap() {
        j[k] = v.clone();
    }
    j.to_string()
}

fn header<'a>(email: &'a OutgoingEmail, name: &str) -> Option<&'a str> {
    email
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

#[tokio::test]
async fn a_bulk_message_carries_a_signed_one_click_link_for_its_recipient_and_list() {
    // GIVEN a bulk job to one recipient
    let w = linking(ses());
    // WHEN it is sent
    let report = w
        .run(vec![rec("a", bulk("b1", serde_json::json!({})))])
        .await;
    // THEN its message has List-Unsubscribe (https, then mailto) and List-Unsubscribe-Post
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(report.metrics.counts.get("UnsubscribeLinksAdded"), Some(&1));
    let sent = w.mailer.sent.lock().unwrap()[0].clone();
    let value = header(&sent, "List-Unsubscribe").expect("List-Unsubscribe");
    let token = value
        .strip_prefix("<https://u.example/?t=")
        .and_then(|rest| rest.split_once('>'))
        .map(|(t, _)| t)
        .unwrap_or_else(|| panic!("{value}"));
    assert!(value.ends_with(&format!(
        ", <mailto:unsubscribe@shop.example?subject=unsubscribe%20{token}>"
    )));
    assert_eq!(
        header(&sent, "List-Unsubscribe-Post"),
        Some("List-Unsubscribe=One-Click")
    );
    // AND the token names the bare recipient and the job's list (its campaign), nothing else
    let subscription = verify(token, &keys()).unwrap();
    assert_eq!(subscription.address, "ann@example.org");
    assert_eq!(subscription.scope, Scope::List("news".into()));
    // AND the headers are written as they are, each on one line of the MIME message
    let raw = String::from_utf8(
        courier_adapters::smtp::build_message(&sent)
            .unwrap()
            .formatted(),
    )
    .unwrap();
    assert!(
        raw.contains(&format!("List-Unsubscribe: <https://u.example/?t={token}>")),
        "{raw}"
    );
    assert!(raw.contains("List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n"));
    assert!(raw.lines().all(|l| l.len() <= 998));
}

#[tokio::test]
async fn only_jobs_that_want_a_link_and_can_name_one_recipient_get_one() {
    let w = linking(ses());
    let cases = [
        // (job, whether it gets the link)
        (job("t1", "ann@example.org"), false),
        (
            bulk(
                "own",
                serde_json::json!({"headers": {"List-Unsubscribe": "<https://app.example/u/1>"}}),
            ),
            false,
        ),
        (
            bulk(
                "two",
                serde_json::json!({"to": ["a@example.org", "b@example.org"]}),
            ),
            false,
        ),
        (
            bulk("spaced", serde_json::json!({"campaign_id": "spring sale"})),
            false,
        ),
        (
            bulk("none", serde_json::json!({"unsubscribe": "none"})),
            false,
        ),
        (
            bulk(
                "listed",
                serde_json::json!({"campaign_id": "spring sale", "list_id": "offers"}),
            ),
            true,
        ),
        (
            serde_json::json!({"version": 1, "message_id": "asked", "campaign_id": "c",
                "from": "shop@example.com", "to": ["ann@example.org"], "unsubscribe": "global",
                "content": {"subject": "Hi", "text": "x"}})
            .to_string(),
            true,
        ),
    ];
    for (i, (body, linked)) in cases.iter().enumerate() {
        let report = w.run(vec![rec("r", body.clone())]).await;
        assert!(report.failures.is_empty(), "case {i}: {:?}", report.reasons);
        let sent = w.mailer.sent.lock().unwrap().last().cloned().unwrap();
        let ours = header(&sent, "List-Unsubscribe").is_some_and(|v| v.contains("u.example"));
        assert_eq!(ours, *linked, "case {i}: {:?}", sent.headers);
    }
    // The producer's own header is sent as it gave it.
    let own = w.mailer.sent.lock().unwrap()[1].clone();
    assert_eq!(
        header(&own, "List-Unsubscribe"),
        Some("<https://app.example/u/1>")
    );
    assert_eq!(header(&own, "List-Unsubscribe-Post"), None);
    // The list named by list_id, and a global link.
    let sent = w.mailer.sent.lock().unwrap().clone();
    let token_of = |e: &OutgoingEmail| {
        let v = header(e, "List-Unsubscribe").unwrap();
        v["<https://u.example/?t=".len()..v.find('>').unwrap()].to_owned()
    };
    assert_eq!(
        verify(&token_of(&sent[5]), &keys()).unwrap().scope,
        Scope::List("offers".into())
    );
    assert_eq!(
        verify(&token_of(&sent[6]), &keys()).unwrap().scope,
        Scope::Global
    );
}

#[tokio::test]
async fn a_bulk_job_is_sent_without_a_link_when_none_is_configured_and_counted() {
    let w = world_with(ses());
    let report = w
        .run(vec![rec("a", bulk("b1", serde_json::json!({})))])
        .await;
    assert!(report.failures.is_empty());
    assert_eq!(w.status_of("b1"), Some(Status::SentToProvider));
    assert_eq!(
        header(&w.mailer.sent.lock().unwrap()[0], "List-Unsubscribe"),
        None
    );
    assert_eq!(
        report.metrics.counts.get("UnsubscribeLinksNotAdded"),
        Some(&1)
    );
}

#[tokio::test]
async fn a_recipient_unsubscribed_from_the_list_is_not_sent_its_jobs() {
    // GIVEN ann unsubscribed from "news"
    let w = linking(ses());
    w.suppression
        .unsubscribe("ANN@example.org", &Scope::List("news".into()), t0())
        .await
        .unwrap();
    // WHEN a bulk job of "news" comes for her
    let report = w
        .run(vec![rec("a", bulk("b1", serde_json::json!({})))])
        .await;
    // THEN nothing is sent; the job is suppressed, and why is on its record
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.mailer.sent_count(), 0);
    assert_eq!(w.status_of("b1"), Some(Status::Suppressed));
    let record = w.status.records.lock().unwrap()["b1"].clone();
    let detail = record.history.last().unwrap().detail.clone().unwrap();
    assert!(detail.starts_with("unsubscribed"), "{detail}");
    assert!(detail.contains("news"), "{detail}");
    // AND a job of another list, or a transactional one, still reaches her
    w.run(vec![
        rec("b", bulk("b2", serde_json::json!({"list_id": "offers"}))),
        rec("c", job("t1", "ann@example.org")),
    ])
    .await;
    assert_eq!(w.status_of("b2"), Some(Status::SentToProvider));
    assert_eq!(w.status_of("t1"), Some(Status::SentToProvider));
    // AND a bulk job to her and bob goes to bob only
    w.run(vec![rec(
        "d",
        bulk(
            "b3",
            serde_json::json!({"to": ["ann@example.org", "bob@example.org"]}),
        ),
    )])
    .await;
    let last = w.mailer.sent.lock().unwrap().last().cloned().unwrap();
    let to: Vec<String> = last.to.iter().map(|m| m.email.to_string()).collect();
    assert_eq!(to, ["bob@example.org"]);
    // AND a global unsubscription stops even transactional mail
    w.suppression
        .unsubscribe("carol@example.org", &Scope::Global, t0())
        .await
        .unwrap();
    w.run(vec![rec("e", job("t2", "carol@example.org"))]).await;
    assert_eq!(w.status_of("t2"), Some(Status::Suppressed));
}

#[tokio::test]
async fn an_unreadable_unsubscription_list_sends_nothing_and_the_record_comes_back() {
    // GIVEN a suppression list whose first read fails
    let faults = Arc::new(courier_devkit::faults::Faults::default());
    faults.arm(0, courier_devkit::faults::Fault::FailBefore);
    let mut w = linking(ses());
    let mut pipeline = Arc::try_unwrap(w.pipeline).unwrap_or_else(|_| unreachable!());
    pipeline.suppression = Arc::new(courier_devkit::faults::Faulty::new(
        w.suppression.clone(),
        faults,
    ));
    w.pipeline = Arc::new(pipeline);
    // WHEN a bulk job comes
    let report = w
        .run(vec![rec("a", bulk("b1", serde_json::json!({})))])
        .await;
    // THEN it is redelivered, unsent and unclaimed
    assert_eq!(report.failures, vec!["a".to_owned()]);
    assert_eq!(w.mailer.sent_count(), 0);
    assert_eq!(w.status_of("b1"), None);
    // AND the next delivery sends it
    let report = w
        .run(vec![rec("a", bulk("b1", serde_json::json!({})))])
        .await;
    assert!(report.failures.is_empty());
    assert_eq!(w.mailer.sent_count(), 1);
}
