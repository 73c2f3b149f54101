//! Per-destination pacing (`courier_core::pacing`) on the shared schedule: the receiving
//! domains' states, read from the control table at most once per cache period, pace each
//! throttling domain on a schedule of its own (`dest#<domain>`); a throttle reply from a domain
//! lowers its rate for every instance.

use std::collections::BTreeMap;

use courier_core::pacing::{DestinationPacing, DestinationRate};
use courier_core::ports::DestinationRates;
use tracing::warn;

use super::*;

/// The receiving domains' pacing: the rule, the shared states and this instance's copy.
pub struct Destinations {
    /// The rule in force (`None`: off; the live settings may change it).
    rule: std::sync::RwLock<Option<DestinationPacing>>,
    rates: Arc<dyn DestinationRates>,
    /// The horizon and chunk of a domain's schedule (its rate is the domain's own).
    shape: RateLimit,
    /// How long a read of the states is used.
    cache_for: chrono::Duration,
    cache: tokio::sync::Mutex<Option<Read>>,
}

/// The states as read, and when.
type Read = (DateTime<Utc>, BTreeMap<String, DestinationRate>);

/// What a throttle reply did to its domain's rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Lowered {
    /// The domain is now paced at `per_sec`.
    To { per_sec: f64 },
    /// The domain's rate was lowered less than a hold ago (by this reply's burst): unchanged.
    Held,
    /// Another instance lowered it between the read and the write: its decrease stands.
    Raced,
}

impl Destinations {
    pub fn new(
        rule: Option<DestinationPacing>,
        rates: Arc<dyn DestinationRates>,
        shape: RateLimit,
        cache_for: chrono::Duration,
    ) -> Destinations {
        Destinations {
            rule: std::sync::RwLock::new(rule),
            rates,
            shape,
            cache_for,
            cache: tokio::sync::Mutex::new(None),
        }
    }

    fn rule(&self) -> Option<DestinationPacing> {
        *self
            .rule
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The states, from this instance's copy while it is fresh.
    async fn states(
        &self,
        now: DateTime<Utc>,
    ) -> Result<BTreeMap<String, DestinationRate>, StoreError> {
        let mut cache = self.cache.lock().await;
        if let Some((read_at, states)) = cache.as_ref()
            && now < *read_at + self.cache_for
        {
            return Ok(states.clone());
        }
        let states = self.rates.all().await?;
        *cache = Some((now, states.clone()));
        Ok(states)
    }
}

/// The schedule key of a receiving domain.
pub(super) fn schedule_key(domain: &str) -> String {
    format!("dest#{domain}")
}

impl Governor {
    /// Paces receiving domains by `destinations`.
    pub fn with_destinations(self, destinations: Destinations) -> Governor {
        Governor {
            destinations: Some(destinations),
            ..self
        }
    }

    /// Sets the pacing rule (live settings; `None`: off). Without a store of the domains'
    /// states (none was wired) nothing changes.
    pub fn set_destination_pacing(&self, rule: Option<DestinationPacing>) {
        if let Some(d) = &self.destinations {
            *d.rule
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = rule;
        }
    }

    /// The destinations and the rule in force, when pacing is on.
    fn pacing(&self) -> Option<(&Destinations, DestinationPacing)> {
        let d = self.destinations.as_ref()?;
        Some((d, d.rule()?))
    }

    /// The rate `domain` is paced at now (`None`: not paced).
    pub async fn destination_rate(
        &self,
        domain: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<f64>, StoreError> {
        let Some((d, rule)) = self.pacing() else {
            return Ok(None);
        };
        let states = d.states(now).await?;
        Ok(rule.rate_at(states.get(domain), now.timestamp_micros()))
    }

    /// Until when a booking on `domain`'s schedule is sure to be refused, as this instance last
    /// saw it (no call; see [`Governor::refused_until`]).
    pub fn destination_refused_until(
        &self,
        domain: &str,
        now: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        let d = self.destinations.as_ref()?;
        d.rule()?;
        let booked = *self
            .refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&schedule_key(domain))?;
        let grantable = booked - d.shape.max_ahead_us();
        (now.timestamp_micros() < grantable)
            .then(|| DateTime::from_timestamp_micros(grantable))
            .flatten()
    }

