//! Port contracts: one suite per port, run against the in-memory adapter and the real adapter on
//! the emulator, so the memory adapters the unit tests rely on behave like the real ones.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers fail the test loudly

use std::time::Duration;

use chrono::{DateTime, Utc};
use courier_adapters::aws::{
    DynamoDbBreakerStore, DynamoDbDestinationRates, DynamoDbEventLedger, DynamoDbLiveSettings,
    DynamoDbPoisonList, DynamoDbReputationStore, DynamoDbSendSchedule, DynamoDbSightings,
    DynamoDbStatusStore, DynamoDbSuppressionList, S3PayloadStore, S3TemplateStore, SesMailer,
    SesSendQuota, SqsDeadLetterSink, SqsRetryScheduler,
};
use courier_adapters::smtp::{SmtpMailer, SmtpOptions, SmtpSecurity};
use courier_core::breaker::{BreakerConfig, BreakerState};
use courier_core::classify::ErrorClass;
use courier_core::policy::DeadLetterCategory;
use courier_core::ports::*;
use courier_core::status::Status;
use courier_devkit::memory::*;
use courier_integration::{Stack, require_env, unique};

fn now() -> DateTime<Utc> {
    // Whole milliseconds: DynamoDB stores epoch milliseconds.
    DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).unwrap()
}

fn claim(id: &str, attempt: u32, owner: &str, at: DateTime<Utc>, lease_secs: i64) -> ClaimRequest {
    ClaimRequest {
        message_id: id.into(),
        attempt,
        owner: owner.into(),
        now: at,
        lease_until: at + chrono::Duration::seconds(lease_secs),
        grace: chrono::Duration::seconds(600),
        check_suppressed: Vec::new(),
        trace_id: None,
        facts: Default::default(),
        payload: None,
    }
}

fn update(id: &str, owner: &str, status: Status, attempt: u32, at: DateTime<Utc>) -> StatusUpdate {
    StatusUpdate {
        message_id: id.into(),
        owner: owner.into(),
        status,
        attempt,
        provider: Some("ses".into()),
        provider_message_id: (status == Status::SentToProvider).then(|| "pmid".into()),
        now: at,
        detail: Some(format!("{owner} wrote {status}")),
        facts: None,
        recipients: None,
        recipient_notes: Vec::new(),
        copy_due: None,
    }
}

async fn status_store_contract(store: &dyn StatusStore) {
    let t = now();
    let id = unique("job");
    // GIVEN a new job WHEN claimed THEN ours; a second claim while the lease lives is Busy
    assert_eq!(
        store.claim(&claim(&id, 0, "a", t, 60)).await.unwrap(),
        ClaimOutcome::Claimed
    );
    assert!(matches!(
        store.claim(&claim(&id, 0, "b", t, 60)).await.unwrap(),
        ClaimOutcome::Busy { .. }
    ));
    // finishing with someone else's lease fails
    assert!(
        store
            .finish(&update(&id, "b", Status::SentToProvider, 0, t))
            .await
            .is_err()
    );
    store
        .finish(&update(&id, "a", Status::SentToProvider, 0, t))
        .await
        .unwrap();
    let rec = store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        (rec.status, rec.provider_message_id.as_deref()),
        (Status::SentToProvider, Some("pmid"))
    );
    assert_eq!(rec.lease_owner, None);
    // The claim's history entry names its owner, as the send function reads it back (a copy
    // whose lease expired into `unknown` with no claim since took the job).
    let claimed = rec
        .history
        .iter()
        .find(|h| h.status == Status::Processing)
        .unwrap();
    assert_eq!(
        claimed.detail.as_deref(),
        Some(courier_core::claim::claimed_by("a").as_str())
    );
    assert_eq!(rec.trace_id, None, "a claim without a trace writes none");
    // A claim with the job's trace keeps it on the record.
    let traced = unique("traced");
    let mut request = claim(&traced, 0, "a", t, 60);
    request.trace_id = Some("1-5759e988-bd862e3fe1be46a994272793".into());
    assert_eq!(store.claim(&request).await.unwrap(), ClaimOutcome::Claimed);
    assert_eq!(
        store
            .get(&traced)
            .await
            .unwrap()
            .unwrap()
            .trace_id
            .as_deref(),
        Some("1-5759e988-bd862e3fe1be46a994272793")
    );
    // a duplicate delivery is refused as a duplicate
    assert_eq!(
        store.claim(&claim(&id, 0, "c", t, 60)).await.unwrap(),
        ClaimOutcome::Duplicate(Status::SentToProvider)
    );
    // a late suppression does not overwrite a sent job
    store
        .record(&update(&id, "x", Status::Suppressed, 0, t))
        .await
        .unwrap();
    assert_eq!(
        store.get(&id).await.unwrap().unwrap().status,
        Status::SentToProvider
    );

    // Retry generations: deferred at attempt 2 refuses a stale copy of attempt 1.
    let id = unique("job");
    store.claim(&claim(&id, 0, "a", t, 60)).await.unwrap();
    store
        .finish(&update(&id, "a", Status::Deferred, 2, t))
        .await
        .unwrap();
    assert_eq!(
        store.claim(&claim(&id, 1, "b", t, 60)).await.unwrap(),
        ClaimOutcome::Stale { current_attempt: 2 }
    );
    assert_eq!(
        store.claim(&claim(&id, 2, "b", t, 60)).await.unwrap(),
        ClaimOutcome::Claimed
    );

    // A lease that expired mid-send: ambiguous, then claimable after the grace window.
    let id = unique("job");
    store.claim(&claim(&id, 0, "a", t, 1)).await.unwrap();
    let later = t + chrono::Duration::seconds(5);
    assert!(matches!(
        store.claim(&claim(&id, 0, "b", later, 60)).await.unwrap(),
        ClaimOutcome::Ambiguous { .. }
    ));
    assert_eq!(
        store.get(&id).await.unwrap().unwrap().status,
        Status::Unknown
    );
    assert!(matches!(
        store
            .claim(&claim(
                &id,
                0,
                "c",
                later + chrono::Duration::seconds(10),
                60
            ))
            .await
            .unwrap(),
        ClaimOutcome::Ambiguous { .. }
    ));
    let after_grace = later + chrono::Duration::seconds(601);
    assert_eq!(
        store
            .claim(&claim(&id, 0, "d", after_grace, 60))
            .await
            .unwrap(),
        ClaimOutcome::Claimed
    );
    // the original holder's late success still lands: its evidence resolves the job
    store
        .finish(&update(&id, "d", Status::Unknown, 0, after_grace))
        .await
        .unwrap();
    store
        .finish(&update(&id, "a", Status::SentToProvider, 0, after_grace))
        .await
        .unwrap();
    assert_eq!(
        store.get(&id).await.unwrap().unwrap().status,
        Status::SentToProvider
    );

    // A newer generation may take over an expired lease (the holder re-enqueued it).
    let id = unique("job");
    store.claim(&claim(&id, 0, "a", t, 1)).await.unwrap();
    assert_eq!(
        store.claim(&claim(&id, 1, "b", later, 60)).await.unwrap(),
        ClaimOutcome::Claimed
    );

    // A soft bounce's resend: the next generation's copy takes the `bounced_transient` record
    // (the events function schedules it before moving the record on); the bounced generation's
    // own copy is a duplicate.
    let id = unique("job");
    store.claim(&claim(&id, 0, "a", t, 60)).await.unwrap();
    store
        .finish(&update(&id, "a", Status::SentToProvider, 0, t))
        .await
        .unwrap();
    store
        .record(&update(&id, "events", Status::BouncedTransient, 0, t))
        .await
        .unwrap();
    assert_eq!(
        store.claim(&claim(&id, 0, "b", later, 60)).await.unwrap(),
        ClaimOutcome::Duplicate(Status::BouncedTransient)
    );
    assert_eq!(
        store.claim(&claim(&id, 1, "c", later, 60)).await.unwrap(),
        ClaimOutcome::Claimed
    );

    // The claim writes the body to resend from with its lease (before the provider can take
    // the mail); a refused claim leaves it. A soft bounce's resend ends the bounced send's
    // lease, so that send's late status write no longer lands; the next generation's claim
    // removes what was the earlier send's: its body (this claim has none) and its provider id;
    // the bounce it resent stays named.
    let id = unique("job");
    let mut first = claim(&id, 0, "a", t, 60);
    first.payload = Some("{\"generation\":0}".into());
    assert_eq!(store.claim(&first).await.unwrap(), ClaimOutcome::Claimed);
    let rec = store.get(&id).await.unwrap().unwrap();
    assert_eq!(rec.payload.as_deref(), Some("{\"generation\":0}"));
    let mut busy = claim(&id, 0, "b", t, 60);
    busy.payload = Some("{\"other\":true}".into());
    assert!(matches!(
        store.claim(&busy).await.unwrap(),
        ClaimOutcome::Busy { .. }
    ));
    // SES's Send event records the send (the lease holder has not written yet).
    store
        .record(&update(&id, "events", Status::SentToProvider, 0, t))
        .await
        .unwrap();
    let rec = store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        (
            rec.status,
            rec.payload.as_deref(),
            rec.provider_message_id.as_deref()
        ),
        (
            Status::SentToProvider,
            Some("{\"generation\":0}"),
            Some("pmid")
        )
    );
    assert!(
        store
            .resend(&Resend {
                message_id: id.clone(),
                attempt: 0,
                bounced: "pmid".into(),
                detail: "soft bounce".into(),
                now: later,
                copy_due: later,
            })
            .await
            .unwrap()
    );
    let rec = store.get(&id).await.unwrap().unwrap();
    assert_eq!((rec.status, rec.attempt), (Status::Deferred, 1));
    assert_eq!(rec.lease_owner, None);
    let late = update(&id, "a", Status::SentToProvider, 0, later);
    assert!(
        store.finish(&late).await.is_err(),
        "the bounced send's late write"
    );
    assert_eq!(
        store.claim(&claim(&id, 1, "c", later, 60)).await.unwrap(),
        ClaimOutcome::Claimed
    );
    let rec = store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        (
            rec.payload,
            rec.provider_message_id,
            rec.resend_of.as_deref()
        ),
        (None, None, Some("pmid"))
    );

    // Suppressed before any claim: recorded, and then a duplicate.
    let id = unique("job");
    store
        .record(&update(&id, "x", Status::Suppressed, 0, t))
        .await
        .unwrap();
    assert_eq!(
        store.claim(&claim(&id, 0, "a", t, 60)).await.unwrap(),
        ClaimOutcome::Duplicate(Status::Suppressed)
    );
    assert_eq!(store.get("never-seen").await.unwrap(), None);

    // A replay reopens a dead-lettered job as the next generation, once, and says so in the
    // history with that generation.
    let id = unique("job");
    store.claim(&claim(&id, 2, "a", t, 60)).await.unwrap();
    store
        .finish(&update(&id, "a", Status::DeadLettered, 2, t))
        .await
        .unwrap();
    assert_eq!(store.reopen(&id, later).await.unwrap(), Some(3));
    let rec = store.get(&id).await.unwrap().unwrap();
    assert_eq!((rec.status, rec.attempt), (Status::Pending, 3));
    let last = rec.history.last().unwrap();
    assert_eq!(
        (last.status, last.attempt, last.by.as_str()),
        (Status::Pending, 3, "operator")
    );
    assert_eq!(
        store.reopen(&id, later).await.unwrap(),
        None,
        "not dead-lettered now"
    );
    assert_eq!(store.reopen("never-seen", later).await.unwrap(), None);
}

#[tokio::test]
async fn status_store_memory_and_dynamodb() {
    status_store_contract(&MemoryStatusStore::default()).await;
    let stack = Stack::create(&["ses"]).await;
    let store = DynamoDbStatusStore::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk),
        &stack.resources.status_table,
        Duration::from_secs(3600),
    );
    status_store_contract(&store).await;
}

async fn claim_with_suppression_contract(store: &dyn StatusStore, list: &dyn SuppressionList) {
    let t = now();
    list.suppress("blocked@example.org", "550 5.1.1", t)
        .await
        .unwrap();
    let id = unique("job");
    let mut req = claim(&id, 0, "a", t, 60);
    req.check_suppressed = vec![
        "ok@example.org".into(),
        "Blocked@Example.org".into(),
        "ok@example.org".into(),
        "Bea Blocked <BLOCKED@example.ORG>".into(),
    ];
    // GIVEN one suppressed recipient (twice: bare and with a display name) WHEN claimed
    // THEN refused naming it as given, nothing written
    assert_eq!(
        store.claim(&req).await.unwrap(),
        ClaimOutcome::Suppressed(vec![
            "Blocked@Example.org".into(),
            "Bea Blocked <BLOCKED@example.ORG>".into()
        ])
    );
    assert_eq!(store.get(&id).await.unwrap(), None);
    // THEN a claim without it succeeds
    req.check_suppressed = vec!["ok@example.org".into()];
    assert_eq!(store.claim(&req).await.unwrap(), ClaimOutcome::Claimed);
    // AND a duplicate outranks suppression
    store
        .finish(&update(&id, "a", Status::SentToProvider, 0, t))
        .await
        .unwrap();
    req.check_suppressed = vec!["blocked@example.org".into()];
    assert_eq!(
        store.claim(&req).await.unwrap(),
        ClaimOutcome::Duplicate(Status::SentToProvider)
    );
}

