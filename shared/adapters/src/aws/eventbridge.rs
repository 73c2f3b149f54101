//! The outcome bus on EventBridge.

use aws_sdk_eventbridge::Client;
use aws_sdk_eventbridge::types::{PutEventsRequestEntry, PutEventsResultEntry};

use courier_core::outcome::{EVENTS_PER_CALL, OutcomeEvent, SOURCE};
use courier_core::ports::{OutcomeBus, StoreError};

use super::store_error as err;

/// Publishes outcome events to one event bus with `PutEvents` (one call per 10 events; an entry
/// EventBridge refuses fails alone, with its error code).
pub struct EventBridgeOutcomeBus {
    client: Client,
    bus: String,
}

impl EventBridgeOutcomeBus {
    /// `bus` is the bus's name or ARN.
    pub fn new(client: Client, bus: impl Into<String>) -> Self {
        EventBridgeOutcomeBus {
            client,
            bus: bus.into(),
        }
    }
}

#[async_trait::async_trait]
impl OutcomeBus for EventBridgeOutcomeBus {
    async fn publish(&self, events: &[OutcomeEvent]) -> Vec<Result<(), StoreError>> {
        let mut results = Vec::with_capacity(events.len());
        for chunk in events.chunks(EVENTS_PER_CALL) {
            let entries = chunk
                .iter()
                .map(|event| {
                    PutEventsRequestEntry::builder()
                        .event_bus_name(&self.bus)
                        .source(SOURCE)
                        .detail_type(event.detail_type)
                        .detail(event.detail_json())
                        .build()
                })
                .collect();
            match self
                .client
                .put_events()
                .set_entries(Some(entries))
                .send()
                .await
            {
                Ok(out) => results.extend(answers(chunk.len(), out.entries())),
                Err(e) => {
                    let e = err("outcome publish")(e);
                    for _ in chunk {
                        results.push(Err(StoreError::msg("outcome publish", e.to_string())));
                    }
                }
            }
        }
        results
    }
}

/// Each of `sent` entries' result, in order: EventBridge answers one entry per entry sent, with
/// an event id when accepted and an error code and message when refused (a refused entry fails
/// alone; the call itself succeeds, `FailedEntryCount` > 0).
fn answers(sent: usize, entries: &[PutEventsResultEntry]) -> Vec<Result<(), StoreError>> {
    let mut entries = entries.iter();
    (0..sent)
        .map(|_| match entries.next() {
            Some(entry) if entry.event_id().is_some() => Ok(()),
            Some(entry) => Err(StoreError::msg(
                "outcome publish",
                format!(
                    "{}: {}",
                    entry.error_code().unwrap_or("refused"),
                    entry.error_message().unwrap_or("no message")
                ),
            )),
            None => Err(StoreError::msg(
                "outcome publish",
                "EventBridge answered fewer entries than were sent",
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_entry_fails_alone_with_its_code_and_a_missing_answer_fails_too() {
        // GIVEN EventBridge's answer to three entries: accepted, refused, and none for the third
        let entries = [
            PutEventsResultEntry::builder().event_id("e-1").build(),
            PutEventsResultEntry::builder()
                .error_code("ThrottlingException")
                .error_message("Rate exceeded")
                .build(),
        ];
        let results = answers(3, &entries);
        // THEN the first is published, the others fail with why
        assert!(results[0].is_ok());
        let refused = results[1].as_ref().unwrap_err().to_string();
        assert!(
            refused.contains("ThrottlingException: Rate exceeded"),
            "{refused}"
        );
        let missing = results[2].as_ref().unwrap_err().to_string();
        assert!(missing.contains("fewer entries"), "{missing}");
        assert_eq!(results.len(), 3);
    }
}
