//! The simulated provider: a send-rate quota as a token bucket, the scenario's faults, and
//! recipients that always answer the same. Every failure is a real reply text, classified once
//! by the real classifier (the class is a pure function of the text, so one classification per
//! distinct reply loses nothing).

use courier_core::classify::{
    ApiFailure, ApiFailureKind, Verdict, classify_ses_api, classify_smtp,
};
use courier_core::random::{RandomSource, SeededRandom};

use crate::scenario::{FaultKind, OutageReply, Scenario};

/// A distinct failure reply and its verdict.
#[derive(Debug, Clone)]
pub struct Reply {
    pub text: String,
    pub verdict: Verdict,
}

/// What one call got.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Answer {
    Accepted {
        latency_ms: u64,
    },
    /// Failed with `replies[index]`.
    Failed {
        reply: usize,
        latency_ms: u64,
    },
    /// No answer within the send timeout; `delivered`: the provider got it anyway.
    TimedOut {
        delivered: bool,
        latency_ms: u64,
    },
}

/// The provider.
#[derive(Debug)]
pub struct Provider {
    pub replies: Vec<Reply>,
    throttle: usize,
    /// Per fault (same order as the scenario's): its reply index, if it has one.
    fault_reply: Vec<Option<usize>>,
    /// Per recipient share: its reply index.
    mix_reply: Vec<usize>,
    tokens: f64,
    last_ms: u64,
}

impl Provider {
    pub fn new(sc: &Scenario) -> Provider {
        let mut replies = Vec::new();
        let mut add = |text: String, verdict: Verdict| {
            replies.push(Reply { text, verdict });
            replies.len() - 1
        };
        let smtp = |t: &str| (t.to_owned(), classify_smtp(t));
        let (t, v) = smtp(&sc.provider.throttle_reply);
        let throttle = add(t, v);
        let fault_reply = sc
            .faults
            .iter()
            .map(|f| match &f.kind {
                FaultKind::Outage {
                    reply: OutageReply::Smtp(text),
                }
                | FaultKind::SoftBounceStorm { reply: text, .. } => {
                    let (t, v) = smtp(text);
                    Some(add(t, v))
                }
                FaultKind::Outage {
                    reply: OutageReply::ConnectionRefused,
                } => {
                    let failure = ApiFailure {
                        kind: ApiFailureKind::Dispatch,
                        code: None,
                        message: Some("dispatch failure: connection refused".into()),
                        http_status: None,
                    };
                    Some(add("connection refused".into(), classify_ses_api(&failure)))
                }
                FaultKind::ThrottleWave { .. } | FaultKind::LatencySpike { .. } => None,
            })
            .collect();
        let mix_reply = sc
            .mix
            .iter()
            .map(|m| {
                let (t, v) = smtp(&m.reply);
                add(t, v)
            })
            .collect();
        Provider {
            replies,
            throttle,
            fault_reply,
            mix_reply,
            tokens: sc.provider.quota_per_sec * sc.provider.burst_secs,
            last_ms: 0,
        }
    }

    /// The verdict of a timed-out call (as the SMTP mailer reports it: `local.smtp-timeout`).
    pub fn timeout_verdict() -> Verdict {
        Verdict::local(
            courier_core::classify::ErrorClass::Network,
            "smtp-timeout",
            "no reply within the send timeout",
        )
    }

    /// One call at `at_ms` for a job of recipient share `share` (`None`: an ordinary recipient).
    pub fn call(
        &mut self,
        sc: &Scenario,
        at_ms: u64,
        share: Option<usize>,
        rng: &mut SeededRandom,
    ) -> Answer {
        let base = sc.latency.provider_ms
            + (rng.next_unit() * sc.latency.provider_spread_ms as f64) as u64;
        let mut quota = sc.provider.quota_per_sec;
        let mut latency = base;
        let mut storm: Option<(f64, usize)> = None;
        for (i, f) in sc.faults.iter().enumerate() {
            if !f.active(at_ms) {
                continue;
            }
            match &f.kind {
                FaultKind::Outage { reply } => {
                    let latency_ms = match reply {
                        OutageReply::ConnectionRefused => 2,
                        OutageReply::Smtp(_) => base,
                    };
                    if let Some(reply) = self.fault_reply[i] {
                        return Answer::Failed { reply, latency_ms };
                    }
                }
                FaultKind::ThrottleWave { quota_factor } => quota *= quota_factor,
                FaultKind::LatencySpike { latency_ms } => latency = latency.max(*latency_ms),
                FaultKind::SoftBounceStorm { fraction, .. } => {
                    if let Some(reply) = self.fault_reply[i] {
                        storm = Some((*fraction, reply));
                    }
                }
            }
        }
        // The token bucket (calls can arrive slightly out of order: time never runs back).
        let burst = quota * sc.provider.burst_secs;
        if at_ms > self.last_ms {
            self.tokens = (self.tokens + (at_ms - self.last_ms) as f64 / 1000.0 * quota).min(burst);
            self.last_ms = at_ms;
        }
        self.tokens = self.tokens.min(burst.max(1.0));
        if self.tokens < 1.0 {
            return Answer::Failed {
                reply: self.throttle,
                latency_ms: base,
            };
        }
        self.tokens -= 1.0;
        if latency > sc.latency.send_timeout_ms {
            return Answer::TimedOut {
                delivered: rng.next_unit() < sc.provider.timeout_delivered,
                latency_ms: sc.latency.send_timeout_ms,
            };
        }
        if let Some(s) = share {
            return Answer::Failed {
                reply: self.mix_reply[s],
                latency_ms: latency,
            };
        }
        if let Some((fraction, reply)) = storm
            && rng.next_unit() < fraction
        {
            return Answer::Failed {
                reply,
                latency_ms: latency,
            };
        }
        Answer::Accepted {
            latency_ms: latency,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Fault;
    use courier_core::classify::ErrorClass;

    #[test]
    fn replies_are_classified_by_the_real_classifier() {
        let sc = Scenario {
            faults: vec![
                Fault {
                    start_secs: 0,
                    duration_secs: 10,
                    kind: FaultKind::Outage {
                        reply: OutageReply::Smtp(
                            "421 4.3.2 Service not available, closing transmission channel".into(),
                        ),
                    },
                },
                Fault {
                    start_secs: 20,
                    duration_secs: 10,
                    kind: FaultKind::Outage {
                        reply: OutageReply::ConnectionRefused,
                    },
                },
            ],
            ..Scenario::default()
        };
        let p = Provider::new(&sc);
        let classes: Vec<ErrorClass> = p.replies.iter().map(|r| r.verdict.class).collect();
        assert_eq!(
            classes,
            vec![
                ErrorClass::Throttled,
                ErrorClass::ProviderUnavailable,
                ErrorClass::Network
            ]
        );
    }

    #[test]
    fn the_bucket_admits_the_quota_and_throttles_beyond_it() {
        // GIVEN a 100/s quota WHEN 1,000 calls arrive within one second
        let sc = Scenario {
            provider: crate::scenario::ProviderModel {
                quota_per_sec: 100.0,
                ..Scenario::default().provider
            },
            ..Scenario::default()
        };
        let mut p = Provider::new(&sc);
        let mut rng = SeededRandom::new(1);
        let accepted = (0..1000)
            .filter(|i| {
                matches!(
                    p.call(&sc, 1000 + i, None, &mut rng),
                    Answer::Accepted { .. }
                )
            })
            .count();
        // THEN the burst (100) plus one second's refill (100) get through
        assert!((195..=201).contains(&accepted), "{accepted}");
    }
}
