//! The unsubscribe Lambda (behind its function URL): wires once at INIT, reading the token keys
//! eagerly, then answers each HTTP request.

use std::sync::Arc;

use aws_lambda_events::event::lambda_function_urls::LambdaFunctionUrlRequest;
use lambda_runtime::{Error, LambdaEvent, service_fn};

// One thread: one request at a time per instance, waiting on I/O (as the other functions).
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    // A panic's message can quote a recipient: printed redacted (the default hook would not).
    courier_core::mailbox::redact_panic_messages();
    let settings = match courier_unsubscribe::Settings::from_lookup(|k| std::env::var(k).ok()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("courier-unsubscribe: cannot start: {e}");
            std::process::exit(1);
        }
    };
    let clients = courier_adapters::aws::Clients::new(&courier_adapters::aws::sdk_config().await);
    let unsubscriber = Arc::new(courier_unsubscribe::wire(&clients, &settings));
    if let Err(e) = unsubscriber.keys.keys().await {
        eprintln!("courier-unsubscribe: cannot start: COURIER_UNSUBSCRIBE_KEY_SECRET: {e}");
        std::process::exit(1);
    }
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<LambdaFunctionUrlRequest>| {
            let unsubscriber = Arc::clone(&unsubscriber);
            async move { Ok::<_, Error>(unsubscriber.handle(&event.payload).await) }
        },
    ))
    .await
}
