//! DynamoDB adapters: the status table (claims), the suppression table, and the control table
//! (breaker state and the poison blocklist).
//!
//! Times are stored as epoch milliseconds (`N`), so conditions compare numbers.

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
use courier_core::ports::{
    BreakerStore, ClaimJudgement, ClaimOutcome, ClaimRequest, HistoryEntry, JobRecord, OpenState,
    PoisonList, ReputationStore, Resend, SendSchedule, Sightings, StatusStore, StatusUpdate,
    StoreError, SuppressionList, SweepMark, judge_claim,
};
use courier_core::rate::Reservation;
use courier_core::reputation::ReputationCounts;
use courier_core::status::{Status, predecessors};

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

/// Reads a status item back into a record; `None` when it is not one of ours.
pub fn record_of(item: &HashMap<String, AttributeValue>) -> Option<JobRecord> {
    let history = item
        .get("history")
        .and_then(|v| v.as_l().ok())
        .map(|list| list.iter().filter_map(history_of).collect())
        .unwrap_or_default();
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
    })
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
/// [`OpenState`]), removed otherwise.
struct OpenMarks {
    set: Option<&'static str>,
    remove: Option<&'static str>,
    values: Vec<(&'static str, AttributeValue)>,
}

fn open_marks(
    message_id: &str,
    status: Status,
    provider: Option<&str>,
    now: DateTime<Utc>,
) -> OpenMarks {
    match OpenState::of(status, provider) {
        Some(state) => OpenMarks {
            set: Some("open_state = :os, open_at = :oa"),
            remove: None,
            values: vec![(":os", s(state.key(message_id))), (":oa", n(ms(now)))],
        },
        None => OpenMarks {
            set: None,
            remove: Some("open_state, open_at"),
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

/// The name of the status table's sparse, keys-only index by `provider_message_id`.
pub const PROVIDER_MESSAGE_ID_INDEX: &str = "by_provider_message_id";

/// The status / idempotency table: key `message_id` (S); TTL attribute `expires_at`.
pub struct DynamoDbStatusStore {
    client: Client,
    table: String,
    /// Checked inside the claim when the request asks for it.
    suppression_table: Option<String>,
    /// How long records are kept (TTL) after their last write.
    retention: Duration,
}

impl DynamoDbStatusStore {
    pub fn new(client: Client, table: impl Into<String>, retention: Duration) -> Self {
        DynamoDbStatusStore {
            client,
            table: table.into(),
            suppression_table: None,
            retention,
        }
    }

    /// Lets claims check recipients against this suppression table in the same transaction.
    pub fn with_suppression_table(mut self, table: impl Into<String>) -> Self {
        self.suppression_table = Some(table.into());
        self
    }

    fn expires_at(&self, now: DateTime<Utc>) -> AttributeValue {
        n(now.timestamp() + i64::try_from(self.retention.as_secs()).unwrap_or(i64::MAX / 2))
    }

    async fn read(
        &self,
        message_id: &str,
    ) -> Result<Option<HashMap<String, AttributeValue>>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("message_id", s(message_id))
            .consistent_read(true)
            .send()
            .await
            .map_err(err("status get"))?;
        Ok(out.item)
    }

    async fn mark_unknown(&self, req: &ClaimRequest, old: &JobRecord) -> Result<bool, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("message_id", s(&req.message_id))
            .update_expression(format!("SET #s = :unknown, unknown_since = :now, updated_at = :now, {APPEND_HISTORY} REMOVE lease_owner, lease_until, open_state, open_at"))
            .condition_expression("#s = :processing AND attempt = :a AND lease_until = :old_lease")
            .expression_attribute_names("#s", "status")
            .expression_attribute_values(":empty", empty_list())
            .expression_attribute_values(
                ":h",
                history_entry(req.now, Status::Unknown, old.attempt, "send", Some("the lease expired mid-send")),
            )
            .expression_attribute_values(":unknown", s(Status::Unknown.as_str()))
            .expression_attribute_values(":processing", s(Status::Processing.as_str()))
            .expression_attribute_values(":now", n(ms(req.now)))
            .expression_attribute_values(":a", n(old.attempt))
            .expression_attribute_values(":old_lease", n(old.lease_until.map_or(0, ms)))
            .send()
            .await;
        Ok(super::conditional(result, "status mark unknown")?.is_some())
    }
}

/// What one claim write did.
enum Attempt {
    Claimed,
    Suppressed(Vec<String>),
    /// The claim's condition failed; the old item when DynamoDB returned it.
    Refused(Option<HashMap<String, AttributeValue>>),
}

/// The claim's condition: [`judge_claim`]'s `Take` as an expression.
const CLAIM_CONDITION: &str = "attribute_not_exists(message_id) \
     OR (attempt <= :a AND (#s = :pending OR #s = :deferred)) \
     OR (attempt <= :a AND #s = :unknown AND unknown_since <= :cutoff) \
     OR (attempt < :a AND #s = :processing AND lease_until <= :now)";

impl DynamoDbStatusStore {
    /// The claim as an update (not a put: the record keeps its history and payload).
    const CLAIM_UPDATE: &'static str = "SET #s = :processing, attempt = :a, lease_owner = :owner, \
         lease_until = :lu, updated_at = :now, expires_at = :exp, open_state = :os, open_at = :now, \
         history = list_append(if_not_exists(history, :empty), :h) REMOVE unknown_since, swept_at";

    fn claim_values(&self, req: &ClaimRequest) -> HashMap<String, AttributeValue> {
        HashMap::from([
            (":owner".to_owned(), s(&req.owner)),
            (":lu".to_owned(), n(ms(req.lease_until))),
            (":exp".to_owned(), self.expires_at(req.now)),
            (
                ":os".to_owned(),
                s(OpenState::Processing.key(&req.message_id)),
            ),
            (":empty".to_owned(), empty_list()),
            (
                ":h".to_owned(),
                history_entry(
                    req.now,
                    Status::Processing,
                    req.attempt,
                    "send",
                    Some(&format!("claimed by {}", req.owner)),
                ),
            ),
            (":a".to_owned(), n(req.attempt)),
            (":pending".to_owned(), s(Status::Pending.as_str())),
            (":deferred".to_owned(), s(Status::Deferred.as_str())),
            (":unknown".to_owned(), s(Status::Unknown.as_str())),
            (":processing".to_owned(), s(Status::Processing.as_str())),
            (":cutoff".to_owned(), n(ms(req.now - req.grace))),
            (":now".to_owned(), n(ms(req.now))),
        ])
    }

    /// One conditional UpdateItem; a refusal returns the old item
    /// (ReturnValuesOnConditionCheckFailure) so a duplicate costs no extra read.
    async fn claim_put(&self, req: &ClaimRequest) -> Result<Attempt, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("message_id", s(&req.message_id))
            .update_expression(Self::CLAIM_UPDATE)
            .condition_expression(CLAIM_CONDITION)
            .expression_attribute_names("#s", "status")
            .set_expression_attribute_values(Some(self.claim_values(req)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Attempt::Claimed),
            Err(e) => match e.as_service_error() {
                Some(aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(c)) => {
                    Ok(Attempt::Refused(c.item().cloned()))
                }
                _ => Err(err("status claim")(e)),
            },
        }
    }

    /// The claim and a check that no recipient is suppressed, as one transaction (one call).
    async fn claim_transaction(&self, req: &ClaimRequest) -> Result<Attempt, StoreError> {
        let Some(suppression_table) = &self.suppression_table else {
            return Err(StoreError::msg(
                "status claim",
                "a suppression check needs the suppression table (with_suppression_table)",
            ));
        };
        let mut keys: Vec<String> = req
            .check_suppressed
            .iter()
            .map(|a| a.trim().to_lowercase())
            .collect();
        keys.sort();
        keys.dedup();
        let mut request = self.client.transact_write_items();
        for key in &keys {
            let check = ConditionCheck::builder()
                .table_name(suppression_table)
                .key("address", s(key))
                .condition_expression("attribute_not_exists(address) OR expires_at < :now_s")
                .expression_attribute_values(":now_s", n(req.now.timestamp()))
                .build()
                .map_err(|e| StoreError::new("status claim", e))?;
            request =
                request.transact_items(TransactWriteItem::builder().condition_check(check).build());
        }
        let update = Update::builder()
            .table_name(&self.table)
            .key("message_id", s(&req.message_id))
            .update_expression(Self::CLAIM_UPDATE)
            .condition_expression(CLAIM_CONDITION)
            .expression_attribute_names("#s", "status")
            .set_expression_attribute_values(Some(self.claim_values(req)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| StoreError::new("status claim", e))?;
        request = request.transact_items(TransactWriteItem::builder().update(update).build());
        let error = match request.send().await {
            Ok(_) => return Ok(Attempt::Claimed),
            Err(e) => e,
        };
        let reasons = match error.as_service_error() {
            Some(TransactWriteItemsError::TransactionCanceledException(c)) => {
                c.cancellation_reasons().to_vec()
            }
            _ => return Err(err("status claim")(error)),
        };
        let failed = |r: Option<&CancellationReason>| {
            r.and_then(CancellationReason::code) == Some("ConditionalCheckFailed")
        };
        let claim_reason = reasons.get(keys.len());
        if reasons.len() == keys.len() + 1 {
            if failed(claim_reason) {
                return Ok(Attempt::Refused(
                    claim_reason.and_then(|r| r.item().cloned()),
                ));
            }
            let hit: Vec<&String> = keys
                .iter()
                .zip(&reasons)
                .filter(|(_, r)| failed(Some(r)))
                .map(|(k, _)| k)
                .collect();
            if !hit.is_empty() {
                return Ok(Attempt::Suppressed(
                    req.check_suppressed
                        .iter()
                        .filter(|a| hit.contains(&&a.trim().to_lowercase()))
                        .cloned()
                        .collect(),
                ));
            }
            return Err(StoreError::msg(
                "status claim",
                format!(
                    "transaction cancelled: {:?}",
                    reasons
                        .iter()
                        .map(|r| r.code().unwrap_or("None"))
                        .collect::<Vec<_>>()
                ),
            ));
        }
        // No per-item reasons: find out which condition failed with reads.
        let old = self.read(&req.message_id).await?;
        if let Some(item) = old.filter(|item| {
            record_of(item).is_some_and(|rec| judge_claim(Some(&rec), req) != ClaimJudgement::Take)
        }) {
            return Ok(Attempt::Refused(Some(item)));
        }
        let list = DynamoDbSuppressionList::new(self.client.clone(), suppression_table.clone());
        let hit = list.suppressed(&req.check_suppressed, req.now).await?;
        if hit.is_empty() {
            return Err(StoreError::msg(
                "status claim",
                "transaction cancelled for no condition we can find",
            ));
        }
        Ok(Attempt::Suppressed(hit))
    }
}

#[async_trait::async_trait]
impl StatusStore for DynamoDbStatusStore {
    /// One conditional UpdateItem (in a transaction with the suppression checks when asked);
    /// the condition is [`judge_claim`]'s `Take` written as an expression, and a refusal returns the old item (ReturnValuesOnConditionCheckFailure) so a
    /// duplicate costs no extra read.
    async fn claim(&self, req: &ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        for _ in 0..3 {
            let attempt = if req.check_suppressed.is_empty() {
                self.claim_put(req).await?
            } else {
                self.claim_transaction(req).await?
            };
            let old_item = match attempt {
                Attempt::Claimed => return Ok(ClaimOutcome::Claimed),
                Attempt::Suppressed(hit) => return Ok(ClaimOutcome::Suppressed(hit)),
                Attempt::Refused(Some(item)) => Some(item),
                Attempt::Refused(None) => self.read(&req.message_id).await?,
            };
            let old = old_item.as_ref().and_then(record_of);
            match judge_claim(old.as_ref(), req) {
                ClaimJudgement::Refuse(outcome) => return Ok(outcome),
                ClaimJudgement::MarkUnknown => {
                    if let Some(old) = &old
                        && self.mark_unknown(req, old).await?
                    {
                        return Ok(ClaimOutcome::Ambiguous {
                            resolve_at: req.now + req.grace,
                        });
                    }
                    // Someone else changed it first: judge again.
                }
                // The item changed between the write and the read: try again.
                ClaimJudgement::Take => {}
            }
        }
        Err(StoreError::msg(
            "status claim",
            "the record kept changing under three claim attempts",
        ))
    }

    async fn finish(&self, update: &StatusUpdate) -> Result<(), StoreError> {
        let provider = update.provider.as_deref();
        let marks = open_marks(&update.message_id, update.status, provider, update.now);
        let mut set = vec![
            "#s = :s",
            "attempt = :a",
            "updated_at = :now",
            "expires_at = :exp",
            APPEND_HISTORY,
        ];
        let mut remove = vec!["lease_owner", "lease_until"];
        set.extend(marks.set);
        remove.extend(marks.remove);
        let mut req = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("message_id", s(&update.message_id))
            .condition_expression("lease_owner = :owner OR #s = :unknown")
            .expression_attribute_names("#s", "status")
            .expression_attribute_values(":s", s(update.status.as_str()))
            .expression_attribute_values(":a", n(update.attempt))
            .expression_attribute_values(":now", n(ms(update.now)))
            .expression_attribute_values(":exp", self.expires_at(update.now))
            .expression_attribute_values(":owner", s(&update.owner))
            .expression_attribute_values(":unknown", s(Status::Unknown.as_str()))
            .expression_attribute_values(":empty", empty_list())
            .expression_attribute_values(
                ":h",
                history_entry(
                    update.now,
                    update.status,
                    update.attempt,
                    &update.owner,
                    update.detail.as_deref(),
                ),
            );
        for (name, value) in marks.values {
            req = req.expression_attribute_values(name, value);
        }
        if let Some(p) = &update.provider {
            set.push("provider = :p");
            req = req.expression_attribute_values(":p", s(p));
        }
        if let Some(id) = &update.provider_message_id {
            set.push("provider_message_id = :pid");
            req = req.expression_attribute_values(":pid", s(id));
        }
        if let Some(payload) = &update.payload {
            set.push("payload = :body");
            req = req.expression_attribute_values(":body", s(payload));
        }
        if update.status == Status::Unknown {
            set.push("unknown_since = :now");
        }
        req.update_expression(expression(&set, &remove))
            .send()
            .await
            .map_err(|e| {
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception())
                {
                    StoreError::msg("status finish", "the lease is no longer ours")
                } else {
                    err("status finish")(e)
                }
            })?;
        Ok(())
    }

    async fn record(&self, update: &StatusUpdate) -> Result<(), StoreError> {
        let sources = predecessors(update.status);
        let placeholders: Vec<String> = (0..sources.len()).map(|i| format!(":from{i}")).collect();
        let condition = if placeholders.is_empty() {
            "attribute_not_exists(message_id)".to_owned()
        } else {
            format!(
                "attribute_not_exists(message_id) OR #s IN ({})",
                placeholders.join(", ")
            )
        };
        // The provider that reports outcomes: this write's, else the one on the record.
        let provider = update.provider.as_deref();
        let marks = open_marks(&update.message_id, update.status, provider, update.now);
        let mut set = vec![
            "#s = :s",
            "attempt = if_not_exists(attempt, :a)",
            "updated_at = :now",
            "expires_at = :exp",
            APPEND_HISTORY,
        ];
        set.extend(marks.set);
        let remove: Vec<&str> = marks.remove.into_iter().collect();
        let mut req = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("message_id", s(&update.message_id))
            .condition_expression(condition)
            .expression_attribute_names("#s", "status")
            .expression_attribute_values(":s", s(update.status.as_str()))
            .expression_attribute_values(":a", n(update.attempt))
            .expression_attribute_values(":now", n(ms(update.now)))
            .expression_attribute_values(":exp", self.expires_at(update.now))
            .expression_attribute_values(":empty", empty_list())
            .expression_attribute_values(
                ":h",
                history_entry(
                    update.now,
                    update.status,
                    update.attempt,
                    &update.owner,
                    update.detail.as_deref(),
                ),
            );
        for (name, value) in marks.values {
            req = req.expression_attribute_values(name, value);
        }
        for (placeholder, status) in placeholders.iter().zip(&sources) {
            req = req.expression_attribute_values(placeholder, s(status.as_str()));
        }
        // Provider evidence (an SES event resolving an ambiguous send) keeps the provider message
        // id where the record has none, so later events without our header still find the job.
        if let Some(id) = &update.provider_message_id {
            set.push("provider_message_id = if_not_exists(provider_message_id, :pid)");
            req = req.expression_attribute_values(":pid", s(id));
        }
        req = req.update_expression(expression(&set, &remove));
        // Not allowed from the current status: a late or duplicate write, absorbed.
        super::conditional(req.send().await, "status record").map(|_| ())
    }

    async fn get(&self, message_id: &str) -> Result<Option<JobRecord>, StoreError> {
        Ok(self.read(message_id).await?.as_ref().and_then(record_of))
    }

    /// A Query on the sparse, keys-only `by_provider_message_id` index (an index write only
    /// when a send records its provider message id; no extra write of ours).
    async fn find_by_provider_message_id(
        &self,
        provider_message_id: &str,
    ) -> Result<Option<String>, StoreError> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(PROVIDER_MESSAGE_ID_INDEX)
            .key_condition_expression("provider_message_id = :p")
            .expression_attribute_values(":p", s(provider_message_id))
            .limit(1)
            .send()
            .await
            .map_err(err("status find by provider message id"))?;
        Ok(out.items().first().and_then(|i| get_s(i, "message_id")))
    }

