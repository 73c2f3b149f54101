//! What follows a failure, decided once by pure planning: [`route`] from the policy's decision
//! and what is known of the provider's acceptance, [`plan`] with the copy, the letter or the
//! status it leads to. The send function, the events function (a transient bounce's resend)
//! and the simulator carry out these plans; how a copy waits is decided only by [`wait`].

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::classify::Verdict;
use crate::delay::{self, DelayMechanism};
use crate::envelope::{Incoming, attempt_record, dead_letter_of, next_body};
use crate::policy::{DeadLetterCategory, Decision};
use crate::ports::{DeadLetter, Requeue};
use crate::status::Status;

/// What is known of the provider's acceptance of the failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acceptance {
    /// The failure proves the provider did not take the mail (or no provider was called).
    Refused,
    /// The provider may have the mail (a timeout, a dropped connection, a 5xx).
    Unknown,
}

/// Where a failure leads, before any body is built (the simulator's view of [`Plan`]). How a
/// retry waits depends on the body it will carry: [`wait`] (or [`delay::mechanism`]) decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Try again after `delay_secs`.
    Retry {
        delay_secs: u64,
        spends_attempt: bool,
    },
    DeadLetter {
        category: DeadLetterCategory,
        reason: String,
    },
    /// A final status; `suppress`: the recipient is dead (a permanent bounce).
    Finish { status: Status, suppress: bool },
}

/// The route of a failure whose policy decision is `decision`: an outcome that may have been
/// accepted waits at least `grace` for provider evidence before anything is sent again, and its
/// dead letter says the last attempt may have gone out.
pub fn route(decision: Decision, acceptance: Acceptance, grace: Duration) -> Route {
    let ambiguous = acceptance == Acceptance::Unknown;
    match decision {
        Decision::Retry {
            delay,
            spends_attempt,
        } => {
            let delay = if ambiguous { delay.max(grace) } else { delay };
            Route::Retry {
                delay_secs: delay.as_secs(),
                spends_attempt,
            }
        }
        Decision::DeadLetter { category, reason } => Route::DeadLetter {
            category,
            reason: if ambiguous {
                format!(
                    "{reason}; the last attempt's outcome is unknown (the provider may have sent it)"
                )
            } else {
                reason
            },
        },
        Decision::Finish {
            status,
            suppress_recipient,
        } => Route::Finish {
            status,
            suppress: suppress_recipient,
        },
    }
}

/// A copy and how it waits. The only constructor is [`wait`], which decides the mechanism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    requeue: Requeue,
    mechanism: DelayMechanism,
    due: DateTime<Utc>,
}

impl Wait {
    /// The copy as it goes on the queue or into the state machine (a queue-hops wait already
    /// carries its due time and its first hop's delay).
    pub fn requeue(&self) -> &Requeue {
        &self.requeue
    }

    pub fn into_requeue(self) -> Requeue {
        self.requeue
    }

    pub fn mechanism(&self) -> DelayMechanism {
        self.mechanism
    }

    /// When the copy is due back to be claimed (after all its hops).
    pub fn due(&self) -> DateTime<Utc> {
        self.due
    }

    /// Whether it goes through the queue (batched re-enqueue) rather than the state machine.
    pub fn via_queue(&self) -> bool {
        self.mechanism != DelayMechanism::StateMachine
    }
}

/// How `requeue` waits from `now`, by [`delay::mechanism`]: the queue's delay, the state
/// machine, or hops through the queue (the first hop applied here).
pub fn wait(requeue: Requeue, now: DateTime<Utc>) -> Wait {
    let mechanism = delay::mechanism(requeue.delay_secs, &requeue.body);
    let due = now + chrono::Duration::seconds(i64::try_from(requeue.delay_secs).unwrap_or(0));
    let requeue = match mechanism {
        DelayMechanism::QueueHops => delay::first_hop(requeue, now),
        DelayMechanism::QueueDelay | DelayMechanism::StateMachine => requeue,
    };
    Wait {
        requeue,
        mechanism,
        due,
    }
}

/// A wait decided without claiming the job ([`unclaimed`]): only the queue's own delay, so that
/// nothing but the queue holds the copy while no status says it waits.
pub fn unclaimed(requeue: Requeue, now: DateTime<Utc>) -> Option<Wait> {
    let wait = wait(requeue, now);
    (wait.mechanism == DelayMechanism::QueueDelay).then_some(wait)
}

