//! The events function: applies SES delivery events to Courier's status records.
//!
//! SES publishes events (configuration set event destination) to SNS or EventBridge, which
//! deliver them to an SQS queue that triggers this function. Each event is correlated with its
//! job by the `X-Courier-Message-Id` header Courier set (exact), else the `courier-message-id`
//! tag, and applied through the status machine: forward only, duplicates and late events
//! absorbed. An event that is ahead of the record (it arrived before the send was recorded) is
//! left on the queue and applied on a later delivery. Permanent bounces and complaints add the
//! recipients to the suppression list. A SEND or DELIVERY event resolves an ambiguous (`unknown`)
//! job as sent, so it is not sent again after its grace window.
//!
//! # Layout
//! - [`parse`]: SNS notifications, EventBridge events and raw SES events into [`SesEvent`]s.
//! - [`Applier::handle`]: one SQS batch, partial batch failures for events not yet applicable.

use std::sync::Arc;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use chrono::{DateTime, Utc};
use courier::classify::{SesFailureEvent, classify_ses_event};
use courier::ports::{Clock, StatusStore, StatusUpdate, StoreError, SuppressionList};
use courier::status::{Status, Transition, transition};
use serde_json::Value;
use tracing::{info, warn};

/// Header and tag names set by the send function.
pub const HEADER_MESSAGE_ID: &str = "X-Courier-Message-Id";
pub const TAG_MESSAGE_ID: &str = "courier-message-id";

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
    pub at: DateTime<Utc>,
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
    let outer: Value = serde_json::from_str(body).map_err(|e| ParseError::Json(e.to_string()))?;
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
    let header_id = mail
        .get("headers")
        .and_then(Value::as_array)
        .and_then(|headers| {
            headers.iter().find_map(|h| {
                (s(h, &["name"])?.eq_ignore_ascii_case(HEADER_MESSAGE_ID))
                    .then(|| s(h, &["value"]))
                    .flatten()
            })
        });
    let tag_id = mail
        .get("tags")
        .and_then(|t| t.get(TAG_MESSAGE_ID))
        .and_then(Value::as_array)
        .and_then(|v| v.first())
        .and_then(Value::as_str)
        .map(str::to_owned);
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
        "Send" => (EventKind::Send, destination),
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
            destination,
        ),
        "Rendering Failure" | "RenderingFailure" => (
            EventKind::Failure(SesFailureEvent::RenderingFailure {
                error: s(&event, &["failure", "errorMessage"]),
            }),
            destination,
        ),
        other @ ("Open" | "Click" | "Subscription") => {
            (EventKind::Engagement(other.to_owned()), destination)
        }
        other => return Err(ParseError::Shape(format!("unknown eventType {other:?}"))),
    };
    Ok(SesEvent {
        kind,
        message_id: header_id.or(tag_id),
        provider_message_id: s(mail, &["messageId"]),
        recipients,
        at,
    })
}

/// The status an event moves a job to, if any.
pub fn target(kind: &EventKind) -> Option<Status> {
    match kind {
        EventKind::Send => Some(Status::SentToProvider),
        EventKind::Delivery => Some(Status::Delivered),
        EventKind::Failure(SesFailureEvent::Bounce { bounce_type, .. })
            if bounce_type == "Permanent" =>
        {
            Some(Status::BouncedPermanent)
        }
        EventKind::Failure(SesFailureEvent::Bounce { bounce_type, .. })
            if bounce_type == "Transient" =>
        {
            Some(Status::BouncedTransient)
        }
        EventKind::Failure(SesFailureEvent::Complaint { .. }) => Some(Status::Complained),
        // SES rejected it (virus) or could not render it: never delivered.
        EventKind::Failure(
            SesFailureEvent::Reject { .. } | SesFailureEvent::RenderingFailure { .. },
        ) => Some(Status::BouncedPermanent),
        // Delays and undetermined bounces change nothing yet; engagement is not tracked.
        _ => None,
    }
}

/// What applying one event did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    Changed(Status),
    Absorbed,
    /// The record is behind the event (or absent): try again later.
    NotYet,
    /// No job to correlate with (not sent by Courier, or without our header and tag).
    Uncorrelated,
}

