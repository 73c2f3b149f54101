//! `SesMailer`: the [`Mailer`] port over SES v2 `SendEmail` with raw MIME content (so every
//! header Courier sets is kept), message tags carrying the message and campaign ids for event
//! correlation, and an optional configuration set.

use aws_sdk_sesv2::error::SdkError;
use aws_sdk_sesv2::primitives::Blob;
use aws_sdk_sesv2::types::{Destination, EmailContent, MessageTag, RawMessage};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

use crate::smtp::build_message;
use courier_core::classify::{ApiFailure, ApiFailureKind, ErrorClass, Verdict, classify_ses_api};
use courier_core::ports::{Mailer, OutgoingEmail, Provider, Receipt, SendFailure};

/// Tag names SES events carry back.
pub const TAG_MESSAGE_ID: &str = "courier-message-id";
pub const TAG_CAMPAIGN_ID: &str = "courier-campaign-id";
/// SES v2's largest message, attachments and their encoding included (AWS, SES quotas:
/// "The maximum message size, including attachments, is 40 MB per message (after base64
/// encoding)").
pub const MAX_MESSAGE_BYTES: usize = 40_000_000;
/// The job's trace id (see [`courier_core::trace`]), so SES events carry it back.
pub const TAG_TRACE_ID: &str = "courier-trace-id";

/// Sends through SES v2.
pub struct SesMailer {
    client: aws_sdk_sesv2::Client,
    configuration_set: Option<String>,
}

impl SesMailer {
    pub fn new(client: aws_sdk_sesv2::Client, configuration_set: Option<String>) -> Self {
        SesMailer {
            client,
            configuration_set,
        }
    }
}

/// SES tag values allow only `A-Z a-z 0-9 _ - . @`, at most 256 characters; anything else
/// becomes `_` (the message id in the status record stays exact).
pub fn tag_value(value: &str) -> String {
    value
        .chars()
        .take(256)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '@') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Reduces an SDK error to what classification needs; says whether the request may have been
/// accepted (a timeout or an unreadable response after sending).
pub fn api_failure<E>(error: &SdkError<E, HttpResponse>) -> (ApiFailure, bool)
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let context = aws_smithy_types::error::display::DisplayErrorContext(error).to_string();
    match error {
        SdkError::ServiceError(service) => {
            let err = service.err();
            let status = service.raw().status();
            (
                ApiFailure {
                    kind: ApiFailureKind::Service,
                    code: err.code().map(str::to_owned),
                    message: err.message().map(str::to_owned).or(Some(context)),
                    http_status: Some(status.as_u16()),
                },
                // A 4xx refuses the request; a 5xx (InternalFailure, ServiceUnavailable) does
                // not prove SES did not accept the mail before failing.
                status.is_server_error(),
            )
        }
        SdkError::TimeoutError(_) => (
            ApiFailure {
                kind: ApiFailureKind::Timeout,
                code: None,
                message: Some(context),
                http_status: None,
            },
            true,
        ),
        SdkError::DispatchFailure(d) => {
            // Only a failure to connect proves SES never saw the request; a reset, a closed
            // connection or a timeout after sending may follow SES's acceptance (SES v2 has no
            // idempotency token).
            let ambiguous = !d.as_connector_error().is_some_and(never_connected);
            (
                ApiFailure {
                    kind: ApiFailureKind::Dispatch,
                    code: None,
                    message: Some(context),
                    http_status: None,
                },
                ambiguous,
            )
        }
        SdkError::ResponseError(r) => (
            ApiFailure {
                kind: ApiFailureKind::Response,
                code: None,
                message: Some(context),
                http_status: Some(r.raw().status().as_u16()),
            },
            true,
        ),
        _ => (
            ApiFailure {
                kind: ApiFailureKind::Construction,
                code: None,
                message: Some(context),
                http_status: None,
            },
            false,
        ),
    }
}

/// Whether a dispatch failure happened while connecting (TCP or TLS), before any byte of the
/// request was written.
fn never_connected(error: &aws_smithy_runtime_api::client::result::ConnectorError) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = next {
        if let Some(client) = e.downcast_ref::<hyper_util::client::legacy::Error>() {
            return client.is_connect();
        }
        next = e.source();
    }
    false
}

/// The account's SES send quota (`GetAccount`; the call allows no resource-level scoping, so the
/// function's policy grants `ses:GetAccount` on `*`).
pub struct SesSendQuota {
    client: aws_sdk_sesv2::Client,
}

impl SesSendQuota {
    pub fn new(client: aws_sdk_sesv2::Client) -> Self {
        SesSendQuota { client }
    }
}

