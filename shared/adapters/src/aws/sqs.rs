//! SQS and Step Functions adapters: re-enqueued retries and dead letters.

use std::borrow::Cow;
use std::sync::Arc;

use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};

use super::store_error as err;
use courier_core::claim_check::stow;
use courier_core::delay::DelayInput;
use courier_core::job::fingerprint;
use courier_core::limits::sqs_batches;
use courier_core::ports::{
    DeadLetter, DeadLetterSink, PayloadStore, Requeue, RetryScheduler, StoreError,
};

/// Retries: `SendMessageBatch` to its queue (the retry queue, or the send queue without one) for
/// delays up to 900 s, the delay state machine beyond. A copy too large for a queue message goes through the payload store
/// (the claim check), when one is set.
pub struct SqsRetryScheduler {
    sqs: aws_sdk_sqs::Client,
    sfn: aws_sdk_sfn::Client,
    queue_url: String,
    state_machine_arn: String,
    payloads: Option<Arc<dyn PayloadStore>>,
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
            payloads: None,
        }
    }

    /// One `SendMessageBatch` of (index, body, delay) entries; one result per entry.
    async fn send_batch(
        &self,
        chunk: &[(usize, Cow<'_, str>, u64)],
    ) -> Vec<Result<(), StoreError>> {
        let mut request = self.sqs.send_message_batch().queue_url(&self.queue_url);
        for (i, (_, body, delay_secs)) in chunk.iter().enumerate() {
            let entry = SendMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .message_body(body.as_ref())
                .delay_seconds(i32::try_from((*delay_secs).min(900)).unwrap_or(900))
                .build();
            match entry {
                Ok(entry) => request = request.entries(entry),
                Err(e) => {
                    return chunk
                        .iter()
                        .map(|_| Err(StoreError::msg("re-enqueue", e.to_string())))
                        .collect();
                }
            }
        }
        match request.send().await {
            Ok(out) => (0..chunk.len())
                .map(|i| {
                    let id = i.to_string();
                    match out.failed.iter().find(|f| f.id == id) {
                        None => Ok(()),
                        Some(f) => Err(StoreError::msg(
                            "re-enqueue",
                            format!("{}: {}", f.code, f.message.as_deref().unwrap_or("")),
                        )),
                    }
                })
                .collect(),
            Err(e) => {
                let e = err("re-enqueue")(e);
                chunk
                    .iter()
                    .map(|_| Err(StoreError::msg("re-enqueue", e.message.clone())))
                    .collect()
            }
        }
    }

    /// Stores copies too large for a queue message in `payloads` (see
    /// [`courier_core::claim_check`]).
    pub fn with_payloads(self, payloads: Arc<dyn PayloadStore>) -> Self {
        SqsRetryScheduler {
            payloads: Some(payloads),
            ..self
        }
    }
}

#[async_trait::async_trait]
impl RetryScheduler for SqsRetryScheduler {
    async fn enqueue(&self, items: &[Requeue]) -> Vec<Result<(), StoreError>> {
        let mut results: Vec<Option<Result<(), StoreError>>> = Vec::with_capacity(items.len());
        // The queue body of each copy: itself, or its claim check (a failed store fails it).
        let mut ready: Vec<(usize, Cow<'_, str>, u64)> = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            match stow(self.payloads.as_deref(), &item.body).await {
                Ok(body) => {
                    ready.push((i, body, item.delay_secs));
                    results.push(None);
                }
                Err(e) => results.push(Some(Err(e))),
            }
        }
        let sizes: Vec<usize> = ready.iter().map(|(_, body, _)| body.len()).collect();
        for batch in sqs_batches(&sizes) {
            let chunk = &ready[batch];
            let outcome = self.send_batch(chunk).await;
            for ((i, ..), result) in chunk.iter().zip(outcome) {
                results[*i] = Some(result);
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(StoreError::msg("re-enqueue", "not sent"))))
            .collect()
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
/// A letter too large for a queue message goes through the payload store (the claim check),
/// when one is set.
pub struct SqsDeadLetterSink {
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    payloads: Option<Arc<dyn PayloadStore>>,
}

impl SqsDeadLetterSink {
    pub fn new(sqs: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        SqsDeadLetterSink {
            sqs,
            queue_url: queue_url.into(),
            payloads: None,
        }
    }

    /// Stores letters too large for a queue message in `payloads`.
    pub fn with_payloads(self, payloads: Arc<dyn PayloadStore>) -> Self {
        SqsDeadLetterSink {
            payloads: Some(payloads),
            ..self
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
        let body = stow(self.payloads.as_deref(), &body).await?.into_owned();
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
