//! Courier's Rust client: enqueue email jobs from your own services.
//!
//! - [`Email::builder`] builds a job and validates it with the send function's own parser, on
//!   the very bytes that go on the queue, so an email this crate accepts never becomes an
//!   `invalid_job` dead letter.
//! - [`CourierQueue`] sends one email or a batch: `SendMessageBatch` calls split by SQS's limits
//!   (10 entries, 1 MiB in all), a result per email, and retries of only the entries that failed
//!   for a reason worth retrying.
//! - [`message_id_for`] turns your own key (an order number, say) into a stable `message_id`, so
//!   enqueueing the same email twice sends it once.
//! - [`Outcome::from_event`] reads the outcome events Courier publishes about each job, with the
//!   `metadata` you set on it (`examples/outcomes.rs`).
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use courier_client::{CourierQueue, Email};
//! let sdk = aws_config::load_from_env().await;
//! // COURIER_QUEUE_URL and COURIER_PAYLOAD_BUCKET, or COURIER_STACK's outputs
//! let queue = CourierQueue::from_env(&sdk).await?;
//! let email = Email::builder()
//!     .idempotency_key("order-4711/receipt")
//!     .campaign("receipts")
//!     .from("Shop <receipts@shop.example>")
//!     .to("ann@example.org")
//!     .subject("Your receipt")
//!     .text("Thanks for your order.")
//!     .attach("invoice.pdf", "application/pdf", std::fs::read("invoice.pdf")?)
//!     .build()?;
//! queue.send(&email).await?;
//! # Ok(())
//! # }
//! ```

mod email;
mod queue;

pub use courier_core::claim_check::MAX_INLINE_BYTES;
pub use courier_core::job::{EmailJob, JobError, Priority, ProviderHint};
/// An outcome event's detail (docs/outcomes.md): [`Outcome::from_event`] reads the event an
/// EventBridge rule on the stack's outcome bus delivers, or its detail alone.
pub use courier_core::outcome::{OutcomeDetail as Outcome, OutcomeEventError};
pub use courier_core::unsubscribe::UnsubscribeMode;
pub use email::{Email, EmailBuilder, InvalidEmail, MAX_BODY_BYTES, message_id_for};
pub use queue::{
    ConfigError, CourierQueue, EntryResult, FileStore, QueueWriter, S3FileStore, SendError, Sent,
    SqsQueueWriter, WriteError,
};
