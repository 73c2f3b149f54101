//! Per-destination pacing in the send path: a receiving domain's throttle reply lowers its pace
//! for every instance; its next jobs wait as `rate_limited` (no attempt spent, no call) while
//! other domains' mail goes at once.

use super::*;
use courier_core::pacing::DestinationPacing;
use courier_devkit::memory::MemoryDestinationRates;

const GMAIL_THROTTLE: &str = "421 4.7.28 [192.0.2.1] Our system has detected an unusual rate of \
     unsolicited mail originating from your IP address. To protect our users from spam, mail \
     sent from your IP address has been temporarily rate limited.";

/// A mailer that throttles every message to `big.example` and accepts the rest.
fn big_throttles() -> MemoryMailer {
    MemoryMailer::with(
        courier_core::ports::Provider::Ses,
        Box::new(|e| {
            if e.to[0].email.domain() == "big.example" {
                Err(SendFailure {
                    verdict: classify_smtp(GMAIL_THROTTLE),
                    ambiguous: false,
                    source: None,
                })
            } else {
                Ok(Receipt::new(format!("mem-{}", e.message_id)))
            }
        }),
    )
}

/// A governor pacing receiving domains on `rates`: 1/s after a throttle (ceiling 10/s × 0.1).
fn pacing_on(rates: Arc<MemoryDestinationRates>) -> crate::governor::Governor {
    pacing_on_schedule(rates, Arc::new(MemorySendSchedule::default()))
}

/// [`pacing_on`], booking on `schedule`.
fn pacing_on_schedule(
    rates: Arc<MemoryDestinationRates>,
    schedule: Arc<MemorySendSchedule>,
) -> crate::governor::Governor {
    let rule = DestinationPacing {
        floor_per_sec: 0.5,
        ceiling_per_sec: 10.0,
        increase_per_min: 1.0,
        decrease: 0.1,
        hold: std::time::Duration::from_secs(5),
    };
    crate::governor::Governor::new(schedule, std::collections::BTreeMap::new()).with_destinations(
        crate::governor::Destinations::new(
            Some(rule),
            rates,
            courier_core::rate::RateLimit {
                per_sec: 1.0,
                max_ahead: std::time::Duration::from_secs(1),
                chunk: 1,
            },
            chrono::Duration::seconds(2),
        ),
    )
}

/// The last copy put back for `id`: its retry state.
fn retry_of(w: &World, id: &str) -> courier_core::policy::RetryState {
    let queued = w.scheduler.queued.lock().unwrap();
    let copy = queued
        .iter()
        .rev()
        .find(|r| r.message_id == id)
        .expect("a copy was put back");
    courier_core::envelope::parse_body(copy.body.as_bytes())
        .unwrap()
        .retry
}

#[tokio::test]
async fn a_throttling_domain_is_paced_and_other_domains_are_not_delayed() {
    let w = world_with(big_throttles());
    let rates = Arc::new(MemoryDestinationRates::default());
    let p = with_governor(&w, pacing_on(rates.clone()));
    // GIVEN big.example throttled a send: its pace is lowered (to 1/s), shared
    let deadline = w.clock.now() + chrono::Duration::seconds(60);
    p.handle_records(vec![rec("a", job("b1", "ann@big.example"))], deadline, "i")
        .await;
    assert_eq!(w.mailer.sent_count(), 1);
    let state = rates.rates.lock().unwrap().get("big.example").copied();
    assert_eq!(state.map(|s| s.per_sec), Some(1.0));
    assert_eq!(
        retry_of(&w, "b1").by_class.get(&ErrorClass::Throttled),
        None
    );
    // WHEN more mail for big.example and for others arrives at once
    let mut records: Vec<RecordIn> = (2..=6)
        .map(|i| rec(&format!("b{i}"), job(&format!("b{i}"), "bob@big.example")))
        .collect();
    records
        .extend((1..=20).map(|i| rec(&format!("o{i}"), job(&format!("o{i}"), "o@other.example"))));
    let sent_before = w.mailer.sent_count();
    let report = p.handle_records(records, deadline, "i").await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    // THEN every other domain's job is sent at once
    for i in 1..=20 {
        assert_eq!(
            w.status_of(&format!("o{i}")),
            Some(Status::SentToProvider),
            "o{i}"
        );
    }
    // AND big.example gets only what its pace (1/s, booked at most 1 s ahead) allows: the
    // rest waits as rate_limited, no call made and no attempt spent
    let big_calls = w.mailer.sent_count() - sent_before - 20;
    assert!(
        (1..=2).contains(&big_calls),
        "{big_calls} calls to big.example"
    );
    let waited: Vec<String> = (2..=6)
        .map(|i| format!("b{i}"))
        .filter(|id| {
            w.scheduler.queued.lock().unwrap().iter().any(|r| {
                &r.message_id == id
                    && courier_core::envelope::parse_body(r.body.as_bytes())
                        .unwrap()
                        .history
                        .last()
                        .is_some_and(|h| h.class == ErrorClass::RateLimited)
            })
        })
        .collect();
    assert!(waited.len() >= 3, "{waited:?}");
    for id in &waited {
        assert_eq!(retry_of(&w, id).spent, 0, "{id} spent an attempt");
    }
    // AND once the instance has seen the domain's schedule booked, later mail for it waits
    // without a claim (no status write, no call) until the schedule frees
    let calls = w.mailer.sent_count();
    let later: Vec<RecordIn> = (7..=9)
        .map(|i| {
            rec(
                &format!("b{i}"),
                job(&format!("b{i}"), "Bob <bob@Big.Example>"),
            )
        })
        .collect();
    let report = p.handle_records(later, deadline, "i").await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.mailer.sent_count(), calls);
    for i in 7..=9 {
        let id = format!("b{i}");
        assert_eq!(w.status_of(&id), None, "{id} was claimed");
        assert_eq!(retry_of(&w, &id).spent, 0);
    }
}