    async fn note(&self, message_id: &str, entry: &HistoryEntry) -> Result<bool, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("message_id", s(message_id))
            .update_expression(format!("SET {APPEND_HISTORY}"))
            .condition_expression("#s = :s AND attempt = :a")
            .expression_attribute_names("#s", "status")
            .expression_attribute_values(":s", s(entry.status.as_str()))
            .expression_attribute_values(":a", n(entry.attempt))
            .expression_attribute_values(":empty", empty_list())
            .expression_attribute_values(
                ":h",
                history_entry(
                    entry.at,
                    entry.status,
                    entry.attempt,
                    &entry.by,
                    entry.detail.as_deref(),
                ),
            )
            .send()
            .await;
        Ok(super::conditional(result, "status note")?.is_some())
    }

    /// Reads the generation first so the history entry carries the new one; the write is
    /// conditional on that generation, so a concurrent reopen makes this one return `None`.
    async fn reopen(
        &self,
        message_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<u32>, StoreError> {
        let Some(current) = self.get(message_id).await? else {
            return Ok(None);
        };
        if current.status != Status::DeadLettered {
            return Ok(None);
        }
        let next = current.attempt + 1;
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("message_id", s(message_id))
            .update_expression(format!(
                "SET #s = :pending, attempt = :next, updated_at = :now, {APPEND_HISTORY} REMOVE open_state, open_at"
            ))
            .condition_expression("#s = :dead AND attempt = :a")
            .expression_attribute_names("#s", "status")
            .expression_attribute_values(":pending", s(Status::Pending.as_str()))
            .expression_attribute_values(":dead", s(Status::DeadLettered.as_str()))
            .expression_attribute_values(":a", n(current.attempt))
            .expression_attribute_values(":next", n(next))
            .expression_attribute_values(":now", n(ms(now)))
            .expression_attribute_values(":empty", empty_list())
            .expression_attribute_values(
                ":h",
                history_entry(
                    now,
                    Status::Pending,
                    next,
                    "operator",
                    Some("replayed from the dead letters"),
                ),
            )
            .send()
            .await;
        Ok(super::conditional(result, "status reopen")?.map(|_| next))
    }

    async fn resend(&self, resend: &Resend) -> Result<bool, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("message_id", s(&resend.message_id))
            .update_expression(format!(
                "SET #s = :deferred, attempt = :next, updated_at = :now, expires_at = :exp, \
                 resend_of = :bounced, {APPEND_HISTORY} REMOVE open_state, open_at, swept_at"
            ))
            .condition_expression("#s IN (:sent, :bounced_transient) AND attempt = :a")
            .expression_attribute_names("#s", "status")
            .expression_attribute_values(":deferred", s(Status::Deferred.as_str()))
            .expression_attribute_values(":sent", s(Status::SentToProvider.as_str()))
            .expression_attribute_values(":bounced_transient", s(Status::BouncedTransient.as_str()))
            .expression_attribute_values(":a", n(resend.attempt))
            .expression_attribute_values(":next", n(resend.attempt + 1))
            .expression_attribute_values(":now", n(ms(resend.now)))
            .expression_attribute_values(":exp", self.expires_at(resend.now))
            .expression_attribute_values(":bounced", s(&resend.bounced))
            .expression_attribute_values(":empty", empty_list())
            .expression_attribute_values(
                ":h",
                history_entry(
                    resend.now,
                    Status::Deferred,
                    resend.attempt + 1,
                    "events",
                    Some(&resend.detail),
                ),
            )
            .send()
            .await;
        Ok(super::conditional(result, "status resend")?.is_some())
    }

    async fn open_before(
        &self,
        state: OpenState,
        before: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<JobRecord>, StoreError> {
        let mut found = Vec::new();
        for shard in 0..OpenState::SHARDS {
            let key = format!("{}#{shard}", state.as_str());
            let mut cursor = None;
            loop {
                let out = self
                    .client
                    .query()
                    .table_name(&self.table)
                    .index_name(OPEN_INDEX)
                    .key_condition_expression("open_state = :k AND open_at < :before")
                    .expression_attribute_values(":k", s(&key))
                    .expression_attribute_values(":before", n(ms(before)))
                    .limit(i32::try_from(limit.clamp(1, 1000)).unwrap_or(1000))
                    .set_exclusive_start_key(cursor)
                    .send()
                    .await
                    .map_err(err("status open query"))?;
                found.extend(out.items().iter().filter_map(record_of));
                cursor = out.last_evaluated_key;
                if cursor.is_none() || found.len() >= limit * (shard as usize + 1) {
                    break;
                }
            }
        }
        found.sort_by_key(|r| r.updated_at);
        found.truncate(limit);
        Ok(found)
    }

    async fn sweep(
        &self,
        found: &JobRecord,
        mark: SweepMark,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let request = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("message_id", s(&found.message_id))
            .expression_attribute_names("#s", "status")
            .expression_attribute_values(":u", n(ms(found.updated_at)))
            .expression_attribute_values(":now", n(ms(now)))
            .expression_attribute_values(":empty", empty_list());
        let request = match mark {
            SweepMark::LeaseExpired => request
                .update_expression(format!(
                    "SET #s = :unknown, unknown_since = :now, updated_at = :now, {APPEND_HISTORY} \
                     REMOVE lease_owner, lease_until, open_state, open_at"
                ))
                .condition_expression("#s = :processing AND updated_at = :u AND lease_until < :now")
                .expression_attribute_values(":unknown", s(Status::Unknown.as_str()))
                .expression_attribute_values(":processing", s(Status::Processing.as_str()))
                .expression_attribute_values(
                    ":h",
                    history_entry(
                        now,
                        Status::Unknown,
                        found.attempt,
                        "sweeper",
                        Some("still processing long after its lease expired"),
                    ),
                ),
            SweepMark::NoOutcome => request
                .update_expression(format!(
                    "SET swept_at = :now, {APPEND_HISTORY} REMOVE open_state, open_at"
                ))
                .condition_expression("#s = :sent AND updated_at = :u")
                .expression_attribute_values(":sent", s(Status::SentToProvider.as_str()))
                .expression_attribute_values(
                    ":h",
                    history_entry(
                        now,
                        Status::SentToProvider,
                        found.attempt,
                        "sweeper",
                        Some("no delivery, bounce or complaint event arrived"),
                    ),
                ),
        };
        Ok(super::conditional(request.send().await, "status sweep")?.is_some())
    }
}

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

