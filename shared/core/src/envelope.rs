//! The queue message format. Applications enqueue a bare [`EmailJob`]; Courier re-enqueues a
//! retry as an [`Envelope`] that wraps the original job with its attempt counters and history.

use serde::{Deserialize, Serialize};

use chrono::{DateTime, Utc};

use crate::classify::Verdict;
use crate::job::{Claimed, EmailJob, JobError, Rejected, fingerprint, parse_json};
use crate::letters::letter_id;
use crate::mailbox::address_key;
use crate::policy::{DeadLetterCategory, RetryState};
use crate::ports::{AttemptRecord, DeadLetter};

/// Marker key of an envelope (a job never has it: jobs deny unknown fields).
pub const ENVELOPE_KEY: &str = "courier_envelope";
/// Attempt history kept in an envelope; older entries are dropped (their counts stay in
/// [`RetryState`]).
pub const MAX_HISTORY: usize = 20;

/// A re-enqueued job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    pub courier_envelope: u32,
    /// Generation: 0 for the application's copy, +1 at each re-enqueue.
    pub attempt: u32,
    pub retry: RetryState,
    #[serde(default)]
    pub history: Vec<AttemptRecord>,
    /// The job exactly as the application sent it.
    pub job: serde_json::Value,
    /// A copy hopping through the queue towards a long wait is not due before this
    /// ([`crate::delay::DelayMechanism::QueueHops`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<DateTime<Utc>>,
    /// The trace id when the job carries none of its own (an X-Ray trace header's root, see
    /// [`crate::trace`]), so every copy keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// The provider's acceptance of this generation, carried by a copy the sending instance put
    /// on the queue when the status table could not record it ([`accepted_body`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted: Option<ProviderAcceptance>,
    /// The HMAC that shows Courier wrote this envelope ([`crate::seal`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal: Option<String>,
}

/// A provider's acceptance of one generation of a job, as its sender saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderAcceptance {
    pub provider: String,
    pub provider_message_id: String,
    pub at: DateTime<Utc>,
}

/// A parsed queue message: the job and where it stands.
#[derive(Debug, Clone, PartialEq)]
pub struct Incoming {
    pub job: EmailJob,
    pub attempt: u32,
    pub retry: RetryState,
    pub history: Vec<AttemptRecord>,
    /// The application's original job payload (for dead letters and fingerprints).
    pub original: String,
    /// Its [`job_fingerprint`], computed once while parsing (the same for every copy).
    pub print: String,
    /// Not due before this (a hop of a long wait; see [`Envelope::not_before`]).
    pub not_before: Option<DateTime<Utc>>,
    /// Whether the body was an envelope (its seal is checked by [`crate::seal::check`]).
    pub enveloped: bool,
    /// The id that follows the job everywhere: its `trace_id`, or the trace its first copy came
    /// with ([`Incoming::with_trace_header`]).
    pub trace: Option<String>,
    /// The provider's acceptance of this generation, when the copy carries one (trusted only
    /// once its seal verifies: [`crate::seal::demote`] drops it).
    pub accepted: Option<ProviderAcceptance>,
}

impl Incoming {
    /// This job sent again to some of its recipients only (`keep`, as [`address_key`]s): a job
    /// of its own with id `message_id`, the same content, roles, display names and retry state,
    /// and only those recipients in `to`, `cc` and `bcc` (either may end up empty). `None` when
    /// none of `keep` is a recipient of the job.
    pub fn part(&self, message_id: &str, keep: &[String]) -> Option<Incoming> {
        let mut value: serde_json::Value = serde_json::from_str(&self.original).ok()?;
        let fields = value.as_object_mut()?;
        fields.insert("message_id".into(), message_id.into());
        for field in ["to", "cc", "bcc"] {
            if let Some(serde_json::Value::Array(list)) = fields.get_mut(field) {
                list.retain(|r| r.as_str().is_some_and(|r| keep.contains(&address_key(r))));
            }
        }
        let job = EmailJob::from_value(value.clone()).ok()?;
        let original = value.to_string();
        Some(Incoming {
            job,
            print: job_fingerprint(&original),
            original,
            accepted: None,
            ..self.clone()
        })
    }

    /// Takes the root of the X-Ray trace header this copy came with as the trace, when the job
    /// has none yet.
    #[must_use]
    pub fn with_trace_header(mut self, header: Option<&str>) -> Self {
        if self.trace.is_none() {
            self.trace = header.and_then(crate::trace::xray_root);
        }
        self
    }

