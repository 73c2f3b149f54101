//! Sending emails to Courier's queue: the port ([`QueueWriter`]), its SQS adapter, and
//! [`CourierQueue`], which splits batches by SQS's limits and retries only what failed.

use std::time::Duration;

use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use courier_core::claim_check::{ClaimCheck, MAX_INLINE_BYTES};
use courier_core::limits::sqs_batches;

use crate::email::Email;

/// What became of one entry of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryResult {
    /// On the queue, under SQS's message id.
    Sent { sqs_message_id: String },
    /// Refused. `sender_fault` says the request itself was wrong (not worth retrying).
    Failed {
        code: String,
        message: String,
        sender_fault: bool,
    },
}

/// A whole `SendMessageBatch` call that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct WriteError {
    pub code: String,
    pub message: String,
    /// A throttle, a server error or a lost connection: the call may succeed when repeated.
    pub transient: bool,
}

/// Writes message bodies to the queue, one batch (at most 10 bodies, 1 MiB in all) per call.
#[async_trait::async_trait]
pub trait QueueWriter: Send + Sync {
    /// One result per body, in order.
    async fn write_batch(&self, bodies: &[&str]) -> Result<Vec<EntryResult>, WriteError>;
}

/// [`QueueWriter`] on SQS's `SendMessageBatch`.
#[derive(Debug, Clone)]
pub struct SqsQueueWriter {
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
}

impl SqsQueueWriter {
    /// Writes to `queue_url` (the stack's `SendQueueUrl` output) with the application's client.
    pub fn new(sqs: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        SqsQueueWriter {
            sqs,
            queue_url: queue_url.into(),
        }
    }
}

/// Service error codes that a repeated call can get past (AWS: SQS common errors).
const TRANSIENT_CODES: &[&str] = &[
    "ThrottlingException",
    "RequestThrottled",
    "ServiceUnavailable",
    "InternalFailure",
    "InternalError",
    "KmsThrottled",
];

fn write_error<E: ProvideErrorMetadata + std::fmt::Debug>(e: SdkError<E>) -> WriteError {
    let transient = match &e {
        SdkError::ServiceError(service) => {
            service.raw().status().is_server_error()
                || service
                    .err()
                    .code()
                    .is_some_and(|code| TRANSIENT_CODES.contains(&code))
        }
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) | SdkError::ResponseError(_) => {
            true
        }
        _ => false,
    };
    WriteError {
        code: e.code().unwrap_or("Unhandled").to_owned(),
        message: e.message().map_or_else(|| format!("{e:?}"), str::to_owned),
        transient,
    }
}

#[async_trait::async_trait]
impl QueueWriter for SqsQueueWriter {
    async fn write_batch(&self, bodies: &[&str]) -> Result<Vec<EntryResult>, WriteError> {
        let mut request = self.sqs.send_message_batch().queue_url(&self.queue_url);
        for (i, body) in bodies.iter().enumerate() {
            let entry = SendMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .message_body(*body)
                .build()
                .map_err(|e| WriteError {
                    code: "BuildError".to_owned(),
                    message: e.to_string(),
                    transient: false,
                })?;
            request = request.entries(entry);
        }
        let out = request.send().await.map_err(write_error)?;
        Ok((0..bodies.len())
            .map(|i| {
                let id = i.to_string();
                if let Some(ok) = out.successful.iter().find(|s| s.id == id) {
                    EntryResult::Sent {
                        sqs_message_id: ok.message_id.clone(),
                    }
                } else if let Some(failed) = out.failed.iter().find(|f| f.id == id) {
                    EntryResult::Failed {
                        code: failed.code.clone(),
                        message: failed.message.clone().unwrap_or_default(),
                        sender_fault: failed.sender_fault,
                    }
                } else {
                    EntryResult::Failed {
                        code: "MissingFromAnswer".to_owned(),
                        message: "SQS's answer names this entry neither sent nor failed".to_owned(),
                        sender_fault: false,
                    }
                }
            })
            .collect())
    }
}

