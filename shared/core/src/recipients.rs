//! Per-recipient outcomes: what became of each recipient of a job, and the job status derived
//! from them.
//!
//! A job's record lists its recipients (bare, lowercased addresses with their `to`/`cc`/`bcc`
//! role) once a send was made, each with its own [`RecipientStatus`], moved forward only by a
//! small machine of its own ([`advance`]), and a timeline of [`RecipientEntry`]s. The job's
//! status follows from its recipients' once each has a final outcome ([`derive`]):
//!
//! | recipients (those suppressed before sending aside)          | job status            |
//! | ----------------------------------------------------------- | --------------------- |
//! | any complained                                              | `complained`          |
//! | every one delivered                                         | `delivered`           |
//! | some delivered, the others bounced permanently or resent    | `partially_delivered` |
//! | none delivered, some resent (the others bounced permanently) | `bounced_transient`   |
//! | none delivered, every one bounced permanently               | `bounced_permanent`   |
//! | none left (every recipient suppressed before sending)       | `suppressed`          |
//!
//! Until then the job keeps the status its send gave it (`sent_to_provider`, `unknown`). A
//! recipient `resent` after a transient bounce is sent again by a job of its own ([`part_id`]),
//! whose record holds its outcome.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::mailbox::address_key;
use crate::status::Status;

/// At most this many timeline entries are kept per recipient (its outcomes only move forward,
/// so this is reached only by repeated whole-job resends); the outcome itself is always kept.
pub const LOG_PER_RECIPIENT: usize = 6;

/// A timeline entry's detail is cut to this many characters (a bounce's diagnostic can be long;
/// the record must stay under DynamoDB's 400 KB item at 50 recipients).
pub const DETAIL_CHARS: usize = 100;

/// What became of one recipient.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecipientStatus {
    /// The send's outcome is ambiguous (the job is `unknown`).
    Unknown,
    /// The provider accepted the message for this recipient.
    Sent,
    /// The receiver refused it for now; the job (or a resend) tries again.
    BouncedTransient,
    /// After a transient bounce, handed to a job of its own that sends to it again (with the
    /// other recipients that bounced with it; see [`part_id`]); its timeline names that job.
    Resent,
    Delivered,
    Complained,
    BouncedPermanent,
    /// Left out before sending (suppressed, or unsubscribed from the job's list).
    Suppressed,
}

impl RecipientStatus {
    pub const ALL: [RecipientStatus; 8] = [
        RecipientStatus::Unknown,
        RecipientStatus::Sent,
        RecipientStatus::BouncedTransient,
        RecipientStatus::Resent,
        RecipientStatus::Delivered,
        RecipientStatus::Complained,
        RecipientStatus::BouncedPermanent,
        RecipientStatus::Suppressed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RecipientStatus::Unknown => "unknown",
            RecipientStatus::Sent => "sent",
            RecipientStatus::BouncedTransient => "bounced_transient",
            RecipientStatus::Resent => "resent",
            RecipientStatus::Delivered => "delivered",
            RecipientStatus::Complained => "complained",
            RecipientStatus::BouncedPermanent => "bounced_permanent",
            RecipientStatus::Suppressed => "suppressed",
        }
    }

    pub fn parse(name: &str) -> Option<RecipientStatus> {
        RecipientStatus::ALL
            .into_iter()
            .find(|s| s.as_str() == name)
    }

    /// Nothing further will happen to this recipient within this job.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            RecipientStatus::Resent
                | RecipientStatus::Delivered
                | RecipientStatus::Complained
                | RecipientStatus::BouncedPermanent
                | RecipientStatus::Suppressed
        )
    }

    /// The recipient's status an SES outcome status means, if any.
    pub fn of_status(status: Status) -> Option<RecipientStatus> {
        match status {
            Status::SentToProvider => Some(RecipientStatus::Sent),
            Status::BouncedTransient => Some(RecipientStatus::BouncedTransient),
            Status::Delivered => Some(RecipientStatus::Delivered),
            Status::Complained => Some(RecipientStatus::Complained),
            Status::BouncedPermanent => Some(RecipientStatus::BouncedPermanent),
            Status::Unknown => Some(RecipientStatus::Unknown),
            Status::Suppressed => Some(RecipientStatus::Suppressed),
            Status::Pending
            | Status::Processing
            | Status::Deferred
            | Status::PartiallyDelivered
            | Status::FailedInternal
            | Status::DeadLettered => None,
        }
    }
}

