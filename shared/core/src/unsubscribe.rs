//! One-click unsubscribe (RFC 8058, RFC 2369): which jobs carry `List-Unsubscribe`, the signed
//! token its URL holds, the suppression key an unsubscription is kept under, and what the
//! unsubscribe function answers to a request.
//!
//! A token names one recipient (its [`address_key`]) and one scope (a list, or every mail of the
//! stack), signed with an HMAC-SHA256 key from a Secrets Manager secret ([`SealKeys`]: a key and
//! the previous ones, so links in mail sent before a rotation keep working). Nothing else is in
//! it: `1.` + base64url(`{scope}\n{address}`) + `.` + base64url(the first 16 bytes of the tag).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::job::{EmailJob, Priority};
use crate::mailbox::address_key;
use crate::seal::SealKeys;

/// What the job asks for (`unsubscribe` in the contract).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum UnsubscribeMode {
    /// `List-Unsubscribe` whose link unsubscribes the recipient from the job's list only.
    List,
    /// `List-Unsubscribe` whose link stops every mail of the stack to the recipient.
    Global,
    /// No header (the default for transactional jobs).
    None,
}

/// The longest list id.
pub const MAX_LIST_ID_LEN: usize = 64;
/// The reason every unsubscription is kept with.
pub const REASON: &str = "unsubscribed";
/// The form field and value a one-click POST carries (RFC 8058 section 3.1).
pub const ONE_CLICK: (&str, &str) = ("List-Unsubscribe", "One-Click");
/// The query parameter that carries the token.
pub const TOKEN_PARAM: &str = "t";
/// Longest line of a header RFC 5322 allows, less `List-Unsubscribe: `.
const MAX_HEADER_VALUE: usize = 998 - 18;
/// The longest token accepted (a 254-character address and a 64-character list fit).
const MAX_TOKEN_LEN: usize = 1024;
const TOKEN_VERSION: &str = "1";
const TAG_BYTES: usize = 16;
const DOMAIN: &str = "courier-unsubscribe-v1\n";

/// Whether `id` is a list id: letters, digits, `.`, `_`, `-`, starting with a letter or digit,
/// at most [`MAX_LIST_ID_LEN`] characters.
pub fn is_list_id(id: &str) -> bool {
    let mut chars = id.chars();
    id.len() <= MAX_LIST_ID_LEN
        && chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// What an unsubscription covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Jobs of one list (their `list_id`, else their `campaign_id`).
    List(String),
    /// Every job of the stack, as a suppression does.
    Global,
}

impl Scope {
    /// The list's id, or `None` for a global unsubscription.
    pub fn list(&self) -> Option<&str> {
        match self {
            Scope::List(list) => Some(list),
            Scope::Global => None,
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::List(list) => write!(f, "list {list}"),
            Scope::Global => f.write_str("every list"),
        }
    }
}

/// The suppression-table key an unsubscription is kept under: the address's own key for a
/// global one (so every claim's suppression check sees it), `list:{len}:{list}:{address}` for
/// a list (the length makes the key unambiguous; no address key starts with `list:`).
pub fn suppression_key(address: &str, scope: &Scope) -> String {
    let address = address_key(address);
    match scope {
        Scope::Global => address,
        Scope::List(list) => format!("list:{}:{list}:{address}", list.len()),
    }
}

/// The list and address a list-scoped key names (`None` for any other key).
pub fn parse_list_key(key: &str) -> Option<(String, String)> {
    let rest = key.strip_prefix("list:")?;
    let (len, rest) = rest.split_once(':')?;
    let len: usize = len.parse().ok()?;
    let list = rest.get(..len)?;
    let address = rest.get(len..)?.strip_prefix(':')?;
    Some((list.to_owned(), address.to_owned()))
}

/// The list (none for a suppression of every mail) and address a suppression-table key names.
pub fn split_key(key: &str) -> (Option<String>, String) {
    match parse_list_key(key) {
        Some((list, address)) => (Some(list), address),
        None => (None, key.to_owned()),
    }
}