    /// The trace an envelope of this job must carry: only one the job does not hold itself.
    fn envelope_trace(&self) -> Option<String> {
        self.trace
            .clone()
            .filter(|t| self.job.trace_id.as_ref() != Some(t))
    }
}

/// Parses an SQS body: a bare job or an envelope.
pub fn parse_body(body: &[u8]) -> Result<Incoming, Box<Rejected>> {
    let (text, value) = parse_json(body)?;
    if value.get(ENVELOPE_KEY).is_some() {
        // What a rejected envelope says it is (its generation, its job's ids), read before the
        // value is consumed: the send function trusts it once the seal verifies, so that the
        // record waiting for this copy is not left waiting.
        let claimed = Claimed::of(&value);
        let envelope: Envelope = serde_json::from_value(value).map_err(|e| {
            Box::new(Rejected {
                error: JobError::Schema {
                    message: format!("bad retry envelope: {e}"),
                },
                message_id: None,
                campaign_id: None,
                trace_id: None,
                envelope: claimed.clone(),
            })
        })?;
        // A `Value` prints its keys sorted: this is the canonical form `job_fingerprint` prints.
        let original = envelope.job.to_string();
        let print = fingerprint(original.as_bytes());
        let job = EmailJob::from_value(envelope.job).map_err(|mut rejected| {
            rejected.envelope = claimed;
            rejected
        })?;
        let trace = job.trace_id.clone().or(envelope.trace);
        return Ok(Incoming {
            job,
            attempt: envelope.attempt,
            retry: envelope.retry,
            history: envelope.history,
            original,
            print,
            not_before: envelope.not_before,
            enveloped: true,
            trace,
            accepted: envelope.accepted,
        });
    }
    let print = fingerprint(value.to_string().as_bytes());
    let job = EmailJob::from_value(value)?;
    Ok(Incoming {
        trace: job.trace_id.clone(),
        job,
        attempt: 0,
        retry: RetryState::default(),
        history: Vec::new(),
        original: text.to_owned(),
        print,
        not_before: None,
        enveloped: false,
        accepted: None,
    })
}

/// The fingerprint of the job a queue message carries, the same for every copy of it: over the
/// job's JSON (an envelope's `job`, or the bare job) with its keys sorted and no insignificant
/// whitespace, so the application's first copy (its raw text) and a retry (the job
/// re-serialised inside an envelope) give one print. Text that is not JSON is printed as is.
/// The poison blocklist and dead letters key on it.
pub fn job_fingerprint(body: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(body) {
        Ok(mut value) => {
            let job = match value.get_mut(ENVELOPE_KEY) {
                Some(_) => value
                    .get_mut("job")
                    .map(serde_json::Value::take)
                    .unwrap_or_default(),
                None => value,
            };
            fingerprint(job.to_string().as_bytes())
        }
        Err(_) => fingerprint(body.as_bytes()),
    }
}

/// One attempt's entry in the history, from its verdict (the text is cut to 500 characters).
pub fn attempt_record(
    verdict: &Verdict,
    provider: Option<String>,
    at: DateTime<Utc>,
    spent: bool,
    delay_secs: Option<u64>,
) -> AttemptRecord {
    AttemptRecord {
        at,
        provider,
        class: verdict.class,
        rule: verdict.rule.clone(),
        code: verdict.raw_code.clone(),
        text: verdict
            .raw_text
            .as_deref()
            .map(|t| t.chars().take(500).collect()),
        spent,
        delay_secs,
    }
}

/// The dead letter of a parsed job that failed for good: everything needed to understand,
/// fix and replay it, its last attempt appended to the history.
pub fn dead_letter_of(
    incoming: &Incoming,
    verdict: &Verdict,
    category: DeadLetterCategory,
    reason: String,
    provider: Option<String>,
    now: DateTime<Utc>,
) -> DeadLetter {
    let job = &incoming.job;
    let mut history = incoming.history.clone();
    history.push(attempt_record(verdict, provider.clone(), now, true, None));
    let print = incoming.print.clone();
    DeadLetter {
        id: letter_id(Some(&job.message_id), &print, incoming.attempt, category),
        category,
        reason,
        message_id: Some(job.message_id.clone()),
        campaign_id: Some(job.campaign_id.clone()),
        trace_id: incoming.trace.clone(),
        recipients: job.recipients().map(str::to_owned).collect(),
        provider,
        class: verdict.class,
        rule: verdict.rule.clone(),
        raw_code: verdict.raw_code.clone(),
        raw_text: verdict.raw_text.clone(),
        attempts: incoming.retry.spent + 1,
        first_failure_at: history.first().map_or(now, |h| h.at),
        last_failure_at: now,
        history,
        fingerprint: print,
        payload: Some(incoming.original.clone()),
        payload_base64: None,
    }
}