impl std::fmt::Display for RecipientStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a recipient may move from `from` to `to` (forward only; a repeat or a late event is
/// not a move).
fn allowed(from: RecipientStatus, to: RecipientStatus) -> bool {
    use RecipientStatus::*;
    match from {
        Unknown => matches!(
            to,
            Sent | BouncedTransient | Delivered | Complained | BouncedPermanent
        ),
        Sent => matches!(
            to,
            BouncedTransient | Delivered | Complained | BouncedPermanent
        ),
        // A whole-job resend sends to it again, or a job of its own does; a later event may
        // still report an outcome.
        BouncedTransient => matches!(
            to,
            Sent | Resent | Delivered | Complained | BouncedPermanent
        ),
        Delivered => matches!(to, Complained),
        // Its outcome is the resend's job's.
        Resent | Complained | BouncedPermanent | Suppressed => false,
    }
}

/// Whether `to` moves a recipient at `from`. A repeat, a late event or a move the machine does
/// not allow (a bounce after a delivery, anything after a suppression) changes nothing.
pub fn advance(from: RecipientStatus, to: RecipientStatus) -> bool {
    allowed(from, to)
}

/// A recipient's header role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    To,
    Cc,
    Bcc,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::To => "to",
            Role::Cc => "cc",
            Role::Bcc => "bcc",
        }
    }

    pub fn parse(name: &str) -> Option<Role> {
        [Role::To, Role::Cc, Role::Bcc]
            .into_iter()
            .find(|r| r.as_str() == name)
    }
}

/// One recipient of a job and its outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recipient {
    /// The bare address, lowercased ([`address_key`]): what SES events and suppressions name.
    pub address: String,
    pub role: Role,
    pub status: RecipientStatus,
}

/// One step of a recipient's timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecipientEntry {
    /// The recipient's position in the record's list.
    pub recipient: usize,
    pub status: RecipientStatus,
    pub at: DateTime<Utc>,
    #[serde(default)]
    pub detail: Option<String>,
}

/// The recipients of a job as one send reached them: each `status`, except those `left_out`
/// (as given to the claim: suppressed or unsubscribed), which are `suppressed`. Repeated
/// addresses are listed once (the first role wins).
pub fn roll(
    job: &crate::job::EmailJob,
    status: RecipientStatus,
    left_out: &[String],
) -> Vec<Recipient> {
    let left: Vec<String> = left_out.iter().map(|r| address_key(r)).collect();
    let mut list: Vec<Recipient> = Vec::new();
    let roles = job
        .to
        .iter()
        .map(|r| (r, Role::To))
        .chain(job.cc.iter().map(|r| (r, Role::Cc)))
        .chain(job.bcc.iter().map(|r| (r, Role::Bcc)));
    for (raw, role) in roles {
        let address = address_key(raw);
        if list.iter().any(|r| r.address == address) {
            continue;
        }
        let status = if left.contains(&address) {
            RecipientStatus::Suppressed
        } else {
            status
        };
        list.push(Recipient {
            address,
            role,
            status,
        });
    }
    list
}

/// The timeline entries a new roll starts with: one per recipient, with `detail`, or with the
/// recipient's own note where `notes` (bare address, detail) has one.
pub fn entries_of(
    list: &[Recipient],
    at: DateTime<Utc>,
    detail: Option<&str>,
    notes: &[(String, String)],
) -> Vec<RecipientEntry> {
    list.iter()
        .enumerate()
        .map(|(i, r)| {
            let note = notes.iter().find(|(a, _)| *a == r.address);
            RecipientEntry {
                recipient: i,
                status: r.status,
                at,
                detail: note.map(|(_, d)| d.as_str()).or(detail).map(cut),
            }
        })
        .collect()
}

