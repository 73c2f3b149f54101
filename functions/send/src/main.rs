//! The send Lambda: wires the pipeline once at INIT, then serves SQS batches.

use std::sync::Arc;

use aws_lambda_events::sqs::SqsEvent;
use lambda_runtime::{Error, LambdaEvent, service_fn};

// One thread: Lambda hands an instance one invocation at a time, and the work within it (the
// per-record tasks, the SDK's and lettre's connections) waits on I/O. A multi-threaded runtime
// would add a worker per core and its own malloc arena for each (BENCHMARKS.md, release binary).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    // A panic's message can quote a recipient: printed redacted (the default hook would not).
    courier_core::mailbox::redact_panic_messages();
    let pipeline = match courier_send::wiring::from_env().await {
        Ok(wired) => Arc::new(wired),
        Err(e) => {
            // Logged with the variable it names; Lambda reports the exit as an INIT failure.
            eprintln!("courier-send: cannot start: {e}");
            std::process::exit(1);
        }
    };
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let pipeline = Arc::clone(&pipeline);
        async move { courier_send::function_handler(&pipeline, event).await }
    }))
    .await
}
