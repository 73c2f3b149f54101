//! The events function's and the governor's shared state: sightings, the event ledger,
//! reputation counts and send-rate schedules.

use super::*;

/// Error-code sightings in a set.
#[derive(Debug, Default)]
pub struct MemorySightings {
    pub seen: Mutex<HashSet<String>>,
}

#[async_trait::async_trait]
impl Sightings for MemorySightings {
    async fn first_sighting(&self, key: &str, _now: DateTime<Utc>) -> Result<bool, StoreError> {
        Ok(lock(&self.seen).insert(key.to_owned()))
    }
}

/// Counted events in a map (key -> kept until).
#[derive(Debug, Default)]
pub struct MemoryEventLedger {
    pub entries: Mutex<BTreeMap<String, DateTime<Utc>>>,
    pub fail: FailNext,
}

#[async_trait::async_trait]
impl courier_core::ports::EventLedger for MemoryEventLedger {
    async fn first_entry(
        &self,
        key: &str,
        now: DateTime<Utc>,
        keep_until: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.fail.take("event ledger")?;
        let mut entries = lock(&self.entries);
        if entries.get(key).is_some_and(|until| *until > now) {
            return Ok(false);
        }
        entries.insert(key.to_owned(), keep_until);
        Ok(true)
    }
}

/// Reputation buckets in a map.
#[derive(Debug, Default)]
pub struct MemoryReputationStore {
    pub buckets:
        Mutex<BTreeMap<(String, DateTime<Utc>), courier_core::reputation::ReputationCounts>>,
    pub fail: FailNext,
}

#[async_trait::async_trait]
impl ReputationStore for MemoryReputationStore {
    async fn add(
        &self,
        domain: &str,
        bucket: DateTime<Utc>,
        counts: &courier_core::reputation::ReputationCounts,
    ) -> Result<(), StoreError> {
        self.fail.take("reputation add")?;
        lock(&self.buckets)
            .entry((domain.to_owned(), bucket))
            .or_default()
            .merge(counts);
        Ok(())
    }

    async fn window(
        &self,
        domain: &str,
        since: DateTime<Utc>,
    ) -> Result<courier_core::reputation::ReputationCounts, StoreError> {
        let mut sum = courier_core::reputation::ReputationCounts::default();
        for ((d, bucket), counts) in lock(&self.buckets).iter() {
            if d == domain && *bucket >= since {
                sum.merge(counts);
            }
        }
        Ok(sum)
    }
}

/// Send-rate schedules in a map: [`courier_core::rate::reserve`] under a lock.
#[derive(Debug, Default)]
pub struct MemorySendSchedule {
    pub tats: Mutex<BTreeMap<String, i64>>,
    pub fail: FailNext,
}

#[async_trait::async_trait]
impl SendSchedule for MemorySendSchedule {
    async fn reserve(
        &self,
        key: &str,
        now_us: i64,
        cost_us: i64,
        max_ahead_us: i64,
    ) -> Result<courier_core::rate::Reservation, StoreError> {
        self.fail.take("send schedule")?;
        let mut tats = lock(&self.tats);
        let (answer, next) =
            courier_core::rate::reserve(tats.get(key).copied(), now_us, cost_us, max_ahead_us);
        if let Some(next) = next {
            tats.insert(key.to_owned(), next);
        }
        Ok(answer)
    }
}

/// Receiving domains' pacing states in a map (compare-and-set under a lock).
#[derive(Debug, Default)]
pub struct MemoryDestinationRates {
    pub rates: Mutex<BTreeMap<String, courier_core::pacing::DestinationRate>>,
    pub fail: FailNext,
}

#[async_trait::async_trait]
impl courier_core::ports::DestinationRates for MemoryDestinationRates {
    async fn all(
        &self,
    ) -> Result<BTreeMap<String, courier_core::pacing::DestinationRate>, StoreError> {
        self.fail.take("destination rates")?;
        Ok(lock(&self.rates).clone())
    }

    async fn set(
        &self,
        domain: &str,
        seen: Option<&courier_core::pacing::DestinationRate>,
        new: &courier_core::pacing::DestinationRate,
    ) -> Result<bool, StoreError> {
        self.fail.take("destination rates")?;
        let mut rates = lock(&self.rates);
        if rates.get(domain) != seen {
            return Ok(false);
        }
        rates.insert(domain.to_owned(), *new);
        Ok(true)
    }

    async fn forget(
        &self,
        domain: &str,
        seen: &courier_core::pacing::DestinationRate,
    ) -> Result<bool, StoreError> {
        self.fail.take("destination rates")?;
        let mut rates = lock(&self.rates);
        if rates.get(domain) != Some(seen) {
            return Ok(false);
        }
        rates.remove(domain);
        Ok(true)
    }
}

/// The live settings document in memory (compare-and-set on the version under a lock).
#[derive(Debug, Default)]
pub struct MemoryLiveSettings {
    pub record: Mutex<Option<courier_core::ports::LiveRecord>>,
    pub fail: FailNext,
}

#[async_trait::async_trait]
impl courier_core::ports::LiveSettingsStore for MemoryLiveSettings {
    async fn get(&self) -> Result<Option<courier_core::ports::LiveRecord>, StoreError> {
        self.fail.take("live settings")?;
        Ok(lock(&self.record).clone())
    }

    async fn put(
        &self,
        document: &str,
        expected: Option<u64>,
        now: DateTime<Utc>,
        by: &str,
    ) -> Result<bool, StoreError> {
        self.fail.take("live settings")?;
        let mut record = lock(&self.record);
        if record.as_ref().map(|r| r.version) != expected {
            return Ok(false);
        }
        *record = Some(courier_core::ports::LiveRecord {
            document: document.to_owned(),
            version: expected.unwrap_or(0) + 1,
            updated_at: Some(now),
            updated_by: by.to_owned(),
        });
        Ok(true)
    }
}
