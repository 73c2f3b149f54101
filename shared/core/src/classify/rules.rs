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
/// not exist". A clause ends at `;`, `:`, `,`, a bracket (not one around an address: "user
/// [bob@x] unknown"), a line break or a full stop followed by a space (an address's dots do not
/// end it). A subject right after one of `not_after` does not count ("sender address", "IP
/// address").
/// A subject of `modified_subjects` right after one of `modifiers`, with at most one word of
/// `modifier_gap` between ("invalid user", "no such local user"), counts as well. A predicate
/// ends its word, and none of `not_between` may stand before it ("user name or password
/// invalid"). With `links`, only those words (and addresses) may stand between subject and
/// predicate, and the predicate must end its phrase ("account has been closed", not "account
/// closed connection"). A word of `vetoes` anywhere in the text cancels the clause.
pub(super) struct Clause {
    pub(super) subjects: &'static [&'static str],
    pub(super) not_after: &'static [&'static str],
    pub(super) predicates: &'static [&'static str],
    pub(super) not_between: &'static [&'static str],
    pub(super) vetoes: &'static [&'static str],
    pub(super) links: &'static [&'static str],
    pub(super) modifiers: &'static [&'static str],
    pub(super) modified_subjects: &'static [&'static str],
    pub(super) modifier_gap: &'static [&'static str],
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

mod faults;
mod recipients;
mod senders;

/// The rules in the order they are tried: the first rule whose phrases appear wins. The rules read
/// [`rule_text`]: the lower-cased reply text with whitespace (and line breaks) collapsed, prefixed
/// with the enhanced code, so a provider's code (`5.7.708`, `IB607`, `AUP#CDRBL`, `OFR_417`) can be
/// written as a phrase.
///
/// Order, most specific first:
/// 1. relay reports, provider codes naming a dead recipient, and our own socket/DNS errors
///    (`network`), before any word such as "refused" or "blacklisted";
/// 2. the other provider code tables, which beat the generic words around them (Spectrum/Cox's
///    `sender rejected ... AUP#...`, GoDaddy's `5.1.1 ... IB607`);
/// 3. mailbox-level temporary conditions (greylisting, quota, per-mailbox receive limits, a
///    catch-all mailbox the receiver could not write);
/// 4. TLS, then our own sending infrastructure (PTR, HELO, sender domain DNS), then limits on us;
/// 5. sender wording before recipient wording (`Sender address rejected: User unknown`,
///    `Domain of sender address ... does not exist`), then content/policy, then the receiver's own
///    trouble. A Spamhaus block in a `Service unavailable` reply is thus content, and a greylisting
///    reply that mentions "policy" is still greylisting.
///
/// Generic words that state no cause ("try again later", "closing connection", bare "denied" or
/// "refused") are deliberately absent: the enhanced or basic code decides those replies.
pub(super) fn text_rules() -> impl Iterator<Item = &'static TextRule> {
    CODES_AND_CONDITIONS
        .iter()
        .chain(senders::SENDERS)
        .chain(recipients::RECIPIENTS)
        .chain(faults::REFUSALS_AND_FAULTS)
}

