//! DynamoDB adapters: the status table (claims), the suppression table, and the control table
//! (breaker state and the poison blocklist).
//!
//! Times are stored as epoch milliseconds (`N`), so conditions compare numbers.
//!
//! # Layout
//! - `status`: [`DynamoDbStatusStore`].
//! - `suppression`: [`DynamoDbSuppressionList`].
//! - `control`: the control table, one adapter per port: [`DynamoDbBreakerStore`],
//!   [`DynamoDbPoisonList`], [`DynamoDbSightings`], [`DynamoDbEventLedger`],
//!   [`DynamoDbSendSchedule`], [`DynamoDbReputationStore`].
//! - `pacing`: the receiving domains' pacing states, [`DynamoDbDestinationRates`].
//! - `live`: the live settings document, [`DynamoDbLiveSettings`].

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, ConditionCheck, KeysAndAttributes,
    ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use chrono::{DateTime, Utc};

use super::store_error as err;
use courier_core::breaker::BreakerState;
use courier_core::outcome::Outcome;
use courier_core::ports::{
    BreakerStore, ClaimJudgement, ClaimOutcome, ClaimRequest, Expected, HistoryEntry, JobFacts,
    JobRecord, OpenState, Outbox, PoisonList, REDELIVERY_BOUND, RecipientChange, RecipientFill,
    ReputationStore, Resend, SendSchedule, Sightings, StatusStore, StatusUpdate, StoreError,
    SuppressionList, SweepMark, judge_claim,
};
use courier_core::rate::Reservation;
use courier_core::reputation::ReputationCounts;
use courier_core::status::{Status, predecessors};

mod control;
mod live;
mod pacing;
mod recipients;
mod status;
mod suppression;

pub use control::{
    DynamoDbBreakerStore, DynamoDbEventLedger, DynamoDbPoisonList, DynamoDbReputationStore,
    DynamoDbSendSchedule, DynamoDbSightings,
};
pub use live::DynamoDbLiveSettings;
pub use pacing::DynamoDbDestinationRates;
pub use status::DynamoDbStatusStore;
pub use suppression::DynamoDbSuppressionList;

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn get_s(item: &HashMap<String, AttributeValue>, key: &str) -> Option<String> {
    item.get(key).and_then(|v| v.as_s().ok()).cloned()
}

fn get_n(item: &HashMap<String, AttributeValue>, key: &str) -> Option<i64> {
    item.get(key)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
}

fn time(item: &HashMap<String, AttributeValue>, key: &str) -> Option<DateTime<Utc>> {
    get_n(item, key).and_then(DateTime::from_timestamp_millis)
}

/// An item's size as DynamoDB counts it against its 400 KB limit: each attribute's name and
/// value, a number one byte per two significant digits plus one, a list or map three bytes
/// plus one per element (AWS, "DynamoDB item sizes and formats").
pub fn item_size(item: &HashMap<String, AttributeValue>) -> usize {
    item.iter().map(|(k, v)| k.len() + value_size(v)).sum()
}

fn value_size(v: &AttributeValue) -> usize {
    match v {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => {
            let digits: String = n.chars().filter(char::is_ascii_digit).collect();
            let significant = digits.trim_start_matches('0').trim_end_matches('0').len();
            significant.div_ceil(2) + 1
        }
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::L(l) => 3 + l.iter().map(|e| 1 + value_size(e)).sum::<usize>(),
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, e)| 1 + k.len() + value_size(e))
                .sum::<usize>()
        }
        AttributeValue::Ss(l) => l.iter().map(String::len).sum(),
        AttributeValue::Ns(l) => l
            .iter()
            .map(|n| value_size(&AttributeValue::N(n.clone())))
            .sum(),
        AttributeValue::Bs(l) => l.iter().map(|b| b.as_ref().len()).sum(),
        _ => 0,
    }
}

