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
//! to its transient counterpart. The one exception is `sender_config`: a `4xx` about our own
//! sender (domain not found, no PTR) stays `sender_config`, for review, and never suppresses.

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
    /// Nothing matched; handled conservatively (limited retries, then review).
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
    /// [`ErrorClass::SenderConfig`] deliberately stays itself: a `4xx` about our own sender
    /// (`450 4.1.8 Sender address rejected: Domain not found`, a missing PTR) is our mistake, so
    /// it must neither feed the provider breaker as `provider_unavailable` nor be retried blindly;
    /// it goes to review like its `5xx` form. It never suppresses the recipient.
    fn transient(self) -> ErrorClass {
        match self {
            ErrorClass::RecipientPermanent => ErrorClass::MailboxTemporary,
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
    fn new(class: ErrorClass, rule: impl Into<String>, source: Source) -> Verdict {
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

    fn with_raw(mut self, code: Option<String>, text: Option<String>) -> Verdict {
        self.raw_code = code;
        self.raw_text = text;
        self
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

/// An SMTP reply split into its parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmtpReply {
    /// Basic reply code, when the text starts with one (`550`).
    pub code: Option<u16>,
    pub enhanced: Option<EnhancedCode>,
    /// The text of all lines without their codes, joined by `\n`.
    pub text: String,
}

impl SmtpReply {
    /// Parses a raw reply (`550-5.1.1 first line\n550 5.1.1 last line`), tolerating replies without
    /// codes, with CRLF line ends, and with enhanced codes in the middle of the text (qmail's
    /// `(#5.1.1)`).
    pub fn parse(raw: &str) -> SmtpReply {
        let mut code = None;
        let mut enhanced = None;
        let mut lines = Vec::new();
        for line in raw.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let mut rest = line;
            if let Some(c) = leading_reply_code(line) {
                code.get_or_insert(c);
                rest = line[3..].trim_start_matches(['-', ' ']).trim_start();
            }
            if let Some((e, after)) = leading_enhanced(rest) {
                enhanced.get_or_insert(e);
                rest = after.trim_start();
            }
            lines.push(rest);
        }
        let text = lines.join("\n");
        if enhanced.is_none() {
            enhanced = find_enhanced(&text);
        }
        // An enhanced code that contradicts the basic code's class is ignored (RFC 3463 s2: the
        // class must agree with the reply code).
        if let (Some(c), Some(e)) = (code, enhanced)
            && u16::from(e.class) != c / 100
        {
            enhanced = None;
        }
        SmtpReply {
            code,
            enhanced,
            text,
        }
    }

    /// The code as sent, e.g. `550 5.1.1`.
    pub fn code_string(&self) -> Option<String> {
        match (self.code, self.enhanced) {
            (Some(c), Some(e)) => Some(format!("{c} {e}")),
            (Some(c), None) => Some(c.to_string()),
            (None, Some(e)) => Some(e.to_string()),
            (None, None) => None,
        }
    }

    /// The first digit of whichever code is present (2, 4 or 5).
    fn class_digit(&self) -> Option<u8> {
        self.code
            .and_then(|c| u8::try_from(c / 100).ok())
            .or(self.enhanced.map(|e| e.class))
    }
}

fn leading_reply_code(line: &str) -> Option<u16> {
    let bytes = line.as_bytes();
    if bytes.len() < 3 || !bytes[..3].iter().all(u8::is_ascii_digit) {
        return None;
    }
    if bytes.len() > 3 && !matches!(bytes[3], b' ' | b'-') {
        return None;
    }
    let code: u16 = line[..3].parse().ok()?;
    (200..600).contains(&code).then_some(code)
}

fn parse_enhanced(token: &str) -> Option<EnhancedCode> {
    let mut parts = token.split('.');
    let class: u8 = parts.next()?.parse().ok()?;
    let subject_s = parts.next()?;
    let detail_s = parts.next()?;
    if parts.next().is_some()
        || !matches!(class, 2 | 4 | 5)
        || subject_s.is_empty()
        || subject_s.len() > 3
        || detail_s.is_empty()
        || detail_s.len() > 3
    {
        return None;
    }
    Some(EnhancedCode {
        class,
        subject: subject_s.parse().ok()?,
        detail: detail_s.parse().ok()?,
    })
}

fn leading_enhanced(text: &str) -> Option<(EnhancedCode, &str)> {
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    parse_enhanced(&text[..end]).map(|e| (e, &text[end..]))
}

/// Finds an enhanced code inside text, e.g. qmail's `(#5.1.1)` or `[5.2.2]`; never a piece of an
/// IP address or version number.
fn find_enhanced(text: &str) -> Option<EnhancedCode> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if matches!(bytes[i], b'2' | b'4' | b'5')
            && (i == 0 || !(bytes[i - 1].is_ascii_digit() || bytes[i - 1] == b'.'))
        {
            let end = text[i..]
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .map_or(text.len(), |n| i + n);
            let token = text[i..end].trim_end_matches('.');
            let glued = text[end..]
                .chars()
                .next()
                .is_some_and(char::is_alphanumeric);
            if let Some(e) = parse_enhanced(token).filter(|_| !glued) {
                return Some(e);
            }
            i = end.max(i + 1);
        } else {
            i += 1;
        }
    }
    None
}