/// Order points 1 to 4.
static CODES_AND_CONDITIONS: &[TextRule] = &[
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
            ["administratively expired"],
            // a relay's retry limit ran out: Exim's "all hosts have been failing for a long
            // time", "Could not deliver for the last 432000 seconds", qmail's "in the queue too
            // long"
            ["have been failing for a long time"],
            ["could not deliver for the last"],
            ["in the queue too long"],
            ["retry time not reached for any host"],
            // sendmail's "Message could not be delivered for 5 days" and its delay warnings
            ["could not be delivered for more than"],
            ["could not be delivered for 1 day"],
            ["could not be delivered for 2 days"],
            ["could not be delivered for 3 days"],
            ["could not be delivered for 4 days"],
            ["could not be delivered for 5 days"],
            ["could not be delivered for 6 days"],
            ["could not be delivered for 7 days"],
            // X.4.7's title in RFC 3463's registry, which MTAs use as the text
            ["delivery time expired"],
            // the same in the languages relays report in
            // "Message was not delivered within the allowed time" (not qmail's "Giving up on
            // <host>", which follows the host's own permanent refusal)
            ["not delivered within the allowed time"],
            // "the message (has) expired", in the languages relays report in
            ["nachricht ist abgelaufen"],
            ["message a expiré"],
            ["message est expiré"],
            ["mensaje ha caducado"],
            ["mensaje ha expirado"],
            ["messaggio è scaduto"],
            ["mensagem expirou"],
            ["bericht is verlopen"],
            ["tiempo de entrega vencido"],
            ["tiempo de entrega expirado"],
            ["délai de livraison expiré"],
            ["délai de remise expiré"],
            ["zustellzeit abgelaufen"],
            ["tempo di consegna scaduto"],
            ["prazo de entrega expirado"],
            ["срок доставки истек"],
            ["срок доставки истёк"],
            ["配信期限切れ"],
            ["投递超时"],
        ]
    ),
    // Provider codes and words that name a dead recipient, before the blocklist rule ("Address
    // blacklisted" is SES's suppression list) and the sender rules ("Unable to relay").
    rule!(
        "provider-code-recipient",
        RecipientPermanent,
        [
            ["s2017062302"],
            // SES's account-level suppression list ("... to this address because it is on the
            // suppression list for your account"): before the sender rules' "your account"
            ["to this address because it is on the suppression list"],
            ["ofr", "_416"],
            ["lpn", "_416"],
            ["lpn", "_420"],
            // SES's SMTP interface refusing an address on its suppression list (earlier hard
            // bounces): the address is listed, not our host
            ["message rejected: address blacklisted."],
            // a routing failure (RFC 3463 X.4.4: no next hop for the domain) that Exchange
            // words "Unable to relay"; its relay refusal proper is 5.7.1
            ["5.4.4 unable to relay"]
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
            // Barracuda's list by name, not its relays' host names (`d123.ess.barracudanetworks.com`
            // quoting a "Mailbox full")
            ["barracuda reputation"],
            ["barracudacentral"],
            ["uceprotect"],
            // qmail's list of refused envelope senders
            ["badmailfrom"]
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
            ["malformed or unexpected name server reply"],
            // EADDRNOTAVAIL: our socket could not bind a source address
            ["cannot assign requested address"],
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
            ["zu viele hops"],
            ["recursive forward"],
            ["hop count exceeded"],
            ["loop detected"],
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
            ["4.7.651"],
            // Forpsi (Czech and Polish hosting): its knowledge-base articles for an automatic
            // block on the sending IP that lifts after an hour
            ["support.forpsi.com/kb/a4071"],
            ["support.forpsi.com/kb/a4081"]
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
            // Exchange Online: our tenant's own contact lacks a valid primary address
            ["resolver.adr.badprimary"],
            ["ib401"],
            ["ib506"],
            ["ib108"],
            ["lpn", "_402"]
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
            ["scanner timeout"],
            ["scanner error"],
            ["spamd connect"],
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
            ["remaining quota"],
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
            // "550 (Mailbox) Quota Violation": a mailbox over its quota
            ["quota violation"],
            ["not enough storage"],
            ["storage space"],
            ["diskspace quota"],
            ["folder full"],
            ["folder is full"],
            ["mailbox size exceeded"],
            ["mailbox quota"],
            ["quota usage"],
            ["storage quota"],
            ["over its storage limit"],
            ["mailbox storage limit"],
            // "mailbox has reached its maximum size", "Mailbox over size limit"
            ["mailbox has reached its maximum size"],
            ["mailbox reached its maximum size"],
            ["mailbox over size limit"],
            ["ccount is full"],
            ["error writing message: file too large"],
            ["boîte aux lettres du destinataire est pleine"],
            ["boite aux lettres du destinataire est pleine"],
            ["postfach des empfängers ist voll"],
            ["postfach des empfaengers ist voll"],
            // "mailbox full" and "quota exceeded" in the languages receivers answer in.
            ["postfach ist voll"],
            ["postfach voll"],
            ["deliver to full mailbox"],
            ["due to a full mailbox"],
            ["boîte pleine"],
            ["boite pleine"],
            ["boîte aux lettres pleine"],
            ["quota dépassé"],
            ["buzón lleno"],
            ["buzón está lleno"],
            ["buzón del destinatario está lleno"],
            ["casilla llena"],
            ["cuota excedida"],
            ["caixa postal cheia"],
            ["caixa de correio cheia"],
            ["caixa cheia"],
            ["caixa de correio do destinatário está cheia"],
            ["cota excedida"],
            ["quota excedida"],
            ["casella piena"],
            ["casella di posta piena"],
            ["cassetta postale del destinatario è piena"],
            ["cassetta postale piena"],
            ["quota superata"],
            ["postvak vol"],
            ["postvak is vol"],
            ["skrzynka jest pełna"],
            ["skrzynka pełna"],
            ["skrzynka odbiorcy jest pełna"],
            ["ящик переполнен"],
            ["ящик получателя переполнен"],
            ["容量超過"],
            ["容量オーバー"],
            ["容量不足"],
            ["용량 초과"],
            ["용량이 초과"],
            ["空间不足"],
            ["空間不足"],
            ["邮箱已满"],
            ["邮箱空间已满"],
            ["メールボックスがいっぱい"],
            ["메일함이 가득"],
            ["信箱已滿"],
        ]
    ),
    rule!(
        "microsoft-access-denied-recipient",
        RecipientPermanent,
        [
            // Exchange Online's own (5.4.1); Postfix says the same of an access map's REJECT,
            // which is a filter (README decision 2).
            ["5.4.1", "recipient address rejected: access denied"],
            ["as(201806281)"]
        ]
    ),
    // A limit or lock on this one mailbox, whoever sends (README decision 4): not a limit on us.
    rule!(
        "mailbox-receive-limit",
        MailboxTemporary,
        [
            ["receiving mail too quickly"],
            // QQ Mail's documented per-mailbox frequency limit
            ["mailbox unavailable or access denied"],
            ["receiving mail at a rate"],
            ["messages to", "deferred due to excessive volume"],
            ["limit for the number of messages they can receive"],
            ["too many concurrent deliveries for user"],
            ["temporary locked"],
            ["temporarily locked"]
        ]
    ),
    // vpopmail's catch-all: "user does not exist, but will deliver to <its maildir>", then the
    // fault that stopped it ("can not open new email file errno=2 ..."). The address is served
    // by the catch-all, so the recipient rules' "does not exist" must not read it as dead.
    rule!(
        "catch-all-fault",
        ProviderUnavailable,
        [["but will deliver to"], ["can not open new email file"]]
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
            ["requires encrypted message transmission"],
            ["must use encryption to send"],
            ["tls needed"],
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
            // DANE (RFC 7672): no TLSA record matches the certificate; a failed handshake.
            ["tlsa"],
            ["handshake error"],
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
            ["reverse-dns"],
            ["rdns"],
            ["cannot find your hostname"],
            ["ip name lookup failed"],
            ["helo command rejected"],
            ["fully-qualified hostname"],
            ["fully qualified hostname"],
            ["non-fqdn"],
            ["send email directly"],
            ["unresolvable", "from domain"],
            // j-chkmail's client check; Outlook.com on a sender domain without MX or A records.
            ["ip address doesn't resolve"],
            ["ip address does not resolve"],
            ["invalid dns mx or a/aaaa"],
            // Our HELO/EHLO name refused, in any receiver's words ("HELO/EHLO rejected. IB301",
            // "Invalid HELO/EHLO; HRP limit exceeded", "Bad HELO").
            ["helo/ehlo"],
            ["invalid helo"],
            ["invalid ehlo"],
            ["bad helo"],
            ["helo rejected"],
            ["helo hostname"],
            ["helo name"],
            ["ehlo rejected"]
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
            ["too many e-mails"],
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
            ["4.7.27", "rate"],
            // Limits per hour or per message count ("Hourly limit reached", "You have exceeded
            // your messaging limits"): not a size ("message size limit" stays content).
            ["hourly limit"],
            ["messaging limit"],
            // "Your mail limit has been reached" (StartMail); not "exceeds mail limit" (a size)
            ["mail limit has been reached"],
            ["recipient limit"],
            ["messages per hour"],
            ["messages per day"],
            ["messages per minute"],
            ["emails per hour"],
            ["mails per hour"],
            ["per hour exceeded"],
            // "too many" (connections, messages, recipients) in the languages receivers answer
            // in; "zu viele ungültige Empfänger" is a limit, as "too many invalid" above.
            ["zu viele verbindungen"],
            ["zu viele nachrichten"],
            ["zu viele e-mails"],
            ["zu viele empfänger"],
            ["zu viele ungültige"],
            ["trop de connexions"],
            ["trop de messages"],
            ["trop de destinataires"],
            ["demasiadas conexiones"],
            ["demasiados mensajes"],
            ["demasiados destinatarios"],
            ["demasiadas conexões"],
            ["mensagens demais"],
            ["troppe connessioni"],
            ["troppi messaggi"],
            ["troppi destinatari"],
            ["te veel verbindingen"],
            ["te veel berichten"],
            ["zbyt wiele połączeń"],
            ["zbyt wiele wiadomości"],
            ["слишком много соединений"],
            ["слишком много подключений"],
            ["слишком много писем"],
            ["слишком много сообщений"],
            ["слишком много получателей"],
            ["发送频率过高"],
            ["发信频率"],
            ["發信頻率"],
            ["频率过快"],
            ["頻率過快"],
            ["送信数の制限"]
        ]
    ),
];