#[tokio::test]
async fn claims_check_the_suppression_list_in_the_same_write() {
    let memory_list = std::sync::Arc::new(MemorySuppressionList::default());
    let memory = MemoryStatusStore {
        suppression: Some(memory_list.clone()),
        ..MemoryStatusStore::default()
    };
    claim_with_suppression_contract(&memory, memory_list.as_ref()).await;
    let stack = Stack::create(&["ses"]).await;
    let client = aws_sdk_dynamodb::Client::new(&stack.sdk);
    let store = DynamoDbStatusStore::new(
        client.clone(),
        &stack.resources.status_table,
        Duration::from_secs(3600),
    )
    .with_suppression_table(&stack.resources.suppression_table);
    let list = DynamoDbSuppressionList::new(client, &stack.resources.suppression_table);
    claim_with_suppression_contract(&store, &list).await;
}

#[tokio::test]
async fn two_racing_claims_have_exactly_one_winner() {
    let stack = Stack::create(&["ses"]).await;
    let store = std::sync::Arc::new(DynamoDbStatusStore::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk),
        &stack.resources.status_table,
        Duration::from_secs(3600),
    ));
    for round in 0..5 {
        let id = format!("race-{round}");
        let t = now();
        let tasks: Vec<_> = (0..4)
            .map(|i| {
                let store = store.clone();
                let req = claim(&id, 0, &format!("owner-{i}"), t, 60);
                tokio::spawn(async move { store.claim(&req).await.unwrap() })
            })
            .collect();
        let mut claimed = 0;
        for task in tasks {
            match task.await.unwrap() {
                ClaimOutcome::Claimed => claimed += 1,
                ClaimOutcome::Busy { .. } => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        if courier_integration::atomic_conditional_writes() {
            assert_eq!(claimed, 1, "round {round}");
        } else {
            assert!(claimed >= 1, "round {round}: nobody won");
        }
    }
}

async fn suppression_contract(list: &dyn SuppressionList) {
    let t = now();
    list.suppress("Gone@Example.org", "550 5.1.1", t)
        .await
        .unwrap();
    let many: Vec<String> = (0..150).map(|i| format!("user{i}@example.org")).collect();
    let mut asked = many.clone();
    asked.push("gone@example.org".into());
    asked.push("GONE@example.org".into());
    asked.push("Gone Away <gone@EXAMPLE.org>".into());
    let found = list.suppressed(&asked, t).await.unwrap();
    assert_eq!(
        found,
        vec![
            "gone@example.org".to_owned(),
            "GONE@example.org".to_owned(),
            "Gone Away <gone@EXAMPLE.org>".to_owned()
        ]
    );
    // An IDN domain is one address in either form, written with a name or not.
    list.suppress("Kim <kim@bücher.example>", "complaint", t)
        .await
        .unwrap();
    assert_eq!(
        list.suppressed(&["kim@xn--bcher-kva.example".into()], t)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(list.suppressed(&[], t).await.unwrap().is_empty());
    // A soft entry counts until it expires, then no longer.
    let until = t + chrono::Duration::hours(1);
    list.suppress_until(
        "soft@example.org",
        "manual: mailbox migration",
        t,
        Some(until),
    )
    .await
    .unwrap();
    assert_eq!(
        list.suppressed(&["soft@example.org".into()], t)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        list.suppressed(
            &["soft@example.org".into()],
            until + chrono::Duration::seconds(1)
        )
        .await
        .unwrap()
        .is_empty()
    );
    // Listing pages through every entry; removing takes one out.
    let mut listed = Vec::new();
    let mut cursor = None;
    loop {
        let (page, next) = list.list(1, cursor).await.unwrap();
        listed.extend(page);
        match next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    let addresses: Vec<&str> = listed.iter().map(|e| e.address.as_str()).collect();
    assert!(
        addresses.contains(&"gone@example.org") && addresses.contains(&"soft@example.org"),
        "{addresses:?}"
    );
    let soft = listed
        .iter()
        .find(|e| e.address == "soft@example.org")
        .unwrap();
    assert_eq!(
        soft.expires_at.map(|t| t.timestamp()),
        Some(until.timestamp())
    );
    assert_eq!(soft.reason, "manual: mailbox migration");
    assert!(list.remove("Gone@example.org").await.unwrap());
    assert!(!list.remove("gone@example.org").await.unwrap());
    assert!(
        list.suppressed(&["gone@example.org".into()], t)
            .await
            .unwrap()
            .is_empty()
    );
    // Automatic soft suppressions never weaken an entry: not a hard one, not a longer soft one.
    let day = chrono::Duration::days(1);
    list.suppress("Hard@example.org", "550 5.1.1", t)
        .await
        .unwrap();
    assert!(
        !list
            .suppress_soft("hard@example.org", "soft: gave up", t, t + day)
            .await
            .unwrap()
    );
    assert_eq!(
        list.suppressed(&["hard@example.org".into()], t + day * 30)
            .await
            .unwrap()
            .len(),
        1,
        "the hard entry stays"
    );
    assert!(
        list.suppress_soft("Fresh@example.org", "soft: gave up", t, t + day * 2)
            .await
            .unwrap()
    );
    assert!(
        !list
            .suppress_soft("fresh@example.org", "soft: again", t, t + day)
            .await
            .unwrap(),
        "a shorter soft entry does not replace a longer one"
    );
    assert!(
        list.suppress_soft("fresh@example.org", "soft: later", t, t + day * 3)
            .await
            .unwrap(),
        "a longer one extends it"
    );
    let fresh = ["fresh@example.org".to_owned()];
    assert_eq!(list.suppressed(&fresh, t + day * 2).await.unwrap().len(), 1);
    assert!(
        list.suppressed(&fresh, t + day * 3 + chrono::Duration::seconds(1))
            .await
            .unwrap()
            .is_empty()
    );
    unsubscription_contract(list).await;
}

/// Unsubscriptions (one-click unsubscribe): per list apart from suppressions, global ones as
/// suppressions that never soften a hard entry, replays idempotent, listed and removable.
async fn unsubscription_contract(list: &dyn SuppressionList) {
    use courier_core::unsubscribe::Scope;
    let t = now();
    let news = Scope::List("news".into());
    // GIVEN ann unsubscribed from "news", written as the token names her
    assert!(list.unsubscribe("ann@example.org", &news, t).await.unwrap());
    // THEN a replay writes nothing
    assert!(!list.unsubscribe("ANN@example.org", &news, t).await.unwrap());
    // AND she is unsubscribed from "news" in any form, from no other list, and not suppressed
    let asked: Vec<String> = vec![
        "Ann <ann@EXAMPLE.org>".into(),
        "bob@example.org".into(),
        "ann@example.org".into(),
    ];
    assert_eq!(
        list.unsubscribed(&asked, "news").await.unwrap(),
        vec![asked[0].clone(), asked[2].clone()]
    );
    assert!(
        list.unsubscribed(&asked, "offers")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(list.unsubscribed(&[], "news").await.unwrap().is_empty());
    assert!(
        list.suppressed(&asked, t + chrono::Duration::days(3650))
            .await
            .unwrap()
            .is_empty()
    );
    // AND a list whose name looks like another's key prefix stays apart
    let odd = Scope::List("news:3".into());
    assert!(list.unsubscribe("bob@example.org", &odd, t).await.unwrap());
    assert!(list.unsubscribed(&asked, "news").await.unwrap().len() == 2);
    assert_eq!(
        list.unsubscribed(&asked, "news:3").await.unwrap(),
        vec!["bob@example.org".to_owned()]
    );
    // A global unsubscription is a suppression of every mail, for good...
    assert!(
        list.unsubscribe("Carl <carl@example.org>", &Scope::Global, t)
            .await
            .unwrap()
    );
    assert_eq!(
        list.suppressed(
            &["carl@example.org".into()],
            t + chrono::Duration::days(3650)
        )
        .await
        .unwrap()
        .len(),
        1
    );
    // ...that replaces a soft entry and never a hard one.
    list.suppress_until(
        "dora@example.org",
        "soft: gave up",
        t,
        Some(t + chrono::Duration::days(1)),
    )
    .await
    .unwrap();
    assert!(
        list.unsubscribe("dora@example.org", &Scope::Global, t)
            .await
            .unwrap()
    );
    list.suppress("eve@example.org", "550 5.1.1", t)
        .await
        .unwrap();
    assert!(
        !list
            .unsubscribe("eve@example.org", &Scope::Global, t)
            .await
            .unwrap()
    );
    // Listing names the list of each unsubscription; removal takes one list's entry only.
    let mut listed = Vec::new();
    let mut cursor = None;
    loop {
        let (page, next) = list.list(2, cursor).await.unwrap();
        listed.extend(page);
        match next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    let entry = |address: &str, l: Option<&str>| {
        listed
            .iter()
            .find(|e| e.address == address && e.list.as_deref() == l)
            .cloned()
            .unwrap_or_else(|| panic!("{address} {l:?} not in {listed:?}"))
    };
    assert_eq!(
        entry("ann@example.org", Some("news")).reason,
        "unsubscribed"
    );
    assert_eq!(
        entry("bob@example.org", Some("news:3")).reason,
        "unsubscribed"
    );
    let carl = entry("carl@example.org", None);
    assert_eq!(
        (carl.reason.as_str(), carl.expires_at),
        ("unsubscribed", None)
    );
    assert_eq!(entry("dora@example.org", None).expires_at, None);
    assert_eq!(entry("eve@example.org", None).reason, "550 5.1.1");
    assert!(
        list.remove_from_list("Ann@example.org", "news")
            .await
            .unwrap()
    );
    assert!(
        !list
            .remove_from_list("ann@example.org", "news")
            .await
            .unwrap()
    );
    assert!(list.unsubscribed(&asked, "news").await.unwrap().is_empty());
    assert!(
        !list
            .remove_from_list("carl@example.org", "news")
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn suppression_list_memory_and_dynamodb() {
    suppression_contract(&MemorySuppressionList::default()).await;
    let stack = Stack::create(&["ses"]).await;
    let list = DynamoDbSuppressionList::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk),
        &stack.resources.suppression_table,
    );
    suppression_contract(&list).await;
}

async fn breaker_store_contract(store: &dyn BreakerStore) {
    let t = now();
    assert_eq!(store.load("ses").await.unwrap(), None);
    let mut state = BreakerState::new(t, &BreakerConfig::default());
    state.version = 1;
    assert!(store.save("ses", &state, None).await.unwrap());
    assert!(
        !store.save("ses", &state, None).await.unwrap(),
        "a second create must conflict"
    );
    let mut next = state.clone();
    next.version = 2;
    next.failures = 3;
    assert!(store.save("ses", &next, Some(1)).await.unwrap());
    assert!(
        !store.save("ses", &next, Some(1)).await.unwrap(),
        "a stale version must conflict"
    );
    assert_eq!(store.load("ses").await.unwrap(), Some(next));
    assert_eq!(store.load("smtp").await.unwrap(), None);
}

#[tokio::test]
async fn breaker_store_and_poison_list_memory_and_dynamodb() {
    breaker_store_contract(&MemoryBreakerStore::default()).await;
    let stack = Stack::create(&["ses"]).await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&stack.sdk);
    let table = &stack.resources.control_table;
    breaker_store_contract(&DynamoDbBreakerStore::new(dynamodb.clone(), table)).await;
    let control = DynamoDbPoisonList::new(dynamodb, table, Duration::from_secs(60));
    assert!(!control.is_blocked("abc").await.unwrap());
    control
        .block("abc", "crashed the worker", now())
        .await
        .unwrap();
    assert!(
        control.is_blocked("abc").await.unwrap(),
        "block must invalidate the cache"
    );
    assert!(!control.is_blocked("abd").await.unwrap());
}

#[tokio::test]
async fn s3_templates_are_read_cached_and_refreshed() {
    let stack = Stack::create(&["ses"]).await;
    let s3 = aws_sdk_s3::Client::new(&stack.sdk);
    let put = |subject: &'static str| {
        s3.put_object()
            .bucket(&stack.resources.template_bucket)
            .key(S3TemplateStore::key("welcome"))
            .body(
                format!(r#"{{"subject": "{subject}", "text": "Hello {{{{ name }}}}"}}"#)
                    .into_bytes()
                    .into(),
            )
            .send()
    };
    put("v1").await.unwrap();
    let store = S3TemplateStore::new(
        s3.clone(),
        &stack.resources.template_bucket,
        Duration::from_millis(0),
    );
    let t = store.get("welcome").await.unwrap();
    assert_eq!(
        (t.subject.as_str(), t.text.as_deref()),
        ("v1", Some("Hello {{ name }}"))
    );
    put("v2").await.unwrap();
    assert_eq!(
        store.get("welcome").await.unwrap().subject,
        "v2",
        "a changed template is picked up"
    );
    assert_eq!(
        store.get("welcome").await.unwrap().subject,
        "v2",
        "an unchanged one stays"
    );
    assert!(matches!(
        store.get("missing").await,
        Err(TemplateError::NotFound(_))
    ));
    s3.put_object()
        .bucket(&stack.resources.template_bucket)
        .key(S3TemplateStore::key("broken"))
        .body(b"not json".to_vec().into())
        .send()
        .await
        .unwrap();
    assert!(matches!(
        store.get("broken").await,
        Err(TemplateError::Store(_))
    ));
}

#[tokio::test]
async fn sqs_scheduler_batches_and_waits_through_the_state_machine() {
    let stack = Stack::create(&["ses"]).await;
    let scheduler = SqsRetryScheduler::new(
        stack.sqs(),
        aws_sdk_sfn::Client::new(&stack.sdk),
        &stack.resources.queue_url,
        &stack.resources.delay_state_machine_arn,
    );
    let items: Vec<Requeue> = (0..12)
        .map(|i| Requeue {
            message_id: format!("m{i}"),
            body: format!("body-{i}"),
            delay_secs: 0,
        })
        .collect();
    let results = scheduler.enqueue(&items).await;
    assert_eq!(results.len(), 12);
    assert!(results.iter().all(Result::is_ok));
    let wait = Requeue {
        message_id: "w".into(),
        body: "waited".into(),
        delay_secs: 1,
    };
    scheduler.start_wait(&wait).await.unwrap();
    let mut bodies: Vec<String> = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while bodies.len() < 13 && std::time::Instant::now() < deadline {
        bodies.extend(
            stack
                .drain(&stack.resources.queue_url)
                .await
                .into_iter()
                .filter_map(|m| m.body),
        );
    }
    assert_eq!(bodies.len(), 13, "received only {bodies:?}");
    assert!(bodies.contains(&"waited".to_owned()));

    // Ten 300 KiB retries (3 MB, past SendMessageBatch's 1 MiB total) are all enqueued.
    let large: Vec<Requeue> = (0..10)
        .map(|i| Requeue {
            message_id: format!("big{i}"),
            body: format!("{i}{}", "x".repeat(300 * 1024)),
            delay_secs: 0,
        })
        .collect();
    let results = scheduler.enqueue(&large).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let mut received = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while received < 10 && std::time::Instant::now() < deadline {
        received += stack.drain(&stack.resources.queue_url).await.len();
    }
    assert_eq!(received, 10);

    // A broken queue URL fails every item of the batch, each reported.
    let broken = SqsRetryScheduler::new(
        stack.sqs(),
        aws_sdk_sfn::Client::new(&stack.sdk),
        format!("{}-nope", stack.resources.queue_url),
        "arn:aws:states:us-east-1:000000000000:stateMachine:nope",
    );
    let results = broken.enqueue(&items[..3]).await;
    assert_eq!(results.len(), 3);
    assert!(results.iter().all(Result::is_err));
    assert!(broken.start_wait(&wait).await.is_err());
}

#[tokio::test]
async fn dead_letters_land_on_their_queue_with_attributes() {
    let stack = Stack::create(&["ses"]).await;
    let sink = SqsDeadLetterSink::new(stack.sqs(), &stack.resources.dead_letter_queue_url);
    let t = now();
    let letter = DeadLetter {
        id: "m-1".into(),
        category: DeadLetterCategory::NeedsReview,
        reason: "content_rejected is not retried".into(),
        message_id: Some("m-1".into()),
        campaign_id: Some("spring".into()),
        trace_id: None,
        recipients: vec!["a@example.org".into()],
        provider: Some("smtp".into()),
        class: ErrorClass::ContentRejected,
        rule: "smtp.text.content-or-policy".into(),
        raw_code: Some("554 5.7.1".into()),
        raw_text: Some("554 5.7.1 rejected".into()),
        attempts: 1,
        history: vec![],
        first_failure_at: t,
        last_failure_at: t,
        fingerprint: "f".into(),
        payload: Some("{}".into()),
        payload_base64: None,
    };
    sink.put(&letter).await.unwrap();
    let got = stack.drain(&stack.resources.dead_letter_queue_url).await;
    assert_eq!(got.len(), 1);
    let back: DeadLetter = serde_json::from_str(got[0].body.as_deref().unwrap()).unwrap();
    assert_eq!(back, letter);
    let attrs = got[0].message_attributes.as_ref().unwrap();
    assert_eq!(
        attrs["courier-category"].string_value.as_deref(),
        Some("needs_review")
    );
    assert_eq!(
        attrs["courier-campaign"].string_value.as_deref(),
        Some("spring")
    );
}

fn email(from: &str, to: &str, id: &str) -> OutgoingEmail {
    OutgoingEmail {
        message_id: id.into(),
        campaign_id: "contract".into(),
        from: from.parse().unwrap(),
        to: vec![to.parse().unwrap()],
        cc: vec![],
        bcc: vec![],
        subject: "contract".into(),
        text: Some(format!("hello {id}")),
        html: None,
        headers: vec![],
        trace_id: None,
        attachments: Vec::new(),
    }
}

#[tokio::test]
async fn ses_mailer_sends_from_verified_and_classifies_unverified_senders() {
    let stack = Stack::create(&["ses"]).await;
    let mailer = SesMailer::new(aws_sdk_sesv2::Client::new(&stack.sdk), None);
    let receipt = mailer
        .send(&email(&stack.sender, "ann@example.org", "ses-1"))
        .await
        .unwrap();
    assert!(!receipt.provider_message_id.is_empty());
    let moto = require_env("COURIER_MOTO_URL");
    let data = courier_integration::moto_state(&moto).await;
    assert!(data.contains("ses-1"), "moto has no record of the message");
    let failure = mailer
        .send(&email(
            "nobody@unverified.example",
            "ann@example.org",
            "ses-2",
        ))
        .await
        .unwrap_err();
    assert_eq!(
        failure.verdict.class,
        ErrorClass::SenderConfig,
        "{:?}",
        failure.verdict
    );
    assert!(!failure.ambiguous);
}

/// `SesSendQuota`: the emulators do not implement SES v2 `GetAccount` (moto 5 has no route
/// for it; LocalStack sends SES v2 to moto), so on them the adapter must fail with an error,
/// which keeps the governor at its fallback rate. Its reading of the answer is checked against a
/// loopback server giving AWS's documented response (SES API reference, GetAccount).
#[tokio::test]
async fn ses_send_quota_reads_max_send_rate_and_fails_cleanly_where_get_account_is_missing() {
    let stack = Stack::create(&["ses"]).await;
    let on_emulator = SesSendQuota::new(aws_sdk_sesv2::Client::new(&stack.sdk));
    let error = on_emulator.max_send_rate().await.unwrap_err();
    assert!(error.operation.contains("GetAccount"), "{error}");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let answers = std::sync::Arc::new(std::sync::Mutex::new(vec![
        (
            200,
            r#"{"SendQuota":{"Max24HourSend":50000.0,"MaxSendRate":14.0,"SentLast24Hours":12.0},"SendingEnabled":true,"ProductionAccessEnabled":true,"EnforcementStatus":"HEALTHY"}"#,
        ),
        (200, r#"{"SendingEnabled":true}"#),
    ]));
    let served = answers.clone();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        while let Ok((mut tcp, _)) = listener.accept().await {
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match tcp.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            assert!(
                String::from_utf8_lossy(&head).starts_with("GET /v2/email/account "),
                "{}",
                String::from_utf8_lossy(&head)
            );
            let (status, body) = served.lock().unwrap().remove(0);
            let response = format!(
                "HTTP/1.1 {status} OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = tcp.write_all(response.as_bytes()).await;
        }
    });
    let client = aws_sdk_sesv2::Client::from_conf(
        aws_sdk_sesv2::config::Builder::from(&stack.sdk)
            .endpoint_url(format!("http://127.0.0.1:{port}"))
            .build(),
    );
    let quota = SesSendQuota::new(client);
    assert_eq!(quota.max_send_rate().await.unwrap(), 14.0);
    let error = quota.max_send_rate().await.unwrap_err();
    assert!(error.message.contains("no SendQuota"), "{error}");
    assert!(answers.lock().unwrap().is_empty());
}

/// `SecretsManagerSecretStore` on the emulator's Secrets Manager: the current text of a secret,
/// and an error naming the secret (never its value) when it is missing or binary.
#[tokio::test]
async fn secrets_manager_secret_store_reads_text_and_names_what_it_cannot() {
    let stack = Stack::create(&["ses"]).await;
    let client = aws_sdk_secretsmanager::Client::new(&stack.sdk);
    let name = unique("courier-smtp");
    let value = r#"{"username": "courier", "password": "s3cret-value"}"#;
    client
        .create_secret()
        .name(&name)
        .secret_string(value)
        .send()
        .await
        .unwrap();
    let store = courier_adapters::aws::SecretsManagerSecretStore::new(client.clone());
    assert_eq!(store.secret_string(&name).await.unwrap(), value);
    assert_eq!(
        courier_adapters::smtp_secret::credentials(&store.secret_string(&name).await.unwrap())
            .unwrap(),
        ("courier".to_owned(), "s3cret-value".to_owned())
    );
    let missing = store.secret_string("no-such-secret").await.unwrap_err();
    assert!(missing.message.contains("no-such-secret"), "{missing}");
    let binary = unique("courier-binary");
    client
        .create_secret()
        .name(&binary)
        .secret_binary(aws_sdk_secretsmanager::primitives::Blob::new(vec![
            0u8, 1, 2,
        ]))
        .send()
        .await
        .unwrap();
    let error = store.secret_string(&binary).await.unwrap_err();
    assert!(error.message.contains("binary"), "{error}");
    assert!(!error.to_string().contains("s3cret"));
}

fn smtp_mailer(port_var: &str, timeout: Duration) -> SmtpMailer {
    SmtpMailer::new(&SmtpOptions {
        host: require_env("COURIER_SMTP_HOST"),
        port: require_env(port_var).parse().unwrap(),
        security: SmtpSecurity::None,
        credentials: None,
        timeout,
        pool_size: 2,
        max_message_bytes: courier_adapters::smtp::DEFAULT_MAX_MESSAGE_BYTES,
    })
    .unwrap()
}

#[tokio::test]
async fn smtp_mailer_classifies_every_scripted_reply() {
    let mailer = smtp_mailer("COURIER_SMTP_PORT", Duration::from_secs(10));
    let ok = mailer
        .send(&email(
            "s@courier.test",
            &format!("{}@courier.test", unique("ok")),
            "smtp-1",
        ))
        .await
        .unwrap();
    assert!(ok.provider_message_id.contains("queued"), "{ok:?}");
    for (rcpt, class) in [
        ("unknown@courier.test", ErrorClass::RecipientPermanent),
        ("full@courier.test", ErrorClass::MailboxTemporary),
        ("insufficient@courier.test", ErrorClass::MailboxTemporary),
        ("greylist@courier.test", ErrorClass::MailboxTemporary),
        ("policy@courier.test", ErrorClass::ContentRejected),
        ("busy@courier.test", ErrorClass::Throttled),
    ] {
        let failure = mailer
            .send(&email("s@courier.test", rcpt, "smtp-x"))
            .await
            .unwrap_err();
        assert_eq!(
            failure.verdict.class, class,
            "{rcpt}: {:?}",
            failure.verdict
        );
        assert!(!failure.ambiguous);
        assert!(failure.verdict.raw_code.is_some(), "{rcpt}: raw code kept");
    }
    let dropped = smtp_mailer("COURIER_SMTP_DROP_PORT", Duration::from_secs(10))
        .send(&email("s@courier.test", "drop@courier.test", "smtp-d"))
        .await
        .unwrap_err();
    assert_eq!(
        dropped.verdict.class,
        ErrorClass::Network,
        "{:?}",
        dropped.verdict
    );
    // The session broke without a reply: the relay may have queued the message (here it broke
    // after RCPT, but the client cannot tell), so it is not resent blindly.
    assert!(dropped.ambiguous, "{:?}", dropped.verdict);
    // Nothing listening: nothing was sent, a plain retry.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let refused = SmtpMailer::new(&SmtpOptions {
        host: "127.0.0.1".into(),
        port: closed,
        security: SmtpSecurity::None,
        credentials: None,
        timeout: Duration::from_secs(5),
        pool_size: 1,
        max_message_bytes: courier_adapters::smtp::DEFAULT_MAX_MESSAGE_BYTES,
    })
    .unwrap()
    .send(&email("s@courier.test", "x@courier.test", "smtp-r"))
    .await
    .unwrap_err();
    assert_eq!(refused.verdict.class, ErrorClass::Network);
    assert!(!refused.ambiguous, "{:?}", refused.verdict);
    let slow = smtp_mailer("COURIER_SMTP_SLOW_PORT", Duration::from_secs(2))
        .send(&email("s@courier.test", "slow@courier.test", "smtp-s"))
        .await
        .unwrap_err();
    assert_eq!(slow.verdict.class, ErrorClass::Network);
    assert!(slow.ambiguous, "a timeout mid-exchange is ambiguous");
}

fn indexed_letter(i: usize, at: DateTime<Utc>) -> courier_core::letters::IndexedLetter {
    let category = if i.is_multiple_of(2) {
        DeadLetterCategory::NeedsReview
    } else {
        DeadLetterCategory::Poison
    };
    courier_core::letters::IndexedLetter {
        letter_id: format!("m{i}#abc#g0"),
        state: courier_core::letters::LetterState::Live,
        dead_lettered_at: at - chrono::Duration::minutes(i as i64),
        archive_key: None,
        record: DeadLetter {
            id: format!("m{i}#abc#g0"),
            category,
            reason: if i.is_multiple_of(3) {
                "554 5.7.1 rejected as SPAM".into()
            } else {
                "other".into()
            },
            message_id: Some(format!("m{i}")),
            campaign_id: Some(if i < 20 {
                "spring".into()
            } else {
                "autumn".into()
            }),
            trace_id: None,
            recipients: vec![],
            provider: Some("smtp".into()),
            class: ErrorClass::ContentRejected,
            rule: "r".into(),
            raw_code: None,
            raw_text: None,
            attempts: 1,
            history: vec![],
            first_failure_at: at,
            last_failure_at: at,
            fingerprint: "f".into(),
            payload: Some("{}".into()),
            payload_base64: None,
        },
        audit: vec![],
    }
}

async fn letter_index_contract(index: &dyn LetterIndex) {
    use courier_core::letters::{LetterFilter, LetterState};
    let t = now();
    for i in 0..30 {
        assert!(index.put_new(&indexed_letter(i, t)).await.unwrap());
    }
    assert!(
        !index.put_new(&indexed_letter(0, t)).await.unwrap(),
        "put_new is idempotent"
    );
    let got = index
        .get_many(&["m1#abc#g0".into(), "nope".into(), "m1#abc#g0".into()])
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].record.category, DeadLetterCategory::Poison);
    // Transitions are conditional and keep an audit trail.
    assert!(
        index
            .transition(
                "m1#abc#g0",
                LetterState::Live,
                LetterState::Archiving,
                Some("k1"),
                None
            )
            .await
            .unwrap()
    );
    assert!(
        !index
            .transition(
                "m1#abc#g0",
                LetterState::Live,
                LetterState::Archiving,
                Some("k2"),
                None
            )
            .await
            .unwrap()
    );
    assert!(
        index
            .transition(
                "m1#abc#g0",
                LetterState::Archiving,
                LetterState::Live,
                None,
                Some("reset by test")
            )
            .await
            .unwrap()
    );
    let l = &index.get_many(&["m1#abc#g0".into()]).await.unwrap()[0];
    assert_eq!(
        (l.state, l.archive_key.as_deref(), l.audit.len()),
        (LetterState::Live, None, 1)
    );
    // Searches, paged until the end: every match exactly once.
    let all_pages = |filter: LetterFilter| async move {
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let (page, next) = index.search(&filter, 7, cursor).await.unwrap();
            seen.extend(page.into_iter().map(|l| l.letter_id));
            match next {
                Some(n) => cursor = Some(n),
                None => return seen,
            }
        }
    };
    let mut everything = all_pages(LetterFilter::default()).await;
    everything.sort();
    everything.dedup();
    assert_eq!(everything.len(), 30);
    assert_eq!(
        all_pages(LetterFilter {
            category: Some(DeadLetterCategory::Poison),
            ..LetterFilter::default()
        })
        .await
        .len(),
        15
    );
    assert_eq!(
        all_pages(LetterFilter {
            campaign: Some("spring".into()),
            ..LetterFilter::default()
        })
        .await
        .len(),
        20
    );
    let spam = LetterFilter {
        campaign: Some("spring".into()),
        text: Some("spam".into()),
        ..LetterFilter::default()
    };
    assert_eq!(all_pages(spam).await.len(), 7);
    let recent = LetterFilter {
        category: Some(DeadLetterCategory::NeedsReview),
        since: Some(t - chrono::Duration::minutes(9)),
        ..LetterFilter::default()
    };
    assert_eq!(all_pages(recent).await.len(), 5, "m0, m2, m4, m6, m8");
    let newest = index
        .search(
            &LetterFilter {
                campaign: Some("autumn".into()),
                ..LetterFilter::default()
            },
            3,
            None,
        )
        .await
        .unwrap()
        .0;
    assert_eq!(newest[0].letter_id, "m20#abc#g0", "newest first");
}

