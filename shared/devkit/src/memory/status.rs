//! The status store in memory.

use super::*;
use courier_core::outcome::Outcome;
use courier_core::ports::Outbox;

/// Status records in a map; claims check `suppression` like the DynamoDB store's transaction.
#[derive(Debug, Default)]
pub struct MemoryStatusStore {
    pub records: Mutex<HashMap<String, JobRecord>>,
    pub suppression: Option<std::sync::Arc<MemorySuppressionList>>,
    pub fail_claims: FailNext,
    pub fail_finishes: FailNext,
    /// Fails `outcome_published` (the outbox stays marked).
    pub fail_clears: FailNext,
    /// Fails `get_many`.
    pub fail_reads: FailNext,
    pub writes: AtomicUsize,
    /// Milliseconds the next `finish` waits before it is applied (a hung write), once.
    pub slow_next_finish_ms: AtomicUsize,
}

#[async_trait::async_trait]
impl StatusStore for MemoryStatusStore {
    async fn claim(&self, req: &ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        self.fail_claims.take("claim")?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        let mut records = lock(&self.records);
        let existing = records.get(&req.message_id).cloned();
        let judgement = judge_claim(existing.as_ref(), req);
        if !matches!(judgement, ClaimJudgement::Refuse(_))
            && let Some(list) = &self.suppression
        {
            let hit: Vec<String> = req
                .check_suppressed
                .iter()
                .filter(|a| list.is_suppressed(a, req.now))
                .cloned()
                .collect();
            if !hit.is_empty() {
                return Ok(ClaimOutcome::Suppressed(hit));
            }
        }
        match judgement {
            ClaimJudgement::Take => {
                let mut rec = existing.unwrap_or_else(|| {
                    JobRecord::new(&req.message_id, Status::Processing, req.attempt, req.now)
                });
                rec.status = Status::Processing;
                rec.attempt = req.attempt;
                rec.lease_owner = Some(req.owner.clone());
                rec.lease_until = Some(req.lease_until);
                rec.unknown_since = None;
                rec.swept_at = None;
                rec.copy_due = None;
                rec.updated_at = req.now;
                if req.trace_id.is_some() {
                    rec.trace_id.clone_from(&req.trace_id);
                }
                rec.payload.clone_from(&req.payload);
                rec.provider_message_id = None;
                rec.recipients.clear();
                if req.facts.campaign_id.is_some() {
                    rec.facts.campaign_id.clone_from(&req.facts.campaign_id);
                }
                if !req.facts.metadata.is_empty() {
                    rec.facts.metadata.clone_from(&req.facts.metadata);
                }
                rec.history.push(HistoryEntry {
                    at: req.now,
                    status: Status::Processing,
                    attempt: req.attempt,
                    by: "send".into(),
                    detail: Some(req.history_detail()),
                });
                records.insert(req.message_id.clone(), rec);
                Ok(ClaimOutcome::Claimed)
            }
            ClaimJudgement::Refuse(outcome) => Ok(outcome),
            ClaimJudgement::MarkUnknown => {
                if let Some(rec) = records.get_mut(&req.message_id) {
                    rec.status = Status::Unknown;
                    rec.unknown_since = Some(req.now);
                    rec.lease_owner = None;
                    rec.updated_at = req.now;
                    rec.copy_due = Some(req.now + req.grace);
                    rec.history.push(HistoryEntry {
                        at: req.now,
                        status: Status::Unknown,
                        attempt: rec.attempt,
                        by: "send".into(),
                        detail: Some("the lease expired mid-send".into()),
                    });
                }
                Ok(ClaimOutcome::Ambiguous {
                    resolve_at: req.now + req.grace,
                })
            }
        }
    }

