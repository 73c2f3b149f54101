//! Receives Courier's outcome events from an SQS queue that a rule on the outcome bus targets
//! (docs/outcomes.md, "Subscribing"), and acts on each once.
//!
//! `OUTCOMES_QUEUE_URL=https://sqs.../my-outcomes cargo run --example outcomes`
//!
//! Delivery is at least once: the same outcome can arrive twice (Courier's republishing,
//! EventBridge's and SQS's own retries), always with the same `event_id`. This example
//! remembers the ids it handled in memory; a service keeps them where its own state is (a
//! conditional write keyed on `event_id`, in the same transaction as the state it changes).

use std::collections::HashSet;

use courier_client::Outcome;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let queue_url = std::env::var("OUTCOMES_QUEUE_URL")?;
    // An application's `aws-config` with its default features brings an HTTPS client and
    // `aws_config::load_from_env()` is all it takes; this workspace builds the SDK without one
    // (the root Cargo.toml says why), so the example sets rustls on ring itself.
    use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(http)
        .load()
        .await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let mut handled = HashSet::new();
    loop {
        let received = sqs
            .receive_message()
            .queue_url(&queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(20)
            .send()
            .await?;
        for message in received.messages() {
            let event: serde_json::Value = serde_json::from_str(message.body().unwrap_or("{}"))?;
            match Outcome::from_event(&event) {
                Ok(outcome) if handled.insert(outcome.event_id.clone()) => {
                    let order = outcome.metadata.get("order").map_or("-", String::as_str);
                    match outcome.outcome.as_str() {
                        "delivered" => println!("order {order}: delivered"),
                        "bounced" | "complained" | "suppressed" => {
                            println!(
                                "order {order}: {} - stop mailing this address",
                                outcome.outcome
                            );
                        }
                        "dead_lettered" => {
                            println!("order {order}: not sent ({:?})", outcome.reason)
                        }
                        other => println!("order {order}: {other}"),
                    }
                }
                Ok(duplicate) => println!("{} again: already handled", duplicate.event_id),
                // Not ours to act on (another source on the queue, a newer layout): log it.
                Err(e) => eprintln!("skipped a message: {e}"),
            }
            if let Some(receipt) = message.receipt_handle() {
                sqs.delete_message()
                    .queue_url(&queue_url)
                    .receipt_handle(receipt)
                    .send()
                    .await?;
            }
        }
    }
}
