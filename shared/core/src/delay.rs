//! The delay state machine: waits longer than SQS's 900 s `DelaySeconds` limit, then sends the
//! message back to the queue. The same definition is deployed by `infra/template.yaml` and
//! created by the integration tests.

use serde::{Deserialize, Serialize};

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
