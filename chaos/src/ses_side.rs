//! SES's side of a run. Every message moto's SES accepted (read from moto's own state) becomes
//! the events SES would publish ([`courier_dev::ses`]: a delivery, or the bounce its recipient's
//! script names), on the stack's events queue, where the events function's real handler (wired
//! as at Lambda INIT, in this process, through the local driver) applies them: deliveries,
//! permanent bounces and their suppressions, transient bounces and their resends, and sends left
//! `unknown` resolved by SES's evidence.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use courier_dev::ses::{Accepted, Destination, EventPublisher};
use courier_devkit::provision::Provisioned;

use crate::run::RunError;

/// What the SES side did, for the run's report.
#[derive(Debug, Default)]
pub struct Totals {
    pub accepted: AtomicU64,
    pub published: AtomicU64,
    pub batches: AtomicU64,
    pub failed_records: AtomicU64,
    /// Rounds in which moto's state could not be read or the events not published (tried
    /// again the next round).
    pub errors: AtomicU64,
}

/// The publisher and the events function's instances, running until [`SesSide::stop`].
pub struct SesSide {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    pub totals: Arc<Totals>,
}

/// Starts the publisher (a round a second) and `instances` events-function instances.
pub async fn start(
    sdk: &aws_config::SdkConfig,
    stack: &Provisioned,
    moto_url: String,
    policy: &str,
    instances: usize,
) -> Result<SesSide, RunError> {
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let policy = courier_core::policy::RetryPolicy::from_json(policy)
        .map_err(|e| RunError::Msg(format!("the run's retry policy: {e}")))?;
    let applier = Arc::new(courier_events::wiring::wire(
        &courier_adapters::aws::Clients::new(sdk),
        &courier_dev::events_settings(stack, policy),
    )?);
    let events_queue_arn = courier_dev::queue_arn(&sqs, &stack.events_queue_url).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let totals = Arc::new(Totals::default());
    let mut tasks = Vec::new();
    let destination = Destination {
        events_queue_url: stack.events_queue_url.clone(),
        topic_arn: format!(
            "arn:aws:sns:{}:123456789012:courier-chaos-ses-events",
            region()
        ),
        configuration_set: "courier-chaos".into(),
        region: region(),
        account: "123456789012".into(),
    };
    tasks.push(tokio::spawn(publish(
        EventPublisher::new(sqs.clone(), destination, Arc::default()),
        moto_url,
        Arc::clone(&stop),
        Arc::clone(&totals),
    )));
    for instance in 0..instances {
        let driver = courier_dev::driver::Driver::new(
            sqs.clone(),
            &stack.events_queue_url,
            &events_queue_arn,
        );
        let (applier, stop, totals) =
            (Arc::clone(&applier), Arc::clone(&stop), Arc::clone(&totals));
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let polled = driver
                    .poll_with(|event, _deadline| async {
                        let report = applier.handle(event).await;
                        (report.failures.clone(), report.failures.len())
                    })
                    .await;
                match polled {
                    Ok((_, Some(failed))) => {
                        totals.batches.fetch_add(1, Ordering::Relaxed);
                        totals
                            .failed_records
                            .fetch_add(failed as u64, Ordering::Relaxed);
                    }
                    Ok((_, None)) => {}
                    Err(e) => {
                        eprintln!("chaos: events instance {instance}: {e}");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        }));
    }
    Ok(SesSide {
        stop,
        tasks,
        totals,
    })
}

fn region() -> String {
    std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into())
}

/// Once a second: the messages moto's SES accepted since the last round, then their events.
async fn publish(
    mut publisher: EventPublisher,
    moto_url: String,
    stop: Arc<AtomicBool>,
    totals: Arc<Totals>,
) {
    let accepted: Arc<Mutex<Vec<Accepted>>> = publisher.accepted();
    let mut seen: HashSet<String> = HashSet::new();
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let state = match courier_devkit::moto::state(&moto_url).await {
            Ok(state) => courier_devkit::moto::ses_raw_messages(&state),
            Err(e) => Err(e),
        };
        match state {
            Ok(messages) => {
                let now = chrono::Utc::now();
                let new: Vec<Accepted> = messages
                    .iter()
                    .filter(|m| seen.insert(m.id.clone()))
                    .filter_map(|m| Accepted::from_raw(m, now))
                    .collect();
                totals
                    .accepted
                    .fetch_add(new.len() as u64, Ordering::Relaxed);
                accepted
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .extend(new);
            }
            Err(e) => {
                eprintln!("chaos: SES stand-in: {e}");
                totals.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        match publisher.publish_new().await {
            Ok(published) => {
                totals
                    .published
                    .fetch_add(published.events.values().sum(), Ordering::Relaxed);
            }
            Err(e) => {
                eprintln!("chaos: SES stand-in: {e}");
                totals.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl SesSide {
    /// Stops the publisher and the events instances (each finishes its batch).
    pub async fn stop(self) -> Arc<Totals> {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(30), task).await;
        }
        self.totals
    }
}
