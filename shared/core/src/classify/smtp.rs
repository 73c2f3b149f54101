//! SMTP replies: parsing the reply and its enhanced code, then the three passes (wording
//! rules, enhanced code, basic code).

use super::phrases::Found;
use super::registry::{REGISTRY, SUBJECT_DEFAULTS};
use super::rules::{CLAUSE_REACH, Clause, TextRule, text_rules};
use super::signals::{passes, refusal_word, says_permanent, says_temporary};
use super::*;
use std::borrow::Cow;
use unicode_normalization::UnicodeNormalization;

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
        let mut quoted = None;
        let mut enhanced = None;
        let mut lines = Vec::new();
        for line in raw.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let mut rest = line;
            if let Some(c) = leading_reply_code(line) {
                code.get_or_insert(c);
                rest = line[3..].trim_start_matches(['-', ' ']).trim_start();
            } else if let Some(c) = quoted_reply_code(line) {
                quoted.get_or_insert(c);
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
        // A code quoted inside the bounce's words counts when no line starts with one, and
        // yields to a status it contradicts (Exchange's `returned '550 4.3.2 ...'`).
        if code.is_none() {
            code = quoted.filter(|c| enhanced.is_none_or(|e| u16::from(e.class) == c / 100));
        }
        // An enhanced code that contradicts the basic code's class is ignored (RFC 3463 s2: the
        // class must agree with the reply code). A 3yz or other code that no class matches,
        // misused as a failure ("354 5.5.0 End data with ..."), keeps it: it is the only signal.
        if let (Some(c), Some(e)) = (code, enhanced)
            && matches!(c / 100, 2 | 4 | 5)
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

    /// The first digit of whichever code is present (2, 4 or 5). A reply code of another class
    /// (`354` in a bounce, a gateway's `602`) says nothing of success or failure (RFC 5321 4.2.1),
    /// so the enhanced status decides, else the words, as without a code.
    fn class_digit(&self) -> Option<u8> {
        self.code
            .and_then(|c| u8::try_from(c / 100).ok())
            .filter(|d| matches!(d, 2 | 4 | 5))
            .or(self.enhanced.map(|e| e.class))
    }
}

