//! The simulator's targets, asserted on small deterministic scenarios.

use super::*;

/// A small outage: 20,000 jobs over 20 minutes, a 30-minute 421 outage from minute 5, 100/s quota.
fn outage(breaker: bool) -> Scenario {
    let mut sc = Scenario::preset("outage-30m").unwrap();
    sc.jobs = 20_000;
    sc.arrival_secs = 20 * 60;
    sc.faults[0].start_secs = 5 * 60;
    sc.provider.quota_per_sec = 100.0;
    sc.lambda.max_concurrency = 20;
    if !breaker {
        sc.breaker = None;
    }
    sc
}

#[test]
fn steady_traffic_costs_what_the_real_function_costs() {
    // GIVEN no faults and a quota well above the arrival rate
    let mut sc = Scenario {
        jobs: 20_000,
        arrival_secs: 0,
        ..Scenario::default()
    };
    sc.provider.quota_per_sec = 1e6;
    // unpaced, as tests/tests/send.rs runs the function
    sc.send_rate = None;
    let r = run(&sc).unwrap();
    // THEN every job is sent once, and AWS calls per job match the counted 4.40 of
    // tests/tests/send.rs (claim, send, status, outbox clear; a tenth of a receive, of a
    // delete, of the outcomes' read and of their PutEvents)
    assert_eq!(r.sent, 20_000);
    assert_eq!(r.provider_calls, 20_000, "{r:#?}");
    assert!(
        (r.aws_calls_per_job - 4.4).abs() < 0.01,
        "{}",
        r.aws_calls_per_job
    );
}

#[test]
fn with_the_breaker_an_outage_costs_at_most_1_2_calls_per_job_and_loses_nothing() {
    let r = run(&outage(true)).unwrap();
    let o = r.outage.clone().unwrap();
    assert!(
        o.calls_per_job <= 1.2,
        "{}",
        table(std::slice::from_ref(&r))
    );
    // Nothing dead-lettered: the outage is shorter than the 2 h give-up horizon.
    assert_eq!(
        r.dead_lettered + r.redriven + r.pending,
        0,
        "{}",
        table(std::slice::from_ref(&r))
    );
    assert_eq!(r.sent, 20_000);
    assert!(r.breaker_opened >= 1);
}

#[test]
fn after_recovery_calls_stay_within_the_quota() {
    let r = run(&outage(true)).unwrap();
    assert!(
        f64::from(r.peak_calls_per_sec_after_recovery) <= r.quota_per_sec,
        "{}",
        table(std::slice::from_ref(&r))
    );
    assert!(r.drain_secs.is_some());
}

#[test]
fn without_the_breaker_the_outage_is_amplified() {
    let on = run(&outage(true)).unwrap();
    let off = run(&outage(false)).unwrap();
    let (on_o, off_o) = (on.outage.clone().unwrap(), off.outage.clone().unwrap());
    assert!(
        off_o.calls_per_job > 2.0 * on_o.calls_per_job && off_o.calls_per_job > 1.5,
        "{}",
        table(&[on, off])
    );
}

#[test]
fn same_seed_same_report() {
    let mut a = run(&outage(true)).unwrap();
    let mut b = run(&outage(true)).unwrap();
    a.wall_ms = 0.0;
    b.wall_ms = 0.0;
    assert_eq!(a, b);
    let mut sc = outage(true);
    sc.seed = 2;
    let mut c = run(&sc).unwrap();
    c.wall_ms = 0.0;
    assert_ne!(a, c);
}

#[test]
fn a_recipient_that_always_throttles_is_retried_by_the_policy_then_dead_lettered() {
    // GIVEN a policy that retries throttling once, and a fifth of the recipients always busy
    let policy = courier_core::policy::RetryPolicy::from_json(
        r#"{"transactional": {"classes": {"throttled": {"retries": 1, "schedule": {"delays": [1]}, "jitter": {"kind": "none"}, "spends_attempt": false, "horizon": "1h"}}}}"#,
    )
    .unwrap();
    let sc = Scenario {
        jobs: 100,
        arrival_secs: 0,
        policy,
        mix: vec![RecipientShare {
            share: 0.2,
            reply: "421 4.7.0 <busy@courier.test>: Recipient address rejected: try again later"
                .into(),
        }],
        ..Scenario::default()
    };
    let r = run(&sc).unwrap();
    // THEN 80 are sent once and 20 tried twice, then dead-lettered as throttled
    assert_eq!((r.sent, r.dead_lettered), (80, 20));
    assert_eq!(r.provider_calls, 120);
    assert_eq!(r.dead_letters_by_class.get("throttled"), Some(&20));
}