/// The suppression list: key `address` (S, lower-cased), with `reason` and `suppressed_at`.
pub struct DynamoDbSuppressionList {
    client: Client,
    table: String,
}

impl DynamoDbSuppressionList {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoDbSuppressionList {
            client,
            table: table.into(),
        }
    }
}

#[async_trait::async_trait]
impl SuppressionList for DynamoDbSuppressionList {
    async fn suppressed(
        &self,
        addresses: &[String],
        now: DateTime<Utc>,
    ) -> Result<Vec<String>, StoreError> {
        let mut wanted: Vec<String> = addresses.iter().map(|a| a.trim().to_lowercase()).collect();
        wanted.sort();
        wanted.dedup();
        let found: std::collections::HashSet<String> = batch_get(
            &self.client,
            &self.table,
            "address",
            &wanted,
            BatchRead::Projected("address, expires_at"),
            "suppression lookup",
        )
        .await?
        .iter()
        .filter(|item| get_n(item, "expires_at").is_none_or(|until| until > now.timestamp()))
        .filter_map(|item| get_s(item, "address"))
        .collect();
        Ok(addresses
            .iter()
            .filter(|a| found.contains(&a.trim().to_lowercase()))
            .cloned()
            .collect())
    }

    /// `expires_at` (epoch seconds) is also the table's TTL attribute: DynamoDB deletes expired
    /// soft entries eventually; lookups ignore them at once.
    async fn suppress_until(
        &self,
        address: &str,
        reason: &str,
        now: DateTime<Utc>,
        until: Option<DateTime<Utc>>,
    ) -> Result<(), StoreError> {
        let mut request = self
            .client
            .put_item()
            .table_name(&self.table)
            .item("address", s(address.trim().to_lowercase()))
            .item("reason", s(reason))
            .item("suppressed_at", n(ms(now)));
        if let Some(t) = until {
            request = request.item("expires_at", n(t.timestamp()));
        }
        request.send().await.map_err(err("suppress"))?;
        Ok(())
    }

