//! The job status machine.
//!
//! ```text
//!                 +------------------------------+----------------------+
//!                 |                              v                      v
//! pending --> processing --> sent_to_provider --> delivered --> complained
//!    |          |   ^  \            |  \
//!    |          |   |   \           |   +--> bounced_transient --> (processing: retry)
//!    |          |   |    \          +------> bounced_permanent, complained
//!    |          v   |     +--> unknown --(provider evidence)--> sent_to_provider / delivered / ...
//!    |       deferred           +--(grace window over, no evidence)--> processing (or suppressed)
//!    |          |
//!    +----------+--> suppressed | dead_lettered | failed_internal | bounced_permanent
//! ```
//!
//! A job with several recipients takes the status its recipients' outcomes make once each is
//! final ([`crate::recipients::derive`]): `partially_delivered` (some delivered, the others
//! bounced) stands beside `delivered`, from the same statuses, and moves on only to `complained`.
//!
//! Transitions only move forward. A transition to the current status is a duplicate and a
//! transition to an earlier status (a late event, a stale redelivery) is absorbed: neither is an
//! error and neither changes anything. Anything else not in the table is illegal.

/// Status records are kept this long after their last write (DynamoDB TTL).
pub const RETENTION: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pending,
    Processing,
    /// A retry is scheduled (re-enqueued with a delay, or waiting in the delay state machine).
    Deferred,
    /// A send may or may not have happened (lease expired mid-send, timeout after the request).
    Unknown,
    SentToProvider,
    BouncedTransient,
    Delivered,
    /// Some recipients delivered, the others bounced (see [`crate::recipients::derive`]).
    PartiallyDelivered,
    Complained,
    BouncedPermanent,
    Suppressed,
    FailedInternal,
    DeadLettered,
}

impl Status {
    pub const ALL: [Status; 13] = [
        Status::Pending,
        Status::Processing,
        Status::Deferred,
        Status::Unknown,
        Status::SentToProvider,
        Status::BouncedTransient,
        Status::Delivered,
        Status::PartiallyDelivered,
        Status::Complained,
        Status::BouncedPermanent,
        Status::Suppressed,
        Status::FailedInternal,
        Status::DeadLettered,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Processing => "processing",
            Status::Deferred => "deferred",
            Status::Unknown => "unknown",
            Status::SentToProvider => "sent_to_provider",
            Status::BouncedTransient => "bounced_transient",
            Status::Delivered => "delivered",
            Status::PartiallyDelivered => "partially_delivered",
            Status::Complained => "complained",
            Status::BouncedPermanent => "bounced_permanent",
            Status::Suppressed => "suppressed",
            Status::FailedInternal => "failed_internal",
            Status::DeadLettered => "dead_lettered",
        }
    }

    pub fn parse(name: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// Progress order used to recognise late events; see the module docs.
    fn rank(self) -> u8 {
        match self {
            Status::Pending => 0,
            Status::Processing => 1,
            Status::Deferred => 2,
            Status::Unknown => 3,
            Status::SentToProvider => 4,
            Status::BouncedTransient => 5,
            Status::Delivered | Status::PartiallyDelivered => 6,
            Status::Complained => 7,
            Status::BouncedPermanent
            | Status::Suppressed
            | Status::FailedInternal
            | Status::DeadLettered => 8,
        }
    }

    /// Whether the provider has (or may have) the message: a new send would risk a duplicate.
    pub fn is_sent(self) -> bool {
        matches!(
            self,
            Status::SentToProvider
                | Status::BouncedTransient
                | Status::Delivered
                | Status::PartiallyDelivered
                | Status::Complained
                | Status::BouncedPermanent
        )
    }

    /// No further sends will ever happen for this job (replay aside).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Status::Delivered
                | Status::PartiallyDelivered
                | Status::Complained
                | Status::BouncedPermanent
                | Status::Suppressed
                | Status::FailedInternal
                | Status::DeadLettered
        )
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a requested transition did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// The status changed.
    Applied,
    /// Same status again (a duplicate event or redelivery): nothing changes.
    Duplicate,
    /// An earlier status arrived late: nothing changes.
    Late,
}

/// A transition the machine does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("illegal status transition {from} -> {to}")]
pub struct IllegalTransition {
    pub from: Status,
    pub to: Status,
}