/// Stores attachments in the stack's payload bucket.
#[async_trait::async_trait]
pub trait FileStore: Send + Sync + std::fmt::Debug {
    /// Writes `content` at `key` (content-addressed: writing it again is harmless).
    async fn put(&self, key: &str, content: &[u8]) -> Result<(), WriteError>;
}

/// [`FileStore`] on S3's `PutObject`.
#[derive(Debug, Clone)]
pub struct S3FileStore {
    s3: aws_sdk_s3::Client,
    bucket: String,
}

impl S3FileStore {
    /// Writes to `bucket` (the stack's `PayloadBucketName` output) with the application's client.
    pub fn new(s3: aws_sdk_s3::Client, bucket: impl Into<String>) -> Self {
        S3FileStore {
            s3,
            bucket: bucket.into(),
        }
    }
}

#[async_trait::async_trait]
impl FileStore for S3FileStore {
    async fn put(&self, key: &str, content: &[u8]) -> Result<(), WriteError> {
        self.s3
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .body(content.to_vec().into())
            .send()
            .await
            .map(|_| ())
            .map_err(write_error)
    }
}

/// An email on the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub message_id: String,
    pub sqs_message_id: String,
    /// Calls it took (1 when the first succeeded).
    pub attempts: u32,
}

/// An email that is not on the queue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// SQS refused it for a reason a retry cannot mend (a missing queue, no permission, ...).
    #[error("SQS refused the email {message_id}: {code}: {message}")]
    Refused {
        message_id: String,
        code: String,
        message: String,
    },
    /// Every attempt failed for a reason that could have passed; the last one is kept.
    #[error("the email {message_id} is not on the queue after {attempts} attempts: {last}")]
    GaveUp {
        message_id: String,
        attempts: u32,
        last: String,
    },
    /// An attachment could not be stored, so the email was not enqueued.
    #[error(
        "the email {message_id} is not on the queue: its attachment {key} was not stored: {reason}"
    )]
    Upload {
        message_id: String,
        key: String,
        reason: String,
    },
    /// The email has attachments, or a body above the claim-check threshold, and the queue no
    /// payload bucket to store them in.
    #[error(
        "the email {message_id} has attachments or a body too large for the queue, and no payload bucket is set: set COURIER_PAYLOAD_BUCKET (the stack's PayloadBucketName) or use CourierQueue::with_files"
    )]
    NoPayloadBucket { message_id: String },
}

/// Why the queue's address could not be found.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("set COURIER_QUEUE_URL to the send queue's URL, or COURIER_STACK to the stack's name")]
    Missing,
    #[error("cannot read the outputs of the stack {stack}: {message}")]
    Stack { stack: String, message: String },
    #[error("the stack {stack} has no SendQueueUrl output: is it a Courier stack?")]
    NoOutput { stack: String },
}

/// Courier's send queue, as producers see it.
///
/// Retrying is safe: Courier sends a `message_id` at most once, so an email enqueued twice
/// (after a call whose answer was lost, say) is dropped by the send function's claim.
#[derive(Debug, Clone)]
pub struct CourierQueue<W = SqsQueueWriter> {
    writer: W,
    files: Option<std::sync::Arc<dyn FileStore>>,
    /// Bodies longer than this go through the claim check.
    inline_limit: usize,
    max_attempts: u32,
    backoff: Duration,
    max_backoff: Duration,
}

impl CourierQueue<SqsQueueWriter> {
    /// The queue at `queue_url`, through the application's SQS client.
    pub fn new(sqs: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        CourierQueue::with_writer(SqsQueueWriter::new(sqs, queue_url))
    }

    /// The queue named by `COURIER_QUEUE_URL` (and the payload bucket by
    /// `COURIER_PAYLOAD_BUCKET`), or else by the `SendQueueUrl` and `PayloadBucketName` outputs
    /// of the stack named by `COURIER_STACK`.
    pub async fn from_env(sdk: &aws_config::SdkConfig) -> Result<Self, ConfigError> {
        let sqs = aws_sdk_sqs::Client::new(sdk);
        if let Some(url) = std::env::var("COURIER_QUEUE_URL")
            .ok()
            .filter(|u| !u.is_empty())
        {
            let queue = CourierQueue::new(sqs, url);
            return Ok(
                match std::env::var("COURIER_PAYLOAD_BUCKET")
                    .ok()
                    .filter(|b| !b.is_empty())
                {
                    Some(bucket) => {
                        queue.with_files(S3FileStore::new(aws_sdk_s3::Client::new(sdk), bucket))
                    }
                    None => queue,
                },
            );
        }
        match std::env::var("COURIER_STACK")
            .ok()
            .filter(|s| !s.is_empty())
        {
            Some(stack) => CourierQueue::from_stack(sdk, &stack).await,
            None => Err(ConfigError::Missing),
        }
    }

