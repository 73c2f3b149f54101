//! Dead-letter adapters: the SQS dead-letter queues, the DynamoDB letter index, the S3 archive,
//! and the sink the send function writes dead letters through (index first, then queue).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use chrono::DateTime;

use super::sqs::SqsDeadLetterSink;
use super::store_error as err;
use courier_core::claim_check::{RedeemError, redeem};
use courier_core::letters::{IndexedLetter, LetterFilter, LetterState};
use courier_core::ports::{
    ArchiveStore, DeadLetter, DeadLetterSink, LetterIndex, LetterQueue, PayloadStore, QueuedLetter,
    StoreError,
};
use tracing::warn;

/// A dead-letter queue (Courier's, or the redrive DLQ of the send and retry queues). Claim-checked bodies are
/// redeemed from the payload store, when one is set.
pub struct SqsLetterQueue {
    sqs: aws_sdk_sqs::Client,
    url: String,
    payloads: Option<Arc<dyn PayloadStore>>,
}

impl SqsLetterQueue {
    pub fn new(sqs: aws_sdk_sqs::Client, url: impl Into<String>) -> Self {
        SqsLetterQueue {
            sqs,
            url: url.into(),
            payloads: None,
        }
    }

    /// Redeems claim-checked bodies from `payloads`.
    pub fn with_payloads(self, payloads: Arc<dyn PayloadStore>) -> Self {
        SqsLetterQueue {
            payloads: Some(payloads),
            ..self
        }
    }
}

fn secs(d: Duration) -> i32 {
    i32::try_from(d.as_secs().min(12 * 3600)).unwrap_or(12 * 3600)
}

#[async_trait::async_trait]
impl LetterQueue for SqsLetterQueue {
    async fn receive(&self, max: usize, hide: Duration) -> Result<Vec<QueuedLetter>, StoreError> {
        let out = self
            .sqs
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(i32::try_from(max.clamp(1, 10)).unwrap_or(10))
            .visibility_timeout(secs(hide))
            .wait_time_seconds(1)
            .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
            .send()
            .await
            .map_err(err("receive letters"))?;
        let mut letters = Vec::new();
        for m in out.messages.unwrap_or_default() {
            let Some(receipt) = m.receipt_handle else {
                continue;
            };
            let sent_ms: i64 = m
                .attributes
                .as_ref()
                .and_then(|a| a.get(&MessageSystemAttributeName::SentTimestamp))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let raw = m.body.unwrap_or_default();
            let body = match redeem(self.payloads.as_deref(), &raw).await {
                Ok(body) => body.into_owned(),
                // Unreadable for now: this batch fails, and the message is received again.
                Err(RedeemError::Store(e)) => return Err(e),
                // Gone or altered: the pointer itself is what is left (its key and digest).
                Err(e) => {
                    warn!(error = %e, "a claim-checked letter cannot be redeemed; kept as its pointer");
                    raw
                }
            };
            letters.push(QueuedLetter {
                receipt,
                queue_message_id: m.message_id.unwrap_or_default(),
                body,
                sent_at: DateTime::from_timestamp_millis(sent_ms).unwrap_or_default(),
            });
        }
        Ok(letters)
    }

    async fn delete(&self, receipts: &[String]) -> Result<(), StoreError> {
        for chunk in receipts.chunks(10) {
            let mut request = self.sqs.delete_message_batch().queue_url(&self.url);
            for (i, receipt) in chunk.iter().enumerate() {
                let entry = aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(receipt)
                    .build()
                    .map_err(|e| StoreError::new("delete letters", e))?;
                request = request.entries(entry);
            }
            let out = request.send().await.map_err(err("delete letters"))?;
            if !out.failed.is_empty() {
                return Err(StoreError::msg(
                    "delete letters",
                    format!("{} deletes failed", out.failed.len()),
                ));
            }
        }
        Ok(())
    }

