//! The archiver Lambda (scheduled): wires once at INIT, then archives on every scheduled event
//! until its deadline nears.

use std::sync::Arc;

use lambda_runtime::{Error, LambdaEvent, service_fn};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let archiver = Arc::new(courier_archiver::wiring::from_env().await?);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<serde_json::Value>| {
        let archiver = Arc::clone(&archiver);
        async move { courier_archiver::function_handler(&archiver, event).await }
    }))
    .await
}