#[tokio::test]
async fn letter_index_memory_and_dynamodb() {
    letter_index_contract(&MemoryLetterIndex::default()).await;
    let stack = Stack::create(&["ses"]).await;
    let index = courier_adapters::aws::DynamoDbLetterIndex::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk),
        &stack.resources.letter_index_table,
    );
    letter_index_contract(&index).await;
    let err = index
        .search(
            &courier_core::letters::LetterFilter::default(),
            5,
            Some("garbage".into()),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not a cursor"), "{err}");
    // Entries expire (the table's TTL on `expires_at`, epoch seconds) the archive's retention
    // plus a margin after the dead-lettering: never before the archived copy they point to.
    let dynamodb = aws_sdk_dynamodb::Client::new(&stack.sdk);
    let index = courier_adapters::aws::DynamoDbLetterIndex::new(
        dynamodb.clone(),
        &stack.resources.letter_index_table,
    )
    .outliving(10);
    let mut letter = indexed_letter(0, now());
    letter.letter_id = unique("expiring");
    assert!(index.put_new(&letter).await.unwrap());
    let item = dynamodb
        .get_item()
        .table_name(&stack.resources.letter_index_table)
        .key(
            "letter_id",
            aws_sdk_dynamodb::types::AttributeValue::S(letter.letter_id.clone()),
        )
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    let expires_at: i64 = item["expires_at"].as_n().unwrap().parse().unwrap();
    assert_eq!(
        expires_at,
        (letter.dead_lettered_at
            + chrono::Duration::days(10 + courier_adapters::aws::letters::INDEX_MARGIN_DAYS))
        .timestamp()
    );
}