/// Applies events to status records and the suppression list.
pub struct Applier {
    pub status: Arc<dyn StatusStore>,
    pub suppression: Arc<dyn SuppressionList>,
    pub clock: Arc<dyn Clock>,
}

/// The outcome of one batch.
#[derive(Debug, Default)]
pub struct EventsReport {
    pub failures: Vec<String>,
    pub applied: Vec<Applied>,
    pub unparseable: usize,
}

impl Applier {
    /// Applies one event.
    pub async fn apply(&self, event: &SesEvent) -> Result<Applied, StoreError> {
        let Some(message_id) = &event.message_id else {
            return Ok(Applied::Uncorrelated);
        };
        if let EventKind::Failure(failure) = &event.kind {
            let verdict = classify_ses_event(failure);
            if verdict.suppress_recipient {
                for r in &event.recipients {
                    self.suppression
                        .suppress(
                            r,
                            &format!(
                                "{}: {}",
                                verdict.rule,
                                verdict.raw_code.as_deref().unwrap_or("")
                            ),
                            self.clock.now(),
                        )
                        .await?;
                }
            }
        }
        let Some(to) = target(&event.kind) else {
            return Ok(Applied::Absorbed);
        };
        let Some(record) = self.status.get(message_id).await? else {
            return Ok(Applied::NotYet);
        };
        match transition(record.status, to) {
            Ok(Transition::Applied) => {
                let update = StatusUpdate {
                    message_id: message_id.clone(),
                    owner: "events".into(),
                    status: to,
                    attempt: record.attempt,
                    provider: Some("ses".into()),
                    provider_message_id: event.provider_message_id.clone(),
                    now: self.clock.now(),
                };
                self.status.record(&update).await?;
                // `record` absorbs a write the status moved past meanwhile; check it landed.
                let now = self.status.get(message_id).await?.map(|r| r.status);
                Ok(match now {
                    Some(s) if s == to => Applied::Changed(to),
                    Some(s) if transition(s, to).is_ok_and(|t| t != Transition::Applied) => {
                        Applied::Absorbed
                    }
                    _ => Applied::NotYet,
                })
            }
            Ok(Transition::Duplicate | Transition::Late) => Ok(Applied::Absorbed),
            // The event is ahead of the record (e.g. DELIVERY while the send is still being
            // recorded): apply it later.
            Err(_) => Ok(Applied::NotYet),
        }
    }

    /// One SQS batch: unparseable messages are logged and acknowledged (they are not ours to
    /// fix); events not yet applicable and store failures are reported for redelivery.
    pub async fn handle(&self, event: SqsEvent) -> EventsReport {
        let mut report = EventsReport::default();
        for record in event.records {
            let id = record.message_id.unwrap_or_default();
            let body = record.body.unwrap_or_default();
            let parsed = match parse(&body) {
                Ok(e) => e,
                Err(e) => {
                    warn!(sqs_message_id = %id, error = %e, "not an SES event; acknowledged");
                    report.unparseable += 1;
                    continue;
                }
            };
            match self.apply(&parsed).await {
                Ok(Applied::NotYet) => {
                    info!(sqs_message_id = %id, message_id = ?parsed.message_id, "event ahead of its record; retried later");
                    report.applied.push(Applied::NotYet);
                    report.failures.push(id);
                }
                Ok(applied) => report.applied.push(applied),
                Err(e) => {
                    warn!(sqs_message_id = %id, error = %e, "event not applied; retried later");
                    report.failures.push(id);
                }
            }
        }
        report
    }
}

impl EventsReport {
    pub fn response(&self) -> SqsBatchResponse {
        let mut response = SqsBatchResponse::default();
        for id in &self.failures {
            response.add_failure(id.clone());
        }
        response
    }
}

/// The Lambda handler.
pub async fn function_handler(
    applier: &Arc<Applier>,
    event: lambda_runtime::LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, lambda_runtime::Error> {
    Ok(applier.handle(event.payload).await.response())
}

#[cfg(test)]
mod tests;
