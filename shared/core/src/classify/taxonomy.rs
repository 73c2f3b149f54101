//! The classes every failure falls into, and the verdict a classifier gives.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The classes every failure falls into. The class alone decides retry, give-up or suppression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// Connection refused, reset or timed out; DNS failure of the relay; dropped connection.
    Network,
    /// TLS / STARTTLS handshake or certificate failure, or TLS required and not offered.
    Tls,
    /// The provider or receiver asks us to slow down (rate limits, quotas per second).
    Throttled,
    /// The provider or receiving system itself is unavailable or failed internally.
    ProviderUnavailable,
    /// Mailbox-level temporary condition: full, greylisted, deferred.
    MailboxTemporary,
    /// Unknown user or domain, disabled or moved mailbox: the address is dead.
    RecipientPermanent,
    /// Content or policy rejection: spam, virus, blocklisted, SPF/DKIM/DMARC, size.
    ContentRejected,
    /// Our sender or account is misconfigured: unverified sender, bad credentials, suspended.
    SenderConfig,
    /// The template could not be rendered (missing variable, syntax error, missing template).
    Rendering,
    /// The job broke the contract.
    InvalidJob,
    /// The payload is blocklisted or crashed the worker.
    Poison,
    /// Local: the provider's circuit breaker is open; nothing was sent.
    CircuitOpen,
    /// Local: the provider's shared send-rate schedule is booked past its horizon (see
    /// `courier_core::rate`); nothing was sent.
    RateLimited,
    /// Nothing matched; handled conservatively: limited retries, then review; with a permanent
    /// signal (a `5yz` reply, a `5.x.x` status) review at once (its verdict is not `retryable`).
    Unknown,
}

impl ErrorClass {
    pub const ALL: [ErrorClass; 14] = [
        ErrorClass::Network,
        ErrorClass::Tls,
        ErrorClass::Throttled,
        ErrorClass::ProviderUnavailable,
        ErrorClass::MailboxTemporary,
        ErrorClass::RecipientPermanent,
        ErrorClass::ContentRejected,
        ErrorClass::SenderConfig,
        ErrorClass::Rendering,
        ErrorClass::InvalidJob,
        ErrorClass::Poison,
        ErrorClass::CircuitOpen,
        ErrorClass::RateLimited,
        ErrorClass::Unknown,
    ];

    /// Stable snake_case name, as in JSON, metrics and the policy file.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Network => "network",
            ErrorClass::Tls => "tls",
            ErrorClass::Throttled => "throttled",
            ErrorClass::ProviderUnavailable => "provider_unavailable",
            ErrorClass::MailboxTemporary => "mailbox_temporary",
            ErrorClass::RecipientPermanent => "recipient_permanent",
            ErrorClass::ContentRejected => "content_rejected",
            ErrorClass::SenderConfig => "sender_config",
            ErrorClass::Rendering => "rendering",
            ErrorClass::InvalidJob => "invalid_job",
            ErrorClass::Poison => "poison",
            ErrorClass::CircuitOpen => "circuit_open",
            ErrorClass::RateLimited => "rate_limited",
            ErrorClass::Unknown => "unknown",
        }
    }

    /// Parses [`ErrorClass::as_str`] back.
    pub fn parse(name: &str) -> Option<ErrorClass> {
        ErrorClass::ALL.into_iter().find(|c| c.as_str() == name)
    }

    /// Whether sending the same message again later can succeed without anyone changing anything.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorClass::Network
                | ErrorClass::Tls
                | ErrorClass::Throttled
                | ErrorClass::ProviderUnavailable
                | ErrorClass::MailboxTemporary
                | ErrorClass::CircuitOpen
                | ErrorClass::RateLimited
                | ErrorClass::Unknown
        )
    }

    /// Whether the recipient address must be put on the suppression list.
    pub fn suppresses_recipient(self) -> bool {
        self == ErrorClass::RecipientPermanent
    }

    /// Whether this failure says something about the provider's health (feeds the breaker).
    /// Recipient- and content-level answers prove the provider is up.
    pub fn counts_against_provider(self) -> bool {
        matches!(
            self,
            ErrorClass::Network
                | ErrorClass::Tls
                | ErrorClass::Throttled
                | ErrorClass::ProviderUnavailable
        )
    }

    /// The transient counterpart of a class, used when a `4xx` reply carries permanent wording.
    ///
    /// A `4xx` about our own sender (`450 4.1.8 Sender address rejected: Domain not found`, a
    /// missing PTR, `451 4.7.23 SPF ... temporary error`) is retried on the `mailbox_temporary`
    /// schedule: the receiver said "later" (RFC 5321 4.2.1), and a lookup that failed may succeed.
    /// It does not feed the provider breaker (as `provider_unavailable` would) and never
    /// suppresses the recipient; if it persists, the job ends `retries_exhausted` with the rule
    /// that names our sender.
    pub(super) fn transient(self) -> ErrorClass {
        match self {
            ErrorClass::RecipientPermanent | ErrorClass::SenderConfig => {
                ErrorClass::MailboxTemporary
            }
            ErrorClass::ContentRejected => ErrorClass::Throttled,
            ErrorClass::Unknown => ErrorClass::ProviderUnavailable,
            other => other,
        }
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the classified failure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Smtp,
    SesApi,
    SesEvent,
    Local,
}