async fn archive_store_contract(store: &dyn ArchiveStore) {
    let key = format!(
        "dead-letters/category=poison/dt=2026-11-30/{}.jsonl.gz",
        unique("run")
    );
    assert!(!store.exists(&key).await.unwrap());
    assert!(store.put_new(&key, b"one".to_vec()).await.unwrap());
    assert!(store.exists(&key).await.unwrap());
    assert!(
        !store.put_new(&key, b"two".to_vec()).await.unwrap(),
        "an object is never overwritten"
    );
}

#[tokio::test]
async fn archive_store_memory_and_s3() {
    archive_store_contract(&MemoryArchive::default()).await;
    let stack = Stack::create(&["ses"]).await;
    let s3 = aws_sdk_s3::Client::new(&stack.sdk);
    archive_store_contract(&courier_adapters::aws::S3ArchiveStore::new(
        s3.clone(),
        &stack.archive_bucket,
    ))
    .await;
}

async fn letter_queue_contract(queue: &dyn LetterQueue, push: impl AsyncFn(&str)) {
    for i in 0..3 {
        push(&format!("body-{i}")).await;
    }
    let mut got = Vec::new();
    for _ in 0..5 {
        got.extend(queue.receive(10, Duration::from_secs(30)).await.unwrap());
        if got.len() == 3 {
            break;
        }
    }
    assert_eq!(got.len(), 3);
    assert!(
        queue
            .receive(10, Duration::from_secs(30))
            .await
            .unwrap()
            .is_empty(),
        "received copies are hidden"
    );
    queue.hide(&got[0].receipt, Duration::ZERO).await.unwrap();
    let again = queue.receive(10, Duration::from_secs(30)).await.unwrap();
    assert_eq!(again.len(), 1, "a copy hidden for zero is visible again");
    assert_eq!(again[0].body, got[0].body);
    queue
        .delete(&[
            again[0].receipt.clone(),
            got[1].receipt.clone(),
            got[2].receipt.clone(),
        ])
        .await
        .unwrap();
    queue.hide(&again[0].receipt, Duration::ZERO).await.ok();
    assert!(
        queue
            .receive(10, Duration::from_secs(1))
            .await
            .unwrap()
            .is_empty(),
        "deleted"
    );
    assert!(got.iter().all(|l| l.sent_at.timestamp() > 0));
}

#[tokio::test]
async fn letter_queue_memory_and_sqs() {
    let clock: std::sync::Arc<dyn Clock> =
        std::sync::Arc::new(courier_adapters::clock::SystemClock);
    let memory = MemoryLetterQueue::new(clock);
    letter_queue_contract(&memory, async |b: &str| memory.push(b.to_owned())).await;
    let stack = Stack::create(&["ses"]).await;
    let sqs = stack.sqs();
    let queue = courier_adapters::aws::SqsLetterQueue::new(
        sqs.clone(),
        &stack.resources.dead_letter_queue_url,
    );
    let url = stack.resources.dead_letter_queue_url.clone();
    letter_queue_contract(&queue, async |b: &str| {
        sqs.send_message()
            .queue_url(&url)
            .message_body(b)
            .send()
            .await
            .unwrap();
    })
    .await;
}

/// A record's recipient timeline: (position, outcome, detail) each.
fn timeline(
    rec: &courier_core::ports::JobRecord,
) -> Vec<(
    usize,
    courier_core::recipients::RecipientStatus,
    Option<&str>,
)> {
    rec.recipient_log
        .iter()
        .map(|e| (e.recipient, e.status, e.detail.as_deref()))
        .collect()
}

