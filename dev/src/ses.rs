//! A stand-in for SES's event destination (the demo's and the chaos suite's). Emulators accept
//! `SendEmail` but never publish events, so this does what SES, the configuration set's event destination and SNS do on AWS: for
//! every message SES accepted it publishes the events SES would, as SNS notifications (the
//! envelope SNS delivers to an SQS subscription without raw message delivery, as the template's
//! `SesEventsSubscription` is) on the stack's events queue, where the events function's real
//! handler picks them up.
//!
//! What SES knows comes from where SES learns it: [`SesAcceptLog`] wraps the send function's SES
//! mailer (the demo's; the chaos suite reads moto's own state instead) and notes every message the emulator's SES v2 accepted (sender, recipients, subject, the
//! `X-Courier-Message-Id` / `X-Courier-Campaign-Id` headers and the `courier-message-id` /
//! `courier-campaign-id` tags [`SesMailer`](courier_adapters::aws::SesMailer) sets, and SES's message id),
//! whether or not the send function then managed to record the send: SES publishes for what it
//! accepted, which is how its events resolve a job left `unknown`.
//!
//! The outcome is decided by the recipient's local part before a `+` ([`Script::of`]):
//! `bounce+…` (and SES's mailbox simulator's `suppressionlist+…`) a permanent bounce,
//! `complaint+…` a delivery then a complaint, `softbounce+…` a
//! transient bounce of the first send (later sends are delivered), `delay+…` a delivery delay
//! then the delivery; any other address is delivered. Events are published with short SQS delays
//! (the `Send` event after a second, outcomes after it, complaints later still), as SES reports
//! them after the send.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use chrono::{DateTime, SecondsFormat, Utc};
use courier_adapters::aws::ses::{TAG_CAMPAIGN_ID, TAG_MESSAGE_ID, tag_value};
use courier_core::ports::{Mailer, OutgoingEmail, Receipt, SendFailure, StoreError};
use courier_core::random::SeededRandom;
use courier_core::status::Status;
use serde_json::{Value, json};

/// What SES does with a message, decided by its recipient.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Script {
    Deliver,
    Bounce,
    Complaint,
    SoftBounce,
    Delay,
}

impl Script {
    /// The script of a recipient address, by its local part before `+` (case-insensitive).
    pub fn of(address: &str) -> Script {
        let local = address.rsplit_once('@').map_or(address, |(l, _)| l);
        let tag = local.split_once('+').map_or(local, |(t, _)| t);
        match tag.to_ascii_lowercase().as_str() {
            // SES's mailbox simulator: `suppressionlist@` bounces as a suppressed address;
            // `success@` and `ooto@` are delivered (the default).
            "bounce" | "suppressionlist" => Script::Bounce,
            "complaint" => Script::Complaint,
            "softbounce" => Script::SoftBounce,
            "delay" => Script::Delay,
            _ => Script::Deliver,
        }
    }

    /// The status a job sent through SES under this script ends in.
    pub fn end(self) -> Status {
        match self {
            Script::Bounce => Status::BouncedPermanent,
            Script::Complaint => Status::Complained,
            Script::Deliver | Script::SoftBounce | Script::Delay => Status::Delivered,
        }
    }