/// The list a job belongs to: its `list_id`, else its `campaign_id` when that is a list id.
pub fn list_of(job: &EmailJob) -> Option<String> {
    match &job.list_id {
        Some(list) => Some(list.clone()),
        None if is_list_id(&job.campaign_id) => Some(job.campaign_id.clone()),
        None => None,
    }
}

/// The mode a job has: what it asks for, else `list` for bulk jobs and `none` otherwise.
pub fn mode_of(job: &EmailJob) -> UnsubscribeMode {
    job.unsubscribe.unwrap_or(match job.priority {
        Priority::Bulk => UnsubscribeMode::List,
        Priority::Transactional => UnsubscribeMode::None,
    })
}

/// The list whose unsubscriptions the job's recipients are checked against before sending:
/// the job's list when its mode is `list` (a global unsubscription is a suppression, checked
/// for every job).
pub fn checked_list(job: &EmailJob) -> Option<String> {
    match mode_of(job) {
        UnsubscribeMode::List => list_of(job),
        UnsubscribeMode::Global | UnsubscribeMode::None => None,
    }
}

/// Whether Courier adds `List-Unsubscribe` to a job's message, and for whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offer {
    /// Add the headers, with a token for this recipient and scope.
    Add { recipient: String, scope: Scope },
    /// The producer set `List-Unsubscribe` or `List-Unsubscribe-Post` itself.
    ProducerOwns,
    /// The job's mode is `none`.
    Off,
    /// A bulk job whose default cannot be honoured (more than one recipient, no list id).
    NotPossible(&'static str),
}

/// What [`Offer`] a job gets. Explicit requests that cannot be honoured are refused by the
/// job's validation, so `NotPossible` only comes from a bulk job's default.
pub fn offer(job: &EmailJob) -> Offer {
    if job.headers.keys().any(|name| {
        name.eq_ignore_ascii_case("List-Unsubscribe")
            || name.eq_ignore_ascii_case("List-Unsubscribe-Post")
    }) {
        return Offer::ProducerOwns;
    }
    let mode = mode_of(job);
    if mode == UnsubscribeMode::None {
        return Offer::Off;
    }
    let mut recipients = job.recipients();
    let (Some(recipient), None) = (recipients.next(), recipients.next()) else {
        return Offer::NotPossible("a job with more than one recipient");
    };
    let scope = match mode {
        UnsubscribeMode::Global => Scope::Global,
        _ => match list_of(job) {
            Some(list) => Scope::List(list),
            None => return Offer::NotPossible("no list_id, and campaign_id is not a list id"),
        },
    };
    Offer::Add {
        recipient: recipient.to_owned(),
        scope,
    }
}

/// Why a job's explicit `unsubscribe` cannot be honoured (checked by the job's validation).
pub fn refusal(job: &EmailJob) -> Option<String> {
    let asked = job.unsubscribe?;
    if asked == UnsubscribeMode::None {
        return None;
    }
    let count = job.recipients().count();
    if count != 1 {
        return Some(format!(
            "`unsubscribe: {}` needs exactly one recipient (the link names it), found {count}",
            if asked == UnsubscribeMode::List {
                "list"
            } else {
                "global"
            }
        ));
    }
    if asked == UnsubscribeMode::List && list_of(job).is_none() {
        return Some(
            "`unsubscribe: list` needs a `list_id` (the `campaign_id` is not a list id)".into(),
        );
    }
    None
}

/// One recipient's unsubscription, as a token names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// The recipient's [`address_key`].
    pub address: String,
    pub scope: Scope,
}

/// Why a token is refused (the answer is the same `400` for each; the kind is logged).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("no token")]
    Missing,
    #[error("the token is not of the form 1.<payload>.<tag>")]
    Malformed,
    #[error("the token's signature does not verify")]
    Forged,
    #[error("the token's payload names no address and list")]
    Payload,
}

