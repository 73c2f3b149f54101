//! The jobs of a run: a realistic mix of good recipients, every scripted Postfix failure and
//! invalid jobs, each with a unique `message_id` (`chaos-<run>-<n>`), and the compressed retry
//! policy the driver runs with.

use std::fmt;

/// What a job is expected to meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// An address Postfix accepts.
    Ok,
    /// A job that asks for SES (`"provider": "ses"`; moto's SES accepts it, and the SES
    /// stand-in publishes its delivery).
    Ses,
    /// SES, to `bounce+…@`: SES accepts it, then it bounces (Permanent, 5.1.1).
    SesBounce,
    /// SES, to `softbounce+…@`: the first send bounces (Transient, mailbox full); the events
    /// function sends it again, and that copy is delivered.
    SesSoftBounce,
    /// `unknown@`: 550 5.1.1.
    UserUnknown,
    /// `full@`: 552 5.2.2.
    MailboxFull,
    /// `insufficient@`: 452 4.2.2.
    Insufficient,
    /// `busy@`: 421 4.7.0, then the connection is closed.
    Busy,
    /// `greylist@`: 450 4.2.0.
    Greylist,
    /// `policy@`: 554 5.7.1.
    Policy,
    /// Broken JSON, an invalid address, an unknown field.
    Invalid,
}

impl Kind {
    pub const ALL: [Kind; 11] = [
        Kind::Ok,
        Kind::Ses,
        Kind::SesBounce,
        Kind::SesSoftBounce,
        Kind::UserUnknown,
        Kind::MailboxFull,
        Kind::Insufficient,
        Kind::Busy,
        Kind::Greylist,
        Kind::Policy,
        Kind::Invalid,
    ];

    /// The mix per 100 jobs: 80 good through SMTP; through SES 2 delivered, 1 bounced and 1
    /// soft-bounced then delivered; 3 unknown users, 2 mailbox full, 1 over quota, 2 busy,
    /// 3 greylisted, 2 policy rejections, 3 invalid.
    pub fn of(n: usize) -> Kind {
        match n % 100 {
            0..=2 => Kind::UserUnknown,
            3 | 4 => Kind::Busy,
            5..=7 => Kind::Greylist,
            8 | 9 => Kind::MailboxFull,
            10 => Kind::Insufficient,
            11 | 12 => Kind::Policy,
            13..=15 => Kind::Invalid,
            16 | 17 => Kind::Ses,
            18 => Kind::SesBounce,
            19 => Kind::SesSoftBounce,
            _ => Kind::Ok,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Ok => "ok (accepted)",
            Kind::Ses => "ses (delivered)",
            Kind::SesBounce => "ses bounce (Permanent)",
            Kind::SesSoftBounce => "ses soft bounce, resent",
            Kind::UserUnknown => "unknown@ 550 5.1.1",
            Kind::MailboxFull => "full@ 552 5.2.2",
            Kind::Insufficient => "insufficient@ 452 4.2.2",
            Kind::Busy => "busy@ 421 4.7.0",
            Kind::Greylist => "greylist@ 450 4.2.0",
            Kind::Policy => "policy@ 554 5.7.1",
            Kind::Invalid => "invalid job",
        })
    }
}

/// One job of the run.
#[derive(Debug, Clone)]
pub struct Job {
    pub message_id: String,
    pub kind: Kind,
    /// The SQS message body as enqueued.
    pub body: String,
    /// SHA-256 of the body (dead letters carry it).
    pub fingerprint: String,
}

/// The domain of the jobs' sender (verified on the SES emulator before the run).
pub const SENDER_DOMAIN: &str = "courier.test";

fn body(message_id: &str, n: usize, to: &str) -> serde_json::Value {
    serde_json::json!({
        "version": 1,
        "message_id": message_id,
        "campaign_id": if n.is_multiple_of(2) { "chaos-even" } else { "chaos-odd" },
        "priority": if n.is_multiple_of(3) { "transactional" } else { "bulk" },
        "from": "Courier Chaos <chaos@courier.test>",
        "to": [to],
        "content": {"subject": format!("Chaos job {n}"), "text": format!("Job {message_id}.")}
    })
}

