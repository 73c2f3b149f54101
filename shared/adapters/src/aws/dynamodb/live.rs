//! The live settings document ([`LiveSettingsStore`]) at (`live`, `settings`) in the control
//! table: `document` (the JSON as written), `version`, `updated_at` (epoch ms), `updated_by`.
//! A write is conditional on the version the writer expects, so two operators' changes never
//! silently overwrite each other.

use courier_core::ports::{LiveRecord, LiveSettingsStore};

use super::*;

/// The live settings document ([`LiveSettingsStore`]).
#[derive(Debug, Clone)]
pub struct DynamoDbLiveSettings {
    client: Client,
    table: String,
}

impl DynamoDbLiveSettings {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoDbLiveSettings {
            client,
            table: table.into(),
        }
    }
}

#[async_trait::async_trait]
impl LiveSettingsStore for DynamoDbLiveSettings {
    async fn get(&self) -> Result<Option<LiveRecord>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", s("live"))
            .key("sk", s("settings"))
            .consistent_read(true)
            .send()
            .await
            .map_err(err("live settings"))?;
        let Some(item) = out.item else {
            return Ok(None);
        };
        // An item written by hand names what is wrong with it (the console's usual slip: a
        // number stored as a string); `updated_at` and `updated_by` are only information.
        let malformed = |attribute: &str, wanted: &str| {
            StoreError::msg(
                "live settings",
                format!(
                    "the stored item (control table, pk live, sk settings) has no {attribute} \
                     {wanted}: fix or delete it by hand"
                ),
            )
        };
        Ok(Some(LiveRecord {
            document: get_s(&item, "document")
                .ok_or_else(|| malformed("document", "string (S)"))?,
            version: get_n(&item, "version")
                .and_then(|v| u64::try_from(v).ok())
                .filter(|v| *v >= 1)
                .ok_or_else(|| malformed("version", "number (N) of 1 or more"))?,
            updated_at: get_n(&item, "updated_at").and_then(DateTime::from_timestamp_millis),
            updated_by: get_s(&item, "updated_by").unwrap_or_default(),
        }))
    }

    async fn put(
        &self,
        document: &str,
        expected: Option<u64>,
        now: DateTime<Utc>,
        by: &str,
    ) -> Result<bool, StoreError> {
        let mut put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item("pk", s("live"))
            .item("sk", s("settings"))
            .item("document", s(document))
            .item("version", n(expected.unwrap_or(0) + 1))
            .item("updated_at", n(ms(now)))
            .item("updated_by", s(by));
        put = match expected {
            None => put.condition_expression("attribute_not_exists(version)"),
            Some(v) => put
                .condition_expression("version = :v")
                .expression_attribute_values(":v", n(v)),
        };
        Ok(crate::aws::conditional(put.send().await, "live settings")?.is_some())
    }
}