    /// The events SES publishes for one send (`first`: the job's first send through SES):
    /// (eventType, the name of the event's own object, that object).
    fn events(
        self,
        first: bool,
        recipient: &str,
        at: DateTime<Utc>,
    ) -> Vec<(&'static str, &'static str, Value)> {
        let ts = |secs: i64| {
            (at + chrono::Duration::seconds(secs)).to_rfc3339_opts(SecondsFormat::Millis, true)
        };
        let send = ("Send", "send", json!({}));
        let delivery = (
            "Delivery",
            "delivery",
            json!({
                "timestamp": ts(1),
                "processingTimeMillis": 1042,
                "recipients": [recipient],
                "smtpResponse": "250 2.0.0 OK",
                "reportingMTA": "a8-70.smtp-out.amazonses.com"
            }),
        );
        match self {
            Script::Deliver => vec![send, delivery],
            Script::SoftBounce if !first => vec![send, delivery],
            Script::SoftBounce => vec![
                send,
                (
                    "Bounce",
                    "bounce",
                    json!({
                        "bounceType": "Transient",
                        "bounceSubType": "MailboxFull",
                        "bouncedRecipients": [{
                            "emailAddress": recipient,
                            "action": "failed",
                            "status": "4.2.2",
                            "diagnosticCode": "smtp; 452 4.2.2 The email account that you tried to reach is over quota."
                        }],
                        "timestamp": ts(2),
                        "feedbackId": feedback_id(at, recipient),
                        "reportingMTA": "dsn; a8-70.smtp-out.amazonses.com"
                    }),
                ),
            ],
            Script::Bounce => vec![
                send,
                (
                    "Bounce",
                    "bounce",
                    json!({
                        "bounceType": "Permanent",
                        "bounceSubType": "General",
                        "bouncedRecipients": [{
                            "emailAddress": recipient,
                            "action": "failed",
                            "status": "5.1.1",
                            "diagnosticCode": format!("smtp; 550 5.1.1 <{recipient}>: Recipient address rejected: User unknown")
                        }],
                        "timestamp": ts(2),
                        "feedbackId": feedback_id(at, recipient),
                        "reportingMTA": "dsn; a8-70.smtp-out.amazonses.com"
                    }),
                ),
            ],
            Script::Complaint => vec![
                send,
                delivery,
                (
                    "Complaint",
                    "complaint",
                    json!({
                        "feedbackId": feedback_id(at, recipient),
                        "complaintSubType": null,
                        "complainedRecipients": [{"emailAddress": recipient}],
                        "timestamp": ts(3),
                        "userAgent": "Yahoo!-Mail-Feedback/2.0",
                        "complaintFeedbackType": "abuse",
                        "arrivalDate": ts(2)
                    }),
                ),
            ],
            Script::Delay => vec![
                send,
                (
                    "DeliveryDelay",
                    "deliveryDelay",
                    json!({
                        "timestamp": ts(1),
                        "delayType": "TransientCommunicationFailure",
                        "expirationTime": ts(24 * 3600),
                        "delayedRecipients": [{
                            "emailAddress": recipient,
                            "status": "4.4.1",
                            "diagnosticCode": "smtp; 421 4.4.1 Unable to connect to remote host"
                        }]
                    }),
                ),
                delivery,
            ],
        }
    }
}

/// The SQS delay of an event: SES reports outcomes after the send, complaints later still, and a
/// delivery after a delivery delay later than the delay.
fn delay_of(script: Script, event_type: &str) -> i32 {
    match (script, event_type) {
        (_, "Send") => 1,
        (Script::Delay, "Delivery") => 5,
        (_, "Complaint") => 4,
        _ => 2,
    }
}

fn feedback_id(at: DateTime<Utc>, recipient: &str) -> String {
    let digest = courier_core::job::fingerprint(format!("{at}{recipient}").as_bytes());
    format!("0100{}-000000", &digest[..28])
}

/// Where the demo publishes and how it names itself (the account and region SES would report).
#[derive(Debug, Clone)]
pub struct Destination {
    pub events_queue_url: String,
    pub topic_arn: String,
    pub configuration_set: String,
    pub region: String,
    pub account: String,
}

/// The message SES accepted, as SES describes it in every event's `mail` object.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub message_id: String,
    pub campaign_id: String,
    pub provider_message_id: String,
    pub from: String,
    pub to: Vec<String>,
    pub subject: String,
    pub at: DateTime<Utc>,
}

impl Accepted {
    pub fn new(email: &OutgoingEmail, receipt: &Receipt, at: DateTime<Utc>) -> Accepted {
        Accepted {
            message_id: email.message_id.clone(),
            campaign_id: email.campaign_id.clone(),
            provider_message_id: receipt.provider_message_id.clone(),
            from: email.from.to_string(),
            to: email
                .to
                .iter()
                .chain(&email.cc)
                .chain(&email.bcc)
                .map(|m| m.email.to_string())
                .collect(),
            subject: email.subject.clone(),
            at,
        }
    }

