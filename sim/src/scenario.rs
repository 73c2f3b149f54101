//! What is simulated: the workload, the AWS services' behaviour, the provider and its faults,
//! and the policy and breaker under test. [`Scenario::preset`] names the standard ones.

use courier_core::breaker::BreakerConfig;
use courier_core::job::Priority;
use courier_core::pacing::DestinationPacing;
use courier_core::policy::{Jitter, RetryPolicy};
use courier_core::rate::RateLimit;
use serde::Serialize;

/// Reply of a provider that is down: the SMTP text it answers with, or no connection at all.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "text")]
pub enum OutageReply {
    /// An SMTP reply (classified by `courier_core::classify::classify_smtp`).
    Smtp(String),
    /// The connection is refused (classified by `courier_core::classify::classify_ses_api` as an
    /// SES v2 dispatch failure: the request never reached the service).
    ConnectionRefused,
}

/// A fault active during `[start_secs, start_secs + duration_secs)`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fault {
    pub start_secs: u64,
    pub duration_secs: u64,
    pub kind: FaultKind,
}

impl Fault {
    pub fn end_secs(&self) -> u64 {
        self.start_secs + self.duration_secs
    }

    pub(crate) fn active(&self, at_ms: u64) -> bool {
        at_ms >= self.start_secs * 1000 && at_ms < self.end_secs() * 1000
    }
}

/// What goes wrong.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum FaultKind {
    /// Every call fails with `reply`; nothing is accepted.
    Outage { reply: OutageReply },
    /// The provider's send-rate quota drops to `quota_factor` of its normal value.
    ThrottleWave { quota_factor: f64 },
    /// Every call takes `latency_ms` (beyond the send timeout the outcome is ambiguous).
    LatencySpike { latency_ms: u64 },
    /// A share of otherwise accepted sends is answered with a soft bounce `reply`.
    SoftBounceStorm { fraction: f64, reply: String },
}

/// A share of the jobs whose recipient always answers `reply` (e.g. a dead address).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecipientShare {
    pub share: f64,
    pub reply: String,
}

/// One large receiving domain that takes `share` of the jobs and accepts at most
/// `accept_per_sec` of them (a token bucket of one second); beyond that it answers `reply`, a
/// throttle (Gmail's `421 4.7.28`, say). The other jobs' domains accept everything.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReceiverModel {
    pub share: f64,
    pub accept_per_sec: f64,
    pub reply: String,
}

/// Lambda's SQS event source mapping and the function.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LambdaModel {
    /// Concurrent batches when scaling starts (AWS: 5).
    pub initial_concurrency: u32,
    /// Added concurrency per minute while there is a backlog (AWS: up to 300 per minute).
    pub ramp_per_minute: u32,
    /// Ceiling: the mapping's MaximumConcurrency or the reserved concurrency.
    pub max_concurrency: u32,
    /// Records per invocation (1..=10 without a batching window).
    pub batch_size: u32,
    pub memory_mb: u32,
    /// Added to an instance's first invocation (INIT of the custom runtime).
    pub cold_start_ms: u64,
}

/// The send queue.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SqsModel {
    /// Seconds a received message stays invisible; a failed record comes back after it.
    pub visibility_timeout_secs: u64,
    /// Receives after which SQS moves a message to the redrive DLQ.
    pub max_receive_count: u32,
    /// Long-poll wait of an idle poller (an empty receive costs one request per wait).
    pub receive_wait_secs: u64,
}

/// Service latencies (medians; the provider's has a uniform spread on top).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Latencies {
    pub sqs_ms: u64,
    pub dynamodb_ms: u64,
    pub sfn_ms: u64,
    pub provider_ms: u64,
    pub provider_spread_ms: u64,
    /// The mailer's own timeout: a call not answered within it is ambiguous.
    pub send_timeout_ms: u64,
}

/// The provider's quota.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProviderModel {
    /// Sends per second (SES: the account's maximum send rate).
    pub quota_per_sec: f64,
    /// Token-bucket depth in seconds of quota.
    pub burst_secs: f64,
    /// Probability that a call that timed out was delivered anyway.
    pub timeout_delivered: f64,
    /// The reply beyond the quota (SES's SMTP interface wording).
    pub throttle_reply: String,
}

