//! Error taxonomy and classification.
//!
//! Every failure Courier meets (an SMTP reply, an SES v2 API error, an SES event, a local error)
//! becomes a [`Verdict`]: one [`ErrorClass`], whether a retry can help, whether the recipient must
//! be suppressed, the rule that decided it, and the provider's raw code and text.
//!
//! SMTP replies are judged in three passes, most specific first:
//! 1. wording rules: the real-world texts of major providers and MTAs, which win over codes that
//!    are missing or misleading (Yahoo's `554 delivery error: dd This user doesn't have...`,
//!    Microsoft's `550 5.4.1 ... Access denied. AS(201806281)`, `550 5.7.1 ... User unknown`);
//! 2. the RFC 3463 enhanced status code (`class.subject.detail`);
//! 3. the basic RFC 5321 reply code.
//!
//! The reply code's first digit still bounds the verdict: a `4xx` reply is never turned into a
//! permanent class (the receiver said "later"), so a permanent-sounding text on a `4xx` is mapped
//! to its transient counterpart (a `4xx` about our own sender is retried as `mailbox_temporary`,
//! without feeding the provider breaker). A `5xx` reply is never our socket error: the network
//! wording rule applies only to replies without a code or with a `4xx` one.

//!
//! # Layout
//! - `taxonomy`: [`ErrorClass`], [`Source`], [`Verdict`], [`EnhancedCode`].
//! - `smtp`: [`SmtpReply`] and [`classify_smtp`]; `rules`: its wording rules, as data;
//!   `signals`: the words that call a failure permanent or temporary, refuse, or name a condition
//!   that may pass;
//!   `registry`: IANA's enhanced status codes, each with its classes, as data.
//! - `ses_api`: [`classify_ses_api`] for SES v2 API errors.
//! - `ses_events`: [`classify_ses_event`] for SES bounce, complaint, reject and rendering events.

mod phrases;
mod registry;
mod rules;
mod ses_api;
mod ses_events;
mod signals;
mod smtp;
mod taxonomy;

pub use ses_api::*;
pub use ses_events::*;
pub use smtp::*;
pub use taxonomy::*;

#[cfg(test)]
mod tests;