/// A wording rule: a name, the class it implies, and phrases of which any one must appear in the
/// lower-cased text (all phrases of a `&[&str]` inner list must appear together).
struct TextRule {
    name: &'static str,
    class: ErrorClass,
    any_of: &'static [&'static [&'static str]],
}

macro_rules! rule {
    ($name:literal, $class:ident, [$([$($p:literal),+]),+ $(,)?]) => {
        TextRule { name: $name, class: ErrorClass::$class, any_of: &[$(&[$($p),+]),+] }
    };
}

/// Ordered: the first rule whose phrases appear wins. The rules read [`rule_text`]: the lower-cased
/// reply text with whitespace (and line breaks) collapsed, prefixed with the enhanced code, so a
/// provider's code (`5.7.708`, `IB607`, `AUP#CDRBL`, `OFR_417`) can be written as a phrase.
///
/// Order, most specific first:
/// 1. relay reports and our own socket/DNS errors (`network`), before any word such as "refused";
/// 2. provider code tables, which beat the generic words around them (Spectrum/Cox's
///    `sender rejected ... AUP#...`, GoDaddy's `5.1.1 ... IB607`);
/// 3. mailbox-level temporary conditions (greylisting, quota, per-mailbox receive limits);
/// 4. TLS, then our own sending infrastructure (PTR, HELO, sender domain DNS), then limits on us;
/// 5. sender wording before recipient wording (`Sender address rejected: User unknown`,
///    `Domain of sender address ... does not exist`), then content/policy, then the receiver's own
///    trouble. A Spamhaus block in a `Service unavailable` reply is thus content, and a greylisting
///    reply that mentions "policy" is still greylisting.
///
/// Generic words that state no cause ("try again later", "closing connection", bare "denied" or
/// "refused") are deliberately absent: the enhanced or basic code decides those replies.
static TEXT_RULES: &[TextRule] = &[
    // A relay reporting that *it* could not reach the destination (Exchange's queue expiry, even
    // when it quotes a socket error): the receiving side's routing, not our connection.
    rule!(
        "relay-gave-up",
        ProviderUnavailable,
        [["queue.expired"], ["message expired"], ["5.4.316"]]
    ),
    // Our own socket or resolver failed (local client errors, session timeouts between us and the
    // peer). "Host not found, try again" is a temporary DNS failure; plain "Host not found" is an
    // authoritative NXDOMAIN and stays with the recipient rules.
    rule!(
        "network",
        Network,
        [
            ["connection refused"],
            ["connection reset"],
            ["connection timed out"],
            ["connection aborted"],
            ["lost connection"],
            ["broken pipe"],
            ["network is unreachable"],
            ["no route to host"],
            ["host not found, try again"],
            ["temporary failure in name resolution"],
            ["4.4.2", "timeout"],
            ["4.4.2", "timed out"]
        ]
    ),
    // Provider code tables (README decision 15): the code names the cause, whatever the words.
    rule!(
        "provider-code-throttled",
        Throttled,
        [
            ["aup#in-13"],
            ["ib607"],
            ["[ts01]"],
            ["[ts02]"],
            ["[ts03]"],
            ["[tss04]"],
            ["[gl01]"],
            ["rp-001"],
            ["ofr", "_104"],
            ["lpn", "_104"],
            ["5.7.508"],
            ["5.2.121"],
            ["4.7.500"],
            ["4.7.650"],
            ["4.7.651"]
        ]
    ),
    rule!(
        "provider-code-content",
        ContentRejected,
        [
            ["aup#cdrbl"],
            ["ib508"],
            ["[bl21]"],
            ["[bl23]"],
            ["[ph01]"],
            ["[tss09]"],
            ["s3150"],
            ["s3140"],
            ["5.7.509"],
            ["5.7.511"],
            ["5.7.515"],
            ["5.7.606"],
            ["resolver.rst.authrequired"],
            ["ofr", "_102"],
            ["ofr", "_517"],
            ["lpn", "_517"]
        ]
    ),
    rule!(
        "provider-code-sender",
        SenderConfig,
        [
            ["5.7.705"],
            ["5.7.708"],
            ["5.7.750"],
            ["ib401"],
            ["ib506"],
            ["ib108"],
            ["lpn", "_402"]
        ]
    ),
    rule!(
        "provider-code-recipient",
        RecipientPermanent,
        [
            ["s2017062302"],
            ["ofr", "_416"],
            ["lpn", "_416"],
            ["lpn", "_420"]
        ]
    ),
    rule!(
        "provider-code-mailbox",
        MailboxTemporary,
        [["5.2.122"], ["ofr", "_417"], ["lpn", "_417"]]
    ),
    rule!(
        "provider-code-unavailable",
        ProviderUnavailable,
        [["ofr", "_505"], ["lpn", "_505"]]
    ),
    rule!(
        "greylisted",
        MailboxTemporary,
        [
            ["greylist"],
            ["graylist"],
            ["grey-list"],
            ["gray-list"],
            ["grey listed"],
            ["greylisting"],
            ["postgrey"],
            ["not yet authorized to deliver mail"],
            ["internal resource temporarily unavailable"],
            ["try again in", "minutes"],
            ["deferred for", "seconds"]
        ]
    ),
    // Limits on our own account that are worded as a quota (SES): not the recipient's mailbox.
    rule!(
        "sending-quota",
        Throttled,
        [
            ["throttling failure"],
            ["daily message quota"],
            ["sending quota"]
        ]
    ),
    // Gmail's OverQuotaPerm: full *and* abandoned (README decision 3).
    rule!(
        "over-quota-inactive",
        RecipientPermanent,
        [["out of storage space and inactive"], ["overquotaperm"]]
    ),
    rule!(
        "over-quota",
        MailboxTemporary,
        [
            ["over quota"],
            ["overquota"],
            ["over the quota"],
            ["quota exceeded"],
            ["exceeded quota"],
            ["exceeded its quota"],
            ["exceeds quota"],
            ["exceed the quota"],
            ["quota full"],
            ["mailbox full"],
            ["mailbox is full"],
            ["mailbox size limit"],
            ["mailbox has exceeded"],
            ["mailbox exceeds"],
            ["inbox is full"],
            ["insufficient storage"],
            ["exceeded storage"],
            ["out of storage"],
            ["storage allocation"],
            ["mailfolder is full"],
            ["mail quota"],
            ["disk quota"],
            ["user has exceeded"],
            ["mailbox would exceed"],
            ["not enough space"],
            ["quota limit"],
            ["over its quota"],
            ["quota exceed"]
        ]
    ),
    rule!(
        "microsoft-access-denied-recipient",
        RecipientPermanent,
        [
            ["recipient address rejected: access denied"],
            ["as(201806281)"]
        ]
    ),
    // A limit or lock on this one mailbox, whoever sends (README decision 4): not a limit on us.
    rule!(
        "mailbox-receive-limit",
        MailboxTemporary,
        [
            ["receiving mail too quickly"],
            ["receiving mail at a rate"],
            ["messages to", "deferred due to excessive volume"],
            ["limit for the number of messages they can receive"],
            ["too many concurrent deliveries for user"],
            ["temporary locked"],
            ["temporarily locked"]
        ]
    ),
    rule!(
        "tls-required",
        Tls,
        [
            ["starttls"],
            ["tls required"],
            ["tls is required"],
            ["requires tls"],
            ["must use tls"],
            ["over a tls connection"],
            ["requires encryption"],
            ["tls not available"],
            ["cannot start tls"],
            ["tls negotiation"],
            ["tls handshake"],
            ["ssl handshake"],
            ["handshake failure"],
            ["encryption required"],
            ["encryption is required"],
            ["requiretls"],
            ["4.7.29"],
            ["certificate"]
        ]
    ),
    // Our sending infrastructure (README decisions 10, 12, 20): PTR/rDNS, HELO name, the DNS of
    // our sender domain, a host that must use a smarthost. Before the rate rules because Yahoo says
    // "temporarily deferred" about an unresolvable sender domain.
    rule!(
        "sender-infrastructure",
        SenderConfig,
        [
            ["ptr record"],
            ["ptr resource record"],
            ["reverse dns"],
            ["rdns"],
            ["cannot find your hostname"],
            ["ip name lookup failed"],
            ["helo command rejected"],
            ["fully-qualified hostname"],
            ["fully qualified hostname"],
            ["non-fqdn"],
            ["send email directly"],
            ["unresolvable", "from domain"]
        ]
    ),
    rule!(
        "receiver-rate-limit",
        Throttled,
        [
            ["rate limit"],
            ["ratelimit"],
            ["rate-limit"],
            ["rate limited"],
            ["unusual rate"],
            ["too many connections"],
            ["too many concurrent"],
            ["concurrent connections"],
            ["too many messages"],
            ["too many recipients"],
            ["maximum number of recipients"],
            ["too many sessions"],
            ["too many mails"],
            ["too many emails"],
            ["too many requests"],
            ["too many errors"],
            ["too many invalid"],
            ["too many login"],
            ["too frequent"],
            ["frequency limited"],
            ["connection limit"],
            ["per connection"],
            ["submission rate"],
            ["sending too fast"],
            ["too fast"],
            ["slow down"],
            ["throttl"],
            ["exceeded the rate"],
            ["exceeded rate"],
            ["exceeded permitted limits"],
            ["limits for how many messages"],
            ["temporarily deferred"],
            ["sending rate"],
            ["sending limit"],
            ["relay limit"],
            ["message rate"],
            ["max message rate"],
            ["mail flood"],
            ["flooding"],
            ["resources temporarily"],
            ["try again later", "volume"],
            ["deferred due to", "complaints"],
            ["too much mail"],
            ["violating our security policies", "chkuser"],
            ["4.7.28"],
            ["4.7.27", "rate"]
        ]
    ),
    // Before the recipient rules: `Sender address rejected: User unknown`, `Domain of sender address
    // ... does not exist` and `Unrouteable address ... Sender verify failed` are about our sender.
    rule!(
        "sender-rejected",
        SenderConfig,
        [
            ["sender address rejected"],
            ["authority to send from"],
            ["not authorized to send from"],
            ["sender rejected"],
            ["sender domain"],
            ["domain of sender address"],
            ["unroutable sender"],
            ["unrouteable sender"],
            ["sender verify failed"],
            ["sender verification failed"],
            ["sender address is not"],
            ["sender address is invalid"],
            ["sender address has invalid"],
            ["invalid sender"],
            ["bad sender"],
            ["bad outbound sender"],
            ["sender not allowed"],
            ["from address not"],
            ["not verified"],
            ["unverified sender"],
            ["email address is not verified"],
            ["identities failed the check"],
            ["authentication required"],
            ["authentication is required"],
            ["must authenticate"],
            ["authentication failed"],
            ["authentication unsuccessful"],
            ["auth failed"],
            ["credentials invalid"],
            ["invalid credentials"],
            ["bad credentials"],
            ["username and password not accepted"],
            ["login failed"],
            ["send anonymous mail"],
            ["sendasdenied"],
            ["relay access denied"],
            ["relaying denied"],
            ["relay not permitted"],
            ["relaying not allowed"],
            ["relaying disallowed"],
            ["not permitted to relay"],
            ["unable to relay"],
            ["relay denied"],
            ["we do not relay"],
            ["rcpthosts"],
            ["account suspended"],
            ["account has been suspended"],
            ["sending paused"],
            ["sending has been paused"],
            ["sending is paused"],
            ["sender address has null mx"],
            ["5.7.27"],
            ["authenticated sender"],
            ["sending account"]
        ]
    ),
    rule!(
        "recipient-unknown",
        RecipientPermanent,
        [
            ["user unknown"],
            ["unknown user"],
            ["no such user"],
            ["no such recipient"],
            ["no such mailbox"],
            ["no such address"],
            ["unknown recipient"],
            ["recipient unknown"],
            ["recipient not found"],
            ["recipientnotfound"],
            ["recipient does not exist"],
            ["user does not exist"],
            ["user doesn't exist"],
            ["mailbox does not exist"],
            ["address does not exist"],
            ["account does not exist"],
            ["does not exist"],
            ["doesn't exist"],
            ["doesn't have a"],
            ["not a valid mailbox"],
            ["invalid mailbox"],
            ["invalid recipient"],
            ["mailbox not found"],
            ["mailbox unknown"],
            ["user not found"],
            ["address not found"],
            ["addressee unknown"],
            ["address unknown"],
            ["unknown address"],
            ["no mailbox here"],
            ["unrouteable address"],
            ["unroutable address"],
            ["bad destination mailbox"],
            ["unknown or illegal alias"],
            ["no such person"],
            ["not our customer"],
            ["is not a known user"],
            ["user not local"],
            ["not listed in"],
            ["invalid address"],
            ["recipient address rejected: unverified address"],
            ["mailbox not available"],
            ["mailbox is disabled"],
            ["account is disabled"],
            ["account has been disabled"],
            ["account disabled"],
            ["mailbox disabled"],
            ["account is inactive"],
            ["inactive user"],
            ["inactive mailbox"],
            ["account inactive"],
            ["account has been deactivated"],
            ["mailbox has been deactivated"],
            ["deactivated"],
            ["no longer available"],
            ["no longer active"],
            ["no longer valid"],
            ["account closed"],
            ["mailbox closed"],
            ["archived recipient"],
            ["has moved"],
            ["domain not found"],
            ["domain does not exist"],
            ["no mx"],
            ["null mx"],
            ["host not found"],
            ["host or domain name not found"],
            ["host unknown"],
            ["unknown domain"],
            ["domain unknown"],
            ["name service error"],
            ["nxdomain"],
            ["recipient address rejected: domain"],
            ["unable to route"],
            ["no route to"],
            ["the email account that you tried to reach"],
            ["resolver.adr"],
            ["dd not a valid"],
            ["dd this user"]
        ]
    ),
    rule!(
        "content-or-policy",
        ContentRejected,
        [
            ["spam"],
            ["virus"],
            ["malware"],
            ["phish"],
            ["infected"],
            ["unsolicited"],
            ["junk"],
            ["blocked"],
            ["blacklist"],
            ["blocklist"],
            ["block list"],
            ["black list"],
            ["denylist"],
            ["spamhaus"],
            ["barracuda"],
            ["sorbs"],
            ["spamcop"],
            ["uceprotect"],
            ["surbl"],
            ["dnsbl"],
            ["rbl"],
            ["listed at"],
            ["listed on"],
            ["listed in"],
            ["reputation"],
            ["dmarc"],
            ["dkim"],
            ["spf"],
            ["unauthenticated"],
            ["not authenticated"],
            ["authentication check"],
            ["authentication level"],
            ["sender policy framework"],
            ["purported responsible address"],
            ["spoofing"],
            ["content rejected"],
            ["content denied"],
            ["message content"],
            ["content policy"],
            ["rejected by policy"],
            ["denied by policy"],
            ["policy rejection"],
            ["policy violation"],
            ["violates", "policy"],
            ["policy reasons"],
            ["due to policy"],
            ["local policy"],
            ["security policies"],
            ["message rejected"],
            ["message refused"],
            ["not accepted"],
            ["host network not allowed"],
            ["banned"],
            ["prohibited"],
            ["forbidden"],
            ["message size"],
            ["size exceeds"],
            ["exceeds size"],
            ["exceeds the maximum"],
            ["message too large"],
            ["message is too large"],
            ["message too big"],
            ["too big"],
            ["size limit"],
            ["line limit exceeded"],
            ["line too long"],
            ["attachment"],
            ["bulk mail"],
            ["suspicious"],
            ["dangerous"],
            ["not authorized"],
            ["unauthorized"],
            ["rejected for"],
            ["mail rejected"],
            ["abuse"],
            ["5.7.26"],
            ["5.7.23"]
        ]
    ),
    // RFC 5321's default 550 text, which Outlook.com, Hotmail and GMX use for "no such user"
    // (README decision 14); after the content rule so that "mailbox unavailable: spam" stays
    // content. The 450 form becomes mailbox_temporary.
    rule!(
        "mailbox-unavailable",
        RecipientPermanent,
        [["mailbox unavailable"]]
    ),
    rule!(
        "provider-down",
        ProviderUnavailable,
        [
            ["service unavailable"],
            ["service not available"],
            ["service refuse"],
            ["not accepting"],
            ["temporary failure"],
            ["temporarily unavailable"],
            ["temporary problem"],
            ["temporary error"],
            ["local error"],
            ["internal error"],
            ["server error"],
            ["system error"],
            ["shutting down"],
            ["timeout"],
            ["timed out"],
            ["queue file write error"],
            ["resources unavailable"],
            ["database"],
            ["temporarily rejected"],
            ["lookup failure"]
        ]
    ),
];

/// The text the wording rules read: the enhanced code (if any) and the reply text, lower-cased,
/// with runs of whitespace (line breaks of multi-line replies included) collapsed to one space.
fn rule_text(enhanced: Option<EnhancedCode>, text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 12);
    if let Some(e) = enhanced {
        out.push_str(&e.to_string());
        out.push(' ');
    }
    let mut words = text.split_whitespace();
    if let Some(first) = words.next() {
        out.push_str(first);
        for word in words {
            out.push(' ');
            out.push_str(word);
        }
    }
    out.to_lowercase()
}