#[test]
fn a_soft_bounce_storm_waits_in_the_state_machine_and_delivers() {
    let mut sc = Scenario::preset("soft-bounce-storm").unwrap();
    sc.jobs = 5_000;
    sc.arrival_secs = 20 * 60;
    sc.faults[0].start_secs = 60;
    sc.faults[0].duration_secs = 10 * 60;
    let r = run(&sc).unwrap();
    assert!(r.aws.sfn_start > 0);
    assert_eq!(r.pending, 0);
    assert_eq!(r.sent + r.dead_lettered, 5_000);
    // A storm of 10 minutes is far shorter than the 1-day mailbox horizon.
    assert_eq!(r.dead_lettered, 0, "{}", table(std::slice::from_ref(&r)));
}

#[test]
fn comparisons_run_every_variant() {
    let mut sc = outage(true);
    sc.jobs = 2_000;
    assert_eq!(compare(&sc, "jitter").unwrap().len(), 6);
    let b = compare(&sc, "breaker").unwrap();
    assert_eq!(b.len(), 4);
    assert_eq!(b[0].breaker, "off");
    // The governor's first column is Courier's default: paced at the quota.
    let g = compare(&sc, "governor").unwrap();
    assert_ne!(g[0].send_rate, "off");
    assert_eq!(g[1].send_rate, "off");
    assert!(compare(&sc, "colour").is_err());
    assert!(table(&b).contains("breaker opened"));
}

#[test]
fn the_governor_keeps_every_second_after_recovery_within_the_quota() {
    // GIVEN the small outage with up to 1,000 instances and a quota of 20/s: the backlog comes
    // back after recovery far faster than the provider takes it
    let mut sc = outage(true);
    sc.lambda.max_concurrency = 1000;
    sc.provider.quota_per_sec = 20.0;
    sc.send_rate = None;
    let unpaced = run(&sc).unwrap();
    sc.send_rate = Some(Scenario::send_rate_of(sc.provider.quota_per_sec));
    let paced = run(&sc).unwrap();
    let both = table(&[unpaced.clone(), paced.clone()]);
    // THEN unpaced, the backlog meets the provider far above its quota after recovery
    assert!(unpaced.secs_over_quota_after_recovery > 0, "{both}");
    assert!(unpaced.throttled > 0, "{both}");
    // AND paced, no second after recovery (or ever) holds more calls than the quota, nothing is
    // throttled, and every job is sent: none dead-lettered for an outage within its horizon
    assert_eq!(paced.secs_over_quota_after_recovery, 0, "{both}");
    assert!(f64::from(paced.peak_calls_per_sec) <= 20.0, "{both}");
    assert_eq!(paced.throttled, 0, "{both}");
    assert_eq!(paced.sent, 20_000, "{both}");
    assert_eq!(
        paced.dead_lettered + paced.redriven + paced.pending,
        0,
        "{both}"
    );
    // AND the breaker still caps the outage's amplification
    assert!(paced.outage.unwrap().calls_per_job <= 1.2, "{both}");
    // AND the jobs the schedule could not take waited in the queue instead
    assert!(paced.rate_refused > 0, "{both}");
}

/// A small receiver-throttle run: 30,000 jobs over 10 minutes (50/s), 40% of them to one domain
/// that accepts 10/s.
fn receiver_throttle(pacing: bool) -> Report {
    let mut sc = Scenario::preset("receiver-throttle").unwrap();
    sc.jobs = 30_000;
    sc.arrival_secs = 10 * 60;
    if let Some(r) = sc.receiver.as_mut() {
        r.accept_per_sec = 10.0;
    }
    if !pacing {
        sc.destination_pacing = None;
    }
    run(&sc).unwrap()
}