    /// The queue of the Courier stack `stack` (its `SendQueueUrl` output).
    pub async fn from_stack(sdk: &aws_config::SdkConfig, stack: &str) -> Result<Self, ConfigError> {
        let out = aws_sdk_cloudformation::Client::new(sdk)
            .describe_stacks()
            .stack_name(stack)
            .send()
            .await
            .map_err(|e| ConfigError::Stack {
                stack: stack.to_owned(),
                message: e.message().map_or_else(|| format!("{e:?}"), str::to_owned),
            })?;
        let output = |name: &str| {
            out.stacks()
                .iter()
                .flat_map(|s| s.outputs())
                .find(|o| o.output_key() == Some(name))
                .and_then(|o| o.output_value())
                .map(str::to_owned)
        };
        let url = output("SendQueueUrl").ok_or_else(|| ConfigError::NoOutput {
            stack: stack.to_owned(),
        })?;
        let queue = CourierQueue::new(aws_sdk_sqs::Client::new(sdk), url);
        Ok(match output("PayloadBucketName") {
            Some(bucket) => {
                queue.with_files(S3FileStore::new(aws_sdk_s3::Client::new(sdk), bucket))
            }
            None => queue,
        })
    }
}

impl<W: QueueWriter> CourierQueue<W> {
    /// A queue written through `writer`: 5 attempts, backoff from 100 ms doubling to 5 s.
    pub fn with_writer(writer: W) -> Self {
        CourierQueue {
            writer,
            files: None,
            inline_limit: MAX_INLINE_BYTES,
            max_attempts: 5,
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }

    /// Stores attachments through `files` (the stack's payload bucket).
    #[must_use]
    pub fn with_files(mut self, files: impl FileStore + 'static) -> Self {
        self.files = Some(std::sync::Arc::new(files));
        self
    }

    /// Sends bodies longer than `bytes` through the claim check: the body is stored in the
    /// payload bucket at `claim-check/{sha256}` and the queue carries a pointer the send
    /// function redeems (SQS bills by 64 KiB chunk, and some queues are set to a lower maximum
    /// size). At most, and by default, `MAX_INLINE_BYTES` (SQS's 1 MiB less room for the
    /// message attributes); at least 1 KiB.
    #[must_use]
    pub fn claim_check_above(mut self, bytes: usize) -> Self {
        self.inline_limit = bytes.clamp(1024, MAX_INLINE_BYTES);
        self
    }

    /// Calls per email at most (at least 1).
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Sends one email.
    pub async fn send(&self, email: &Email) -> Result<Sent, SendError> {
        let mut results = self.send_batch(std::slice::from_ref(email)).await;
        results.pop().unwrap_or_else(|| {
            Err(SendError::GaveUp {
                message_id: email.message_id().to_owned(),
                attempts: 0,
                last: "no result".to_owned(),
            })
        })
    }

    /// Sends `emails` in as few `SendMessageBatch` calls as SQS's limits allow, and returns one
    /// result per email, in order. Entries that failed for a transient reason (or whose whole
    /// call did) are sent again, alone with the other failures, up to the attempt limit.
    pub async fn send_batch(&self, emails: &[Email]) -> Vec<Result<Sent, SendError>> {
        let mut results: Vec<Option<Result<Sent, SendError>>> = vec![None; emails.len()];
        let mut pending: Vec<usize> = Vec::with_capacity(emails.len());
        let mut queued: Vec<String> = vec![String::new(); emails.len()];
        // Attachments and claim-checked bodies first: a job never reaches the queue before
        // everything it points to exists.
        for (i, email) in emails.iter().enumerate() {
            match self.stow(email).await {
                Ok(body) => {
                    queued[i] = body;
                    pending.push(i);
                }
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        let mut attempt = 0;
        while !pending.is_empty() {
            attempt += 1;
            let sizes: Vec<usize> = pending.iter().map(|&i| queued[i].len()).collect();
            let mut again: Vec<(usize, String)> = Vec::new();
            for range in sqs_batches(&sizes) {
                let members = &pending[range];
                let bodies: Vec<&str> = members.iter().map(|&i| queued[i].as_str()).collect();
                let answers = match self.writer.write_batch(&bodies).await {
                    Ok(answers) => answers,
                    Err(e) => members
                        .iter()
                        .map(|_| EntryResult::Failed {
                            code: e.code.clone(),
                            message: e.message.clone(),
                            sender_fault: !e.transient,
                        })
                        .collect(),
                };
                for (&i, answer) in members.iter().zip(answers) {
                    let message_id = emails[i].message_id().to_owned();
                    results[i] = match answer {
                        EntryResult::Sent { sqs_message_id } => Some(Ok(Sent {
                            message_id,
                            sqs_message_id,
                            attempts: attempt,
                        })),
                        EntryResult::Failed {
                            code,
                            message,
                            sender_fault: true,
                        } => Some(Err(SendError::Refused {
                            message_id,
                            code,
                            message,
                        })),
                        EntryResult::Failed { code, message, .. } => {
                            again.push((i, format!("{code}: {message}")));
                            None
                        }
                    };
                }
            }
            if again.is_empty() {
                break;
            }
            if attempt >= self.max_attempts {
                for (i, last) in again {
                    results[i] = Some(Err(SendError::GaveUp {
                        message_id: emails[i].message_id().to_owned(),
                        attempts: attempt,
                        last,
                    }));
                }
                break;
            }
            tokio::time::sleep(self.delay(attempt)).await;
            pending = again.into_iter().map(|(i, _)| i).collect();
        }
        results
            .into_iter()
            .zip(emails)
            .map(|(result, email)| {
                result.unwrap_or_else(|| {
                    Err(SendError::GaveUp {
                        message_id: email.message_id().to_owned(),
                        attempts: attempt,
                        last: "the writer answered for fewer entries than it was given".to_owned(),
                    })
                })
            })
            .collect()
    }

    /// Stores the email's attachments, and its body when it is longer than the claim-check
    /// threshold, each retried like a queue entry; returns what goes on the queue (the body, or
    /// the pointer to it).
    async fn stow(&self, email: &Email) -> Result<String, SendError> {
        let check = (email.body().len() > self.inline_limit).then(|| ClaimCheck::of(email.body()));
        if email.files().is_empty() && check.is_none() {
            return Ok(email.body().to_owned());
        }
        let message_id = email.message_id().to_owned();
        let Some(store) = &self.files else {
            return Err(SendError::NoPayloadBucket { message_id });
        };
        for (key, content) in email.files() {
            self.put(store.as_ref(), key, content, &message_id).await?;
        }
        match check {
            None => Ok(email.body().to_owned()),
            Some(check) => {
                self.put(
                    store.as_ref(),
                    &check.key,
                    email.body().as_bytes(),
                    &message_id,
                )
                .await?;
                Ok(check.to_body())
            }
        }
    }

    /// One object stored, retried while the failure is transient.
    async fn put(
        &self,
        store: &dyn FileStore,
        key: &str,
        content: &[u8],
        message_id: &str,
    ) -> Result<(), SendError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match store.put(key, content).await {
                Ok(()) => return Ok(()),
                Err(e) if e.transient && attempt < self.max_attempts => {
                    tokio::time::sleep(self.delay(attempt)).await;
                }
                Err(e) => {
                    return Err(SendError::Upload {
                        message_id: message_id.to_owned(),
                        key: key.to_owned(),
                        reason: e.to_string(),
                    });
                }
            }
        }
    }

    /// The wait after failed attempt `attempt` (1-based): the backoff doubled each time, capped.
    fn delay(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(16));
        self.backoff.saturating_mul(factor).min(self.max_backoff)
    }
}

#[cfg(test)]
mod tests;