    /// One conditional put: absent, or a soft entry ending before `until`.
    async fn suppress_soft(
        &self,
        address: &str,
        reason: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .item("address", s(address.trim().to_lowercase()))
            .item("reason", s(reason))
            .item("suppressed_at", n(ms(now)))
            .item("expires_at", n(until.timestamp()))
            .condition_expression("attribute_not_exists(address) OR expires_at < :until")
            .expression_attribute_values(":until", n(until.timestamp()))
            .send()
            .await;
        Ok(super::conditional(result, "suppress soft")?.is_some())
    }

    async fn remove(&self, address: &str) -> Result<bool, StoreError> {
        let out = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key("address", s(address.trim().to_lowercase()))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .send()
            .await
            .map_err(err("unsuppress"))?;
        Ok(out.attributes.is_some_and(|a| !a.is_empty()))
    }

    async fn list(
        &self,
        limit: usize,
        cursor: Option<String>,
    ) -> Result<(Vec<courier_core::ports::SuppressionEntry>, Option<String>), StoreError> {
        let out = self
            .client
            .scan()
            .table_name(&self.table)
            .limit(i32::try_from(limit.clamp(1, 1000)).unwrap_or(1000))
            .set_exclusive_start_key(cursor.map(|c| HashMap::from([("address".to_owned(), s(c))])))
            .send()
            .await
            .map_err(err("list suppressions"))?;
        let entries = out
            .items
            .unwrap_or_default()
            .iter()
            .filter_map(|item| {
                Some(courier_core::ports::SuppressionEntry {
                    address: get_s(item, "address")?,
                    reason: get_s(item, "reason").unwrap_or_default(),
                    suppressed_at: time(item, "suppressed_at").unwrap_or_default(),
                    expires_at: get_n(item, "expires_at")
                        .and_then(|t| DateTime::from_timestamp(t, 0)),
                })
            })
            .collect();
        let next = out
            .last_evaluated_key
            .and_then(|k| k.get("address").and_then(|v| v.as_s().ok()).cloned());
        Ok((entries, next))
    }
}