    /// A message as moto's SES holds it ([`courier_devkit::moto::ses_raw_messages`]), read from
    /// its raw MIME: `None` when it carries no `X-Courier-Message-Id` (not Courier's).
    pub fn from_raw(
        raw: &courier_devkit::moto::SesRawMessage,
        at: DateTime<Utc>,
    ) -> Option<Accepted> {
        let header = |name: &str| courier_devkit::mime::header(&raw.raw_data, name);
        Some(Accepted {
            message_id: header("X-Courier-Message-Id")?,
            campaign_id: header("X-Courier-Campaign-Id").unwrap_or_default(),
            provider_message_id: raw.id.clone(),
            from: raw.source.clone(),
            to: raw.destinations.clone(),
            subject: header("Subject").unwrap_or_default(),
            at,
        })
    }

    /// The `mail` object of SES's events.
    fn mail(&self, destination: &Destination) -> Value {
        let domain = courier_core::reputation::domain_of(&self.from).unwrap_or_default();
        let to = self.to.join(", ");
        json!({
            "timestamp": self.at.to_rfc3339_opts(SecondsFormat::Millis, true),
            "source": self.from,
            "sourceArn": format!("arn:aws:ses:{}:{}:identity/{domain}", destination.region, destination.account),
            "sendingAccountId": destination.account,
            "messageId": self.provider_message_id,
            "destination": self.to,
            "headersTruncated": false,
            "headers": [
                {"name": "From", "value": self.from},
                {"name": "To", "value": to},
                {"name": "Subject", "value": self.subject},
                {"name": "X-Courier-Message-Id", "value": self.message_id},
                {"name": "X-Courier-Campaign-Id", "value": self.campaign_id}
            ],
            "commonHeaders": {"from": [self.from], "to": self.to, "subject": self.subject},
            "tags": {
                "ses:configuration-set": [destination.configuration_set],
                "ses:source-ip": ["192.0.2.10"],
                "ses:from-domain": [domain],
                "ses:caller-identity": ["courier-send"],
                TAG_MESSAGE_ID: [tag_value(&self.message_id)],
                TAG_CAMPAIGN_ID: [tag_value(&self.campaign_id)]
            }
        })
    }
}

/// SNS's notification envelope around one message, as delivered to an SQS subscription.
/// The demo holds no SNS key: `Signature` is the message's SHA-256 (nothing on the SQS side
/// verifies SNS signatures; the queue policy admits only the topic).
fn sns_notification(topic_arn: &str, region: &str, id: &str, message: &Value) -> Value {
    let message = message.to_string();
    json!({
        "Type": "Notification",
        "MessageId": id,
        "TopicArn": topic_arn,
        "Message": message,
        "Timestamp": Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true),
        "SignatureVersion": "1",
        "Signature": courier_core::job::fingerprint(message.as_bytes()),
        "SigningCertURL": format!("https://sns.{region}.amazonaws.com/SimpleNotificationService-0000000000000000000000.pem"),
        "UnsubscribeURL": format!("https://sns.{region}.amazonaws.com/?Action=Unsubscribe&SubscriptionArn={topic_arn}:demo")
    })
}

/// The events SES would publish for one accepted message: (the event as the report counts it,
/// SNS envelope, delay). One `Send` for the message, then each recipient's events as its own
/// script says (a message to several recipients gets an outcome per recipient).
pub fn notifications(
    accepted: &Accepted,
    destination: &Destination,
    first: bool,
    rng: &mut SeededRandom,
) -> Vec<(String, Value, i32)> {
    let mail = accepted.mail(destination);
    let mut events: Vec<(Script, &'static str, &'static str, Value)> = Vec::new();
    for (i, recipient) in accepted.to.iter().enumerate() {
        let script = Script::of(recipient);
        for (event_type, key, detail) in script.events(first, recipient, accepted.at) {
            if event_type != "Send" || i == 0 {
                events.push((script, event_type, key, detail));
            }
        }
    }
    events
        .into_iter()
        .map(|(script, event_type, key, detail)| {
            let mut event = json!({"eventType": event_type, "mail": mail});
            event[key] = detail;
            let (a, b) = (rng.next_u64(), rng.next_u64());
            let id = format!(
                "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
                a >> 32,
                (a >> 16) & 0xffff,
                a & 0xfff,
                (b >> 48) & 0x3fff | 0x8000,
                b & 0xffff_ffff_ffff
            );
            let counted = match (event_type, script) {
                ("Bounce", Script::SoftBounce) => "Bounce (Transient)".to_owned(),
                ("Bounce", _) => "Bounce (Permanent)".to_owned(),
                (other, _) => other.to_owned(),
            };
            (
                counted,
                sns_notification(&destination.topic_arn, &destination.region, &id, &event),
                delay_of(script, event_type),
            )
        })
        .collect()
}

