//! SES events: bounces, complaints, rejects and rendering failures.

use serde::{Deserialize, Serialize};

use super::*;

/// The failure-bearing SES event kinds, with the fields classification needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SesFailureEvent {
    Bounce {
        bounce_type: String,
        bounce_subtype: String,
        diagnostic: Option<String>,
    },
    Complaint {
        feedback_type: Option<String>,
    },
    DeliveryDelay {
        delay_type: String,
        diagnostic: Option<String>,
    },
    Reject {
        reason: Option<String>,
    },
    RenderingFailure {
        error: Option<String>,
    },
}

/// Classifies an SES event that reports a failure.
pub fn classify_ses_event(event: &SesFailureEvent) -> Verdict {
    use ErrorClass::*;
    match event {
        SesFailureEvent::Bounce {
            bounce_type,
            bounce_subtype,
            diagnostic,
        } => {
            let class = match (bounce_type.as_str(), bounce_subtype.as_str()) {
                (
                    "Permanent",
                    "General" | "NoEmail" | "Suppressed" | "OnAccountSuppressionList",
                ) => RecipientPermanent,
                ("Permanent", _) => RecipientPermanent,
                ("Transient", "MailboxFull") => MailboxTemporary,
                ("Transient", "MessageTooLarge" | "ContentRejected" | "AttachmentRejected") => {
                    ContentRejected
                }
                ("Transient", _) => MailboxTemporary,
                _ => Unknown,
            };
            let mut v = Verdict::new(
                class,
                format!("ses.event.bounce.{bounce_type}.{bounce_subtype}"),
                Source::SesEvent,
            );
            // SES's type decides (Permanent: not retried; Transient: retried); the diagnostic
            // only refines a Permanent/General bounce. When its words name a cause other than a
            // dead address (a content or policy block, our sender, a full mailbox, a rate limit),
            // the recipient is not suppressed, and the bounce is still not retried.
            if class == RecipientPermanent
                && matches!(bounce_subtype.as_str(), "General" | "Undetermined")
                && let Some(d) = diagnostic
            {
                let smtp = classify_smtp(d);
                let refines =
                    smtp.rule.starts_with("smtp.text") || smtp.rule.starts_with("smtp.enhanced");
                if refines && !matches!(smtp.class, RecipientPermanent | Unknown) {
                    v = Verdict::new(
                        smtp.class,
                        format!(
                            "ses.event.bounce.{bounce_type}.{bounce_subtype}+{}",
                            smtp.rule
                        ),
                        Source::SesEvent,
                    );
                    v.retryable = false;
                    v.suppress_recipient = false;
                }
            }
            v.with_raw(
                Some(format!("Bounce/{bounce_type}/{bounce_subtype}")),
                diagnostic.clone(),
            )
        }
        SesFailureEvent::Complaint { feedback_type } => {
            let mut v = Verdict::new(ContentRejected, "ses.event.complaint", Source::SesEvent);
            v.suppress_recipient = true;
            v.with_raw(
                Some(format!(
                    "Complaint/{}",
                    feedback_type.as_deref().unwrap_or("unspecified")
                )),
                None,
            )
        }
        SesFailureEvent::DeliveryDelay {
            delay_type,
            diagnostic,
        } => {
            let class = match delay_type.as_str() {
                "InternalFailure" | "BYOIPHostNameLookupUnavailable" => ProviderUnavailable,
                "MailboxFull" | "General" | "RecipientServerError" => MailboxTemporary,
                "SpamDetected" | "IPFailure" => ContentRejected,
                "TransientCommunicationFailure" => Network,
                "SendingDeferral" => Throttled,
                _ => Unknown,
            };
            // A delay is by definition not final: even SpamDetected is retried by SES itself.
            let mut v = Verdict::new(
                class,
                format!("ses.event.delivery_delay.{delay_type}"),
                Source::SesEvent,
            );
            v.retryable = true;
            v.with_raw(
                Some(format!("DeliveryDelay/{delay_type}")),
                diagnostic.clone(),
            )
        }
        SesFailureEvent::Reject { reason } => {
            Verdict::new(ContentRejected, "ses.event.reject", Source::SesEvent)
                .with_raw(Some("Reject".into()), reason.clone())
        }
        SesFailureEvent::RenderingFailure { error } => {
            Verdict::new(Rendering, "ses.event.rendering_failure", Source::SesEvent)
                .with_raw(Some("RenderingFailure".into()), error.clone())
        }
    }
}
