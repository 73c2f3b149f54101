//! `courier-dev serve`: a stack on the emulator, run as Lambda and SES would run it, for
//! `courierctl smoke` and trying jobs by hand. It provisions the stack (sending through SES only,
//! as the template's default; the identity `courier.test` verified, a configuration set made),
//! prints the settings courierctl reads as `export` lines and then `serving`, and runs the send
//! and events functions, the unsubscribe function on a loopback function URL and the SES stand-in
//! (see `ses`: the simulator's addresses get their events) until `--seconds` have passed. Retry waits follow the demo's compressed policy.

use std::io::Write;

use super::*;

/// Runs the stack for `seconds`; the exit code is 0 unless it could not start.
pub(crate) fn run(
    prefix: Option<String>,
    seconds: u64,
    out: &mut dyn Write,
) -> Result<i32, DemoError> {
    let prefix = prefix.unwrap_or_else(|| format!("courier-serve-{}", std::process::id()));
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(serve(prefix, Duration::from_secs(seconds), out))
}

async fn serve(prefix: String, serve_for: Duration, out: &mut dyn Write) -> Result<i32, DemoError> {
    env("AWS_ENDPOINT_URL")?;
    let sdk = courier_adapters::aws::sdk_config().await;
    let (stack, configuration_set) =
        workers::provision_with_ses(&sdk, &prefix, "courier-serve").await?;
    let mut resources = crate::send_resources(
        &stack,
        &[Provider::Ses],
        Some(configuration_set.clone()),
        None,
    );
    let clients = courier_adapters::aws::Clients::new(&sdk);
    // The unsubscribe function on a loopback function URL, linked from bulk mail as on AWS.
    let unsubscribe =
        super::unsubscribe::start(&sdk, &clients, &stack.suppression_table, &prefix).await?;
    resources.unsubscribe = Some(unsubscribe.settings);
    let accepted: Arc<Mutex<Vec<ses::Accepted>>> = Arc::default();
    let config = SendConfig {
        ambiguity_grace: Duration::from_secs(30),
        ..SendConfig::default()
    };
    let (pipeline, applier) =
        workers::functions(&clients, &stack, &resources, config, DEMO_POLICY, &accepted)?;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let stop = Arc::new(AtomicBool::new(false));
    let totals: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let events: Arc<Mutex<EventTotals>> = Arc::default();
    let mut tasks = workers::spawn_send(2, &sqs, &stack, &pipeline, &totals, &stop);
    tasks.extend(workers::spawn_events(1, &sqs, &stack, &applier, &events, &stop).await?);
    let publisher = EventPublisher::new(
        sqs.clone(),
        workers::destination(&sdk, &stack, &prefix, &configuration_set),
        accepted,
    );
    tasks.push(workers::spawn_publisher(publisher, &events, &stop));
    for (k, v) in [
        ("COURIER_QUEUE_URL", &stack.queue_url),
        ("COURIER_STATUS_TABLE", &stack.status_table),
        ("COURIER_SUPPRESSION_TABLE", &stack.suppression_table),
        ("COURIER_CONTROL_TABLE", &stack.control_table),
        ("COURIER_LETTER_INDEX_TABLE", &stack.letter_index_table),
        ("COURIER_ENVELOPE_KEY_SECRET", &stack.envelope_key_secret),
        ("COURIER_OUTCOME_BUS", &stack.outcome_bus),
    ] {
        writeln!(out, "export {k}='{v}'")?;
    }
    writeln!(
        out,
        "# send as any address @{DOMAIN} (verified on the emulator's SES)"
    )?;
    writeln!(out, "serving")?;
    out.flush()?;
    tokio::time::sleep(serve_for).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = task.await;
    }
    let totals = totals.lock().map(|t| t.clone()).unwrap_or_default();
    eprintln!(
        "courier-dev serve: stopped after {} s; send metrics {totals:?}",
        serve_for.as_secs()
    );
    Ok(0)
}
