//! The status table: claims, status writes, the open index and the provider-message-id index.

use super::*;

mod sweep;

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
            .update_expression(format!("SET #s = :unknown, unknown_since = :now, updated_at = :now, open_state = :os, open_at = :due, copy_due = :due, {APPEND_HISTORY} REMOVE lease_owner, lease_until"))
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
            // The copy that found the lease expired comes back when the grace window closes.
            .expression_attribute_values(":os", s(OpenState::Waiting.key(&req.message_id)))
            .expression_attribute_values(":due", n(ms(req.now + req.grace)))
            .send()
            .await;
        Ok(crate::aws::conditional(result, "status mark unknown")?.is_some())
    }
}

impl DynamoDbStatusStore {
    /// The UpdateItem every status write starts from: the key, and the values of `update`'s
    /// status (`#s`, `:s`), generation (`:a`), times (`:now`, `:exp`) and history entry (`:h`).
    fn status_base(
        &self,
        update: &StatusUpdate,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .key("message_id", s(&update.message_id))
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
            )
    }

    /// The UpdateItem of a status write (`update`'s status, generation, history entry, open
    /// index, outbox and recipients), without its condition: [`StatusStore::finish`] and
    /// [`StatusStore::abandon`] add theirs.
    fn status_write(
        &self,
        update: &StatusUpdate,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        let marks = open_marks(update);
        let mut set = vec![
            "#s = :s",
            "attempt = :a",
            "updated_at = :now",
            "expires_at = :exp",
            APPEND_HISTORY,
        ];
        // A status write ends the sweeper's flag of the state it leaves (the history keeps it).
        let mut remove = vec!["lease_owner", "lease_until", "swept_at"];
        set.extend(marks.set);
        remove.extend(marks.remove);
        let outbox = outbox_marks(&update.message_id, update.status, ":a");
        if let Some((clause, _)) = &outbox {
            set.push(clause);
        }
        let mut req = self.status_base(update);
        for (name, value) in marks.values {
            req = req.expression_attribute_values(name, value);
        }
        if let Some((_, shard)) = &outbox {
            req = req.expression_attribute_values(":ob", shard.clone());
        }
        if let Some(p) = &update.provider {
            set.push("provider = :p");
            req = req.expression_attribute_values(":p", s(p));
        }
        if let Some(id) = &update.provider_message_id {
            set.push("provider_message_id = :pid");
            req = req.expression_attribute_values(":pid", s(id));
        }
        if update.status == Status::Unknown {
            set.push("unknown_since = :now");
        }
        if let Some(list) = &update.recipients {
            set.extend(super::recipients::SET_ROLL);
            for (name, value) in super::recipients::roll_values(
                list,
                update.now,
                update.detail.as_deref(),
                &update.recipient_notes,
            ) {
                req = req.expression_attribute_values(name, value);
            }
        }
        req.update_expression(expression(&set, &remove))
    }

    /// An UpdateItem that appends `entry` to the history while the job is still in
    /// `entry.status` at generation `entry.attempt`, with `set` (clauses ending in `, `) and
    /// `remove` (` REMOVE ...`) besides.
    fn append_while(
        &self,
        message_id: &str,
        entry: &HistoryEntry,
        set: &str,
        remove: &str,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .key("message_id", s(message_id))
            .update_expression(format!("SET {set}{APPEND_HISTORY}{remove}"))
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
     OR (attempt < :a AND #s = :processing AND lease_until <= :now) \
     OR (attempt < :a AND #s = :bounced_transient)";

impl DynamoDbStatusStore {
    /// The claim as an update (not a put: the record keeps its history), with the job's trace
    /// and facts when it has them, and the body to resend from (removed when it has none). The
    /// earlier send's provider message id and recipients go (the next ones are this send's,
    /// whoever records it; their timeline stays); `resend_of` stays (a late copy of the bounce it
    /// names is known for what it is).
    fn claim_update(req: &ClaimRequest) -> String {
        let mut set = vec![
            "#s = :processing",
            "attempt = :a",
            "lease_owner = :owner",
            "lease_until = :lu",
            "updated_at = :now",
            "expires_at = :exp",
            "open_state = :os",
            "open_at = :now",
            APPEND_HISTORY,
        ];
        if req.trace_id.is_some() {
            set.push("trace_id = :trace");
        }
        set.extend(facts_marks(&req.facts, false).0);
        let mut remove = vec![
            "unknown_since",
            "swept_at",
            "copy_due",
            "provider_message_id",
            "rcpt",
        ];
        if req.payload.is_some() {
            set.push("payload = :body");
        } else {
            remove.push("payload");
        }
        expression(&set, &remove)
    }

    fn claim_values(&self, req: &ClaimRequest) -> HashMap<String, AttributeValue> {
        let mut values = HashMap::from([
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
                    Some(&req.history_detail()),
                ),
            ),
            (":a".to_owned(), n(req.attempt)),
            (":pending".to_owned(), s(Status::Pending.as_str())),
            (":deferred".to_owned(), s(Status::Deferred.as_str())),
            (":unknown".to_owned(), s(Status::Unknown.as_str())),
            (":processing".to_owned(), s(Status::Processing.as_str())),
            (
                ":bounced_transient".to_owned(),
                s(Status::BouncedTransient.as_str()),
            ),
            (":cutoff".to_owned(), n(ms(req.now - req.grace))),
            (":now".to_owned(), n(ms(req.now))),
        ]);
        if let Some(trace) = &req.trace_id {
            values.insert(":trace".to_owned(), s(trace));
        }
        if let Some(body) = &req.payload {
            values.insert(":body".to_owned(), s(body));
        }
        for (name, value) in facts_marks(&req.facts, false).1 {
            values.insert(name.to_owned(), value);
        }
        values
    }

    /// One conditional UpdateItem; a refusal returns the old item
    /// (ReturnValuesOnConditionCheckFailure) so a duplicate costs no extra read.
    async fn claim_put(&self, req: &ClaimRequest) -> Result<Attempt, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("message_id", s(&req.message_id))
            .update_expression(Self::claim_update(req))
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
            .map(|a| courier_core::mailbox::address_key(a))
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
            .update_expression(Self::claim_update(req))
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
                        .filter(|a| hit.contains(&&courier_core::mailbox::address_key(a)))
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
        self.status_write(update)
            .condition_expression("lease_owner = :owner OR #s = :unknown")
            .expression_attribute_values(":owner", s(&update.owner))
            .expression_attribute_values(":unknown", s(Status::Unknown.as_str()))
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

    async fn abandon(&self, update: &StatusUpdate) -> Result<bool, StoreError> {
        let result = self
            .status_write(update)
            .condition_expression(
                "#s IN (:deferred, :pending) AND attempt = :a AND attribute_not_exists(lease_owner)",
            )
            .expression_attribute_values(":deferred", s(Status::Deferred.as_str()))
            .expression_attribute_values(":pending", s(Status::Pending.as_str()))
            .send()
            .await;
        Ok(crate::aws::conditional(result, "status abandon")?.is_some())
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
        // The provider that reports outcomes is this write's.
        let marks = open_marks(update);
        let mut set = vec![
            "#s = :s",
            "attempt = if_not_exists(attempt, :a)",
            "updated_at = :now",
            "expires_at = :exp",
            APPEND_HISTORY,
        ];
        set.extend(marks.set);
        // The lease ends, as the memory store's: a send function's late status write of a send
        // this write recorded (SES's Send event) would take the record back.
        let mut remove = vec!["lease_owner", "lease_until", "swept_at"];
        remove.extend(marks.remove);
        let outbox = outbox_marks(
            &update.message_id,
            update.status,
            "if_not_exists(attempt, :a)",
        );
        if let Some((clause, _)) = &outbox {
            set.push(clause);
        }
        let (facts_set, facts_values) = update
            .facts
            .as_ref()
            .map(|f| facts_marks(f, true))
            .unwrap_or_default();
        set.extend(facts_set);
        let mut req = self.status_base(update).condition_expression(condition);
        for (name, value) in marks.values {
            req = req.expression_attribute_values(name, value);
        }
        for (placeholder, status) in placeholders.iter().zip(&sources) {
            req = req.expression_attribute_values(placeholder, s(status.as_str()));
        }
        for (name, value) in facts_values {
            req = req.expression_attribute_values(name, value);
        }
        if let Some((_, shard)) = &outbox {
            req = req.expression_attribute_values(":ob", shard.clone());
        }
        // Provider evidence (an SES event resolving an ambiguous send) keeps the provider message
        // id where the record has none, so later events without our header still find the job.
        if let Some(id) = &update.provider_message_id {
            set.push("provider_message_id = if_not_exists(provider_message_id, :pid)");
            req = req.expression_attribute_values(":pid", s(id));
        }
        req = req.update_expression(expression(&set, &remove));
        // Not allowed from the current status: a late or duplicate write, absorbed.
        crate::aws::conditional(req.send().await, "status record").map(|_| ())
    }

    async fn get(&self, message_id: &str) -> Result<Option<JobRecord>, StoreError> {
        Ok(self.read(message_id).await?.as_ref().and_then(record_of))
    }

    async fn get_many(&self, message_ids: &[String]) -> Result<Vec<JobRecord>, StoreError> {
        let mut keys = message_ids.to_vec();
        keys.sort();
        keys.dedup();
        let items = batch_get(
            &self.client,
            &self.table,
            "message_id",
            &keys,
            BatchRead::Consistent,
            "status get many",
        )
        .await?;
        Ok(items.iter().filter_map(record_of).collect())
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
        let result = self.append_while(message_id, entry, "", "").send().await;
        Ok(crate::aws::conditional(result, "status note")?.is_some())
    }

    async fn rewait(
        &self,
        message_id: &str,
        entry: &HistoryEntry,
        copy_due: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        if OpenState::of(entry.status, None) != Some(OpenState::Waiting) {
            return Ok(false);
        }
        let result = self
            .append_while(
                message_id,
                entry,
                "open_state = :os, open_at = :due, copy_due = :due, ",
                " REMOVE swept_at",
            )
            .expression_attribute_values(":os", s(OpenState::Waiting.key(message_id)))
            .expression_attribute_values(":due", n(ms(copy_due)))
            .send()
            .await;
        Ok(crate::aws::conditional(result, "status rewait")?.is_some())
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
                "SET #s = :pending, attempt = :next, updated_at = :now, {APPEND_HISTORY} REMOVE open_state, open_at, copy_due"
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
        Ok(crate::aws::conditional(result, "status reopen")?.map(|_| next))
    }

    async fn resend(&self, resend: &Resend) -> Result<bool, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("message_id", s(&resend.message_id))
            .update_expression(format!(
                "SET #s = :deferred, attempt = :next, updated_at = :now, expires_at = :exp, \
                 resend_of = :bounced, open_state = :os, open_at = :due, copy_due = :due, \
                 {APPEND_HISTORY} REMOVE swept_at, lease_owner, lease_until"
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
            .expression_attribute_values(":os", s(OpenState::Waiting.key(&resend.message_id)))
            .expression_attribute_values(":due", n(ms(resend.copy_due)))
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
        Ok(crate::aws::conditional(result, "status resend")?.is_some())
    }

    async fn expect(&self, expected: &Expected) -> Result<bool, StoreError> {
        let mut set = vec![
            "#s = :deferred",
            "attempt = :a",
            "updated_at = :now",
            "expires_at = :exp",
            "open_state = :os",
            "open_at = :due",
            "copy_due = :due",
            APPEND_HISTORY,
        ];
        let mut values = HashMap::from([
            (":deferred".to_owned(), s(Status::Deferred.as_str())),
            (":a".to_owned(), n(expected.attempt)),
            (":now".to_owned(), n(ms(expected.now))),
            (":exp".to_owned(), self.expires_at(expected.now)),
            (
                ":os".to_owned(),
                s(OpenState::Waiting.key(&expected.message_id)),
            ),
            (":due".to_owned(), n(ms(expected.copy_due))),
            (":empty".to_owned(), empty_list()),
            (
                ":h".to_owned(),
                history_entry(
                    expected.now,
                    Status::Deferred,
                    expected.attempt,
                    "events",
                    Some(&expected.detail),
                ),
            ),
        ]);
        if let Some(body) = &expected.payload {
            set.push("payload = :body");
            values.insert(":body".to_owned(), s(body));
        }
        if let Some(trace) = &expected.trace_id {
            set.push("trace_id = :trace");
            values.insert(":trace".to_owned(), s(trace));
        }
        let (facts, facts_values) = facts_marks(&expected.facts, false);
        set.extend(facts);
        values.extend(facts_values.into_iter().map(|(k, v)| (k.to_owned(), v)));
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("message_id", s(&expected.message_id))
            .update_expression(expression(&set, &[]))
            .condition_expression("attribute_not_exists(message_id)")
            .expression_attribute_names("#s", "status")
            .set_expression_attribute_values(Some(values))
            .send()
            .await;
        Ok(crate::aws::conditional(result, "status expect")?.is_some())
    }

    async fn open_before(
        &self,
        state: OpenState,
        before: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<JobRecord>, StoreError> {
        self.open_index_before(state, before, limit).await
    }

    async fn sweep(
        &self,
        found: &JobRecord,
        mark: SweepMark,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.mark_swept(found, mark, now).await
    }

    async fn outbox_before(
        &self,
        before: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        self.outbox_index_before(before, limit).await
    }

    async fn update_recipients(
        &self,
        message_id: &str,
        change: &RecipientChange,
    ) -> Result<bool, StoreError> {
        super::recipients::update(&self.client, &self.table, message_id, change).await
    }

    async fn fill_recipients(
        &self,
        message_id: &str,
        fill: &RecipientFill,
    ) -> Result<bool, StoreError> {
        super::recipients::fill(&self.client, &self.table, message_id, fill).await
    }

    async fn outcome_published(
        &self,
        message_id: &str,
        outbox: &Outbox,
    ) -> Result<bool, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("message_id", s(message_id))
            .update_expression("REMOVE outbox, outbox_at, outbox_status, outbox_attempt")
            .condition_expression("outbox_at = :at AND outbox_status = :s AND outbox_attempt = :a")
            .expression_attribute_values(":at", n(ms(outbox.at)))
            .expression_attribute_values(":s", s(outbox.status.as_str()))
            .expression_attribute_values(":a", n(outbox.attempt))
            .send()
            .await;
        Ok(crate::aws::conditional(result, "status outcome published")?.is_some())
    }
}