/// The body of this generation as an envelope (kept with the job's record from its claim, so a
/// transient bounce can be sent again from it).
pub fn current_body(incoming: &Incoming) -> String {
    body_of(
        incoming,
        incoming.attempt,
        incoming.retry.clone(),
        incoming.history.clone(),
        None,
    )
}

/// Builds the body of the next generation's queue message.
pub fn next_body(incoming: &Incoming, retry: RetryState, history: Vec<AttemptRecord>) -> String {
    body_of(incoming, incoming.attempt + 1, retry, history, None)
}

/// Builds a queue message of the same generation with an updated retry state and history: a
/// wait decided without claiming the job (the generation moves on only when a lease holder
/// decides to retry, which is what lets a claim tell a retry from an unfinished send).
pub fn same_generation_body(
    incoming: &Incoming,
    retry: RetryState,
    history: Vec<AttemptRecord>,
) -> String {
    body_of(incoming, incoming.attempt, retry, history, None)
}

/// The body of a copy of this generation that carries the provider's acceptance: put on the
/// queue by the instance that sent it when the status table cannot record it, so the acceptance
/// outlives that instance (the copy records the job sent without sending: never a second send).
pub fn accepted_body(incoming: &Incoming, acceptance: ProviderAcceptance) -> String {
    body_of(
        incoming,
        incoming.attempt,
        incoming.retry.clone(),
        incoming.history.clone(),
        Some(acceptance),
    )
}

fn body_of(
    incoming: &Incoming,
    attempt: u32,
    retry: RetryState,
    history: Vec<AttemptRecord>,
    accepted: Option<ProviderAcceptance>,
) -> String {
    let job = serde_json::from_str(&incoming.original).unwrap_or(serde_json::Value::Null);
    let skip = history.len().saturating_sub(MAX_HISTORY);
    let envelope = Envelope {
        courier_envelope: 1,
        attempt,
        retry,
        history: history.into_iter().skip(skip).collect(),
        job,
        not_before: None,
        trace: incoming.envelope_trace(),
        accepted,
        seal: None,
    };
    serde_json::to_string(&envelope).unwrap_or_default()
}

