//! The control table (key `pk` (S) + `sk` (S)): one item space shared by one adapter per port.
//! Breaker state lives at (`breaker`, provider), poison fingerprints at (`poison`, fingerprint),
//! error-code sightings at (`sighting`, key), the event ledger at (`event`, key), send-rate
//! schedules at (`rate`, provider) and reputation buckets at (`reputation#<domain>`, hour).

use super::*;

macro_rules! control_adapter {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name {
            client: Client,
            table: String,
        }

        impl $name {
            pub fn new(client: Client, table: impl Into<String>) -> Self {
                $name {
                    client,
                    table: table.into(),
                }
            }
        }
    };
}

control_adapter!(
    /// Circuit breaker state and the reputation guard's pauses ([`BreakerStore`]).
    DynamoDbBreakerStore
);
control_adapter!(
    /// First sightings of unknown error codes ([`Sightings`]).
    DynamoDbSightings
);
control_adapter!(
    /// The events function's ledger of counted events ([`courier_core::ports::EventLedger`]).
    DynamoDbEventLedger
);
control_adapter!(
    /// The providers' shared send-rate schedules ([`SendSchedule`]).
    DynamoDbSendSchedule
);
control_adapter!(
    /// The reputation guard's hourly counts per sending domain ([`ReputationStore`]).
    DynamoDbReputationStore
);

/// The poison blocklist ([`PoisonList`]), read whole and cached for `poison_ttl`.
pub struct DynamoDbPoisonList {
    client: Client,
    table: String,
    poison_ttl: Duration,
    poison_cache: tokio::sync::Mutex<Option<(Instant, std::collections::HashSet<String>)>>,
}

impl DynamoDbPoisonList {
    pub fn new(client: Client, table: impl Into<String>, poison_ttl: Duration) -> Self {
        DynamoDbPoisonList {
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
impl PoisonList for DynamoDbPoisonList {
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
impl BreakerStore for DynamoDbBreakerStore {
    async fn load(&self, provider: &str) -> Result<Option<BreakerState>, StoreError> {
        let Some(item) = control_item(
            &self.client,
            &self.table,
            "breaker",
            provider,
            "breaker load",
        )
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
        Ok(crate::aws::conditional(req.send().await, "breaker save")?.is_some())
    }
}

/// Error-code sightings live at (`code`, key) in the control table.
#[async_trait::async_trait]
impl Sightings for DynamoDbSightings {
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
        Ok(crate::aws::conditional(result, "code sighting")?.is_some())
    }
}

/// Counted events live at (`event#<key>`, `-`) in the control table (one partition per key: no
/// hot partition), expiring through the table's TTL; an expired item not yet deleted counts as
/// absent.
#[async_trait::async_trait]
impl courier_core::ports::EventLedger for DynamoDbEventLedger {
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
        Ok(crate::aws::conditional(result, "event ledger")?.is_some())
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
impl SendSchedule for DynamoDbSendSchedule {
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
            if crate::aws::conditional(restarted, "send schedule")?.is_some() {
                return Ok(Reservation::Granted { start_us: now_us });
            }
        }
        // Five lost races in a row: the schedule is hot; treat it as booked.
        Ok(Reservation::Refused {
            booked_until_us: last_seen.unwrap_or(now_us).max(now_us),
        })
    }
}

impl DynamoDbSendSchedule {
    async fn read_tat(&self, key: &str) -> Result<Option<i64>, StoreError> {
        let item = control_item(&self.client, &self.table, "rate", key, "send schedule").await?;
        Ok(item.as_ref().and_then(|i| get_n(i, "tat")))
    }
}

/// The control item (`pk`, `sk`), read consistently (it decides what happens next).
async fn control_item(
    client: &Client,
    table: &str,
    pk: &str,
    sk: &str,
    operation: &'static str,
) -> Result<Option<HashMap<String, AttributeValue>>, StoreError> {
    let out = client
        .get_item()
        .table_name(table)
        .key("pk", s(pk))
        .key("sk", s(sk))
        .consistent_read(true)
        .send()
        .await
        .map_err(err(operation))?;
    Ok(out.item)
}

/// Reputation buckets live at (`reputation#<domain>`, `<bucket epoch seconds>`) in the control
/// table, counted with ADD (no read before write) and expiring through the table's TTL
/// (`expires_at`) a week after their hour.
#[async_trait::async_trait]
impl ReputationStore for DynamoDbReputationStore {
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
