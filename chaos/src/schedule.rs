//! The seeded plan of a run: when the driver is killed, which fault the proxies apply when,
//! when Postfix restarts and when the AWS emulator is "down". Pure: the same seed and
//! settings give the same plan (printed at the start of a run, so a failure can be replayed).

use std::time::Duration;

use crate::proxy::Fault;

/// SplitMix64: small, seedable, good enough for schedules.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.unit() * n as f64) as usize % n.max(1)
    }
}

/// Which proxy an event is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Between the driver and the AWS emulator.
    Aws,
    /// Between the driver and Postfix.
    Smtp,
}

/// One step of the plan, at an offset from the start of the chaos phase.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// SIGKILL driver process `n` (index into the running drivers, modulo their number).
    Kill(usize),
    SetFault(Target, Fault),
    /// Stop Postfix's master and start it again (a real restart, same spool and port).
    RestartPostfix,
}

/// The plan: actions sorted by time.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub steps: Vec<(Duration, Action)>,
}

/// What the plan must contain.
#[derive(Debug, Clone, Copy)]
pub struct PlanSettings {
    pub seed: u64,
    /// Length of the chaos phase; every action falls inside it and the faults end with it.
    pub duration: Duration,
    pub kills: usize,
    pub drivers: usize,
    pub postfix_restarts: usize,
    /// How long the AWS emulator is unreachable (one outage in the middle of the phase).
    pub aws_outage: Duration,
    /// Whether SMTP traffic also gets resets and blackholes (otherwise latency only).
    pub smtp_resets: bool,
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

impl Plan {
    pub fn new(s: &PlanSettings) -> Plan {
        let mut rng = Rng::new(s.seed);
        let total = s.duration.as_secs_f64().max(10.0);
        let mut steps: Vec<(Duration, Action)> = Vec::new();
        // Kills: uniform over the phase (after the first 5 %), each at a random driver.
        for _ in 0..s.kills {
            let at = rng.range(0.05 * total, total);
            steps.push((secs(at), Action::Kill(rng.below(s.drivers.max(1)))));
        }
        // Postfix restarts, spread over the phase.
        for i in 0..s.postfix_restarts {
            let slot = total / (s.postfix_restarts as f64 + 1.0);
            let at = slot * (i as f64 + 1.0) + rng.range(-0.2 * slot, 0.2 * slot);
            steps.push((secs(at), Action::RestartPostfix));
        }
        // AWS proxy: alternating calm and fault episodes, with one outage ("emulator
        // restart") starting near the middle.
        let outage_at = rng.range(0.4 * total, 0.6 * total);
        let outage_end = outage_at + s.aws_outage.as_secs_f64();
        let mut t = rng.range(1.0, 4.0);
        let mut placed_outage = false;
        while t < total {
            if !placed_outage && t >= outage_at {
                steps.push((secs(outage_at), Action::SetFault(Target::Aws, Fault::Down)));
                steps.push((secs(outage_end), Action::SetFault(Target::Aws, Fault::Pass)));
                placed_outage = true;
                t = outage_end + rng.range(2.0, 6.0);
                continue;
            }
            let fault = match rng.below(3) {
                0 => Fault::Latency(Duration::from_millis(rng.range(50.0, 400.0) as u64)),
                1 => Fault::Reset(rng.range(0.01, 0.05)),
                _ => Fault::Blackhole,
            };
            let length = if fault == Fault::Blackhole {
                rng.range(2.0, 6.0)
            } else {
                rng.range(3.0, 10.0)
            };
            let end = (t + length).min(if placed_outage { total } else { outage_at });
            steps.push((secs(t), Action::SetFault(Target::Aws, fault)));
            steps.push((secs(end), Action::SetFault(Target::Aws, Fault::Pass)));
            t = end + rng.range(3.0, 10.0);
        }
        if !placed_outage {
            steps.push((secs(outage_at), Action::SetFault(Target::Aws, Fault::Down)));
            steps.push((secs(outage_end), Action::SetFault(Target::Aws, Fault::Pass)));
        }
        // SMTP proxy: latency episodes (resets and blackholes too when asked).
        let mut t = rng.range(2.0, 8.0);
        while t < total {
            let fault = match (s.smtp_resets, rng.below(3)) {
                (true, 1) => Fault::Reset(rng.range(0.01, 0.05)),
                (true, 2) => Fault::Blackhole,
                _ => Fault::Latency(Duration::from_millis(rng.range(50.0, 800.0) as u64)),
            };
            let end = (t + rng.range(3.0, 10.0)).min(total);
            steps.push((secs(t), Action::SetFault(Target::Smtp, fault)));
            steps.push((secs(end), Action::SetFault(Target::Smtp, Fault::Pass)));
            t = end + rng.range(5.0, 15.0);
        }
        steps.sort_by_key(|(at, _)| *at);
        Plan { steps }
    }

    pub fn kills(&self) -> usize {
        self.steps
            .iter()
            .filter(|(_, a)| matches!(a, Action::Kill(_)))
            .count()
    }

    pub fn count(&self, target: Target, pred: impl Fn(&Fault) -> bool) -> usize {
        self.steps
            .iter()
            .filter(|(_, a)| matches!(a, Action::SetFault(t, f) if *t == target && pred(f)))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(seed: u64) -> PlanSettings {
        PlanSettings {
            seed,
            duration: Duration::from_secs(300),
            kills: 25,
            drivers: 2,
            postfix_restarts: 2,
            aws_outage: Duration::from_secs(8),
            smtp_resets: false,
        }
    }

    #[test]
    fn a_seed_gives_one_plan_with_everything_asked_for() {
        // GIVEN the same settings twice
        let a = Plan::new(&settings(7));
        let b = Plan::new(&settings(7));
        // THEN the plans are equal, and hold every kill, restart and the outage
        assert_eq!(a, b);
        assert_eq!(a.kills(), 25);
        let restarts = a
            .steps
            .iter()
            .filter(|(_, s)| *s == Action::RestartPostfix)
            .count();
        assert_eq!(restarts, 2);
        assert_eq!(a.count(Target::Aws, |f| *f == Fault::Down), 1);
        assert!(a.count(Target::Aws, |f| matches!(f, Fault::Reset(_))) >= 1);
        assert!(a.count(Target::Smtp, |f| matches!(f, Fault::Reset(_))) == 0);
        // every action inside the phase, in time order, ending with the faults off
        assert!(a.steps.windows(2).all(|w| w[0].0 <= w[1].0));
        assert!(
            a.steps
                .iter()
                .all(|(at, _)| *at <= Duration::from_secs(310))
        );
        let last_aws = a
            .steps
            .iter()
            .rev()
            .find_map(|(_, s)| match s {
                Action::SetFault(Target::Aws, f) => Some(*f),
                _ => None,
            })
            .unwrap();
        assert_eq!(last_aws, Fault::Pass);
        assert_ne!(Plan::new(&settings(8)), a);
    }

    #[test]
    fn rng_is_uniform_enough() {
        let mut rng = Rng::new(1);
        let n = 10_000;
        let below_half = (0..n).filter(|_| rng.unit() < 0.5).count();
        assert!((4_500..5_500).contains(&below_half), "{below_half}");
    }
}
