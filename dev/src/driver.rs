//! A local event-source driver with the semantics of Lambda's SQS event source mapping: receive
//! up to `batch_size` messages with the queue's visibility timeout, invoke the handler with an
//! SQS event, delete exactly the records not listed in `batchItemFailures`, and leave the rest
//! to reappear after the visibility timeout (SQS then redrives them to the DLQ after
//! maxReceiveCount). The emulators cannot run Lambda code, so tests and the local run use this.
//!
//! [`Driver::poll_once`] invokes the send pipeline; [`Driver::poll_with`] invokes any handler
//! (the local run drives the events function's handler on the events queue with it).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::sqs::SqsEvent;
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName};
use chrono::{DateTime, Utc};
use courier_core::ports::StoreError;

use courier_send::{BatchReport, Pipeline};

/// Counts from one poll.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PollStats {
    pub received: usize,
    pub deleted: usize,
    pub failed: usize,
}

/// Polls one queue for one function.
pub struct Driver {
    pub sqs: aws_sdk_sqs::Client,
    pub queue_url: String,
    pub queue_arn: String,
    pub batch_size: i32,
    /// Seconds a received batch stays invisible (the queue's visibility timeout on AWS).
    pub visibility_timeout: i32,
    /// Long-poll wait in seconds.
    pub wait_seconds: i32,
    /// The function's timeout: the handler's deadline is now + this.
    pub function_timeout: Duration,
}

impl Driver {
    /// A driver for `queue_url` as the local run sets Lambda's event source mapping up: batches
    /// of 10, 30 s visibility timeout and function timeout, 1 s long polls.
    pub fn new(sqs: aws_sdk_sqs::Client, queue_url: &str, queue_arn: &str) -> Driver {
        Driver {
            sqs,
            queue_url: queue_url.to_owned(),
            queue_arn: queue_arn.to_owned(),
            batch_size: 10,
            visibility_timeout: 30,
            wait_seconds: 1,
            function_timeout: Duration::from_secs(30),
        }
    }

    /// Receives one batch, invokes the send pipeline, deletes the successes.
    pub async fn poll_once(
        &self,
        pipeline: &Arc<Pipeline>,
        request_id: &str,
    ) -> Result<(PollStats, BatchReport), StoreError> {
        let (stats, report) = self
            .poll_with(|event, deadline| async move {
                let report = pipeline.handle(event, deadline, request_id).await;
                (report.failures.clone(), report)
            })
            .await?;
        Ok((stats, report.unwrap_or_default()))
    }

    /// Receives one batch and invokes `handler` with it and the invocation's deadline; the
    /// handler returns the SQS message ids of its `batchItemFailures` and its own report. The
    /// other records are deleted. `None` when the queue had nothing (the handler is not invoked,
    /// as Lambda does not invoke a function for an empty poll).
    pub async fn poll_with<R, F, Fut>(
        &self,
        handler: F,
    ) -> Result<(PollStats, Option<R>), StoreError>
    where
        F: FnOnce(SqsEvent, DateTime<Utc>) -> Fut,
        Fut: Future<Output = (Vec<String>, R)>,
    {
        let out = self
            .sqs
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(self.batch_size.clamp(1, 10))
            .visibility_timeout(self.visibility_timeout)
            .wait_time_seconds(self.wait_seconds)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .map_err(courier_adapters::aws::store_error("receive"))?;
        let messages = out.messages.unwrap_or_default();
        if messages.is_empty() {
            return Ok((PollStats::default(), None));
        }
        let records: Vec<serde_json::Value> = messages
            .iter()
            .map(|m| {
                let attributes: serde_json::Map<String, serde_json::Value> = m
                    .attributes
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k.as_str().to_owned(), serde_json::Value::String(v.clone())))
                    .collect();
                serde_json::json!({
                    "messageId": m.message_id,
                    "receiptHandle": m.receipt_handle,
                    "body": m.body,
                    "attributes": attributes,
                    "messageAttributes": {},
                    "md5OfBody": m.md5_of_body,
                    "eventSource": "aws:sqs",
                    "eventSourceARN": self.queue_arn,
                    "awsRegion": "us-east-1"
                })
            })
            .collect();
        let event: SqsEvent = serde_json::from_value(serde_json::json!({ "Records": records }))
            .map_err(|e| StoreError::new("build sqs event", e))?;
        let deadline = chrono::Utc::now()
            + chrono::Duration::from_std(self.function_timeout).unwrap_or_default();
        let (failures, report) = handler(event, deadline).await;
        let mut entries = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            let id = m.message_id.clone().unwrap_or_default();
            if failures.contains(&id) {
                continue;
            }
            if let Some(handle) = &m.receipt_handle {
                let entry = DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(handle)
                    .build()
                    .map_err(|e| StoreError::new("delete", e))?;
                entries.push(entry);
            }
        }
        let deleted = entries.len();
        if !entries.is_empty() {
            let out = self
                .sqs
                .delete_message_batch()
                .queue_url(&self.queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(courier_adapters::aws::store_error("delete"))?;
            if !out.failed.is_empty() {
                return Err(StoreError::msg(
                    "delete",
                    format!("{} deletes failed", out.failed.len()),
                ));
            }
        }
        Ok((
            PollStats {
                received: messages.len(),
                deleted,
                failed: failures.len(),
            },
            Some(report),
        ))
    }
}