#[test]
fn a_throttling_receiver_is_paced_near_its_rate_and_other_domains_are_not_delayed() {
    let paced = receiver_throttle(true);
    let unpaced = receiver_throttle(false);
    let (p, u) = (
        paced.receiver.clone().unwrap(),
        unpaced.receiver.clone().unwrap(),
    );
    let both = table(&[paced.clone(), unpaced.clone()]);
    // THEN paced, every job of the domain is delivered, at most at its rate and above half of
    // it, with few throttle replies (a fraction of a percent of its jobs per decrease burst)
    assert_eq!(
        (p.jobs, p.sent, p.dead_lettered),
        (12_000, 12_000, 0),
        "{both}"
    );
    assert!(
        p.accepted_per_sec > 5.0 && p.accepted_per_sec <= 10.5,
        "{both}"
    );
    assert!(p.throttled * 20 < p.jobs, "{both}");
    assert!(p.lowered >= 1);
    // AND the other domains' mail goes as if nothing happened
    assert!(p.others_p50_secs < 1.0, "{both}");
    assert_eq!(paced.dead_lettered, 0, "{both}");
    // AND unpaced, the domain answers far more throttle replies (which no longer open the
    // provider's breaker for every domain: a receiver's throttle does not count against it)
    assert!(u.throttled > 10 * p.throttled.max(1), "{both}");
    assert_eq!(unpaced.dead_lettered, 0, "{both}");
}

/// Where instances are few (the template's `SendConcurrency` of 20), a send waits for its slot
/// at most a fraction of a second in its invocation: a batch ends with its slowest record, and
/// the 5 s waits of before held the drain, and every domain's mail, below the quota.
#[test]
fn with_few_instances_a_paced_domain_or_a_retry_storm_holds_no_other_mail_back() {
    let mut sc = Scenario::preset("receiver-throttle").unwrap();
    sc.jobs = 30_000;
    sc.arrival_secs = 10 * 60;
    sc.lambda.max_concurrency = 20;
    if let Some(r) = sc.receiver.as_mut() {
        r.accept_per_sec = 10.0;
    }
    let paced = run(&sc).unwrap();
    let p = paced.receiver.clone().unwrap();
    let shown = table(std::slice::from_ref(&paced));
    assert_eq!((p.sent, p.dead_lettered), (12_000, 0), "{shown}");
    assert!(p.others_p50_secs < 1.0, "{shown}");
    let storm = retry_storm(true, 20);
    let shown = table(std::slice::from_ref(&storm));
    assert_eq!((storm.sent, storm.dead_lettered), (100_000, 0), "{shown}");
    assert!(
        storm.fresh_after_recovery_p50_secs.unwrap() < 2.0,
        "{shown}"
    );
    assert!(
        storm.fresh_after_recovery_p99_secs.unwrap() < 10.0,
        "{shown}"
    );
}

/// A retry storm: 100,000 jobs over 30 minutes (56/s), a 10-minute outage from minute 5, a 100/s
/// quota, up to `instances` instances: after recovery the backlog's retries and fresh mail meet
/// on one schedule.
fn storm_scenario(instances: u32) -> Scenario {
    let mut sc = Scenario::preset("outage-30m").unwrap();
    sc.jobs = 100_000;
    sc.arrival_secs = 30 * 60;
    sc.faults[0].start_secs = 5 * 60;
    sc.faults[0].duration_secs = 10 * 60;
    sc.provider.quota_per_sec = 100.0;
    sc.send_rate = Some(Scenario::send_rate_of(100.0));
    sc.lambda.max_concurrency = instances;
    sc
}

/// The retry storm run with the retry lane or without.
fn retry_storm(lane: bool, instances: u32) -> Report {
    let mut sc = storm_scenario(instances);
    sc.retry_horizon = lane.then_some(courier_core::rate::RateLimit::DEFAULT_RETRY_HORIZON);
    run(&sc).unwrap()
}

