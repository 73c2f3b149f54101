use super::defaults::{DAY, HOUR, MINUTE, rule};
use super::*;
use crate::random::SeededRandom;
use proptest::prelude::*;

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-30T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

/// Runs failures of one class until the policy stops retrying; returns the delays chosen.
fn run(policy: &RetryPolicy, tier: Priority, class: ErrorClass, seed: u64) -> (Vec<u64>, Decision) {
    let mut state = RetryState::default();
    let mut rng = SeededRandom::new(seed);
    let mut now = t0();
    let mut delays = Vec::new();
    loop {
        match policy.decide(tier, class, &state, now, None, &mut rng) {
            Decision::Retry {
                delay,
                spends_attempt,
                ..
            } => {
                state.record(class, spends_attempt, delay.as_secs(), now);
                delays.push(delay.as_secs());
                now += chrono::Duration::seconds(delay.as_secs() as i64);
                assert!(delays.len() < 100_000, "unbounded retries");
            }
            other => return (delays, other),
        }
    }
}

#[test]
fn defaults_validate() {
    RetryPolicy::default().validate().unwrap();
}

#[test]
fn network_retries_five_times_on_its_schedule() {
    let (delays, end) = run(
        &RetryPolicy::default(),
        Priority::Bulk,
        ErrorClass::Network,
        7,
    );
    assert_eq!(delays.len(), 5);
    for (d, base) in delays.iter().zip([5, 15, 30, 60, 120]) {
        assert!((base..=base + base / 5 + 1).contains(d), "{d} vs {base}");
    }
    assert!(matches!(
        end,
        Decision::DeadLetter {
            category: DeadLetterCategory::RetriesExhausted,
            ..
        }
    ));
}

#[test]
fn soft_bounces_wait_minutes_to_hours_through_the_state_machine() {
    let policy = RetryPolicy::default();
    let mut rng = SeededRandom::new(1);
    let d = policy.decide(
        Priority::Bulk,
        ErrorClass::MailboxTemporary,
        &RetryState::default(),
        t0(),
        None,
        &mut rng,
    );
    let Decision::Retry {
        delay,
        spends_attempt,
    } = d
    else {
        panic!("{d:?}")
    };
    assert!(delay.as_secs() >= 900);
    assert!(spends_attempt);
    // 900 s plus any jitter is past the queue's limit, so the state machine carries a job.
    if delay.as_secs() > MAX_QUEUE_DELAY_SECS {
        assert_eq!(
            crate::delay::mechanism(delay.as_secs(), "{}"),
            DelayMechanism::StateMachine
        );
    }
    // Transactional: three tries, the last 6 hours on.
    let (delays, _) = run(
        &policy,
        Priority::Transactional,
        ErrorClass::MailboxTemporary,
        3,
    );
    assert_eq!(delays.len(), 3);
    assert!(delays[2] >= 6 * 3600);
}

#[test]
fn throttling_does_not_spend_attempts_but_is_bounded() {
    let policy = RetryPolicy::default();
    // Quick at first, backing off to 7.5-15 minutes (within SQS's delay), until the
    // transactional horizon (2 h).
    let (delays, end) = run(&policy, Priority::Transactional, ErrorClass::Throttled, 9);
    assert!((10..=20).contains(&delays[0]), "{delays:?}");
    assert!(
        delays.windows(2).take(5).all(|w| w[1] > w[0] / 2),
        "{delays:?}"
    );
    assert!(delays.iter().all(|d| *d <= 15 * MINUTE), "{delays:?}");
    let waited: u64 = delays.iter().sum();
    assert!(
        (HOUR..=2 * HOUR).contains(&waited),
        "{waited} s: {delays:?}"
    );
    assert!(
        matches!(&end, Decision::DeadLetter { reason, .. } if reason.contains("horizon")),
        "{end:?}"
    );
    let mut state = RetryState::default();
    state.record(ErrorClass::Throttled, false, 10, t0());
    assert_eq!(state.spent, 0);
}