/// A job's recipients: written with its send, then moved by changes computed at a version.
async fn recipients_contract(store: &dyn StatusStore) {
    use courier_core::recipients::{self, Recipient, RecipientStatus::*, Role};
    let t = now();
    let id = unique("rcpt");
    store.claim(&claim(&id, 0, "a", t, 60)).await.unwrap();
    let rcpt = |address: &str, role, status| Recipient {
        address: address.into(),
        role,
        status,
    };
    let roll = vec![
        rcpt("ann@example.org", Role::To, Sent),
        rcpt("bob@example.org", Role::Cc, Sent),
        rcpt("cy@example.org", Role::Bcc, Suppressed),
        rcpt("dee@example.org", Role::Bcc, BouncedPermanent),
    ];
    // GIVEN a send recorded with its recipients, one refused with a note of its own
    let mut sent = update(&id, "a", Status::SentToProvider, 0, t);
    sent.recipients = Some(roll.clone());
    sent.recipient_notes = vec![("dee@example.org".into(), "refused: 550 5.1.1".into())];
    store.finish(&sent).await.unwrap();
    let rec = store.get(&id).await.unwrap().unwrap();
    assert_eq!(rec.recipients, roll);
    assert_eq!(rec.recipients_version, 1);
    let logged = timeline(&rec);
    let detail = Some("a wrote sent_to_provider");
    assert_eq!(
        logged,
        vec![
            (0, Sent, detail),
            (1, Sent, detail),
            (2, Suppressed, detail),
            (3, BouncedPermanent, Some("refused: 550 5.1.1"))
        ]
    );
    assert!(rec.recipient_log.iter().all(|e| e.at == t));
    // WHEN a change computed at that version is written THEN it lands, once
    let change = recipients::apply(
        &rec.recipients,
        &rec.recipient_log,
        rec.recipients_version,
        &["Bob@Example.org".into()],
        Delivered,
        t,
        Some("delivered"),
    )
    .unwrap();
    assert!(store.update_recipients(&id, &change).await.unwrap());
    assert!(
        !store.update_recipients(&id, &change).await.unwrap(),
        "a change computed at a version the record has left is refused"
    );
    let rec = store.get(&id).await.unwrap().unwrap();
    let statuses: Vec<_> = rec.recipients.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        vec![Sent, Delivered, Suppressed, BouncedPermanent]
    );
    assert_eq!(rec.recipients_version, 2);
    assert_eq!(rec.recipient_log.len(), 5);
    assert_eq!(rec.recipient_log[4].recipient, 1);
    assert_eq!(rec.recipient_log[4].detail.as_deref(), Some("delivered"));
    // The job's own status is not the change's to make.
    assert_eq!(rec.status, Status::SentToProvider);
    // Two recipients in one change, the second without a timeline entry.
    let two = courier_core::recipients::RecipientChange {
        version: 2,
        set: vec![(0, BouncedPermanent), (1, Complained)],
        log: vec![courier_core::recipients::RecipientEntry {
            recipient: 0,
            status: BouncedPermanent,
            at: t,
            detail: None,
        }],
    };
    assert!(store.update_recipients(&id, &two).await.unwrap());
    let rec = store.get(&id).await.unwrap().unwrap();
    let statuses: Vec<_> = rec.recipients.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        vec![BouncedPermanent, Complained, Suppressed, BouncedPermanent]
    );
    assert_eq!(rec.recipient_log.len(), 6);
    assert_eq!(rec.recipient_log[5].detail, None);
    // No record, or one without recipients: nothing written.
    assert!(
        !store
            .update_recipients(&unique("none"), &two)
            .await
            .unwrap()
    );
    let bare = unique("bare");
    store.claim(&claim(&bare, 0, "a", t, 60)).await.unwrap();
    let mut sent = update(&bare, "a", Status::SentToProvider, 0, t);
    sent.provider_message_id = Some("ses-1".into());
    store.finish(&sent).await.unwrap();
    let first = courier_core::recipients::RecipientChange { version: 1, ..two };
    assert!(!store.update_recipients(&bare, &first).await.unwrap());
    assert!(
        store
            .get(&bare)
            .await
            .unwrap()
            .unwrap()
            .recipients
            .is_empty()
    );
    // A send recorded without recipients takes a list once, for its own generation and send.
    let fill = courier_core::recipients::RecipientFill {
        attempt: 0,
        provider_message_id: "ses-1".into(),
        list: roll[..3].to_vec(),
        at: t,
        detail: "from the event".into(),
    };
    let other_send = courier_core::recipients::RecipientFill {
        provider_message_id: "ses-0".into(),
        ..fill.clone()
    };
    let other_generation = courier_core::recipients::RecipientFill {
        attempt: 1,
        ..fill.clone()
    };
    for refused in [&other_send, &other_generation] {
        assert!(!store.fill_recipients(&bare, refused).await.unwrap());
    }
    assert!(!store.fill_recipients(&unique("none"), &fill).await.unwrap());
    // A job finished since (its send's outcome recorded whole) keeps its status without a list.
    let done = unique("done");
    store.claim(&claim(&done, 0, "a", t, 60)).await.unwrap();
    let mut sent_done = update(&done, "a", Status::SentToProvider, 0, t);
    sent_done.provider_message_id = Some("ses-1".into());
    store.finish(&sent_done).await.unwrap();
    let mut delivered = update(&done, "events", Status::Delivered, 0, t);
    delivered.provider_message_id = Some("ses-1".into());
    store.record(&delivered).await.unwrap();
    assert!(!store.fill_recipients(&done, &fill).await.unwrap());
    assert!(
        store
            .get(&done)
            .await
            .unwrap()
            .unwrap()
            .recipients
            .is_empty()
    );
    assert!(store.fill_recipients(&bare, &fill).await.unwrap());
    // SES's Send event's write ends the send's lease: the send function's late status write no
    // longer lands (it would replace the list filled since, and the outcomes moved on it).
    let slow = unique("slow");
    store.claim(&claim(&slow, 0, "a", t, 60)).await.unwrap();
    let mut by_ses = update(&slow, "events", Status::SentToProvider, 0, t);
    by_ses.provider_message_id = Some("ses-1".into());
    store.record(&by_ses).await.unwrap();
    let rec = store.get(&slow).await.unwrap().unwrap();
    assert_eq!((rec.lease_owner, rec.lease_until), (None, None));
    assert!(store.fill_recipients(&slow, &fill).await.unwrap());
    let mut late = update(&slow, "a", Status::SentToProvider, 0, t);
    late.recipients = Some(roll.clone());
    assert!(store.finish(&late).await.is_err());
    assert_eq!(
        store.get(&slow).await.unwrap().unwrap().recipients,
        roll[..3].to_vec()
    );
    let rec = store.get(&bare).await.unwrap().unwrap();
    assert_eq!(rec.recipients, roll[..3].to_vec());
    assert_eq!(rec.recipients_version, 1);
    let logged = timeline(&rec);
    let note = Some("from the event");
    assert_eq!(
        logged,
        vec![(0, Sent, note), (1, Sent, note), (2, Suppressed, note)]
    );
    assert_eq!(rec.status, Status::SentToProvider);
    // A list there already (the send function's own write, or an earlier fill) stays.
    let again = courier_core::recipients::RecipientFill {
        list: roll[..1].to_vec(),
        ..fill.clone()
    };
    assert!(!store.fill_recipients(&bare, &again).await.unwrap());
    assert_eq!(store.get(&bare).await.unwrap().unwrap().recipients.len(), 3);
    // And the filled list moves like any other.
    assert!(store.update_recipients(&bare, &first).await.unwrap());
    // The next generation's claim removes the list (the next send records its own, or SES's
    // event fills it); the timeline stays.
    let resend = courier_core::ports::Resend {
        message_id: bare.clone(),
        attempt: 0,
        bounced: "ses-1".into(),
        detail: "resent".into(),
        now: t,
        copy_due: t,
    };
    assert!(store.resend(&resend).await.unwrap());
    store.claim(&claim(&bare, 1, "b", t, 60)).await.unwrap();
    let rec = store.get(&bare).await.unwrap().unwrap();
    assert_eq!((rec.status, rec.attempt), (Status::Processing, 1));
    assert!(rec.recipients.is_empty());
    assert_eq!(rec.recipient_log.len(), 4);
    assert_eq!(rec.recipients_version, 2);
    // A change computed before that claim (at the version it kept) writes nothing.
    let stale = courier_core::recipients::RecipientChange {
        version: 2,
        ..first
    };
    assert!(!store.update_recipients(&bare, &stale).await.unwrap());
    let unchanged = store.get(&bare).await.unwrap().unwrap();
    assert!(unchanged.recipients.is_empty() && unchanged.recipients_version == 2);
}

#[tokio::test]
async fn recipients_memory_and_dynamodb() {
    recipients_contract(&MemoryStatusStore::default()).await;
    let stack = Stack::create(&["ses"]).await;
    let store = DynamoDbStatusStore::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk),
        &stack.resources.status_table,
        Duration::from_secs(3600),
    );
    recipients_contract(&store).await;
}

/// The largest record a job can make: 50 recipients of 254 characters, every timeline full with
/// details at their cut, the kept payload at its limit, an id of 256 characters. Written on the
/// emulator's table (DynamoDB Local refuses items over 400 KB) and measured as DynamoDB counts.
#[tokio::test]
async fn a_record_at_fifty_recipients_stays_within_one_dynamodb_item() {
    use courier_core::recipients::{self, LOG_PER_RECIPIENT, RecipientStatus::*};
    let stack = Stack::create(&["ses"]).await;
    let client = aws_sdk_dynamodb::Client::new(&stack.sdk);
    let table = &stack.resources.status_table;
    let store = DynamoDbStatusStore::new(client.clone(), table, Duration::from_secs(3600));
    let size = |id: String| {
        let client = client.clone();
        async move {
            let item = client
                .get_item()
                .table_name(table)
                .key("message_id", aws_sdk_dynamodb::types::AttributeValue::S(id))
                .consistent_read(true)
                .send()
                .await
                .unwrap()
                .item
                .unwrap();
            courier_adapters::aws::item_size(&item)
        }
    };
    // An address of 254 characters: a 64-character local part, a 189-character domain.
    let long = |i: usize| {
        format!(
            "{i:02}{}@{}.{}.{}.org",
            "a".repeat(62),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(57)
        )
    };
    assert_eq!(long(7).len(), 254);
    let t = now();
    let mut measured = Vec::new();
    // Every recipient through the longest way its outcomes can go, each event one change.
    let longest = [
        BouncedTransient,
        Sent,
        BouncedTransient,
        Sent,
        Delivered,
        Complained,
    ];
    for (name, address, payload, path) in [
        (
            "typical: 50 recipients, sent then delivered, no kept payload",
            false,
            0,
            &[Delivered][..],
        ),
        (
            "largest: 50 x 254 characters, full timelines, kept payload at its limit",
            true,
            courier_send::MAX_KEPT_PAYLOAD,
            &longest[..],
        ),
    ] {
        let id = if address {
            format!("{}{}", unique("big"), "i".repeat(200))
        } else {
            unique("typical")
        };
        let to: Vec<String> = (0..50)
            .map(|i| {
                if address {
                    long(i)
                } else {
                    format!("reader{i}@example.org")
                }
            })
            .collect();
        let job: courier_core::job::EmailJob = serde_json::from_value(serde_json::json!({
            "version": 1, "message_id": id, "campaign_id": "c", "from": "shop@example.com",
            "to": to, "content": {"subject": "s", "text": "t"}
        }))
        .unwrap();
        let mut with_body = claim(&id, 0, "a", t, 60);
        with_body.payload = (payload > 0).then(|| "p".repeat(payload));
        store.claim(&with_body).await.unwrap();
        let mut sent = update(&id, "a", Status::SentToProvider, 0, t);
        sent.recipients = Some(recipients::roll(&job, Sent, &[]));
        store.finish(&sent).await.unwrap();
        let detail = "x".repeat(recipients::DETAIL_CHARS * 5);
        for to in path.iter().copied() {
            let rec = store.get(&id).await.unwrap().unwrap();
            let change = recipients::apply(
                &rec.recipients,
                &rec.recipient_log,
                rec.recipients_version,
                &rec.recipients
                    .iter()
                    .map(|r| r.address.clone())
                    .collect::<Vec<_>>(),
                to,
                t,
                Some(&detail),
            )
            .unwrap();
            assert!(store.update_recipients(&id, &change).await.unwrap());
        }
        let rec = store.get(&id).await.unwrap().unwrap();
        assert_eq!(rec.recipients.len(), 50);
        let last = path[path.len() - 1];
        assert!(rec.recipients.iter().all(|r| r.status == last));
        if path.len() == longest.len() {
            assert_eq!(rec.recipient_log.len(), 50 * LOG_PER_RECIPIENT);
        }
        let bytes = size(id).await;
        eprintln!(
            "status record, {name}: {bytes} bytes ({} of them the kept payload); DynamoDB's limit 409600",
            payload
        );
        measured.push(bytes);
    }
    assert!(measured.iter().all(|b| *b < 400 * 1024), "{measured:?}");
}

/// Whether `id` is in the sweeper's index under `state` with its key before `before` (read
/// whole: other tests' jobs share the table).
async fn listed(
    store: &dyn StatusStore,
    state: OpenState,
    id: &str,
    before: DateTime<Utc>,
) -> bool {
    store
        .open_before(state, before, 100_000)
        .await
        .unwrap()
        .iter()
        .any(|r| r.message_id == id)
}

/// [`listed`] as waiting for a copy due before `before`.
async fn waiting(store: &dyn StatusStore, id: &str, before: DateTime<Utc>) -> bool {
    listed(store, OpenState::Waiting, id, before).await
}