/// The control table: key `pk` (S) + `sk` (S). Breaker state lives at (`breaker`, provider),
/// poison fingerprints at (`poison`, fingerprint).
pub struct DynamoDbControlTable {
    client: Client,
    table: String,
    poison_ttl: Duration,
    poison_cache: tokio::sync::Mutex<Option<(Instant, std::collections::HashSet<String>)>>,
}

impl DynamoDbControlTable {
    pub fn new(client: Client, table: impl Into<String>, poison_ttl: Duration) -> Self {
        DynamoDbControlTable {
            client,
            table: table.into(),
            poison_ttl,
            poison_cache: tokio::sync::Mutex::new(None),
        }
    }

    /// Adds a fingerprint to the poison blocklist.
    pub async fn block_fingerprint(
        &self,
        fingerprint: &str,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.client
            .put_item()
            .table_name(&self.table)
            .item("pk", s("poison"))
            .item("sk", s(fingerprint))
            .item("reason", s(reason))
            .item("blocked_at", n(ms(now)))
            .send()
            .await
            .map_err(err("poison block"))?;
        *self.poison_cache.lock().await = None;
        Ok(())
    }

    async fn load_poison(&self) -> Result<std::collections::HashSet<String>, StoreError> {
        let mut set = std::collections::HashSet::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :p")
                .expression_attribute_values(":p", s("poison"))
                .projection_expression("sk")
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(err("poison list"))?;
            for item in out.items.unwrap_or_default() {
                if let Some(fp) = get_s(&item, "sk") {
                    set.insert(fp);
                }
            }
            match out.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => return Ok(set),
            }
        }
    }
}