fn tag(keys_tag: impl Fn(&str) -> Vec<u8>, payload: &str) -> Vec<u8> {
    let mut tag = keys_tag(&format!("{DOMAIN}{payload}"));
    tag.truncate(TAG_BYTES);
    tag
}

/// The token for one recipient and scope.
pub fn token(recipient: &str, scope: &Scope, keys: &SealKeys) -> String {
    let scope_text = scope.list().unwrap_or("*");
    let payload = URL_SAFE_NO_PAD.encode(format!("{scope_text}\n{}", address_key(recipient)));
    let tag = tag(|text| keys.tag(text), &payload);
    format!("{TOKEN_VERSION}.{payload}.{}", URL_SAFE_NO_PAD.encode(tag))
}

/// The subscription a token names, when its signature verifies with one of `keys`.
pub fn verify(token: &str, keys: &SealKeys) -> Result<Subscription, TokenError> {
    if token.is_empty() {
        return Err(TokenError::Missing);
    }
    if token.len() > MAX_TOKEN_LEN {
        return Err(TokenError::Malformed);
    }
    let mut parts = token.split('.');
    let (Some(TOKEN_VERSION), Some(payload), Some(tag_text), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed);
    };
    let given = URL_SAFE_NO_PAD
        .decode(tag_text)
        .map_err(|_| TokenError::Malformed)?;
    if given.len() != TAG_BYTES || !keys.verifies_truncated(&format!("{DOMAIN}{payload}"), &given) {
        return Err(TokenError::Forged);
    }
    let text = URL_SAFE_NO_PAD
        .decode(payload)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or(TokenError::Payload)?;
    let (scope, address) = text.split_once('\n').ok_or(TokenError::Payload)?;
    let scope = match scope {
        "*" => Scope::Global,
        list if is_list_id(list) => Scope::List(list.to_owned()),
        _ => return Err(TokenError::Payload),
    };
    if address.parse::<crate::mailbox::Mailbox>().is_err() {
        return Err(TokenError::Payload);
    }
    Ok(Subscription {
        address: address.to_owned(),
        scope,
    })
}

/// Where the unsubscribe links point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Links {
    /// The unsubscribe function's HTTPS URL (its function URL).
    pub url: String,
    /// An optional mailbox for `mailto:` unsubscriptions (RFC 2369), read by the operator.
    pub mailto: Option<String>,
}

/// Why a links configuration is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinksError {
    #[error(
        "must be an https:// URL without a fragment (http:// only on 127.0.0.1 or localhost, for the emulators), found {0:?}"
    )]
    Url(String),
    #[error("must be a bare address (a@example.com), found {0:?}")]
    Mailto(String),
}

impl Links {
    /// Checks the URL (RFC 8058 wants HTTPS) and the mailbox.
    pub fn new(url: &str, mailto: Option<&str>) -> Result<Links, LinksError> {
        let url = url.trim();
        let rest = url.strip_prefix("https://").or_else(|| {
            url.strip_prefix("http://").filter(|rest| {
                ["127.0.0.1:", "127.0.0.1/", "localhost:", "localhost/"]
                    .iter()
                    .any(|host| rest.starts_with(host))
            })
        });
        let well_formed = rest.is_some_and(|rest| {
            !rest.is_empty()
                && !rest.contains(['#', ' ', '<', '>', '"', ','])
                && rest.chars().all(|c| c.is_ascii_graphic())
        });
        if !well_formed {
            return Err(LinksError::Url(url.to_owned()));
        }
        let mailto = match mailto.map(str::trim).filter(|m| !m.is_empty()) {
            Some(m)
                if m.parse::<crate::mailbox::Mailbox>()
                    .is_ok_and(|b| b.name.is_none())
                    && !m.contains(['<', '>', '?', ',']) =>
            {
                Some(m.to_owned())
            }
            Some(m) => return Err(LinksError::Mailto(m.to_owned())),
            None => None,
        };
        Ok(Links {
            url: url.to_owned(),
            mailto,
        })
    }

