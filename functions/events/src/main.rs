//! The events Lambda: wires once at INIT, then applies SES events from SQS batches.

use std::sync::Arc;

use aws_lambda_events::sqs::SqsEvent;
use courier::aws::{Clients, DynamoDbStatusStore, DynamoDbSuppressionList};
use courier::ports::SystemClock;
use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let status_table =
        std::env::var("COURIER_STATUS_TABLE").map_err(|_| "COURIER_STATUS_TABLE is required")?;
    let suppression_table = std::env::var("COURIER_SUPPRESSION_TABLE")
        .map_err(|_| "COURIER_SUPPRESSION_TABLE is required")?;
    let clients = Clients::new(&courier::aws::sdk_config().await);
    let applier = Arc::new(courier_events::Applier {
        status: Arc::new(DynamoDbStatusStore::new(
            clients.dynamodb.clone(),
            status_table,
            std::time::Duration::from_secs(30 * 24 * 3600),
        )),
        suppression: Arc::new(DynamoDbSuppressionList::new(
            clients.dynamodb,
            suppression_table,
        )),
        clock: Arc::new(SystemClock),
    });
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let applier = Arc::clone(&applier);
        async move { courier_events::function_handler(&applier, event).await }
    }))
    .await
}
