//! `SmtpMailer`: the [`Mailer`] port over lettre's pooled async SMTP transport.
//!
//! lettre bounds only the connect with its own timeout, so the whole exchange is bounded here.
//! A failure is classified from the server's reply (code, enhanced code, text) when there is
//! one; a timeout or a broken session without a reply is reported as ambiguous (the relay may
//! have queued the message). A recipient the relay refuses permanently by name is left out and
//! the message sent to the others ([`Receipt::refused`]).

use std::time::Duration;

use lettre::message::header::{ContentType, HeaderName, HeaderValue};
use lettre::message::{Mailboxes, MultiPart, SinglePart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use courier_core::classify::{ErrorClass, Verdict, classify_smtp};
use courier_core::ports::{
    Mailbox, Mailer, OutgoingEmail, Provider, Receipt, Refusal, SendFailure,
};

/// How the connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpSecurity {
    /// Plain text (local test servers only).
    None,
    /// STARTTLS required.
    StartTls,
    /// Implicit TLS (port 465).
    Tls,
}

/// Connection settings. `Debug` never shows the password.
#[derive(Clone)]
pub struct SmtpOptions {
    pub host: String,
    pub port: u16,
    pub security: SmtpSecurity,
    pub credentials: Option<(String, String)>,
    /// Bound on one whole send (connect, envelope, data).
    pub timeout: Duration,
    pub pool_size: u32,
    /// The relay's message size limit: a larger message is refused before it is sent.
    pub max_message_bytes: usize,
}

/// Postfix's default `message_size_limit` (10,240,000 bytes).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 10_240_000;

/// The failure of a message larger than a provider takes: refused before the call, not retried.
pub fn too_large(bytes: usize, limit: usize, provider: &str) -> SendFailure {
    SendFailure {
        verdict: Verdict::local(
            ErrorClass::ContentRejected,
            "message-too-large",
            format!("the message is {bytes} bytes; {provider} takes at most {limit}"),
        ),
        ambiguous: false,
        source: None,
    }
}

impl std::fmt::Debug for SmtpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmtpOptions")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("security", &self.security)
            .field(
                "credentials",
                &self
                    .credentials
                    .as_ref()
                    .map(|(user, _)| (user, "<redacted>")),
            )
            .field("timeout", &self.timeout)
            .field("pool_size", &self.pool_size)
            .finish()
    }
}

/// Why the transport could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot configure SMTP transport for {host}: {source}")]
pub struct SmtpSetupError {
    host: String,
    #[source]
    source: lettre::transport::smtp::Error,
}

/// Sends through an SMTP relay.
pub struct SmtpMailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    timeout: Duration,
    max_message_bytes: usize,
}

impl SmtpMailer {
    pub fn new(options: &SmtpOptions) -> Result<SmtpMailer, SmtpSetupError> {
        let setup = |source| SmtpSetupError {
            host: options.host.clone(),
            source,
        };
        let tls = match options.security {
            SmtpSecurity::None => Tls::None,
            SmtpSecurity::StartTls => {
                Tls::Required(TlsParameters::new(options.host.clone()).map_err(setup)?)
            }
            SmtpSecurity::Tls => {
                Tls::Wrapper(TlsParameters::new(options.host.clone()).map_err(setup)?)
            }
        };
        let mut builder =
            AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(options.host.clone())
                .port(options.port)
                .tls(tls)
                .timeout(Some(options.timeout))
                .pool_config(
                    lettre::transport::smtp::PoolConfig::new().max_size(options.pool_size.max(1)),
                );
        if let Some((user, pass)) = &options.credentials {
            builder = builder.credentials(Credentials::new(user.clone(), pass.clone()));
        }
        Ok(SmtpMailer {
            transport: builder.build(),
            timeout: options.timeout,
            max_message_bytes: options.max_message_bytes,
        })
    }
}

/// The core's mailbox as lettre's. Both validate the address alike (the core's mailbox tests
/// check it), so this fails only if they ever drift apart.
fn lettre_mailbox(m: &Mailbox) -> Result<lettre::message::Mailbox, String> {
    let address = lettre::Address::new(m.email.user(), m.email.domain())
        .map_err(|e| format!("{}: {e}", m.email))?;
    Ok(lettre::message::Mailbox::new(m.name.clone(), address))
}