#[test]
fn with_the_retry_lane_fresh_mail_is_not_held_back_by_a_retry_storm() {
    let (on, off) = (retry_storm(true, 50), retry_storm(false, 50));
    let both = table(&[on.clone(), off.clone()]);
    let fresh = |r: &Report| {
        (
            r.fresh_after_recovery_p50_secs.unwrap(),
            r.fresh_after_recovery_p99_secs.unwrap(),
        )
    };
    // THEN fresh mail arriving during the drain goes out within seconds with the lane, its
    // tail too, and waits minutes behind the backlog without it
    assert!(fresh(&on).0 < 2.0 && fresh(&on).1 < 10.0, "{both}");
    assert!(fresh(&off).0 > 10.0 * fresh(&on).0, "{both}");
    assert!(fresh(&off).1 > 30.0 * fresh(&on).1, "{both}");
    // AND nothing is lost and the quota is kept; all mail is out at most 10% later (the
    // backlog goes last)
    for r in [&on, &off] {
        assert_eq!((r.sent, r.dead_lettered), (100_000, 0), "{both}");
        assert_eq!(r.secs_over_quota_after_recovery, 0, "{both}");
    }
    assert!(on.makespan_secs <= off.makespan_secs * 1.1, "{both}");
}

/// The rate lane shares the send rate, not Lambda's concurrency: with instances too few for the
/// quota, fresh mail on the one queue waits behind the backlog before any instance sees it. The
/// retry queue (its own event source) leaves the send queue's instances to fresh mail.
#[test]
fn with_the_retry_queue_fresh_mail_keeps_its_instances_through_a_retry_storm() {
    // GIVEN the retry storm with 4 instances on the send queue and 2 on the retry queue,
    // AND the same storm on one queue polled by 6
    let mut sc = storm_scenario(4);
    sc.retry_concurrency = Some(2);
    let reports = crate::compare(&sc, "queues").unwrap();
    let (two, one) = (&reports[0], &reports[1]);
    let both = table(&reports);
    assert_eq!(
        (one.retry_queue.as_str(), one.max_concurrency),
        ("off", 6),
        "{both}"
    );
    // THEN fresh mail arriving during the drain goes out within a second with the retry queue,
    // and waits minutes behind the backlog on one queue
    let fresh = |r: &Report| {
        (
            r.fresh_after_recovery_p50_secs.unwrap(),
            r.fresh_after_recovery_p99_secs.unwrap(),
        )
    };
    assert!(fresh(two).0 < 2.0 && fresh(two).1 < 10.0, "{both}");
    assert!(fresh(one).0 > 60.0, "{both}");
    // AND nothing is lost, the quota is kept, and the backlog is out at most 20% later
    for r in [two, one] {
        assert_eq!((r.sent, r.dead_lettered), (100_000, 0), "{both}");
        assert_eq!(r.secs_over_quota_after_recovery, 0, "{both}");
    }
    assert!(two.makespan_secs <= one.makespan_secs * 1.2, "{both}");
    // AND the retry queue's source runs its 2 instances at most
    assert!(
        two.retry_queue.ends_with("2 instances at most (2 at once)"),
        "{both}"
    );
}

/// Jobs of which most go to one recipient the relay refuses with `reply`, as the function's
/// Postfix does (`421` at RCPT TO).
fn refused_recipient(reply: &str) -> Report {
    let mut sc = Scenario {
        jobs: 2_000,
        arrival_secs: 60,
        ..Scenario::default()
    };
    sc.provider.quota_per_sec = 1e6;
    sc.mix = vec![RecipientShare {
        share: 0.8,
        reply: reply.to_owned(),
    }];
    run(&sc).unwrap()
}

#[test]
fn a_relay_refusing_one_recipient_does_not_open_the_breaker_as_in_the_function() {
    // GIVEN 80% of the jobs to a recipient the relay answers `421 4.7.0`, naming it
    let named = refused_recipient(
        "421 4.7.0 <busy@courier.test>: Recipient address rejected: try again later",
    );
    // AND the same reply naming nobody (the relay's own state)
    let unnamed = refused_recipient("421 4.7.0 try again later");
    let both = table(&[named.clone(), unnamed.clone()]);
    // THEN only the reply about the relay itself opens the circuit
    assert_eq!(named.breaker_opened, 0, "{both}");
    assert!(unnamed.breaker_opened > 0, "{both}");
    // AND the other recipients' mail goes either way
    assert_eq!(named.sent, 400, "{both}");
}