/// The body that replays a dead letter: the application's job (unwrapped if the payload was
/// itself an envelope) as generation `generation`, with a fresh retry budget, the letter's
/// history kept for the record, and its trace (when the job does not hold it itself).
pub fn replay_body(
    payload: &str,
    generation: u32,
    history: Vec<AttemptRecord>,
    trace: Option<&str>,
) -> Result<String, String> {
    let value: serde_json::Value = serde_json::from_str(payload)
        .map_err(|e| format!("the payload is not JSON ({e}); fix it and send a new job instead"))?;
    let job = match value.get(ENVELOPE_KEY) {
        Some(_) => value
            .get("job")
            .cloned()
            .ok_or("the payload is a retry envelope without a job")?,
        None => value,
    };
    let skip = history.len().saturating_sub(MAX_HISTORY);
    let envelope = Envelope {
        courier_envelope: 1,
        attempt: generation,
        retry: RetryState::default(),
        history: history.into_iter().skip(skip).collect(),
        trace: trace
            .filter(|t| job.get("trace_id").and_then(serde_json::Value::as_str) != Some(*t))
            .map(str::to_owned),
        job,
        not_before: None,
        accepted: None,
        seal: None,
    };
    serde_json::to_string(&envelope).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::ErrorClass;

    #[test]
    fn a_part_keeps_only_its_recipients_in_their_roles() {
        let raw = r#"{"version": 1, "message_id": "m", "campaign_id": "c", "from": "a@example.com",
            "to": ["Ann <ann@example.org>"], "cc": ["Bo <BO@example.org>", "cy@example.org"],
            "bcc": ["dee@example.org"], "content": {"subject": "s", "text": "t"}}"#;
        let mut whole = parse_body(raw.as_bytes()).unwrap();
        whole.attempt = 3;
        let part = whole
            .part("m~1", &["bo@example.org".into(), "dee@example.org".into()])
            .unwrap();
        assert_eq!(part.job.message_id, "m~1");
        assert!(part.job.to.is_empty());
        assert_eq!(part.job.cc, vec!["Bo <BO@example.org>".to_owned()]);
        assert_eq!(part.job.bcc, vec!["dee@example.org".to_owned()]);
        assert_eq!(part.job.content, whole.job.content);
        assert_eq!(part.attempt, 3, "the retry state goes on");
        assert_eq!(part.print, job_fingerprint(&part.original));
        assert_ne!(part.print, whole.print);
        // Its next copy carries the part, not the whole job.
        let next = parse_body(next_body(&part, RetryState::default(), Vec::new()).as_bytes());
        assert_eq!(next.unwrap().job, part.job);
        assert_eq!(whole.part("m~2", &["nobody@example.org".into()]), None);
    }

    #[test]
    fn a_rejected_envelope_says_which_job_and_generation_it_claims_to_be() {
        let raw = r#"{"version": 1, "message_id": "m", "campaign_id": "c", "trace_id": "t",
            "from": "a@example.com", "to": ["a@example.org"], "content": {"subject": "s", "text": "t"}}"#;
        let mut first = parse_body(raw.as_bytes()).unwrap();
        first.attempt = 2;
        let retry = next_body(&first, RetryState::default(), Vec::new());
        let ids = |r: &Rejected| {
            (
                r.message_id.clone(),
                r.campaign_id.clone(),
                r.trace_id.clone(),
            )
        };
        let job_ids = (Some("m".into()), Some("c".into()), Some("t".into()));
        let claimed = Some(Claimed {
            generation: 3,
            message_id: Some("m".into()),
            campaign_id: Some("c".into()),
            trace_id: Some("t".into()),
        });
        // A job that no longer validates inside an envelope: its ids (as before), and what the
        // envelope claims.
        let invalid = retry.replace(r#""version":1"#, r#""version":2"#);
        let rejected = parse_body(invalid.as_bytes()).unwrap_err();
        assert_eq!(rejected.error.code(), "unknown_version");
        assert_eq!(ids(&rejected), job_ids);
        assert_eq!(rejected.envelope, claimed);
        // An envelope with a field this version does not know: no ids of its own (the job's
        // only if its seal verifies), what it claims kept apart.
        let unknown = retry.replacen('{', r#"{"later":1,"#, 1);
        let rejected = parse_body(unknown.as_bytes()).unwrap_err();
        assert!(
            rejected.error.to_string().contains("bad retry envelope"),
            "{rejected:?}"
        );
        assert_eq!(ids(&rejected), (None, None, None));
        assert_eq!(rejected.envelope, claimed);
        // An envelope without a readable generation, and a bare job, claim nothing.
        let unnumbered = retry.replace(r#""attempt":3"#, r#""attempt":"3""#);
        assert_ne!(unnumbered, retry);
        assert_eq!(
            parse_body(unnumbered.as_bytes()).unwrap_err().envelope,
            None
        );
        let bare = raw.replace(r#""version": 1"#, r#""version": 2"#);
        let rejected = parse_body(bare.as_bytes()).unwrap_err();
        assert_eq!(ids(&rejected), job_ids);
        assert_eq!(rejected.envelope, None);
    }

    #[test]
    fn every_copy_of_a_job_has_one_fingerprint() {
        // GIVEN a first copy as an application writes it (its own key order and spacing)
        let raw = r#"{ "version": 1, "to": ["a@example.org"], "message_id": "fp",
            "campaign_id": "c", "from": "shop@example.com",
            "content": {"text": "Hello \u00e9", "subject": "Hi"} }"#;
        let first = parse_body(raw.as_bytes()).unwrap();
        // AND its retry, the job re-serialised inside an envelope, then a retry of that
        let retry = next_body(&first, RetryState::default(), Vec::new());
        let second = parse_body(retry.as_bytes()).unwrap();
        let again = next_body(&second, RetryState::default(), Vec::new());
        // THEN every copy, and each copy's parsed original, prints the same
        let print = job_fingerprint(raw);
        assert_ne!(print, fingerprint(raw.as_bytes()), "not the raw bytes");
        for body in [
            retry.as_str(),
            again.as_str(),
            &first.original,
            &second.original,
        ] {
            assert_eq!(job_fingerprint(body), print, "{body}");
        }
        // AND the print each parse keeps is that print (no re-parse on the hot path)
        assert_eq!(first.print, print);
        assert_eq!(second.print, print);
        // AND a dead letter of the retry carries it
        let verdict = Verdict::local(ErrorClass::Poison, "p", "p");
        let letter = dead_letter_of(
            &second,
            &verdict,
            DeadLetterCategory::Poison,
            "p".into(),
            None,
            Utc::now(),
        );
        assert_eq!(letter.fingerprint, print);
        // AND text that is not JSON is printed as it is
        assert_eq!(job_fingerprint("not json"), fingerprint(b"not json"));
    }

    const JOB: &str = r#"{"version":1,"message_id":"m","campaign_id":"c","from":"a@b.co","to":["x@y.co"],"content":{"subject":"s","text":"t"}}"#;

    #[test]
    fn a_trace_from_the_header_travels_in_the_envelope_and_a_jobs_own_does_not() {
        const ROOT: &str = "1-5759e988-bd862e3fe1be46a994272793";
        let header = format!("Root={ROOT};Sampled=1");
        let first = parse_body(JOB.as_bytes())
            .unwrap()
            .with_trace_header(Some(&header));
        assert_eq!(first.trace.as_deref(), Some(ROOT));
        let body = next_body(&first, RetryState::default(), Vec::new());
        let second = parse_body(body.as_bytes()).unwrap();
        assert_eq!(second.trace.as_deref(), Some(ROOT));
        // A later header does not replace the trace a copy carries.
        let other = "Root=1-00000000-000000000000000000000000";
        assert_eq!(
            second.with_trace_header(Some(other)).trace.as_deref(),
            Some(ROOT)
        );
        // A replayed letter keeps its trace.
        let replayed = replay_body(JOB, 2, Vec::new(), Some(ROOT)).unwrap();
        assert_eq!(
            parse_body(replayed.as_bytes()).unwrap().trace.as_deref(),
            Some(ROOT)
        );
        // A job's own trace_id is the trace, and is not written twice.
        let own = JOB.replace(
            r#""message_id":"m""#,
            r#""message_id":"m","trace_id":"t-1""#,
        );
        let first = parse_body(own.as_bytes())
            .unwrap()
            .with_trace_header(Some(&header));
        assert_eq!(first.trace.as_deref(), Some("t-1"));
        let body = next_body(&first, RetryState::default(), Vec::new());
        assert!(!body.contains("\"trace\""), "{body}");
        assert!(
            !replay_body(&own, 2, Vec::new(), Some("t-1"))
                .unwrap()
                .contains("\"trace\"")
        );
    }

    #[test]
    fn bare_jobs_start_at_attempt_zero_and_envelopes_round_trip() {
        let first = parse_body(JOB.as_bytes()).unwrap();
        assert_eq!(first.attempt, 0);
        let mut retry = RetryState::default();
        let at = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        retry.record(ErrorClass::Network, true, 5, at);
        let history: Vec<AttemptRecord> = (0..30)
            .map(|i| AttemptRecord {
                at,
                provider: Some("smtp".into()),
                class: ErrorClass::Network,
                rule: "x".into(),
                code: None,
                text: None,
                spent: true,
                delay_secs: Some(i),
            })
            .collect();
        let body = next_body(&first, retry.clone(), history);
        let second = parse_body(body.as_bytes()).unwrap();
        assert_eq!(second.attempt, 1);
        assert_eq!(second.retry, retry);
        assert_eq!(second.history.len(), MAX_HISTORY);
        assert_eq!(second.history.last().unwrap().delay_secs, Some(29));
        assert_eq!(second.job, first.job);
        // a wait decided without a claim keeps the generation, with the new retry state
        let same = same_generation_body(&second, retry.clone(), vec![]);
        let same = parse_body(same.as_bytes()).unwrap();
        assert_eq!((same.attempt, &same.retry), (1, &retry));
        assert_eq!(same.job, first.job);
    }

    #[test]
    fn replays_start_a_fresh_budget_at_the_new_generation() {
        let body = replay_body(JOB, 3, vec![], None).unwrap();
        let again = parse_body(body.as_bytes()).unwrap();
        assert_eq!((again.attempt, again.retry.spent), (3, 0));
        // An envelope payload (a raw redrive) is unwrapped to its job.
        let nested = replay_body(&body, 4, vec![], None).unwrap();
        assert_eq!(parse_body(nested.as_bytes()).unwrap().job, again.job);
        assert!(
            replay_body("{not json", 1, vec![], None)
                .unwrap_err()
                .contains("not JSON")
        );
    }

    #[test]
    fn a_broken_envelope_or_job_inside_it_is_rejected() {
        let err = parse_body(br#"{"courier_envelope":1,"attempt":"x"}"#).unwrap_err();
        assert_eq!(err.error.code(), "schema");
        let err = parse_body(br#"{"courier_envelope":1,"attempt":1,"retry":{"spent":0},"job":{"version":1,"message_id":"m"}}"#).unwrap_err();
        assert_eq!(err.error.code(), "schema");
        assert_eq!(err.message_id.as_deref(), Some("m"));
    }
}