    async fn hide(&self, receipt: &str, hide: Duration) -> Result<(), StoreError> {
        self.sqs
            .change_message_visibility()
            .queue_url(&self.url)
            .receipt_handle(receipt)
            .visibility_timeout(secs(hide))
            .send()
            .await
            .map_err(err("hide letter"))?;
        Ok(())
    }
}

/// DynamoDB items hold at most 400 KB: a record larger than this keeps its payload in the queue
/// copy and the archive only.
const MAX_RECORD_IN_INDEX: usize = 300 * 1024;

/// How long the S3 archive keeps a letter by default (the template's `ArchiveRetentionDays`).
pub const DEFAULT_ARCHIVE_RETENTION_DAYS: i64 = 365;

/// `COURIER_ARCHIVE_RETENTION_DAYS` as written: a whole number of days in 1..=3653 (S3
/// lifecycle's and the template's range), or why not.
pub fn parse_archive_retention_days(text: &str) -> Result<i64, String> {
    text.trim()
        .parse()
        .ok()
        .filter(|n| (1..=3653).contains(n))
        .ok_or_else(|| format!("{text:?} is not a whole number of days in 1..=3653"))
}

/// How much longer than the archive an index entry lives: a letter reaches the archive up to
/// 14 days (the DLQ's retention) after it was dead-lettered, so the entry expires after the
/// archived copy it points to, never before.
pub const INDEX_MARGIN_DAYS: i64 = 30;

/// The letter index: key `letter_id` (S); `category`, `class`, `campaign_id`, `provider`,
/// `dead_lettered_at` (epoch ms) as top-level attributes for queries; `record` is the full
/// dead letter as JSON; `state`, `archive_key`, `audit`; `expires_at` (epoch seconds, the
/// table's TTL) the archive's retention plus [`INDEX_MARGIN_DAYS`] after the dead-lettering.
pub struct DynamoDbLetterIndex {
    client: aws_sdk_dynamodb::Client,
    table: String,
    keep: chrono::Duration,
}

impl DynamoDbLetterIndex {
    pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        DynamoDbLetterIndex {
            client,
            table: table.into(),
            keep: chrono::Duration::days(DEFAULT_ARCHIVE_RETENTION_DAYS + INDEX_MARGIN_DAYS),
        }
    }

    /// Entries outlive an archive that keeps letters `days` days.
    pub fn outliving(self, archive_retention_days: i64) -> Self {
        DynamoDbLetterIndex {
            keep: chrono::Duration::days(archive_retention_days + INDEX_MARGIN_DAYS),
            ..self
        }
    }
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

/// The index item of a letter (also used to seed benchmarks with BatchWriteItem).
pub fn item_of(l: &IndexedLetter) -> Result<HashMap<String, AttributeValue>, StoreError> {
    let mut record =
        serde_json::to_string(&l.record).map_err(|e| StoreError::new("index letter", e))?;
    if record.len() > MAX_RECORD_IN_INDEX {
        let mut slim = l.record.clone();
        slim.payload = None;
        slim.payload_base64 = None;
        record = serde_json::to_string(&slim).map_err(|e| StoreError::new("index letter", e))?;
    }
    let r = &l.record;
    let mut item = HashMap::from([
        ("letter_id".to_owned(), s(&l.letter_id)),
        ("state".to_owned(), s(l.state.as_str())),
        ("category".to_owned(), s(r.category.as_str())),
        ("class".to_owned(), s(r.class.as_str())),
        (
            "dead_lettered_at".to_owned(),
            AttributeValue::N(l.dead_lettered_at.timestamp_millis().to_string()),
        ),
        ("record".to_owned(), s(record)),
        (
            "audit".to_owned(),
            AttributeValue::L(l.audit.iter().map(s).collect()),
        ),
    ]);
    for (k, v) in [
        ("campaign_id", &r.campaign_id),
        ("provider", &r.provider),
        ("message_id", &r.message_id),
    ] {
        if let Some(v) = v.as_deref().filter(|v| !v.is_empty()) {
            item.insert(k.to_owned(), s(v));
        }
    }
    if let Some(key) = &l.archive_key {
        item.insert("archive_key".to_owned(), s(key));
    }
    Ok(item)
}