/// Reads a status item back into a record; `None` when it is not one of ours.
pub fn record_of(item: &HashMap<String, AttributeValue>) -> Option<JobRecord> {
    let history = item
        .get("history")
        .and_then(|v| v.as_l().ok())
        .map(|list| list.iter().filter_map(history_of).collect())
        .unwrap_or_default();
    let (recipients, recipient_log, recipients_version) = recipients::read(item);
    Some(JobRecord {
        message_id: get_s(item, "message_id")?,
        status: Status::parse(&get_s(item, "status")?)?,
        attempt: u32::try_from(get_n(item, "attempt").unwrap_or(0)).unwrap_or(0),
        lease_owner: get_s(item, "lease_owner"),
        lease_until: time(item, "lease_until"),
        unknown_since: time(item, "unknown_since"),
        provider: get_s(item, "provider"),
        provider_message_id: get_s(item, "provider_message_id"),
        updated_at: time(item, "updated_at").unwrap_or_default(),
        history,
        payload: get_s(item, "payload"),
        resend_of: get_s(item, "resend_of"),
        swept_at: time(item, "swept_at"),
        copy_due: time(item, "copy_due"),
        trace_id: get_s(item, "trace_id"),
        facts: JobFacts {
            campaign_id: get_s(item, "campaign_id"),
            metadata: item
                .get("metadata")
                .and_then(|v| v.as_m().ok())
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_s().ok()?.clone())))
                        .collect()
                })
                .unwrap_or_default(),
        },
        outbox: outbox_of(item),
        recipients,
        recipient_log,
        recipients_version,
    })
}

fn outbox_of(item: &HashMap<String, AttributeValue>) -> Option<Outbox> {
    Some(Outbox {
        status: Status::parse(&get_s(item, "outbox_status")?)?,
        attempt: u32::try_from(get_n(item, "outbox_attempt")?).ok()?,
        at: time(item, "outbox_at")?,
    })
}

/// The `SET` clauses and values that keep a job's [`JobFacts`]: `keep` writes them only where
/// the record has none (`if_not_exists`).
fn facts_marks(
    facts: &JobFacts,
    keep: bool,
) -> (Vec<&'static str>, Vec<(&'static str, AttributeValue)>) {
    let mut set = Vec::new();
    let mut values = Vec::new();
    if let Some(campaign) = &facts.campaign_id {
        set.push(if keep {
            "campaign_id = if_not_exists(campaign_id, :camp)"
        } else {
            "campaign_id = :camp"
        });
        values.push((":camp", s(campaign)));
    }
    if !facts.metadata.is_empty() {
        set.push(if keep {
            "metadata = if_not_exists(metadata, :md)"
        } else {
            "metadata = :md"
        });
        let map = facts
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), s(v)))
            .collect();
        values.push((":md", AttributeValue::M(map)));
    }
    (set, values)
}

/// The outbox clause of a write that sets the status to `:s` with the attempt `attempt` (an
/// expression): an outcome marks the record's outbox and the sparse `by_outbox` index, in the
/// same write. `None` for a status that is not an outcome.
fn outbox_marks(
    message_id: &str,
    status: Status,
    attempt: &'static str,
) -> Option<(String, AttributeValue)> {
    Outcome::of(status)?;
    Some((
        format!("outbox = :ob, outbox_at = :now, outbox_status = :s, outbox_attempt = {attempt}"),
        s(format!(
            "outbox#{}",
            courier_core::ports::shard_of(message_id)
        )),
    ))
}

fn history_of(value: &AttributeValue) -> Option<HistoryEntry> {
    let m = value.as_m().ok()?;
    Some(HistoryEntry {
        at: time(m, "at")?,
        status: Status::parse(&get_s(m, "status")?)?,
        attempt: u32::try_from(get_n(m, "attempt").unwrap_or(0)).unwrap_or(0),
        by: get_s(m, "by").unwrap_or_default(),
        detail: get_s(m, "detail"),
    })
}

/// A one-entry list to append to the record's `history` (`:h` in the expressions below).
fn history_entry(
    at: DateTime<Utc>,
    status: Status,
    attempt: u32,
    by: &str,
    detail: Option<&str>,
) -> AttributeValue {
    let mut m = HashMap::from([
        ("at".to_owned(), n(ms(at))),
        ("status".to_owned(), s(status.as_str())),
        ("attempt".to_owned(), n(attempt)),
        ("by".to_owned(), s(by)),
    ]);
    if let Some(d) = detail {
        m.insert("detail".to_owned(), s(d));
    }
    AttributeValue::L(vec![AttributeValue::M(m)])
}

/// Appends `:h` to the history (`:empty` is an empty list).
const APPEND_HISTORY: &str = "history = list_append(if_not_exists(history, :empty), :h)";

fn empty_list() -> AttributeValue {
    AttributeValue::L(Vec::new())
}