/// Builds the MIME message: text and/or html (alternative), allowed extra headers, and
/// `X-Courier-Message-Id` / `X-Courier-Campaign-Id` (and `X-Courier-Trace-Id` when the job has a
/// trace) for correlation.
pub fn build_message(email: &OutgoingEmail) -> Result<Message, String> {
    let mut builder = Message::builder()
        .from(lettre_mailbox(&email.from)?)
        .subject(email.subject.clone());
    for to in &email.to {
        builder = builder.to(lettre_mailbox(to)?);
    }
    for cc in &email.cc {
        builder = builder.cc(lettre_mailbox(cc)?);
    }
    for bcc in &email.bcc {
        builder = builder.bcc(lettre_mailbox(bcc)?);
    }
    for (name, value) in &email.headers {
        if name.eq_ignore_ascii_case("Reply-To") {
            let list: Mailboxes = value.parse().map_err(|e| format!("Reply-To: {e}"))?;
            for mailbox in list {
                builder = builder.reply_to(mailbox);
            }
            continue;
        }
        let header =
            HeaderName::new_from_ascii(name.clone()).map_err(|e| format!("{name}: {e}"))?;
        builder = builder.raw_header(HeaderValue::new(header, value.clone()));
    }
    let correlation = [
        ("X-Courier-Message-Id", Some(&email.message_id)),
        ("X-Courier-Campaign-Id", Some(&email.campaign_id)),
        ("X-Courier-Trace-Id", email.trace_id.as_ref()),
    ];
    for (name, value) in correlation {
        if let Some(value) = value {
            let header = HeaderName::new_from_ascii_str(name);
            builder = builder.raw_header(HeaderValue::new(header, value.clone()));
        }
    }
    let body = match (&email.text, &email.html) {
        (Some(text), Some(html)) => Body::Multi(MultiPart::alternative_plain_html(
            text.clone(),
            html.clone(),
        )),
        (Some(text), None) => Body::Single(SinglePart::plain(text.clone())),
        (None, Some(html)) => Body::Single(SinglePart::html(html.clone())),
        (None, None) => return Err("no body".into()),
    };
    let result = if email.attachments.is_empty() {
        match body {
            Body::Multi(part) => builder.multipart(part),
            Body::Single(part) => builder.singlepart(part),
        }
    } else {
        // multipart/mixed: the body first, then each file (lettre encodes the name, RFC 2231).
        let mut mixed = match body {
            Body::Multi(part) => MultiPart::mixed().multipart(part),
            Body::Single(part) => MultiPart::mixed().singlepart(part),
        };
        for file in &email.attachments {
            let content_type = ContentType::parse(&file.content_type)
                .map_err(|e| format!("attachment {:?}: {e}", file.filename))?;
            mixed = mixed.singlepart(
                lettre::message::Attachment::new(file.filename.clone())
                    .body(file.content.clone(), content_type),
            );
        }
        builder.multipart(mixed)
    };
    result.map_err(|e| e.to_string())
}

/// A message body: one part, or text and html as alternatives.
enum Body {
    Single(SinglePart),
    Multi(MultiPart),
}

/// Classifies a lettre error: the server's reply when it sent one, else the local failure.
pub fn classify_lettre(error: &lettre::transport::smtp::Error) -> Verdict {
    if let Some(code) = error.status() {
        // lettre's Display gives the reply text; put the code in front for the classifier.
        let text = error.to_string();
        let raw = if text.starts_with(&code.to_string()) {
            text
        } else {
            format!("{code} {}", strip_lettre_prefix(&text))
        };
        return classify_smtp(&raw);
    }
    let text = error.to_string();
    let lower = text.to_lowercase();
    if error.is_timeout() {
        Verdict::local(ErrorClass::Network, "smtp-timeout", text)
    } else if lower.contains("tls") || lower.contains("certificate") || lower.contains("handshake")
    {
        Verdict::local(ErrorClass::Tls, "smtp-tls", text)
    } else if error.is_client() {
        Verdict::local(ErrorClass::InvalidJob, "smtp-client", text)
    } else {
        Verdict::local(ErrorClass::Network, "smtp-connection", text)
    }
}