    async fn finish(&self, update: &StatusUpdate) -> Result<(), StoreError> {
        let slow = self.slow_next_finish_ms.swap(0, Ordering::SeqCst);
        if slow > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(slow as u64)).await;
        }
        self.fail_finishes.take("finish")?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        let mut records = lock(&self.records);
        let rec = records
            .get_mut(&update.message_id)
            .ok_or_else(|| StoreError::msg("finish", "no record"))?;
        let ours = rec.lease_owner.as_deref() == Some(update.owner.as_str());
        if !ours && rec.status != Status::Unknown {
            return Err(StoreError::msg("finish", "lease lost"));
        }
        apply(rec, update);
        roll(rec, update);
        Ok(())
    }

    async fn record(&self, update: &StatusUpdate) -> Result<(), StoreError> {
        self.fail_finishes.take("record")?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        let mut records = lock(&self.records);
        if let Some(rec) = records.get(&update.message_id)
            && courier_core::status::transition(rec.status, update.status)
                != Ok(courier_core::status::Transition::Applied)
        {
            return Ok(());
        }
        let rec = records.entry(update.message_id.clone()).or_insert_with(|| {
            JobRecord::new(
                &update.message_id,
                update.status,
                update.attempt,
                update.now,
            )
        });
        // As the DynamoDB store: a provider message id is kept where the record has one.
        let kept = rec.provider_message_id.clone();
        apply(rec, update);
        if kept.is_some() {
            rec.provider_message_id = kept;
        }
        // As the DynamoDB store: facts are kept where the record has none.
        if let Some(facts) = &update.facts {
            if rec.facts.campaign_id.is_none() {
                rec.facts.campaign_id.clone_from(&facts.campaign_id);
            }
            if rec.facts.metadata.is_empty() {
                rec.facts.metadata.clone_from(&facts.metadata);
            }
        }
        Ok(())
    }

    async fn abandon(&self, update: &StatusUpdate) -> Result<bool, StoreError> {
        self.fail_finishes.take("abandon")?;
        let mut records = lock(&self.records);
        match records.get_mut(&update.message_id) {
            Some(rec)
                if matches!(rec.status, Status::Deferred | Status::Pending)
                    && rec.attempt == update.attempt
                    && rec.lease_owner.is_none() =>
            {
                self.writes.fetch_add(1, Ordering::Relaxed);
                apply(rec, update);
                roll(rec, update);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
    async fn get(&self, message_id: &str) -> Result<Option<JobRecord>, StoreError> {
        Ok(lock(&self.records).get(message_id).cloned())
    }

    async fn get_many(&self, message_ids: &[String]) -> Result<Vec<JobRecord>, StoreError> {
        self.fail_reads.take("get many")?;
        let records = lock(&self.records);
        let ids: std::collections::BTreeSet<&String> = message_ids.iter().collect();
        Ok(ids
            .into_iter()
            .filter_map(|id| records.get(id).cloned())
            .collect())
    }

    async fn find_by_provider_message_id(
        &self,
        provider_message_id: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(lock(&self.records)
            .values()
            .find(|r| r.provider_message_id.as_deref() == Some(provider_message_id))
            .map(|r| r.message_id.clone()))
    }

    async fn note(&self, message_id: &str, entry: &HistoryEntry) -> Result<bool, StoreError> {
        self.fail_finishes.take("note")?;
        let mut records = lock(&self.records);
        match records.get_mut(message_id) {
            Some(rec) if rec.status == entry.status && rec.attempt == entry.attempt => {
                self.writes.fetch_add(1, Ordering::Relaxed);
                rec.history.push(entry.clone());
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn rewait(
        &self,
        message_id: &str,
        entry: &HistoryEntry,
        copy_due: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.fail_finishes.take("rewait")?;
        let mut records = lock(&self.records);
        match records.get_mut(message_id) {
            Some(rec)
                if rec.status == entry.status
                    && rec.attempt == entry.attempt
                    && OpenState::of(rec.status, None) == Some(OpenState::Waiting) =>
            {
                self.writes.fetch_add(1, Ordering::Relaxed);
                rec.history.push(entry.clone());
                rec.copy_due = Some(copy_due);
                rec.swept_at = None;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn expect(&self, expected: &Expected) -> Result<bool, StoreError> {
        self.fail_finishes.take("expect")?;
        let mut records = lock(&self.records);
        if records.contains_key(&expected.message_id) {
            return Ok(false);
        }
        self.writes.fetch_add(1, Ordering::Relaxed);
        let mut rec = JobRecord::new(
            &expected.message_id,
            Status::Deferred,
            expected.attempt,
            expected.now,
        );
        rec.copy_due = Some(expected.copy_due);
        rec.payload.clone_from(&expected.payload);
        rec.trace_id.clone_from(&expected.trace_id);
        rec.facts = expected.facts.clone();
        rec.history.push(HistoryEntry {
            at: expected.now,
            status: Status::Deferred,
            attempt: expected.attempt,
            by: "events".into(),
            detail: Some(expected.detail.clone()),
        });
        records.insert(expected.message_id.clone(), rec);
        Ok(true)
    }

    async fn reopen(
        &self,
        message_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<u32>, StoreError> {
        let mut records = lock(&self.records);
        match records.get_mut(message_id) {
            Some(rec) if rec.status == Status::DeadLettered => {
                rec.status = Status::Pending;
                rec.attempt += 1;
                rec.updated_at = now;
                rec.copy_due = None;
                rec.history.push(HistoryEntry {
                    at: now,
                    status: Status::Pending,
                    attempt: rec.attempt,
                    by: "operator".into(),
                    detail: Some("replayed from the dead letters".into()),
                });
                Ok(Some(rec.attempt))
            }
            _ => Ok(None),
        }
    }

    async fn resend(&self, resend: &Resend) -> Result<bool, StoreError> {
        self.fail_finishes.take("resend")?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        let mut records = lock(&self.records);
        match records.get_mut(&resend.message_id) {
            Some(rec)
                if rec.attempt == resend.attempt
                    && matches!(
                        rec.status,
                        Status::SentToProvider | Status::BouncedTransient
                    ) =>
            {
                rec.status = Status::Deferred;
                rec.attempt += 1;
                rec.updated_at = resend.now;
                rec.resend_of = Some(resend.bounced.clone());
                rec.copy_due = Some(resend.copy_due);
                rec.swept_at = None;
                rec.lease_owner = None;
                rec.lease_until = None;
                rec.history.push(HistoryEntry {
                    at: resend.now,
                    status: Status::Deferred,
                    attempt: rec.attempt,
                    by: "events".into(),
                    detail: Some(resend.detail.clone()),
                });
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn open_before(
        &self,
        state: OpenState,
        before: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<JobRecord>, StoreError> {
        let records = lock(&self.records);
        let mut found: Vec<JobRecord> = records
            .values()
            .filter(|r| in_index(r, state, before))
            .cloned()
            .collect();
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
        self.fail_finishes.take("sweep")?;
        let mut records = lock(&self.records);
        let Some(rec) = records.get_mut(&found.message_id) else {
            return Ok(false);
        };
        if rec.status != found.status || rec.updated_at != found.updated_at {
            return Ok(false);
        }
        self.writes.fetch_add(1, Ordering::Relaxed);
        match mark {
            SweepMark::LeaseExpired => {
                if rec.status != Status::Processing || rec.lease_until.is_some_and(|l| l > now) {
                    return Ok(false);
                }
                rec.status = Status::Unknown;
                rec.unknown_since = Some(now);
                rec.lease_owner = None;
                rec.lease_until = None;
                rec.updated_at = now;
                rec.copy_due = Some(now + REDELIVERY_BOUND);
                rec.history.push(HistoryEntry {
                    at: now,
                    status: Status::Unknown,
                    attempt: rec.attempt,
                    by: "sweeper".into(),
                    detail: Some(mark.detail(found)),
                });
            }
            SweepMark::NoOutcome | SweepMark::CopyOverdue => {
                let expected = match mark {
                    SweepMark::NoOutcome => Some(OpenState::AwaitingOutcome),
                    _ => Some(OpenState::Waiting),
                };
                // Flagged already (and not written since): off the index.
                if OpenState::of(rec.status, rec.provider.as_deref()) != expected
                    || rec.swept_at.is_some_and(|swept| swept >= rec.updated_at)
                {
                    return Ok(false);
                }
                rec.swept_at = Some(now);
                rec.history.push(HistoryEntry {
                    at: now,
                    status: rec.status,
                    attempt: rec.attempt,
                    by: "sweeper".into(),
                    detail: Some(mark.detail(found)),
                });
            }
        }
        Ok(true)
    }

    async fn outbox_before(
        &self,
        before: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let records = lock(&self.records);
        let mut found: Vec<(DateTime<Utc>, String)> = records
            .values()
            .filter_map(|r| Some((r.outbox?.at, r.message_id.clone())))
            .filter(|(at, _)| *at < before)
            .collect();
        found.sort();
        found.truncate(limit);
        Ok(found.into_iter().map(|(_, id)| id).collect())
    }

    async fn update_recipients(
        &self,
        message_id: &str,
        change: &RecipientChange,
    ) -> Result<bool, StoreError> {
        self.fail_finishes.take("update recipients")?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        let mut records = lock(&self.records);
        let Some(rec) = records.get_mut(message_id) else {
            return Ok(false);
        };
        if rec.recipients_version != change.version || rec.recipients.is_empty() {
            return Ok(false);
        }
        rec.recipients = courier_core::recipients::applied(&rec.recipients, change);
        rec.recipient_log.extend(change.log.iter().cloned());
        rec.recipients_version += 1;
        Ok(true)
    }

    async fn fill_recipients(
        &self,
        message_id: &str,
        fill: &RecipientFill,
    ) -> Result<bool, StoreError> {
        self.fail_finishes.take("fill recipients")?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        let mut records = lock(&self.records);
        let Some(rec) = records.get_mut(message_id) else {
            return Ok(false);
        };
        if !rec.recipients.is_empty()
            || !courier_core::recipients::FILLABLE.contains(&rec.status)
            || rec.attempt != fill.attempt
            || rec.provider_message_id.as_deref() != Some(fill.provider_message_id.as_str())
        {
            return Ok(false);
        }
        rec.recipient_log
            .extend(courier_core::recipients::entries_of(
                &fill.list,
                fill.at,
                Some(&fill.detail),
                &[],
            ));
        rec.recipients.clone_from(&fill.list);
        rec.recipients_version += 1;
        Ok(true)
    }

    async fn outcome_published(
        &self,
        message_id: &str,
        outbox: &Outbox,
    ) -> Result<bool, StoreError> {
        self.fail_clears.take("outcome published")?;
        let mut records = lock(&self.records);
        match records.get_mut(message_id) {
            Some(rec) if rec.outbox.as_ref() == Some(outbox) => {
                self.writes.fetch_add(1, Ordering::Relaxed);
                rec.outbox = None;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

/// Whether `r` is in the sweeper's index under `state` with its key before `before`, as the
/// DynamoDB store keeps it: a waiting record by its due time (none: not in it), a flagged one
/// (not written since the sweep) only under `Overdue` (a waiting one) by the flag's time.
fn in_index(r: &JobRecord, state: OpenState, before: DateTime<Utc>) -> bool {
    let open = OpenState::of(r.status, r.provider.as_deref());
    match (state, r.swept_at.filter(|swept| *swept >= r.updated_at)) {
        (OpenState::Overdue, Some(swept)) => open == Some(OpenState::Waiting) && swept < before,
        (OpenState::Overdue, None) | (_, Some(_)) => false,
        (OpenState::Waiting, None) => {
            open == Some(state) && r.copy_due.is_some_and(|due| due < before)
        }
        (_, None) => open == Some(state) && r.updated_at < before,
    }
}

/// A status write's recipients (as the send reached them) replace the record's list, their
/// entries added to its timeline.
fn roll(rec: &mut JobRecord, update: &StatusUpdate) {
    if let Some(list) = &update.recipients {
        rec.recipient_log
            .extend(courier_core::recipients::entries_of(
                list,
                update.now,
                update.detail.as_deref(),
                &update.recipient_notes,
            ));
        rec.recipients.clone_from(list);
        rec.recipients_version += 1;
    }
}

fn apply(rec: &mut JobRecord, update: &StatusUpdate) {
    rec.history.push(HistoryEntry {
        at: update.now,
        status: update.status,
        attempt: rec.attempt.max(update.attempt),
        by: update.owner.clone(),
        detail: update.detail.clone(),
    });
    if update.status == Status::Unknown {
        rec.unknown_since = Some(update.now);
    }
    rec.status = update.status;
    rec.attempt = rec.attempt.max(update.attempt);
    if Outcome::of(update.status).is_some() {
        rec.outbox = Some(Outbox {
            status: update.status,
            attempt: rec.attempt,
            at: update.now,
        });
    }
    rec.lease_owner = None;
    rec.lease_until = None;
    rec.updated_at = update.now;
    rec.copy_due = update.copy_due();
    rec.swept_at = None;
    if update.provider.is_some() {
        rec.provider.clone_from(&update.provider);
    }
    if update.provider_message_id.is_some() {
        rec.provider_message_id
            .clone_from(&update.provider_message_id);
    }
}