fn text_rule(lower: &str) -> Option<&'static TextRule> {
    TEXT_RULES.iter().find(|rule| {
        rule.any_of
            .iter()
            .any(|all| all.iter().all(|phrase| lower.contains(phrase)))
    })
}

/// Maps an RFC 3463 enhanced status code to a class.
fn enhanced_class(e: EnhancedCode) -> Option<ErrorClass> {
    use ErrorClass::*;
    let transient = e.class == 4;
    let class = match (e.subject, e.detail) {
        (1, 7 | 8) => SenderConfig,
        (1, _) if transient => MailboxTemporary,
        (1, 0..=4 | 6 | 10) => RecipientPermanent,
        (2, 2) => MailboxTemporary,
        (2, 3) if !transient => ContentRejected,
        (2, _) if transient => MailboxTemporary,
        (2, 1) => RecipientPermanent,
        (2, _) => Unknown,
        (3, 3 | 4) if !transient => ContentRejected,
        (3, _) if transient => ProviderUnavailable,
        // A permanent "system not accepting messages" (postscreen's 521 5.3.2) is a drop with its
        // reason hidden, not an outage.
        (3, _) => Unknown,
        (4, 4) if !transient => RecipientPermanent,
        // 4.4.2 bad connection: the session between us and the peer broke or timed out.
        (4, 2) if transient => Network,
        (4, _) if transient => ProviderUnavailable,
        (4, _) => Unknown,
        (5, 3) => Throttled,
        (5, _) if transient => ProviderUnavailable,
        (5, _) => Unknown,
        (6, _) if transient => Unknown,
        (6, _) => ContentRejected,
        (7, 0) if transient => Throttled,
        (7, 0 | 8 | 9 | 12 | 13 | 14 | 25 | 27) => SenderConfig,
        (7, 10 | 11 | 30) => Tls,
        (7, 28) => Throttled,
        (7, _) if transient => Throttled,
        // 5.7.1 alone is used for every kind of refusal (sender, IP, recipient, content): the
        // wording rules must say which.
        (7, 1) => Unknown,
        (7, _) => ContentRejected,
        _ => return None,
    };
    Some(class)
}

