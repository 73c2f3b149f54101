//! The send Lambda: wires the pipeline once at INIT, then serves SQS batches.

use std::sync::Arc;

use aws_lambda_events::sqs::SqsEvent;
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let pipeline = Arc::new(courier_send::wiring::from_env().await?);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let pipeline = Arc::clone(&pipeline);
        async move { courier_send::function_handler(&pipeline, event).await }
    }))
    .await
}
