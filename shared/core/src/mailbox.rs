//! Mailboxes (`addr` or `Name <addr>`) parsed in the core, so that validating a job needs no mail
//! library. The grammar is RFC 5322's mailbox with its obsolete forms for the display name and
//! the local part, read as a PEG (ordered choice, no backtracking into a choice once it matched);
//! the address is then validated by `email_address` (local part, domain) and IDNA (an
//! internationalised domain must convert to ASCII). This accepts exactly what lettre's mailbox
//! parser accepts, which the adapters hand the mailbox to: `tests` checks the two agree on
//! generated and hand-picked inputs.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use email_address::EmailAddress;

/// Why a mailbox was refused (the texts are lettre's, which the job contract's reasons quote).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("Invalid email user")]
    InvalidUser,
    #[error("Invalid email domain")]
    InvalidDomain,
    #[error("Invalid input")]
    InvalidInput,
}

/// A validated address, `user@domain`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Address {
    serialized: String,
    at: usize,
}

impl Address {
    pub fn new(user: &str, domain: &str) -> Result<Address, AddressError> {
        if !EmailAddress::is_valid_local_part(user) {
            return Err(AddressError::InvalidUser);
        }
        check_domain(domain)?;
        Ok(Address {
            serialized: format!("{user}@{domain}"),
            at: user.len(),
        })
    }

    pub fn user(&self) -> &str {
        &self.serialized[..self.at]
    }

    /// `user@domain`, as written.
    pub fn as_str(&self) -> &str {
        &self.serialized
    }

    pub fn domain(&self) -> &str {
        &self.serialized[self.at + 1..]
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.serialized)
    }
}

fn check_domain(domain: &str) -> Result<(), AddressError> {
    check_domain_ascii(domain).or_else(|_| {
        idna::domain_to_ascii(domain)
            .map_err(|_| AddressError::InvalidDomain)
            .and_then(|ascii| check_domain_ascii(&ascii))
    })
}

fn check_domain_ascii(domain: &str) -> Result<(), AddressError> {
    if EmailAddress::is_valid_domain(domain) {
        return Ok(());
    }
    let literal = domain
        .strip_prefix('[')
        .and_then(|d| d.strip_suffix(']'))
        .unwrap_or(domain);
    if literal.parse::<IpAddr>().is_ok() {
        Ok(())
    } else {
        Err(AddressError::InvalidDomain)
    }
}

/// The first label of an internationalised domain that mixes scripts beyond what UTS #39's
/// "highly restrictive" level allows (e.g. Latin with Cyrillic, `аpple.example` with a Cyrillic
/// `а`: a spoof of `apple.example`), in its Unicode form. Latin with Han, Hiragana and Katakana
/// (Japanese), Han and Bopomofo, or Han and Hangul pass, as do labels of one script; ASCII
/// labels are never flagged, and `xn--` labels are read in their Unicode form. A label of a
/// single non-Latin script that only looks Latin (a whole-script confusable) is not flagged:
/// telling it from a real word of that script needs a list of the domains it imitates.
pub fn mixed_script_label(domain: &str) -> Option<String> {
    use unicode_security::{RestrictionLevel, RestrictionLevelDetection};
    domain.split('.').find_map(|label| {
        let unicode = if label
            .get(..4)
            .is_some_and(|p| p.eq_ignore_ascii_case("xn--"))
        {
            let (decoded, result) = idna::domain_to_unicode(label);
            result.ok()?;
            decoded
        } else {
            label.to_owned()
        };
        if unicode.is_ascii() {
            return None;
        }
        // Hyphens and digits join labels of any script (UTS #39 counts them as Common).
        let letters: String = unicode
            .chars()
            .filter(|c| *c != '-' && !c.is_ascii_digit())
            .collect();
        (letters.as_str().detect_restriction_level() > RestrictionLevel::HighlyRestrictive)
            .then_some(unicode)
    })
}