/// SES's own record of what it accepted: wraps the SES mailer the send function uses.
pub struct SesAcceptLog {
    inner: Arc<dyn Mailer>,
    accepted: Arc<Mutex<Vec<Accepted>>>,
}

impl SesAcceptLog {
    /// Wraps `inner`; what it accepts is appended to `accepted`.
    pub fn new(inner: Arc<dyn Mailer>, accepted: Arc<Mutex<Vec<Accepted>>>) -> Self {
        SesAcceptLog { inner, accepted }
    }
}

#[async_trait::async_trait]
impl Mailer for SesAcceptLog {
    fn provider(&self) -> courier_core::ports::Provider {
        self.inner.provider()
    }

    async fn send(&self, email: &OutgoingEmail) -> Result<Receipt, SendFailure> {
        let receipt = self.inner.send(email).await?;
        let accepted = Accepted::new(email, &receipt, Utc::now());
        self.accepted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(accepted);
        Ok(receipt)
    }
}

/// The publisher: publishes the events of every message SES accepted since its last round.
pub struct EventPublisher {
    pub sqs: aws_sdk_sqs::Client,
    pub destination: Destination,
    accepted: Arc<Mutex<Vec<Accepted>>>,
    /// Jobs sent through SES before (a transient bounce hits only the first send).
    seen: BTreeSet<String>,
    rng: SeededRandom,
}

/// What one round published.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Published {
    /// Events per `eventType` (a bounce counted as `Bounce (Permanent)` or `Bounce (Transient)`).
    pub events: BTreeMap<String, u64>,
    /// Recipients of permanent bounces and complaints (to be suppressed by the events function).
    pub to_suppress: Vec<String>,
}

impl EventPublisher {
    pub fn new(
        sqs: aws_sdk_sqs::Client,
        destination: Destination,
        accepted: Arc<Mutex<Vec<Accepted>>>,
    ) -> EventPublisher {
        EventPublisher {
            sqs,
            destination,
            accepted,
            seen: BTreeSet::new(),
            rng: courier_adapters::clock::seeded_from_entropy(),
        }
    }

    /// The log the publisher reads its next round from (what SES accepted).
    pub fn accepted(&self) -> Arc<Mutex<Vec<Accepted>>> {
        Arc::clone(&self.accepted)
    }