/// One simulation's full input.
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    pub name: String,
    pub seed: u64,
    pub jobs: u64,
    /// Jobs arrive evenly over this many seconds (0: all at once).
    pub arrival_secs: u64,
    pub priority: Priority,
    pub lambda: LambdaModel,
    pub sqs: SqsModel,
    pub latency: Latencies,
    pub provider: ProviderModel,
    pub faults: Vec<Fault>,
    pub mix: Vec<RecipientShare>,
    /// `None`: no breaker at all (every call goes to the provider).
    pub breaker: Option<BreakerConfig>,
    /// How long an instance caches the shared breaker state (`COURIER_BREAKER_CACHE`).
    pub breaker_cache_ms: u64,
    /// The send-rate governor (`COURIER_SEND_RATE_*`); `None`: calls are not paced.
    #[serde(skip)]
    pub send_rate: Option<RateLimit>,
    /// How long an instance caches the poison blocklist.
    pub poison_cache_ms: u64,
    /// A receiving domain that throttles (`None`: every domain accepts everything).
    pub receiver: Option<ReceiverModel>,
    /// Per-destination pacing (`COURIER_DESTINATION_PACING`); `None`: off.
    #[serde(skip)]
    pub destination_pacing: Option<DestinationPacing>,
    /// The retry lane (`COURIER_RETRY_HORIZON`, 1 s as in the function): retries book the
    /// send-rate schedule only while it is booked less than this far ahead; `None`: off.
    #[serde(skip)]
    pub retry_horizon: Option<std::time::Duration>,
    /// The retry queue (`COURIER_RETRY_QUEUE_URL` with the template's `RetryConcurrency`):
    /// copies that waited come back on their own queue, polled by their own event source of at
    /// most this many instances, while `lambda.max_concurrency` polls the send queue; `None`:
    /// one queue for all.
    pub retry_concurrency: Option<u32>,
    #[serde(skip)]
    pub policy: RetryPolicy,
    /// A label for the policy in reports (`default`, a file name, a jitter name).
    pub policy_label: String,
    /// How long an ambiguous outcome waits before a resend (`COURIER_AMBIGUITY_GRACE`).
    pub ambiguity_grace_secs: u64,
    /// Probability that a record's DynamoDB write fails (the record is redelivered).
    pub aws_error_rate: f64,
    /// The simulation stops here even if jobs are still pending.
    pub max_sim_secs: u64,
}

/// The preset names `Scenario::preset` knows.
pub const PRESETS: [&str; 7] = [
    "steady",
    "outage-30m",
    "outage-30m-refused",
    "throttle-wave",
    "latency-spike",
    "soft-bounce-storm",
    "receiver-throttle",
];

const MINUTE: u64 = 60;

impl Default for Scenario {
    /// Steady traffic, no faults: 100,000 transactional jobs over 10 minutes, a 500/s quota,
    /// up to 1,000 instances, the default policy and breaker.
    fn default() -> Scenario {
        Scenario {
            name: "steady".into(),
            seed: 1,
            jobs: 100_000,
            arrival_secs: 10 * MINUTE,
            priority: Priority::Transactional,
            lambda: LambdaModel {
                initial_concurrency: 5,
                ramp_per_minute: 300,
                max_concurrency: 1000,
                batch_size: 10,
                memory_mb: 256,
                cold_start_ms: 60,
            },
            sqs: SqsModel {
                visibility_timeout_secs: 180,
                max_receive_count: 5,
                receive_wait_secs: 20,
            },
            latency: Latencies {
                sqs_ms: 10,
                dynamodb_ms: 8,
                sfn_ms: 40,
                provider_ms: 120,
                provider_spread_ms: 160,
                send_timeout_ms: 10_000,
            },
            provider: ProviderModel {
                quota_per_sec: 500.0,
                burst_secs: 1.0,
                timeout_delivered: 0.5,
                throttle_reply: "454 4.7.0 Throttling failure: Maximum sending rate exceeded."
                    .into(),
            },
            faults: Vec::new(),
            mix: Vec::new(),
            breaker: Some(BreakerConfig::default()),
            breaker_cache_ms: 2_000,
            send_rate: Some(Scenario::send_rate_of(500.0)),
            poison_cache_ms: 60_000,
            receiver: None,
            destination_pacing: Some(DestinationPacing::default()),
            retry_horizon: Some(RateLimit::DEFAULT_RETRY_HORIZON),
            retry_concurrency: None,
            policy: RetryPolicy::default(),
            policy_label: "default".into(),
            ambiguity_grace_secs: 900,
            aws_error_rate: 0.0,
            max_sim_secs: 7 * 24 * 3600,
        }
    }
}