/// The one form of an address that every suppression read and write uses: the bare address of
/// a mailbox (`Ann <Ann@Example.COM>` -> `ann@example.com`), its domain in IDNA's ASCII form
/// (`bücher.example` -> `xn--bcher-kva.example`), all lower-cased. The local part is lower-cased
/// too, on purpose: mailbox providers treat it case-insensitively, and a complained address must
/// not get mail again through a change of case. Text that is not a mailbox is keyed as written,
/// trimmed and lower-cased (what every store did before this form existed).
pub fn address_key(raw: &str) -> String {
    let raw = raw.trim();
    match raw.parse::<Mailbox>() {
        Ok(mailbox) => {
            let domain = mailbox.email.domain();
            let domain = idna::domain_to_ascii(domain).unwrap_or_else(|_| domain.to_owned());
            format!("{}@{}", mailbox.email.user(), domain).to_lowercase()
        }
        Err(_) => raw.to_lowercase(),
    }
}

/// Whether `text` (a provider's reply) names `address` as a whole, case-insensitively: not
/// inside a longer address (`ann@x.org` is not named by `joann@x.org`). A relay names the
/// recipient it refuses in its reply to `RCPT TO` (Postfix: `421 4.7.0 <ann@x.org>: Recipient
/// address rejected: try again later`).
pub fn names_address(text: &str, address: &str) -> bool {
    let (text, address) = (text.to_lowercase(), address.to_lowercase());
    if address.is_empty() {
        return false;
    }
    let part = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || "._%+-@".contains(c));
    text.match_indices(&address).any(|(at, _)| {
        !part(text[..at].chars().next_back()) && !part(text[at + address.len()..].chars().next())
    })
}

/// A sender identity as configured: a whole address (its [`address_key`]) or a domain (IDNA
/// ASCII, lower-cased).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Identity {
    Address(String),
    Domain(String),
}

impl Identity {
    /// An address (it holds `@`) or a domain; anything else is an error naming it.
    pub fn parse(entry: &str) -> Result<Identity, String> {
        if entry.contains('@') {
            entry
                .parse::<Mailbox>()
                .map_err(|e| format!("{entry:?} is not an address: {e}"))?;
            return Ok(Identity::Address(address_key(entry)));
        }
        idna::domain_to_ascii(entry)
            .ok()
            .filter(|d| {
                d.contains('.')
                    && !d.starts_with('.')
                    && !d.ends_with('.')
                    && d.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
            })
            .map(|d| Identity::Domain(d.to_lowercase()))
            .ok_or_else(|| format!("{entry:?} is neither an address nor a domain"))
    }
}

/// The sender identities a stack may send as (`COURIER_ALLOWED_SENDERS`): whole addresses
/// (`shop@example.com`) and domains (`example.com`), compared by [`address_key`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedSenders {
    addresses: std::collections::BTreeSet<String>,
    domains: std::collections::BTreeSet<String>,
}

impl AllowedSenders {
    /// A comma-separated list of addresses and domains; an empty entry, or an address or
    /// domain that does not parse, is an error naming it.
    pub fn parse(list: &str) -> Result<AllowedSenders, String> {
        let mut allowed = AllowedSenders {
            addresses: Default::default(),
            domains: Default::default(),
        };
        for entry in list.split(',').map(str::trim) {
            match Identity::parse(entry)? {
                Identity::Address(a) => allowed.addresses.insert(a),
                Identity::Domain(d) => allowed.domains.insert(d),
            };
        }
        Ok(allowed)
    }

    /// Whether a job's `from` (bare or `Name <addr>`) is one of the identities, or at one of
    /// the domains.
    pub fn allows(&self, from: &str) -> bool {
        let key = address_key(from);
        self.addresses.contains(&key)
            || key
                .rsplit_once('@')
                .is_some_and(|(_, domain)| self.domains.contains(domain))
    }
}

/// The first 12 hex digits of the SHA-256 of an address's [`address_key`]: how logs name a
/// recipient (the same address, however written, gives the same hash).
pub fn address_hash(raw: &str) -> String {
    crate::job::fingerprint(address_key(raw).as_bytes())[..12].to_owned()
}