/// A job that waits for its copy (`deferred`, `unknown`) is in the sweeper's waiting index by
/// when the copy is due, whoever wrote the status; a claim takes it off; the sweeper flags one
/// whose copy never came, once, and the late copy still claims it.
async fn waiting_index_contract(store: &dyn StatusStore) {
    let t = now();
    let after = |d: DateTime<Utc>| d + chrono::Duration::seconds(1);

    // A retry: the send function's `deferred` names when the copy is due.
    let id = unique("job");
    store.claim(&claim(&id, 0, "a", t, 60)).await.unwrap();
    let due = t + chrono::Duration::seconds(90);
    let deferred = StatusUpdate {
        copy_due: Some(due),
        ..update(&id, "a", Status::Deferred, 1, t)
    };
    store.finish(&deferred).await.unwrap();
    let rec = store.get(&id).await.unwrap().unwrap();
    assert_eq!((rec.status, rec.copy_due), (Status::Deferred, Some(due)));
    assert!(!waiting(store, &id, due).await, "not before its due time");
    assert!(waiting(store, &id, after(due)).await);

    // Never came back: flagged once, the status stays, off the index.
    let found: Vec<JobRecord> = store
        .open_before(OpenState::Waiting, after(due), 100_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.message_id == id)
        .collect();
    // What the index gives the sweeper names the due time (its log and the history say it).
    assert_eq!(found[0].copy_due, Some(due));
    let swept_at = due + chrono::Duration::hours(2);
    assert!(
        store
            .sweep(&found[0], SweepMark::CopyOverdue, swept_at)
            .await
            .unwrap()
    );
    assert!(
        !store
            .sweep(&found[0], SweepMark::CopyOverdue, swept_at)
            .await
            .unwrap()
    );
    let rec = store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        (rec.status, rec.attempt, rec.swept_at),
        (Status::Deferred, 1, Some(swept_at))
    );
    let last = rec.history.last().unwrap();
    assert_eq!(
        (last.by.as_str(), last.status),
        ("sweeper", Status::Deferred)
    );
    assert!(
        last.detail.as_deref().unwrap().contains(&due.to_rfc3339()),
        "{last:?}"
    );
    assert!(!waiting(store, &id, after(swept_at)).await);
    // Listed as overdue from the flag on (for `courierctl requeue --overdue`).
    assert!(!listed(store, OpenState::Overdue, &id, swept_at).await);
    assert!(listed(store, OpenState::Overdue, &id, after(swept_at)).await);
    // An operator puts the copy back (`courierctl requeue`): waiting again, the flag cleared.
    let put_back = HistoryEntry {
        at: swept_at,
        status: Status::Deferred,
        attempt: 1,
        by: "operator".into(),
        detail: Some("its lost copy put back".into()),
    };
    assert!(store.rewait(&id, &put_back, swept_at).await.unwrap());
    let rec = store.get(&id).await.unwrap().unwrap();
    assert_eq!((rec.swept_at, rec.copy_due), (None, Some(swept_at)));
    assert_eq!(rec.history.last().unwrap().by, "operator");
    assert!(waiting(store, &id, after(swept_at)).await);
    assert!(!listed(store, OpenState::Overdue, &id, after(swept_at)).await);
    // The late copy claims it as ever; the claim clears the flag and the due time.
    assert_eq!(
        store
            .claim(&claim(&id, 1, "b", swept_at, 60))
            .await
            .unwrap(),
        ClaimOutcome::Claimed
    );
    let rec = store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        (rec.status, rec.swept_at, rec.copy_due),
        (Status::Processing, None, None)
    );
    assert!(!waiting(store, &id, t + chrono::Duration::days(400)).await);
    // Nor does a put-back once it moved on.
    assert!(!store.rewait(&id, &put_back, swept_at).await.unwrap());
    // A sweep of the record as it was found changes nothing now.
    assert!(
        !store
            .sweep(&found[0], SweepMark::CopyOverdue, after(swept_at))
            .await
            .unwrap()
    );

    // A released lease (`deferred` with no due time): due back by SQS's redelivery bound.
    let released = unique("job");
    store.claim(&claim(&released, 0, "a", t, 60)).await.unwrap();
    store
        .finish(&update(&released, "a", Status::Deferred, 0, t))
        .await
        .unwrap();
    assert_eq!(
        store.get(&released).await.unwrap().unwrap().copy_due,
        Some(t + REDELIVERY_BOUND)
    );
    assert!(!waiting(store, &released, t + REDELIVERY_BOUND).await);
    assert!(waiting(store, &released, after(t + REDELIVERY_BOUND)).await);

    // A claim that finds the lease expired mid-send: `unknown` until the grace window closes.
    let ambiguous = unique("job");
    store.claim(&claim(&ambiguous, 0, "a", t, 1)).await.unwrap();
    let outcome = store
        .claim(&claim(
            &ambiguous,
            0,
            "b",
            t + chrono::Duration::seconds(5),
            60,
        ))
        .await
        .unwrap();
    let ClaimOutcome::Ambiguous { resolve_at } = outcome else {
        panic!("{outcome:?}");
    };
    let rec = store.get(&ambiguous).await.unwrap().unwrap();
    assert_eq!(
        (rec.status, rec.copy_due),
        (Status::Unknown, Some(resolve_at))
    );
    assert!(!waiting(store, &ambiguous, resolve_at).await);
    assert!(waiting(store, &ambiguous, after(resolve_at)).await);
    // Flagged, then SES's evidence ends the wait (and the flag).
    let found: Vec<JobRecord> = store
        .open_before(OpenState::Waiting, after(resolve_at), 100_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.message_id == ambiguous)
        .collect();
    assert!(
        store
            .sweep(&found[0], SweepMark::CopyOverdue, after(resolve_at))
            .await
            .unwrap()
    );
    store
        .record(&update(
            &ambiguous,
            "events",
            Status::SentToProvider,
            0,
            t + chrono::Duration::seconds(10),
        ))
        .await
        .unwrap();
    let rec = store.get(&ambiguous).await.unwrap().unwrap();
    assert_eq!(
        (rec.status, rec.copy_due, rec.swept_at),
        (Status::SentToProvider, None, None)
    );
    let far = t + chrono::Duration::days(400);
    assert!(!listed(store, OpenState::Overdue, &ambiguous, far).await);
    assert!(!waiting(store, &ambiguous, t + chrono::Duration::days(400)).await);

    // A part resent to some recipients (a job with no record yet): its record waits for the
    // copy, written once, with the body, trace and facts to put it back from.
    let part = unique("part");
    let due = t + chrono::Duration::seconds(300);
    let expected = Expected {
        message_id: part.clone(),
        attempt: 2,
        detail: "resend of some recipients of order-1".into(),
        now: t,
        copy_due: due,
        payload: Some(format!("{{\"body\":\"{part}\"}}")),
        trace_id: Some("1-5759e988-bd862e3fe1be46a994272793".into()),
        facts: JobFacts {
            campaign_id: Some("receipts".into()),
            metadata: [("order".to_owned(), "1".to_owned())].into(),
        },
    };
    assert!(store.expect(&expected).await.unwrap());
    let rec = store.get(&part).await.unwrap().unwrap();
    assert_eq!(
        (rec.status, rec.attempt, rec.copy_due),
        (Status::Deferred, 2, Some(due))
    );
    assert_eq!(rec.payload, expected.payload);
    assert_eq!(rec.trace_id, expected.trace_id);
    assert_eq!(rec.facts, expected.facts);
    assert_eq!(rec.history.len(), 1);
    assert_eq!(
        (rec.history[0].by.as_str(), rec.history[0].detail.as_deref()),
        ("events", Some(expected.detail.as_str()))
    );
    assert!(!waiting(store, &part, due).await);
    assert!(waiting(store, &part, after(due)).await);
    // Written again (a redelivered event): nothing changes.
    let again = Expected {
        now: t + chrono::Duration::seconds(1),
        ..expected.clone()
    };
    assert!(!store.expect(&again).await.unwrap());
    assert_eq!(store.get(&part).await.unwrap().unwrap().history.len(), 1);
    // An older copy is stale; the copy claims it; after that the record is never reset.
    assert_eq!(
        store.claim(&claim(&part, 1, "b", t, 60)).await.unwrap(),
        ClaimOutcome::Stale { current_attempt: 2 }
    );
    assert_eq!(
        store.claim(&claim(&part, 2, "b", t, 60)).await.unwrap(),
        ClaimOutcome::Claimed
    );
    assert!(!store.expect(&again).await.unwrap());
    let rec = store.get(&part).await.unwrap().unwrap();
    assert_eq!((rec.status, rec.copy_due), (Status::Processing, None));
    assert!(!waiting(store, &part, far).await);

    // A copy dead-lettered before its claim (a blocklisted payload, a sender the stack no
    // longer allows): the record waiting for it says `dead_lettered`, once, off the waiting
    // index, its outcome marked for publishing; a record that moved on, or none, is left.
    let dead = unique("abandoned");
    store.claim(&claim(&dead, 0, "a", t, 60)).await.unwrap();
    let deferred = StatusUpdate {
        copy_due: Some(due),
        ..update(&dead, "a", Status::Deferred, 1, t)
    };
    store.finish(&deferred).await.unwrap();
    let abandon = |id: &str, attempt| StatusUpdate {
        provider: None,
        ..update(id, "send", Status::DeadLettered, attempt, t)
    };
    assert!(
        !store.abandon(&abandon(&dead, 0)).await.unwrap(),
        "another generation's copy"
    );
    assert!(store.abandon(&abandon(&dead, 1)).await.unwrap());
    let rec = store.get(&dead).await.unwrap().unwrap();
    assert_eq!(
        (rec.status, rec.attempt, rec.copy_due),
        (Status::DeadLettered, 1, None)
    );
    assert_eq!(
        rec.outbox.map(|o| (o.status, o.attempt)),
        Some((Status::DeadLettered, 1))
    );
    let last = rec.history.last().unwrap();
    assert_eq!(
        (last.by.as_str(), last.detail.as_deref()),
        ("send", Some("send wrote dead_lettered"))
    );
    assert!(!waiting(store, &dead, far).await);
    assert!(!store.abandon(&abandon(&dead, 1)).await.unwrap(), "once");
    // Replayed (`pending` at the next generation) and its copy dead-lettered again.
    assert_eq!(store.reopen(&dead, t).await.unwrap(), Some(2));
    assert!(store.abandon(&abandon(&dead, 2)).await.unwrap());
    assert_eq!(
        store.get(&dead).await.unwrap().unwrap().status,
        Status::DeadLettered
    );
    // Claimed by its copy meanwhile (processing, leased): left as it is. (No write leaves a
    // lease on a `deferred` or `pending` record; the condition's lease clause is a guard.)
    assert!(!store.abandon(&abandon(&part, 2)).await.unwrap());
    assert_eq!(
        store.get(&part).await.unwrap().unwrap().status,
        Status::Processing
    );
    // A first copy has no record: none is written.
    let fresh = unique("fresh");
    assert!(!store.abandon(&abandon(&fresh, 0)).await.unwrap());
    assert!(store.get(&fresh).await.unwrap().is_none());
}

