//! The suppression table.

use super::*;
use courier_core::unsubscribe::{Scope, suppression_key};

/// The suppression list: key `address` (S: the address's key, or for an unsubscription from one
/// list `list:{len}:{list}:{address}`), with `reason` and `suppressed_at`.
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

impl DynamoDbSuppressionList {
    /// The `addresses` whose key (`key_of`) has an entry in force at `now` (one BatchGetItem per
    /// 100 keys).
    async fn listed(
        &self,
        addresses: &[String],
        key_of: impl Fn(&str) -> String,
        now: DateTime<Utc>,
    ) -> Result<Vec<String>, StoreError> {
        let mut wanted: Vec<String> = addresses.iter().map(|a| key_of(a)).collect();
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
            .filter(|a| found.contains(&key_of(a)))
            .cloned()
            .collect())
    }
}

#[async_trait::async_trait]
impl SuppressionList for DynamoDbSuppressionList {
    async fn suppressed(
        &self,
        addresses: &[String],
        now: DateTime<Utc>,
    ) -> Result<Vec<String>, StoreError> {
        self.listed(addresses, |a| suppression_key(a, &Scope::Global), now)
            .await
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
            .item("address", s(courier_core::mailbox::address_key(address)))
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
            .item("address", s(courier_core::mailbox::address_key(address)))
            .item("reason", s(reason))
            .item("suppressed_at", n(ms(now)))
            .item("expires_at", n(until.timestamp()))
            .condition_expression("attribute_not_exists(address) OR expires_at < :until")
            .expression_attribute_values(":until", n(until.timestamp()))
            .send()
            .await;
        Ok(crate::aws::conditional(result, "suppress soft")?.is_some())
    }

    async fn remove(&self, address: &str) -> Result<bool, StoreError> {
        let out = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key("address", s(courier_core::mailbox::address_key(address)))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .send()
            .await
            .map_err(err("unsuppress"))?;
        Ok(out.attributes.is_some_and(|a| !a.is_empty()))
    }

    async fn unsubscribed(
        &self,
        addresses: &[String],
        list: &str,
    ) -> Result<Vec<String>, StoreError> {
        let scope = Scope::List(list.to_owned());
        // Unsubscriptions never expire: any time will do.
        self.listed(
            addresses,
            |a| suppression_key(a, &scope),
            DateTime::<Utc>::MIN_UTC,
        )
        .await
    }

    /// One conditional put: absent, or a soft entry (a hard one, or this unsubscription, is
    /// kept). List entries also carry `list` and `recipient`, for reading them back.
    async fn unsubscribe(
        &self,
        address: &str,
        scope: &Scope,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut request = self
            .client
            .put_item()
            .table_name(&self.table)
            .item("address", s(suppression_key(address, scope)))
            .item("reason", s(courier_core::unsubscribe::REASON))
            .item("suppressed_at", n(ms(now)))
            .condition_expression("attribute_not_exists(address) OR attribute_exists(expires_at)");
        if let Scope::List(list) = scope {
            request = request
                .item("list", s(list))
                .item("recipient", s(courier_core::mailbox::address_key(address)));
        }
        let result = request.send().await;
        Ok(crate::aws::conditional(result, "unsubscribe")?.is_some())
    }

    async fn remove_from_list(&self, address: &str, list: &str) -> Result<bool, StoreError> {
        let out = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key(
                "address",
                s(suppression_key(address, &Scope::List(list.to_owned()))),
            )
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .send()
            .await
            .map_err(err("remove unsubscription"))?;
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
                Some(courier_core::ports::SuppressionEntry::from_key(
                    &get_s(item, "address")?,
                    get_s(item, "reason").unwrap_or_default(),
                    time(item, "suppressed_at").unwrap_or_default(),
                    get_n(item, "expires_at").and_then(|t| DateTime::from_timestamp(t, 0)),
                ))
            })
            .collect();
        let next = out
            .last_evaluated_key
            .and_then(|k| k.get("address").and_then(|v| v.as_s().ok()).cloned());
        Ok((entries, next))
    }
}
