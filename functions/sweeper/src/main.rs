//! The sweeper Lambda (scheduled): wires once at INIT, then sweeps on every scheduled event
//! until its deadline nears.

use std::sync::Arc;

use lambda_runtime::{Error, LambdaEvent, service_fn};

// One thread: Lambda hands an instance one invocation at a time, and the work within it (the
// per-record tasks, the SDK's and lettre's connections) waits on I/O. A multi-threaded runtime
// would add a worker per core and its own malloc arena for each (BENCHMARKS.md, release binary).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    // A panic's message can quote a recipient: printed redacted (the default hook would not).
    courier_core::mailbox::redact_panic_messages();
    let settings = match courier_sweeper::Settings::from_lookup(|k| std::env::var(k).ok()) {
        Ok(s) => s,
        Err(e) => {
            // Logged with the variable it names; Lambda reports the exit as an INIT failure.
            eprintln!("courier-sweeper: cannot start: {e}");
            std::process::exit(1);
        }
    };
    let clients = courier_adapters::aws::Clients::new(&courier_adapters::aws::sdk_config().await);
    let sweeper = Arc::new(courier_sweeper::wire(&clients, settings));
    lambda_runtime::run(service_fn(move |event: LambdaEvent<serde_json::Value>| {
        let sweeper = Arc::clone(&sweeper);
        async move { courier_sweeper::function_handler(&sweeper, event).await }
    }))
    .await
}