fn allowed(from: Status, to: Status) -> bool {
    use Status::*;
    match from {
        Pending => matches!(
            to,
            Processing | Suppressed | DeadLettered | FailedInternal | BouncedPermanent
        ),
        Processing => matches!(
            to,
            SentToProvider
                | Deferred
                | Unknown
                | BouncedPermanent
                | Suppressed
                | DeadLettered
                | FailedInternal
        ),
        Deferred => matches!(to, Processing | Suppressed | DeadLettered | FailedInternal),
        // Suppressed: the retry after the grace window found the recipient suppressed meanwhile
        // (measured in the chaos suite: without it the job stayed `unknown` for ever while its
        // message was deleted).
        Unknown => matches!(
            to,
            Processing
                | Suppressed
                | SentToProvider
                | BouncedTransient
                | Delivered
                | PartiallyDelivered
                | Complained
                | BouncedPermanent
                | DeadLettered
                | FailedInternal
        ),
        SentToProvider => matches!(
            to,
            BouncedTransient | Delivered | PartiallyDelivered | Complained | BouncedPermanent
        ),
        BouncedTransient => matches!(
            to,
            Processing
                | Deferred
                | Delivered
                | PartiallyDelivered
                | Complained
                | BouncedPermanent
                | DeadLettered
        ),
        Delivered | PartiallyDelivered => matches!(to, Complained),
        Complained | BouncedPermanent | Suppressed | FailedInternal | DeadLettered => false,
    }
}

/// The statuses from which `to` may be applied (for conditional writes).
pub fn predecessors(to: Status) -> Vec<Status> {
    Status::ALL
        .into_iter()
        .filter(|from| allowed(*from, to))
        .collect()
}

/// Checks one transition: allowed edges apply; repeats and late arrivals are absorbed.
pub fn transition(from: Status, to: Status) -> Result<Transition, IllegalTransition> {
    if from == to {
        Ok(Transition::Duplicate)
    } else if allowed(from, to) {
        Ok(Transition::Applied)
    } else if to.rank() < from.rank() {
        Ok(Transition::Late)
    } else {
        Err(IllegalTransition { from, to })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Status::*;

    #[test]
    fn the_happy_path_applies() {
        for (a, b) in [
            (Pending, Processing),
            (Processing, SentToProvider),
            (SentToProvider, Delivered),
            (Delivered, Complained),
        ] {
            assert_eq!(transition(a, b), Ok(Transition::Applied), "{a} -> {b}");
        }
    }

    #[test]
    fn duplicates_and_late_events_are_absorbed() {
        assert_eq!(transition(Delivered, Delivered), Ok(Transition::Duplicate));
        assert_eq!(transition(Delivered, SentToProvider), Ok(Transition::Late));
        assert_eq!(transition(Delivered, Processing), Ok(Transition::Late));
        assert_eq!(
            transition(BouncedPermanent, Delivered),
            Ok(Transition::Late)
        );
        assert_eq!(transition(DeadLettered, Processing), Ok(Transition::Late));
    }

    #[test]
    fn illegal_jumps_are_errors() {
        for (a, b) in [
            (Pending, Delivered),
            (Pending, SentToProvider),
            (Processing, Delivered),
            (Deferred, SentToProvider),
            (Delivered, BouncedPermanent),
        ] {
            assert_eq!(transition(a, b), Err(IllegalTransition { from: a, to: b }));
        }
    }

    #[test]
    fn unknown_resolves_either_way() {
        assert_eq!(transition(Unknown, SentToProvider), Ok(Transition::Applied));
        assert_eq!(transition(Unknown, Delivered), Ok(Transition::Applied));
        assert_eq!(transition(Unknown, Processing), Ok(Transition::Applied));
        // the retry after the grace window meets a suppression made meanwhile: the job ends there
        assert_eq!(transition(Unknown, Suppressed), Ok(Transition::Applied));
        assert!(predecessors(Status::Suppressed).contains(&Unknown));
    }

    #[test]
    fn terminal_statuses_never_move_forward_again() {
        for from in Status::ALL.into_iter().filter(|s| s.is_terminal()) {
            for to in Status::ALL {
                if let Ok(Transition::Applied) = transition(from, to) {
                    assert!(
                        matches!((from, to), (Delivered | PartiallyDelivered, Complained)),
                        "{from} -> {to}"
                    );
                }
            }
        }
    }

    #[test]
    fn predecessors_match_the_table() {
        assert_eq!(
            predecessors(Status::Processing),
            vec![Pending, Deferred, Unknown, BouncedTransient]
        );
        assert!(predecessors(Status::Suppressed).contains(&Pending));
        assert!(!predecessors(Status::Suppressed).contains(&SentToProvider));
    }

    #[test]
    fn every_pair_is_decided_and_names_round_trip() {
        for from in Status::ALL {
            assert_eq!(Status::parse(from.as_str()), Some(from));
            for to in Status::ALL {
                let _ = transition(from, to);
            }
        }
    }
}
