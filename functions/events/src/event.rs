//! SES events as they arrive (raw, through SNS or through EventBridge), parsed into the few
//! fields Courier applies.

use chrono::{DateTime, Utc};
use courier_core::classify::SesFailureEvent;
use courier_core::job::fingerprint;
use courier_core::reputation::domain_of;
use serde_json::Value;

use crate::{HEADER_MESSAGE_ID, HEADER_TRACE_ID, TAG_MESSAGE_ID, TAG_TRACE_ID};

/// An SES event, reduced to what Courier applies.
#[derive(Debug, Clone, PartialEq)]
pub struct SesEvent {
    pub kind: EventKind,
    /// Courier's message id, from the header or the tag.
    pub message_id: Option<String>,
    /// SES's message id.
    pub provider_message_id: Option<String>,
    /// The recipients the event is about (bounced, complained, delayed; all for others).
    pub recipients: Vec<String>,
    /// Every address SES sent the message to (`mail.destination`), whatever the event.
    pub destination: Vec<String>,
    pub at: DateTime<Utc>,
    /// The sending domain (`mail.source`), for the reputation guard.
    pub source_domain: Option<String>,
    /// The event's own timestamp as SES wrote it (`bounce.timestamp`, `deliveryDelay.timestamp`,
    /// ...): tells two delays of one message apart in the timeline.
    pub occurred_at: Option<String>,
    /// The job's trace id, from the `X-Courier-Trace-Id` header or the `courier-trace-id` tag
    /// (which SES restricts to letters, digits and `_-.@`: other characters read as `_`).
    pub trace_id: Option<String>,
}

/// The event kinds Courier acts on.
#[derive(Debug, Clone, PartialEq)]
pub enum EventKind {
    Send,
    Delivery,
    Failure(SesFailureEvent),
    /// Open, Click, Subscription: recorded nowhere, acknowledged.
    Engagement(String),
}

/// Why a message could not be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("not JSON: {0}")]
    Json(String),
    #[error("not an SES event: {0}")]
    Shape(String),
}

fn s(v: &Value, path: &[&str]) -> Option<String> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_str().map(str::to_owned)
}

/// Parses one SQS body: an SNS notification (`Type` + `Message`), an EventBridge event
/// (`detail-type` + `detail`), or a raw SES event (`eventType` / `notificationType`).
pub fn parse(body: &str) -> Result<SesEvent, ParseError> {
    parse_value(serde_json::from_str(body).map_err(|e| ParseError::Json(e.to_string()))?)
}