    /// The link a token opens.
    pub fn link(&self, token: &str) -> String {
        let joint = if self.url.contains('?') { '&' } else { '?' };
        format!("{}{joint}{TOKEN_PARAM}={token}", self.url)
    }

    /// The two headers RFC 8058 asks for: `List-Unsubscribe` (the HTTPS link, then the
    /// `mailto:` form when configured and the line stays within RFC 5322's 998 characters) and
    /// `List-Unsubscribe-Post: List-Unsubscribe=One-Click`.
    pub fn headers(&self, token: &str) -> [(String, String); 2] {
        let https = format!("<{}>", self.link(token));
        let value = match &self.mailto {
            Some(mailbox) => {
                let both = format!("{https}, <mailto:{mailbox}?subject=unsubscribe%20{token}>");
                if both.len() <= MAX_HEADER_VALUE {
                    both
                } else {
                    https
                }
            }
            None => https,
        };
        [
            ("List-Unsubscribe".to_owned(), value),
            (
                "List-Unsubscribe-Post".to_owned(),
                format!("{}={}", ONE_CLICK.0, ONE_CLICK.1),
            ),
        ]
    }
}

/// An HTTP request to the unsubscribe function, as the function URL hands it over.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    /// The `t` query parameter.
    pub token: Option<&'a str>,
    pub content_type: Option<&'a str>,
    /// The decoded body.
    pub body: &'a [u8],
}

/// What the unsubscribe function does with a request (decided here, carried out by its handler).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Record the unsubscription, then `200`.
    Unsubscribe(Subscription),
    /// `200` with the confirmation page (a GET: mail scanners follow links, so a GET changes
    /// nothing).
    Confirm(Subscription),
    /// `400`: a token that is missing, forged or malformed, or a POST without the one-click field.
    BadRequest(String),
    /// `405`: any other method.
    MethodNotAllowed,
}

/// Decides what a request gets.
pub fn answer(request: &Request<'_>, keys: &SealKeys) -> Answer {
    let method = request.method.to_ascii_uppercase();
    if method != "GET" && method != "POST" && method != "HEAD" {
        return Answer::MethodNotAllowed;
    }
    let subscription = match verify(request.token.unwrap_or(""), keys) {
        Ok(s) => s,
        Err(e) => return Answer::BadRequest(e.to_string()),
    };
    if method != "POST" {
        return Answer::Confirm(subscription);
    }
    if is_one_click(request.content_type, request.body) {
        Answer::Unsubscribe(subscription)
    } else {
        Answer::BadRequest(format!(
            "a one-click unsubscribe is a POST whose form holds {}={}",
            ONE_CLICK.0, ONE_CLICK.1
        ))
    }
}

/// Whether a POST body is RFC 8058's one-click form (`application/x-www-form-urlencoded` or
/// `multipart/form-data` holding `List-Unsubscribe=One-Click`).
pub fn is_one_click(content_type: Option<&str>, body: &[u8]) -> bool {
    let content_type = content_type.unwrap_or("application/x-www-form-urlencoded");
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "application/x-www-form-urlencoded" => form_urlencoded::parse(body)
            .any(|(name, value)| name == ONE_CLICK.0 && value == ONE_CLICK.1),
        "multipart/form-data" => {
            boundary(content_type).is_some_and(|boundary| multipart_has_one_click(body, &boundary))
        }
        _ => false,
    }
}

fn boundary(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|param| {
        let (name, value) = param.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| value.trim().trim_matches('"').to_owned())
            .filter(|b| !b.is_empty())
    })
}

fn multipart_has_one_click(body: &[u8], boundary: &str) -> bool {
    let body = String::from_utf8_lossy(body);
    let delimiter = format!("--{boundary}");
    body.split(delimiter.as_str()).any(|part| {
        let Some((head, value)) = part
            .split_once("\r\n\r\n")
            .or_else(|| part.split_once("\n\n"))
        else {
            return false;
        };
        let named = head.lines().any(|line| {
            let lower = line.to_ascii_lowercase();
            lower.starts_with("content-disposition:")
                && lower.contains("form-data")
                && lower.contains(&format!("name=\"{}\"", ONE_CLICK.0.to_ascii_lowercase()))
        });
        named && value.trim_end_matches(['\r', '\n', '-']).trim() == ONE_CLICK.1
    })
}