/// Maps a basic RFC 5321 reply code to a class.
fn basic_class(code: u16) -> Option<ErrorClass> {
    use ErrorClass::*;
    Some(match code {
        421 => ProviderUnavailable,
        450 | 452 => MailboxTemporary,
        451 => ProviderUnavailable,
        454 => Tls,
        400..=499 => ProviderUnavailable,
        530 | 534 | 535 => SenderConfig,
        538 => Tls,
        551 => RecipientPermanent,
        552 => MailboxTemporary,
        500..=599 => Unknown,
        _ => return None,
    })
}

/// Classifies one SMTP reply (any number of lines, with or without codes).
pub fn classify_smtp(raw: &str) -> Verdict {
    let reply = SmtpReply::parse(raw);
    let digit = reply.class_digit();
    let lower = rule_text(reply.enhanced, &reply.text);
    let (class, rule) = if digit == Some(2) {
        (
            ErrorClass::Unknown,
            "smtp.success-code-as-failure".to_owned(),
        )
    } else if let Some(rule) = text_rule(&lower) {
        (rule.class, format!("smtp.text.{}", rule.name))
    } else if let Some((e, class)) = reply
        .enhanced
        .and_then(|e| enhanced_class(e).map(|c| (e, c)))
    {
        (class, format!("smtp.enhanced.{e}"))
    } else if let Some((c, class)) = reply.code.and_then(|c| basic_class(c).map(|k| (c, k))) {
        (class, format!("smtp.basic.{c}"))
    } else {
        (ErrorClass::Unknown, "smtp.unrecognised".to_owned())
    };
    let class = if digit == Some(4) {
        class.transient()
    } else {
        class
    };
    Verdict::new(class, rule, Source::Smtp).with_raw(reply.code_string(), Some(raw.to_owned()))
}