fn from_item(item: &HashMap<String, AttributeValue>) -> Option<IndexedLetter> {
    let get = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
    Some(IndexedLetter {
        letter_id: get("letter_id")?,
        state: LetterState::parse(&get("state")?)?,
        dead_lettered_at: item
            .get("dead_lettered_at")
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse().ok())
            .and_then(DateTime::from_timestamp_millis)?,
        archive_key: get("archive_key"),
        record: serde_json::from_str(&get("record")?).ok()?,
        audit: item
            .get("audit")
            .and_then(|v| v.as_l().ok())
            .map(|l| l.iter().filter_map(|v| v.as_s().ok().cloned()).collect())
            .unwrap_or_default(),
    })
}

#[async_trait::async_trait]
impl LetterIndex for DynamoDbLetterIndex {
    async fn put_new(&self, letter: &IndexedLetter) -> Result<bool, StoreError> {
        let mut item = item_of(letter)?;
        item.insert(
            "expires_at".to_owned(),
            AttributeValue::N(
                (letter.dead_lettered_at + self.keep)
                    .timestamp()
                    .to_string(),
            ),
        );
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(letter_id)")
            .send()
            .await;
        Ok(super::conditional(result, "index letter")?.is_some())
    }

    async fn get_many(&self, ids: &[String]) -> Result<Vec<IndexedLetter>, StoreError> {
        let mut unique: Vec<&String> = ids.iter().collect();
        unique.sort();
        unique.dedup();
        let unique: Vec<String> = unique.into_iter().cloned().collect();
        let found = super::dynamodb::batch_get(
            &self.client,
            &self.table,
            "letter_id",
            &unique,
            super::dynamodb::BatchRead::Consistent,
            "get letters",
        )
        .await?
        .iter()
        .filter_map(from_item)
        .collect();
        Ok(found)
    }

    async fn transition(
        &self,
        id: &str,
        from: LetterState,
        to: LetterState,
        archive_key: Option<&str>,
        audit: Option<&str>,
    ) -> Result<bool, StoreError> {
        let mut set = vec!["#st = :to"];
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("letter_id", s(id))
            .condition_expression("#st = :from")
            .expression_attribute_names("#st", "state")
            .expression_attribute_values(":from", s(from.as_str()))
            .expression_attribute_values(":to", s(to.as_str()));
        if let Some(key) = archive_key {
            set.push("archive_key = :key");
            request = request.expression_attribute_values(":key", s(key));
        }
        if let Some(a) = audit {
            set.push("audit = list_append(if_not_exists(audit, :empty), :audit)");
            request = request
                .expression_attribute_values(":empty", AttributeValue::L(vec![]))
                .expression_attribute_values(":audit", AttributeValue::L(vec![s(a)]));
        }
        let mut expression = format!("SET {}", set.join(", "));
        if archive_key.is_none() {
            expression.push_str(" REMOVE archive_key");
        }
        let result = request.update_expression(expression).send().await;
        Ok(super::conditional(result, "letter transition")?.is_some())
    }