/// History, the kept payload, transient-bounce resends and the sweeper's open-job index.
async fn status_lifecycle_contract(store: &dyn StatusStore) {
    let t = now();
    let id = unique("job");
    let mut with_body = claim(&id, 0, "a", t, 60);
    with_body.payload = Some(format!("{{\"body\":\"{id}\"}}"));
    store.claim(&with_body).await.unwrap();
    store
        .finish(&update(&id, "a", Status::SentToProvider, 0, t))
        .await
        .unwrap();
    let rec = store.get(&id).await.unwrap().unwrap();
    assert_eq!(
        rec.payload.as_deref(),
        Some(format!("{{\"body\":\"{id}\"}}").as_str())
    );
    let steps: Vec<(Status, &str)> = rec
        .history
        .iter()
        .map(|h| (h.status, h.by.as_str()))
        .collect();
    assert_eq!(
        steps,
        vec![(Status::Processing, "send"), (Status::SentToProvider, "a")]
    );
    assert_eq!(
        rec.history[1].detail.as_deref(),
        Some("a wrote sent_to_provider")
    );
    assert_eq!(rec.history[1].at, t);

    // Sent through SES and silent: the sweeper's index has it once it is old enough.
    let later = t + chrono::Duration::seconds(2);
    let found = store
        .open_before(OpenState::AwaitingOutcome, later, 100)
        .await
        .unwrap();
    let mine: Vec<&JobRecord> = found.iter().filter(|r| r.message_id == id).collect();
    assert_eq!(mine.len(), 1, "{found:?}");
    assert!(
        !store
            .open_before(OpenState::AwaitingOutcome, t, 100)
            .await
            .unwrap()
            .iter()
            .any(|r| r.message_id == id)
    );

    // A transient bounce: resend as generation 1, once.
    store
        .record(&update(&id, "events", Status::BouncedTransient, 0, later))
        .await
        .unwrap();
    let resend = Resend {
        message_id: id.clone(),
        attempt: 0,
        bounced: "pmid".into(),
        detail: "mailbox_temporary (mailbox-full); retry in 600 s".into(),
        now: later,
        copy_due: later + chrono::Duration::seconds(600),
    };
    assert!(store.resend(&resend).await.unwrap());
    assert!(
        !store.resend(&resend).await.unwrap(),
        "a second resend of generation 0"
    );
    let rec = store.get(&id).await.unwrap().unwrap();
    assert_eq!((rec.status, rec.attempt), (Status::Deferred, 1));
    assert_eq!(rec.resend_of.as_deref(), Some("pmid"));
    assert_eq!(rec.history.len(), 4);
    // Deferred waits for the resend's copy: in the waiting index by when that copy is due.
    assert_eq!(rec.copy_due, Some(resend.copy_due));
    assert!(!waiting(store, &id, resend.copy_due).await);
    assert!(waiting(store, &id, resend.copy_due + chrono::Duration::seconds(1)).await);
    // Deferred is not open: the sweeper no longer sees it.
    assert!(
        !store
            .open_before(
                OpenState::AwaitingOutcome,
                later + chrono::Duration::seconds(5),
                100
            )
            .await
            .unwrap()
            .iter()
            .any(|r| r.message_id == id)
    );
    // The resent copy claims generation 1.
    assert_eq!(
        store.claim(&claim(&id, 1, "b", later, 60)).await.unwrap(),
        ClaimOutcome::Claimed
    );
    assert_eq!(store.get(&id).await.unwrap().unwrap().copy_due, None);
    assert!(!waiting(store, &id, later + chrono::Duration::days(400)).await);

    // Stuck in processing long past the lease: swept to unknown, once.
    let stuck = unique("job");
    store.claim(&claim(&stuck, 0, "dead", t, 1)).await.unwrap();
    let much_later = t + chrono::Duration::seconds(30);
    let found: Vec<JobRecord> = store
        .open_before(OpenState::Processing, much_later, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.message_id == stuck)
        .collect();
    assert_eq!(found.len(), 1);
    assert!(
        store
            .sweep(&found[0], SweepMark::LeaseExpired, much_later)
            .await
            .unwrap()
    );
    assert!(
        !store
            .sweep(&found[0], SweepMark::LeaseExpired, much_later)
            .await
            .unwrap()
    );
    let rec = store.get(&stuck).await.unwrap().unwrap();
    assert_eq!(rec.status, Status::Unknown);
    assert_eq!(rec.history.last().unwrap().by, "sweeper");
    // Unknown, waiting for the dead worker's copy: due by SQS's longest visibility timeout.
    assert_eq!(rec.copy_due, Some(much_later + REDELIVERY_BOUND));
    assert!(!waiting(store, &stuck, much_later + REDELIVERY_BOUND).await);
    assert!(
        waiting(
            store,
            &stuck,
            much_later + REDELIVERY_BOUND + chrono::Duration::seconds(1)
        )
        .await
    );
    assert!(
        !store
            .open_before(OpenState::Processing, much_later, 1000)
            .await
            .unwrap()
            .iter()
            .any(|r| r.message_id == stuck)
    );

    // Sent and silent: flagged, status unchanged, off the index.
    let silent = unique("job");
    store.claim(&claim(&silent, 0, "a", t, 60)).await.unwrap();
    store
        .finish(&update(&silent, "a", Status::SentToProvider, 0, t))
        .await
        .unwrap();
    let found: Vec<JobRecord> = store
        .open_before(OpenState::AwaitingOutcome, much_later, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.message_id == silent)
        .collect();
    assert!(
        store
            .sweep(&found[0], SweepMark::NoOutcome, much_later)
            .await
            .unwrap()
    );
    let rec = store.get(&silent).await.unwrap().unwrap();
    assert_eq!(rec.status, Status::SentToProvider);
    assert_eq!(rec.swept_at, Some(much_later));
    assert!(
        !store
            .open_before(OpenState::AwaitingOutcome, much_later, 1000)
            .await
            .unwrap()
            .iter()
            .any(|r| r.message_id == silent)
    );
    // A sweep of a record that moved on meanwhile does nothing.
    let moved = unique("job");
    store.claim(&claim(&moved, 0, "a", t, 1)).await.unwrap();
    let snapshot = store.get(&moved).await.unwrap().unwrap();
    store
        .finish(&update(&moved, "a", Status::SentToProvider, 0, later))
        .await
        .unwrap();
    assert!(
        !store
            .sweep(&snapshot, SweepMark::LeaseExpired, much_later)
            .await
            .unwrap()
    );
    assert_eq!(
        store.get(&moved).await.unwrap().unwrap().status,
        Status::SentToProvider
    );
}

/// The fallback correlation (an event without Courier's message id finds its job by SES's
/// message id, through the sparse index) and the timeline notes (entries without a transition).
async fn provider_id_and_notes_contract(store: &dyn StatusStore) {
    let t = now();
    let id = unique("job");
    let ses_id = unique("ses-message");
    assert_eq!(
        store.find_by_provider_message_id(&ses_id).await.unwrap(),
        None
    );
    store.claim(&claim(&id, 0, "a", t, 60)).await.unwrap();
    let mut sent = update(&id, "a", Status::SentToProvider, 0, t);
    sent.provider_message_id = Some(ses_id.clone());
    store.finish(&sent).await.unwrap();
    // The index is eventually consistent: a recorded send is found within moments.
    let mut found = None;
    for _ in 0..50 {
        found = store.find_by_provider_message_id(&ses_id).await.unwrap();
        if found.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(found, Some(id.clone()));
    // A record written by provider evidence keeps the provider message id it already has...
    let mut late = update(&id, "events", Status::Delivered, 0, t);
    late.provider_message_id = Some("another-ses-message".into());
    store.record(&late).await.unwrap();
    let rec = store.get(&id).await.unwrap().unwrap();
    assert_eq!(rec.provider_message_id.as_deref(), Some(ses_id.as_str()));
    // ...and sets it where there was none (an ambiguous send resolved by a Send event).
    let other = unique("job");
    let other_ses = unique("ses-message");
    let mut evidence = update(&other, "events", Status::SentToProvider, 0, t);
    evidence.provider_message_id = Some(other_ses.clone());
    store.record(&evidence).await.unwrap();
    assert_eq!(
        store
            .get(&other)
            .await
            .unwrap()
            .unwrap()
            .provider_message_id,
        Some(other_ses)
    );
    // A note is appended while the status and generation are as given, and changes nothing else.
    let before = store.get(&id).await.unwrap().unwrap();
    let entry = HistoryEntry {
        at: t + chrono::Duration::seconds(5),
        status: Status::Delivered,
        attempt: 0,
        by: "events".into(),
        detail: Some("delivery delayed".into()),
    };
    assert!(store.note(&id, &entry).await.unwrap());
    let after = store.get(&id).await.unwrap().unwrap();
    assert_eq!(after.history.len(), before.history.len() + 1);
    assert_eq!(after.history.last(), Some(&entry));
    assert_eq!(
        (after.status, after.attempt, after.updated_at),
        (before.status, before.attempt, before.updated_at)
    );
    // Not when the status moved on, nor on an absent job.
    let stale = HistoryEntry {
        status: Status::SentToProvider,
        ..entry.clone()
    };
    assert!(!store.note(&id, &stale).await.unwrap());
    assert!(!store.note(&unique("absent"), &entry).await.unwrap());
    assert_eq!(
        store.get(&id).await.unwrap().unwrap().history.len(),
        after.history.len()
    );
}

#[tokio::test]
async fn provider_id_lookup_and_notes_memory_and_dynamodb() {
    provider_id_and_notes_contract(&MemoryStatusStore::default()).await;
    let stack = Stack::create(&["ses"]).await;
    let store = DynamoDbStatusStore::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk),
        &stack.resources.status_table,
        Duration::from_secs(3600),
    );
    provider_id_and_notes_contract(&store).await;
}

#[tokio::test]
async fn status_lifecycle_memory_and_dynamodb() {
    status_lifecycle_contract(&MemoryStatusStore::default()).await;
    let stack = Stack::create(&["ses"]).await;
    let store = DynamoDbStatusStore::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk),
        &stack.resources.status_table,
        Duration::from_secs(3600),
    );
    status_lifecycle_contract(&store).await;
}

#[tokio::test]
async fn waiting_index_memory_and_dynamodb() {
    waiting_index_contract(&MemoryStatusStore::default()).await;
    let stack = Stack::create(&["ses"]).await;
    let store = DynamoDbStatusStore::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk),
        &stack.resources.status_table,
        Duration::from_secs(3600),
    );
    waiting_index_contract(&store).await;
}

async fn sightings_and_reputation_contract(
    sightings: &dyn Sightings,
    rep: &dyn ReputationStore,
    ledger: &dyn EventLedger,
) {
    let t = now();
    let code = unique("smtp:599 9.9.9");
    assert!(sightings.first_sighting(&code, t).await.unwrap());
    assert!(!sightings.first_sighting(&code, t).await.unwrap());
    // An event counts once while its key is kept; an expired key (not yet deleted by TTL) is new.
    let key = unique("ses-id#bounce#abc");
    let hour = chrono::Duration::hours(1);
    assert!(ledger.first_entry(&key, t, t + hour).await.unwrap());
    assert!(!ledger.first_entry(&key, t, t + hour).await.unwrap());
    assert!(
        !ledger
            .first_entry(&key, t + hour - chrono::Duration::seconds(5), t + hour * 2)
            .await
            .unwrap()
    );
    assert!(
        ledger
            .first_entry(&key, t + hour + chrono::Duration::seconds(5), t + hour * 3)
            .await
            .unwrap()
    );
    assert!(
        ledger
            .first_entry(&unique("other"), t, t + hour)
            .await
            .unwrap()
    );
    let domain = format!("{}.example", unique("d"));
    let hour = courier_core::reputation::bucket_of(t);
    let earlier = hour - chrono::Duration::hours(3);
    let c = |sent, bounced, complained| courier_core::reputation::ReputationCounts {
        sent,
        delivered: sent - bounced,
        bounced,
        complained,
    };
    rep.add(&domain, earlier, &c(100, 10, 0)).await.unwrap();
    rep.add(&domain, hour, &c(50, 1, 1)).await.unwrap();
    rep.add(&domain, hour, &c(50, 1, 0)).await.unwrap();
    assert_eq!(rep.window(&domain, hour).await.unwrap(), c(100, 2, 1));
    assert_eq!(rep.window(&domain, earlier).await.unwrap(), c(200, 12, 1));
    assert_eq!(
        rep.window("nobody.example", earlier).await.unwrap(),
        courier_core::reputation::ReputationCounts::default()
    );
}

#[tokio::test]
async fn sightings_and_reputation_memory_and_dynamodb() {
    sightings_and_reputation_contract(
        &MemorySightings::default(),
        &MemoryReputationStore::default(),
        &MemoryEventLedger::default(),
    )
    .await;
    let stack = Stack::create(&["ses"]).await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&stack.sdk);
    let table = &stack.resources.control_table;
    sightings_and_reputation_contract(
        &DynamoDbSightings::new(dynamodb.clone(), table),
        &DynamoDbReputationStore::new(dynamodb.clone(), table),
        &DynamoDbEventLedger::new(dynamodb, table),
    )
    .await;
}

async fn send_schedule_contract(schedule: &dyn SendSchedule, concurrent: bool) {
    use courier_core::rate::Reservation::{Granted, Refused};
    let key = unique("rate");
    let (now, cost, ahead) = (1_000_000_000_i64, 20_000, 50_000);
    // a fresh schedule starts now; the next reservation follows it
    assert_eq!(
        schedule.reserve(&key, now, cost, ahead).await.unwrap(),
        Granted { start_us: now }
    );
    assert_eq!(
        schedule.reserve(&key, now, cost, ahead).await.unwrap(),
        Granted {
            start_us: now + cost
        }
    );
    assert_eq!(
        schedule.reserve(&key, now + 1, cost, ahead).await.unwrap(),
        Granted {
            start_us: now + 2 * cost
        }
    );
    // booked 60 ms ahead of now, past the 50 ms horizon: refused, and nothing is booked
    assert_eq!(
        schedule.reserve(&key, now, cost, ahead).await.unwrap(),
        Refused {
            booked_until_us: now + 3 * cost
        }
    );
    assert_eq!(
        schedule
            .reserve(&key, now + cost, cost, ahead)
            .await
            .unwrap(),
        Granted {
            start_us: now + 3 * cost
        }
    );
    // a schedule that fell behind restarts at now
    let later = now + 10_000_000;
    assert_eq!(
        schedule.reserve(&key, later, cost, ahead).await.unwrap(),
        Granted { start_us: later }
    );
    // schedules are per key
    assert_eq!(
        schedule
            .reserve(&format!("{key}-other"), now, cost, ahead)
            .await
            .unwrap(),
        Granted { start_us: now }
    );
    if concurrent {
        // 12 instances at once on a fresh schedule: distinct, non-overlapping slots
        let key = unique("rate-race");
        let starts = futures::future::join_all(
            (0..12).map(|_| schedule.reserve(&key, now, cost, 1_000_000)),
        )
        .await;
        let mut starts: Vec<i64> = starts
            .into_iter()
            .map(|r| match r.unwrap() {
                Granted { start_us } => start_us,
                Refused { .. } => panic!("refused within the horizon"),
            })
            .collect();
        starts.sort_unstable();
        let expected: Vec<i64> = (0..12).map(|i| now + i * cost).collect();
        assert_eq!(starts, expected);
    }
}