/// `list` (a roll of an accepted send) with each of `refused` (addresses the provider refused
/// while it took the message for the others) bounced permanently, and the notes their timeline
/// entries take: `why` of each.
pub fn refuse(list: &mut [Recipient], refused: &[(String, String)]) -> Vec<(String, String)> {
    let mut notes = Vec::new();
    for (address, why) in refused {
        let key = address_key(address);
        if let Some(r) = list.iter_mut().find(|r| r.address == key) {
            r.status = RecipientStatus::BouncedPermanent;
            notes.push((key, why.clone()));
        }
    }
    notes
}

/// The statuses of a send whose recipients' outcomes are still to come: a list is filled only
/// on these (a finished job keeps the status its send ended with, without a list to match).
pub const FILLABLE: [Status; 3] = [
    Status::SentToProvider,
    Status::Unknown,
    Status::BouncedTransient,
];

/// The recipients of a send recorded without them (SES's Send event recorded it, the send
/// function gone before its own status write), for [`crate::ports::StatusStore::fill_recipients`]:
/// written only where the record has no list, at generation `attempt`, whose recorded send is
/// `provider_message_id` and still open ([`FILLABLE`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecipientFill {
    pub attempt: u32,
    pub provider_message_id: String,
    pub list: Vec<Recipient>,
    pub at: DateTime<Utc>,
    /// The timeline note of every entry.
    pub detail: String,
}

/// The recipients a send of `job` reached, as the provider names them in `sent_to` (SES's
/// `mail.destination`: every address it sent that message to), in their roles: those of the job
/// it did not send to are `suppressed` (the send left them out), as the send function records
/// them. `None` when `sent_to` names none of the job's recipients (not this job's send).
pub fn reached(job: &crate::job::EmailJob, sent_to: &[String]) -> Option<Vec<Recipient>> {
    let sent: Vec<String> = sent_to.iter().map(|a| address_key(a)).collect();
    let all = roll(job, RecipientStatus::Sent, &[]);
    let left_out: Vec<String> = all
        .iter()
        .filter(|r| !sent.contains(&r.address))
        .map(|r| r.address.clone())
        .collect();
    (left_out.len() < all.len()).then(|| roll(job, RecipientStatus::Sent, &left_out))
}

/// A change to a record's recipients: new outcomes by position, and their timeline entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecipientChange {
    /// The record's recipients version this change was computed from (written only if it is
    /// still the record's).
    pub version: u32,
    pub set: Vec<(usize, RecipientStatus)>,
    pub log: Vec<RecipientEntry>,
}

/// What an event about `addresses` (as the provider names them) moving them `to` changes in
/// `list` (with its timeline `log`, read at `version`). Addresses not on the list are ignored;
/// repeats and late events change nothing. `None` when nothing changes.
pub fn apply(
    list: &[Recipient],
    log: &[RecipientEntry],
    version: u32,
    addresses: &[String],
    to: RecipientStatus,
    at: DateTime<Utc>,
    detail: Option<&str>,
) -> Option<RecipientChange> {
    let keys: Vec<String> = addresses.iter().map(|a| address_key(a)).collect();
    let mut change = RecipientChange {
        version,
        set: Vec::new(),
        log: Vec::new(),
    };
    for (i, r) in list.iter().enumerate() {
        if !keys.contains(&r.address) || !advance(r.status, to) {
            continue;
        }
        change.set.push((i, to));
        if log.iter().filter(|e| e.recipient == i).count() < LOG_PER_RECIPIENT {
            change.log.push(RecipientEntry {
                recipient: i,
                status: to,
                at,
                detail: detail.map(cut),
            });
        }
    }
    (!change.set.is_empty()).then_some(change)
}