/// The page a GET shows: what the link does, and a button that POSTs the one-click form.
pub fn confirmation_page(subscription: &Subscription, token: &str) -> String {
    let what = match &subscription.scope {
        Scope::List(list) => format!("the list <b>{}</b>", escape(list)),
        Scope::Global => "all mail from this sender".to_owned(),
    };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\"><title>Unsubscribe</title></head>\
         <body><h1>Unsubscribe</h1><p>Stop receiving {what}?</p>\
         <form method=\"post\" action=\"?{TOKEN_PARAM}={token}\">\
         <input type=\"hidden\" name=\"{}\" value=\"{}\">\
         <button type=\"submit\">Unsubscribe</button></form></body></html>\n",
        ONE_CLICK.0,
        ONE_CLICK.1,
        token = escape(token),
    )
}

/// The page a POST answers with.
pub fn done_page(subscription: &Subscription) -> String {
    let what = match &subscription.scope {
        Scope::List(list) => format!("the list <b>{}</b>", escape(list)),
        Scope::Global => "all mail from this sender".to_owned(),
    };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Unsubscribed</title>\
         </head><body><h1>Unsubscribed</h1><p>You will no longer receive {what}.</p></body></html>\n"
    )
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> SealKeys {
        SealKeys::new(&"k".repeat(40), &[]).unwrap()
    }

    fn job(extra: serde_json::Value) -> EmailJob {
        let mut j = serde_json::json!({"version": 1, "message_id": "m", "campaign_id": "news-2026",
            "from": "shop@example.com", "to": ["Ann <Ann@Example.ORG>"],
            "content": {"subject": "Hi", "text": "x"}});
        for (k, v) in extra.as_object().unwrap() {
            j[k] = v.clone();
        }
        serde_json::from_value(j).unwrap()
    }

    #[test]
    fn a_token_names_its_recipient_and_list_and_verifies_only_unaltered() {
        // GIVEN a token for a list
        let scope = Scope::List("news".into());
        let t = token("Ann <Ann@Example.ORG>", &scope, &keys());
        // THEN it verifies to the bare, normalised address and the list
        let sub = verify(&t, &keys()).unwrap();
        assert_eq!(sub.address, "ann@example.org");
        assert_eq!(sub.scope, scope);
        assert!(t.len() < 120, "{t}");
        // AND a global one says so
        let g = verify(&token("a@b.example", &Scope::Global, &keys()), &keys()).unwrap();
        assert_eq!(g.scope, Scope::Global);
        // WHEN any character is altered, or it is signed by another key, it is refused
        for i in 2..t.len() {
            let mut bytes = t.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let altered = String::from_utf8(bytes).unwrap();
            if altered != t {
                assert!(
                    verify(&altered, &keys()).is_err(),
                    "position {i}: {altered}"
                );
            }
        }
        let other = SealKeys::new(&"o".repeat(40), &[]).unwrap();
        assert_eq!(verify(&t, &other), Err(TokenError::Forged));
        // A rotated key still verifies links sent before the rotation.
        let rotated = SealKeys::new(&"n".repeat(40), &[&"k".repeat(40)]).unwrap();
        assert_eq!(verify(&t, &rotated).unwrap().address, "ann@example.org");
        // Garbage of every shape is refused without a panic.
        for bad in [
            "",
            "1",
            "1..",
            "2.a.b",
            "1.a.b.c",
            "1.!!.??",
            &"1.".repeat(600),
        ] {
            assert!(verify(bad, &keys()).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_signed_payload_that_names_no_address_is_refused() {
        // A payload signed with the right key but carrying garbage (a key leak is not needed
        // to test the parser: sign it here).
        let payload = URL_SAFE_NO_PAD.encode("bad list!\nnot an address");
        let t = format!(
            "1.{payload}.{}",
            URL_SAFE_NO_PAD.encode(tag(|x| keys().tag(x), &payload))
        );
        assert_eq!(verify(&t, &keys()), Err(TokenError::Payload));
    }

    #[test]
    fn list_keys_are_unambiguous_and_read_back() {
        let key = suppression_key("Ann <ANN@example.org>", &Scope::List("a:b".into()));
        assert_eq!(key, "list:3:a:b:ann@example.org");
        assert_eq!(
            parse_list_key(&key),
            Some(("a:b".into(), "ann@example.org".into()))
        );
        assert_eq!(
            suppression_key("ANN@example.org", &Scope::Global),
            "ann@example.org"
        );
        assert_eq!(parse_list_key("ann@example.org"), None);
        assert_eq!(parse_list_key("list:9:ab:c"), None);
    }

    #[test]
    fn bulk_jobs_offer_a_list_link_and_transactional_ones_none() {
        let bulk = job(serde_json::json!({"priority": "bulk"}));
        assert_eq!(
            offer(&bulk),
            Offer::Add {
                recipient: "Ann <Ann@Example.ORG>".into(),
                scope: Scope::List("news-2026".into())
            }
        );
        assert_eq!(checked_list(&bulk), Some("news-2026".into()));
        assert_eq!(offer(&job(serde_json::json!({}))), Offer::Off);
        assert_eq!(checked_list(&job(serde_json::json!({}))), None);
        let listed = job(serde_json::json!({"list_id": "weekly", "unsubscribe": "list"}));
        assert_eq!(checked_list(&listed), Some("weekly".into()));
        let global = job(serde_json::json!({"unsubscribe": "global"}));
        assert!(matches!(
            offer(&global),
            Offer::Add {
                scope: Scope::Global,
                ..
            }
        ));
        assert_eq!(checked_list(&global), None);
        // The producer's own header wins.
        let own = job(serde_json::json!({"priority": "bulk",
            "headers": {"list-unsubscribe": "<https://x.example/u>"}}));
        assert_eq!(offer(&own), Offer::ProducerOwns);
        // A bulk job to two recipients, or whose campaign is no list id, gets no link.
        let two =
            job(serde_json::json!({"priority": "bulk", "to": ["a@x.example", "b@x.example"]}));
        assert!(matches!(offer(&two), Offer::NotPossible(_)));
        assert_eq!(checked_list(&two), Some("news-2026".into()));
        assert_eq!(refusal(&two), None);
        let spaced = job(serde_json::json!({"priority": "bulk", "campaign_id": "spring sale"}));
        assert!(matches!(offer(&spaced), Offer::NotPossible(_)));
        // Explicit requests that cannot be honoured are refused.
        let asked =
            job(serde_json::json!({"unsubscribe": "list", "to": ["a@x.example", "b@x.example"]}));
        assert!(refusal(&asked).unwrap().contains("exactly one recipient"));
        let unlisted =
            job(serde_json::json!({"unsubscribe": "list", "campaign_id": "spring sale"}));
        assert!(refusal(&unlisted).unwrap().contains("list_id"));
    }

    #[test]
    fn headers_carry_the_link_and_the_one_click_post() {
        let links = Links::new("https://u.example/", Some("unsub@example.com")).unwrap();
        let [(n1, v1), (n2, v2)] = links.headers("1.abc.def");
        assert_eq!(n1, "List-Unsubscribe");
        assert_eq!(
            v1,
            "<https://u.example/?t=1.abc.def>, <mailto:unsub@example.com?subject=unsubscribe%201.abc.def>"
        );
        assert_eq!(
            (n2.as_str(), v2.as_str()),
            ("List-Unsubscribe-Post", "List-Unsubscribe=One-Click")
        );
        // A long token leaves the mailto form out rather than break the line limit.
        let long = "x".repeat(600);
        let [(_, v), _] = links.headers(&long);
        assert!(!v.contains("mailto") && v.len() <= MAX_HEADER_VALUE);
        // The longest address and list still fit one line.
        let t = token(
            &format!("{}@{}.example", "a".repeat(64), "d".repeat(180)),
            &Scope::List("l".repeat(MAX_LIST_ID_LEN)),
            &keys(),
        );
        assert!(links.headers(&t)[0].1.len() <= MAX_HEADER_VALUE);
        assert_eq!(
            Links::new("https://u.example/?a=1", None)
                .unwrap()
                .link("T"),
            "https://u.example/?a=1&t=T"
        );
        assert!(
            Links::new("http://127.0.0.1:8080/", None).is_ok(),
            "the emulators' loopback"
        );
        for bad in [
            "http://u.example/",
            "http://127.0.0.1.evil.example/",
            "u.example",
            "https://",
            "https://a b",
            "https://u#x",
        ] {
            assert!(
                matches!(Links::new(bad, None), Err(LinksError::Url(_))),
                "{bad}"
            );
        }
        for bad in ["Ann <a@b.example>", "not an address", "a@b.example?x"] {
            assert!(
                matches!(
                    Links::new("https://u.example/", Some(bad)),
                    Err(LinksError::Mailto(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn requests_are_answered_by_method_token_and_form() {
        let t = token("a@b.example", &Scope::List("news".into()), &keys());
        let req =
            |method, token: Option<&'static str>, ct: Option<&'static str>, body: &'static [u8]| {
                answer(
                    &Request {
                        method,
                        token,
                        content_type: ct,
                        body,
                    },
                    &keys(),
                )
            };
        let t: &'static str = Box::leak(t.into_boxed_str());
        let form = Some("application/x-www-form-urlencoded");
        assert!(matches!(
            req("POST", Some(t), form, b"List-Unsubscribe=One-Click"),
            Answer::Unsubscribe(_)
        ));
        assert!(matches!(
            req("post", Some(t), None, b"List-Unsubscribe=One-Click"),
            Answer::Unsubscribe(_)
        ));
        assert!(matches!(req("GET", Some(t), None, b""), Answer::Confirm(_)));
        assert!(matches!(
            req("HEAD", Some(t), None, b""),
            Answer::Confirm(_)
        ));
        assert_eq!(req("DELETE", Some(t), None, b""), Answer::MethodNotAllowed);
        assert!(matches!(
            req("POST", Some(t), form, b"List-Unsubscribe=Yes"),
            Answer::BadRequest(_)
        ));
        assert!(matches!(
            req(
                "POST",
                Some(t),
                Some("text/plain"),
                b"List-Unsubscribe=One-Click"
            ),
            Answer::BadRequest(_)
        ));
        assert!(matches!(
            req("POST", None, form, b"List-Unsubscribe=One-Click"),
            Answer::BadRequest(_)
        ));
        assert!(matches!(
            req("GET", Some("1.x.y"), None, b""),
            Answer::BadRequest(_)
        ));
        // multipart/form-data, as RFC 8058 allows.
        let body = b"--XyZ\r\nContent-Disposition: form-data; name=\"List-Unsubscribe\"\r\n\r\nOne-Click\r\n--XyZ--\r\n";
        assert!(matches!(
            req(
                "POST",
                Some(t),
                Some("multipart/form-data; boundary=\"XyZ\""),
                body
            ),
            Answer::Unsubscribe(_)
        ));
        assert!(matches!(
            req("POST", Some(t), Some("multipart/form-data"), body),
            Answer::BadRequest(_)
        ));
    }

    #[test]
    fn pages_escape_what_they_show() {
        let sub = Subscription {
            address: "a@b.example".into(),
            scope: Scope::List("news".into()),
        };
        let page = confirmation_page(&sub, "1.a<b.c");
        assert!(page.contains("action=\"?t=1.a&lt;b.c\""));
        assert!(page.contains("name=\"List-Unsubscribe\" value=\"One-Click\""));
        assert!(!page.contains("a@b.example"), "the address is not shown");
        assert!(done_page(&sub).contains("<b>news</b>"));
    }
}
