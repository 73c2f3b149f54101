//! The claim: leasing a job for sending, and the rules every status store applies to it (the
//! memory store in code, DynamoDB as a condition expression).

use chrono::{DateTime, Utc};

use crate::ports::JobRecord;
use crate::status::Status;

/// A request to lease a job for sending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    pub message_id: String,
    pub attempt: u32,
    pub owner: String,
    pub now: DateTime<Utc>,
    /// Ends before the invocation's deadline.
    pub lease_until: DateTime<Utc>,
    /// How long an ambiguous outcome waits for provider evidence before a resend.
    pub grace: chrono::Duration,
    /// Recipients to check against the suppression list in the same write (one transaction:
    /// no separate read per job). Empty: no check.
    pub check_suppressed: Vec<String>,
    /// The job's trace id, kept on its record.
    pub trace_id: Option<String>,
    /// The job's campaign and metadata, kept on its record for its outcome events.
    pub facts: crate::ports::JobFacts,
    /// The body a transient bounce of this send is sent again from ([`JobRecord::payload`]):
    /// written with the lease, so it is durable before the provider can take the mail, whoever
    /// then records the send (the send function, or SES's Send event when the send function
    /// died first). `None` removes the record's body (an earlier generation's is not this one).
    pub payload: Option<String>,
}

impl ClaimRequest {
    /// The detail of the history entry the claim writes (`processing`), naming its owner: how
    /// a copy finds, after its lease expired into `unknown`, that no claim came since its own.
    pub fn history_detail(&self) -> String {
        claimed_by(&self.owner)
    }
}

/// The history detail of a claim by `owner` ([`ClaimRequest::history_detail`]).
pub fn claimed_by(owner: &str) -> String {
    format!("claimed by {owner}")
}

/// What a claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The lease is ours: send.
    Claimed,
    /// Already sent or finished: acknowledge without sending.
    Duplicate(Status),
    /// This copy is older than the job's current attempt: drop it.
    Stale { current_attempt: u32 },
    /// Another live invocation holds the lease: leave the record for a later delivery.
    Busy { lease_until: DateTime<Utc> },
    /// A send may have happened; wait for provider evidence until `resolve_at`.
    Ambiguous { resolve_at: DateTime<Utc> },
    /// These recipients (from `check_suppressed`, as given) are on the suppression list; nothing
    /// was written. Claim again without them to send to the rest.
    Suppressed(Vec<String>),
}

/// What the claim's conditional write decides, given the record as it stands. Both the memory
/// and the DynamoDB store implement exactly this judgement (the latter as a condition
/// expression, see `aws::DynamoDbStatusStore::claim`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimJudgement {
    Take,
    Refuse(ClaimOutcome),
    /// The previous lease expired mid-send: record `unknown` (since `now`) and wait.
    MarkUnknown,
}

