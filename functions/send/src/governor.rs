//! This instance's side of the shared send-rate governor (`courier_core::rate`): slots reserved from
//! the provider's shared schedule a chunk at a time, handed out to this instance's sends.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use courier_core::ports::{SendSchedule, StoreError};
use courier_core::rate::{Allowance, RateLimit, Reservation};

/// What a send may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permit {
    /// Send after waiting `wait` (zero: at once).
    Go { wait: Duration },
    /// The provider's schedule is booked past the horizon, until `until`: do not call it now.
    Refused { until: DateTime<Utc> },
}

/// The schedules of the providers that have a rate limit; others are never held back.
pub struct Governor {
    schedule: Arc<dyn SendSchedule>,
    limits: BTreeMap<String, RateLimit>,
    allowances: tokio::sync::Mutex<BTreeMap<String, Allowance>>,
    /// Per provider, when the last refused booking saw the schedule booked until (µs).
    refused: std::sync::Mutex<BTreeMap<String, i64>>,
}

impl Governor {
    pub fn new(schedule: Arc<dyn SendSchedule>, limits: BTreeMap<String, RateLimit>) -> Governor {
        Governor {
            schedule,
            limits,
            allowances: tokio::sync::Mutex::new(BTreeMap::new()),
            refused: std::sync::Mutex::new(BTreeMap::new()),
        }
    }

    /// Until when a booking on `provider`'s schedule is sure to be refused, as this instance
    /// last saw it (no call): the schedule only moves forward, so after a refusal that saw it
    /// booked until `b`, every booking before `b - max_ahead` is refused too, unless this
    /// instance still holds slots of its own.
    pub async fn refused_until(&self, provider: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let limit = self.limits.get(provider)?;
        let booked = *self
            .refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(provider)?;
        let grantable = booked - limit.max_ahead_us();
        let now_us = now.timestamp_micros();
        if now_us >= grantable {
            return None;
        }
        let allowances = self.allowances.lock().await;
        if let Some(mut probe) = allowances.get(provider).copied()
            && probe.take(now_us, limit.spacing_us()).is_some()
        {
            return None;
        }
        DateTime::from_timestamp_micros(grantable)
    }

    /// The limit on `provider`, if any.
    pub fn limit(&self, provider: &str) -> Option<&RateLimit> {
        self.limits.get(provider)
    }