/// [`parse`], of a body already read as JSON.
pub fn parse_value(outer: Value) -> Result<SesEvent, ParseError> {
    let event: Value = if outer.get("Type").and_then(Value::as_str) == Some("Notification") {
        let message = outer
            .get("Message")
            .and_then(Value::as_str)
            .ok_or_else(|| ParseError::Shape("SNS notification without Message".into()))?;
        serde_json::from_str(message).map_err(|e| ParseError::Json(format!("SNS Message: {e}")))?
    } else if outer.get("detail-type").is_some() {
        outer
            .get("detail")
            .cloned()
            .ok_or_else(|| ParseError::Shape("EventBridge event without detail".into()))?
    } else {
        outer
    };
    let kind_name = s(&event, &["eventType"])
        .or_else(|| s(&event, &["notificationType"]))
        .ok_or_else(|| ParseError::Shape("no eventType".into()))?;
    let mail = event
        .get("mail")
        .ok_or_else(|| ParseError::Shape("no mail object".into()))?;
    let header = |name: &str| {
        mail.get("headers")
            .and_then(Value::as_array)
            .and_then(|headers| {
                headers.iter().find_map(|h| {
                    (s(h, &["name"])?.eq_ignore_ascii_case(name))
                        .then(|| s(h, &["value"]))
                        .flatten()
                })
            })
    };
    let tag = |name: &str| {
        mail.get("tags")
            .and_then(|t| t.get(name))
            .and_then(Value::as_array)
            .and_then(|v| v.first())
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let header_id = header(HEADER_MESSAGE_ID);
    let tag_id = tag(TAG_MESSAGE_ID);
    let trace_id = header(HEADER_TRACE_ID).or_else(|| tag(TAG_TRACE_ID));
    let addresses = |list: Option<&Value>, key: &str| -> Vec<String> {
        list.and_then(Value::as_array)
            .map(|l| {
                l.iter()
                    .filter_map(|r| s(r, &[key]).or_else(|| r.as_str().map(str::to_owned)))
                    .collect()
            })
            .unwrap_or_default()
    };
    let destination = addresses(mail.get("destination"), "emailAddress");
    let at = s(mail, &["timestamp"])
        .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
        .map_or_else(Utc::now, |t| t.with_timezone(&Utc));
    let (kind, recipients) = match kind_name.as_str() {
        "Send" => (EventKind::Send, destination.clone()),
        "Delivery" => (
            EventKind::Delivery,
            addresses(
                event.get("delivery").and_then(|d| d.get("recipients")),
                "emailAddress",
            ),
        ),
        "Bounce" => {
            let b = event
                .get("bounce")
                .ok_or_else(|| ParseError::Shape("Bounce without bounce".into()))?;
            let recipients = addresses(b.get("bouncedRecipients"), "emailAddress");
            let diagnostic = b
                .get("bouncedRecipients")
                .and_then(Value::as_array)
                .and_then(|l| l.first())
                .and_then(|r| s(r, &["diagnosticCode"]));
            (
                EventKind::Failure(SesFailureEvent::Bounce {
                    bounce_type: s(b, &["bounceType"]).unwrap_or_else(|| "Undetermined".into()),
                    bounce_subtype: s(b, &["bounceSubType"])
                        .unwrap_or_else(|| "Undetermined".into()),
                    diagnostic,
                }),
                recipients,
            )
        }
        "Complaint" => {
            let c = event
                .get("complaint")
                .ok_or_else(|| ParseError::Shape("Complaint without complaint".into()))?;
            (
                EventKind::Failure(SesFailureEvent::Complaint {
                    feedback_type: s(c, &["complaintFeedbackType"]),
                }),
                addresses(c.get("complainedRecipients"), "emailAddress"),
            )
        }
        "DeliveryDelay" => {
            let d = event
                .get("deliveryDelay")
                .ok_or_else(|| ParseError::Shape("DeliveryDelay without deliveryDelay".into()))?;
            let diagnostic = d
                .get("delayedRecipients")
                .and_then(Value::as_array)
                .and_then(|l| l.first())
                .and_then(|r| s(r, &["diagnosticCode"]));
            (
                EventKind::Failure(SesFailureEvent::DeliveryDelay {
                    delay_type: s(d, &["delayType"]).unwrap_or_else(|| "Undetermined".into()),
                    diagnostic,
                }),
                addresses(d.get("delayedRecipients"), "emailAddress"),
            )
        }
        "Reject" => (
            EventKind::Failure(SesFailureEvent::Reject {
                reason: s(&event, &["reject", "reason"]),
            }),
            destination.clone(),
        ),
        "Rendering Failure" | "RenderingFailure" => (
            EventKind::Failure(SesFailureEvent::RenderingFailure {
                error: s(&event, &["failure", "errorMessage"]),
            }),
            destination.clone(),
        ),
        other @ ("Open" | "Click" | "Subscription") => {
            (EventKind::Engagement(other.to_owned()), destination.clone())
        }
        other => return Err(ParseError::Shape(format!("unknown eventType {other:?}"))),
    };
    let occurred_at = [
        "delivery",
        "bounce",
        "complaint",
        "deliveryDelay",
        "reject",
        "failure",
    ]
    .iter()
    .find_map(|k| s(&event, &[k, "timestamp"]));
    Ok(SesEvent {
        kind,
        message_id: header_id.or(tag_id),
        provider_message_id: s(mail, &["messageId"]),
        recipients,
        destination,
        at,
        source_domain: s(mail, &["source"]).and_then(|a| domain_of(&a)),
        occurred_at,
        trace_id,
    })
}

/// The ledger key of an event that counts toward the reputation rates (a send, a delivery, a
/// permanent bounce, a complaint): SES's message id, the kind and the recipients, so an SNS or
/// SQS redelivery, or SES publishing the same event twice, counts once. `None` for other kinds
/// and for events without an SES message id (counted as they come).
pub fn count_key(event: &SesEvent) -> Option<String> {
    let kind = match &event.kind {
        EventKind::Send => "send",
        EventKind::Delivery => "delivery",
        EventKind::Failure(SesFailureEvent::Bounce { bounce_type, .. })
            if bounce_type == "Permanent" =>
        {
            "bounce"
        }
        EventKind::Failure(SesFailureEvent::Complaint { .. }) => "complaint",
        _ => return None,
    };
    let provider_message_id = event.provider_message_id.as_deref()?;
    let mut recipients: Vec<String> = event
        .recipients
        .iter()
        .map(|r| courier_core::mailbox::address_key(r))
        .collect();
    recipients.sort();
    recipients.dedup();
    let what = format!("{kind}\n{}", recipients.join("\n"));
    // Bounded length whatever the recipients (a key is at most 2 KB in DynamoDB).
    Some(format!(
        "{provider_message_id}#{kind}#{}",
        &fingerprint(what.as_bytes())[..32]
    ))
}