/// One failed attempt of a parsed job, as the planning reads it.
#[derive(Debug, Clone, Copy)]
pub struct Failure<'a> {
    pub incoming: &'a Incoming,
    pub verdict: &'a Verdict,
    /// The provider that failed (`None`: no provider was called).
    pub provider: Option<&'a str>,
    pub acceptance: Acceptance,
    pub now: DateTime<Utc>,
    /// How long an outcome the provider may have accepted waits at least.
    pub grace: Duration,
}

/// What follows a failure, complete: every value the step that carries it out writes.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// The next generation's copy waits; the job's record then says `status` (`deferred`, or
    /// `unknown` when the provider may have the mail) at the next generation.
    Retry {
        wait: Wait,
        status: Status,
        detail: String,
    },
    /// The job's home is this letter; its record then says `dead_lettered`.
    DeadLetter {
        letter: Box<DeadLetter>,
        detail: String,
    },
    /// A final status; `suppress`: addresses to suppress first, with the reason.
    Finish {
        status: Status,
        suppress: Vec<String>,
        reason: String,
        detail: String,
    },
}

impl Plan {
    /// The status the job's record says once the plan is carried out.
    pub fn status(&self) -> Status {
        match self {
            Plan::Retry { status, .. } | Plan::Finish { status, .. } => *status,
            Plan::DeadLetter { .. } => Status::DeadLettered,
        }
    }
}

