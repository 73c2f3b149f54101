//! The reputation guard's arithmetic: rolling bounce and complaint rates per sending domain,
//! judged against thresholds set below the provider's review levels (SES reviews an account at
//! a 5% bounce rate or a 0.1% complaint rate, and may pause it beyond that).
//!
//! Counts are kept in hourly buckets (see `ports::ReputationStore`); the guard sums the buckets
//! of its window and trips when a rate reaches its threshold with enough volume to mean
//! something. Tripping opens the domain's pause (a breaker the send function checks before SES
//! sends) for a while; it trips again after the pause if the rates are still too high.

use chrono::{DateTime, Duration, DurationRound, Utc};
use serde::{Deserialize, Serialize};

/// Counts of one domain over some time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReputationCounts {
    /// SES `Send` events.
    pub sent: u64,
    pub delivered: u64,
    /// Permanent bounces (the kind SES's bounce rate counts).
    pub bounced: u64,
    pub complained: u64,
}

impl ReputationCounts {
    pub fn is_empty(&self) -> bool {
        *self == ReputationCounts::default()
    }

    pub fn merge(&mut self, other: &ReputationCounts) {
        self.sent += other.sent;
        self.delivered += other.delivered;
        self.bounced += other.bounced;
        self.complained += other.complained;
    }

    /// The volume the rates are taken over: the sends, or, where the configuration set does not
    /// publish `Send` events, the messages with a known outcome.
    pub fn volume(&self) -> u64 {
        self.sent.max(self.delivered + self.bounced)
    }

    /// Bounce and complaint rates (fractions); zero without volume.
    pub fn rates(&self) -> (f64, f64) {
        let volume = self.volume();
        if volume == 0 {
            return (0.0, 0.0);
        }
        (
            self.bounced as f64 / volume as f64,
            self.complained as f64 / volume as f64,
        )
    }
}

/// The guard's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct GuardConfig {
    /// Trip at this bounce rate (default 0.04, below SES's 0.05 review level).
    pub bounce_trip: f64,
    /// Trip at this complaint rate (default 0.0008, below SES's 0.001).
    pub complaint_trip: f64,
    /// No verdict below this many messages in the window (a few early bounces mean little).
    pub min_volume: u64,
    /// How far back the rates look.
    pub window: Duration,
    /// How long a trip pauses the domain's SES sends.
    pub pause: Duration,
}

impl Default for GuardConfig {
    fn default() -> Self {
        GuardConfig {
            bounce_trip: 0.04,
            complaint_trip: 0.0008,
            min_volume: 500,
            window: Duration::hours(24),
            pause: Duration::hours(1),
        }
    }
}

/// Why the guard tripped.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Trip {
    Bounces { rate: f64 },
    Complaints { rate: f64 },
}

impl std::fmt::Display for Trip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Trip::Bounces { rate } => write!(f, "bounce rate {:.2}%", rate * 100.0),
            Trip::Complaints { rate } => write!(f, "complaint rate {:.3}%", rate * 100.0),
        }
    }
}

/// The guard's judgement of a window.
#[derive(Debug, Clone, PartialEq)]
pub struct Assessment {
    pub bounce_rate: f64,
    pub complaint_rate: f64,
    pub volume: u64,
    pub trip: Option<Trip>,
}

/// Judges a window's counts. Complaints are checked first: their threshold is the stricter.
pub fn assess(window: &ReputationCounts, cfg: &GuardConfig) -> Assessment {
    let (bounce_rate, complaint_rate) = window.rates();
    let volume = window.volume();
    let trip = if volume < cfg.min_volume {
        None
    } else if complaint_rate >= cfg.complaint_trip {
        Some(Trip::Complaints {
            rate: complaint_rate,
        })
    } else if bounce_rate >= cfg.bounce_trip {
        Some(Trip::Bounces { rate: bounce_rate })
    } else {
        None
    };
    Assessment {
        bounce_rate,
        complaint_rate,
        volume,
        trip,
    }
}

/// The breaker key of a domain's pause: the events function opens it, the send function
/// checks it before every SES send.
pub fn pause_key(domain: &str) -> String {
    format!("reputation:{}", domain.to_ascii_lowercase())
}

/// The hourly bucket a time falls in.
pub fn bucket_of(at: DateTime<Utc>) -> DateTime<Utc> {
    at.duration_trunc(Duration::hours(1)).unwrap_or(at)
}

/// The sending domain of an address (lower-cased), `None` without an `@`.
pub fn domain_of(address: &str) -> Option<String> {
    let address = address.trim();
    let address = match (address.rfind('<'), address.rfind('>')) {
        (Some(open), Some(close)) if open < close => &address[open + 1..close],
        _ => address,
    };
    let (_, domain) = address.rsplit_once('@')?;
    let domain = domain.trim().trim_end_matches('.');
    (!domain.is_empty()).then(|| domain.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(sent: u64, bounced: u64, complained: u64) -> ReputationCounts {
        ReputationCounts {
            sent,
            delivered: sent - bounced,
            bounced,
            complained,
        }
    }

    #[test]
    fn trips_below_the_providers_review_levels() {
        let cfg = GuardConfig::default();
        assert_eq!(assess(&counts(1000, 39, 0), &cfg).trip, None);
        assert_eq!(
            assess(&counts(1000, 40, 0), &cfg).trip,
            Some(Trip::Bounces { rate: 0.04 })
        );
        assert_eq!(assess(&counts(10_000, 0, 7), &cfg).trip, None);
        assert!(matches!(
            assess(&counts(10_000, 0, 8), &cfg).trip,
            Some(Trip::Complaints { .. })
        ));
    }

    #[test]
    fn needs_volume_before_judging() {
        let cfg = GuardConfig::default();
        let a = assess(&counts(100, 50, 5), &cfg);
        assert_eq!(a.trip, None);
        assert!((a.bounce_rate - 0.5).abs() < 1e-9);
    }

    #[test]
    fn complaints_win_over_bounces() {
        let cfg = GuardConfig::default();
        assert!(matches!(
            assess(&counts(1000, 100, 10), &cfg).trip,
            Some(Trip::Complaints { .. })
        ));
    }

    #[test]
    fn volume_without_send_events_uses_outcomes() {
        let c = ReputationCounts {
            sent: 0,
            delivered: 95,
            bounced: 5,
            complained: 0,
        };
        assert_eq!(c.volume(), 100);
        assert!((c.rates().0 - 0.05).abs() < 1e-9);
        assert_eq!(ReputationCounts::default().rates(), (0.0, 0.0));
    }

    #[test]
    fn domains_and_buckets() {
        assert_eq!(
            domain_of("News <News@Example.COM>"),
            Some("example.com".into())
        );
        assert_eq!(domain_of("a@b.test."), Some("b.test".into()));
        assert_eq!(domain_of("nobody"), None);
        assert_eq!(domain_of("x@"), None);
        let t = DateTime::parse_from_rfc3339("2026-11-30T08:59:59Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(bucket_of(t).to_rfc3339(), "2026-11-30T08:00:00+00:00");
    }
}
