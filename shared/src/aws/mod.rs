//! Adapters over the AWS SDK clients, one per port: DynamoDB (status, suppression, breaker,
//! poison), SQS and Step Functions (retries, dead letters), S3 (templates), SES v2 (mailer).
//! Endpoints come from the environment (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_<SERVICE>`), so
//! the same code runs against the emulators and AWS.

pub mod dynamodb;
pub mod provision;
pub mod s3;
pub mod ses;
pub mod sqs;

pub use dynamodb::{DynamoDbControlTable, DynamoDbStatusStore, DynamoDbSuppressionList};
pub use s3::S3TemplateStore;
pub use ses::SesMailer;
pub use sqs::{SqsDeadLetterSink, SqsRetryScheduler};

use aws_smithy_runtime_api::client::result::SdkError;

use crate::ports::StoreError;

/// Turns an SDK error into a [`StoreError`] that keeps the SDK error as its source and the
/// full context (code, message, request id) in its message.
pub fn store_error<E, R>(operation: &'static str) -> impl FnOnce(SdkError<E, R>) -> StoreError
where
    E: std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    move |e| StoreError {
        operation,
        message: aws_smithy_types::error::display::DisplayErrorContext(&e).to_string(),
        source: Some(Box::new(e)),
    }
}

/// Loads the SDK configuration from the environment.
pub async fn sdk_config() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .load()
        .await
}
