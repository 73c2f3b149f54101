//! Courier's outage simulator: a discrete-event simulation that runs the real retry policy
//! (`courier_core::policy`), the real classifier (`courier_core::classify`) and the real circuit breaker
//! (`courier_core::breaker`) on a simulated clock, against models of SQS, Lambda's SQS event source,
//! Step Functions, DynamoDB and a provider with a send-rate quota and faults.
//!
//! A run is reproducible: every random draw comes from `courier_core::random::SeededRandom` seeded by
//! the scenario (one stream for the policy's jitter, one for the world).
//!
//! # Layout
//! - [`scenario`]: the input ([`Scenario`], presets, faults).
//! - [`engine`]: the models and the event loop; [`run`] runs one scenario.
//! - `wheel`: the event queue (a timing wheel of 1 ms slots).
//! - The send-rate governor: the real `courier_core::rate` schedule and allowance; an instance whose
//!   slot is ahead waits for it between records (`Ev::Send`), as the function sleeps.
//! - [`provider`]: the token-bucket quota, faults and replies (classified by the real classifier).
//! - [`breakers`]: each instance's cached view of the shared breaker, as the send function has it.
//! - [`cost`]: the AWS calls counted and the price table.
//! - [`report`]: the figures of a run and the side-by-side table.
//!
//! # What is modelled, and how
//! - SQS: a visible queue (received in order), per-message `DelaySeconds` (at most 900 s),
//!   receive counts and maxReceiveCount (then the redrive DLQ), the visibility timeout for
//!   records the function fails.
//! - Lambda: pollers start at `initial_concurrency` and grow by `ramp_per_minute` each minute the
//!   queue has a backlog, up to `max_concurrency`; with no backlog they shrink back. Batches of
//!   up to `batch_size`; records of a batch run concurrently (the batch lasts as long as its
//!   slowest send); the first invocation of an instance pays a cold start; idle pollers
//!   long-poll. Billed duration is the invocation's time.
//! - Step Functions: delays beyond 900 s wait in the delay state machine, then go back to the
//!   queue.
//! - The provider: a token bucket of `quota_per_sec` (throttling reply beyond it), latency with
//!   a spread, and the scenario's faults.
//! - Not modelled: SQS's approximate ordering and duplicate deliveries, DynamoDB throttling
//!   (except `aws_error_rate`), failover between providers (one provider), events from SES.

pub mod breakers;
pub mod cost;
pub mod engine;
pub mod provider;
pub mod report;
pub mod scenario;
mod wheel;

pub use engine::run;
pub use report::{ReceiverFigures, Report, table};
pub use scenario::{
    Fault, FaultKind, OutageReply, PRESETS, ReceiverModel, RecipientShare, Scenario,
};

use courier_core::breaker::BreakerConfig;
use courier_core::policy::Jitter;

/// The jitter strategies compared by `--compare jitter`, with their labels.
pub fn jitter_variants() -> Vec<(&'static str, Jitter)> {
    vec![
        ("none", Jitter::None),
        ("full", Jitter::Full),
        ("equal", Jitter::Equal),
        ("decorrelated", Jitter::Decorrelated),
        ("proportional 0.2", Jitter::Proportional { ratio: 0.2 }),
    ]
}

/// The breaker settings compared by `--compare breaker`.
pub fn breaker_variants() -> Vec<Option<BreakerConfig>> {
    let d = BreakerConfig::default();
    vec![
        None,
        Some(d),
        Some(BreakerConfig {
            min_calls: 5,
            open_secs: 15,
            ..d
        }),
        Some(BreakerConfig {
            min_calls: 50,
            open_secs: 60,
            ..d
        }),
    ]
}

/// Runs `base` once per variant of `what` (`jitter`, `breaker`, `governor`: paced at the
/// quota, Courier's default, then off; `pacing`: per-destination pacing on, then off; or
/// `bulkhead`: the retry bulkhead on, then off; `queues`: the retry queue with its own event
/// source, then one queue polled by as many instances as the two sources together); the
/// default policy's own jitter is the first column of a jitter comparison.
pub fn compare(base: &Scenario, what: &str) -> Result<Vec<Report>, String> {
    let scenarios: Vec<Scenario> = match what {
        "jitter" => std::iter::once(base.clone())
            .chain(
                jitter_variants()
                    .into_iter()
                    .map(|(label, j)| base.clone().with_jitter(j, label)),
            )
            .collect(),
        "breaker" => breaker_variants()
            .into_iter()
            .map(|b| Scenario {
                breaker: b,
                ..base.clone()
            })
            .collect(),
        "governor" => [
            Some(Scenario::send_rate_of(base.provider.quota_per_sec)),
            None,
        ]
        .into_iter()
        .map(|send_rate| Scenario {
            send_rate,
            ..base.clone()
        })
        .collect(),
        "bulkhead" => [
            base.retry_horizon
                .or(Some(courier_core::rate::RateLimit::DEFAULT_RETRY_HORIZON)),
            None,
        ]
        .into_iter()
        .map(|retry_horizon| Scenario {
            retry_horizon,
            ..base.clone()
        })
        .collect(),
        "queues" => {
            let Some(retry) = base.retry_concurrency else {
                return Err(
                    "--compare queues needs the retry queue's instances (--retry-instances)".into(),
                );
            };
            let mut one = base.clone();
            one.retry_concurrency = None;
            one.lambda.max_concurrency = base.lambda.max_concurrency.saturating_add(retry);
            vec![base.clone(), one]
        }
        "pacing" => [base.destination_pacing.or(Some(Default::default())), None]
            .into_iter()
            .map(|destination_pacing| Scenario {
                destination_pacing,
                ..base.clone()
            })
            .collect(),
        other => {
            return Err(format!(
                "cannot compare {other:?}: use jitter, breaker, governor, pacing, bulkhead or queues"
            ));
        }
    };
    run_all(&scenarios)
}

/// Runs scenarios on as many threads as there are cores; reports in the scenarios' order.
pub fn run_all(scenarios: &[Scenario]) -> Result<Vec<Report>, String> {
    let workers = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .clamp(1, scenarios.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut results: Vec<(usize, Result<Report, String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(sc) = scenarios.get(i) else {
                            return done;
                        };
                        done.push((i, run(sc)));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|_| vec![(usize::MAX, Err("a simulation panicked".into()))])
            })
            .collect()
    });
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests;
