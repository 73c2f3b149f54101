//! IANA's SMTP Enhanced Status Codes registry (RFC 3463, RFC 5248 and the RFCs that registered
//! codes since), as data: each registered `subject.detail` with the class a transient (`4.x.x`)
//! and a permanent (`5.x.x`) status implies, the registry's title in the comment. A detail the
//! registry does not list (a provider's own, such as `5.7.708`) takes its subject's default.
//! `None`: the status alone names no class, and the basic reply code decides.

use super::ErrorClass::{self, *};

/// A registered code: subject, detail, class when transient, class when permanent.
pub(super) type Entry = (u16, u16, Option<ErrorClass>, Option<ErrorClass>);

/// Every code of the registry. Choices that are not the obvious reading:
/// - a full mailbox (`X.2.2`) is temporary even as `5.2.2`: it empties;
/// - `5.1.x` addressing failures of the destination are a dead address, but a sender's
///   (`X.1.7`, `X.1.8`) is our own configuration, and an ambiguous one (`X.1.4`) names no dead
///   mailbox: the basic code decides;
/// - `5.7.1` is used for every kind of refusal (sender, IP, recipient, content): no class
///   without the wording rules;
/// - codes RFC 3463 calls "useful only as a persistent transient error" are retried even as
///   `5.x.x` (a relay that gave up on them): `X.3.1`, `X.4.2`, `X.4.3`, `X.4.5`; not `X.4.1`,
///   which Exchange Online uses for an unknown recipient ("5.4.1 Recipient address rejected:
///   Access denied"), nor `X.4.6`, a loop that resending cannot cure;
/// - `5.4.7`, a relay's queue lifetime ran out: RFC 3463 asks for the actual problem's code
///   where possible, so a bare `X.4.7` means the relay met only passing failures: retried;
/// - `5.3.2` (postscreen's `521 5.3.2`) is a drop with its reason hidden, not an outage.
pub(super) static REGISTRY: &[Entry] = &[
    (0, 0, None, None), // X.0.0 Other undefined Status
    (1, 0, Some(MailboxTemporary), Some(RecipientPermanent)), // X.1.0 Other address status
    (1, 1, Some(MailboxTemporary), Some(RecipientPermanent)), // X.1.1 Bad destination mailbox address
    (1, 2, Some(MailboxTemporary), Some(RecipientPermanent)), // X.1.2 Bad destination system address
    (1, 3, Some(MailboxTemporary), Some(RecipientPermanent)), // X.1.3 Bad destination mailbox address syntax
    (1, 4, Some(MailboxTemporary), None), // X.1.4 Destination mailbox address ambiguous
    (1, 5, Some(MailboxTemporary), None), // X.1.5 Destination address valid
    (1, 6, Some(MailboxTemporary), Some(RecipientPermanent)), // X.1.6 Destination mailbox has moved, No forwarding address
    (1, 7, Some(SenderConfig), Some(SenderConfig)), // X.1.7 Bad sender's mailbox address syntax
    (1, 8, Some(SenderConfig), Some(SenderConfig)), // X.1.8 Bad sender's system address
    (1, 9, Some(MailboxTemporary), None),           // X.1.9 Message relayed to non-compliant mailer
    (1, 10, Some(MailboxTemporary), Some(RecipientPermanent)), // X.1.10 Recipient address has null MX
    (2, 0, Some(MailboxTemporary), Some(Unknown)), // X.2.0 Other or undefined mailbox status
    (2, 1, Some(MailboxTemporary), Some(RecipientPermanent)), // X.2.1 Mailbox disabled, not accepting messages
    (2, 2, Some(MailboxTemporary), Some(MailboxTemporary)),   // X.2.2 Mailbox full
    (2, 3, Some(MailboxTemporary), Some(ContentRejected)), // X.2.3 Message length exceeds administrative limit
    (2, 4, Some(MailboxTemporary), Some(Unknown)),         // X.2.4 Mailing list expansion problem
    (3, 0, Some(ProviderUnavailable), Some(Unknown)), // X.3.0 Other or undefined mail system status
    (3, 1, Some(ProviderUnavailable), Some(ProviderUnavailable)), // X.3.1 Mail system full
    (3, 2, Some(ProviderUnavailable), Some(Unknown)), // X.3.2 System not accepting network messages
    (3, 3, Some(ProviderUnavailable), Some(ContentRejected)), // X.3.3 System not capable of selected features
    (3, 4, Some(ProviderUnavailable), Some(ContentRejected)), // X.3.4 Message too big for system
    (3, 5, Some(ProviderUnavailable), Some(Unknown)),         // X.3.5 System incorrectly configured
    (3, 6, Some(ProviderUnavailable), Some(Unknown)), // X.3.6 Requested priority was changed
    (4, 0, Some(ProviderUnavailable), Some(Unknown)), // X.4.0 Other or undefined network or routing status
    (4, 1, Some(ProviderUnavailable), Some(Unknown)), // X.4.1 No answer from host
    (4, 2, Some(Network), Some(ProviderUnavailable)), // X.4.2 Bad connection
    (4, 3, Some(ProviderUnavailable), Some(ProviderUnavailable)), // X.4.3 Directory server failure
    (4, 4, Some(ProviderUnavailable), Some(RecipientPermanent)), // X.4.4 Unable to route
    (4, 5, Some(ProviderUnavailable), Some(ProviderUnavailable)), // X.4.5 Mail system congestion
    (4, 6, Some(ProviderUnavailable), Some(Unknown)), // X.4.6 Routing loop detected
    (4, 7, Some(ProviderUnavailable), Some(ProviderUnavailable)), // X.4.7 Delivery time expired
    (5, 0, Some(ProviderUnavailable), Some(Unknown)), // X.5.0 Other or undefined protocol status
    (5, 1, Some(ProviderUnavailable), Some(Unknown)), // X.5.1 Invalid command
    (5, 2, Some(ProviderUnavailable), Some(Unknown)), // X.5.2 Syntax error
    (5, 3, Some(Throttled), Some(Throttled)),         // X.5.3 Too many recipients
    (5, 4, Some(ProviderUnavailable), Some(Unknown)), // X.5.4 Invalid command arguments
    (5, 5, Some(ProviderUnavailable), Some(Unknown)), // X.5.5 Wrong protocol version
    (5, 6, Some(ProviderUnavailable), Some(Unknown)), // X.5.6 Authentication Exchange line is too long
    (6, 0, Some(Unknown), Some(ContentRejected)),     // X.6.0 Other or undefined media error
    (6, 1, Some(Unknown), Some(ContentRejected)),     // X.6.1 Media not supported
    (6, 2, Some(Unknown), Some(ContentRejected)),     // X.6.2 Conversion required and prohibited
    (6, 3, Some(Unknown), Some(ContentRejected)),     // X.6.3 Conversion required but not supported
    (6, 4, Some(Unknown), Some(ContentRejected)),     // X.6.4 Conversion with loss performed
    (6, 5, Some(Unknown), Some(ContentRejected)),     // X.6.5 Conversion Failed
    (6, 6, Some(Unknown), Some(ContentRejected)),     // X.6.6 Message content not available
    (6, 7, Some(Unknown), Some(ContentRejected)), // X.6.7 Non-ASCII addresses not permitted for that sender/recipient
    (6, 8, Some(Unknown), Some(ContentRejected)), // X.6.8 UTF-8 string reply is required, but not permitted by the SMTP client
    (6, 9, Some(Unknown), Some(ContentRejected)), // X.6.9 UTF-8 header message cannot be transferred to one or more recipients
    (6, 10, Some(Unknown), Some(ContentRejected)), // X.6.10 (registered again for X.6.8's meaning, RFC 6531)
    (7, 0, Some(Throttled), Some(SenderConfig)),   // X.7.0 Other or undefined security status
    (7, 1, Some(Throttled), Some(Unknown)),        // X.7.1 Delivery not authorized, message refused
    (7, 2, Some(Throttled), Some(ContentRejected)), // X.7.2 Mailing list expansion prohibited
    (7, 3, Some(Throttled), Some(ContentRejected)), // X.7.3 Security conversion required but not possible
    (7, 4, Some(Throttled), Some(ContentRejected)), // X.7.4 Security features not supported
    (7, 5, Some(Throttled), Some(ContentRejected)), // X.7.5 Cryptographic failure
    (7, 6, Some(Throttled), Some(ContentRejected)), // X.7.6 Cryptographic algorithm not supported
    (7, 7, Some(Throttled), Some(ContentRejected)), // X.7.7 Message integrity failure
    (7, 8, Some(SenderConfig), Some(SenderConfig)), // X.7.8 Authentication credentials invalid
    (7, 9, Some(SenderConfig), Some(SenderConfig)), // X.7.9 Authentication mechanism is too weak
    (7, 10, Some(Tls), Some(Tls)),                  // X.7.10 Encryption Needed
    (7, 11, Some(Tls), Some(Tls)), // X.7.11 Encryption required for requested authentication mechanism
    (7, 12, Some(SenderConfig), Some(SenderConfig)), // X.7.12 A password transition is needed
    (7, 13, Some(SenderConfig), Some(SenderConfig)), // X.7.13 User Account Disabled
    (7, 14, Some(SenderConfig), Some(SenderConfig)), // X.7.14 Trust relationship required
    (7, 15, Some(Throttled), Some(ContentRejected)), // X.7.15 Priority Level is too low
    (7, 16, Some(Throttled), Some(ContentRejected)), // X.7.16 Message is too big for the specified priority
    (7, 17, Some(Throttled), Some(ContentRejected)), // X.7.17 Mailbox owner has changed
    (7, 18, Some(Throttled), Some(ContentRejected)), // X.7.18 Domain owner has changed
    (7, 19, Some(Throttled), Some(ContentRejected)), // X.7.19 RRVS test cannot be completed
    (7, 20, Some(Throttled), Some(ContentRejected)), // X.7.20 No passing DKIM signature found
    (7, 21, Some(Throttled), Some(ContentRejected)), // X.7.21 No acceptable DKIM signature found
    (7, 22, Some(Throttled), Some(ContentRejected)), // X.7.22 No valid author-matched DKIM signature found
    (7, 23, Some(Throttled), Some(ContentRejected)), // X.7.23 SPF validation failed
    (7, 24, Some(Throttled), Some(ContentRejected)), // X.7.24 SPF validation error
    (7, 25, Some(SenderConfig), Some(SenderConfig)), // X.7.25 Reverse DNS validation failed
    (7, 26, Some(Throttled), Some(ContentRejected)), // X.7.26 Multiple authentication checks failed
    (7, 27, Some(SenderConfig), Some(SenderConfig)), // X.7.27 Sender address has null MX
    (7, 28, Some(Throttled), Some(Throttled)),       // X.7.28 Mail flood detected
    (7, 29, Some(Throttled), Some(ContentRejected)), // X.7.29 ARC validation failure
    (7, 30, Some(Tls), Some(Tls)),                   // X.7.30 REQUIRETLS support required
];

/// The class of a detail the registry does not list, by subject: (subject, transient,
/// permanent).
pub(super) static SUBJECT_DEFAULTS: &[(u16, Option<ErrorClass>, Option<ErrorClass>)] = &[
    (1, Some(MailboxTemporary), None),
    (2, Some(MailboxTemporary), Some(Unknown)),
    (3, Some(ProviderUnavailable), Some(Unknown)),
    (4, Some(ProviderUnavailable), Some(Unknown)),
    (5, Some(ProviderUnavailable), Some(Unknown)),
    (6, Some(Unknown), Some(ContentRejected)),
    (7, Some(Throttled), Some(ContentRejected)),
];