    /// Queries the `by_campaign` or `by_category` index when the filter names a campaign or a
    /// category (newest first, time range pushed down), scans otherwise; the rest of the filter
    /// is applied to each item. Returns at least `limit` matches unless the end is reached; the
    /// cursor resumes exactly after the last item read.
    async fn search(
        &self,
        filter: &LetterFilter,
        limit: usize,
        cursor: Option<String>,
    ) -> Result<(Vec<IndexedLetter>, Option<String>), StoreError> {
        let mut start = cursor.as_deref().map(decode_cursor).transpose()?;
        let mut page = Vec::new();
        // Read about as many items as asked for when DynamoDB applies the whole filter; read in
        // larger pages when part of it is applied here.
        let pushed_down = filter.text.is_none()
            && filter.message_id.is_none()
            && filter.provider.is_none()
            && filter.class.is_none()
            && filter.state.is_none()
            && !(filter.campaign.is_some() && filter.category.is_some())
            && !(filter.campaign.is_none()
                && filter.category.is_none()
                && (filter.since.is_some() || filter.until.is_some()));
        let page_size =
            i32::try_from(if pushed_down { limit.max(1) } else { 1000 }).unwrap_or(1000);
        loop {
            let (items, last) = match (&filter.campaign, filter.category) {
                (Some(campaign), _) => {
                    self.query(
                        BY_CAMPAIGN,
                        "campaign_id",
                        campaign,
                        filter,
                        start.take(),
                        page_size,
                    )
                    .await?
                }
                (None, Some(category)) => {
                    self.query(
                        BY_CATEGORY,
                        "category",
                        category.as_str(),
                        filter,
                        start.take(),
                        page_size,
                    )
                    .await?
                }
                (None, None) => {
                    let out = self
                        .client
                        .scan()
                        .table_name(&self.table)
                        .limit(page_size)
                        .set_exclusive_start_key(start.take())
                        .send()
                        .await
                        .map_err(err("search letters"))?;
                    (out.items.unwrap_or_default(), out.last_evaluated_key)
                }
            };
            page.extend(
                items
                    .iter()
                    .filter_map(from_item)
                    .filter(|l| filter.matches(l)),
            );
            match last.filter(|k| !k.is_empty()) {
                Some(key) if page.len() < limit => start = Some(key),
                Some(key) => return Ok((page, Some(encode_cursor(&key)))),
                None => return Ok((page, None)),
            }
        }
    }
}

/// Index names of the letter index table.
pub const BY_CATEGORY: &str = "by_category";
pub const BY_CAMPAIGN: &str = "by_campaign";

type Key = HashMap<String, AttributeValue>;

impl DynamoDbLetterIndex {
    async fn query(
        &self,
        index: &str,
        hash: &str,
        value: &str,
        filter: &LetterFilter,
        start: Option<Key>,
        page_size: i32,
    ) -> Result<(Vec<Key>, Option<Key>), StoreError> {
        let ms =
            |t: chrono::DateTime<chrono::Utc>| AttributeValue::N(t.timestamp_millis().to_string());
        let mut condition = format!("{hash} = :h");
        let mut request = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(index)
            .scan_index_forward(false)
            .limit(page_size)
            .expression_attribute_values(":h", s(value))
            .set_exclusive_start_key(start);
        if let Some(a) = filter.since {
            condition.push_str(" AND dead_lettered_at >= :a");
            request = request.expression_attribute_values(":a", ms(a));
            if let Some(b) = filter.until {
                condition = format!("{hash} = :h AND dead_lettered_at BETWEEN :a AND :b");
                request = request
                    .expression_attribute_values(":b", ms(b - chrono::Duration::milliseconds(1)));
            }
        } else if let Some(b) = filter.until {
            condition.push_str(" AND dead_lettered_at < :b");
            request = request.expression_attribute_values(":b", ms(b));
        }
        let out = request
            .key_condition_expression(condition)
            .send()
            .await
            .map_err(err("search letters"))?;
        Ok((out.items.unwrap_or_default(), out.last_evaluated_key))
    }
}

/// A cursor is the last key read, as JSON (`{"letter_id": {"S": "..."}, ...}`).
fn encode_cursor(key: &Key) -> String {
    let map: serde_json::Map<String, serde_json::Value> = key
        .iter()
        .filter_map(|(k, v)| match v {
            AttributeValue::S(x) => Some((k.clone(), serde_json::json!({ "S": x }))),
            AttributeValue::N(x) => Some((k.clone(), serde_json::json!({ "N": x }))),
            _ => None,
        })
        .collect();
    serde_json::Value::Object(map).to_string()
}