/// The plan for `failure` under the policy's `decision` (see [`route`]).
pub fn plan(failure: &Failure<'_>, decision: Decision) -> Plan {
    let Failure {
        incoming,
        verdict,
        provider,
        acceptance,
        now,
        grace,
    } = *failure;
    let job = &incoming.job;
    match route(decision, acceptance, grace) {
        Route::Retry {
            delay_secs,
            spends_attempt,
        } => {
            let mut retry = incoming.retry.clone();
            retry.record(verdict.class, spends_attempt, delay_secs, now);
            let mut history = incoming.history.clone();
            history.push(attempt_record(
                verdict,
                provider.map(str::to_owned),
                now,
                spends_attempt,
                Some(delay_secs),
            ));
            let requeue = Requeue {
                message_id: job.message_id.clone(),
                body: next_body(incoming, retry, history),
                delay_secs,
            };
            Plan::Retry {
                wait: wait(requeue, now),
                status: match acceptance {
                    Acceptance::Refused => Status::Deferred,
                    Acceptance::Unknown => Status::Unknown,
                },
                detail: format!(
                    "{} ({}); retry in {delay_secs} s",
                    verdict.class, verdict.rule
                ),
            }
        }
        Route::DeadLetter { category, reason } => {
            let letter = dead_letter_of(
                incoming,
                verdict,
                category,
                reason,
                provider.map(str::to_owned),
                now,
            );
            Plan::DeadLetter {
                letter: Box::new(letter),
                detail: format!(
                    "{} ({}): {}",
                    category.as_str(),
                    verdict.class,
                    verdict.rule
                ),
            }
        }
        Route::Finish { status, suppress } => {
            // One recipient only: with several, the reply does not say whose address is dead.
            let suppress = if suppress && job.recipients().count() == 1 {
                job.recipients().map(str::to_owned).collect()
            } else {
                Vec::new()
            };
            Plan::Finish {
                status,
                suppress,
                reason: format!(
                    "{}: {}",
                    verdict.rule,
                    verdict.raw_code.as_deref().unwrap_or("")
                ),
                detail: format!("{} ({})", verdict.class, verdict.rule),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::ErrorClass;
    use crate::envelope::parse_body;
    use crate::limits::SFN_MAX_INPUT_BYTES;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn incoming(to: &[&str], text_bytes: usize) -> Incoming {
        let job = serde_json::json!({
            "version": 1, "message_id": "m-1", "campaign_id": "c",
            "from": "a@example.com", "to": to,
            "content": {"subject": "s", "text": "x".repeat(text_bytes)}
        });
        parse_body(job.to_string().as_bytes()).unwrap()
    }

    fn retry(secs: u64) -> Decision {
        Decision::Retry {
            delay: Duration::from_secs(secs),
            spends_attempt: true,
        }
    }

    fn failure<'a>(
        incoming: &'a Incoming,
        verdict: &'a Verdict,
        acceptance: Acceptance,
    ) -> Failure<'a> {
        Failure {
            incoming,
            verdict,
            provider: Some("smtp"),
            acceptance,
            now: t(0),
            grace: Duration::from_secs(600),
        }
    }

    #[test]
    fn a_refused_retry_waits_its_delay_as_deferred_in_the_next_generation() {
        let job = incoming(&["b@example.com"], 10);
        let verdict = Verdict::local(ErrorClass::Throttled, "r", "slow down");
        let plan = plan(&failure(&job, &verdict, Acceptance::Refused), retry(30));
        let Plan::Retry {
            wait,
            status,
            detail,
        } = plan
        else {
            panic!("{plan:?}")
        };
        assert_eq!(status, Status::Deferred);
        assert_eq!(wait.mechanism(), DelayMechanism::QueueDelay);
        assert_eq!(wait.requeue().delay_secs, 30);
        assert!(detail.ends_with("retry in 30 s"), "{detail}");
        let next = parse_body(wait.requeue().body.as_bytes()).unwrap();
        assert_eq!(next.attempt, job.attempt + 1);
        assert_eq!(
            next.history.last().unwrap().provider.as_deref(),
            Some("smtp")
        );
    }

    #[test]
    fn an_outcome_the_provider_may_have_accepted_waits_the_grace_window_as_unknown() {
        let job = incoming(&["b@example.com"], 10);
        let verdict = Verdict::local(ErrorClass::Network, "t", "timed out");
        let Plan::Retry { wait, status, .. } =
            plan(&failure(&job, &verdict, Acceptance::Unknown), retry(30))
        else {
            panic!()
        };
        assert_eq!(status, Status::Unknown);
        assert_eq!(wait.requeue().delay_secs, 600);
    }

    #[test]
    fn long_waits_go_through_the_state_machine_unless_the_copy_is_too_large() {
        let small = incoming(&["b@example.com"], 10);
        let verdict = Verdict::local(ErrorClass::Throttled, "r", "slow down");
        let Plan::Retry { wait, .. } = plan(
            &failure(&small, &verdict, Acceptance::Refused),
            retry(3_600),
        ) else {
            panic!()
        };
        assert_eq!(wait.mechanism(), DelayMechanism::StateMachine);
        assert!(!wait.via_queue());
        assert_eq!(wait.requeue().delay_secs, 3_600);

        let large = incoming(&["b@example.com"], SFN_MAX_INPUT_BYTES);
        let Plan::Retry { wait, .. } = plan(
            &failure(&large, &verdict, Acceptance::Refused),
            retry(3_600),
        ) else {
            panic!()
        };
        assert_eq!(wait.mechanism(), DelayMechanism::QueueHops);
        assert!(wait.via_queue());
        assert_eq!(wait.requeue().delay_secs, delay::MAX_QUEUE_DELAY_SECS);
        let hop = parse_body(wait.requeue().body.as_bytes()).unwrap();
        assert_eq!(hop.not_before, Some(t(3_600)));
    }

    #[test]
    fn an_unclaimed_wait_is_only_ever_the_queues_own_delay() {
        let requeue = |delay_secs| Requeue {
            message_id: "m".into(),
            body: "{}".into(),
            delay_secs,
        };
        assert!(unclaimed(requeue(900), t(0)).is_some());
        assert!(unclaimed(requeue(901), t(0)).is_none());
    }

    #[test]
    fn a_dead_letter_after_a_possible_acceptance_says_the_mail_may_be_out() {
        let job = incoming(&["b@example.com"], 10);
        let verdict = Verdict::local(ErrorClass::Network, "t", "timed out");
        let decision = Decision::DeadLetter {
            category: DeadLetterCategory::RetriesExhausted,
            reason: "attempts exhausted".into(),
        };
        let Plan::DeadLetter { letter, detail } =
            plan(&failure(&job, &verdict, Acceptance::Unknown), decision)
        else {
            panic!()
        };
        assert!(
            letter.reason.contains("may have sent it"),
            "{}",
            letter.reason
        );
        assert_eq!(letter.payload.as_deref(), Some(job.original.as_str()));
        assert!(detail.starts_with("retries_exhausted"), "{detail}");
    }

    #[test]
    fn a_permanent_bounce_suppresses_the_recipient_only_when_there_is_one() {
        let verdict = Verdict::local(ErrorClass::RecipientPermanent, "550", "no such user");
        let decision = || Decision::Finish {
            status: Status::BouncedPermanent,
            suppress_recipient: true,
        };
        let one = incoming(&["Ann <ann@example.com>"], 10);
        let Plan::Finish { suppress, .. } =
            plan(&failure(&one, &verdict, Acceptance::Refused), decision())
        else {
            panic!()
        };
        assert_eq!(suppress, vec!["Ann <ann@example.com>".to_owned()]);
        let two = incoming(&["a@example.com", "b@example.com"], 10);
        let plan = plan(&failure(&two, &verdict, Acceptance::Refused), decision());
        assert_eq!(plan.status(), Status::BouncedPermanent);
        let Plan::Finish { suppress, .. } = plan else {
            panic!()
        };
        assert!(suppress.is_empty());
    }
}