#[tokio::test]
async fn send_schedule_memory_and_dynamodb() {
    send_schedule_contract(&MemorySendSchedule::default(), true).await;
    let stack = Stack::create(&["ses"]).await;
    let control = DynamoDbSendSchedule::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk),
        &stack.resources.control_table,
    );
    // The race is asserted where conditional writes are atomic (see atomic_conditional_writes).
    send_schedule_contract(&control, courier_integration::atomic_conditional_writes()).await;
}

/// What every store of receiving domains' pacing states does: a domain's state is set only over
/// the state the caller saw (none at first), so of two instances lowering on the same sight one
/// wins; rates keep their fractions; a domain is forgotten only while it is still as seen.
async fn destination_rates_contract(rates: &dyn DestinationRates) {
    use courier_core::pacing::DestinationRate;
    assert!(rates.all().await.unwrap().is_empty());
    let first = DestinationRate {
        per_sec: 70.0,
        since_us: 1_800_000_000_000_000,
    };
    let second = DestinationRate {
        per_sec: 49.000_000_000_000_01,
        since_us: 1_800_000_005_000_001,
    };
    // GIVEN gmail.com lowered on no state
    assert!(rates.set("gmail.com", None, &first).await.unwrap());
    // THEN a second lowering on the same sight (none) loses
    assert!(!rates.set("gmail.com", None, &second).await.unwrap());
    // AND one on the state it saw wins, its fraction kept
    assert!(rates.set("gmail.com", Some(&first), &second).await.unwrap());
    assert!(!rates.set("gmail.com", Some(&first), &first).await.unwrap());
    // AND other domains are apart (a dotted, non-ASCII domain is one attribute)
    let odd = "mx-1.bücher.example";
    assert!(rates.set(odd, None, &first).await.unwrap());
    let all = rates.all().await.unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all["gmail.com"], second);
    assert_eq!(all[odd], first);
    // AND a domain is forgotten only while it is as seen
    assert!(!rates.forget("gmail.com", &first).await.unwrap());
    assert!(rates.forget("gmail.com", &second).await.unwrap());
    assert!(!rates.forget("gmail.com", &second).await.unwrap());
    assert_eq!(rates.all().await.unwrap().len(), 1);
}

#[tokio::test]
async fn destination_rates_memory_and_dynamodb() {
    destination_rates_contract(&MemoryDestinationRates::default()).await;
    let stack = Stack::create(&["ses"]).await;
    let rates = DynamoDbDestinationRates::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk),
        &stack.resources.control_table,
    );
    destination_rates_contract(&rates).await;
    // A state no instance can read (written by hand, or by a future version) is ignored, and the
    // domain's next throttle writes a readable one over it (else it would block pacing for good).
    let control = aws_sdk_dynamodb::Client::new(&stack.sdk);
    control
        .update_item()
        .table_name(&stack.resources.control_table)
        .key(
            "pk",
            aws_sdk_dynamodb::types::AttributeValue::S("pace".into()),
        )
        .key(
            "sk",
            aws_sdk_dynamodb::types::AttributeValue::S("destinations".into()),
        )
        .update_expression("SET #a = :bad")
        .expression_attribute_names("#a", "d#garbled.example")
        .expression_attribute_values(
            ":bad",
            aws_sdk_dynamodb::types::AttributeValue::S("fast".into()),
        )
        .send()
        .await
        .unwrap();
    assert!(!rates.all().await.unwrap().contains_key("garbled.example"));
    let rate = courier_core::pacing::DestinationRate {
        per_sec: 70.0,
        since_us: 1,
    };
    assert!(rates.set("garbled.example", None, &rate).await.unwrap());
    assert_eq!(
        rates.all().await.unwrap().get("garbled.example"),
        Some(&rate)
    );
}

/// What every live settings store does: nothing at first; the first document is version 1, each
/// change one more, written only over the version the writer read; the document comes back as
/// written, with when and by whom.
async fn live_settings_contract(store: &dyn LiveSettingsStore) {
    let t = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
    assert_eq!(store.get().await.unwrap(), None);
    let doc = "{\"breaker\": {\"min_calls\": 20}}";
    assert!(!store.put(doc, Some(1), t, "ann").await.unwrap());
    assert!(store.put(doc, None, t, "ann").await.unwrap());
    assert!(!store.put("{}", None, t, "bob").await.unwrap());
    let first = store.get().await.unwrap().unwrap();
    assert_eq!(
        (
            first.document.as_str(),
            first.version,
            first.updated_at,
            first.updated_by.as_str()
        ),
        (doc, 1, Some(t), "ann")
    );
    assert!(store.put("{}", Some(1), t, "bob").await.unwrap());
    assert!(!store.put(doc, Some(1), t, "ann").await.unwrap());
    assert_eq!(store.get().await.unwrap().unwrap().version, 2);
}

#[tokio::test]
async fn live_settings_memory_and_dynamodb() {
    live_settings_contract(&MemoryLiveSettings::default()).await;
    let stack = Stack::create(&["ses"]).await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&stack.sdk);
    let store = DynamoDbLiveSettings::new(dynamodb.clone(), &stack.resources.control_table);
    live_settings_contract(&store).await;
    use aws_sdk_dynamodb::types::AttributeValue::{N, S};
    let by_hand = |version: Option<aws_sdk_dynamodb::types::AttributeValue>| {
        let mut put = dynamodb
            .put_item()
            .table_name(&stack.resources.control_table)
            .item("pk", S("live".into()))
            .item("sk", S("settings".into()))
            .item("document", S("{}".into()));
        if let Some(version) = version {
            put = put.item("version", version);
        }
        put.send()
    };
    // An item written by hand without a version, or with it as a string, is an error naming it.
    for version in [None, Some(S("3".into())), Some(N("0".into()))] {
        by_hand(version).await.unwrap();
        let e = store.get().await.unwrap_err();
        assert!(e.to_string().contains("has no version number (N)"), "{e}");
    }
    // One without when and by whom is read (those are information only).
    by_hand(Some(N("3".into()))).await.unwrap();
    let record = store.get().await.unwrap().unwrap();
    assert_eq!(
        (
            record.version,
            record.updated_at,
            record.updated_by.as_str()
        ),
        (3, None, "")
    );
}

/// What every payload store does: a missing key is `None`, a body comes back byte for byte,
/// storing the same key again is harmless, and a copy (the archiver retaining an archived
/// letter's attachment) is the same bytes under the new key, or `false` when the source is gone.
async fn payload_store_contract(store: &dyn PayloadStore) {
    let key = format!("claim-check/{}", unique("k"));
    assert_eq!(store.get(&key).await.unwrap(), None);
    let body = vec![b'x'; 1_100_000];
    store.put(&key, body.clone()).await.unwrap();
    store.put(&key, body.clone()).await.unwrap();
    assert_eq!(store.get(&key).await.unwrap(), Some(body));
    let file = courier_core::job::AttachmentRef::of("a.bin", "application/octet-stream", &[0, 255]);
    let copy = file.retained_key();
    assert!(
        !store.copy(&file.key, &copy).await.unwrap(),
        "a missing source"
    );
    assert_eq!(store.get(&copy).await.unwrap(), None);
    store.put(&file.key, vec![0, 255]).await.unwrap();
    assert!(store.copy(&file.key, &copy).await.unwrap());
    assert!(store.copy(&file.key, &copy).await.unwrap(), "copying again");
    assert_eq!(store.get(&copy).await.unwrap(), Some(vec![0, 255]));
}

#[tokio::test]
async fn payload_stores_keep_bodies_apart() {
    payload_store_contract(&MemoryPayloads::default()).await;
    let stack = Stack::create(&["ses"]).await;
    let s3 = S3PayloadStore::new(
        aws_sdk_s3::Client::new(&stack.sdk),
        &stack.resources.payload_bucket,
    );
    payload_store_contract(&s3).await;
    // A bucket that does not exist is an error, not a missing body.
    let broken = S3PayloadStore::new(aws_sdk_s3::Client::new(&stack.sdk), unique("no-bucket"));
    assert!(broken.get("claim-check/x").await.is_err());
    assert!(
        broken
            .copy("attachments/x", "retained/attachments/x")
            .await
            .is_err(),
        "a missing bucket is an error, not a missing source"
    );
}

#[tokio::test]
async fn copies_and_letters_too_large_for_sqs_go_through_the_claim_check() {
    use courier_core::claim_check::{ClaimCheck, MAX_INLINE_BYTES, redeem};
    let stack = Stack::create(&["ses"]).await;
    let payloads: std::sync::Arc<dyn PayloadStore> = std::sync::Arc::new(S3PayloadStore::new(
        aws_sdk_s3::Client::new(&stack.sdk),
        &stack.resources.payload_bucket,
    ));
    let sfn = aws_sdk_sfn::Client::new(&stack.sdk);
    let large = format!("{{\"big\":\"{}\"}}", "x".repeat(MAX_INLINE_BYTES));
    let copy = Requeue {
        message_id: "big".into(),
        body: large.clone(),
        delay_secs: 0,
    };
    let small = Requeue {
        message_id: "small".into(),
        body: "small".into(),
        delay_secs: 0,
    };
    // GIVEN no payload store: the oversized copy fails alone, saying why
    let bare = SqsRetryScheduler::new(
        stack.sqs(),
        sfn.clone(),
        &stack.resources.queue_url,
        &stack.resources.delay_state_machine_arn,
    );
    let results = bare.enqueue(&[copy.clone(), small.clone()]).await;
    let error = results[0].as_ref().unwrap_err().to_string();
    assert!(error.contains("no payload store"), "{error}");
    assert!(results[1].is_ok());
    // WHEN a payload store is set, the copy goes as a pointer to the stored body
    let scheduler = bare.with_payloads(payloads.clone());
    let results = scheduler.enqueue(&[copy, small]).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let mut bodies: Vec<String> = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while bodies.len() < 3 && std::time::Instant::now() < deadline {
        let got = stack.drain(&stack.resources.queue_url).await;
        bodies.extend(got.into_iter().filter_map(|m| m.body));
    }
    let pointer = bodies
        .iter()
        .find(|b| ClaimCheck::parse(b).is_some())
        .expect("a pointer on the queue")
        .clone();
    assert!(pointer.len() < 1_024, "{pointer}");
    assert_eq!(
        redeem(Some(&*payloads), &pointer).await.unwrap(),
        large,
        "the stored body comes back whole"
    );

    // AND a letter too large for the dead-letter queue is stored apart and read back whole
    let t = now();
    let letter = DeadLetter {
        id: "big-letter".into(),
        category: DeadLetterCategory::RetriesExhausted,
        reason: "retries exhausted".into(),
        message_id: Some("big".into()),
        campaign_id: Some("c".into()),
        trace_id: None,
        recipients: vec!["a@example.org".into()],
        provider: Some("smtp".into()),
        class: ErrorClass::MailboxTemporary,
        rule: "r".into(),
        raw_code: None,
        raw_text: None,
        attempts: 3,
        history: vec![],
        first_failure_at: t,
        last_failure_at: t,
        fingerprint: "f".into(),
        payload: Some(large),
        payload_base64: None,
    };
    let bare_sink = SqsDeadLetterSink::new(stack.sqs(), &stack.resources.dead_letter_queue_url);
    assert!(bare_sink.put(&letter).await.is_err());
    bare_sink
        .with_payloads(payloads.clone())
        .put(&letter)
        .await
        .unwrap();
    let queue = courier_adapters::aws::SqsLetterQueue::new(
        stack.sqs(),
        &stack.resources.dead_letter_queue_url,
    )
    .with_payloads(payloads);
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while got.is_empty() && std::time::Instant::now() < deadline {
        got = queue.receive(10, Duration::from_secs(30)).await.unwrap();
    }
    assert_eq!(got.len(), 1);
    let back: DeadLetter = serde_json::from_str(&got[0].body).unwrap();
    assert_eq!(back, letter);
}