/// The sparse `by_open` index attributes of a write: set while the job is open (see
/// [`OpenState`]), removed otherwise. A waiting job's key is when its copy is due (`copy_due`).
struct OpenMarks {
    set: Option<&'static str>,
    remove: Option<&'static str>,
    values: Vec<(&'static str, AttributeValue)>,
}

fn open_marks(update: &StatusUpdate) -> OpenMarks {
    let id = &update.message_id;
    match (
        OpenState::of(update.status, update.provider.as_deref()),
        update.copy_due(),
    ) {
        (Some(state @ OpenState::Waiting), Some(due)) => OpenMarks {
            set: Some("open_state = :os, open_at = :oa, copy_due = :oa"),
            remove: None,
            values: vec![(":os", s(state.key(id))), (":oa", n(ms(due)))],
        },
        (Some(state), _) => OpenMarks {
            set: Some("open_state = :os, open_at = :oa"),
            remove: Some("copy_due"),
            values: vec![(":os", s(state.key(id))), (":oa", n(ms(update.now)))],
        },
        (None, _) => OpenMarks {
            set: None,
            remove: Some("open_state, open_at, copy_due"),
            values: Vec::new(),
        },
    }
}

/// `SET ... REMOVE ...` from clauses.
fn expression(set: &[&str], remove: &[&str]) -> String {
    let mut e = format!("SET {}", set.join(", "));
    if !remove.is_empty() {
        e.push_str(&format!(" REMOVE {}", remove.join(", ")));
    }
    e
}

/// The name of the status table's sparse index of open jobs.
pub const OPEN_INDEX: &str = "by_open";

/// The name of the status table's sparse, keys-only index of unpublished outcomes.
pub const OUTBOX_INDEX: &str = "by_outbox";

/// The name of the status table's sparse, keys-only index by `provider_message_id`.
pub const PROVIDER_MESSAGE_ID_INDEX: &str = "by_provider_message_id";

/// How a [`batch_get`] reads.
pub(crate) enum BatchRead {
    Consistent,
    /// Eventually consistent, only this attribute.
    Projected(&'static str),
}

/// Reads items by their string key with BatchGetItem: 100 keys a call, unprocessed keys retried
/// with backoff (5 rounds). `keys` must be distinct.
pub(crate) async fn batch_get(
    client: &Client,
    table: &str,
    key: &str,
    keys: &[String],
    read: BatchRead,
    operation: &'static str,
) -> Result<Vec<HashMap<String, AttributeValue>>, StoreError> {
    let mut found = Vec::new();
    for chunk in keys.chunks(100) {
        let mut wanted = match read {
            BatchRead::Consistent => KeysAndAttributes::builder().consistent_read(true),
            BatchRead::Projected(attr) => KeysAndAttributes::builder().projection_expression(attr),
        };
        for k in chunk {
            wanted = wanted.keys(HashMap::from([(key.to_owned(), s(k))]));
        }
        let mut request = HashMap::from([(
            table.to_owned(),
            wanted.build().map_err(|e| StoreError::new(operation, e))?,
        )]);
        for round in 0..5 {
            let out = client
                .batch_get_item()
                .set_request_items(Some(request))
                .send()
                .await
                .map_err(err(operation))?;
            found.extend(
                out.responses
                    .unwrap_or_default()
                    .remove(table)
                    .unwrap_or_default(),
            );
            match out.unprocessed_keys.filter(|u| !u.is_empty()) {
                Some(rest) if round < 4 => {
                    tokio::time::sleep(Duration::from_millis(50 << round)).await;
                    request = rest;
                }
                Some(_) => {
                    return Err(StoreError::msg(
                        operation,
                        "unprocessed keys after 5 rounds",
                    ));
                }
                None => break,
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_sizes_follow_the_documented_rules() {
        // A string: name + UTF-8 bytes; a number: name + one byte per two significant digits + 1.
        let item = HashMap::from([
            ("id".to_owned(), s("héllo")),
            ("n".to_owned(), n(1_700_000_000_123_i64)),
            ("z".to_owned(), n(1000)),
        ]);
        assert_eq!(item_size(&item), (2 + 6) + (1 + 7 + 1) + (1 + 1 + 1));
        // A list: 3 bytes + 1 per element; a map: 3 bytes + 1 per element, keys counted.
        let item = HashMap::from([(
            "l".to_owned(),
            AttributeValue::L(vec![
                s("ab"),
                AttributeValue::M(HashMap::from([("k".to_owned(), s("v"))])),
            ]),
        )]);
        assert_eq!(item_size(&item), 1 + 3 + (1 + 2) + (1 + 3 + (1 + 1 + 1)));
        assert_eq!(
            item_size(&HashMap::from([(
                "e".to_owned(),
                AttributeValue::L(vec![])
            )])),
            4
        );
    }
}
