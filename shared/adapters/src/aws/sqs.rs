//! SQS and Step Functions adapters: re-enqueued retries and dead letters.

use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};

use super::store_error as err;
use courier_core::delay::DelayInput;
use courier_core::job::fingerprint;
use courier_core::limits::sqs_batches;
use courier_core::ports::{DeadLetter, DeadLetterSink, Requeue, RetryScheduler, StoreError};

/// Retries: `SendMessageBatch` to the send queue for delays up to 900 s, the delay state
/// machine beyond.
pub struct SqsRetryScheduler {
    sqs: aws_sdk_sqs::Client,
    sfn: aws_sdk_sfn::Client,
    queue_url: String,
    state_machine_arn: String,
}

impl SqsRetryScheduler {
    pub fn new(
        sqs: aws_sdk_sqs::Client,
        sfn: aws_sdk_sfn::Client,
        queue_url: impl Into<String>,
        state_machine_arn: impl Into<String>,
    ) -> Self {
        SqsRetryScheduler {
            sqs,
            sfn,
            queue_url: queue_url.into(),
            state_machine_arn: state_machine_arn.into(),
        }
    }
}

#[async_trait::async_trait]
impl RetryScheduler for SqsRetryScheduler {
    async fn enqueue(&self, items: &[Requeue]) -> Vec<Result<(), StoreError>> {
        let mut results: Vec<Result<(), StoreError>> = Vec::with_capacity(items.len());
        let sizes: Vec<usize> = items.iter().map(|i| i.body.len()).collect();
        for batch in sqs_batches(&sizes) {
            let chunk = &items[batch];
            let mut request = self.sqs.send_message_batch().queue_url(&self.queue_url);
            for (i, item) in chunk.iter().enumerate() {
                let entry = SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(&item.body)
                    .delay_seconds(i32::try_from(item.delay_secs.min(900)).unwrap_or(900))
                    .build();
                match entry {
                    Ok(entry) => request = request.entries(entry),
                    Err(e) => {
                        results.extend(
                            chunk
                                .iter()
                                .map(|_| Err(StoreError::msg("re-enqueue", e.to_string()))),
                        );
                        continue;
                    }
                }
            }
            match request.send().await {
                Ok(out) => {
                    for i in 0..chunk.len() {
                        let id = i.to_string();
                        let failed = out.failed.iter().find(|f| f.id == id);
                        results.push(match failed {
                            None => Ok(()),
                            Some(f) => Err(StoreError::msg(
                                "re-enqueue",
                                format!("{}: {}", f.code, f.message.as_deref().unwrap_or("")),
                            )),
                        });
                    }
                }
                Err(e) => {
                    let e = err("re-enqueue")(e);
                    results.extend(
                        chunk
                            .iter()
                            .map(|_| Err(StoreError::msg("re-enqueue", e.message.clone()))),
                    );
                }
            }
        }
        results
    }

    /// Starts the delay state machine. The execution name derives from the body, so a retried
    /// start of the same copy is absorbed by Step Functions (same name and input).
    async fn start_wait(&self, item: &Requeue) -> Result<(), StoreError> {
        let input = DelayInput {
            delay_seconds: item.delay_secs,
            queue_url: self.queue_url.clone(),
            body: item.body.clone(),
        };
        let input = serde_json::to_string(&input).map_err(|e| StoreError::new("start wait", e))?;
        let name = format!("courier-{}", &fingerprint(item.body.as_bytes())[..64]);
        match self
            .sfn
            .start_execution()
            .state_machine_arn(&self.state_machine_arn)
            .name(name)
            .input(input)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_execution_already_exists()) =>
            {
                Ok(())
            }
            Err(e) => Err(err("start wait")(e)),
        }
    }
}

/// Dead letters: one SQS message per letter on the dead-letter queue, body the full record as
/// JSON, with message attributes for routing and filtering.
pub struct SqsDeadLetterSink {
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
}

impl SqsDeadLetterSink {
    pub fn new(sqs: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        SqsDeadLetterSink {
            sqs,
            queue_url: queue_url.into(),
        }
    }
}

fn attr(value: &str) -> Result<MessageAttributeValue, StoreError> {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .map_err(|e| StoreError::new("dead letter", e))
}

#[async_trait::async_trait]
impl DeadLetterSink for SqsDeadLetterSink {
    async fn put(&self, letter: &DeadLetter) -> Result<(), StoreError> {
        let body = serde_json::to_string(letter).map_err(|e| StoreError::new("dead letter", e))?;
        let mut request = self
            .sqs
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body)
            .message_attributes("courier-category", attr(letter.category.as_str())?)
            .message_attributes("courier-class", attr(letter.class.as_str())?);
        if let Some(campaign) = letter.campaign_id.as_deref().filter(|c| !c.is_empty()) {
            request = request.message_attributes("courier-campaign", attr(campaign)?);
        }
        request.send().await.map_err(err("dead letter"))?;
        Ok(())
    }
}
