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
            (
                ApiFailure {
                    kind: ApiFailureKind::Service,
                    code: err.code().map(str::to_owned),
                    message: err.message().map(str::to_owned).or(Some(context)),
                    http_status: Some(service.raw().status().as_u16()),
                },
                false,
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
            // A connect failure never reached SES; a timeout while waiting for the response may
            // have (SES v2 has no idempotency token).
            let ambiguous = d.is_timeout();
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
        for (name, value) in [
            (TAG_MESSAGE_ID, &email.message_id),
            (TAG_CAMPAIGN_ID, &email.campaign_id),
        ] {
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
        match request.send().await {
            Ok(out) => Ok(Receipt {
                provider_message_id: out.message_id.unwrap_or_default(),
            }),
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
    #[test]
    fn tag_values_are_sanitised() {
        assert_eq!(
            super::tag_value("order 4711/receipt@x"),
            "order_4711_receipt@x"
        );
        assert_eq!(super::tag_value(&"a".repeat(300)).len(), 256);
    }
}
