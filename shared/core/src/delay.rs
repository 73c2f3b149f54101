//! How a copy waits before it is back on a queue (the retry queue, or the send queue without
//! one), decided in one place
//! ([`mechanism`]), and the delay state machine that waits longer than SQS's 900 s
//! `DelaySeconds` limit, then sends the message back to the queue. The same definition is
//! deployed by `infra/template.yaml` and created by the integration tests.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::envelope::ENVELOPE_KEY;
use crate::limits::SFN_MAX_INPUT_BYTES;
use crate::ports::Requeue;

/// SQS's per-message `DelaySeconds` ceiling; longer waits go through the delay state machine.
pub const MAX_QUEUE_DELAY_SECS: u64 = 900;

/// What the execution input holds besides the body: its keys, the delay and the queue URL (at
/// most 1,024 bytes here; SQS queue URLs are far shorter), and the envelope's seal, added after
/// the mechanism is chosen ([`crate::seal::SEAL_BYTES`]).
pub const DELAY_INPUT_OVERHEAD: usize = 1_024 + 64 + crate::seal::SEAL_BYTES;

/// How a retry waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DelayMechanism {
    /// Re-enqueue with `DelaySeconds` (at most 900).
    QueueDelay,
    /// Start the delay state machine (Wait, then SendMessage back to the queue).
    StateMachine,
    /// Re-enqueue for 900 s at a time, the copy carrying the time it is due (`not_before`):
    /// for a copy too large for a state machine's input. The send function puts a copy that
    /// comes back early on the queue again, unclaimed.
    QueueHops,
}

/// How a copy whose queue body is `body` waits `delay_secs`: the queue's own delay up to 900 s;
/// beyond, the state machine when its input (the body as a JSON string, plus
/// [`DELAY_INPUT_OVERHEAD`]) fits in Step Functions' [`SFN_MAX_INPUT_BYTES`], else hops
/// through the queue.
pub fn mechanism(delay_secs: u64, body: &str) -> DelayMechanism {
    if delay_secs <= MAX_QUEUE_DELAY_SECS {
        return DelayMechanism::QueueDelay;
    }
    let escaped = serde_json::to_string(body).map_or(usize::MAX, |s| s.len());
    if escaped.saturating_add(DELAY_INPUT_OVERHEAD) <= SFN_MAX_INPUT_BYTES {
        DelayMechanism::StateMachine
    } else {
        DelayMechanism::QueueHops
    }
}

/// The first hop of a [`DelayMechanism::QueueHops`] wait of `requeue.delay_secs` from `now`:
/// the envelope marked due (`not_before`), re-enqueued for at most 900 s. A body that is not
/// an envelope stays as it is, its wait capped at 900 s (every copy Courier re-enqueues after
/// a failure is an envelope).
pub fn first_hop(requeue: Requeue, now: DateTime<Utc>) -> Requeue {
    let due = now + chrono::Duration::seconds(i64::try_from(requeue.delay_secs).unwrap_or(0));
    let delay_secs = next_hop(now, due);
    let body = match serde_json::from_str::<serde_json::Value>(&requeue.body) {
        Ok(mut value) if value.get(ENVELOPE_KEY).is_some() => {
            value["not_before"] = serde_json::json!(due);
            value.to_string()
        }
        _ => requeue.body,
    };
    Requeue {
        body,
        delay_secs,
        ..requeue
    }
}

/// The queue delay of the next hop towards `due`: what is left, at most 900 s, at least 1 s.
pub fn next_hop(now: DateTime<Utc>, due: DateTime<Utc>) -> u64 {
    let left = (due - now).num_milliseconds().max(0);
    let secs = u64::try_from(left).unwrap_or(0).div_ceil(1_000);
    secs.clamp(1, MAX_QUEUE_DELAY_SECS)
}

/// Amazon States Language definition: Wait `$.delay_seconds`, then `sqs:sendMessage`.
pub const DEFINITION: &str = r#"{
  "Comment": "Courier delay: wait, then put the job back on its queue",
  "StartAt": "Wait",
  "States": {
    "Wait": { "Type": "Wait", "SecondsPath": "$.delay_seconds", "Next": "Send" },
    "Send": {
      "Type": "Task",
      "Resource": "arn:aws:states:::sqs:sendMessage",
      "Parameters": { "QueueUrl.$": "$.queue_url", "MessageBody.$": "$.body" },
      "Retry": [
        { "ErrorEquals": ["States.ALL"], "IntervalSeconds": 5, "MaxAttempts": 10, "BackoffRate": 2.0 }
      ],
      "End": true
    }
  }
}"#;

/// The execution input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelayInput {
    pub delay_seconds: u64,
    pub queue_url: String,
    pub body: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    #[test]
    fn short_waits_use_the_queue_and_long_ones_the_state_machine_when_the_body_fits() {
        assert_eq!(mechanism(900, "{}"), DelayMechanism::QueueDelay);
        assert_eq!(mechanism(901, "{}"), DelayMechanism::StateMachine);
        // The largest body that fits, counting its JSON escaping and the input's overhead.
        let fits = "x".repeat(SFN_MAX_INPUT_BYTES - DELAY_INPUT_OVERHEAD - 2);
        assert_eq!(mechanism(3600, &fits), DelayMechanism::StateMachine);
        assert_eq!(
            mechanism(3600, &format!("{fits}x")),
            DelayMechanism::QueueHops
        );
        // Escaping counts: 100 KiB of quotes is 200 KiB of input, plus 100 KiB more is over.
        let quotes = "\"".repeat(150 * 1024);
        assert_eq!(mechanism(3600, &quotes), DelayMechanism::QueueHops);
        // A short wait stays in the queue whatever the size.
        assert_eq!(mechanism(60, &quotes), DelayMechanism::QueueDelay);
    }

    #[test]
    fn hops_mark_the_envelope_due_and_wait_at_most_900_s() {
        let requeue = |body: &str| Requeue {
            message_id: "m".into(),
            body: body.into(),
            delay_secs: 3_000,
        };
        let body = r#"{"courier_envelope":1,"attempt":2,"retry":{},"job":{}}"#;
        let hop = first_hop(requeue(body), t(0));
        assert_eq!(hop.delay_secs, 900);
        let v: serde_json::Value = serde_json::from_str(&hop.body).unwrap();
        assert_eq!(v["not_before"], serde_json::json!(t(3_000)));
        assert_eq!(v["attempt"], 2);
        assert_eq!(next_hop(t(2_700), t(3_000)), 300);
        assert_eq!(next_hop(t(2_999), t(3_000)), 1);
        assert_eq!(next_hop(t(3_500), t(3_000)), 1);
        let bare = first_hop(requeue("{}"), t(0));
        assert_eq!((bare.body.as_str(), bare.delay_secs), ("{}", 900));
    }

    #[test]
    fn definition_is_json_with_wait_then_send() {
        let v: serde_json::Value = serde_json::from_str(super::DEFINITION).unwrap();
        assert_eq!(v["States"]["Wait"]["SecondsPath"], "$.delay_seconds");
        assert_eq!(
            v["States"]["Send"]["Resource"],
            "arn:aws:states:::sqs:sendMessage"
        );
    }
}