#[async_trait::async_trait]
impl courier_core::ports::SendQuota for SesSendQuota {
    async fn max_send_rate(&self) -> Result<f64, courier_core::ports::StoreError> {
        const OP: &str = "read the SES send quota (GetAccount)";
        let account = self.client.get_account().send().await.map_err(|e| {
            courier_core::ports::StoreError::msg(
                OP,
                aws_smithy_types::error::display::DisplayErrorContext(&e).to_string(),
            )
        })?;
        account
            .send_quota()
            .map(|q| q.max_send_rate())
            .ok_or_else(|| courier_core::ports::StoreError::msg(OP, "no SendQuota in the answer"))
    }
}

#[async_trait::async_trait]
impl Mailer for SesMailer {
    fn provider(&self) -> Provider {
        Provider::Ses
    }

    async fn send(&self, email: &OutgoingEmail) -> Result<Receipt, SendFailure> {
        let invalid = |e: String| SendFailure {
            verdict: Verdict::local(ErrorClass::InvalidJob, "mime", e),
            ambiguous: false,
            source: None,
        };
        let raw = build_message(email).map_err(invalid)?.formatted();
        if raw.len() > MAX_MESSAGE_BYTES {
            return Err(crate::smtp::too_large(raw.len(), MAX_MESSAGE_BYTES, "SES"));
        }
        let destination = Destination::builder()
            .set_to_addresses(Some(email.to.iter().map(|m| m.email.to_string()).collect()))
            .set_cc_addresses(Some(email.cc.iter().map(|m| m.email.to_string()).collect()))
            .set_bcc_addresses(Some(
                email.bcc.iter().map(|m| m.email.to_string()).collect(),
            ))
            .build();
        let raw_message = RawMessage::builder()
            .data(Blob::new(raw))
            .build()
            .map_err(|e| invalid(e.to_string()))?;
        let mut request = self
            .client
            .send_email()
            .from_email_address(email.from.email.to_string())
            .destination(destination)
            .content(EmailContent::builder().raw(raw_message).build());
        let tags = [
            (TAG_MESSAGE_ID, Some(&email.message_id)),
            (TAG_CAMPAIGN_ID, Some(&email.campaign_id)),
            (TAG_TRACE_ID, email.trace_id.as_ref()),
        ];
        for (name, value) in tags.into_iter().filter_map(|(n, v)| Some((n, v?))) {
            let tag = MessageTag::builder()
                .name(name)
                .value(tag_value(value))
                .build()
                .map_err(|e| invalid(e.to_string()))?;
            request = request.email_tags(tag);
        }
        if let Some(set) = &self.configuration_set {
            request = request.configuration_set_name(set);
        }
        // One HTTP request per send: the SDK's own retry would send again after a 5xx or a
        // lost answer, when SES may already have accepted the mail (SES v2 has no idempotency
        // token). Courier's policy retries only what proves nothing was accepted.
        let request = request.customize().config_override(
            aws_sdk_sesv2::config::Builder::default()
                .retry_config(aws_sdk_sesv2::config::retry::RetryConfig::disabled()),
        );
        match request.send().await {
            Ok(out) => Ok(Receipt::new(out.message_id.unwrap_or_default())),
            Err(error) => {
                let (failure, ambiguous) = api_failure(&error);
                Err(SendFailure {
                    verdict: classify_ses_api(&failure),
                    ambiguous,
                    source: Some(Box::new(error)),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use courier_core::ports::{Mailer, OutgoingEmail};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// An HTTP server that answers every request with `status` and SES's error body; counts the
    /// requests it got.
    async fn answering(status: u16, error_type: &'static str) -> (String, Arc<AtomicUsize>) {
        serving(move |mut conn: tokio::net::TcpStream| async move {
            let body = format!("{{\"message\":\"{error_type} from the test server\"}}");
            let answer = format!(
                "HTTP/1.1 {status} Error\r\nContent-Type: application/json\r\nx-amzn-ErrorType: {error_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(answer.as_bytes()).await;
        })
        .await
    }

    /// An HTTP server that reads each whole request, counts it, and hands the connection to
    /// `then`.
    async fn serving<F, Fut>(then: F) -> (String, Arc<AtomicUsize>)
    where
        F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let count = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&count);
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut request = Vec::new();
                let mut buf = [0_u8; 8192];
                // The whole request: headers, then as many body bytes as they announce.
                loop {
                    let n = conn.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    request.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&request);
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text[..end]
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        if request.len() >= end + 4 + length {
                            break;
                        }
                    }
                }
                seen.fetch_add(1, Ordering::SeqCst);
                then(conn).await;
            }
        });
        (url, count)
    }

    /// A mailer on `url` whose client retries as the SDK does by default (3 attempts).
    fn mailer(url: &str) -> super::SesMailer {
        let config = aws_sdk_sesv2::Config::builder()
            .behavior_version(aws_sdk_sesv2::config::BehaviorVersion::latest())
            .region(aws_sdk_sesv2::config::Region::new("eu-west-1"))
            .credentials_provider(aws_sdk_sesv2::config::Credentials::for_tests())
            .endpoint_url(url)
            .http_client(crate::aws::https_client())
            .retry_config(
                aws_sdk_sesv2::config::retry::RetryConfig::standard()
                    .with_max_attempts(3)
                    .with_initial_backoff(std::time::Duration::from_millis(1)),
            )
            .build();
        super::SesMailer::new(aws_sdk_sesv2::Client::from_conf(config), None)
    }

    fn email() -> OutgoingEmail {
        OutgoingEmail {
            message_id: "m1".into(),
            campaign_id: "c".into(),
            from: "shop@example.com".parse().unwrap(),
            to: vec!["ann@example.org".parse().unwrap()],
            cc: Vec::new(),
            bcc: Vec::new(),
            subject: "Hi".into(),
            text: Some("Hello".into()),
            html: None,
            headers: Vec::new(),
            trace_id: None,
            attachments: Vec::new(),
        }
    }

    #[tokio::test]
    async fn a_5xx_is_one_request_and_an_ambiguous_failure() {
        // GIVEN SES failing with a 500 after it may have taken the mail
        let (url, requests) = answering(500, "InternalFailure").await;
        // WHEN the mailer sends through a client configured to retry
        let failure = mailer(&url).send(&email()).await.unwrap_err();
        // THEN SES got exactly one request, and the outcome is ambiguous (never resent blindly)
        assert_eq!(requests.load(Ordering::SeqCst), 1);
        assert!(failure.ambiguous, "{failure:?}");
    }

    #[tokio::test]
    async fn a_reset_after_the_whole_request_is_one_request_and_an_ambiguous_failure() {
        // GIVEN SES (or a network path) that takes the whole request and resets the connection
        // instead of answering: it may have accepted the mail
        let (url, requests) = serving(|conn: tokio::net::TcpStream| async move {
            conn.set_zero_linger().unwrap();
            drop(conn);
        })
        .await;
        // WHEN the mailer sends through a client configured to retry
        let failure = mailer(&url).send(&email()).await.unwrap_err();
        // THEN SES got exactly one request, and the outcome is ambiguous (never resent blindly)
        assert_eq!(requests.load(Ordering::SeqCst), 1);
        assert!(failure.ambiguous, "{failure:?}");
    }

    #[tokio::test]
    async fn a_refused_connection_is_not_ambiguous() {
        // GIVEN an endpoint where nothing listens: the request cannot have reached SES
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        drop(listener);
        // WHEN the mailer sends
        let failure = mailer(&url).send(&email()).await.unwrap_err();
        // THEN the failure is a plain transient one, safe to retry
        assert!(!failure.ambiguous, "{failure:?}");
        assert_eq!(
            failure.verdict.class,
            courier_core::classify::ErrorClass::Network
        );
    }

    #[tokio::test]
    async fn a_message_above_ses_size_limit_is_refused_before_the_call() {
        let (url, requests) = answering(200, "none").await;
        let mut big = email();
        // 30 MB of file is about 40.5 MB in base64: over SES's 40 MB.
        big.attachments.push(courier_core::ports::Attachment {
            filename: "scan.tiff".into(),
            content_type: "image/tiff".into(),
            content: vec![7u8; 30_000_000],
        });
        let failure = mailer(&url).send(&big).await.unwrap_err();
        assert_eq!(requests.load(Ordering::SeqCst), 0);
        assert_eq!(
            (
                failure.verdict.class,
                failure.verdict.rule.as_str(),
                failure.ambiguous
            ),
            (
                courier_core::classify::ErrorClass::ContentRejected,
                "local.message-too-large",
                false
            )
        );
    }

    #[tokio::test]
    async fn a_4xx_refusal_is_not_ambiguous() {
        let (url, requests) = answering(400, "MessageRejected").await;
        let failure = mailer(&url).send(&email()).await.unwrap_err();
        assert_eq!(requests.load(Ordering::SeqCst), 1);
        assert!(!failure.ambiguous, "{failure:?}");
        assert_eq!(
            failure.verdict.raw_code.as_deref(),
            Some("MessageRejected (HTTP 400)")
        );
    }

    #[test]
    fn tag_values_are_sanitised() {
        assert_eq!(
            super::tag_value("order 4711/receipt@x"),
            "order_4711_receipt@x"
        );
        assert_eq!(super::tag_value(&"a".repeat(300)).len(), 256);
    }
}
