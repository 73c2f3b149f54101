//! This instance's side of the shared send-rate governor (`courier_core::rate`): slots reserved from
//! the provider's shared schedule a chunk at a time, handed out to this instance's sends. A
//! provider without a configured rate may be paced by its own quota ([`QuotaPacing`]), read at
//! INIT and again every [`QuotaPacing::every`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use courier_core::ports::{SendQuota, SendSchedule, StoreError};
use courier_core::rate::{Allowance, RateLimit, Reservation};

mod destinations;
pub use destinations::{Destinations, Lowered};

/// What a send may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permit {
    /// Send after waiting `wait` (zero: at once).
    Go { wait: Duration },
    /// The provider's schedule is booked past the horizon, until `until`: do not call it now.
    Refused { until: DateTime<Utc> },
}

/// A provider paced by the quota it reports (SES `GetAccount`'s `MaxSendRate`).
pub struct QuotaPacing {
    pub provider: String,
    pub quota: Arc<dyn SendQuota>,
    /// The horizon and chunk of the limit (its rate is the quota).
    pub shape: RateLimit,
    /// How often the quota is read again (a raised quota is used within this).
    pub every: chrono::Duration,
}

impl QuotaPacing {
    /// Read again every 10 minutes.
    pub const EVERY_SECS: i64 = 600;
    /// After a failed read, tried again after a minute.
    pub const RETRY_SECS: i64 = 60;
    /// The rate until the first read succeeds: SES's sandbox quota, the lowest an account has.
    pub const FALLBACK_PER_SEC: f64 = 1.0;
}

/// What a quota read did.
#[derive(Debug)]
pub enum QuotaRead {
    /// The provider is now paced at this rate.
    Paced { provider: String, per_sec: f64 },
    /// The read failed or made no sense: the previous rate stays (at first, the fallback).
    Kept {
        provider: String,
        per_sec: f64,
        error: StoreError,
    },
}

/// The schedules of the providers that have a rate limit; others are never held back.
pub struct Governor {
    schedule: Arc<dyn SendSchedule>,
    /// Per-destination pacing (`None`: receiving domains are not paced).
    destinations: Option<destinations::Destinations>,
    limits: std::sync::RwLock<BTreeMap<String, RateLimit>>,
    /// Rates the live settings set (`None`: unpaced), over `limits` and quota pacing.
    live_limits: std::sync::RwLock<BTreeMap<String, Option<RateLimit>>>,
    /// The retry lane: copies that already waited (retries) book a paced provider's schedule
    /// only while it is booked less than this far ahead; fresh mail up to the full horizon
    /// (`None`: no lane, retries book like fresh mail).
    retry_horizon: Option<Duration>,
    pacing: Option<QuotaPacing>,
    /// When the quota is due to be read (`None`: now).
    next_read: tokio::sync::Mutex<Option<DateTime<Utc>>>,
    allowances: tokio::sync::Mutex<BTreeMap<String, Allowance>>,
    /// Per provider, when the last refused booking saw the schedule booked until (µs).
    refused: std::sync::Mutex<BTreeMap<String, i64>>,
}

impl Governor {
    pub fn new(schedule: Arc<dyn SendSchedule>, limits: BTreeMap<String, RateLimit>) -> Governor {
        Governor {
            schedule,
            destinations: None,
            limits: std::sync::RwLock::new(limits),
            live_limits: std::sync::RwLock::new(BTreeMap::new()),
            retry_horizon: None,
            pacing: None,
            next_read: tokio::sync::Mutex::new(None),
            allowances: tokio::sync::Mutex::new(BTreeMap::new()),
            refused: std::sync::Mutex::new(BTreeMap::new()),
        }
    }

    /// Retries (copies that already waited) book a paced provider's schedule only while it is
    /// booked less than `horizon` ahead, fresh mail up to the provider's full horizon: fresh
    /// mail always finds a slot within about `horizon` however many retries wait, and retries
    /// take every slot fresh mail leaves (the lane is work-conserving).
    pub fn with_retry_horizon(self, horizon: Duration) -> Governor {
        Governor {
            retry_horizon: Some(horizon),
            ..self
        }
    }