/// `list` with `change` applied.
pub fn applied(list: &[Recipient], change: &RecipientChange) -> Vec<Recipient> {
    let mut list = list.to_vec();
    for (i, status) in &change.set {
        if let Some(r) = list.get_mut(*i) {
            r.status = *status;
        }
    }
    list
}

/// The job status its recipients' outcomes make, once every one is final (see the module docs);
/// `None` before that, and for an empty list.
pub fn derive(list: &[Recipient]) -> Option<Status> {
    if list.is_empty() || !list.iter().all(|r| r.status.is_final()) {
        return None;
    }
    let sent: Vec<RecipientStatus> = list
        .iter()
        .map(|r| r.status)
        .filter(|s| *s != RecipientStatus::Suppressed)
        .collect();
    let reached =
        |s: &RecipientStatus| matches!(s, RecipientStatus::Delivered | RecipientStatus::Complained);
    Some(if sent.is_empty() {
        Status::Suppressed
    } else if sent.contains(&RecipientStatus::Complained) {
        Status::Complained
    } else if sent.iter().all(reached) {
        Status::Delivered
    } else if sent.iter().any(reached) {
        Status::PartiallyDelivered
    } else if sent.contains(&RecipientStatus::Resent) {
        Status::BouncedTransient
    } else {
        Status::BouncedPermanent
    })
}