#[async_trait::async_trait]
impl PoisonList for DynamoDbControlTable {
    /// The blocklist is small and changes rarely: it is read whole and cached for `poison_ttl`,
    /// so the hot path makes no call per message.
    async fn is_blocked(&self, fingerprint: &str) -> Result<bool, StoreError> {
        // Held across the load: concurrent records of a cold instance wait for one Query.
        let mut cache = self.poison_cache.lock().await;
        if let Some((at, set)) = cache.as_ref()
            && at.elapsed() < self.poison_ttl
        {
            return Ok(set.contains(fingerprint));
        }
        let set = self.load_poison().await?;
        let hit = set.contains(fingerprint);
        *cache = Some((Instant::now(), set));
        Ok(hit)
    }

    async fn block(
        &self,
        fingerprint: &str,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.block_fingerprint(fingerprint, reason, now).await
    }
}

#[async_trait::async_trait]
impl BreakerStore for DynamoDbControlTable {
    async fn load(&self, provider: &str) -> Result<Option<BreakerState>, StoreError> {
        let Some(item) = self
            .control_item("breaker", provider, "breaker load")
            .await?
        else {
            return Ok(None);
        };
        let Some(json) = get_s(&item, "state") else {
            return Ok(None);
        };
        serde_json::from_str(&json)
            .map(Some)
            .map_err(|e| StoreError::new("breaker load", e))
    }

