//! The events Lambda: wires once at INIT, then applies SES events from SQS batches.

use std::sync::Arc;

use aws_lambda_events::sqs::SqsEvent;
use courier_adapters::aws::Clients;
use courier_events::wiring::{Settings, wire};
use lambda_runtime::{Error, LambdaEvent, service_fn};

// One thread: Lambda hands an instance one invocation at a time, and the work within it (the
// per-record tasks, the SDK's and lettre's connections) waits on I/O. A multi-threaded runtime
// would add a worker per core and its own malloc arena for each (BENCHMARKS.md, release binary).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    // A panic's message can quote a recipient: printed redacted (the default hook would not).
    courier_core::mailbox::redact_panic_messages();
    let settings = Settings::from_lookup(|k| std::env::var(k).ok())?;
    let clients = Clients::new(&courier_adapters::aws::sdk_config().await);
    // The seal keys are read at INIT: a missing or malformed secret stops the start.
    courier_events::wiring::seal_keys(&clients, &settings)
        .keys()
        .await?;
    let applier = Arc::new(wire(&clients, &settings)?);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let applier = Arc::clone(&applier);
        async move { courier_events::function_handler(&applier, event).await }
    }))
    .await
}