/// `text` with every word that holds an `@` (an address, bare or in a reply such as
/// `550 5.1.1 <ann@example.org>: user unknown`) replaced by `<addr:HASH>` ([`address_hash`]),
/// for log lines: no recipient appears in clear.
pub fn redact(text: &str) -> String {
    let separator = |c: char| c.is_whitespace() || "<>\"'(),;[]".contains(c);
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if word.contains('@') {
            let bare = word.trim_end_matches([':', '.']);
            let tail = &word[bare.len()..];
            out.push_str(&format!("<addr:{}>{tail}", address_hash(bare)));
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in text.chars() {
        if separator(c) {
            flush(&mut word, &mut out);
            out.push(c);
        } else {
            word.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// A panic as one log line: where it happened and its message, [`redact`]ed (a panic's message
/// can quote a recipient). A payload that is not text (`panic_any`) is named as such.
pub fn panic_line(
    payload: &(dyn std::any::Any + Send),
    location: Option<&std::panic::Location<'_>>,
) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into());
    let at = location
        .map(|l| format!(" at {}:{}:{}", l.file(), l.line(), l.column()))
        .unwrap_or_default();
    format!("panicked{at}: {}", redact(&text))
}

/// Replaces the default panic hook, which prints a panic's message as it is to stderr (and a
/// Lambda function's stderr goes to CloudWatch Logs), with one that prints [`panic_line`]. Each
/// function calls it first thing in `main`; a caught panic still becomes its record's failure.
pub fn redact_panic_messages() {
    std::panic::set_hook(Box::new(|info| {
        eprintln!("{}", panic_line(info.payload(), info.location()));
    }));
}

/// A mailbox: an optional display name and an address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mailbox {
    pub name: Option<String>,
    pub email: Address,
}

/// `Name <user@domain>` (the name quoted when it holds more than atoms and spaces), or the bare
/// address without a name.
impl fmt::Display for Mailbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.name.as_deref().map(str::trim).unwrap_or_default();
        if name.is_empty() {
            return write!(f, "{}", self.email);
        }
        if name.chars().all(|c| is_atext(c) || c == ' ' || c == '\t') {
            return write!(f, "{name} <{}>", self.email);
        }
        f.write_str("\"")?;
        for c in name.chars() {
            if matches!(c, '"' | '\\') {
                f.write_str("\\")?;
            }
            write!(f, "{c}")?;
        }
        write!(f, "\" <{}>", self.email)
    }
}

impl FromStr for Mailbox {
    type Err = AddressError;

    fn from_str(src: &str) -> Result<Mailbox, AddressError> {
        let (name, (user, domain)) = Cursor::new(src)
            .mailbox()
            .ok_or(AddressError::InvalidInput)?;
        Ok(Mailbox {
            name,
            email: Address::new(&user, &domain)?,
        })
    }
}

type AddrSpec = (String, String);

/// The grammar over a string: each rule returns `None` and leaves the position where it was when
/// it does not match.
struct Cursor<'a> {
    src: &'a str,
    pos: usize,
}

fn is_atext(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c) || c.len_utf8() > 1
}

/// RFC 5322 `qtext`, with the obsolete control characters.
fn is_qtext(c: char) -> bool {
    matches!(u32::from(c), 33 | 35..=91 | 93..=126 | 1..=8 | 11 | 12 | 14..=31 | 127)
}

/// RFC 5322 `text` (what may follow a backslash in a quoted pair).
fn is_text(c: char) -> bool {
    matches!(u32::from(c), 1..=9 | 11 | 12 | 14..=127)
}