/// Whether a failure left the outcome unknown: the session broke without a reply after it was
/// established (a reset, an EOF, a read timeout). lettre does not say in which phase, and a
/// relay may have queued the message before the break (e.g. a relay restarting between queueing
/// and its `250`), so such a failure is ambiguous like a timeout: the job waits for the grace
/// window instead of being resent at once. A failure to connect, a TLS failure, our own client
/// error and any reply from the server are not ambiguous.
pub fn broke_mid_session(error: &lettre::transport::smtp::Error) -> bool {
    error.status().is_none()
        && !error.is_client()
        && !error.is_tls()
        && !error.is_transport_shutdown()
        // lettre's `Kind::Connection` (no public predicate): connecting or the handshake failed.
        && !error.to_string().starts_with("Connection error")
}

fn strip_lettre_prefix(text: &str) -> &str {
    // e.g. "permanent error (550): 5.1.1 <u@x>: Recipient address rejected: User unknown"
    text.split_once("): ").map_or(text, |(_, rest)| rest)
}

#[async_trait::async_trait]
impl Mailer for SmtpMailer {
    fn provider(&self) -> Provider {
        Provider::Smtp
    }

    async fn send(&self, email: &OutgoingEmail) -> Result<Receipt, SendFailure> {
        let message = build_message(email).map_err(|e| SendFailure {
            verdict: Verdict::local(ErrorClass::InvalidJob, "mime", e),
            ambiguous: false,
            source: None,
        })?;
        if !email.attachments.is_empty() {
            let bytes = message.formatted().len();
            if bytes > self.max_message_bytes {
                return Err(too_large(bytes, self.max_message_bytes, "the SMTP relay"));
            }
        }
        let raw = message.formatted();
        let original = message.envelope();
        // Recipients refused one by one: the rest are sent again without them (see `refused`).
        let mut remaining: Vec<lettre::Address> = original.to().to_vec();
        let mut refused: Vec<Refusal> = Vec::new();
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            let envelope =
                lettre::address::Envelope::new(original.from().cloned(), remaining.clone())
                    .map_err(|e| SendFailure {
                        verdict: Verdict::local(ErrorClass::InvalidJob, "envelope", e.to_string()),
                        ambiguous: false,
                        source: Some(Box::new(e)),
                    })?;
            match tokio::time::timeout_at(deadline, self.transport.send_raw(&envelope, &raw)).await
            {
                Ok(Ok(response)) => {
                    return Ok(Receipt {
                        provider_message_id: response
                            .message()
                            .collect::<Vec<_>>()
                            .join(" ")
                            .trim()
                            .to_owned(),
                        refused,
                    });
                }
                Ok(Err(error)) => {
                    if remaining.len() > 1
                        && let Some(at) = refused_recipient(&error, &remaining)
                    {
                        refused.push(Refusal {
                            address: remaining.remove(at).to_string(),
                            verdict: classify_lettre(&error),
                        });
                        continue;
                    }
                    return Err(SendFailure {
                        verdict: classify_lettre(&error),
                        ambiguous: broke_mid_session(&error),
                        source: Some(Box::new(error)),
                    });
                }
                // The reply to DATA may be what we were waiting for: the relay may have the
                // message. Ambiguous, so it is not resent blindly.
                Err(_) => {
                    return Err(SendFailure {
                        verdict: Verdict::local(
                            ErrorClass::Network,
                            "smtp-timeout",
                            format!("no reply within {:?}", self.timeout),
                        ),
                        ambiguous: true,
                        source: None,
                    });
                }
            }
        }
    }
}