impl Scenario {
    /// A named scenario (see [`PRESETS`]); faults start 10 minutes into the run.
    pub fn preset(name: &str) -> Option<Scenario> {
        let base = Scenario {
            name: name.to_owned(),
            arrival_secs: 60 * MINUTE,
            jobs: 1_000_000,
            ..Scenario::default()
        };
        let at = 10 * MINUTE;
        let fault = |duration_secs, kind| Fault {
            start_secs: at,
            duration_secs,
            kind,
        };
        if name == "receiver-throttle" {
            // 300,000 jobs over 30 minutes (167/s), 40% of them to one domain that accepts
            // 40/s and throttles the rest; the provider's quota (500/s) is never the limit.
            return Some(Scenario {
                jobs: 300_000,
                arrival_secs: 30 * MINUTE,
                receiver: Some(ReceiverModel {
                    share: 0.4,
                    accept_per_sec: 40.0,
                    reply: "421 4.7.28 [192.0.2.1] Our system has detected an unusual rate of \
                            unsolicited mail originating from your IP address. To protect our \
                            users from spam, mail sent from your IP address has been \
                            temporarily rate limited."
                        .into(),
                }),
                ..base
            });
        }
        let faults = match name {
            "steady" => Vec::new(),
            "outage-30m" => vec![fault(
                30 * MINUTE,
                FaultKind::Outage {
                    reply: OutageReply::Smtp(
                        "421 4.3.2 Service not available, closing transmission channel".into(),
                    ),
                },
            )],
            "outage-30m-refused" => vec![fault(
                30 * MINUTE,
                FaultKind::Outage {
                    reply: OutageReply::ConnectionRefused,
                },
            )],
            "throttle-wave" => (0..3)
                .map(|i| Fault {
                    start_secs: at + i * 15 * MINUTE,
                    duration_secs: 5 * MINUTE,
                    kind: FaultKind::ThrottleWave { quota_factor: 0.2 },
                })
                .collect(),
            "latency-spike" => vec![fault(
                10 * MINUTE,
                FaultKind::LatencySpike { latency_ms: 15_000 },
            )],
            "soft-bounce-storm" => vec![fault(
                30 * MINUTE,
                FaultKind::SoftBounceStorm {
                    fraction: 0.3,
                    reply: "450 4.2.0 Greylisted, please try again later".into(),
                },
            )],
            _ => return None,
        };
        Some(Scenario { faults, ..base })
    }

    /// Sets every retryable class's jitter (for side-by-side comparisons).
    pub fn with_jitter(mut self, jitter: Jitter, label: &str) -> Scenario {
        for tier in [&mut self.policy.transactional, &mut self.policy.bulk] {
            for rule in tier.classes.values_mut() {
                rule.jitter = jitter;
            }
        }
        self.policy_label = label.to_owned();
        self
    }

    /// The governor as Courier is meant to be deployed: paced at the provider's quota, with the
    /// default horizon and chunk.
    pub fn send_rate_of(per_sec: f64) -> RateLimit {
        RateLimit {
            per_sec,
            max_ahead: RateLimit::DEFAULT_MAX_AHEAD,
            chunk: RateLimit::DEFAULT_CHUNK,
        }
    }

    /// Whether any outage is active at `at_ms`.
    pub(crate) fn in_outage(&self, at_ms: u64) -> bool {
        self.faults
            .iter()
            .any(|f| matches!(f.kind, FaultKind::Outage { .. }) && f.active(at_ms))
    }

    /// End of the last fault (seconds), if any.
    pub fn recovery_secs(&self) -> Option<u64> {
        self.faults.iter().map(Fault::end_secs).max()
    }

    /// Start of the first fault (seconds), if any.
    pub fn first_fault_secs(&self) -> Option<u64> {
        self.faults.iter().map(|f| f.start_secs).min()
    }

    /// Checks values that would make the run meaningless.
    pub fn validate(&self) -> Result<(), String> {
        let l = &self.lambda;
        if l.batch_size == 0 || l.batch_size > 10 {
            return Err(format!("batch size must be 1..=10, is {}", l.batch_size));
        }
        if l.max_concurrency == 0 || l.initial_concurrency == 0 || self.retry_concurrency == Some(0)
        {
            return Err("concurrency must be at least 1".into());
        }
        if !(self.provider.quota_per_sec > 0.0 && self.provider.quota_per_sec.is_finite()) {
            return Err(format!(
                "quota must be positive, is {}",
                self.provider.quota_per_sec
            ));
        }
        if let Some(rate) = self.send_rate {
            rate.validated().map_err(|e| e.to_string())?;
        }
        if let Some(r) = &self.receiver
            && !((0.0..=1.0).contains(&r.share)
                && r.accept_per_sec > 0.0
                && r.accept_per_sec.is_finite())
        {
            return Err(format!(
                "the receiver's share must be in 0..=1 and its rate positive, not {} and {}",
                r.share, r.accept_per_sec
            ));
        }
        if let Some(h) = self.retry_horizon
            && h.is_zero()
        {
            return Err("the retry horizon must be positive".into());
        }
        if let Some(p) = self.destination_pacing {
            p.validated().map_err(|e| e.to_string())?;
        }
        let total: f64 = self.mix.iter().map(|m| m.share).sum();
        if !(0.0..=1.0).contains(&total) {
            return Err(format!("recipient shares add up to {total}, more than 1"));
        }
        if self.jobs > u64::from(u32::MAX) {
            return Err("at most 4,294,967,295 jobs".into());
        }
        self.policy.validate().map_err(|e| e.to_string())
    }
}