    /// The limit a retry books `provider`'s schedule with: the provider's, with the retry
    /// horizon (`None`: the provider is not paced).
    fn retry_limit(&self, provider: &str) -> Option<RateLimit> {
        let limit = self.limit(provider)?;
        Some(match self.retry_horizon {
            Some(h) => RateLimit {
                max_ahead: h.min(limit.max_ahead),
                ..limit
            },
            None => limit,
        })
    }

    /// A slot for one retry to `provider` at `now`: as [`Governor::permit`], within the retry
    /// horizon.
    pub async fn retry_permit(
        &self,
        provider: &str,
        now: DateTime<Utc>,
        wanted: u32,
    ) -> Result<Permit, StoreError> {
        match self.retry_limit(provider) {
            None => Ok(Permit::Go {
                wait: Duration::ZERO,
            }),
            Some(limit) => self.book(provider, limit, now, wanted).await,
        }
    }

    /// Until when a retry's booking on `provider`'s schedule is sure to be refused, as this
    /// instance last saw it (see [`Governor::refused_until`]).
    pub async fn retry_refused_until(
        &self,
        provider: &str,
        now: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        let limit = self.retry_limit(provider)?;
        self.known_refusal(provider, limit, now).await
    }

    /// Paces `pacing.provider` by its quota: at [`QuotaPacing::FALLBACK_PER_SEC`] until the
    /// first read ([`Governor::read_quota`]) succeeds.
    pub fn with_quota(self, pacing: QuotaPacing) -> Governor {
        let fallback = RateLimit {
            per_sec: QuotaPacing::FALLBACK_PER_SEC,
            ..pacing.shape
        };
        self.write_limits()
            .insert(pacing.provider.clone(), fallback);
        Governor {
            pacing: Some(pacing),
            ..self
        }
    }