    async fn save(
        &self,
        provider: &str,
        state: &BreakerState,
        expected: Option<u64>,
    ) -> Result<bool, StoreError> {
        let json = serde_json::to_string(state).map_err(|e| StoreError::new("breaker save", e))?;
        let mut req = self
            .client
            .put_item()
            .table_name(&self.table)
            .item("pk", s("breaker"))
            .item("sk", s(provider))
            .item("state", s(json))
            .item("mode", s(format!("{:?}", state.mode).to_lowercase()))
            .item("version", n(state.version));
        req = match expected {
            None => req.condition_expression("attribute_not_exists(pk)"),
            Some(v) => req
                .condition_expression("version = :v")
                .expression_attribute_values(":v", n(v)),
        };
        Ok(super::conditional(req.send().await, "breaker save")?.is_some())
    }
}

/// Error-code sightings live at (`code`, key) in the control table.
#[async_trait::async_trait]
impl Sightings for DynamoDbControlTable {
    async fn first_sighting(&self, key: &str, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .item("pk", s("code"))
            .item("sk", s(key))
            .item("first_seen", n(ms(now)))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        Ok(super::conditional(result, "code sighting")?.is_some())
    }
}

/// Counted events live at (`event#<key>`, `-`) in the control table (one partition per key: no
/// hot partition), expiring through the table's TTL; an expired item not yet deleted counts as
/// absent.
#[async_trait::async_trait]
impl courier_core::ports::EventLedger for DynamoDbControlTable {
    async fn first_entry(
        &self,
        key: &str,
        now: DateTime<Utc>,
        keep_until: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .item("pk", s(format!("event#{key}")))
            .item("sk", s("-"))
            .item("counted_at", n(ms(now)))
            .item("expires_at", n(keep_until.timestamp()))
            .condition_expression("attribute_not_exists(pk) OR expires_at < :now")
            .expression_attribute_values(":now", n(now.timestamp()))
            .send()
            .await;
        Ok(super::conditional(result, "event ledger")?.is_some())
    }
}