/// The rules among [`RECEIVER_THROTTLE_RULES`] that name a receiving domain's own throttle
/// (its code, or Gmail's "unusual rate of unsolicited mail"), not a generic limit ("too many
/// connections") that a relay may answer for itself: these do not count against the provider's
/// breaker ([`Verdict::counts_against_provider`]).
pub const RECEIVER_OWN_THROTTLE_RULES: [&str; 2] = ["provider-code-throttled", "unsolicited-rate"];

/// The reply-text rules that name a receiving domain's rate limit (see
/// [`Verdict::throttles_receiver`]).
pub const RECEIVER_THROTTLE_RULES: [&str; 3] = [
    "receiver-rate-limit",
    "provider-code-throttled",
    "unsolicited-rate",
];

/// The outcome of classification: a class, what to do about it, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    pub class: ErrorClass,
    pub retryable: bool,
    pub suppress_recipient: bool,
    /// The rule that matched, e.g. `smtp.text.over-quota` or `smtp.enhanced.5.1.1`.
    pub rule: String,
    pub source: Source,
    /// Provider's code as sent: `550 5.1.1`, `MessageRejected`, `Bounce/Permanent/General`.
    pub raw_code: Option<String>,
    /// Provider's text as sent (multi-line SMTP replies keep their lines).
    pub raw_text: Option<String>,
}

impl Verdict {
    pub(super) fn new(class: ErrorClass, rule: impl Into<String>, source: Source) -> Verdict {
        Verdict {
            class,
            retryable: class.is_retryable(),
            suppress_recipient: class.suppresses_recipient(),
            rule: rule.into(),
            source,
            raw_code: None,
            raw_text: None,
        }
    }

    pub(super) fn with_raw(mut self, code: Option<String>, text: Option<String>) -> Verdict {
        self.raw_code = code;
        self.raw_text = text;
        self
    }

    /// Whether this is a receiving domain asking us to slow down, which lowers that domain's
    /// pacing ([`crate::pacing`]): an SMTP reply (the answer to our own send) of class
    /// `throttled` whose rule names a receiver's rate limit ([`RECEIVER_THROTTLE_RULES`]:
    /// Gmail's `4.7.28`, Outlook's `4.7.650`, Yahoo's `[TSS04]`, "rate limited", ...). Not our
    /// provider's quota (SES's API throttling, "Throttling failure: Maximum sending rate
    /// exceeded"), not a bare `421 4.7.0 try again later`, which says nothing of a rate, and not
    /// an SES event: SES queues and retries a receiver's deferrals itself, from its own IPs.
    pub fn throttles_receiver(&self) -> bool {
        self.class == ErrorClass::Throttled
            && self.source == Source::Smtp
            && self.rule_is(&RECEIVER_THROTTLE_RULES)
    }

    /// Whether the rule that decided is one of `names` (the last part of `rule`).
    fn rule_is(&self, names: &[&str]) -> bool {
        let name = self.rule.rsplit('.').next();
        names.iter().any(|r| name == Some(*r))
    }

    /// Whether this failure of a message to `recipients` says something about the provider's
    /// health (feeds its breaker): its class does ([`ErrorClass::counts_against_provider`]),
    /// and it is not a reply naming one of the recipients (a relay refusing that recipient at
    /// `RCPT TO`, Postfix's `421 4.7.0 <a@x>: Recipient address rejected`): there the provider
    /// answered; nor a receiving domain's own throttle code ([`RECEIVER_OWN_THROTTLE_RULES`]):
    /// that domain's pace answers it, and one busy domain must not stop the mail to all the
    /// others (a generic "too many connections" may be the relay's own limit: it counts).
    pub fn counts_against_provider<'a>(
        &self,
        mut recipients: impl Iterator<Item = &'a str>,
    ) -> bool {
        let names_recipient = self.source == Source::Smtp
            && self
                .raw_text
                .as_deref()
                .is_some_and(|text| recipients.any(|a| crate::mailbox::names_address(text, a)));
        let receivers_own = self.throttles_receiver() && self.rule_is(&RECEIVER_OWN_THROTTLE_RULES);
        self.class.counts_against_provider() && !names_recipient && !receivers_own
    }

    /// A verdict for a local failure (no provider involved).
    pub fn local(class: ErrorClass, rule: &str, detail: impl Into<String>) -> Verdict {
        Verdict::new(class, format!("local.{rule}"), Source::Local)
            .with_raw(None, Some(detail.into()))
    }
}

// ---------------------------------------------------------------------------------------------
// SMTP replies

/// An RFC 3463 enhanced status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnhancedCode {
    pub class: u8,
    pub subject: u16,
    pub detail: u16,
}

impl fmt::Display for EnhancedCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.class, self.subject, self.detail)
    }
}