/// The claim rules. Timelines of the races they settle:
///
/// * Duplicate delivery (SQS at-least-once): copy A claims, sends, records `sent_to_provider`;
///   copy B's claim finds a sent status -> `Duplicate`, acknowledged without sending.
/// * Two invocations racing on one job: both attempt the conditional write; DynamoDB serialises
///   them, one wins, the other sees a live lease -> `Busy` and is redelivered after the
///   visibility timeout, by which time the winner has finished -> `Duplicate`.
/// * Crash between send and status write: the lease expires with status `processing` -> the
///   next copy's claim marks the job `unknown` -> `Ambiguous`; SES events (SEND/DELIVERY)
///   resolve it to `sent_to_provider`, otherwise after the grace window the job is sent again.
/// * Stale re-enqueue: a retry re-enqueued generation n+1; an old copy of generation n arrives
///   (e.g. its delete failed) -> `Stale`, dropped.
/// * Crash between the provider's acceptance and the status write, SES's Send event first:
///   the events function records `sent_to_provider`; the body the claim wrote is on the record,
///   so a transient bounce sends the job again (generation n+1) and the redelivered copy of
///   generation n is `Stale` (or a duplicate, if it comes before the bounce).
/// * Soft-bounce resend: the events function records `bounced_transient` at generation n,
///   schedules a copy of n+1, then moves the record to `deferred` at n+1. The copy may arrive
///   before that last write (or it may never be made): it takes a `bounced_transient` record of
///   an older generation; a copy of generation n is a duplicate.
pub fn judge_claim(existing: Option<&JobRecord>, req: &ClaimRequest) -> ClaimJudgement {
    let Some(rec) = existing else {
        return ClaimJudgement::Take;
    };
    if rec.status == Status::BouncedTransient && rec.attempt < req.attempt {
        // The events function's resend after a soft bounce: it schedules the next generation
        // before it moves the record to `deferred`, so the copy may find the bounce.
        return ClaimJudgement::Take;
    }
    if rec.status.is_sent() || rec.status.is_terminal() {
        return ClaimJudgement::Refuse(ClaimOutcome::Duplicate(rec.status));
    }
    if rec.attempt > req.attempt {
        return ClaimJudgement::Refuse(ClaimOutcome::Stale {
            current_attempt: rec.attempt,
        });
    }
    match rec.status {
        Status::Pending | Status::Deferred => ClaimJudgement::Take,
        Status::Unknown => {
            let since = rec.unknown_since.unwrap_or(rec.updated_at);
            if since + req.grace <= req.now {
                ClaimJudgement::Take
            } else {
                ClaimJudgement::Refuse(ClaimOutcome::Ambiguous {
                    resolve_at: since + req.grace,
                })
            }
        }
        Status::Processing => {
            let until = rec.lease_until.unwrap_or(rec.updated_at);
            if until > req.now {
                ClaimJudgement::Refuse(ClaimOutcome::Busy { lease_until: until })
            } else if rec.attempt < req.attempt {
                // A newer generation exists only because the lease holder decided to retry
                // after a failed send: nothing was sent by it.
                ClaimJudgement::Take
            } else {
                ClaimJudgement::MarkUnknown
            }
        }
        _ => ClaimJudgement::Refuse(ClaimOutcome::Duplicate(rec.status)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn req(attempt: u32, now: i64) -> ClaimRequest {
        ClaimRequest {
            message_id: "m".into(),
            attempt,
            owner: "me".into(),
            now: t(now),
            lease_until: t(now + 60),
            grace: chrono::Duration::seconds(600),
            check_suppressed: Vec::new(),
            trace_id: None,
            facts: Default::default(),
            payload: None,
        }
    }

    fn rec(status: Status, attempt: u32, lease_until: Option<i64>) -> JobRecord {
        JobRecord {
            message_id: "m".into(),
            status,
            attempt,
            lease_owner: Some("other".into()),
            lease_until: lease_until.map(t),
            unknown_since: (status == Status::Unknown).then(|| t(0)),
            provider: None,
            provider_message_id: None,
            outbox: None,
            ..JobRecord::new("m", status, attempt, t(0))
        }
    }

    #[test]
    fn claim_rules() {
        use ClaimJudgement::*;
        assert_eq!(judge_claim(None, &req(0, 0)), Take);
        assert_eq!(
            judge_claim(Some(&rec(Status::Deferred, 1, None)), &req(1, 5)),
            Take
        );
        assert_eq!(
            judge_claim(Some(&rec(Status::SentToProvider, 0, None)), &req(0, 5)),
            Refuse(ClaimOutcome::Duplicate(Status::SentToProvider))
        );
        assert_eq!(
            judge_claim(Some(&rec(Status::Deferred, 2, None)), &req(1, 5)),
            Refuse(ClaimOutcome::Stale { current_attempt: 2 })
        );
        assert_eq!(
            judge_claim(Some(&rec(Status::Processing, 0, Some(30))), &req(0, 5)),
            Refuse(ClaimOutcome::Busy { lease_until: t(30) })
        );
        assert_eq!(
            judge_claim(Some(&rec(Status::Processing, 0, Some(30))), &req(0, 31)),
            MarkUnknown
        );
        assert_eq!(
            judge_claim(Some(&rec(Status::Processing, 0, Some(30))), &req(1, 31)),
            Take
        );
        assert_eq!(
            judge_claim(Some(&rec(Status::Unknown, 0, None)), &req(0, 100)),
            Refuse(ClaimOutcome::Ambiguous { resolve_at: t(600) })
        );
        assert_eq!(
            judge_claim(Some(&rec(Status::Unknown, 0, None)), &req(0, 600)),
            Take
        );
        assert_eq!(
            judge_claim(Some(&rec(Status::DeadLettered, 0, None)), &req(0, 1)),
            Refuse(ClaimOutcome::Duplicate(Status::DeadLettered))
        );
        // A soft-bounce resend's copy takes the bounce; a copy of the bounced send does not.
        assert_eq!(
            judge_claim(Some(&rec(Status::BouncedTransient, 0, None)), &req(1, 5)),
            Take
        );
        assert_eq!(
            judge_claim(Some(&rec(Status::BouncedTransient, 1, None)), &req(1, 5)),
            Refuse(ClaimOutcome::Duplicate(Status::BouncedTransient))
        );
    }
}