    fn write_limits(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, RateLimit>> {
        self.limits
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reads the quota when it is due (at INIT, then every [`QuotaPacing::every`]; a minute
    /// after a failure) and paces by it; `None` when nothing was due or nothing is paced so.
    pub async fn read_quota(&self, now: DateTime<Utc>) -> Option<QuotaRead> {
        let pacing = self.pacing.as_ref()?;
        let mut next = self.next_read.lock().await;
        if next.is_some_and(|at| now < at) {
            return None;
        }
        let provider = pacing.provider.clone();
        let read = pacing.quota.max_send_rate().await.and_then(|per_sec| {
            RateLimit {
                per_sec,
                ..pacing.shape
            }
            .validated()
            .map_err(|e| StoreError::new("read the send quota", e))
        });
        match read {
            Ok(limit) => {
                self.write_limits().insert(provider.clone(), limit);
                *next = Some(now + pacing.every);
                Some(QuotaRead::Paced {
                    provider,
                    per_sec: limit.per_sec,
                })
            }
            Err(error) => {
                *next = Some(now + chrono::Duration::seconds(QuotaPacing::RETRY_SECS));
                let per_sec = self.limit(&provider).map_or(0.0, |l| l.per_sec);
                Some(QuotaRead::Kept {
                    provider,
                    per_sec,
                    error,
                })
            }
        }
    }

    /// Until when a booking on `provider`'s schedule is sure to be refused, as this instance
    /// last saw it (no call): the schedule only moves forward, so after a refusal that saw it
    /// booked until `b`, every booking before `b - max_ahead` is refused too, unless this
    /// instance still holds slots of its own.
    pub async fn refused_until(&self, provider: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let limit = self.limit(provider)?;
        self.known_refusal(provider, limit, now).await
    }

    /// Until when bookings on `key`'s schedule (at `limit`) are sure to be refused: its last
    /// refusal's booked time less the horizon, unless this instance still holds a slot.
    async fn known_refusal(
        &self,
        key: &str,
        limit: RateLimit,
        now: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        let provider = key;
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

    /// Sets the rates the live settings name (replacing those they named before); the other
    /// providers keep the deployment's pacing.
    pub fn set_live_rates(&self, rates: BTreeMap<String, Option<RateLimit>>) {
        *self
            .live_limits
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = rates;
    }

    /// The limit on `provider`, if any: the live settings' rate, else the deployment's.
    pub fn limit(&self, provider: &str) -> Option<RateLimit> {
        if let Some(live) = self
            .live_limits
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(provider)
        {
            return *live;
        }
        self.limits
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(provider)
            .copied()
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
        let Some(limit) = self.limit(provider) else {
            return Ok(Permit::Go {
                wait: Duration::ZERO,
            });
        };
        self.book(provider, limit, now, wanted).await
    }

    /// A slot on `key`'s schedule at `limit`: from this instance's unused slots, else booked
    /// on the shared schedule.
    async fn book(
        &self,
        key: &str,
        limit: RateLimit,
        now: DateTime<Utc>,
        wanted: u32,
    ) -> Result<Permit, StoreError> {
        let provider = key;
        let now_us = now.timestamp_micros();
        let spacing = limit.spacing_us();
        let go = |slot: i64| Permit::Go {
            wait: Duration::from_micros(u64::try_from(slot - now_us).unwrap_or(0)),
        };
        // Held across the reservation: concurrent records of the batch share one chunk.
        let mut allowances = self.allowances.lock().await;
        let allowance = allowances.entry(provider.to_owned()).or_default();
        // (A retry may take a slot fresh mail booked further ahead than the retry horizon: the
        // simulator measured that refusing it wastes the slot and slows fresh mail too.)
        if let Some(slot) = allowance.take(now_us, spacing) {
            return Ok(go(slot));
        }
        // No more slots than fit in the horizon: at a low rate (SES's sandbox 1/s) a chunk of 10
        // would have the batch's last record wait 9 s in the invocation.
        let within = u32::try_from(limit.max_ahead_us() / spacing.max(1))
            .unwrap_or(u32::MAX)
            .max(1);
        let chunk = limit.chunk.min(wanted.max(1)).min(within);
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
    async fn retries_book_only_the_near_end_and_fresh_mail_always_finds_a_slot() {
        // GIVEN 10 calls/s, chunks of 1, horizon 1 s, retries' horizon 300 ms
        let schedule = Arc::new(MemorySendSchedule::default());
        let g = governor(schedule.clone(), 10.0, 1).with_retry_horizon(Duration::from_millis(300));
        let go = |ms| Permit::Go {
            wait: Duration::from_millis(ms),
        };
        // THEN retries take the slots up to 300 ms ahead, then are refused
        for ms in [0, 100, 200, 300] {
            assert_eq!(g.retry_permit("ses", t(0), 1).await.unwrap(), go(ms));
        }
        assert!(matches!(
            g.retry_permit("ses", t(0), 1).await.unwrap(),
            Permit::Refused { .. }
        ));
        // AND this instance knows it without a call until the schedule is near again
        assert_eq!(g.retry_refused_until("ses", t(0)).await, Some(t(100_000)));
        // AND fresh mail still books, up to the full horizon
        assert_eq!(g.permit("ses", t(0), 1).await.unwrap(), go(400));
        assert_eq!(g.permit("ses", t(0), 1).await.unwrap(), go(500));
        // AND without a lane, retries book like fresh mail; an unpaced provider is open
        let open = governor(schedule, 10.0, 1);
        assert_eq!(open.retry_permit("ses", t(0), 1).await.unwrap(), go(600));
        assert_eq!(g.retry_permit("smtp", t(0), 1).await.unwrap(), go(0));
    }

    #[tokio::test]
    async fn at_a_low_rate_a_chunk_books_no_further_than_the_horizon() {
        // GIVEN 1 call/s (SES's sandbox), chunks of 10, horizon 1 s, a batch of 10 records
        let schedule = Arc::new(MemorySendSchedule::default());
        let g = governor(schedule.clone(), 1.0, 10);
        // THEN the first goes now, the next waits its 1 s slot, the third is refused (it would
        // wait 2 s in the invocation), not handed a slot 9 s away
        let go = |ms| Permit::Go {
            wait: Duration::from_millis(ms),
        };
        assert_eq!(g.permit("ses", t(0), 10).await.unwrap(), go(0));
        assert_eq!(g.permit("ses", t(0), 9).await.unwrap(), go(1000));
        assert!(matches!(
            g.permit("ses", t(0), 8).await.unwrap(),
            Permit::Refused { .. }
        ));
        assert_eq!(
            schedule.tats.lock().unwrap()["ses"],
            t(2_000_000).timestamp_micros()
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

    /// Answers the quota reads from a script, counting them.
    struct ScriptedQuota {
        answers: std::sync::Mutex<Vec<Result<f64, StoreError>>>,
        reads: std::sync::atomic::AtomicUsize,
    }

    #[async_trait::async_trait]
    impl SendQuota for ScriptedQuota {
        async fn max_send_rate(&self) -> Result<f64, StoreError> {
            self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.answers.lock().unwrap().remove(0)
        }
    }

    fn paced(answers: Vec<Result<f64, StoreError>>) -> (Governor, Arc<ScriptedQuota>) {
        let quota = Arc::new(ScriptedQuota {
            answers: std::sync::Mutex::new(answers),
            reads: std::sync::atomic::AtomicUsize::new(0),
        });
        let g = Governor::new(Arc::new(MemorySendSchedule::default()), BTreeMap::new()).with_quota(
            QuotaPacing {
                provider: "ses".into(),
                quota: quota.clone(),
                shape: RateLimit {
                    per_sec: 1.0,
                    max_ahead: Duration::from_secs(2),
                    chunk: 5,
                },
                every: chrono::Duration::minutes(10),
            },
        );
        (g, quota)
    }

    #[tokio::test]
    async fn without_a_configured_rate_ses_is_paced_by_its_quota_read_now_and_then() {
        let (g, quota) = paced(vec![Ok(14.0), Ok(50.0)]);
        // Before the first read: the sandbox's rate, never unpaced.
        assert_eq!(
            g.limit("ses").unwrap().per_sec,
            QuotaPacing::FALLBACK_PER_SEC
        );
        assert!(matches!(
            g.read_quota(t(0)).await,
            Some(QuotaRead::Paced { per_sec, .. }) if per_sec == 14.0
        ));
        let limit = g.limit("ses").unwrap();
        assert_eq!(
            (limit.per_sec, limit.max_ahead, limit.chunk),
            (14.0, Duration::from_secs(2), 5)
        );
        // Not read again before it is due; then the raised quota is used.
        assert!(g.read_quota(t(599_000_000)).await.is_none());
        assert_eq!(quota.reads.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(g.read_quota(t(600_000_000)).await.is_some());
        assert_eq!(g.limit("ses").unwrap().per_sec, 50.0);
        // The slots follow the quota: 50/s is 20 ms apart.
        assert_eq!(
            g.permit("ses", t(600_000_000), 5).await.unwrap(),
            Permit::Go {
                wait: Duration::ZERO
            }
        );
        assert_eq!(
            g.permit("ses", t(600_000_000), 5).await.unwrap(),
            Permit::Go {
                wait: Duration::from_millis(20)
            }
        );
        // A provider paced by nothing stays unpaced.
        assert_eq!(g.limit("smtp"), None);
    }

    #[tokio::test]
    async fn a_failed_or_senseless_read_keeps_the_rate_and_is_tried_again_in_a_minute() {
        let (g, quota) = paced(vec![
            Err(StoreError::msg("GetAccount", "AccessDenied")),
            Ok(0.0),
            Ok(f64::NAN),
            Ok(20.0),
        ]);
        assert!(matches!(
            g.read_quota(t(0)).await,
            Some(QuotaRead::Kept { per_sec, .. }) if per_sec == QuotaPacing::FALLBACK_PER_SEC
        ));
        assert!(
            g.read_quota(t(59_000_000)).await.is_none(),
            "not before a minute"
        );
        for at in [60, 120] {
            assert!(matches!(
                g.read_quota(t(at * 1_000_000)).await,
                Some(QuotaRead::Kept { .. })
            ));
        }
        assert_eq!(
            g.limit("ses").unwrap().per_sec,
            QuotaPacing::FALLBACK_PER_SEC
        );
        assert!(matches!(
            g.read_quota(t(180_000_000)).await,
            Some(QuotaRead::Paced { per_sec, .. }) if per_sec == 20.0
        ));
        assert_eq!(quota.reads.load(std::sync::atomic::Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn a_governor_without_quota_pacing_never_reads_one() {
        let g = governor(Arc::new(MemorySendSchedule::default()), 10.0, 2);
        assert!(g.read_quota(t(0)).await.is_none());
    }
}