pub(super) fn leading_reply_code(line: &str) -> Option<u16> {
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

/// Where a bounce quotes the remote server's reply code inside its own words: a DSN's type
/// prefix (`smtp; 450 ...`, Exchange's `#5.1.1 smtp;550 ...`), Postfix's `host X said: 550`,
/// Exim's `host X [192.0.2.1]: 450` and `after RCPT TO:<a@b>: 550`, sendmail's `Deferred: 450`,
/// qmail's `Remote host said:`, Exchange's `Remote Server returned '550 ...'` and `#550 ...`,
/// and Gmail's `The response was: 550 ...`.
const QUOTE_MARKERS: [&str; 9] = [
    "said:",
    "smtp;",
    "deferred:",
    "]: ",
    ">: ",
    "returned '",
    "returned was:",
    "response was:",
    "#",
];

/// The 4yz or 5yz reply code a bounce quotes right after one of [`QUOTE_MARKERS`] (the first
/// such place), when the line does not start with a code of its own. Exim's and Postfix's
/// `[192.0.2.1]:465` is a port: the bracket's colon counts only with a space after it.
fn quoted_reply_code(line: &str) -> Option<u16> {
    let lower = line.to_ascii_lowercase();
    let mut places: Vec<usize> = QUOTE_MARKERS
        .iter()
        .flat_map(|marker| lower.match_indices(marker).map(|(at, m)| at + m.len()))
        .collect();
    places.sort_unstable();
    places
        .into_iter()
        .filter_map(|after| leading_reply_code(lower[after..].trim_start()))
        .find(|code| matches!(code / 100, 4 | 5))
}

/// Whether a word of the text is a number like a 4yz or 5yz reply code (`the relay gave up after
/// 450 attempts`). Where [`quoted_reply_code`] took none (it needs a marker before the code), such
/// a number still keeps a codeless bounce's words from deciding: it may be the reply's code.
fn mentions_a_code(lower: &str) -> bool {
    lower.split_whitespace().any(|t| {
        t.len() == 3
            && t.bytes().all(|b| b.is_ascii_digit())
            && matches!(t.as_bytes()[0], b'4' | b'5')
    })
}

pub(super) fn parse_enhanced(token: &str) -> Option<EnhancedCode> {
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

pub(super) fn leading_enhanced(text: &str) -> Option<(EnhancedCode, &str)> {
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    parse_enhanced(&text[..end]).map(|e| (e, &text[end..]))
}

/// Finds an enhanced code inside text, e.g. qmail's `(#5.1.1)` or `[5.2.2]`; never a piece of an
/// IP address or version number.
pub(super) fn find_enhanced(text: &str) -> Option<EnhancedCode> {
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

/// The text the wording rules read: the enhanced code (if any) and the reply text, lower-cased,
/// with runs of whitespace (line breaks of multi-line replies included) collapsed to one space
/// and typographic apostrophes made plain ("doesn’t" reads as "doesn't").
pub(super) fn rule_text(enhanced: Option<EnhancedCode>, text: &str) -> String {
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
    out.to_lowercase().replace('\u{2019}', "'")
}

/// The names of the wording rules, in the order they are tried (`smtp.text.<name>`).
pub fn text_rule_names() -> Vec<&'static str> {
    text_rules().map(|r| r.name).collect()
}

pub(super) fn text_rule(lower: &str) -> Option<&'static TextRule> {
    let found = Found::in_text(lower);
    text_rules()
        .enumerate()
        .find(|&(position, rule)| rule_matches(rule, position, &found, lower))
        .map(|(_, rule)| rule)
}

/// The rule at `position` in [`text_rules`] matches: all phrases of one of its lists were found
/// (with or without their accents), or its clause reads in the text.
fn rule_matches(rule: &TextRule, position: usize, found: &Found, lower: &str) -> bool {
    found.rule_phrases(position) || rule.clause.is_some_and(|c| clause_matches(c, lower))
}

/// A listed word as [`fold`] makes it, when folding changed it.
pub(super) fn folded_word(word: &str) -> Option<String> {
    let folded = fold(word);
    (folded != word).then(|| folded.into_owned())
}

/// The text with its accented Latin letters as their base letters (and "ß" as "ss", "æ" as "ae",
/// "œ" as "oe"), and Russian "ё" as "е": servers that write only ASCII send "usuario
/// desconhecido" for "usuário desconhecido", "uzytkownik" for "użytkownik", and "истек" for
/// "истёк". Accents sent as marks of their own (decomposed text, Turkish "İ" lower-cased) are
/// dropped too. Other scripts are kept as they are (a Japanese voiced kana is another word).
/// Borrowed when there is nothing to fold.
pub(super) fn fold(lower: &str) -> Cow<'_, str> {
    let folds = |c: char| matches!(c, '\u{c0}'..='\u{24f}' | '\u{300}'..='\u{36f}' | 'ё');
    if lower.is_ascii() || !lower.chars().any(folds) {
        return Cow::Borrowed(lower);
    }
    let mut out = String::with_capacity(lower.len());
    for c in lower.chars() {
        match c {
            'ё' => out.push('е'),
            // letters that have no decomposition
            'ł' => out.push('l'),
            'ø' => out.push('o'),
            'đ' => out.push('d'),
            'ħ' => out.push('h'),
            'ı' => out.push('i'),
            'ß' => out.push_str("ss"),
            'æ' => out.push_str("ae"),
            'œ' => out.push_str("oe"),
            c if folds(c) => out.extend(
                std::iter::once(c)
                    .nfd()
                    .filter(|d| !unicode_normalization::char::is_combining_mark(*d)),
            ),
            _ => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A character that continues a word (the rules' phrases match at word boundaries).
pub(super) fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// A token of a reply that names rather than says: an address (`<temporary@example.com>`) or a
/// link (`https://...`, `kb.example.com/temporary-errors`), whose words are not the reply's.
pub(super) fn is_a_name(token: &str) -> bool {
    token.contains('@')
        || token.starts_with('<')
        || token.contains("://")
        || token
            .split_once('/')
            .is_some_and(|(host, _)| host.contains('.'))
}

fn clause_matches(clause: &Clause, lower: &str) -> bool {
    clause.subjects.iter().any(|subject| {
        lower.match_indices(subject).any(|(at, _)| {
            let before = &lower[..at];
            let end = at + subject.len();
            let whole_word = !before.chars().next_back().is_some_and(is_word)
                && !lower[end..].chars().next().is_some_and(is_word);
            whole_word
                && !clause.not_after.iter().any(|n| before.ends_with(n))
                && !names_one_of(lower, clause.vetoes)
                && (predicate_in_clause(clause, &lower[end..])
                    || (clause.modified_subjects.contains(subject)
                        && ends_a_phrase(&lower[end..])
                        && modified(clause, before)))
        })
    })
}

/// Whether a subject read after a modifier ends its phrase: the text ends, or goes on with no
/// word ("invalid user: x", "unknown user <a@x>"), or with one of a few words of place. "Invalid
/// user-agent", "invalid address format" are not an address.
fn ends_a_phrase(rest: &str) -> bool {
    next_word(rest).is_none_or(|word| {
        word.is_empty()
            || ["here", "at", "in", "on", "for", "specified", "by"].contains(&word.as_str())
    })
}

/// The word `rest` starts with (empty when it starts with a sign or a digit), `None` at the end
/// of the text, and a hyphen or slash as a word of its own, which continues the phrase.
fn next_word(rest: &str) -> Option<String> {
    let rest = rest.trim_start();
    let first = rest.chars().next()?;
    if first == '-' || first == '/' {
        return Some(first.to_string());
    }
    Some(rest.chars().take_while(|c| c.is_alphabetic()).collect())
}

/// Whether `text` ends with `word`, and `word` starts a word of it.
pub(super) fn ends_with_word(text: &str, word: &str) -> bool {
    text.strip_suffix(word)
        .is_some_and(|rest| !rest.ends_with(is_word))
}

/// Whether `before` (the text up to a subject) ends with one of the clause's modifiers, then at
/// most one word of its `modifier_gap`: "invalid user", "no such local user".
fn modified(clause: &Clause, before: &str) -> bool {
    let near = before.trim_end();
    let one_word_less = near
        .rsplit_once(' ')
        .filter(|(_, word)| clause.modifier_gap.contains(word))
        .map(|(rest, _)| rest.trim_end());
    [Some(near), one_word_less]
        .into_iter()
        .flatten()
        .any(|text| clause.modifiers.iter().any(|m| ends_with_word(text, m)))
}

/// Whether one of the clause's predicates starts within [`CLAUSE_REACH`] bytes of `rest` and
/// before the clause ends. An address in brackets (`Local user [bob@x] not found`, `user (bob@x)
/// unknown`) does not end it, nor count towards the reach.
fn predicate_in_clause(clause: &Clause, rest: &str) -> bool {
    let mut stop = rest.len();
    let mut names = 0;
    let mut chars = rest.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if let Some(len) = bracketed_name(&rest[i..]) {
            names += len;
            while chars.next_if(|&(j, _)| j < i + len).is_some() {}
            continue;
        }
        let full_stop = c == '.' && chars.peek().is_none_or(|&(_, next)| next.is_whitespace());
        if matches!(c, ';' | ':' | ',' | '(' | ')' | '[' | ']' | '\n') || full_stop {
            stop = i;
            break;
        }
    }
    let window = &rest[..stop];
    clause.predicates.iter().any(|p| {
        window.match_indices(p).any(|(i, _)| {
            i <= CLAUSE_REACH + names
                && !window[..i].ends_with(char::is_alphanumeric)
                && !window[i + p.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '\'')
                && !names_one_of(&window[..i], clause.not_between)
                && (clause.links.is_empty()
                    || (only_links(clause, &window[..i]) && ends_a_state(&window[i + p.len()..])))
        })
    })
}

/// The length of the bracketed address `text` starts with (`[bob@example.com]`, `(<bob@x>)`): a
/// bracket, one token holding an `@`, its closing bracket. A link is no address.
fn bracketed_name(text: &str) -> Option<usize> {
    let close = match text.chars().next()? {
        '[' => ']',
        '(' => ')',
        _ => return None,
    };
    let end = text.find(close)?;
    let inner = &text[1..end];
    (!inner.contains(char::is_whitespace) && inner.contains('@') && !inner.contains("://"))
        .then_some(end + 1)
}

/// Whether `between` (the text from a subject to its predicate) holds only the clause's link
/// words and addresses: "account <a@x> has been closed", not "account password expired".
fn only_links(clause: &Clause, between: &str) -> bool {
    between.split_whitespace().all(|word| {
        clause.links.contains(&word) || word.contains('@') || word.starts_with(['<', '"', '\''])
    })
}

/// Whether a word of `text` (addresses aside) starts with one of `words`: "user name or password"
/// names a password, "<candidate@example.com>" no date.
fn names_one_of(text: &str, words: &[&str]) -> bool {
    text.split_whitespace()
        .filter(|t| !is_a_name(t))
        .map(|t| t.trim_start_matches(|c: char| !c.is_alphanumeric()))
        .any(|t| words.iter().any(|w| t.starts_with(w)))
}

/// Whether a state ends its phrase ("closed", "closed due to inactivity"), unlike "closed
/// connection" or "terminated for abuse".
fn ends_a_state(rest: &str) -> bool {
    const THEN: [&str; 10] = [
        "due",
        "and",
        "since",
        "after",
        "because",
        "permanently",
        "at",
        "on",
        "in",
        "here",
    ];
    next_word(rest).is_none_or(|word| word.is_empty() || THEN.contains(&word.as_str()))
}

/// Maps an RFC 3463 enhanced status code to a class, from IANA's registry ([`REGISTRY`]) or,
/// for a detail it does not list, its subject's default.
pub(super) fn enhanced_class(e: EnhancedCode) -> Option<ErrorClass> {
    let transient = e.class == 4;
    let pick = |t: Option<ErrorClass>, p: Option<ErrorClass>| if transient { t } else { p };
    match REGISTRY
        .iter()
        .find(|(subject, detail, _, _)| (*subject, *detail) == (e.subject, e.detail))
    {
        Some(&(_, _, t, p)) => pick(t, p),
        None => SUBJECT_DEFAULTS
            .iter()
            .find(|(subject, _, _)| *subject == e.subject)
            .and_then(|&(_, t, p)| pick(t, p)),
    }
}

/// Whether the reply is about our sender: its address (`X.1.7`, `X.1.8`), its login (RFC 4954's
/// `530`, `534`, `535`, `538` replies; `X.7.8`, `X.7.9`, `X.7.11` to `X.7.14`), its
/// authentication and DNS (RFC 7372's `X.7.20` to `X.7.26`: DKIM, SPF, reverse DNS) or its null
/// MX (RFC 7505's `X.7.27`). Then no wording makes it a dead recipient: "550 5.1.7 No such
/// domain" is our sender's domain, "535 5.7.13 User Account Disabled" our account.
fn names_sender(reply: &SmtpReply) -> bool {
    let status = reply.enhanced.is_some_and(|e| {
        (e.subject == 1 && matches!(e.detail, 7 | 8))
            || (e.subject == 7 && matches!(e.detail, 8 | 9 | 11..=14 | 20..=27))
    });
    status || matches!(reply.code, Some(530 | 534 | 535 | 538))
}

/// The wording rule for a connection that failed, read after all others.
const LATE_NETWORK_RULE: &str = "connection-failed";

/// The wording rule for a receiving system that is down or refusing service.
const OUTAGE_RULE: &str = "provider-down";

/// Maps a basic RFC 5321 reply code to a class.
pub(super) fn basic_class(code: u16) -> Option<ErrorClass> {
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

/// One rule [`explain_smtp`] tried: its name, whether it decided, and what it says.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Tried {
    pub rule: String,
    pub matched: bool,
    pub note: String,
}

/// Classifies one SMTP reply (any number of lines, with or without codes).
pub fn classify_smtp(raw: &str) -> Verdict {
    classify_traced(raw, None)
}

/// [`classify_smtp`], with every rule tried in order (`courierctl classify --explain`).
pub fn explain_smtp(raw: &str) -> (Verdict, Vec<Tried>) {
    let mut tried = Vec::new();
    let verdict = classify_traced(raw, Some(&mut tried));
    (verdict, tried)
}

fn classify_traced(raw: &str, mut trace: Option<&mut Vec<Tried>>) -> Verdict {
    let tracing = trace.is_some();
    let mut note = |rule: String, matched: bool, note: String| {
        if let Some(t) = trace.as_deref_mut() {
            t.push(Tried {
                rule,
                matched,
                note,
            });
        }
    };
    let reply = SmtpReply::parse(raw);
    let lower = rule_text(reply.enhanced, &reply.text);
    // A permanent code, or none, whose words say the refusal is temporary ("550 temporarily
    // blocked", "554 ... could not be saved. Please retry later."): the words win, as for a 4yz
    // reply.
    let digit = match reply.class_digit() {
        Some(5) if let Some(words) = says_temporary(&lower) => {
            note(
                "smtp.5xx-says-temporary".into(),
                true,
                format!("a 5yz code or 5.x.x status, but the text says \"{words}\": read as 4yz"),
            );
            Some(4)
        }
        // Without any code the words are all there is: "domain of sender temporarily disabled".
        None if let Some(words) = says_temporary(&lower) => {
            note(
                "smtp.says-temporary".into(),
                true,
                format!("no code, and the text says \"{words}\": read as 4yz"),
            );
            Some(4)
        }
        digit => digit,
    };
    let text_match = if tracing {
        // Every rule in order, as `text_rule` tries them.
        let mut found = None;
        let phrases = Found::in_text(&lower);
        for (position, rule) in text_rules().enumerate() {
            let matched = rule_matches(rule, position, &phrases, &lower);
            note(
                format!("smtp.text.{}", rule.name),
                matched,
                rule.class.as_str().to_owned(),
            );
            if matched {
                found = Some(rule);
                break;
            }
        }
        found
    } else {
        text_rule(&lower)
    };
    let mut outage_under_5xx = false;
    let text_match = match text_match {
        // A 5xx reply proves the connection worked: its "connection refused" is the receiver's
        // refusal, not our socket's.
        // A reply with a code is the peer talking: "451 ... Connection closed" is its own doing.
        Some(rule) if rule.name == LATE_NETWORK_RULE && reply.code.is_some() => {
            note(
                "smtp.reply-is-not-a-socket-error".into(),
                true,
                "a reply with a code: the connection worked".into(),
            );
            None
        }
        Some(rule) if rule.class == ErrorClass::Network && reply.class_digit() == Some(5) => {
            note(
                "smtp.5xx-is-not-a-socket-error".into(),
                true,
                "a 5xx reply: the network wording does not apply".into(),
            );
            None
        }
        // A permanent code with outage words ("554 SMTP service not available", Postfix's
        // "554 5.7.1 Service unavailable; Client host blocked"): the code is the decision (RFC
        // 5321 4.2.1), the words do not say what was refused, so `unknown`, reviewed at once.
        Some(rule) if rule.name == OUTAGE_RULE && digit == Some(5) => {
            note(
                "smtp.5xx-is-not-an-outage".into(),
                true,
                "a 5yz code or 5.x.x status: the outage wording does not make it transient".into(),
            );
            outage_under_5xx = true;
            None
        }
        // X.2.2 says the mailbox is full: a message "too large" for it ("Die Nachricht ist zu
        // groß für das Postfach") is one it has no room for, not a size refusal.
        Some(rule)
            if rule.class == ErrorClass::ContentRejected
                && reply
                    .enhanced
                    .is_some_and(|e| (e.subject, e.detail) == (2, 2)) =>
        {
            note(
                "smtp.full-mailbox-status".into(),
                true,
                "X.2.2: the mailbox has no room; the content wording does not apply".into(),
            );
            None
        }
        Some(rule) if rule.class == ErrorClass::RecipientPermanent && names_sender(&reply) => {
            note(
                "smtp.sender-status".into(),
                true,
                "the code or status names our sender's address or login: not a dead recipient"
                    .into(),
            );
            None
        }
        other => other,
    };
    // A wording rule of class `unknown` (a mail loop) is a final signal of its own, and so are the
    // words "permanent failure" of a bounce without codes ("Delivery failed permanently").
    let permanent_words = says_permanent(&lower);
    if let Some(words) = permanent_words {
        note(
            "smtp.permanent-words".into(),
            true,
            format!("the text says \"{words}\""),
        );
    }
    // A bounce without any code that no rule decided is retried only when its words name a
    // condition that may pass (RFC 3464: a bounce reports a failed delivery; a delay says it
    // will retry): "Server refused the message", "Does not have a final email delivery point".
    let without_cause = digit.is_none()
        && reply.enhanced.is_none()
        && text_match.is_none()
        && !mentions_a_code(&lower)
        && passes(&lower).is_none();
    if without_cause {
        match refusal_word(&lower) {
            Some(words) => note(
                "smtp.refusal-words".into(),
                true,
                format!(
                    "no code, no rule, and the text refuses (\"{words}\") without a passing condition"
                ),
            ),
            None => note(
                "smtp.no-passing-condition".into(),
                true,
                "no code, no rule, and no word of a condition that may pass: final".into(),
            ),
        }
    }
    let final_wording = text_match.is_some_and(|rule| rule.class == ErrorClass::Unknown)
        || permanent_words.is_some()
        || without_cause;
    let (class, rule) = if digit == Some(2) {
        (
            ErrorClass::Unknown,
            "smtp.success-code-as-failure".to_owned(),
        )
    } else if let Some(rule) = text_match {
        (rule.class, format!("smtp.text.{}", rule.name))
    } else if outage_under_5xx {
        (ErrorClass::Unknown, format!("smtp.text.{OUTAGE_RULE}.5xx"))
    } else if let Some((e, class)) = reply
        .enhanced
        .and_then(|e| enhanced_class(e).map(|c| (e, c)))
    {
        note(
            format!("smtp.enhanced.{e}"),
            true,
            class.as_str().to_owned(),
        );
        (class, format!("smtp.enhanced.{e}"))
    } else if let Some((c, class)) = reply.code.and_then(|c| basic_class(c).map(|k| (c, k))) {
        if let Some(e) = reply.enhanced {
            note(
                format!("smtp.enhanced.{e}"),
                false,
                "no class for this status".into(),
            );
        }
        note(format!("smtp.basic.{c}"), true, class.as_str().to_owned());
        (class, format!("smtp.basic.{c}"))
    } else {
        note(
            "smtp.unrecognised".into(),
            true,
            "no rule, status or code".into(),
        );
        (ErrorClass::Unknown, "smtp.unrecognised".to_owned())
    };
    let class = if digit == Some(4) {
        let transient = class.transient();
        if transient != class {
            note(
                "smtp.4xx-is-transient".into(),
                true,
                format!("a 4xx reply: {class} becomes {transient}"),
            );
        }
        transient
    } else {
        class
    };
    let mut verdict = Verdict::new(class, rule, Source::Smtp);
    // RFC 5321 (4.2.1): a 5yz reply is a permanent failure, "the SMTP client SHOULD NOT repeat the
    // exact request"; without a 4yz or 5yz code (none, or a 2yz/3yz/6yz code misused as a
    // failure: "354 5.5.0 End data with ..."), the enhanced code's class 5 says the same (RFC
    // 3463), and so does final wording (a mail loop) without either. An `unknown` reply with that
    // signal goes to review at once instead of being retried; a 4xx reply keeps its retry.
    let permanent = match (digit, reply.enhanced) {
        (Some(d @ (4 | 5)), _) => d == 5,
        (_, Some(e)) => e.class == 5 || (e.class != 4 && final_wording),
        (_, None) => final_wording,
    };
    if class == ErrorClass::Unknown && permanent {
        note(
            "smtp.permanent-signal".into(),
            true,
            "unknown with a 5yz code, a 5.x.x status or final wording: not retried, review".into(),
        );
        verdict.retryable = false;
    }
    verdict.with_raw(reply.code_string(), Some(raw.to_owned()))
}
