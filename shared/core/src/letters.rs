//! Dead letters as a quarantine ward: stable letter ids, the life of a letter in the index
//! (live -> archiving -> archived, live or archived -> replaying -> replayed, or live -> discarded),
//! per-category archive ages, and the archive layout. Pure: the archiver and the CLI drive it
//! through ports.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::policy::{DeadLetterCategory, parse_duration};

/// One attempt in a job's history (carried in the envelope and the dead letter).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    pub at: DateTime<Utc>,
    pub provider: Option<String>,
    pub class: crate::classify::ErrorClass,
    pub rule: String,
    pub code: Option<String>,
    pub text: Option<String>,
    pub spent: bool,
    pub delay_secs: Option<u64>,
}

/// A dead letter with everything needed to understand, fix and replay it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// `message_id` when known, else the payload fingerprint.
    pub id: String,
    pub category: DeadLetterCategory,
    pub reason: String,
    pub message_id: Option<String>,
    pub campaign_id: Option<String>,
    pub trace_id: Option<String>,
    pub recipients: Vec<String>,
    pub provider: Option<String>,
    pub class: crate::classify::ErrorClass,
    pub rule: String,
    pub raw_code: Option<String>,
    pub raw_text: Option<String>,
    pub attempts: u32,
    pub history: Vec<AttemptRecord>,
    pub first_failure_at: DateTime<Utc>,
    pub last_failure_at: DateTime<Utc>,
    pub fingerprint: String,
    /// The original payload; `payload_base64` instead when it was not UTF-8.
    pub payload: Option<String>,
    pub payload_base64: Option<String>,
}

/// Where a letter is in its life. Only `live` letters can be archived, replayed or discarded,
/// and every move is a conditional write, so none happens twice. A replay claims its letter
/// (`replaying`) before it touches the job, so the archiver cannot archive a letter that is
/// being replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LetterState {
    Live,
    /// Claimed by an archiver run for the object `archive_key`, not yet confirmed written.
    Archiving,
    Archived,
    /// Claimed by a replay that has not finished (or stopped: `dlq replay` resumes it).
    Replaying,
    Replayed,
    Discarded,
}

impl LetterState {
    pub fn as_str(self) -> &'static str {
        match self {
            LetterState::Live => "live",
            LetterState::Archiving => "archiving",
            LetterState::Archived => "archived",
            LetterState::Replaying => "replaying",
            LetterState::Replayed => "replayed",
            LetterState::Discarded => "discarded",
        }
    }

    pub fn parse(s: &str) -> Option<LetterState> {
        [
            LetterState::Live,
            LetterState::Archiving,
            LetterState::Archived,
            LetterState::Replaying,
            LetterState::Replayed,
            LetterState::Discarded,
        ]
        .into_iter()
        .find(|x| x.as_str() == s)
    }

    /// The letter's queue copy is only clutter now: delete it without archiving.
    pub fn is_settled(self) -> bool {
        matches!(
            self,
            LetterState::Archived | LetterState::Replayed | LetterState::Discarded
        )
    }
}

/// The stable id of a dead letter: the same copy dead-lettered twice (a redelivery after a crash)
/// gets the same id; a different payload, generation or category never does. An identical
/// payload failing identically again before any claim (an invalid or poison job resent as is) is
/// the same letter.
pub fn letter_id(
    message_id: Option<&str>,
    fingerprint: &str,
    generation: u32,
    category: DeadLetterCategory,
) -> String {
    let short = &fingerprint[..fingerprint.len().min(16)];
    format!(
        "{}#{short}#g{generation}#{}",
        // `_`, not `-`: an id must not look like a command-line option.
        message_id.unwrap_or("_"),
        category.as_str()
    )
}

/// Per-category age before archival.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveAges(pub BTreeMap<DeadLetterCategory, Duration>);

impl Default for ArchiveAges {
    /// Invalid jobs, poison and raw redrives: 7 days (the redrive DLQ's clock starts when the
    /// message entered the send or retry queue, see [`ArchiveAges::limit`]). Exhausted retries and review
    /// cases are worked by operators: 10 days.
    fn default() -> Self {
        let day = 24 * 3600;
        ArchiveAges(BTreeMap::from([
            (
                DeadLetterCategory::RetriesExhausted,
                Duration::from_secs(10 * day),
            ),
            (DeadLetterCategory::InvalidJob, Duration::from_secs(7 * day)),
            (DeadLetterCategory::Poison, Duration::from_secs(7 * day)),
            (
                DeadLetterCategory::NeedsReview,
                Duration::from_secs(10 * day),
            ),
            (DeadLetterCategory::Redriven, Duration::from_secs(7 * day)),
        ]))
    }
}