/// The position in `remaining` of the one recipient a permanent reply names: a relay refuses a
/// recipient in its reply to `RCPT TO` and names it (Postfix: `550 5.1.1 <a@x>: Recipient
/// address rejected`). Any reply ends the transaction before the message is taken, so sending
/// again to the others cannot duplicate. A transient reply, or one that names no recipient or
/// several, fails the message as a whole.
fn refused_recipient(
    error: &lettre::transport::smtp::Error,
    remaining: &[lettre::Address],
) -> Option<usize> {
    if !error.is_permanent() {
        return None;
    }
    let text = error.to_string().to_lowercase();
    let named: Vec<usize> = remaining
        .iter()
        .enumerate()
        .filter(|(_, a)| courier_core::mailbox::names_address(&text, a.as_ref()))
        .map(|(i, _)| i)
        .collect();
    match named.as_slice() {
        [one] => Some(*one),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn email() -> OutgoingEmail {
        OutgoingEmail {
            message_id: "m-1".into(),
            campaign_id: "c-1".into(),
            from: "Shop <shop@example.com>".parse().unwrap(),
            to: vec!["ann@example.org".parse().unwrap()],
            cc: vec![],
            bcc: vec!["audit@example.com".parse().unwrap()],
            subject: "Hi".into(),
            text: Some("Hello".into()),
            html: Some("<p>Hello</p>".into()),
            headers: vec![
                ("Reply-To".into(), "help@example.com".into()),
                ("List-Unsubscribe".into(), "<https://x.example/u>".into()),
            ],
            trace_id: None,
            attachments: Vec::new(),
        }
    }

    #[test]
    fn builds_an_alternative_message_with_correlation_headers() {
        let raw = String::from_utf8(build_message(&email()).unwrap().formatted()).unwrap();
        assert!(raw.contains("X-Courier-Message-Id: m-1"));
        assert!(raw.contains("X-Courier-Campaign-Id: c-1"));
        assert!(!raw.contains("X-Courier-Trace-Id"), "no trace, no header");
        assert!(raw.contains("Reply-To: help@example.com"));
        assert!(raw.contains("List-Unsubscribe: <https://x.example/u>"));
        assert!(raw.contains("multipart/alternative"));
        assert!(
            !raw.contains("audit@example.com"),
            "Bcc leaked into headers"
        );
    }

    #[test]
    fn a_traced_job_names_its_trace_in_a_header() {
        let traced = OutgoingEmail {
            trace_id: Some("1-5759e988-bd862e3fe1be46a994272793".into()),
            ..email()
        };
        let raw = String::from_utf8(build_message(&traced).unwrap().formatted()).unwrap();
        assert!(raw.contains("X-Courier-Trace-Id: 1-5759e988-bd862e3fe1be46a994272793"));
    }

    #[test]
    fn attachments_go_in_a_mixed_message_after_the_body() {
        let mut e = email();
        e.attachments.push(courier_core::ports::Attachment {
            filename: "invoice 4711.pdf".into(),
            content_type: "application/pdf".into(),
            content: b"%PDF-1.7 \x00\xff\xfe binary".to_vec(),
        });
        let raw = String::from_utf8(build_message(&e).unwrap().formatted()).unwrap();
        assert!(raw.contains("multipart/mixed"), "{raw}");
        assert!(raw.contains("multipart/alternative"), "{raw}");
        assert!(raw.contains("Content-Type: application/pdf"), "{raw}");
        assert!(raw.contains("filename=\"invoice 4711.pdf\""), "{raw}");
        // Binary content travels in base64: "%PDF-1.7 \0\xff\xfe binary".
        assert!(raw.contains("JVBERi0xLjcgAP/+IGJpbmFyeQ=="), "{raw}");
    }

    #[tokio::test]
    async fn a_message_above_the_relays_limit_is_refused_before_connecting() {
        let mailer = SmtpMailer::new(&SmtpOptions {
            host: "127.0.0.1".into(),
            port: 9, // nothing listens: a connection attempt would fail differently
            security: SmtpSecurity::None,
            credentials: None,
            timeout: Duration::from_secs(5),
            pool_size: 1,
            max_message_bytes: 2_000,
        })
        .unwrap();
        let mut e = email();
        e.attachments.push(courier_core::ports::Attachment {
            filename: "big.bin".into(),
            content_type: "application/octet-stream".into(),
            content: vec![0u8; 4_000],
        });
        let failure = mailer.send(&e).await.unwrap_err();
        assert_eq!(
            (
                failure.verdict.class,
                failure.verdict.rule.as_str(),
                failure.ambiguous
            ),
            (
                ErrorClass::ContentRejected,
                "local.message-too-large",
                false
            )
        );
    }

    #[test]
    fn a_message_without_body_is_refused() {
        let mut e = email();
        e.text = None;
        e.html = None;
        assert_eq!(build_message(&e).unwrap_err(), "no body");
    }

    #[test]
    fn lettre_prefix_is_stripped() {
        assert_eq!(
            strip_lettre_prefix("permanent error (550): 5.1.1 User unknown"),
            "5.1.1 User unknown"
        );
    }
}