/// The id of the job that sends `parent`'s message again to `addresses` after the transient
/// bounce of the provider's message `bounced`: the same for the same bounce and recipients (a
/// redelivered event schedules a copy its claim drops as a duplicate), distinct otherwise, and
/// at most [`crate::job::MAX_ID_LEN`] characters however often it is derived again:
/// `parent` (cut to 200 characters) `~` and 12 hex digits of a SHA-256.
pub fn part_id(parent: &str, bounced: &str, addresses: &[String]) -> String {
    use sha2::{Digest, Sha256};
    let mut keys: Vec<String> = addresses.iter().map(|a| address_key(a)).collect();
    keys.sort();
    keys.dedup();
    let mut hash = Sha256::new();
    for part in [parent, bounced]
        .into_iter()
        .chain(keys.iter().map(String::as_str))
    {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    let hex: String = hash.finalize()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let stem: String = parent.chars().take(200).collect();
    format!("{stem}~{hex}")
}

fn cut(detail: &str) -> String {
    match detail.char_indices().nth(DETAIL_CHARS) {
        Some((end, _)) => format!("{}…", &detail[..end]),
        None => detail.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RecipientStatus::*;

    fn at() -> DateTime<Utc> {
        "2026-12-02T10:00:00Z".parse().unwrap()
    }

    fn list(statuses: &[RecipientStatus]) -> Vec<Recipient> {
        statuses
            .iter()
            .enumerate()
            .map(|(i, s)| Recipient {
                address: format!("r{i}@example.org"),
                role: Role::To,
                status: *s,
            })
            .collect()
    }

    #[test]
    fn the_job_status_follows_once_every_recipient_is_final() {
        for (statuses, expected) in [
            (vec![Delivered, Delivered], Some(Status::Delivered)),
            (vec![Delivered, Suppressed], Some(Status::Delivered)),
            (
                vec![Delivered, BouncedPermanent],
                Some(Status::PartiallyDelivered),
            ),
            (
                vec![BouncedPermanent, BouncedPermanent],
                Some(Status::BouncedPermanent),
            ),
            (
                vec![BouncedPermanent, Suppressed],
                Some(Status::BouncedPermanent),
            ),
            (
                vec![Delivered, Complained, BouncedPermanent],
                Some(Status::Complained),
            ),
            (vec![Suppressed, Suppressed], Some(Status::Suppressed)),
            (vec![Delivered, Resent], Some(Status::PartiallyDelivered)),
            (
                vec![Resent, BouncedPermanent],
                Some(Status::BouncedTransient),
            ),
            (
                vec![Resent, Resent, Suppressed],
                Some(Status::BouncedTransient),
            ),
            (vec![Resent, Complained], Some(Status::Complained)),
            (vec![Delivered, Sent], None),
            (vec![Delivered, BouncedTransient], None),
            (vec![Unknown], None),
            (vec![], None),
        ] {
            assert_eq!(derive(&list(&statuses)), expected, "{statuses:?}");
        }
    }

    #[test]
    fn single_recipient_jobs_keep_the_status_their_recipient_has() {
        for s in [Delivered, Complained, BouncedPermanent, Suppressed] {
            let derived = derive(&list(&[s])).unwrap();
            assert_eq!(RecipientStatus::of_status(derived), Some(s));
        }
    }

    #[test]
    fn recipients_only_move_forward() {
        assert!(advance(Sent, Delivered));
        assert!(advance(Delivered, Complained));
        assert!(advance(BouncedTransient, Sent));
        assert!(advance(BouncedTransient, Resent));
        assert!(!advance(Sent, Resent), "only a bounced recipient is resent");
        assert!(advance(Unknown, Delivered));
        // Repeats and late events are absorbed.
        assert!(!advance(Delivered, Delivered));
        assert!(!advance(Delivered, Sent));
        assert!(!advance(Complained, Delivered));
        assert!(!advance(BouncedPermanent, Delivered));
        // A bounce after a delivery, or anything after a suppression, is not a move.
        assert!(!advance(Delivered, BouncedPermanent));
        assert!(!advance(Suppressed, Sent));
        for from in RecipientStatus::ALL
            .into_iter()
            .filter(|s| s.is_final() && *s != Delivered)
        {
            for to in RecipientStatus::ALL {
                assert!(!advance(from, to), "{from} -> {to}");
            }
        }
    }

    #[test]
    fn an_event_moves_only_the_recipients_it_names() {
        let roll = list(&[Sent, Sent, Sent]);
        let change = apply(
            &roll,
            &[],
            4,
            &["R1@Example.org".into(), "stranger@example.org".into()],
            Delivered,
            at(),
            Some("250 ok"),
        )
        .unwrap();
        assert_eq!(change.version, 4);
        assert_eq!(change.set, vec![(1, Delivered)]);
        assert_eq!(change.log.len(), 1);
        assert_eq!(change.log[0].recipient, 1);
        let after = applied(&roll, &change);
        assert_eq!(after[1].status, Delivered);
        assert_eq!(after[0].status, Sent);
        // The same event again changes nothing.
        assert_eq!(
            apply(
                &after,
                &change.log,
                5,
                &["r1@example.org".into()],
                Delivered,
                at(),
                None
            ),
            None
        );
    }

    #[test]
    fn a_recipients_timeline_is_bounded_and_its_details_cut() {
        let roll = list(&[BouncedTransient]);
        let log: Vec<RecipientEntry> = (0..LOG_PER_RECIPIENT)
            .map(|_| RecipientEntry {
                recipient: 0,
                status: Sent,
                at: at(),
                detail: None,
            })
            .collect();
        let change = apply(
            &roll,
            &log,
            0,
            &["r0@example.org".into()],
            Delivered,
            at(),
            None,
        )
        .unwrap();
        assert_eq!(change.set, vec![(0, Delivered)]);
        assert!(
            change.log.is_empty(),
            "the outcome is kept, the timeline full"
        );
        let long = "x".repeat(1_000);
        let change = apply(
            &roll,
            &[],
            0,
            &["r0@example.org".into()],
            Delivered,
            at(),
            Some(&long),
        )
        .unwrap();
        assert_eq!(
            change.log[0].detail.as_ref().unwrap().chars().count(),
            DETAIL_CHARS + 1
        );
    }

    #[test]
    fn a_roll_keeps_roles_lists_each_address_once_and_marks_those_left_out() {
        let job: crate::job::EmailJob = serde_json::from_value(serde_json::json!({
            "version": 1, "message_id": "m", "campaign_id": "c", "from": "a@example.com",
            "to": ["Ann <Ann@Example.org>", "bob@example.org"], "cc": ["cy@example.org", "ann@example.org"],
            "bcc": ["dee@example.org"], "content": {"subject": "s", "text": "t"}
        }))
        .unwrap();
        let roll = roll(&job, Sent, &["Bob <BOB@example.org>".into()]);
        let seen: Vec<(&str, Role, RecipientStatus)> = roll
            .iter()
            .map(|r| (r.address.as_str(), r.role, r.status))
            .collect();
        assert_eq!(
            seen,
            vec![
                ("ann@example.org", Role::To, Sent),
                ("bob@example.org", Role::To, Suppressed),
                ("cy@example.org", Role::Cc, Sent),
                ("dee@example.org", Role::Bcc, Sent),
            ]
        );
        assert_eq!(entries_of(&roll, at(), Some("accepted"), &[]).len(), 4);
    }

    #[test]
    fn the_recipients_a_send_reached_are_those_the_provider_names_the_others_left_out() {
        let job: crate::job::EmailJob = serde_json::from_value(serde_json::json!({
            "version": 1, "message_id": "m", "campaign_id": "c", "from": "a@example.com",
            "to": ["Ann <Ann@Example.org>"], "cc": ["cy@example.org"], "bcc": ["dee@example.org"],
            "content": {"subject": "s", "text": "t"}
        }))
        .unwrap();
        let seen = |sent_to: &[&str]| {
            let sent_to: Vec<String> = sent_to.iter().map(|a| (*a).to_owned()).collect();
            reached(&job, &sent_to).map(|list| {
                list.into_iter()
                    .map(|r| (r.address, r.role, r.status))
                    .collect::<Vec<_>>()
            })
        };
        // SES names addresses as it sent them (any case); Dee, not named, was left out.
        assert_eq!(
            seen(&["ann@example.org", "CY@example.org"]),
            Some(vec![
                ("ann@example.org".into(), Role::To, Sent),
                ("cy@example.org".into(), Role::Cc, Sent),
                ("dee@example.org".into(), Role::Bcc, Suppressed),
            ])
        );
        // A destination naming none of the job's recipients is not this job's send.
        assert_eq!(seen(&["zed@example.org"]), None);
        assert_eq!(seen(&[]), None);
    }

    #[test]
    fn a_resends_id_is_one_per_bounce_and_recipients_and_stays_within_the_id_limit() {
        let a = part_id(
            "m-1",
            "ses-1",
            &["B@example.org".into(), "c@example.org".into()],
        );
        assert_eq!(
            a,
            part_id(
                "m-1",
                "ses-1",
                &["c@example.org".into(), "b@example.org".into()]
            ),
            "the same bounce of the same recipients, in any order and case"
        );
        assert!(a.starts_with("m-1~") && a.len() == "m-1~".len() + 12, "{a}");
        for other in [
            part_id(
                "m-1",
                "ses-2",
                &["b@example.org".into(), "c@example.org".into()],
            ),
            part_id("m-1", "ses-1", &["b@example.org".into()]),
            part_id(
                "m-2",
                "ses-1",
                &["b@example.org".into(), "c@example.org".into()],
            ),
        ] {
            assert_ne!(a, other);
        }
        // Derived again and again, it stays within the contract's id limit.
        let mut id = "x".repeat(crate::job::MAX_ID_LEN);
        for n in 0..5 {
            id = part_id(&id, &format!("ses-{n}"), &["b@example.org".into()]);
            assert!(id.chars().count() <= crate::job::MAX_ID_LEN, "{id}");
        }
    }

    #[test]
    fn names_round_trip() {
        for s in RecipientStatus::ALL {
            assert_eq!(RecipientStatus::parse(s.as_str()), Some(s));
        }
        for r in [Role::To, Role::Cc, Role::Bcc] {
            assert_eq!(Role::parse(r.as_str()), Some(r));
        }
        assert_eq!(RecipientStatus::parse("lost"), None);
    }
}