// ---------------------------------------------------------------------------------------------
// SES v2 API errors

/// How an SES v2 call failed, as seen after the SDK's own retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiFailureKind {
    /// The service answered with an error (modelled or not).
    Service,
    /// The SDK gave up waiting (connect, read or operation timeout).
    Timeout,
    /// The request could not be sent or no response came (connection, DNS, TLS).
    Dispatch,
    /// A response came that could not be parsed.
    Response,
    /// The request could not be built (a bug or a bad input on our side).
    Construction,
}

/// An SES v2 API failure reduced to what classification needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiFailure {
    pub kind: ApiFailureKind,
    /// Error code (`MessageRejected`, `TooManyRequestsException`, ...).
    pub code: Option<String>,
    pub message: Option<String>,
    pub http_status: Option<u16>,
}

/// Classifies an SES v2 API failure.
pub fn classify_ses_api(failure: &ApiFailure) -> Verdict {
    use ErrorClass::*;
    let code = failure
        .code
        .as_deref()
        .map(|c| c.trim_end_matches("Exception"))
        .unwrap_or("");
    let message = failure.message.as_deref().unwrap_or("").to_lowercase();
    let (class, rule): (ErrorClass, String) = match failure.kind {
        ApiFailureKind::Timeout => (Network, "ses.timeout".into()),
        ApiFailureKind::Dispatch
            if message.contains("tls")
                || message.contains("certificate")
                || message.contains("handshake") =>
        {
            (Tls, "ses.dispatch.tls".into())
        }
        ApiFailureKind::Dispatch => (Network, "ses.dispatch".into()),
        ApiFailureKind::Response => (ProviderUnavailable, "ses.unparseable-response".into()),
        ApiFailureKind::Construction => (InvalidJob, "ses.request-construction".into()),
        ApiFailureKind::Service => match code {
            "MessageRejected" => match text_rule(&message) {
                Some(rule) if rule.class == SenderConfig => {
                    (SenderConfig, "ses.MessageRejected.sender".into())
                }
                Some(rule) if rule.class == Throttled => {
                    (Throttled, "ses.MessageRejected.rate".into())
                }
                _ if message.contains("illegal address") || message.contains("invalid address") => {
                    (InvalidJob, "ses.MessageRejected.address".into())
                }
                _ => (ContentRejected, "ses.MessageRejected".into()),
            },
            "MailFromDomainNotVerified"
            | "AccountSuspended"
            | "SendingPaused"
            | "NotFound"
            | "AccessDenied"
            | "InvalidClientTokenId"
            | "UnrecognizedClient"
            | "SignatureDoesNotMatch"
            | "ExpiredToken"
            | "MissingAuthenticationToken"
            | "IncompleteSignature"
            | "OptInRequired" => (SenderConfig, format!("ses.{code}")),
            "TooManyRequests"
            | "Throttling"
            | "ThrottlingException"
            | "RequestLimitExceeded"
            | "LimitExceeded"
            | "SlowDown" => (Throttled, format!("ses.{code}")),
            "InternalFailure"
            | "InternalServerError"
            | "ServiceUnavailable"
            | "RequestTimeout"
            | "ServiceFailure" => (ProviderUnavailable, format!("ses.{code}")),
            "BadRequest"
            | "InvalidParameterValue"
            | "ValidationError"
            | "Validation"
            | "SerializationException" => (InvalidJob, format!("ses.{code}")),
            _ => match failure.http_status {
                Some(429) => (Throttled, "ses.http.429".into()),
                Some(s) if s >= 500 => (ProviderUnavailable, "ses.http.5xx".into()),
                Some(403) => (SenderConfig, "ses.http.403".into()),
                _ => (Unknown, "ses.unmodelled".into()),
            },
        },
    };
    let raw_code = match (&failure.code, failure.http_status) {
        (Some(c), Some(s)) => Some(format!("{c} (HTTP {s})")),
        (Some(c), None) => Some(c.clone()),
        (None, Some(s)) => Some(format!("HTTP {s}")),
        (None, None) => Some(format!("{:?}", failure.kind).to_lowercase()),
    };
    Verdict::new(class, rule, Source::SesApi).with_raw(raw_code, failure.message.clone())
}