    /// A slot for one call to `provider` at `now`: from this instance's unused slots, else from
    /// the shared schedule (one write for `chunk` slots, or `wanted` if fewer: the sends the
    /// caller expects to make soon; slots booked and not used lapse, idling the provider).
    pub async fn permit(
        &self,
        provider: &str,
        now: DateTime<Utc>,
        wanted: u32,
    ) -> Result<Permit, StoreError> {
        let Some(limit) = self.limits.get(provider) else {
            return Ok(Permit::Go {
                wait: Duration::ZERO,
            });
        };
        let now_us = now.timestamp_micros();
        let spacing = limit.spacing_us();
        let go = |slot: i64| Permit::Go {
            wait: Duration::from_micros(u64::try_from(slot - now_us).unwrap_or(0)),
        };
        // Held across the reservation: concurrent records of the batch share one chunk.
        let mut allowances = self.allowances.lock().await;
        let allowance = allowances.entry(provider.to_owned()).or_default();
        if let Some(slot) = allowance.take(now_us, spacing) {
            return Ok(go(slot));
        }
        let chunk = limit.chunk.min(wanted.max(1));
        let cost = spacing.saturating_mul(i64::from(chunk));
        match self
            .schedule
            .reserve(provider, now_us, cost, limit.max_ahead_us())
            .await?
        {
            Reservation::Granted { start_us } => {
                *allowance = Allowance::new(start_us, chunk);
                Ok(allowance.take(now_us, spacing).map_or(
                    Permit::Refused {
                        until: now + chrono::Duration::microseconds(spacing),
                    },
                    go,
                ))
            }
            Reservation::Refused { booked_until_us } => {
                self.refused
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(provider.to_owned(), booked_until_us);
                Ok(Permit::Refused {
                    until: DateTime::from_timestamp_micros(booked_until_us).unwrap_or(now),
                })
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use courier_devkit::memory::MemorySendSchedule;

    fn t(us: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_micros(1_800_000_000_000_000 + us).unwrap()
    }

    /// A schedule whose `ses` slots are booked until `until`.
    fn booked_until(until: DateTime<Utc>) -> Arc<MemorySendSchedule> {
        let schedule = Arc::new(MemorySendSchedule::default());
        schedule
            .tats
            .lock()
            .unwrap()
            .insert("ses".into(), until.timestamp_micros());
        schedule
    }

    fn governor(schedule: Arc<MemorySendSchedule>, per_sec: f64, chunk: u32) -> Governor {
        let limit = RateLimit {
            per_sec,
            max_ahead: Duration::from_secs(1),
            chunk,
        };
        Governor::new(schedule, BTreeMap::from([("ses".to_owned(), limit)]))
    }

    #[tokio::test]
    async fn an_unlimited_provider_goes_at_once_without_touching_the_schedule() {
        let schedule = Arc::new(MemorySendSchedule::default());
        schedule.fail.set(1);
        let g = governor(schedule.clone(), 10.0, 2);
        assert_eq!(
            g.permit("smtp", t(0), 10).await.unwrap(),
            Permit::Go {
                wait: Duration::ZERO
            }
        );
    }

    #[tokio::test]
    async fn two_instances_share_the_rate_one_chunk_at_a_time() {
        // GIVEN 10 calls/s (100 ms apart), chunks of 2, two instances on one schedule
        let schedule = Arc::new(MemorySendSchedule::default());
        let (a, b) = (
            governor(schedule.clone(), 10.0, 2),
            governor(schedule.clone(), 10.0, 2),
        );
        let wait = |ms| Permit::Go {
            wait: Duration::from_millis(ms),
        };
        // THEN a gets slots 0 and 100 ms, b the next chunk (200, 300 ms), a the one after
        assert_eq!(a.permit("ses", t(0), 10).await.unwrap(), wait(0));
        assert_eq!(b.permit("ses", t(0), 10).await.unwrap(), wait(200));
        assert_eq!(a.permit("ses", t(0), 10).await.unwrap(), wait(100));
        assert_eq!(b.permit("ses", t(0), 10).await.unwrap(), wait(300));
        assert_eq!(a.permit("ses", t(0), 10).await.unwrap(), wait(400));
        // AND a caller that wants fewer slots than a chunk books only those
        assert_eq!(b.permit("ses", t(0), 1).await.unwrap(), wait(600));
        assert_eq!(a.permit("ses", t(0), 10).await.unwrap(), wait(500));
        // AND the shared schedule holds exactly what was handed out
        assert_eq!(
            schedule.tats.lock().unwrap().get("ses").copied(),
            Some(t(700_000).timestamp_micros())
        );
    }

    #[tokio::test]
    async fn past_the_horizon_a_send_is_refused_until_the_booked_time() {
        // GIVEN a schedule already booked 1.2 s ahead (horizon 1 s)
        let schedule = booked_until(t(1_200_000));
        let g = governor(schedule, 10.0, 2);
        // THEN the send is refused until then, and later it is granted the booked slot
        assert_eq!(
            g.permit("ses", t(0), 10).await.unwrap(),
            Permit::Refused {
                until: t(1_200_000)
            }
        );
        assert_eq!(
            g.permit("ses", t(300_000), 10).await.unwrap(),
            Permit::Go {
                wait: Duration::from_millis(900)
            }
        );
    }

    #[tokio::test]
    async fn after_a_refusal_the_instance_knows_without_asking_until_when_it_lasts() {
        // GIVEN a schedule booked 1.2 s ahead (horizon 1 s): a booking is refused
        let schedule = booked_until(t(1_200_000));
        let g = governor(schedule.clone(), 10.0, 2);
        assert_eq!(g.refused_until("ses", t(0)).await, None, "nothing seen yet");
        assert!(matches!(
            g.permit("ses", t(0), 10).await.unwrap(),
            Permit::Refused { .. }
        ));
        // THEN, with the schedule unreachable, it still answers: refused until 0.2 s
        schedule.fail.set(10);
        assert_eq!(g.refused_until("ses", t(100_000)).await, Some(t(200_000)));
        assert_eq!(g.refused_until("ses", t(200_000)).await, None);
        assert_eq!(g.refused_until("smtp", t(0)).await, None, "no limit");
    }

    #[tokio::test]
    async fn a_schedule_that_cannot_be_reached_is_an_error_not_a_free_pass() {
        let schedule = Arc::new(MemorySendSchedule::default());
        schedule.fail.set(1);
        let g = governor(schedule, 10.0, 2);
        let e = g.permit("ses", t(0), 10).await.unwrap_err();
        assert_eq!(e.operation, "send schedule");
    }
}
