//! Order point 5 of the wording rules, after who the reply blames: what was refused (content,
//! policy), then the receiver's own trouble and a failed connection.

use super::TextRule;
use crate::classify::ErrorClass;

pub(in crate::classify) static REFUSALS_AND_FAULTS: &[TextRule] = &[
    // The receiver's own virus scanner or spam filter failed (not the message it scanned): its
    // operator's trouble, retried as the receiver's faults below, also under a 5yz code. Before
    // the content rule, whose "virus" and "spam" would read it as a refusal.
    rule!(
        "filter-fault",
        ProviderUnavailable,
        [
            ["scanner failure"],
            ["scanner error"],
            ["scanner not available"],
            ["scanner unavailable"],
            ["scanner is not available"],
            ["scanner not responding"],
            ["problem running virus"],
            // haraka-plugin-clamd's DENYSOFT texts
            ["error running virus"],
            ["scanner timed out"],
            ["connecting to virus scanner"],
            ["filter not responding"],
            ["filter service not responding"],
            ["filter is not responding"],
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
            ["sorbs"],
            ["spamcop"],
            ["uceprotect"],
            ["surbl"],
            ["dnsbl"],
            ["rbl"],
            ["listed at"],
            ["listed on"],
            ["listed in"],
            ["listed by"],
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
            ["message est trop volumineux"],
            ["message trop volumineux"],
            ["nachricht ist zu groß"],
            ["nachricht zu groß"],
            ["mensaje es demasiado grande"],
            ["mensaje demasiado grande"],
            ["messaggio è troppo grande"],
            ["messaggio troppo grande"],
            ["mensagem é muito grande"],
            ["mensagem muito grande"],
            ["сообщение слишком большое"],
            ["письмо слишком большое"],
            ["邮件过大"],
            ["邮件太大"],
            ["メールサイズが大きすぎ"],
            ["메일 크기가 너무"],
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
            ["worm"],
            // a receiver's own filter rules: "the message matches up to the filter rule",
            // "This Message is not welcome"
            ["filter rule"],
            ["not welcome"],
            ["dictionary attack"],
            // A size the receiver never takes ("Message exceeds maximum fixed size"), an SMTPUTF8 message
            // to a server without it (Exim's "did not include SMTPUTF8"), a recipient who unsubscribed.
            ["message exceeds maximum"],
            ["did not include smtputf8"],
            // X.2.3's title in RFC 3463's registry: the same message is too long again.
            ["exceeds administrative limit"],
            ["does not support smtputf8"],
            ["unsubscribed"],
        ]
    ),
    // RFC 5321's default 550 text, which Outlook.com, Hotmail and GMX use for "no such user"
    // (README decision 14); after the content rule so that "mailbox unavailable: spam" stays
    // content. The 450 form becomes mailbox_temporary.
    rule!(
        "mailbox-unavailable",
        RecipientPermanent,
        [
            ["mailbox unavailable"],
            ["mailbox is unavailable"],
            ["mailbox is not available"]
        ]
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
    // A fault inside the receiving system (a crash, a timeout, a failed lookup, a full disk): its
    // operator's trouble and retried, as the delivery program's failure above, also under a 5yz
    // code, which such a server sends for any error it meets ("550 5.3.5 Internal user lookup
    // failure", "500 Internal Server Error").
    rule!(
        "receiver-fault",
        ProviderUnavailable,
        [
            ["local error"],
            // Postfix's "local configuration error" (4.3.5): the receiver's own setup
            ["local configuration error"],
            ["internal error"],
            ["server error"],
            ["system error"],
            ["timeout"],
            ["timed out"],
            ["queue file write error"],
            ["database"],
            ["lookup failure"],
            ["insufficient disk space"],
            // The titles of X.3.1, X.4.3 and X.4.5 in RFC 3463's registry, and RFC 5321's 452
            // text, which MTAs use as the text of a reply or DSN.
            ["mail system full"],
            ["directory server failure"],
            ["mail system congestion"],
            ["insufficient system storage"],
            // A receiving server too busy or overloaded to take the message: it passes.
            ["server busy"],
            ["server is busy"],
            ["server too busy"],
            ["server is too busy"],
            ["system busy"],
            ["system is busy"],
            ["overloaded"],
        ]
    ),
    // A receiving service that is down or refusing service: under a 5yz code or a 5.x.x status
    // the code decides (`unknown`, reviewed: the words do not say what was refused).
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
            ["shutting down"],
            ["resources unavailable"],
            ["temporarily rejected"],
            ["server unavailable or unable to receive"],
            ["tried all mxs"],
        ]
    ),
    // A connection that could not be made or was cut, in words the network rule (order point 1)
    // does not spell out: last, so that a refusal's own words ("spam rejected, connection
    // closed") decide first. Under a 5yz code it does not apply (the connection worked).
    rule!(
        "connection-failed",
        Network,
        [
            ["connection closed"],
            ["closed connection"],
            ["closed the connection"],
            ["host unreachable"],
            ["could not connect"],
            ["couldn't connect"],
            ["unable to connect"],
            ["cannot connect"],
            ["can't connect"],
            ["failed to connect"],
            ["connect failed"],
            ["connection failed"],
            ["connection lost"],
        ]
    ),
];