/// The `n`-th job of run `run`.
pub fn job(run: &str, n: usize) -> Job {
    let message_id = format!("chaos-{run}-{n:06}");
    let kind = Kind::of(n);
    let scripted = |user: &str| body(&message_id, n, &format!("{user}@courier.test")).to_string();
    let text = match kind {
        Kind::Ok => body(&message_id, n, &format!("reader{n}@courier.test")).to_string(),
        Kind::Ses | Kind::SesBounce | Kind::SesSoftBounce => {
            // The SES stand-in's script is the local part before `+` (courier_dev::ses::Script).
            let user = match kind {
                Kind::SesBounce => format!("bounce+{n}"),
                Kind::SesSoftBounce => format!("softbounce+{n}"),
                _ => format!("reader{n}"),
            };
            let mut b = body(&message_id, n, &format!("{user}@courier.test"));
            b["provider"] = serde_json::json!("ses");
            b.to_string()
        }
        Kind::UserUnknown => scripted("unknown"),
        Kind::MailboxFull => scripted("full"),
        Kind::Insufficient => scripted("insufficient"),
        Kind::Busy => scripted("busy"),
        Kind::Greylist => scripted("greylist"),
        Kind::Policy => scripted("policy"),
        Kind::Invalid => match n / 100 % 3 {
            0 => format!("{{\"version\": 1, \"message_id\": \"{message_id}\", \"to\": ["),
            1 => body(&message_id, n, "not an address").to_string(),
            _ => {
                let mut b = body(&message_id, n, &format!("reader{n}@courier.test"));
                b["bcc_everyone"] = serde_json::json!(true);
                b.to_string()
            }
        },
    };
    Job {
        fingerprint: courier_core::envelope::job_fingerprint(&text),
        message_id,
        kind,
        body: text,
    }
}

/// The retry policy of the run: production's classes, waits of seconds, and room for the
/// network trouble the suite makes (network retries 6, horizons 30 minutes).
pub const POLICY: &str = r#"{
  "transactional": {"classes": {
    "throttled": {"retries": 3, "schedule": {"delays": [2]}, "jitter": {"kind": "proportional", "ratio": 1.0}, "spends_attempt": false, "horizon": "30m"},
    "mailbox_temporary": {"retries": 2, "schedule": {"delays": [3, 6]}, "jitter": {"kind": "proportional", "ratio": 0.2}, "spends_attempt": true, "horizon": "30m"},
    "network": {"retries": 6, "schedule": {"delays": [1, 2, 4]}, "jitter": {"kind": "equal"}, "spends_attempt": true, "horizon": "30m"},
    "provider_unavailable": {"retries": 10, "schedule": {"delays": [2, 4]}, "jitter": {"kind": "equal"}, "spends_attempt": false, "horizon": "30m"},
    "unknown": {"retries": 3, "schedule": {"delays": [2, 4]}, "jitter": {"kind": "equal"}, "spends_attempt": true, "horizon": "30m"},
    "circuit_open": {"retries": 60, "schedule": {"delays": [2]}, "jitter": {"kind": "equal"}, "spends_attempt": false, "horizon": "30m"}
  }},
  "bulk": {"classes": {
    "throttled": {"retries": 3, "schedule": {"delays": [2]}, "jitter": {"kind": "proportional", "ratio": 1.0}, "spends_attempt": false, "horizon": "30m"},
    "mailbox_temporary": {"retries": 2, "schedule": {"delays": [3, 6]}, "jitter": {"kind": "proportional", "ratio": 0.2}, "spends_attempt": true, "horizon": "30m"},
    "network": {"retries": 6, "schedule": {"delays": [1, 2, 4]}, "jitter": {"kind": "equal"}, "spends_attempt": true, "horizon": "30m"},
    "provider_unavailable": {"retries": 10, "schedule": {"delays": [2, 4]}, "jitter": {"kind": "equal"}, "spends_attempt": false, "horizon": "30m"},
    "unknown": {"retries": 3, "schedule": {"delays": [2, 4]}, "jitter": {"kind": "equal"}, "spends_attempt": true, "horizon": "30m"},
    "circuit_open": {"retries": 60, "schedule": {"delays": [2]}, "jitter": {"kind": "equal"}, "spends_attempt": false, "horizon": "30m"}
  }}
}"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_has_every_kind_and_valid_jobs_parse() {
        let jobs: Vec<Job> = (0..300).map(|n| job("t", n)).collect();
        for kind in Kind::ALL {
            assert!(jobs.iter().any(|j| j.kind == kind), "{kind}");
        }
        assert_eq!(jobs.iter().filter(|j| j.kind == Kind::Ok).count(), 240);
        assert_eq!(jobs.iter().filter(|j| j.kind == Kind::Ses).count(), 6);
        for j in &jobs {
            let parsed = courier_core::envelope::parse_body(j.body.as_bytes());
            assert_eq!(parsed.is_err(), j.kind == Kind::Invalid, "{}", j.body);
        }
        courier_core::policy::RetryPolicy::from_json(POLICY).unwrap();
    }
}