#[tokio::test]
async fn a_failure_to_lower_the_pace_does_not_change_the_jobs_fate() {
    let w = world_with(big_throttles());
    let rates = Arc::new(MemoryDestinationRates::default());
    let p = with_governor(&w, pacing_on(rates.clone()));
    // GIVEN the control table fails the pace's read before the send, then the lowering's
    rates.fail.set_after(1, 1);
    let deadline = w.clock.now() + chrono::Duration::seconds(60);
    let report = p
        .handle_records(vec![rec("a", job("b1", "ann@big.example"))], deadline, "i")
        .await;
    // THEN the throttled job is retried as usual, and nothing is paced
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.status_of("b1"), Some(Status::Deferred));
    assert!(rates.rates.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_failed_read_of_the_pace_leaves_the_record_for_redelivery() {
    let w = world_with(big_throttles());
    let rates = Arc::new(MemoryDestinationRates::default());
    let p = with_governor(&w, pacing_on(rates.clone()));
    rates.fail.set(1);
    let deadline = w.clock.now() + chrono::Duration::seconds(60);
    let report = p
        .handle_records(
            vec![rec("a", job("o1", "ann@other.example"))],
            deadline,
            "i",
        )
        .await;
    assert_eq!(report.failures.len(), 1);
    assert_eq!(w.mailer.sent_count(), 0);
}

#[test]
fn a_provider_quota_is_not_a_receivers_throttle() {
    assert!(classify_smtp(GMAIL_THROTTLE).throttles_receiver());
    assert!(
        classify_smtp("421 4.7.0 [TSS04] Messages from 192.0.2.1 temporarily deferred")
            .throttles_receiver()
    );
    assert!(
        !classify_smtp("454 4.7.0 Throttling failure: Maximum sending rate exceeded.")
            .throttles_receiver()
    );
    assert!(!classify_smtp("450 4.2.0 Greylisted").throttles_receiver());
    // a bare "try again later" names no rate: not the domain's throttle
    let generic = classify_smtp("421 4.7.0 <busy@x>: Recipient address rejected: try again later");
    assert_eq!(generic.class, ErrorClass::Throttled);
    assert!(!generic.throttles_receiver());
    assert!(
        classify_smtp(
            "450 4.7.28 <a@x>: Recipient address rejected: rate limited, try again later"
        )
        .throttles_receiver()
    );
}

/// A job to every address in `to`.
fn job_to(id: &str, to: &[&str]) -> String {
    serde_json::json!({
        "version": 1, "message_id": id, "campaign_id": "c", "from": "shop@example.com",
        "to": to, "content": {"subject": "Hi", "text": "Hello"}
    })
    .to_string()
}

#[tokio::test]
async fn a_message_to_several_domains_waits_for_the_pace_of_each() {
    let w = world_with(big_throttles());
    let rates = Arc::new(MemoryDestinationRates::default());
    let p = with_governor(&w, pacing_on(rates.clone()));
    // GIVEN big.example throttled a send: its pace is lowered (to 1/s)
    let deadline = w.clock.now() + chrono::Duration::seconds(60);
    p.handle_records(vec![rec("a", job("m0", "ann@big.example"))], deadline, "i")
        .await;
    assert_eq!(
        rates
            .rates
            .lock()
            .unwrap()
            .get("big.example")
            .map(|s| s.per_sec),
        Some(1.0)
    );
    // WHEN messages to other.example first and big.example second arrive at once
    let records: Vec<RecordIn> = (1..=5)
        .map(|i| {
            let id = format!("m{i}");
            rec(
                &id,
                job_to(&id, &["o@other.example", "Bob <bob@Big.Example>"]),
            )
        })
        .collect();
    let calls = w.mailer.sent_count();
    let report = p.handle_records(records, deadline, "i").await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    // THEN they go at big.example's pace, whichever recipient comes first: the rest wait as
    // rate_limited (claimed, or unclaimed once the schedule was seen booked), no call made and
    // no attempt spent
    let sent = w.mailer.sent_count() - calls;
    assert!((1..=2).contains(&sent), "{sent} sent");
    let waited: Vec<String> = (1..=5)
        .map(|i| format!("m{i}"))
        .filter(|id| w.status_of(id) != Some(Status::SentToProvider))
        .collect();
    assert_eq!(waited.len(), 5 - sent, "{waited:?}");
    for id in &waited {
        assert_eq!(retry_of(&w, id).spent, 0, "{id} spent an attempt");
        let queued = w.scheduler.queued.lock().unwrap();
        let copy = queued.iter().rev().find(|r| &r.message_id == id).unwrap();
        let history = courier_core::envelope::parse_body(copy.body.as_bytes())
            .unwrap()
            .history;
        assert_eq!(
            history.last().map(|h| h.class),
            Some(ErrorClass::RateLimited),
            "{id}"
        );
    }
    // AND later ones wait unclaimed once the instance has seen big.example's schedule booked
    let calls = w.mailer.sent_count();
    let later = job_to("m9", &["o@other.example", "bob@big.example"]);
    p.handle_records(vec![rec("l", later)], deadline, "i").await;
    assert_eq!(w.mailer.sent_count(), calls);
    assert_eq!(w.status_of("m9"), None, "claimed");
}

#[tokio::test]
async fn a_throttle_reply_lowers_the_domain_it_names_or_every_domain_of_the_message() {
    for (reply, lowered) in [
        (
            "421 4.7.0 <bob@big.example>: Recipient address rejected: too many connections from your host, slow down",
            &["big.example"][..],
        ),
        (
            "421 4.7.0 too many connections from your host, slow down",
            &["big.example", "other.example"][..],
        ),
    ] {
        // GIVEN a relay that throttles every message with `reply`
        let w = world_with(smtp_failure(reply));
        let rates = Arc::new(MemoryDestinationRates::default());
        let p = with_governor(&w, pacing_on(rates.clone()));
        // WHEN it throttles a message to other.example and big.example
        let deadline = w.clock.now() + chrono::Duration::seconds(60);
        let body = job_to("t1", &["o@other.example", "bob@big.example"]);
        p.handle_records(vec![rec("t", body)], deadline, "i").await;
        // THEN the domains the reply names (else all of the message's) are paced
        let mut paced: Vec<String> = rates.rates.lock().unwrap().keys().cloned().collect();
        paced.sort();
        assert_eq!(paced, lowered, "{reply}");
    }
}

#[tokio::test]
async fn an_unpaced_domain_never_makes_a_send_wait_even_at_the_end_of_its_budget() {
    // GIVEN pacing on, no domain paced, and an invocation so near its deadline that the
    // send's budget is over when its domains are checked
    let w = world_with(MemoryMailer::accepting(courier_core::ports::Provider::Ses));
    let p = with_governor(&w, pacing_on(Arc::new(MemoryDestinationRates::default())));
    let deadline = w.clock.now() + chrono::Duration::seconds(1);
    // WHEN a job to an unpaced domain comes
    let report = p
        .handle_records(
            vec![rec("a", job("z1", "ann@other.example"))],
            deadline,
            "i",
        )
        .await;
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    // THEN it never waits for that domain's pace (it has none)
    let queued = w.scheduler.queued.lock().unwrap();
    let paced = queued.iter().any(|r| {
        courier_core::envelope::parse_body(r.body.as_bytes())
            .unwrap()
            .history
            .iter()
            .any(|h| h.rule.contains("destination-rate"))
    });
    assert!(!paced, "{queued:?}");
    // AND it is sent (the provider's own checks let it go)
    assert_eq!(w.mailer.sent_count(), 1);
}

#[tokio::test]
async fn a_message_waiting_for_one_domain_books_no_slot_of_another() {
    // GIVEN a relay that throttles everything: a.example and b.example both paced (1/s)
    let throttling = MemoryMailer::with(
        courier_core::ports::Provider::Ses,
        Box::new(|_| {
            Err(SendFailure {
                verdict: classify_smtp(GMAIL_THROTTLE),
                ambiguous: false,
                source: None,
            })
        }),
    );
    let w = world_with(throttling);
    let schedule = Arc::new(MemorySendSchedule::default());
    let p = with_governor(
        &w,
        pacing_on_schedule(
            Arc::new(MemoryDestinationRates::default()),
            schedule.clone(),
        ),
    );
    let deadline = w.clock.now() + chrono::Duration::seconds(60);
    for (id, to) in [("a0", "ann@a.example"), ("b0", "bob@b.example")] {
        p.handle_records(vec![rec(id, job(id, to))], deadline, "i")
            .await;
    }
    // AND b.example's schedule seen booked past its horizon by this instance
    let burst: Vec<RecordIn> = (1..=6)
        .map(|i| rec(&format!("b{i}"), job(&format!("b{i}"), "bob@b.example")))
        .collect();
    p.handle_records(burst, deadline, "i").await;
    let a_slot = || schedule.tats.lock().unwrap().get("dest#a.example").copied();
    let before = a_slot();
    // WHEN a message to both comes
    let both = job_to("ab", &["ann@a.example", "bob@b.example"]);
    let report = p.handle_records(vec![rec("ab", both)], deadline, "i").await;
    // THEN it waits for b.example without a claim, and books nothing on a.example
    assert!(report.failures.is_empty(), "{:?}", report.reasons);
    assert_eq!(w.status_of("ab"), None, "claimed");
    assert_eq!(a_slot(), before);
}