// ---------------------------------------------------------------------------------------------
// SES events

/// The failure-bearing SES event kinds, with the fields classification needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SesFailureEvent {
    Bounce {
        bounce_type: String,
        bounce_subtype: String,
        diagnostic: Option<String>,
    },
    Complaint {
        feedback_type: Option<String>,
    },
    DeliveryDelay {
        delay_type: String,
        diagnostic: Option<String>,
    },
    Reject {
        reason: Option<String>,
    },
    RenderingFailure {
        error: Option<String>,
    },
}

/// Classifies an SES event that reports a failure.
pub fn classify_ses_event(event: &SesFailureEvent) -> Verdict {
    use ErrorClass::*;
    match event {
        SesFailureEvent::Bounce {
            bounce_type,
            bounce_subtype,
            diagnostic,
        } => {
            let class = match (bounce_type.as_str(), bounce_subtype.as_str()) {
                (
                    "Permanent",
                    "General" | "NoEmail" | "Suppressed" | "OnAccountSuppressionList",
                ) => RecipientPermanent,
                ("Permanent", _) => RecipientPermanent,
                ("Transient", "MailboxFull") => MailboxTemporary,
                ("Transient", "MessageTooLarge" | "ContentRejected" | "AttachmentRejected") => {
                    ContentRejected
                }
                ("Transient", _) => MailboxTemporary,
                _ => Unknown,
            };
            let mut v = Verdict::new(
                class,
                format!("ses.event.bounce.{bounce_type}.{bounce_subtype}"),
                Source::SesEvent,
            );
            // A permanent bounce whose diagnostic is plainly a content/policy block must not
            // suppress the recipient (SES files some blocklist rejections as Permanent/General).
            if class == RecipientPermanent
                && let Some(d) = diagnostic
            {
                let smtp = classify_smtp(d);
                if smtp.class == ContentRejected && smtp.rule.starts_with("smtp.text") {
                    v = Verdict::new(
                        ContentRejected,
                        format!(
                            "ses.event.bounce.{bounce_type}.{bounce_subtype}+{}",
                            smtp.rule
                        ),
                        Source::SesEvent,
                    );
                }
            }
            v.with_raw(
                Some(format!("Bounce/{bounce_type}/{bounce_subtype}")),
                diagnostic.clone(),
            )
        }
        SesFailureEvent::Complaint { feedback_type } => {
            let mut v = Verdict::new(ContentRejected, "ses.event.complaint", Source::SesEvent);
            v.suppress_recipient = true;
            v.with_raw(
                Some(format!(
                    "Complaint/{}",
                    feedback_type.as_deref().unwrap_or("unspecified")
                )),
                None,
            )
        }
        SesFailureEvent::DeliveryDelay {
            delay_type,
            diagnostic,
        } => {
            let class = match delay_type.as_str() {
                "InternalFailure" | "BYOIPHostNameLookupUnavailable" => ProviderUnavailable,
                "MailboxFull" | "General" | "RecipientServerError" => MailboxTemporary,
                "SpamDetected" | "IPFailure" => ContentRejected,
                "TransientCommunicationFailure" => Network,
                "SendingDeferral" => Throttled,
                _ => Unknown,
            };
            // A delay is by definition not final: even SpamDetected is retried by SES itself.
            let mut v = Verdict::new(
                class,
                format!("ses.event.delivery_delay.{delay_type}"),
                Source::SesEvent,
            );
            v.retryable = true;
            v.with_raw(
                Some(format!("DeliveryDelay/{delay_type}")),
                diagnostic.clone(),
            )
        }
        SesFailureEvent::Reject { reason } => {
            Verdict::new(ContentRejected, "ses.event.reject", Source::SesEvent)
                .with_raw(Some("Reject".into()), reason.clone())
        }
        SesFailureEvent::RenderingFailure { error } => {
            Verdict::new(Rendering, "ses.event.rendering_failure", Source::SesEvent)
                .with_raw(Some("RenderingFailure".into()), error.clone())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_multiline_replies_and_codes() {
        let r = SmtpReply::parse(
            "550-5.1.1 The email account that you tried to reach does not exist.\r\n550 5.1.1 https://support.google.com/mail/?p=NoSuchUser x1si",
        );
        assert_eq!(r.code, Some(550));
        assert_eq!(r.enhanced.map(|e| e.to_string()).as_deref(), Some("5.1.1"));
        assert!(r.text.starts_with("The email account"));
        assert!(r.text.contains('\n'));
    }

    #[test]
    fn finds_enhanced_codes_inside_text_but_not_in_ips() {
        assert_eq!(
            SmtpReply::parse("Sorry, no mailbox here by that name. (#5.1.1)")
                .enhanced
                .map(|e| e.to_string()),
            Some("5.1.1".into())
        );
        assert_eq!(
            SmtpReply::parse("451 from 10.5.1.1 try later").enhanced,
            None
        );
        assert_eq!(SmtpReply::parse("250 ok version 2.0.1x").enhanced, None);
    }

    #[test]
    fn enhanced_class_contradicting_the_code_is_ignored() {
        assert_eq!(SmtpReply::parse("450 5.1.1 odd").enhanced, None);
    }

    #[test]
    fn four_xx_never_yields_a_permanent_class() {
        for raw in [
            "450 4.1.1 <a@b>: Recipient address rejected: User unknown in local recipient table",
            "451 4.7.1 spam suspected",
            "450 something odd",
            "450 Requested mail action not taken: mailbox unavailable",
        ] {
            let v = classify_smtp(raw);
            assert!(v.retryable, "{raw} -> {v:?}");
            assert!(!v.suppress_recipient, "{raw} -> {v:?}");
            assert_ne!(v.class, ErrorClass::RecipientPermanent, "{raw}");
        }
        // The deliberate exception: a 4xx about our own sender stays sender_config (review, no
        // retry, no suppression) instead of feeding the provider breaker.
        for raw in [
            "451 sender verify failed",
            "450 4.1.8 <b@x>: Sender address rejected: Domain not found",
        ] {
            let v = classify_smtp(raw);
            assert_eq!(v.class, ErrorClass::SenderConfig, "{raw}");
            assert!(!v.retryable, "{raw} -> {v:?}");
            assert!(!v.suppress_recipient, "{raw} -> {v:?}");
        }
    }

    #[test]
    fn each_class_by_each_pass() {
        use ErrorClass::*;
        // GIVEN replies decided by text, by enhanced code and by basic code
        let cases = [
            (
                "450 4.2.0 <g@x>: Recipient address rejected: Greylisted",
                MailboxTemporary,
                "smtp.text.greylisted",
            ),
            (
                "552 5.2.2 mailbox full",
                MailboxTemporary,
                "smtp.text.over-quota",
            ),
            (
                "550 5.1.1 <u@x>: Recipient address rejected: User unknown",
                RecipientPermanent,
                "smtp.text.recipient-unknown",
            ),
            (
                "554 5.7.1 Service unavailable; Client host [192.0.2.1] blocked using zen.spamhaus.org",
                ContentRejected,
                "smtp.text.content-or-policy",
            ),
            (
                "530 5.7.0 Must issue a STARTTLS command first",
                Tls,
                "smtp.text.tls-required",
            ),
            (
                "421 4.7.28 unusual rate of unsolicited mail",
                Throttled,
                "smtp.text.receiver-rate-limit",
            ),
            (
                "535 5.7.8 Error: authentication failed",
                SenderConfig,
                "smtp.text.sender-rejected",
            ),
            (
                "421 4.3.2 System not accepting network messages",
                ProviderUnavailable,
                "smtp.text.provider-down",
            ),
            (
                "Connection reset by peer (os error 104)",
                Network,
                "smtp.text.network",
            ),
            (
                "550 5.1.1 <u@x> - 192.0.2.1 has sent to too many recipients this hour. IB607",
                Throttled,
                "smtp.text.provider-code-throttled",
            ),
            (
                "550 5.4.1 Recipient address rejected: Access denied",
                RecipientPermanent,
                "smtp.text.microsoft-access-denied-recipient",
            ),
            ("550 5.1.6 gone", RecipientPermanent, "smtp.enhanced.5.1.6"),
            ("553 5.1.8 nope", SenderConfig, "smtp.enhanced.5.1.8"),
            ("554 5.6.0 x", ContentRejected, "smtp.enhanced.5.6.0"),
            ("452 4.5.3 x", Throttled, "smtp.enhanced.4.5.3"),
            ("550 5.7.10 x", Tls, "smtp.enhanced.5.7.10"),
            ("550 5.7.1 Access denied", Unknown, "smtp.enhanced.5.7.1"),
            ("521 5.3.2 x", Unknown, "smtp.enhanced.5.3.2"),
            ("421 4.4.2 x", Network, "smtp.enhanced.4.4.2"),
            ("421 x", ProviderUnavailable, "smtp.basic.421"),
            ("551 x", RecipientPermanent, "smtp.basic.551"),
            ("500 x", Unknown, "smtp.basic.500"),
            ("554 x", Unknown, "smtp.basic.554"),
            ("gibberish", Unknown, "smtp.unrecognised"),
            (
                "250 2.0.0 Ok: queued",
                Unknown,
                "smtp.success-code-as-failure",
            ),
        ];
        for (raw, class, rule) in cases {
            let v = classify_smtp(raw);
            assert_eq!((v.class, v.rule.as_str()), (class, rule), "{raw}");
            assert_eq!(v.raw_text.as_deref(), Some(raw));
        }
    }

    #[test]
    fn ses_api_errors() {
        use ErrorClass::*;
        let f = |kind, code: Option<&str>, msg: Option<&str>, status| ApiFailure {
            kind,
            code: code.map(str::to_owned),
            message: msg.map(str::to_owned),
            http_status: status,
        };
        let cases = [
            (
                f(
                    ApiFailureKind::Service,
                    Some("MessageRejected"),
                    Some(
                        "Email address is not verified. The following identities failed the check in region US-EAST-1: a@b.c",
                    ),
                    Some(400),
                ),
                SenderConfig,
            ),
            (
                f(
                    ApiFailureKind::Service,
                    Some("MessageRejected"),
                    Some("Illegal address"),
                    Some(400),
                ),
                InvalidJob,
            ),
            (
                f(
                    ApiFailureKind::Service,
                    Some("MessageRejected"),
                    Some("Did not have authority to send from email a@b.c"),
                    Some(400),
                ),
                SenderConfig,
            ),
            (
                f(
                    ApiFailureKind::Service,
                    Some("MessageRejected"),
                    Some("Message rejected"),
                    Some(400),
                ),
                ContentRejected,
            ),
            (
                f(
                    ApiFailureKind::Service,
                    Some("TooManyRequestsException"),
                    None,
                    Some(429),
                ),
                Throttled,
            ),
            (
                f(
                    ApiFailureKind::Service,
                    Some("LimitExceededException"),
                    Some("Maximum sending rate exceeded."),
                    Some(400),
                ),
                Throttled,
            ),
            (
                f(
                    ApiFailureKind::Service,
                    Some("AccountSuspendedException"),
                    None,
                    Some(400),
                ),
                SenderConfig,
            ),
            (
                f(
                    ApiFailureKind::Service,
                    Some("SendingPausedException"),
                    None,
                    Some(400),
                ),
                SenderConfig,
            ),
            (
                f(
                    ApiFailureKind::Service,
                    Some("MailFromDomainNotVerifiedException"),
                    None,
                    Some(400),
                ),
                SenderConfig,
            ),
            (
                f(
                    ApiFailureKind::Service,
                    Some("NotFoundException"),
                    Some("Configuration set does not exist"),
                    Some(404),
                ),
                SenderConfig,
            ),
            (
                f(
                    ApiFailureKind::Service,
                    Some("BadRequestException"),
                    None,
                    Some(400),
                ),
                InvalidJob,
            ),
            (
                f(
                    ApiFailureKind::Service,
                    Some("InternalFailure"),
                    None,
                    Some(500),
                ),
                ProviderUnavailable,
            ),
            (
                f(
                    ApiFailureKind::Service,
                    Some("SomethingNew"),
                    None,
                    Some(503),
                ),
                ProviderUnavailable,
            ),
            (
                f(
                    ApiFailureKind::Service,
                    Some("SomethingNew"),
                    None,
                    Some(429),
                ),
                Throttled,
            ),
            (
                f(
                    ApiFailureKind::Service,
                    Some("SomethingNew"),
                    None,
                    Some(403),
                ),
                SenderConfig,
            ),
            (
                f(
                    ApiFailureKind::Service,
                    Some("SomethingNew"),
                    None,
                    Some(400),
                ),
                Unknown,
            ),
            (f(ApiFailureKind::Timeout, None, None, None), Network),
            (
                f(
                    ApiFailureKind::Dispatch,
                    None,
                    Some("io error: connection refused"),
                    None,
                ),
                Network,
            ),
            (
                f(
                    ApiFailureKind::Dispatch,
                    None,
                    Some("invalid peer certificate"),
                    None,
                ),
                Tls,
            ),
            (
                f(ApiFailureKind::Response, None, None, Some(200)),
                ProviderUnavailable,
            ),
            (
                f(ApiFailureKind::Construction, None, None, None),
                InvalidJob,
            ),
        ];
        for (failure, class) in cases {
            let v = classify_ses_api(&failure);
            assert_eq!(v.class, class, "{failure:?} -> {v:?}");
            assert!(v.raw_code.is_some());
        }
    }

    #[test]
    fn ses_events() {
        use ErrorClass::*;
        let bounce = |t: &str, s: &str, d: Option<&str>| SesFailureEvent::Bounce {
            bounce_type: t.into(),
            bounce_subtype: s.into(),
            diagnostic: d.map(str::to_owned),
        };
        let delay = |t: &str| SesFailureEvent::DeliveryDelay {
            delay_type: t.into(),
            diagnostic: None,
        };
        let cases = [
            (
                bounce("Permanent", "General", Some("smtp; 550 5.1.1 user unknown")),
                RecipientPermanent,
                true,
            ),
            (
                bounce("Permanent", "NoEmail", None),
                RecipientPermanent,
                true,
            ),
            (
                bounce("Permanent", "Suppressed", None),
                RecipientPermanent,
                true,
            ),
            (
                bounce("Permanent", "OnAccountSuppressionList", None),
                RecipientPermanent,
                true,
            ),
            (
                bounce(
                    "Permanent",
                    "General",
                    Some("smtp; 554 5.7.1 blocked using spamhaus"),
                ),
                ContentRejected,
                false,
            ),
            (
                bounce("Transient", "MailboxFull", None),
                MailboxTemporary,
                false,
            ),
            (
                bounce("Transient", "General", None),
                MailboxTemporary,
                false,
            ),
            (
                bounce("Transient", "MessageTooLarge", None),
                ContentRejected,
                false,
            ),
            (
                bounce("Transient", "ContentRejected", None),
                ContentRejected,
                false,
            ),
            (
                bounce("Transient", "AttachmentRejected", None),
                ContentRejected,
                false,
            ),
            (bounce("Undetermined", "Undetermined", None), Unknown, false),
            (
                SesFailureEvent::Complaint {
                    feedback_type: Some("abuse".into()),
                },
                ContentRejected,
                true,
            ),
            (delay("InternalFailure"), ProviderUnavailable, false),
            (delay("MailboxFull"), MailboxTemporary, false),
            (delay("SpamDetected"), ContentRejected, false),
            (delay("TransientCommunicationFailure"), Network, false),
            (delay("SendingDeferral"), Throttled, false),
            (delay("Undetermined"), Unknown, false),
            (
                SesFailureEvent::Reject {
                    reason: Some("Bad content".into()),
                },
                ContentRejected,
                false,
            ),
            (
                SesFailureEvent::RenderingFailure {
                    error: Some("Attribute 'name' is not present".into()),
                },
                Rendering,
                false,
            ),
        ];
        for (event, class, suppress) in cases {
            let v = classify_ses_event(&event);
            assert_eq!(
                (v.class, v.suppress_recipient),
                (class, suppress),
                "{event:?}"
            );
        }
        assert!(classify_ses_event(&delay("SpamDetected")).retryable);
    }

    #[test]
    fn class_names_round_trip() {
        for class in ErrorClass::ALL {
            assert_eq!(ErrorClass::parse(class.as_str()), Some(class));
            assert_eq!(
                serde_json::to_value(class).unwrap(),
                serde_json::Value::String(class.as_str().into())
            );
        }
        assert_eq!(ErrorClass::parse("nope"), None);
    }
}