impl<'a> Cursor<'a> {
    fn new(src: &'a str) -> Cursor<'a> {
        Cursor { src, pos: 0 }
    }

    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn eat(&mut self, want: char) -> bool {
        if self.peek() == Some(want) {
            self.pos += want.len_utf8();
            true
        } else {
            false
        }
    }

    fn eat_while(&mut self, f: impl Fn(char) -> bool) -> usize {
        let start = self.pos;
        while let Some(c) = self.peek().filter(|c| f(*c)) {
            self.pos += c.len_utf8();
        }
        self.pos - start
    }

    /// Runs `rule`; on `None` puts the position back.
    fn attempt<T>(&mut self, rule: impl FnOnce(&mut Self) -> Option<T>) -> Option<T> {
        let start = self.pos;
        let out = rule(self);
        if out.is_none() {
            self.pos = start;
        }
        out
    }

    /// Folding white space: the first space or tab (if any), the rest skipped.
    fn fws(&mut self) -> Option<char> {
        let first = self.peek().filter(|c| matches!(c, ' ' | '\t'));
        self.eat_while(|c| matches!(c, ' ' | '\t'));
        first
    }

    fn atom(&mut self) -> Option<String> {
        self.attempt(|c| {
            c.fws();
            let start = c.pos;
            (c.eat_while(is_atext) > 0).then(|| c.src[start..c.pos].to_owned())
        })
    }

    fn dot_atom(&mut self) -> Option<String> {
        self.attempt(|c| {
            c.fws();
            let start = c.pos;
            if c.eat_while(is_atext) == 0 {
                return None;
            }
            while c
                .attempt(|c| (c.eat('.') && c.eat_while(is_atext) > 0).then_some(()))
                .is_some()
            {}
            Some(c.src[start..c.pos].to_owned())
        })
    }

    fn qcontent(&mut self) -> Option<char> {
        self.attempt(|c| {
            let ch = c.peek()?;
            if is_qtext(ch) || ch.len_utf8() > 1 {
                c.pos += ch.len_utf8();
                return Some(ch);
            }
            if c.eat('\\') {
                let quoted = c.peek().filter(|q| is_text(*q))?;
                c.pos += quoted.len_utf8();
                return Some(quoted);
            }
            None
        })
    }

    fn quoted_string(&mut self) -> Option<String> {
        self.attempt(|c| {
            if !c.eat('"') {
                return None;
            }
            let mut out = String::new();
            while let Some((ws, ch)) = c.attempt(|c| {
                let ws = c.fws();
                c.qcontent().map(|ch| (ws, ch))
            }) {
                out.extend(ws);
                out.push(ch);
            }
            c.fws();
            c.eat('"').then_some(out)
        })
    }

    fn word(&mut self) -> Option<String> {
        self.quoted_string().or_else(|| self.atom())
    }

    /// The display name: words and dots, a space kept where white space separated them.
    fn phrase(&mut self) -> Option<String> {
        let mut out = self.word()?;
        while let Some((ws, part)) = self.attempt(|c| {
            let ws = c.fws();
            let part = c.word().or_else(|| c.eat('.').then(|| ".".to_owned()))?;
            Some((ws, part))
        }) {
            if ws.is_some() {
                out.push(' ');
            }
            out.push_str(&part);
        }
        Some(out)
    }

    /// `part` then any number of `.part`, joined by dots.
    fn dotted(&mut self, part: fn(&mut Self) -> Option<String>) -> Option<String> {
        let mut out = part(self)?;
        while let Some(next) = self.attempt(|c| if c.eat('.') { part(c) } else { None }) {
            out.push('.');
            out.push_str(&next);
        }
        Some(out)
    }

    fn obs_local_part(&mut self) -> Option<String> {
        self.dotted(Self::word)
    }

    fn obs_domain(&mut self) -> Option<String> {
        self.dotted(Self::atom)
    }

    fn addr_spec(&mut self) -> Option<AddrSpec> {
        self.attempt(|c| {
            let local = c
                .dot_atom()
                .or_else(|| c.quoted_string())
                .or_else(|| c.obs_local_part())?;
            if !c.eat('@') {
                return None;
            }
            let domain = c.dot_atom().or_else(|| c.obs_domain())?;
            Some((local, domain))
        })
    }

    fn angle_addr(&mut self) -> Option<AddrSpec> {
        self.attempt(|c| {
            c.fws();
            if !c.eat('<') {
                return None;
            }
            let addr = c.addr_spec()?;
            if !c.eat('>') {
                return None;
            }
            c.fws();
            Some(addr)
        })
    }

    fn name_addr(&mut self) -> Option<(Option<String>, AddrSpec)> {
        self.attempt(|c| {
            let name = c.phrase();
            c.angle_addr().map(|addr| (name, addr))
        })
    }

    fn mailbox(&mut self) -> Option<(Option<String>, AddrSpec)> {
        self.eat_while(char::is_whitespace);
        let out = self
            .name_addr()
            .or_else(|| self.addr_spec().map(|addr| (None, addr)))?;
        self.eat_while(char::is_whitespace);
        (self.pos == self.src.len()).then_some(out)
    }
}

#[cfg(test)]
mod tests;
