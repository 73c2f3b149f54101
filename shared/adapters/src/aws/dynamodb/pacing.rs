//! Receiving domains' pacing states ([`DestinationRates`]) in one control item, (`pace`,
//! `destinations`): one attribute per paced domain, `d#<domain>` = `{r: rate per second,
//! s: since (µs)}`. One consistent read gives an instance every domain's state; a decrease is a
//! conditional update of the domain's own attribute (compare-and-set on what the instance saw).
//! An entry is about 60 bytes, so the 400 KB item holds some 6,000 throttling domains at once;
//! a domain grown back to the ceiling is forgotten by the next instance that sees it so.

use std::collections::BTreeMap;

use courier_core::pacing::DestinationRate;
use courier_core::ports::DestinationRates;

use super::*;

/// The pacing states of the receiving domains ([`DestinationRates`]).
#[derive(Debug, Clone)]
pub struct DynamoDbDestinationRates {
    client: Client,
    table: String,
}

const PK: &str = "pace";
const SK: &str = "destinations";
const PREFIX: &str = "d#";

impl DynamoDbDestinationRates {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoDbDestinationRates {
            client,
            table: table.into(),
        }
    }

    fn update(
        &self,
        domain: &str,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(PK))
            .key("sk", s(SK))
            .expression_attribute_names("#a", format!("{PREFIX}{domain}"))
    }
}

fn rate_of(v: &AttributeValue) -> Option<DestinationRate> {
    let m = v.as_m().ok()?;
    let per_sec: f64 = m.get("r")?.as_n().ok()?.parse().ok()?;
    Some(DestinationRate {
        per_sec,
        since_us: get_n(m, "s")?,
    })
}

fn value_of(rate: &DestinationRate) -> AttributeValue {
    AttributeValue::M(HashMap::from([
        ("r".to_owned(), n(rate.per_sec)),
        ("s".to_owned(), n(rate.since_us)),
    ]))
}

#[async_trait::async_trait]
impl DestinationRates for DynamoDbDestinationRates {
    async fn all(&self) -> Result<BTreeMap<String, DestinationRate>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", s(PK))
            .key("sk", s(SK))
            .consistent_read(true)
            .send()
            .await
            .map_err(err("destination rates"))?;
        let mut rates = BTreeMap::new();
        for (key, value) in out.item.unwrap_or_default() {
            let Some(domain) = key.strip_prefix(PREFIX) else {
                continue;
            };
            match rate_of(&value) {
                Some(rate) => {
                    rates.insert(domain.to_owned(), rate);
                }
                // Unpaced until its next throttle, which writes a readable state over it.
                None => tracing::warn!(
                    domain,
                    "a destination's pacing state is unreadable; ignored"
                ),
            }
        }
        Ok(rates)
    }

    async fn set(
        &self,
        domain: &str,
        seen: Option<&DestinationRate>,
        new: &DestinationRate,
    ) -> Result<bool, StoreError> {
        let mut update = self
            .update(domain)
            .update_expression("SET #a = :new")
            .expression_attribute_values(":new", value_of(new));
        update = match seen {
            // No state, or one no instance can read (then it would block the domain's pacing
            // for good): written over.
            None => update
                .condition_expression(
                    "attribute_not_exists(#a) OR NOT attribute_type(#a, :map) \
                     OR NOT attribute_type(#a.r, :num) OR NOT attribute_type(#a.s, :num)",
                )
                .expression_attribute_values(":map", s("M"))
                .expression_attribute_values(":num", s("N")),
            Some(seen) => update
                .condition_expression("#a.s = :s AND #a.r = :r")
                .expression_attribute_values(":s", n(seen.since_us))
                .expression_attribute_values(":r", n(seen.per_sec)),
        };
        Ok(crate::aws::conditional(update.send().await, "destination rates")?.is_some())
    }

    async fn forget(&self, domain: &str, seen: &DestinationRate) -> Result<bool, StoreError> {
        let result = self
            .update(domain)
            .update_expression("REMOVE #a")
            .condition_expression("#a.s = :s AND #a.r = :r")
            .expression_attribute_values(":s", n(seen.since_us))
            .expression_attribute_values(":r", n(seen.per_sec))
            .send()
            .await;
        Ok(crate::aws::conditional(result, "destination rates")?.is_some())
    }
}