#[test]
fn open_circuits_wait_until_the_horizon_without_spending() {
    let (delays, end) = run(
        &RetryPolicy::default(),
        Priority::Transactional,
        ErrorClass::CircuitOpen,
        5,
    );
    let waited: u64 = delays.iter().sum();
    assert!(waited <= 2 * 3600 && waited > 3600, "{waited}");
    match end {
        Decision::DeadLetter { reason, .. } => assert!(reason.contains("horizon"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn non_retryable_classes_end_at_once() {
    let policy = RetryPolicy::default();
    let mut rng = SeededRandom::new(0);
    let state = RetryState::default();
    let d = |class| {
        policy.decide(
            Priority::Bulk,
            class,
            &state,
            t0(),
            None,
            &mut SeededRandom::new(0),
        )
    };
    assert_eq!(
        d(ErrorClass::RecipientPermanent),
        Decision::Finish {
            status: Status::BouncedPermanent,
            suppress_recipient: true
        }
    );
    for (class, category) in [
        (ErrorClass::Rendering, DeadLetterCategory::NeedsReview),
        (ErrorClass::ContentRejected, DeadLetterCategory::NeedsReview),
        (ErrorClass::SenderConfig, DeadLetterCategory::NeedsReview),
        (ErrorClass::InvalidJob, DeadLetterCategory::InvalidJob),
        (ErrorClass::Poison, DeadLetterCategory::Poison),
    ] {
        assert!(
            matches!(d(class), Decision::DeadLetter { category: c, .. } if c == category),
            "{class}"
        );
    }
    let _ = policy.decide(
        Priority::Bulk,
        ErrorClass::Network,
        &state,
        t0(),
        None,
        &mut rng,
    );
}

#[test]
fn the_deadline_wins_over_the_schedule() {
    let policy = RetryPolicy::default();
    let deadline = t0() + chrono::Duration::seconds(60);
    let d = policy.decide(
        Priority::Bulk,
        ErrorClass::MailboxTemporary,
        &RetryState::default(),
        t0(),
        Some(deadline),
        &mut SeededRandom::new(0),
    );
    assert!(
        matches!(d, Decision::DeadLetter { ref reason, .. } if reason.contains("not_after")),
        "{d:?}"
    );
}

#[test]
fn total_attempts_cap_spans_classes() {
    let mut policy = RetryPolicy::default();
    policy.bulk.max_total_attempts = 3;
    let mut state = RetryState::default();
    state.record(ErrorClass::Network, true, 5, t0());
    state.record(ErrorClass::Unknown, true, 60, t0());
    let d = policy.decide(
        Priority::Bulk,
        ErrorClass::Tls,
        &state,
        t0(),
        None,
        &mut SeededRandom::new(0),
    );
    assert!(
        matches!(d, Decision::DeadLetter { ref reason, .. } if reason.contains("attempts spent")),
        "{d:?}"
    );
}

#[test]
fn jitter_strategies_stay_in_their_ranges() {
    let mk = |jitter| {
        rule(
            1,
            Schedule::Exponential {
                base: 10,
                factor: 2.0,
                cap: 100,
            },
            jitter,
            true,
            DAY,
        )
    };
    let mut rng = SeededRandom::new(11);
    for _ in 0..1000 {
        assert!(jittered(&mk(Jitter::None), 40, None, &mut rng) == 40);
        assert!(jittered(&mk(Jitter::Full), 40, None, &mut rng) <= 40);
        assert!((20..=40).contains(&jittered(&mk(Jitter::Equal), 40, None, &mut rng)));
        assert!((10..=90).contains(&jittered(&mk(Jitter::Decorrelated), 40, Some(30), &mut rng)));
        assert!((10..=100).contains(&jittered(
            &mk(Jitter::Decorrelated),
            40,
            Some(1000),
            &mut rng
        )));
        assert!((40..=60).contains(&jittered(
            &mk(Jitter::Proportional { ratio: 0.5 }),
            40,
            None,
            &mut rng
        )));
    }
    assert_eq!(
        Schedule::Exponential {
            base: 10,
            factor: 2.0,
            cap: 100
        }
        .base_delay(50),
        100
    );
    assert_eq!(Schedule::Delays(vec![1, 2]).base_delay(9), 2);
}

#[test]
fn policy_file_overrides_and_validation_errors() {
    let p = RetryPolicy::from_json(r#"{"transactional": {"classes": {"network": {"retries": 2, "schedule": {"delays": ["1s", "2m"]}, "jitter": {"kind": "full"}, "spends_attempt": true, "horizon": "1h"}}}}"#).unwrap();
    let rule = &p.transactional.classes[&ErrorClass::Network];
    assert_eq!(rule.schedule, Schedule::Delays(vec![1, 120]));
    assert_eq!(rule.horizon, 3600);
    assert_eq!(p.bulk, RetryPolicy::default().bulk);

    let cases = [
        (
            r#"{"bulk": {"classes": {"nope": {"retries": 1, "schedule": {"delays": [1]}, "jitter": {"kind": "none"}, "spends_attempt": true, "horizon": 5}}}}"#,
            "unknown class",
        ),
        (
            r#"{"bulk": {"classes": {"rendering": {"retries": 1, "schedule": {"delays": [1]}, "jitter": {"kind": "none"}, "spends_attempt": true, "horizon": 5}}}}"#,
            "never retried",
        ),
        (
            r#"{"bulk": {"classes": {"network": {"retries": 1, "schedule": {"delays": []}, "jitter": {"kind": "none"}, "spends_attempt": true, "horizon": 5}}}}"#,
            "must not be empty",
        ),
        (
            r#"{"bulk": {"classes": {"network": {"retries": 1, "schedule": {"exponential": {"base": 10, "factor": 0.5, "cap": 100}}, "jitter": {"kind": "none"}, "spends_attempt": true, "horizon": 5}}}}"#,
            "factor",
        ),
        (
            r#"{"bulk": {"classes": {"network": {"retries": 1, "schedule": {"delays": [1]}, "jitter": {"kind": "proportional", "ratio": -1}, "spends_attempt": true, "horizon": 5}}}}"#,
            "ratio",
        ),
        (
            r#"{"bulk": {"classes": {"network": {"retries": 1, "schedule": {"delays": [1]}, "jitter": {"kind": "none"}, "spends_attempt": true, "horizon": "5y"}}}}"#,
            "unit",
        ),
        (
            r#"{"bulk": {"max_total_attempts": 0}}"#,
            "max_total_attempts",
        ),
        (r#"{"bulk": {"surprise": 1}}"#, "unknown field"),
        (r#"not json"#, "not valid JSON"),
    ];
    for (json, needle) in cases {
        let err = RetryPolicy::from_json(json).unwrap_err().to_string();
        assert!(err.contains(needle), "{json}: {err}");
    }
}

#[test]
fn lookup_prefers_file_and_reports_missing_file() {
    let err = RetryPolicy::from_lookup(|k| {
        (k == "COURIER_RETRY_POLICY_FILE").then(|| "/nonexistent/p.json".into())
    })
    .unwrap_err();
    assert!(err.to_string().contains("/nonexistent/p.json"));
    assert_eq!(
        RetryPolicy::from_lookup(|_| None).unwrap(),
        RetryPolicy::default()
    );
}

#[test]
fn durations_parse() {
    assert_eq!(parse_duration("90s"), Ok(90));
    assert_eq!(parse_duration("15m"), Ok(900));
    assert_eq!(parse_duration("5d"), Ok(432_000));
    assert_eq!(parse_duration("42"), Ok(42));
    assert!(parse_duration("m").is_err());
    assert!(parse_duration("99999999999999999999d").is_err());
    use std::time::Duration;
    assert_eq!(parse_duration_ms("250ms"), Ok(Duration::from_millis(250)));
    assert_eq!(parse_duration_ms(" 2s "), Ok(Duration::from_secs(2)));
    assert_eq!(parse_duration_ms("3"), Ok(Duration::from_secs(3)));
    for bad in ["ms", "1.5ms", "-5ms", "5us", "99999999999999999999ms"] {
        assert!(parse_duration_ms(bad).is_err(), "{bad}");
    }
}

fn any_class() -> impl Strategy<Value = ErrorClass> {
    prop::sample::select(ErrorClass::ALL.to_vec())
}

proptest! {
    #[test]
    fn delays_stay_within_bounds_and_attempts_are_bounded(
        seed in any::<u64>(),
        classes in prop::collection::vec(any_class(), 1..200),
        bulk in any::<bool>(),
    ) {
        let policy = RetryPolicy::default();
        let tier = if bulk { Priority::Bulk } else { Priority::Transactional };
        let mut state = RetryState::default();
        let mut rng = SeededRandom::new(seed);
        let start = t0();
        let mut now = start;
        for class in classes {
            match policy.decide(tier, class, &state, now, None, &mut rng) {
                Decision::Retry { delay, spends_attempt } => {
                    let rule = &policy.tier(tier).classes[&class];
                    let secs = delay.as_secs();
                    prop_assert!((1..=MAX_DELAY_SECS).contains(&secs));
                    let next = now + chrono::Duration::seconds(secs as i64);
                    prop_assert!(next <= start + chrono::Duration::seconds(rule.horizon as i64));
                    state.record(class, spends_attempt, secs, now);
                    prop_assert!(state.spent < policy.tier(tier).max_total_attempts);
                    now = next;
                }
                Decision::DeadLetter { .. } | Decision::Finish { .. } => break,
            }
        }
    }

    #[test]
    fn same_seed_same_schedule(seed in any::<u64>(), class in any_class()) {
        let policy = RetryPolicy::default();
        let a = run(&policy, Priority::Bulk, class, seed);
        let b = run(&policy, Priority::Bulk, class, seed);
        prop_assert_eq!(a, b);
    }
}

#[test]
fn an_unknown_verdict_with_a_permanent_signal_goes_to_review_at_once() {
    use crate::classify::classify_smtp;
    let policy = RetryPolicy::default();
    let mut rng = SeededRandom::new(1);
    let decide = |raw: &str, rng: &mut SeededRandom| {
        let verdict = classify_smtp(raw);
        policy.decide_verdict(
            Priority::Transactional,
            &verdict,
            &RetryState::default(),
            t0(),
            None,
            rng,
        )
    };
    match decide("554 5.9.9 the flux capacitor refused", &mut rng) {
        Decision::DeadLetter { category, reason } => {
            assert_eq!(category, DeadLetterCategory::NeedsReview);
            assert!(reason.contains("554 5.9.9"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // The same class with a transient signal is retried as the policy says.
    assert!(matches!(
        decide("451 4.9.9 the flux capacitor is warming up", &mut rng),
        Decision::Retry { .. }
    ));
}

/// RFC 5321 (4.5.4.1): "the give-up time generally needs to be at least 4-5 days". Bulk mail
/// keeps trying a full or greylisted mailbox and an unavailable receiver that long; transactional
/// mail deliberately stops within a day.
#[test]
fn bulk_mail_keeps_trying_temporary_refusals_for_four_to_five_days() {
    let policy = RetryPolicy::default();
    // A receiver's refusals, and the waits its outage or backlog causes on our side (an open
    // breaker, the send rate): a provider outage must not end bulk mail after a day.
    for class in [
        ErrorClass::MailboxTemporary,
        ErrorClass::ProviderUnavailable,
        ErrorClass::Throttled,
        ErrorClass::CircuitOpen,
        ErrorClass::RateLimited,
    ] {
        let (delays, end) = run(&policy, Priority::Bulk, class, 3);
        let tried_for: u64 = delays.iter().sum();
        assert!(
            (4 * DAY..=5 * DAY).contains(&tried_for),
            "{class}: {} h over {} retries, then {end:?}",
            tried_for / 3600,
            delays.len()
        );
        assert!(
            matches!(&end, Decision::DeadLetter { reason, .. } if reason.contains("horizon")),
            "{class}: stopped by the horizon, not a count: {end:?}"
        );
        let (delays, _) = run(&policy, Priority::Transactional, class, 3);
        assert!(delays.iter().sum::<u64>() <= DAY, "{class}, transactional");
    }
}
