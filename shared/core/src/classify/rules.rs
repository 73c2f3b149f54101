//! The wording rules for SMTP replies, as data: each rule names a class and the phrases that
//! imply it.

use super::ErrorClass;

/// A wording rule: a name, the class it implies, and phrases of which any one must appear in the
/// lower-cased text (all phrases of a `&[&str]` inner list must appear together), or a clause.
pub(super) struct TextRule {
    pub(super) name: &'static str,
    pub(super) class: ErrorClass,
    pub(super) any_of: &'static [&'static [&'static str]],
    pub(super) clause: Option<&'static Clause>,
}

/// A subject word followed in the same clause, within [`CLAUSE_REACH`] bytes, by a predicate
/// phrase: "User <a.b@x> unknown", "the recipient name is not recognized", "mailbox 'bob' does
/// not exist". A clause ends at `;`, `:`, `,`, a bracket, a line break or a full stop followed by
/// a space (an address's dots do not end it). A subject right after one of `not_after` does not
/// count ("sender address", "IP address").
pub(super) struct Clause {
    pub(super) subjects: &'static [&'static str],
    pub(super) not_after: &'static [&'static str],
    pub(super) predicates: &'static [&'static str],
}

/// How far after its subject a clause's predicate may start.
pub(super) const CLAUSE_REACH: usize = 40;