/// Send-rate schedules live at (`rate`, `<provider>`) in the control table: one number, `tat`,
/// the next free slot in microseconds (see [`courier_core::rate`]).
///
/// A reservation is usually one conditional update (`tat` within the horizon: move it on). When
/// that fails, the old value (returned with the failure, or read when an emulator does not
/// return it) tells why: booked past the horizon (refused, nothing written), or lagging behind
/// now or absent (restart the schedule at now, conditionally), or moved by another instance in
/// between (try again).
#[async_trait::async_trait]
impl SendSchedule for DynamoDbControlTable {
    async fn reserve(
        &self,
        key: &str,
        now_us: i64,
        cost_us: i64,
        max_ahead_us: i64,
    ) -> Result<Reservation, StoreError> {
        use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
        const TRIES: usize = 5;
        let mut last_seen = None;
        for _ in 0..TRIES {
            let moved = self
                .client
                .update_item()
                .table_name(&self.table)
                .key("pk", s("rate"))
                .key("sk", s(key))
                .update_expression("SET tat = tat + :cost")
                .condition_expression("tat BETWEEN :now AND :horizon")
                .expression_attribute_values(":cost", n(cost_us))
                .expression_attribute_values(":now", n(now_us))
                .expression_attribute_values(":horizon", n(now_us.saturating_add(max_ahead_us)))
                .return_values(aws_sdk_dynamodb::types::ReturnValue::UpdatedNew)
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .send()
                .await;
            let old = match moved {
                Ok(out) => {
                    let tat = out
                        .attributes
                        .as_ref()
                        .and_then(|a| get_n(a, "tat"))
                        .ok_or_else(|| StoreError::msg("send schedule", "no tat returned"))?;
                    return Ok(Reservation::Granted {
                        start_us: tat - cost_us,
                    });
                }
                Err(e) => match e.as_service_error() {
                    Some(UpdateItemError::ConditionalCheckFailedException(failed)) => {
                        match failed.item() {
                            Some(item) => get_n(item, "tat"),
                            None => self.read_tat(key).await?,
                        }
                    }
                    _ => return Err(err("send schedule")(e)),
                },
            };
            last_seen = old;
            match old {
                Some(tat) if tat > now_us.saturating_add(max_ahead_us) => {
                    return Ok(Reservation::Refused {
                        booked_until_us: tat,
                    });
                }
                // Moved into the window by another instance since: book on it.
                Some(tat) if tat >= now_us => continue,
                _ => {}
            }
            let restarted = self
                .client
                .update_item()
                .table_name(&self.table)
                .key("pk", s("rate"))
                .key("sk", s(key))
                .update_expression("SET tat = :next")
                .condition_expression("attribute_not_exists(tat) OR tat < :now")
                .expression_attribute_values(":next", n(now_us.saturating_add(cost_us)))
                .expression_attribute_values(":now", n(now_us))
                .send()
                .await;
            if super::conditional(restarted, "send schedule")?.is_some() {
                return Ok(Reservation::Granted { start_us: now_us });
            }
        }
        // Five lost races in a row: the schedule is hot; treat it as booked.
        Ok(Reservation::Refused {
            booked_until_us: last_seen.unwrap_or(now_us).max(now_us),
        })
    }
}

impl DynamoDbControlTable {
    async fn read_tat(&self, key: &str) -> Result<Option<i64>, StoreError> {
        let item = self.control_item("rate", key, "send schedule").await?;
        Ok(item.as_ref().and_then(|i| get_n(i, "tat")))
    }

    /// The control item (`pk`, `sk`), read consistently (it decides what happens next).
    async fn control_item(
        &self,
        pk: &str,
        sk: &str,
        operation: &'static str,
    ) -> Result<Option<HashMap<String, AttributeValue>>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", s(pk))
            .key("sk", s(sk))
            .consistent_read(true)
            .send()
            .await
            .map_err(err(operation))?;
        Ok(out.item)
    }
}

/// Reputation buckets live at (`reputation#<domain>`, `<bucket epoch seconds>`) in the control
/// table, counted with ADD (no read before write) and expiring through the table's TTL
/// (`expires_at`) a week after their hour.
#[async_trait::async_trait]
impl ReputationStore for DynamoDbControlTable {
    async fn add(
        &self,
        domain: &str,
        bucket: DateTime<Utc>,
        counts: &ReputationCounts,
    ) -> Result<(), StoreError> {
        self.client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(format!("reputation#{domain}")))
            .key("sk", s(format!("{:012}", bucket.timestamp())))
            .update_expression(
                "ADD sent :s, delivered :d, bounced :b, complained :c SET expires_at = :exp",
            )
            .expression_attribute_values(":s", n(counts.sent))
            .expression_attribute_values(":d", n(counts.delivered))
            .expression_attribute_values(":b", n(counts.bounced))
            .expression_attribute_values(":c", n(counts.complained))
            .expression_attribute_values(":exp", n(bucket.timestamp() + 7 * 86_400))
            .send()
            .await
            .map_err(err("reputation add"))?;
        Ok(())
    }

    async fn window(
        &self,
        domain: &str,
        since: DateTime<Utc>,
    ) -> Result<ReputationCounts, StoreError> {
        let mut sum = ReputationCounts::default();
        let mut cursor = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :p AND sk >= :since")
                .expression_attribute_values(":p", s(format!("reputation#{domain}")))
                .expression_attribute_values(":since", s(format!("{:012}", since.timestamp())))
                .set_exclusive_start_key(cursor)
                .send()
                .await
                .map_err(err("reputation window"))?;
            for item in out.items() {
                let count = |k: &str| u64::try_from(get_n(item, k).unwrap_or(0)).unwrap_or(0);
                sum.merge(&ReputationCounts {
                    sent: count("sent"),
                    delivered: count("delivered"),
                    bounced: count("bounced"),
                    complained: count("complained"),
                });
            }
            cursor = out.last_evaluated_key;
            if cursor.is_none() {
                return Ok(sum);
            }
        }
    }
}