impl ArchiveAges {
    /// Every category archived at once (the demo, benchmarks, the chaos suite's end).
    pub fn zero() -> ArchiveAges {
        ArchiveAges(
            DeadLetterCategory::ALL
                .into_iter()
                .map(|c| (c, Duration::ZERO))
                .collect(),
        )
    }
}

/// How long the dead-letter queues keep a message: 14 days, SQS's maximum (the template's).
pub const LETTER_QUEUE_RETENTION: Duration = Duration::from_secs(14 * 24 * 3600);

/// What an archive age must leave before the queue drops the letter: the archiver runs hourly
/// and hides a too-young letter for up to 12 h at a time, so a day covers a missed run or two.
pub const ARCHIVE_MARGIN: Duration = Duration::from_secs(24 * 3600);

impl ArchiveAges {
    /// Reads `COURIER_ARCHIVE_AGE_<CATEGORY>` (e.g. `COURIER_ARCHIVE_AGE_POISON=3d`) and
    /// `COURIER_SEND_QUEUE_RETENTION` (seconds; default 4 days, the template's), and refuses an
    /// age the queue would not keep the letter for ([`ArchiveAges::limit`]).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<ArchiveAges, String> {
        let source = match lookup("COURIER_SEND_QUEUE_RETENTION") {
            None => Duration::from_secs(4 * 24 * 3600),
            Some(v) => Duration::from_secs(v.trim().parse().map_err(|_| {
                format!("COURIER_SEND_QUEUE_RETENTION: {v:?} is not a number of seconds")
            })?),
        };
        let mut ages = ArchiveAges::default();
        for category in DeadLetterCategory::ALL {
            let name = format!("COURIER_ARCHIVE_AGE_{}", category.as_str().to_uppercase());
            if let Some(v) = lookup(&name) {
                let secs = parse_duration(&v).map_err(|e| format!("{name}: {e}"))?;
                ages.0.insert(category, Duration::from_secs(secs));
            }
            let (age, limit) = (ages.age(category), ArchiveAges::limit(category, source));
            if age > limit {
                return Err(format!(
                    "{name}: {} days is longer than the dead-letter queue keeps such a letter before archival can be sure to run ({} days at most: 14 days of retention{}, less a day's margin)",
                    age.as_secs_f64() / 86_400.0,
                    limit.as_secs_f64() / 86_400.0,
                    if category == DeadLetterCategory::Redriven {
                        ", counted from when the message entered the send or retry queue, less their retention"
                    } else {
                        ""
                    }
                ));
            }
        }
        Ok(ages)
    }

    /// The longest age `category` may have. SQS drops a message from a dead-letter queue 14
    /// days after it entered it, except for a redriven message of a standard queue, whose clock
    /// started when it entered the send or retry queue (up to `source_retention` earlier); the archiver's
    /// age counts from when the letter was indexed (for raw redrives: first seen in the DLQ).
    pub fn limit(category: DeadLetterCategory, source_retention: Duration) -> Duration {
        let limit = LETTER_QUEUE_RETENTION.saturating_sub(ARCHIVE_MARGIN);
        if category == DeadLetterCategory::Redriven {
            limit.saturating_sub(source_retention)
        } else {
            limit
        }
    }

    pub fn age(&self, category: DeadLetterCategory) -> Duration {
        self.0
            .get(&category)
            .copied()
            .unwrap_or(Duration::from_secs(7 * 24 * 3600))
    }
}

/// A letter as the index holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexedLetter {
    pub letter_id: String,
    pub state: LetterState,
    pub dead_lettered_at: DateTime<Utc>,
    pub archive_key: Option<String>,
    pub record: DeadLetter,
    /// Who did what to it, newest last (`replayed by ann: fixed template`).
    #[serde(default)]
    pub audit: Vec<String>,
}

/// What the archiver does with one letter it received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArchiveStep {
    /// Old enough: archive it.
    Archive,
    /// Too young: hide the queue copy for this long (at most SQS's 12 h).
    Hide(Duration),
    /// Already archived, replayed or discarded: delete the queue copy.
    Drop,
    /// A previous run claimed it for `key` and stopped: check whether that object exists.
    Recover(String),
    /// A replay has claimed it: never archive it; look again after [`REPLAY_WAIT`] (a replay
    /// that stopped is finished by running `dlq replay` on it again).
    AwaitReplay,
}

/// How long the archiver hides a letter that a replay has claimed.
pub const REPLAY_WAIT: Duration = Duration::from_secs(3600);

/// SQS's longest visibility timeout.
pub const MAX_HIDE: Duration = Duration::from_secs(12 * 3600);

