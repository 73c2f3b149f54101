//! Courier's pure core: the job contract and every decision the functions, the CLI and the
//! simulator make, with no network, clock or random generator inside (time and randomness come
//! in as arguments; side effects go through [`ports`]).
//!
//! # Layout
//! - [`job`]: the job contract (`EmailJob`), parsing and validation, payload fingerprints;
//!   [`mailbox`]: RFC 5322 mailboxes (`addr`, `Name <addr>`), sender identities;
//!   [`senders`]: which templates each sender may use.
//! - [`envelope`]: the queue message format (bare jobs and retry envelopes).
//! - [`classify`]: the error taxonomy and the classifiers for SMTP replies, SES v2 API errors,
//!   SES events and local failures.
//! - [`policy`]: the retry policy matrix and the decision after a failure; [`plan`]: what
//!   that decision leads to (the copy and how it waits, the letter, the final status).
//! - [`status`]: the forward-only job status machine; [`recipients`]: each recipient's
//!   outcome, and the job status derived from them.
//! - [`breaker`]: the circuit breaker state machine.
//! - [`rate`]: the shared send-rate schedule (reservations against a provider's quota).
//! - [`reputation`]: the reputation guard's rates and thresholds.
//! - [`delay`]: the delay state machine definition and its input.
//! - [`letters`]: dead letters: ids, states, archive ages and layout, search filters.
//! - [`render`]: strict template rendering.
//! - [`ports`]: the narrow capabilities the pipeline needs (traits and their domain types);
//!   [`claim`]: leasing a job for sending and the claim rules every status store applies;
//!   `courier-adapters` implements them over AWS and SMTP, `courier-devkit` in memory.
//! - [`claim_check`]: bodies too large for a queue, stored apart and pointed to.
//! - [`random`]: seedable randomness passed into the core.
//! - [`unsubscribe`]: one-click unsubscribe: which jobs carry `List-Unsubscribe`, signed tokens,
//!   list-scoped suppression keys, the unsubscribe function's answers.

pub mod breaker;
pub mod claim;
pub mod claim_check;
pub mod classify;
pub mod delay;
pub mod envelope;
pub mod job;
pub mod letters;
pub mod limits;
pub mod live;
pub mod mailbox;
pub mod outcome;
pub mod pacing;
pub mod plan;
pub mod policy;
pub mod ports;
pub mod random;
pub mod rate;
pub mod recipients;
pub mod render;
pub mod reputation;
pub mod seal;
pub mod senders;
pub mod status;
pub mod trace;
pub mod unsubscribe;