macro_rules! rule {
    ($name:literal, $class:ident, [$([$($p:literal),+]),+ $(,)?]) => {
        TextRule {
            name: $name,
            class: ErrorClass::$class,
            any_of: &[$(&[$($p),+]),+],
            clause: None,
        }
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
pub(super) static TEXT_RULES: &[TextRule] = &[
    // A relay reporting that *it* could not reach the destination (Exchange's queue expiry, even
    // when it quotes a socket error): the receiving side's routing, not our connection.
    rule!(
        "relay-gave-up",
        ProviderUnavailable,
        [
            ["queue.expired"],
            ["message expired"],
            ["5.4.316"],
            ["cannot send message for"],
            ["envelope expired"],
            ["administratively expired"]
        ]
    ),
    // A blocklist named in a refusal: before the network rule, since some receivers word it
    // "Connection refused. <ip> is listed on the Spamhaus Block List" in a 554 reply.
    rule!(
        "blocklisted",
        ContentRejected,
        [
            ["spamhaus"],
            ["block list"],
            ["blocklist"],
            ["blacklist"],
            ["black list"],
            ["dnsbl"],
            ["spamcop"],
            ["barracuda"],
            ["uceprotect"]
        ]
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
            ["4.4.2", "timed out"],
            ["all routes to destination"],
            ["temporary mx lookup error"],
        ]
    ),
    // A mail loop (the receiving side's routing sends the message back to itself, or it has
    // passed too many hops): resending cannot help, and nothing says the address is dead. No class
    // says more than `unknown`, but the wording is final: reviewed at once, not retried, unless
    // the reply is a 4xx (see `classify_smtp`).
    rule!(
        "mail-loop",
        Unknown,
        [
            ["loops back to me"],
            ["loops back to myself"],
            // Exim: the lowest MX is the host itself, so it would deliver to itself.
            ["mx record points to local host"],
            ["mail loop"],
            ["forwarding loop"],
            ["routing loop"],
            ["too many hops"],
            ["hop count exceeded"],
            ["mx list for", "points back to"]
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
            ["lpn", "_517"],
            ["lpn", "_102"],
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
        [
            ["ofr", "_505"],
            ["lpn", "_505"],
            // A receiver's own content scanner failing (Rspamd "scan timeout"): not a verdict.
            ["scan timeout"],
            ["scan error"],
            ["unable to scan"]
        ]
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
            ["quota exceed"],
            ["not enough storage"],
            ["storage space"],
            ["diskspace quota"],
            ["folder full"],
            ["folder is full"],
            ["mailbox size exceeded"],
            ["ccount is full"],
            ["error writing message: file too large"],
            ["boîte aux lettres du destinataire est pleine"],
            ["boite aux lettres du destinataire est pleine"],
            ["postfach des empfängers ist voll"],
            ["postfach des empfaengers ist voll"],
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
            ["certificate"],
            ["tls conversation"],
            // chasquid: a domain's recorded TLS level (STARTTLS before, now plain or unverified).
            ["security level check failed"],
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
    // Gmail's "unusual rate of unsolicited mail": a block as 550 5.7.1, a rate limit as 421 4.7.28
    // (a 4xx reply makes content_rejected throttled).
    rule!(
        "unsolicited-rate",
        ContentRejected,
        [["unusual rate", "unsolicited"]]
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
            ["daily limit"],
            ["messages per session"],
            ["sending excessive"],
            ["number of messages exceeded"],
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
            ["sending account"],
            ["sender is not allowed"],
            ["relay not allowed"],
            ["mx do not point to us"],
            ["not accepting email for domain"],
            ["invalid domain, see <url:"],
            ["violate section 3.3.9 of rfc 1035"],
            ["illegal mx record for host"],
            ["invalid mx record for host"],
            ["5.1.7", "invalid address"],
            ["unknown sender address"],
            ["sender address syntax error"],
            ["sender address must be specified"],
            // Exim's sender verification: "unknown local part in sender <a@x>".
            ["unknown local part in sender"],
            // A list refusing the empty return path of a bounce, and a provider blocking our account.
            ["null sender"],
            ["sending for this account"],
        ]
    ),
    rule!(
        "recipient-unknown",
        RecipientPermanent,
        [
            ["user unknown"],
            ["unknown user"],
            // Exim's and web.de's "Unknown local part x in <x@y>".
            ["unknown local part"],
            ["unknown local-part"],
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
            ["no mailbox"],
            ["no mail box"],
            ["unrouteable address"],
            ["unroutable address"],
            ["bad destination mailbox"],
            ["unknown or illegal alias"],
            ["unknown e-mail address"],
            // Office 365's NDR: "Your message to x@y couldn't be delivered. x wasn't found at y."
            ["wasn't found at"],
            ["unknown email address"],
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
            ["dd this user"],
            ["user not known"],
            ["not a valid user"],
            ["invalid final delivery userid"],
            ["nonexistent user"],
            ["non-existent user"],
            ["no mailbox found"],
            ["mail-box not found"],
            ["marked as invalid"],
            ["invalid-recipient"],
            ["not in recipient list"],
            ["bad_recipient"],
            ["not an active address"],
            ["bad address syntax"],
            ["banned recipient"],
            ["no such domain"],
            ["unknown host"],
            ["name or service not known"],
            ["no matches to nameserver query"],
            ["point to non-existent hosts"],
            ["indicated no smtp service"],
            ["unrouteable mail domain"],
            // Localised "does not exist" / "was not found" (French, German, Swedish).,
            ["n'existe pas"],
            ["wurde nicht", "gefunden"],
            ["gick inte att hitta e-postadressen"],
            ["domain name not found"],
            ["unknown local-part"],
            ["no longer accepts mail"],
            ["does not accept mail"],
            ["not a member of domain"],
            ["no longer exists"],
            ["rcpt user"],
            ["invalid email address"],
            ["receiving disabled"],
            ["couldn't find any host named"],
            ["nowhere to deliver mail to for domain"],
            ["nonexistent domain"],
            ["host name unknown"],
            ["no correct recipients"],
            ["bad recipient address syntax"],
            ["bad destination system address"],
            ["recipient address syntax error"],
            ["able to find the recipient domain"],
            ["recipient not in route list"],
            ["malformed destination address"],
            ["recipient address reserved by rfc 2606"],
            ["single label domains not accepted"],
            ["user not exist"],
            ["e-mail adress unknown"],
            ["hasn't got the service mapped"],
            // Mailman/GroupWise-era gateways: mail never picked up by its owner (a suspended box).
            ["has not been collected"],
            // A suspended mailbox (X.2.1), named as the recipient's.
            ["user suspended"],
            ["mailbox suspended"],
            ["mailbox is suspended"],
            ["recipient suspended"],
            // qmail's validrcptto patch: the recipient is not among the domain's valid ones.
            ["validrcptto"],
            // Malformed recipient addresses (X.1.3): Postfix's reject_non_fqdn_recipient.
            ["bad address", "syntax"],
            ["recipient address rejected: need fully-qualified address"],
            // A null MX (RFC 7505, X.1.10), in mox's and others' words.
            ["domain does not accept email"],
            ["domain does not accept e-mail"],
            // The sending service's suppression list: it refuses the address for earlier hard
            // bounces (SES, mox, Mailgun), so suppressing it is right.
            ["on suppression list"],
            ["on the suppression list"],
            // Chinese mailbox providers (QQ, NetEase, Coremail, Sina): "the user / recipient /
            // account / mailbox / address does not exist".
            ["用户不存在"],
            ["收件人不存在"],
            ["帐号不存在"],
            ["账号不存在"],
            ["帐户不存在"],
            ["账户不存在"],
            ["邮箱不存在"],
            ["地址不存在"],
            // QQ Mail: "this user has not activated (opened) QQ Mail": no mailbox at the address.
            ["用户未开通"],
            // Coremail (the platform of NetEase 163/126 and many Chinese hosts), in English.
            ["unavailable mail user"],
            ["not user of this server"],
            ["don't exists that user"],
        ]
    ),
    // The same meaning in words the list above does not spell out: a recipient noun with a
    // "does not exist" predicate in one clause (bounce handlers match these families, e.g.
    // PHPMailer-BMH's `(alias|account|recipient|address|email|mailbox|user).*unknown`).
    TextRule {
        name: "recipient-unknown-clause",
        class: ErrorClass::RecipientPermanent,
        any_of: &[],
        clause: Some(&Clause {
            subjects: &[
                "user",
                "email",
                "e-mail",
                "recipient",
                "mailbox",
                "mail box",
                "address",
                "account",
                "addressee",
                "alias",
                "local part",
                "local-part",
            ],
            not_after: &["sender ", "ip ", "from ", "reply-to ", "return "],
            predicates: &[
                "unknown",
                "not found",
                "couldn't be found",
                "could not be found",
                "not exist",
                "n't exist",
                "not recognized",
                "not recognised",
                "not valid",
                "invalid",
                "not known",
                "no longer exist",
                "nonexistent",
                "non-existent",
            ],
        }),
    },
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
            ["line is too long"],
            ["not accepting mail from"],
            ["date header"],
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
            ["5.7.23"],
            ["content filter agent quarantined"],
            ["mime/reject"],
            // The message's own form: missing or malformed header fields, archives it cannot scan,
            // a closed mailing list.
            ["header"],
            ["password-protected"],
            ["closed mailing list"],
            // Postfix: the message needs SMTPUTF8 (a non-ASCII address or header) and the next
            // hop does not offer it (RFC 6531, X.6.7): the same message fails there again.
            ["smtputf8 is required"],
            // ... and 8BITMIME (RFC 6152): mox's "does not implement 8bitmime extension,
            // required by message", Postfix's "requires 8bitmime".
            ["8bitmime", "required"],
            ["requires 8bitmime"],
            // A malicious attachment or macro, a dictionary (address-harvesting) attack.
            ["malicious"],
            ["dictionary attack"],
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
    // The receiving host's local delivery program failed (a pipe, procmail, an MDA): its
    // operator's trouble, retried. After the other rules: the words that follow "Command died
    // with status ..." often name the real cause (over quota, user unknown).
    rule!(
        "delivery-program-failed",
        ProviderUnavailable,
        [
            ["command time limit exceeded"],
            ["child process of"],
            ["unknown mailer error"],
            ["child crashed"],
            ["mda exited prematurely"]
        ]
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
            ["lookup failure"],
            ["server unavailable or unable to receive"],
            ["insufficient disk space"],
            ["tried all mxs"],
        ]
    ),
];