/// Decides one letter's step.
pub fn archive_step(letter: &IndexedLetter, ages: &ArchiveAges, now: DateTime<Utc>) -> ArchiveStep {
    match letter.state {
        s if s.is_settled() => ArchiveStep::Drop,
        LetterState::Archiving => {
            ArchiveStep::Recover(letter.archive_key.clone().unwrap_or_default())
        }
        LetterState::Replaying => ArchiveStep::AwaitReplay,
        _ => {
            let age = (now - letter.dead_lettered_at).to_std().unwrap_or_default();
            let wanted = ages.age(letter.record.category);
            if age >= wanted {
                ArchiveStep::Archive
            } else {
                ArchiveStep::Hide((wanted - age).min(MAX_HIDE).max(Duration::from_secs(1)))
            }
        }
    }
}

/// The archive object key for letters of one category and day, Athena/Hive-partitioned:
/// `dead-letters/category=needs_review/dt=2026-11-30/<run>-<seq>.jsonl.gz`.
pub fn archive_key(
    category: DeadLetterCategory,
    day: DateTime<Utc>,
    run_id: &str,
    seq: usize,
) -> String {
    format!(
        "dead-letters/category={}/dt={}/{run_id}-{seq:04}.jsonl.gz",
        category.as_str(),
        day.format("%Y-%m-%d")
    )
}

/// Filters for listing and searching the index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LetterFilter {
    pub category: Option<DeadLetterCategory>,
    pub campaign: Option<String>,
    pub provider: Option<String>,
    pub class: Option<crate::classify::ErrorClass>,
    pub state: Option<LetterState>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    /// Case-insensitive substring of the reason, raw code or raw text.
    pub text: Option<String>,
    /// Letters of one job.
    pub message_id: Option<String>,
}

