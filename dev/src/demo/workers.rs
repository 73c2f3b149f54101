//! The functions as Lambda would run them on a stack on the emulator, for the demo and
//! `courier-dev serve`: send instances on the send queue, events instances on the events queue
//! (the local event-source driver), and SES's event destination ([`EventPublisher`]), each a task
//! that runs until `stop` is set.

use super::*;

/// A stack on the emulator named `prefix` for the local runs (the delay state machine as
/// `role`, maxReceiveCount 5, a 30 s visibility timeout), with SES's identity verified and a
/// configuration set: the stack and the set's name.
pub(super) async fn provision_with_ses(
    sdk: &aws_config::SdkConfig,
    prefix: &str,
    role: &str,
) -> Result<(courier_devkit::provision::Provisioned, String), DemoError> {
    let stack = provision(
        sdk,
        prefix,
        &format!("arn:aws:iam::{ACCOUNT}:role/{role}"),
        QueueSettings {
            max_receive_count: 5,
            visibility_timeout: Duration::from_secs(30),
        },
    )
    .await?;
    let configuration_set = format!("{prefix}-ses-configuration-set");
    prepare_ses(sdk, &configuration_set).await?;
    Ok((stack, configuration_set))
}

/// The send function wired to `stack` through SES (and SMTP when given), its SES mailer noting
/// what SES accepted into `accepted`; and the events function, admitting the stand-in's unsigned
/// notifications.
pub(super) fn functions(
    clients: &courier_adapters::aws::Clients,
    stack: &courier_devkit::provision::Provisioned,
    resources: &courier_send::config::Resources,
    config: SendConfig,
    policy: &str,
    accepted: &Arc<Mutex<Vec<ses::Accepted>>>,
) -> Result<(Arc<courier_send::Pipeline>, Arc<courier_events::Applier>), DemoError> {
    let mut pipeline = wiring::wire(clients, config, resources, RetryPolicy::from_json(policy)?)?;
    for mailer in &mut pipeline.mailers {
        if mailer.provider() == Provider::Ses {
            *mailer = Arc::new(SesAcceptLog::new(Arc::clone(mailer), Arc::clone(accepted)));
        }
    }
    let applier = courier_events::wiring::wire(
        clients,
        &courier_dev::events_settings(stack, RetryPolicy::from_json(policy)?),
    )?;
    Ok((Arc::new(pipeline), Arc::new(applier)))
}

/// `instances` send instances on the send queue and half as many (at least one) on the retry
/// queue (the template's two event sources), adding each batch's metrics to `totals`.
pub(super) fn spawn_send(
    instances: usize,
    sqs: &aws_sdk_sqs::Client,
    stack: &courier_devkit::provision::Provisioned,
    pipeline: &Arc<courier_send::Pipeline>,
    totals: &Arc<Mutex<BTreeMap<String, u64>>>,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let retry_arn = courier_dev::sibling_queue_arn(&stack.queue_arn, &stack.retry_queue_url);
    let lanes = [
        (
            stack.queue_url.as_str(),
            stack.queue_arn.as_str(),
            instances,
        ),
        (&stack.retry_queue_url, &retry_arn, instances.div_ceil(2)),
    ];
    lanes
        .into_iter()
        .flat_map(|(url, arn, n)| (0..n).map(move |k| (url, arn, k)))
        .enumerate()
        .map(|(instance, (url, arn, _))| {
            let driver = Driver::new(sqs.clone(), url, arn);
            let (pipeline, totals, stop) =
                (Arc::clone(pipeline), Arc::clone(totals), Arc::clone(stop));
            tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    match driver
                        .poll_once(&pipeline, &format!("instance-{instance}-{n}"))
                        .await
                    {
                        Ok((_, report)) => {
                            if let Ok(mut t) = totals.lock() {
                                for (k, v) in report.metrics.counts {
                                    *t.entry(k).or_default() += v;
                                }
                            }
                        }
                        Err(e) => {
                            eprintln!("instance {instance}: {e}");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                }
            })
        })
        .collect()
}

/// `instances` events instances on the events queue, adding what they applied to `events`.
pub(super) async fn spawn_events(
    instances: usize,
    sqs: &aws_sdk_sqs::Client,
    stack: &courier_devkit::provision::Provisioned,
    applier: &Arc<courier_events::Applier>,
    events: &Arc<Mutex<EventTotals>>,
    stop: &Arc<AtomicBool>,
) -> Result<Vec<tokio::task::JoinHandle<()>>, StoreError> {
    let events_queue_arn = queue_arn(sqs, &stack.events_queue_url).await?;
    Ok((0..instances)
        .map(|instance| {
            let driver = Driver::new(sqs.clone(), &stack.events_queue_url, &events_queue_arn);
            let (applier, events, stop) =
                (Arc::clone(applier), Arc::clone(events), Arc::clone(stop));
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let polled = driver
                        .poll_with(|event, _deadline| async {
                            let report = applier.handle(event).await;
                            (report.failures.clone(), report)
                        })
                        .await;
                    match polled {
                        Ok((_, Some(report))) => {
                            if let Ok(mut t) = events.lock() {
                                for a in &report.applied {
                                    *t.applied.entry(applied_key(a)).or_default() += 1;
                                }
                                t.unparseable += report.unparseable as u64;
                                t.rates.extend(report.rates);
                                t.paused.extend(report.tripped);
                            }
                        }
                        Ok((_, None)) => {}
                        Err(e) => {
                            eprintln!("events instance {instance}: {e}");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                }
            })
        })
        .collect())
}

/// SES's event destination: publishes the events of what SES accepted, every half second.
pub(super) fn spawn_publisher(
    mut publisher: EventPublisher,
    events: &Arc<Mutex<EventTotals>>,
    stop: &Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let (events, stop) = (Arc::clone(events), Arc::clone(stop));
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            match publisher.publish_new().await {
                Ok(round) => {
                    if let Ok(mut t) = events.lock() {
                        for (k, v) in round.events {
                            *t.published.entry(k).or_default() += v;
                        }
                        t.to_suppress.extend(round.to_suppress);
                    }
                }
                Err(e) => eprintln!("SES event destination: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
}

/// The stand-in's destination for `stack`: its events queue, as the topic of `prefix` would
/// deliver.
pub(super) fn destination(
    sdk: &aws_config::SdkConfig,
    stack: &courier_devkit::provision::Provisioned,
    prefix: &str,
    configuration_set: &str,
) -> Destination {
    Destination {
        events_queue_url: stack.events_queue_url.clone(),
        topic_arn: format!(
            "arn:aws:sns:{}:{ACCOUNT}:{prefix}-ses-events-topic",
            region(sdk)
        ),
        configuration_set: configuration_set.to_owned(),
        region: region(sdk),
        account: ACCOUNT.to_owned(),
    }
}