    /// One round: the events of every message accepted since the last round. A message whose
    /// events could not be published stays for the next round.
    pub async fn publish_new(&mut self) -> Result<Published, StoreError> {
        let mut out = Published::default();
        let batch: Vec<Accepted> = std::mem::take(
            &mut *self
                .accepted
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let mut rest = batch.into_iter();
        while let Some(accepted) = rest.next() {
            if let Err(e) = self.publish(&accepted, &mut out).await {
                let mut log = self
                    .accepted
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                log.push(accepted);
                log.extend(rest);
                return Err(e);
            }
        }
        Ok(out)
    }

    async fn publish(
        &mut self,
        accepted: &Accepted,
        out: &mut Published,
    ) -> Result<(), StoreError> {
        let first = !self.seen.contains(&accepted.message_id);
        let notes = notifications(accepted, &self.destination, first, &mut self.rng);
        let mut request = self
            .sqs
            .send_message_batch()
            .queue_url(&self.destination.events_queue_url);
        for (i, (_, body, delay)) in notes.iter().enumerate() {
            let entry = SendMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .message_body(body.to_string())
                .delay_seconds(*delay)
                .build()
                .map_err(|e| StoreError::new("publish ses events", e))?;
            request = request.entries(entry);
        }
        let sent = request
            .send()
            .await
            .map_err(courier_adapters::aws::store_error("publish ses events"))?;
        if !sent.failed.is_empty() {
            return Err(StoreError::msg(
                "publish ses events",
                format!(
                    "{} of {} events not accepted",
                    sent.failed.len(),
                    notes.len()
                ),
            ));
        }
        self.seen.insert(accepted.message_id.clone());
        for (counted, _, _) in &notes {
            *out.events.entry(counted.clone()).or_default() += 1;
        }
        if first {
            out.to_suppress.extend(
                accepted
                    .to
                    .iter()
                    .filter(|r| matches!(Script::of(r), Script::Bounce | Script::Complaint))
                    .cloned(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use super::*;
    use courier_events::{EventKind, parse};

    fn destination() -> Destination {
        Destination {
            events_queue_url: "http://localhost/q".into(),
            topic_arn: "arn:aws:sns:us-east-1:123456789012:demo-ses-events".into(),
            configuration_set: "demo".into(),
            region: "us-east-1".into(),
            account: "123456789012".into(),
        }
    }

    #[test]
    fn a_message_moto_kept_is_read_from_its_raw_mime() {
        let at = Utc::now();
        let raw = courier_devkit::moto::SesRawMessage {
            id: "ses-7".into(),
            source: "demo@courier.test".into(),
            destinations: vec!["reader7@courier.test".into()],
            raw_data: "From: demo@courier.test\r\nSubject: Your winter order\r\n is on its way\r\n\
                X-Courier-Message-Id: demo-00007\r\nX-Courier-Campaign-Id: winter-sale\r\n\r\n\
                X-Courier-Message-Id: not-this-one\r\n"
                .into(),
        };
        let a = Accepted::from_raw(&raw, at).unwrap();
        assert_eq!(
            (
                a.message_id.as_str(),
                a.campaign_id.as_str(),
                a.subject.as_str()
            ),
            (
                "demo-00007",
                "winter-sale",
                "Your winter order is on its way"
            )
        );
        assert_eq!(
            (
                a.provider_message_id.as_str(),
                a.from.as_str(),
                a.to.clone(),
                a.at
            ),
            (
                "ses-7",
                "demo@courier.test",
                vec!["reader7@courier.test".to_owned()],
                at
            )
        );
        // A message without Courier's id is not Courier's.
        let foreign = courier_devkit::moto::SesRawMessage {
            raw_data: "Subject: hello\r\n\r\nX-Courier-Message-Id: in-the-body\r\n".into(),
            ..raw
        };
        assert!(Accepted::from_raw(&foreign, at).is_none());
    }

    fn accepted(to: &[&str]) -> Accepted {
        Accepted {
            message_id: "demo-00036".into(),
            campaign_id: "winter-sale".into(),
            provider_message_id: "ses-36".into(),
            from: "Courier Demo <demo@courier.test>".into(),
            to: to.iter().map(|a| (*a).to_owned()).collect(),
            subject: "Welcome, Reader 36".into(),
            at: Utc::now(),
        }
    }

    #[test]
    fn scripts_are_chosen_by_the_local_part() {
        assert_eq!(Script::of("bounce+36@courier.test"), Script::Bounce);
        assert_eq!(Script::of("Complaint+39@courier.test"), Script::Complaint);
        assert_eq!(Script::of("softbounce+37@courier.test"), Script::SoftBounce);
        assert_eq!(Script::of("delay@courier.test"), Script::Delay);
        assert_eq!(Script::of("reader31@courier.test"), Script::Deliver);
        assert_eq!(Script::of("bouncer@courier.test"), Script::Deliver);
        // SES's mailbox simulator, as `courierctl smoke` labels its addresses.
        for (local, script) in [
            ("success", Script::Deliver),
            ("bounce", Script::Bounce),
            ("ooto", Script::Deliver),
            ("complaint", Script::Complaint),
            ("suppressionlist", Script::Bounce),
        ] {
            let address = format!("{local}+r1@simulator.amazonses.com");
            assert_eq!(Script::of(&address), script, "{address}");
        }
    }

    fn kinds(to: &str, first: bool) -> Vec<EventKind> {
        let mut rng = SeededRandom::new(7);
        notifications(&accepted(&[to]), &destination(), first, &mut rng)
            .into_iter()
            .map(|(_, body, _)| {
                // GIVEN the SNS envelope the demo publishes
                // THEN the events function's parser reads it, correlated by our header and tag
                let event = parse(&body.to_string()).expect("parses");
                assert_eq!(event.message_id.as_deref(), Some("demo-00036"));
                assert_eq!(event.provider_message_id.as_deref(), Some("ses-36"));
                assert_eq!(event.source_domain.as_deref(), Some("courier.test"));
                assert_eq!(event.recipients, vec![to.to_owned()]);
                event.kind
            })
            .collect()
    }

    #[test]
    fn every_script_publishes_events_the_events_function_parses() {
        use courier_core::classify::SesFailureEvent as F;
        let k = kinds("reader30@courier.test", true);
        assert_eq!(k, vec![EventKind::Send, EventKind::Delivery]);
        let k = kinds("bounce+36@courier.test", true);
        assert!(
            matches!(&k[1], EventKind::Failure(F::Bounce { bounce_type, .. }) if bounce_type == "Permanent")
        );
        let k = kinds("softbounce+37@courier.test", true);
        assert!(
            matches!(&k[1], EventKind::Failure(F::Bounce { bounce_type, .. }) if bounce_type == "Transient")
        );
        // A resend of the soft-bounced job is delivered.
        assert_eq!(
            kinds("softbounce+37@courier.test", false),
            vec![EventKind::Send, EventKind::Delivery]
        );
        let k = kinds("delay+38@courier.test", true);
        assert!(matches!(&k[1], EventKind::Failure(F::DeliveryDelay { .. })));
        assert_eq!(k[2], EventKind::Delivery);
        let k = kinds("complaint+39@courier.test", true);
        assert_eq!(k[1], EventKind::Delivery);
        assert!(matches!(&k[2], EventKind::Failure(F::Complaint { .. })));
    }

    #[test]
    fn a_message_to_several_recipients_gets_one_send_and_each_recipient_its_outcome() {
        use courier_core::classify::SesFailureEvent as F;
        let mut rng = SeededRandom::new(7);
        let to = [
            "reader35@courier.test",
            "bounce+35@courier.test",
            "complaint+35@courier.test",
        ];
        let events: Vec<(String, courier_events::SesEvent)> =
            notifications(&accepted(&to), &destination(), true, &mut rng)
                .into_iter()
                .map(|(counted, body, _)| (counted, parse(&body.to_string()).expect("parses")))
                .collect();
        let seen: Vec<(&str, Vec<String>)> = events
            .iter()
            .map(|(counted, e)| (counted.as_str(), e.recipients.clone()))
            .collect();
        let one = |a: &str| vec![a.to_owned()];
        assert_eq!(
            seen,
            vec![
                ("Send", to.iter().map(|a| (*a).to_owned()).collect()),
                ("Delivery", one(to[0])),
                ("Bounce (Permanent)", one(to[1])),
                ("Delivery", one(to[2])),
                ("Complaint", one(to[2])),
            ]
        );
        assert!(matches!(
            &events[2].1.kind,
            EventKind::Failure(F::Bounce { bounce_type, .. }) if bounce_type == "Permanent"
        ));
    }

    #[test]
    fn outcomes_follow_the_send() {
        assert!(delay_of(Script::Bounce, "Bounce") > delay_of(Script::Bounce, "Send"));
        assert!(delay_of(Script::Delay, "Delivery") > delay_of(Script::Delay, "DeliveryDelay"));
        assert!(delay_of(Script::Complaint, "Complaint") > delay_of(Script::Complaint, "Delivery"));
    }
}