    /// A slot for one send to `domain` at `now`: at once when the domain is not paced, else on
    /// its own schedule at its rate of the moment.
    pub async fn destination_permit(
        &self,
        domain: &str,
        now: DateTime<Utc>,
    ) -> Result<Permit, StoreError> {
        let (Some(d), Some(per_sec)) = (
            &self.destinations,
            self.destination_rate(domain, now).await?,
        ) else {
            return Ok(Permit::Go {
                wait: Duration::ZERO,
            });
        };
        let limit = RateLimit { per_sec, ..d.shape };
        self.book(&schedule_key(domain), limit, now, 1).await
    }

    /// `domain` answered with a throttle reply at `now`: lowers its shared rate (read fresh, so
    /// the write compares against the latest state), and forgets the domains seen grown back
    /// to the ceiling. `Ok(None)`: receiving domains are not paced.
    pub async fn receiver_throttled(
        &self,
        domain: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<Lowered>, StoreError> {
        let Some((d, rule)) = self.pacing() else {
            return Ok(None);
        };
        let now_us = now.timestamp_micros();
        let mut states = d.rates.all().await?;
        let seen = states.get(domain).copied();
        let lowered = match rule.after_throttle(seen.as_ref(), now_us) {
            None => Lowered::Held,
            Some(new) if d.rates.set(domain, seen.as_ref(), &new).await? => {
                states.insert(domain.to_owned(), new);
                Lowered::To {
                    per_sec: new.per_sec,
                }
            }
            Some(_) => Lowered::Raced,
        };
        let grown: Vec<(String, DestinationRate)> = states
            .iter()
            .filter(|(_, s)| rule.rate_at(Some(s), now_us).is_none())
            .map(|(k, s)| (k.clone(), *s))
            .collect();
        for (other, state) in grown {
            // Housekeeping only: a failure leaves an entry that is read as unpaced anyway.
            match d.rates.forget(&other, &state).await {
                Ok(_) => {
                    states.remove(&other);
                }
                Err(e) => {
                    warn!(domain = %other, error = %e, "could not forget a domain's pacing state");
                    break;
                }
            }
        }
        *d.cache.lock().await = Some((now, states));
        Ok(Some(lowered))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use courier_devkit::memory::{MemoryDestinationRates, MemorySendSchedule};

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn rule() -> DestinationPacing {
        DestinationPacing {
            floor_per_sec: 1.0,
            ceiling_per_sec: 100.0,
            increase_per_min: 10.0,
            decrease: 0.1,
            hold: Duration::from_secs(5),
        }
    }

    fn governor(rates: Arc<MemoryDestinationRates>) -> Governor {
        let shape = RateLimit {
            per_sec: 1.0,
            max_ahead: Duration::from_secs(2),
            chunk: 1,
        };
        Governor::new(Arc::new(MemorySendSchedule::default()), BTreeMap::new()).with_destinations(
            Destinations::new(Some(rule()), rates, shape, chrono::Duration::seconds(2)),
        )
    }

    #[tokio::test]
    async fn a_throttling_domain_is_paced_and_the_others_are_not() {
        let rates = Arc::new(MemoryDestinationRates::default());
        let g = governor(rates.clone());
        let go = Permit::Go {
            wait: Duration::ZERO,
        };
        // GIVEN big.example answered a throttle reply: 100/s × 0.1 = 10/s
        assert_eq!(
            g.receiver_throttled("big.example", t(0)).await.unwrap(),
            Some(Lowered::To { per_sec: 10.0 })
        );
        // THEN its sends are 100 ms apart, on its own schedule
        assert_eq!(g.destination_permit("big.example", t(0)).await.unwrap(), go);
        assert_eq!(
            g.destination_permit("big.example", t(0)).await.unwrap(),
            Permit::Go {
                wait: Duration::from_millis(100)
            }
        );
        // AND another domain goes at once, however many
        for _ in 0..50 {
            assert_eq!(
                g.destination_permit("small.example", t(0)).await.unwrap(),
                go
            );
        }
        // AND a second instance sees the decrease (shared state)
        let other = governor(rates.clone());
        assert_eq!(
            other.destination_rate("big.example", t(0)).await.unwrap(),
            Some(10.0)
        );
    }

    #[tokio::test]
    async fn a_refused_booking_is_known_without_a_call_until_the_schedule_frees() {
        let rates = Arc::new(MemoryDestinationRates::default());
        let g = governor(rates.clone());
        g.receiver_throttled("big.example", t(0)).await.unwrap();
        // 10/s, horizon 2 s: 21 slots book the schedule 2.1 s ahead, the 22nd is refused
        for _ in 0..21 {
            assert!(matches!(
                g.destination_permit("big.example", t(0)).await.unwrap(),
                Permit::Go { .. }
            ));
        }
        assert!(matches!(
            g.destination_permit("big.example", t(0)).await.unwrap(),
            Permit::Refused { .. }
        ));
        // THEN the instance knows, without a call, that nothing is granted before 0.1 s
        let until = g.destination_refused_until("big.example", t(0)).unwrap();
        assert_eq!(until, t(0) + chrono::Duration::milliseconds(100));
        assert_eq!(g.destination_refused_until("big.example", until), None);
        assert_eq!(g.destination_refused_until("small.example", t(0)), None);
    }

    #[tokio::test]
    async fn a_burst_of_throttle_replies_lowers_the_rate_once() {
        let rates = Arc::new(MemoryDestinationRates::default());
        let (a, b) = (governor(rates.clone()), governor(rates.clone()));
        assert_eq!(
            a.receiver_throttled("big.example", t(0)).await.unwrap(),
            Some(Lowered::To { per_sec: 10.0 })
        );
        assert_eq!(
            b.receiver_throttled("big.example", t(1)).await.unwrap(),
            Some(Lowered::Held)
        );
        // after the hold the next reply lowers it again: 11/s (grown for 6 s) × 0.1
        match b.receiver_throttled("big.example", t(6)).await.unwrap() {
            Some(Lowered::To { per_sec }) => assert!((per_sec - 1.1).abs() < 1e-9, "{per_sec}"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_domain_grown_back_to_the_ceiling_is_unpaced_and_forgotten() {
        let rates = Arc::new(MemoryDestinationRates::default());
        let g = governor(rates.clone());
        g.receiver_throttled("old.example", t(0)).await.unwrap();
        // 10/s grows back to 100/s in 9 minutes
        assert_eq!(
            g.destination_rate("old.example", t(600)).await.unwrap(),
            None
        );
        g.receiver_throttled("new.example", t(600)).await.unwrap();
        let left: Vec<String> = rates.rates.lock().unwrap().keys().cloned().collect();
        assert_eq!(left, vec!["new.example".to_owned()]);
    }

    #[tokio::test]
    async fn a_failed_read_is_the_callers_error_and_a_failed_forget_is_not() {
        let rates = Arc::new(MemoryDestinationRates::default());
        let g = governor(rates.clone());
        rates.fail.set(1);
        assert!(g.destination_permit("big.example", t(0)).await.is_err());
        assert!(g.receiver_throttled("big.example", t(0)).await.is_ok());
        // the read, the write, then the forget of the grown domain fails: the decrease stands
        g.receiver_throttled("old.example", t(0)).await.unwrap();
        rates.fail.set_after(2, 1);
        assert_eq!(
            g.receiver_throttled("new.example", t(600)).await.unwrap(),
            Some(Lowered::To { per_sec: 10.0 })
        );
        assert!(rates.rates.lock().unwrap().contains_key("new.example"));
    }

    #[tokio::test]
    async fn without_destination_pacing_nothing_is_read() {
        let rates = Arc::new(MemoryDestinationRates::default());
        rates.fail.set(5);
        let g = Governor::new(Arc::new(MemorySendSchedule::default()), BTreeMap::new());
        assert_eq!(
            g.destination_permit("big.example", t(0)).await.unwrap(),
            Permit::Go {
                wait: Duration::ZERO
            }
        );
        assert_eq!(
            g.receiver_throttled("big.example", t(0)).await.unwrap(),
            None
        );
    }
}
