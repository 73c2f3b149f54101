//! The outcome bus on EventBridge.

use aws_sdk_eventbridge::Client;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;

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
                Ok(out) => {
                    let mut answers = out.entries().iter();
                    for _ in chunk {
                        results.push(match answers.next() {
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
                        });
                    }
                }
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
