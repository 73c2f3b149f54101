//! Courier's adapters: the core's ports over the outside world, each named `<Tech><Port>`.
//!
//! # Layout
//! - [`aws`]: the AWS SDK clients (shared HTTPS client, endpoints, call counting) and one adapter
//!   per port: [`aws::dynamodb`] (status, suppression, control table), [`aws::letters`] (letter
//!   index, letter queue, archive), [`aws::sqs`] (retries through SQS or the delay state machine,
//!   dead letters), [`aws::s3`] (templates), [`aws::ses`] (the SES v2 mailer).
//! - [`smtp`]: the SMTP mailer (lettre); [`smtp_secret`]: with its credentials in a secret.
//! - [`https`]: SNS signing certificates over HTTPS (the events function's signature checks).
//! - [`clock`]: the system clock and the entropy that seeds jitter.
//! - [`live_settings`]: the live settings document as an instance reads it.

pub mod aws;
pub mod clock;
pub mod https;
pub mod live_settings;
pub mod seal_secret;
pub mod smtp;
pub mod smtp_secret;
