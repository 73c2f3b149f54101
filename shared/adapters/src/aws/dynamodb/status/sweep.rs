//! The sweeper's side of the status table: its sparse, sharded indexes (`by_open`, `by_outbox`)
//! read a page at a time, and the marks it writes on what it finds.

use super::*;

impl DynamoDbStatusStore {
    /// The items of a sparse, sharded index (`{prefix}#{shard}` in `keys.0`) whose `keys.1`
    /// is before `before`: each shard queried until it gave `limit` items or ran out.
    async fn query_shards(
        &self,
        index: &str,
        keys: (&str, &str),
        prefix: &str,
        before: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<HashMap<String, AttributeValue>>, StoreError> {
        let (hash, range) = keys;
        let mut found = Vec::new();
        for shard in 0..OpenState::SHARDS {
            let mut cursor = None;
            let mut taken = 0;
            loop {
                let out = self
                    .client
                    .query()
                    .table_name(&self.table)
                    .index_name(index)
                    .key_condition_expression("#h = :k AND #r < :before")
                    .expression_attribute_names("#h", hash)
                    .expression_attribute_names("#r", range)
                    .expression_attribute_values(":k", s(format!("{prefix}#{shard}")))
                    .expression_attribute_values(":before", n(ms(before)))
                    .limit(i32::try_from(limit.clamp(1, 1000)).unwrap_or(1000))
                    .set_exclusive_start_key(cursor)
                    .send()
                    .await
                    .map_err(err("status index query"))?;
                taken += out.items().len();
                found.extend(out.items().iter().cloned());
                cursor = out.last_evaluated_key;
                if cursor.is_none() || taken >= limit {
                    break;
                }
            }
        }
        Ok(found)
    }

    /// [`StatusStore::open_before`]: a Query of each shard of the sparse `by_open` index.
    pub(super) async fn open_index_before(
        &self,
        state: OpenState,
        before: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<JobRecord>, StoreError> {
        let items = self
            .query_shards(
                OPEN_INDEX,
                ("open_state", "open_at"),
                state.as_str(),
                before,
                limit,
            )
            .await?;
        // The index projects a few attributes (`status`, `attempt`, `updated_at`, ...) and its
        // keys: a waiting job's `open_at` is when its copy is due.
        let mut found: Vec<JobRecord> = items
            .iter()
            .filter_map(|item| {
                let mut record = record_of(item)?;
                if state == OpenState::Waiting {
                    record.copy_due = time(item, "open_at");
                }
                Some(record)
            })
            .collect();
        found.sort_by_key(|r| r.updated_at);
        found.truncate(limit);
        Ok(found)
    }

    /// [`StatusStore::sweep`]: one conditional write per mark.
    pub(super) async fn mark_swept(
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
        let request = match &mark {
            SweepMark::LeaseExpired => request
                .update_expression(format!(
                    "SET #s = :unknown, unknown_since = :now, updated_at = :now, \
                     open_state = :os, open_at = :due, copy_due = :due, {APPEND_HISTORY} \
                     REMOVE lease_owner, lease_until"
                ))
                .condition_expression("#s = :processing AND updated_at = :u AND lease_until < :now")
                // The dead worker's copy comes back by the queue's visibility timeout.
                .expression_attribute_values(":os", s(OpenState::Waiting.key(&found.message_id)))
                .expression_attribute_values(":due", n(ms(now + REDELIVERY_BOUND)))
                .expression_attribute_values(":unknown", s(Status::Unknown.as_str()))
                .expression_attribute_values(":processing", s(Status::Processing.as_str()))
                .expression_attribute_values(
                    ":h",
                    history_entry(
                        now,
                        Status::Unknown,
                        found.attempt,
                        "sweeper",
                        Some(&mark.detail(found)),
                    ),
                ),
            SweepMark::NoOutcome => request
                .update_expression(format!(
                    "SET swept_at = :now, {APPEND_HISTORY} REMOVE open_state, open_at"
                ))
                .condition_expression(
                    "#s = :sent AND updated_at = :u AND attribute_exists(open_state)",
                )
                .expression_attribute_values(":sent", s(Status::SentToProvider.as_str()))
                .expression_attribute_values(
                    ":h",
                    history_entry(
                        now,
                        Status::SentToProvider,
                        found.attempt,
                        "sweeper",
                        Some(&mark.detail(found)),
                    ),
                ),
            SweepMark::CopyOverdue => request
                .update_expression(format!(
                    "SET swept_at = :now, open_state = :overdue, open_at = :now, {APPEND_HISTORY}"
                ))
                // Still waiting in the index: a record flagged already is not flagged again.
                .condition_expression("#s = :found AND updated_at = :u AND open_state = :waiting")
                .expression_attribute_values(":found", s(found.status.as_str()))
                .expression_attribute_values(
                    ":waiting",
                    s(OpenState::Waiting.key(&found.message_id)),
                )
                .expression_attribute_values(
                    ":overdue",
                    s(OpenState::Overdue.key(&found.message_id)),
                )
                .expression_attribute_values(
                    ":h",
                    history_entry(
                        now,
                        found.status,
                        found.attempt,
                        "sweeper",
                        Some(&mark.detail(found)),
                    ),
                ),
        };
        Ok(crate::aws::conditional(request.send().await, "status sweep")?.is_some())
    }

    /// [`StatusStore::outbox_before`]: a Query of each shard of the sparse, keys-only
    /// `by_outbox` index.
    pub(super) async fn outbox_index_before(
        &self,
        before: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let items = self
            .query_shards(
                OUTBOX_INDEX,
                ("outbox", "outbox_at"),
                "outbox",
                before,
                limit,
            )
            .await?;
        let mut found: Vec<(i64, String)> = items
            .iter()
            .filter_map(|item| Some((get_n(item, "outbox_at")?, get_s(item, "message_id")?)))
            .collect();
        found.sort();
        found.truncate(limit);
        Ok(found.into_iter().map(|(_, id)| id).collect())
    }
}
