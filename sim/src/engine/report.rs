//! The run's figures, read off the engine at the end.

use super::*;

/// The `p` percentile of sorted milliseconds, in seconds.
fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

impl Engine<'_> {
    fn receiver_figures(&self) -> Option<crate::report::ReceiverFigures> {
        let r = self.receiver.as_ref()?;
        let (mut mine, mut others) = (Vec::new(), Vec::new());
        let (mut jobs, mut dead) = (0, 0);
        for j in &self.jobs {
            let to_receiver = j.flags & F_RECEIVER != 0;
            if to_receiver {
                jobs += 1;
                dead += u64::from(j.fate == Fate::DeadLettered);
            }
            if j.fate == Fate::Sent {
                let latency = j.finished - j.arrived;
                if to_receiver {
                    mine.push(latency);
                } else {
                    others.push(latency);
                }
            }
        }
        mine.sort_unstable();
        others.sort_unstable();
        let span = r
            .first_accept_ms
            .map_or(0.0, |f| r.last_accept_ms.saturating_sub(f) as f64 / 1000.0);
        Some(crate::report::ReceiverFigures {
            pacing: self.sc.destination_pacing.map_or_else(
                || "off".into(),
                |p| {
                    format!(
                        "{}..{}/s, +{}/s per minute, x{}",
                        p.floor_per_sec, p.ceiling_per_sec, p.increase_per_min, p.decrease
                    )
                },
            ),
            jobs,
            sent: mine.len() as u64,
            dead_lettered: dead,
            accepted: r.accepted,
            throttled: r.throttled,
            paced: r.paced,
            lowered: r.lowered,
            accepted_per_sec: if span > 0.0 {
                r.accepted as f64 / span
            } else {
                0.0
            },
            latency_p50_secs: percentile(&mine, 0.5),
            latency_p99_secs: percentile(&mine, 0.99),
            others_p50_secs: percentile(&others, 0.5),
            others_p99_secs: percentile(&others, 0.99),
        })
    }

    pub(super) fn report(mut self, wall_ms: f64) -> Report {
        let sc = self.sc;
        // Idle pollers keep long-polling until the end.
        let end = self.now;
        for &inst in self.pools.iter().flat_map(|p| &p.idle) {
            let i = &self.instances[inst as usize];
            self.calls.sqs_receive_empty +=
                end.saturating_sub(i.idle_since) / (sc.sqs.receive_wait_secs.max(1) * 1000);
        }
        let mut counts = [0u64; 5];
        let mut latencies: Vec<u64> = Vec::new();
        let mut fresh: Vec<u64> = Vec::new();
        let mut makespan = 0u64;
        let recovery_ms = sc.recovery_secs().map(|s| s * 1000);
        // Mail is fresh from when every instance can send it: the last fault over and the
        // breaker closed after it (and its cached state refreshed). Before that, the breaker
        // holds it back with the backlog (its open period doubles to 5 minutes in an outage).
        let fresh_from_ms = recovery_ms.map(|r| {
            let closed = self.shared.as_ref().and_then(|s| s.closed_at_ms);
            match closed {
                Some(c) if c >= r => c + sc.breaker_cache_ms,
                _ => r,
            }
        });
        let mut drained_at: Option<u64> = None;
        for j in &self.jobs {
            let k = match j.fate {
                Fate::Pending => 0,
                Fate::Sent => 1,
                Fate::Bounced => 2,
                Fate::DeadLettered => 3,
                Fate::Redriven => 4,
            };
            counts[k] += 1;
            if j.fate != Fate::Pending {
                makespan = makespan.max(j.finished);
            }
            if j.fate == Fate::Sent {
                latencies.push(j.finished - j.arrived);
                if fresh_from_ms.is_some_and(|r| j.arrived >= r) {
                    fresh.push(j.finished - j.arrived);
                }
            }
            if let Some(r) = recovery_ms
                && j.arrived < r
            {
                let f = if j.fate == Fate::Pending {
                    u64::MAX
                } else {
                    j.finished
                };
                drained_at = Some(drained_at.map_or(f, |d| d.max(f)));
            }
        }
        latencies.sort_unstable();
        fresh.sort_unstable();
        let pct = |p: f64| -> f64 {
            if latencies.is_empty() {
                return 0.0;
            }
            let i = ((latencies.len() - 1) as f64 * p).round() as usize;
            latencies[i] as f64 / 1000.0
        };
        let after = recovery_ms.map_or(0, |r| (r / 1000) as usize);
        let peak = |v: &[u32], from: usize| v.iter().skip(from).copied().max().unwrap_or(0);
        let quota = sc.provider.quota_per_sec;
        let over = self
            .per_sec_calls
            .iter()
            .skip(after)
            .filter(|c| f64::from(**c) > quota)
            .count() as u64;
        let jobs = self.jobs.len().max(1) as f64;
        let outage = sc
            .faults
            .iter()
            .any(|f| matches!(f.kind, crate::scenario::FaultKind::Outage { .. }));
        let cost = Cost::of(&self.calls, &PRICES);
        let receiver = self.receiver_figures();
        Report {
            scenario: sc.name.clone(),
            policy: sc.policy_label.clone(),
            breaker: match sc.breaker {
                None => "off".into(),
                Some(b) => format!(
                    "min {} / {:.0}% / open {}s",
                    b.min_calls,
                    b.failure_ratio * 100.0,
                    b.open_secs
                ),
            },
            seed: sc.seed,
            send_rate: sc
                .send_rate
                .map_or_else(|| "off".into(), |r| format!("{}/s", r.per_sec)),
            rate_refused: self.rate_refused,
            jobs: self.jobs.len() as u64,
            sent: counts[1],
            bounced: counts[2],
            dead_lettered: counts[3],
            redriven: counts[4],
            pending: counts[0] + (sc.jobs - self.arrived),
            dead_letters_by_class: self.dead_by_class,
            provider_calls: self.calls.provider_calls,
            provider_accepted: self.calls.provider_accepted,
            throttled: self.throttled,
            failed_calls: self.failed_calls,
            timed_out: self.timed_out,
            provider_calls_per_job: self.calls.provider_calls as f64 / jobs,
            receiver,
            outage: outage.then(|| OutageFigures {
                jobs: self.outage_jobs,
                calls: self.outage_calls,
                calls_per_job: self.outage_calls as f64 / self.outage_jobs.max(1) as f64,
                calling_jobs: self.outage_calling_jobs,
                calls_per_calling_job: self.outage_calls as f64
                    / self.outage_calling_jobs.max(1) as f64,
            }),
            quota_per_sec: quota,
            peak_calls_per_sec: peak(&self.per_sec_calls, 0),
            peak_calls_per_sec_after_recovery: peak(&self.per_sec_calls, after),
            peak_accepted_per_sec_after_recovery: peak(&self.per_sec_accepted, after),
            peak_calls_per_sec_10s_after_recovery: self
                .per_sec_calls
                .get(after..)
                .unwrap_or(&[])
                .windows(10)
                .map(|w| f64::from(w.iter().sum::<u32>()) / 10.0)
                .fold(0.0, f64::max),
            secs_over_quota_after_recovery: over,
            recovery_secs: sc.recovery_secs(),
            drain_secs: match (drained_at, recovery_ms) {
                (Some(d), Some(r)) if d != u64::MAX => Some(d.saturating_sub(r) as f64 / 1000.0),
                _ => None,
            },
            makespan_secs: makespan as f64 / 1000.0,
            latency_p50_secs: pct(0.5),
            latency_p99_secs: pct(0.99),
            retry_bulkhead: sc
                .retry_horizon
                .filter(|_| sc.send_rate.is_some())
                .map_or_else(
                    || "off".into(),
                    |h| format!("retries book {:.1} s ahead at most", h.as_secs_f64()),
                ),
            retry_queue: match (sc.retry_concurrency, self.pools.get(1)) {
                (Some(n), Some(pool)) => format!(
                    "its own event source, {n} instances at most ({} at once)",
                    pool.max_busy
                ),
                _ => "off".into(),
            },
            fresh_after_recovery_p50_secs: recovery_ms.map(|_| percentile(&fresh, 0.5)),
            fresh_after_recovery_p99_secs: recovery_ms.map(|_| percentile(&fresh, 0.99)),
            possible_duplicates: self.possible_duplicates,
            max_concurrency: self.max_busy,
            breaker_opened: self.shared.as_ref().map_or(0, |s| s.opened),
            aws_calls_per_job: self.calls.per_job_calls() as f64 / jobs,
            periodic_calls: self.calls.periodic_calls(),
            cost_per_1000_jobs: cost.total / jobs * 1000.0,
            cost,
            aws: self.calls,
            events: self.events,
            wall_ms,
        }
    }
}