fn decode_cursor(cursor: &str) -> Result<Key, StoreError> {
    let bad = || {
        StoreError::msg(
            "search letters",
            format!("not a cursor this command printed: {cursor:?}"),
        )
    };
    let value: serde_json::Value = serde_json::from_str(cursor).map_err(|_| bad())?;
    value
        .as_object()
        .ok_or_else(bad)?
        .iter()
        .map(|(k, v)| {
            match (
                v.get("S").and_then(|x| x.as_str()),
                v.get("N").and_then(|x| x.as_str()),
            ) {
                (Some(x), _) => Ok((k.clone(), s(x))),
                (None, Some(x)) => Ok((k.clone(), AttributeValue::N(x.to_owned()))),
                _ => Err(bad()),
            }
        })
        .collect()
}

/// The archive bucket: objects are written once (never overwritten), server-side encrypted.
pub struct S3ArchiveStore {
    client: aws_sdk_s3::Client,
    bucket: String,
}

impl S3ArchiveStore {
    pub fn new(client: aws_sdk_s3::Client, bucket: impl Into<String>) -> Self {
        S3ArchiveStore {
            client,
            bucket: bucket.into(),
        }
    }
}

#[async_trait::async_trait]
impl ArchiveStore for S3ArchiveStore {
    async fn put_new(&self, key: &str, bytes: Vec<u8>) -> Result<bool, StoreError> {
        if self.exists(key).await? {
            return Ok(false);
        }
        let result = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .body(bytes.into())
            .content_type("application/x-ndjson")
            .content_encoding("gzip")
            .server_side_encryption(aws_sdk_s3::types::ServerSideEncryption::Aes256)
            .if_none_match("*")
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 412) => Ok(false),
            Err(e) => Err(err("archive put")(e)),
        }
    }

    async fn exists(&self, key: &str) -> Result<bool, StoreError> {
        match self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_not_found()) => Ok(false),
            Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 404) => Ok(false),
            Err(e) => Err(err("archive head")(e)),
        }
    }
}

/// The send function's dead-letter sink: the letter is indexed first (searchable at once,
/// idempotent on its id), then queued for the archiver with its full record.
pub struct IndexedDeadLetterSink {
    index: DynamoDbLetterIndex,
    queue: SqsDeadLetterSink,
}

impl IndexedDeadLetterSink {
    pub fn new(index: DynamoDbLetterIndex, queue: SqsDeadLetterSink) -> Self {
        IndexedDeadLetterSink { index, queue }
    }
}

#[async_trait::async_trait]
impl DeadLetterSink for IndexedDeadLetterSink {
    async fn put(&self, letter: &DeadLetter) -> Result<(), StoreError> {
        let indexed = IndexedLetter {
            letter_id: letter.id.clone(),
            state: LetterState::Live,
            dead_lettered_at: letter.last_failure_at,
            archive_key: None,
            record: letter.clone(),
            audit: Vec::new(),
        };
        // Already indexed: a redelivered copy dead-lettered again; queue it anyway (the archiver
        // archives a letter once, whatever the number of its queue copies).
        self.index.put_new(&indexed).await?;
        self.queue.put(letter).await
    }
}

/// Starts a whole-queue redrive of a dead-letter queue (SQS StartMessageMoveTask): every
/// message, no filter, no audit, back to the queues they came from or to `destination_arn`.
/// Returns the task handle.
pub async fn redrive_all(
    sqs: &aws_sdk_sqs::Client,
    source_arn: &str,
    destination_arn: Option<&str>,
    per_second: i32,
) -> Result<String, StoreError> {
    let out = sqs
        .start_message_move_task()
        .source_arn(source_arn)
        .set_destination_arn(destination_arn.map(str::to_owned))
        .max_number_of_messages_per_second(per_second.clamp(1, 500))
        .send()
        .await
        .map_err(err("start message move task"))?;
    Ok(out.task_handle.unwrap_or_default())
}
