//! SES v2 API errors: the SDK error's code, message and HTTP status.

use serde::{Deserialize, Serialize};

use super::*;

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
                // "Address blacklisted.": the recipient is on SES's suppression list (the SMTP
                // interface's form is read by the `provider-code-recipient` rule)
                _ if message.contains("address blacklisted") => (
                    RecipientPermanent,
                    "ses.MessageRejected.suppressed-address".into(),
                ),
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
