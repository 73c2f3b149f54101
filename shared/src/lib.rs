//! Courier's shared library: the pure core every function, the CLI and the simulator use, and
//! the adapters that connect it to AWS and SMTP.
//!
//! # Layout
//! - [`job`]: the job contract (`EmailJob`), parsing and validation, payload fingerprints.
//! - [`classify`]: the error taxonomy and the classifiers for SMTP replies, SES v2 API errors,
//!   SES events and local failures.
//! - [`policy`]: the retry policy matrix and the decision after a failure.
//! - [`status`]: the forward-only job status machine.
//! - [`breaker`]: the circuit breaker state machine.
//! - [`reputation`]: the reputation guard's rates and thresholds.
//! - [`delay`]: the delay state machine definition and its input.
//! - [`letters`]: dead letters: ids, states, archive ages and layout, search filters.
//! - [`envelope`]: the queue message format (bare jobs and retry envelopes).
//! - [`render`]: strict template rendering.
//! - [`ports`]: the narrow capabilities the pipeline needs; [`memory`] implements each in memory.
//! - [`aws`]: adapters over the AWS SDK (DynamoDB, SQS, Step Functions, S3, SES v2).
//! - [`smtp`]: the SMTP mailer adapter (lettre).
//! - [`random`]: seedable randomness passed into the core.
//!
//! - [`workbench`]: the dead-letter workbench the CLI drives (replay, discard, stats).
//!
//! Nothing in the core modules touches the network, the clock or a random generator of its own:
//! time and randomness come in as arguments.

pub mod aws;
pub mod breaker;
pub mod classify;
pub mod delay;
pub mod envelope;
pub mod job;
pub mod letters;
pub mod memory;
pub mod policy;
pub mod ports;
pub mod random;
pub mod rate;
pub mod render;
pub mod reputation;
pub mod smtp;
pub mod status;
pub mod workbench;