impl LetterFilter {
    /// Whether a letter matches every filter that is set.
    pub fn matches(&self, l: &IndexedLetter) -> bool {
        let r = &l.record;
        self.category.is_none_or(|c| c == r.category)
            && self
                .campaign
                .as_deref()
                .is_none_or(|c| r.campaign_id.as_deref() == Some(c))
            && self
                .provider
                .as_deref()
                .is_none_or(|p| r.provider.as_deref() == Some(p))
            && self.class.is_none_or(|c| c == r.class)
            && self.state.is_none_or(|s| s == l.state)
            && self
                .message_id
                .as_deref()
                .is_none_or(|m| r.message_id.as_deref() == Some(m))
            && self.since.is_none_or(|t| l.dead_lettered_at >= t)
            && self.until.is_none_or(|t| l.dead_lettered_at < t)
            && self.text.as_deref().is_none_or(|t| {
                let t = t.to_lowercase();
                [
                    Some(r.reason.as_str()),
                    r.raw_code.as_deref(),
                    r.raw_text.as_deref(),
                ]
                .into_iter()
                .flatten()
                .any(|s| s.to_lowercase().contains(&t))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::ErrorClass;

    pub(crate) fn letter(category: DeadLetterCategory, at: DateTime<Utc>) -> IndexedLetter {
        IndexedLetter {
            letter_id: "m#abc#g0".into(),
            state: LetterState::Live,
            dead_lettered_at: at,
            archive_key: None,
            record: DeadLetter {
                id: "m".into(),
                category,
                reason: "554 5.7.1 blocked".into(),
                message_id: Some("m".into()),
                campaign_id: Some("spring".into()),
                trace_id: None,
                recipients: vec![],
                provider: Some("smtp".into()),
                class: ErrorClass::ContentRejected,
                rule: "r".into(),
                raw_code: Some("554 5.7.1".into()),
                raw_text: Some("Message rejected as SPAM".into()),
                attempts: 1,
                history: vec![],
                first_failure_at: at,
                last_failure_at: at,
                fingerprint: "f".into(),
                payload: None,
                payload_base64: None,
            },
            audit: vec![],
        }
    }

    fn t(days: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + days * 86_400, 0).unwrap()
    }

    #[test]
    fn ids_are_stable_per_copy_and_distinct_per_payload() {
        assert_eq!(
            letter_id(
                Some("m"),
                "0123456789abcdef0123",
                2,
                DeadLetterCategory::Poison
            ),
            "m#0123456789abcdef#g2#poison"
        );
        assert_ne!(
            letter_id(Some("m"), "aaaaaaaaaaaaaaaa", 0, DeadLetterCategory::Poison),
            letter_id(Some("m"), "bbbbbbbbbbbbbbbb", 0, DeadLetterCategory::Poison)
        );
        assert_eq!(
            letter_id(None, "ab", 0, DeadLetterCategory::InvalidJob),
            "_#ab#g0#invalid_job"
        );
        assert_ne!(
            letter_id(Some("m"), "ab", 0, DeadLetterCategory::Poison),
            letter_id(Some("m"), "ab", 0, DeadLetterCategory::NeedsReview)
        );
    }

    #[test]
    fn steps_by_state_and_age() {
        let ages = ArchiveAges::default();
        let mut l = letter(DeadLetterCategory::Poison, t(0));
        assert_eq!(archive_step(&l, &ages, t(8)), ArchiveStep::Archive);
        assert_eq!(archive_step(&l, &ages, t(6)), ArchiveStep::Hide(MAX_HIDE));
        let almost = t(7) - chrono::Duration::seconds(60);
        assert_eq!(
            archive_step(&l, &ages, almost),
            ArchiveStep::Hide(Duration::from_secs(60))
        );
        l.state = LetterState::Replaying;
        assert_eq!(archive_step(&l, &ages, t(8)), ArchiveStep::AwaitReplay);
        l.state = LetterState::Replayed;
        assert_eq!(archive_step(&l, &ages, t(8)), ArchiveStep::Drop);
        l.state = LetterState::Archiving;
        l.archive_key = Some("k".into());
        assert_eq!(
            archive_step(&l, &ages, t(0)),
            ArchiveStep::Recover("k".into())
        );
    }

    #[test]
    fn ages_come_from_the_environment_with_clear_errors() {
        let ages =
            ArchiveAges::from_lookup(|k| (k == "COURIER_ARCHIVE_AGE_POISON").then(|| "3d".into()))
                .unwrap();
        assert_eq!(
            ages.age(DeadLetterCategory::Poison),
            Duration::from_secs(3 * 86_400)
        );
        let err = ArchiveAges::from_lookup(|k| {
            (k == "COURIER_ARCHIVE_AGE_INVALID_JOB").then(|| "soon".into())
        })
        .unwrap_err();
        assert!(err.contains("COURIER_ARCHIVE_AGE_INVALID_JOB"), "{err}");
        let err = ArchiveAges::from_lookup(|k| {
            (k == "COURIER_SEND_QUEUE_RETENTION").then(|| "four days".into())
        })
        .unwrap_err();
        assert!(err.contains("COURIER_SEND_QUEUE_RETENTION"), "{err}");
    }

    #[test]
    fn ages_the_queue_would_not_keep_are_refused() {
        // the defaults fit the template's queues
        assert_eq!(
            ArchiveAges::from_lookup(|_| None).unwrap(),
            ArchiveAges::default()
        );
        // 13 days fits a letter, 14 (the queue's retention) does not
        let at = |k: &'static str, v: &'static str| move |n: &str| (n == k).then(|| v.to_owned());
        assert!(ArchiveAges::from_lookup(at("COURIER_ARCHIVE_AGE_NEEDS_REVIEW", "13d")).is_ok());
        let err =
            ArchiveAges::from_lookup(at("COURIER_ARCHIVE_AGE_NEEDS_REVIEW", "14d")).unwrap_err();
        assert!(
            err.contains("COURIER_ARCHIVE_AGE_NEEDS_REVIEW") && err.contains("13 days at most"),
            "{err}"
        );
        // a redriven message's clock started in the send queue (4 days by default)
        assert!(ArchiveAges::from_lookup(at("COURIER_ARCHIVE_AGE_REDRIVEN", "9d")).is_ok());
        let err = ArchiveAges::from_lookup(at("COURIER_ARCHIVE_AGE_REDRIVEN", "10d")).unwrap_err();
        assert!(err.contains("9 days at most"), "{err}");
        let longer_source = |n: &str| match n {
            "COURIER_ARCHIVE_AGE_REDRIVEN" => Some("7d".into()),
            "COURIER_SEND_QUEUE_RETENTION" => Some("1209600".into()),
            _ => None,
        };
        let err = ArchiveAges::from_lookup(longer_source).unwrap_err();
        assert!(err.contains("0 days at most"), "{err}");
    }

    #[test]
    fn keys_are_partitioned_by_category_and_day() {
        assert_eq!(
            archive_key(DeadLetterCategory::NeedsReview, t(0), "run1", 3),
            "dead-letters/category=needs_review/dt=2027-01-15/run1-0003.jsonl.gz"
        );
    }

    #[test]
    fn filters() {
        let l = letter(DeadLetterCategory::NeedsReview, t(0));
        assert!(LetterFilter::default().matches(&l));
        assert!(
            LetterFilter {
                text: Some("spam".into()),
                campaign: Some("spring".into()),
                ..Default::default()
            }
            .matches(&l)
        );
        assert!(
            !LetterFilter {
                text: Some("quota".into()),
                ..Default::default()
            }
            .matches(&l)
        );
        assert!(
            !LetterFilter {
                since: Some(t(1)),
                ..Default::default()
            }
            .matches(&l)
        );
        assert!(
            LetterFilter {
                until: Some(t(1)),
                class: Some(ErrorClass::ContentRejected),
                ..Default::default()
            }
            .matches(&l)
        );
        assert!(
            !LetterFilter {
                state: Some(LetterState::Archived),
                ..Default::default()
            }
            .matches(&l)
        );
    }
}
