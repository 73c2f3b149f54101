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

pub use courier_core::job::{EmailJob, JobError, Priority, ProviderHint};
pub use email::{Email, EmailBuilder, InvalidEmail, message_id_for};
pub use queue::{
    ConfigError, CourierQueue, EntryResult, FileStore, QueueWriter, S3FileStore, SendError, Sent,
    SqsQueueWriter, WriteError,
};
