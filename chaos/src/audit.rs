//! The audit: every job against what the system recorded and what Postfix and the SES emulator
//! received. Pure: the caller collects the evidence (status table, dead-letter index, redrive
//! DLQ, Maildir, the messages moto's SES accepted, the drivers' journal) and [`audit`] judges it.
//!
//! Rules, per job:
//! - it has a home: a terminal status (sent, bounced, suppressed, dead-lettered, ...) or a dead
//!   letter with its record; otherwise it is **lost** (a raw copy that SQS redrove to the
//!   redrive DLQ after maxReceiveCount carries no record of ours and does not count as a home);
//! - exactly one: at most one dead letter, and no dead letter beside a sent/bounced/suppressed
//!   status; a `dead_lettered` status has its letter; every letter carries the payload;
//! - delivered at most once, unless the status machine recorded an ambiguous outcome
//!   (`unknown`) for the job, in which case the duplicates are counted, not failed;
//! - a job recorded as sent arrived; a job that arrived is recorded as sent (or ambiguous);
//! - every dead letter is in the S3 archive once the archiver has run, with a payload that is
//!   the job's own (read from S3 and fingerprinted again);
//! - it ends where its kind must ([`expected_end`]): a deliverable job sent, a dead address
//!   bounced or suppressed, a soft failure dead-lettered as `retries_exhausted`, a policy
//!   rejection as `needs_review`, an invalid job as `invalid_job`; a job whose scripted Postfix
//!   failure was never met because it went to SES while the SMTP circuit was open (failover)
//!   may end sent, with the SES emulator's copy as the evidence.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::mix::{Job, Kind};

/// A status record as read back.
#[derive(Debug, Clone, Default)]
pub struct StatusSeen {
    pub status: String,
    /// The record's history shows an `unknown` status at some point.
    pub unknown_in_history: bool,
}

/// A dead letter as read back from the index.
#[derive(Debug, Clone)]
pub struct LetterSeen {
    pub letter_id: String,
    pub fingerprint: String,
    pub category: String,
    pub has_payload: bool,
}

/// Everything the audit looks at.
#[derive(Debug, Default)]
pub struct Evidence {
    pub statuses: HashMap<String, StatusSeen>,
    pub letters: Vec<LetterSeen>,
    /// Fingerprints (of the application's payload) of raw messages in the redrive DLQ.
    pub redriven: Vec<String>,
    /// SMTP acceptances per `X-Courier-Message-Id`: its Maildir files, those of one Postfix
    /// queue id counted once ([`acceptance_id`]).
    pub deliveries: HashMap<String, usize>,
    /// Maildir files of jobs (with `X-Courier-Message-Id`).
    pub maildir_files: usize,
    /// Messages moto's SES accepted, per `X-Courier-Message-Id`.
    pub ses_accepted: HashMap<String, usize>,
    /// Message ids the drivers' journal saw set to `unknown`.
    pub journal_ambiguous: HashSet<String>,
    /// The S3 archive after the archiver ran, read from S3 (None: not checked): the
    /// fingerprint of each archived letter's payload, by letter id (empty without a payload).
    pub archive: Option<HashMap<String, String>>,
}

/// Counts for one kind of job (or all).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Row {
    pub jobs: usize,
    pub sent: usize,
    pub delivered_files: usize,
    /// Of `delivered_files`, the messages the SES emulator accepted.
    pub via_ses: usize,
    /// Jobs of a scripted-failure kind that SES took instead (failover).
    pub failed_over: usize,
    pub bounced: usize,
    pub suppressed: usize,
    pub dead_letters: BTreeMap<String, usize>,
    pub other_terminal: usize,
    pub redriven: usize,
    pub ambiguous: usize,
    pub duplicates_after_ambiguous: usize,
    pub lost: usize,
    pub violations: usize,
}

impl Row {
    fn add(&mut self, other: &Row) {
        self.jobs += other.jobs;
        self.sent += other.sent;
        self.delivered_files += other.delivered_files;
        self.via_ses += other.via_ses;
        self.failed_over += other.failed_over;
        self.bounced += other.bounced;
        self.suppressed += other.suppressed;
        for (k, v) in &other.dead_letters {
            *self.dead_letters.entry(k.clone()).or_default() += v;
        }
        self.other_terminal += other.other_terminal;
        self.redriven += other.redriven;
        self.ambiguous += other.ambiguous;
        self.duplicates_after_ambiguous += other.duplicates_after_ambiguous;
        self.lost += other.lost;
        self.violations += other.violations;
    }

    fn dead_lettered(&self) -> usize {
        self.dead_letters.values().sum()
    }
}

/// The verdict of a run.
#[derive(Debug, Default)]
pub struct Audit {
    pub rows: BTreeMap<Kind, Row>,
    pub total: Row,
    /// (message id, what is wrong).
    pub violations: Vec<(String, String)>,
}

const SENT: [&str; 3] = ["sent_to_provider", "delivered", "complained"];
const OTHER_TERMINAL: [&str; 2] = ["failed_internal", "bounced_transient"];

/// Whether the scripted outcome of `kind` is SES's (the SES stand-in's events) rather than
/// Postfix's reply: such a job that Postfix took instead (failover while SES's circuit was open)
/// is delivered, as Postfix accepts its address.
fn scripted_by_ses(kind: Kind) -> bool {
    matches!(kind, Kind::SesBounce | Kind::SesSoftBounce)
}

/// How many copies a job of `kind` may arrive as without a duplicate: a soft-bounced SES send is
/// sent again by the events function.
fn copies_allowed(kind: Kind, via_ses: usize) -> usize {
    if kind == Kind::SesSoftBounce && via_ses > 0 {
        2
    } else {
        1
    }
}

/// Where a job of `kind` must end: `sent`, `bounced` (a permanent bounce or its recipient
/// suppressed), or a dead letter of a category.
pub fn expected_end(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Ok | Kind::Ses | Kind::SesSoftBounce => &["sent"],
        Kind::SesBounce => &["bounced"],
        Kind::UserUnknown => &["bounced"],
        Kind::MailboxFull | Kind::Insufficient | Kind::Busy | Kind::Greylist => {
            &["retries_exhausted"]
        }
        Kind::Policy => &["needs_review"],
        Kind::Invalid => &["invalid_job"],
    }
}

pub fn audit(jobs: &[Job], ev: &Evidence) -> Audit {
    let mut letters: HashMap<&str, Vec<&LetterSeen>> = HashMap::new();
    for l in &ev.letters {
        letters.entry(l.fingerprint.as_str()).or_default().push(l);
    }
    let mut redriven: HashMap<&str, usize> = HashMap::new();
    for r in &ev.redriven {
        *redriven.entry(r.as_str()).or_default() += 1;
    }
    let mut out = Audit::default();
    for job in jobs {
        let row = out.rows.entry(job.kind).or_default();
        row.jobs += 1;
        let mut wrong: Vec<String> = Vec::new();
        let status = ev.statuses.get(&job.message_id);
        let st = status.map(|s| s.status.as_str());
        let mut own: Vec<&LetterSeen> = letters
            .get(job.fingerprint.as_str())
            .cloned()
            .unwrap_or_default();
        own.sort_by(|a, b| a.letter_id.cmp(&b.letter_id));
        own.dedup_by(|a, b| a.letter_id == b.letter_id);
        let via_ses = ev.ses_accepted.get(&job.message_id).copied().unwrap_or(0);
        let via_smtp = ev.deliveries.get(&job.message_id).copied().unwrap_or(0);
        let delivered = via_smtp + via_ses;
        let ambiguous = ev.journal_ambiguous.contains(&job.message_id)
            || status.is_some_and(|s| s.unknown_in_history || s.status == "unknown");
        row.delivered_files += delivered;
        row.via_ses += via_ses;
        if ambiguous {
            row.ambiguous += 1;
        }
        if redriven.contains_key(job.fingerprint.as_str()) {
            row.redriven += 1;
        }
        let sent = st.is_some_and(|s| SENT.contains(&s));
        let terminal_status = match st {
            Some(s) if SENT.contains(&s) => {
                row.sent += 1;
                true
            }
            Some("bounced_permanent") => {
                row.bounced += 1;
                true
            }
            Some("suppressed") => {
                row.suppressed += 1;
                true
            }
            Some("dead_lettered") => true,
            Some(s) if OTHER_TERMINAL.contains(&s) => {
                row.other_terminal += 1;
                true
            }
            _ => false,
        };
        if let Some(first) = own.first() {
            *row.dead_letters.entry(first.category.clone()).or_default() += 1;
        }
        // A home.
        if !terminal_status && own.is_empty() {
            row.lost += 1;
            wrong.push(format!(
                "lost: status {}, no dead letter{}",
                st.unwrap_or("(none)"),
                if redriven.contains_key(job.fingerprint.as_str()) {
                    ", only a raw copy in the redrive DLQ"
                } else {
                    ""
                }
            ));
        }
        // Exactly one.
        if own.len() > 1 {
            wrong.push(format!(
                "{} dead letters: {}",
                own.len(),
                own.iter()
                    .map(|l| l.letter_id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if !own.is_empty() && terminal_status && st != Some("dead_lettered") {
            wrong.push(format!(
                "two terminal states: status {} and dead letter {}",
                st.unwrap_or_default(),
                own[0].category
            ));
        }
        if st == Some("dead_lettered") && own.is_empty() {
            wrong.push("status dead_lettered but no dead letter in the index".into());
        }
        if own.iter().any(|l| !l.has_payload) {
            wrong.push("dead letter without the job's payload".into());
        }
        if let Some(archive) = &ev.archive {
            for letter in &own {
                match archive.get(&letter.letter_id) {
                    None => wrong.push(format!("dead letter {} not archived", letter.letter_id)),
                    Some(print) if *print != job.fingerprint => wrong.push(format!(
                        "dead letter {} archived without the job's payload",
                        letter.letter_id
                    )),
                    Some(_) => {}
                }
            }
        }
        // The end its kind must reach (a home of the wrong kind is a failure too: a
        // deliverable job dead-lettered, a dead address sent to).
        let expected = expected_end(job.kind);
        let reached = match (st, own.first()) {
            (Some(s), _) if SENT.contains(&s) => "sent",
            (Some("bounced_permanent" | "suppressed"), _) => "bounced",
            (_, Some(letter)) => letter.category.as_str(),
            _ => "",
        };
        // The other provider took a job whose scripted failure is this one's.
        let by_the_other = if scripted_by_ses(job.kind) {
            via_smtp
        } else {
            via_ses
        };
        let failed_over = reached == "sent" && !expected.contains(&"sent") && by_the_other > 0;
        if failed_over {
            row.failed_over += 1;
        }
        if !reached.is_empty() && !expected.contains(&reached) && !failed_over {
            wrong.push(format!(
                "ended {reached}; a job of kind {} must end {}",
                job.kind,
                expected.join(" or ")
            ));
        }
        // Sent once (a soft-bounced SES send twice).
        if delivered > copies_allowed(job.kind, via_ses) {
            if ambiguous {
                row.duplicates_after_ambiguous += 1;
            } else {
                wrong.push(format!(
                    "delivered {delivered} times with no ambiguous outcome recorded"
                ));
            }
        }
        // SES accepts a message it then bounces: its copy is not a delivery.
        let bounced_by_ses = job.kind == Kind::SesBounce && reached == "bounced" && via_smtp == 0;
        if delivered >= 1 && !sent && !ambiguous && !bounced_by_ses {
            wrong.push(format!(
                "delivered but recorded as {}{}",
                st.unwrap_or("(no status)"),
                own.first()
                    .map(|l| format!(" / dead letter {}", l.category))
                    .unwrap_or_default()
            ));
        }
        // SES's Delivery event, applied by the events function, ends an SES send `delivered`.
        if matches!(job.kind, Kind::Ses | Kind::SesSoftBounce)
            && via_smtp == 0
            && sent
            && st != Some("delivered")
        {
            wrong.push(format!(
                "SES took it but its status is {}: the Delivery event was not applied",
                st.unwrap_or_default()
            ));
        }
        if sent && delivered == 0 {
            wrong.push(format!(
                "recorded {} but never arrived",
                st.unwrap_or_default()
            ));
        }
        if !wrong.is_empty() {
            row.violations += 1;
            out.violations
                .push((job.message_id.clone(), wrong.join("; ")));
        }
    }
    let mut total = Row::default();
    for row in out.rows.values() {
        total.add(row);
    }
    out.total = total;
    out
}

/// The table printed at the end of a run.
pub fn table(a: &Audit) -> String {
    let mut categories: Vec<String> = a.total.dead_letters.keys().cloned().collect();
    categories.sort();
    let mut s = String::new();
    s.push_str(&format!(
        "{:<24} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6}\n",
        "job kind",
        "jobs",
        "sent",
        "mails",
        "ses",
        "fover",
        "bounce",
        "suppr",
        "dlq",
        "redriv",
        "ambig",
        "dup(a)",
        "lost",
        "VIOL"
    ));
    let line = |name: &str, r: &Row| {
        format!(
            "{:<24} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6}\n",
            name,
            r.jobs,
            r.sent,
            r.delivered_files,
            r.via_ses,
            r.failed_over,
            r.bounced,
            r.suppressed,
            r.dead_lettered(),
            r.redriven,
            r.ambiguous,
            r.duplicates_after_ambiguous,
            r.lost,
            r.violations
        )
    };
    for (kind, row) in &a.rows {
        s.push_str(&line(&kind.to_string(), row));
    }
    s.push_str(&line("all", &a.total));
    if !categories.is_empty() {
        s.push_str("dead letters by category:");
        for c in &categories {
            s.push_str(&format!(" {c}={}", a.total.dead_letters[c]));
        }
        s.push('\n');
    }
    s.push_str(
        "(sent: status sent_to_provider/delivered; mails: SMTP acceptances (Maildir files, one per Postfix queue id) and messages the SES emulator accepted; ses: of those, SES's;\n fover: a scripted Postfix failure that went to SES while the SMTP circuit was open; dlq: jobs with a dead letter;\n redriv: raw copies in the redrive DLQ; ambig: status machine recorded `unknown`; dup(a): delivered more than once after an ambiguous outcome)\n",
    );
    s
}

/// SMTP acceptances per `X-Courier-Message-Id` of the Maildir `files` (name, text), and how
/// many files carry that field: files of one Postfix queue id ([`acceptance_id`]) count once; a
/// file without one counts on its own.
pub fn deliveries(
    files: impl Iterator<Item = (String, String)>,
) -> (HashMap<String, usize>, usize) {
    let mut acceptances: HashMap<String, HashSet<String>> = HashMap::new();
    let mut count = 0;
    for (name, text) in files {
        if let Some(id) = courier_devkit::mime::header(&text, "X-Courier-Message-Id") {
            count += 1;
            let acceptance = acceptance_id(&text).unwrap_or(name);
            acceptances.entry(id).or_default().insert(acceptance);
        }
    }
    let per_job = acceptances
        .into_iter()
        .map(|(id, accepted)| (id, accepted.len()))
        .collect();
    (per_job, count)
}

/// The Postfix queue id a delivered message got when Courier submitted it, from the topmost
/// `Received` field (Postfix's own: `by host (Postfix) with ESMTP id 7671699AA1A`). Postfix
/// keeps it when it delivers its queued message again, so two files with one id are one SMTP
/// acceptance (one submission by Courier), delivered twice by Postfix after a restart between
/// its delivery and its queue manager's record of it (the suite's own restarts do this).
pub fn acceptance_id(message: &str) -> Option<String> {
    let received = courier_devkit::mime::header(message, "Received")?;
    let (_, after) = received.split_once(" id ")?;
    let id = after.split([' ', ';']).next()?.trim();
    (!id.is_empty()).then(|| id.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mix::job;

    fn seen(status: &str) -> StatusSeen {
        StatusSeen {
            status: status.into(),
            unknown_in_history: false,
        }
    }

    #[test]
    fn a_message_postfix_delivers_again_is_one_acceptance_and_two_submissions_are_two() {
        // As Postfix's `virtual` writes them (seed 2963 of chaos-ci: Postfix restarted between
        // its delivery of 7671699AA1A and its queue manager's record of it, then delivered it
        // again: two identical files).
        let mail = |queue_id: &str, job: &str| {
            format!(
                "Return-Path: <chaos@courier.test>\nX-Original-To: r@courier.test\n\
                 Delivered-To: r@courier.test\nReceived: from vm (localhost [127.0.0.1])\n\
                 \tby harness.courier.test (Postfix) with ESMTP id {queue_id}\n\
                 \tfor <r@courier.test>; Sun,  6 Dec 2026 10:50:15 +0000 (UTC)\n\
                 X-Courier-Message-Id: {job}\nSubject: s\n\nbody\n"
            )
        };
        assert_eq!(
            acceptance_id(&mail("7671699AA1A", "j")).as_deref(),
            Some("7671699AA1A")
        );
        let files = [
            ("f1", mail("7671699AA1A", "again")),
            ("f2", mail("7671699AA1A", "again")),
            ("f3", mail("AAA1", "twice")),
            ("f4", mail("BBB2", "twice")),
            // Without a Received field: each file on its own.
            ("f5", "X-Courier-Message-Id: bare\n\nx".to_owned()),
            ("f6", "X-Courier-Message-Id: bare\n\nx".to_owned()),
            // Not a job's mail (a notice): not counted.
            ("f7", "Subject: postmaster notice\n\nx".to_owned()),
        ];
        let (per_job, count) = deliveries(files.into_iter().map(|(n, t)| (n.to_owned(), t)));
        assert_eq!(count, 6);
        assert_eq!(per_job["again"], 1, "Postfix's own redelivery");
        assert_eq!(per_job["twice"], 2, "two submissions by Courier");
        assert_eq!(per_job["bare"], 2);
    }

    #[test]
    fn each_rule_catches_its_violation() {
        // GIVEN six good jobs with different fates
        let jobs: Vec<Job> = (20..26).map(|n| job("t", n)).collect();
        let id = |i: usize| jobs[i].message_id.clone();
        let mut ev = Evidence::default();
        // 0: sent once (fine)
        ev.statuses.insert(id(0), seen("sent_to_provider"));
        ev.deliveries.insert(id(0), 1);
        // 1: sent twice, no ambiguity (violation)
        ev.statuses.insert(id(1), seen("sent_to_provider"));
        ev.deliveries.insert(id(1), 2);
        // 2: sent twice after an ambiguous outcome (counted)
        ev.statuses.insert(id(2), seen("sent_to_provider"));
        ev.deliveries.insert(id(2), 2);
        ev.journal_ambiguous.insert(id(2));
        // 3: nothing at all (lost)
        ev.statuses.insert(id(3), seen("processing"));
        // 4: a deliverable job dead-lettered with its letter (the wrong home)
        ev.statuses.insert(id(4), seen("dead_lettered"));
        ev.letters.push(LetterSeen {
            letter_id: "l4".into(),
            fingerprint: jobs[4].fingerprint.clone(),
            category: "retries_exhausted".into(),
            has_payload: true,
        });
        // 5: sent and dead-lettered (two terminal states)
        ev.statuses.insert(id(5), seen("sent_to_provider"));
        ev.deliveries.insert(id(5), 1);
        ev.letters.push(LetterSeen {
            letter_id: "l5".into(),
            fingerprint: jobs[5].fingerprint.clone(),
            category: "needs_review".into(),
            has_payload: true,
        });
        // WHEN audited
        let a = audit(&jobs, &ev);
        // THEN exactly 1, 3, 4 (a deliverable job dead-lettered) and 5 are violations, 2 is a
        // counted duplicate
        let bad: Vec<&str> = a.violations.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(bad, vec![id(1), id(3), id(4), id(5)]);
        assert!(
            a.violations[2].1.contains("must end sent"),
            "{:?}",
            a.violations[2]
        );
        // AND a greylisted job dead-lettered as retries_exhausted is where it must be
        let greylisted = vec![job("t", 5)];
        let mut ev = Evidence::default();
        ev.statuses
            .insert(greylisted[0].message_id.clone(), seen("dead_lettered"));
        ev.letters.push(LetterSeen {
            letter_id: "g".into(),
            fingerprint: greylisted[0].fingerprint.clone(),
            category: "retries_exhausted".into(),
            has_payload: true,
        });
        assert!(audit(&greylisted, &ev).violations.is_empty());
        // AND once the archive is read, the letter must be in it with the job's own payload
        ev.archive = Some(HashMap::new());
        let missing = audit(&greylisted, &ev);
        assert!(
            missing.violations[0].1.contains("not archived"),
            "{missing:?}"
        );
        ev.archive = Some(HashMap::from([("g".to_owned(), "another".to_owned())]));
        let wrong = audit(&greylisted, &ev);
        assert!(wrong.violations[0].1.contains("without the job's payload"));
        ev.archive = Some(HashMap::from([(
            "g".to_owned(),
            greylisted[0].fingerprint.clone(),
        )]));
        assert!(audit(&greylisted, &ev).violations.is_empty());
        assert!(a.violations[1].1.starts_with("lost"));
        assert_eq!(a.total.lost, 1);
        assert_eq!(a.total.duplicates_after_ambiguous, 1);
        assert_eq!(a.total.ambiguous, 1);
        assert_eq!(a.total.sent, 4);
        assert_eq!(a.total.dead_letters.get("retries_exhausted"), Some(&1));
        assert!(table(&a).contains("all"));
    }

    #[test]
    fn the_ses_emulators_copy_is_evidence_and_only_it_excuses_a_failover() {
        // GIVEN an SES job and two unknown-user jobs, all recorded as sent
        let jobs = vec![job("t", 16), job("t", 0), job("t", 1)];
        let id = |i: usize| jobs[i].message_id.clone();
        let mut ev = Evidence::default();
        ev.statuses.insert(id(0), seen("delivered"));
        for i in 1..3 {
            ev.statuses.insert(id(i), seen("sent_to_provider"));
        }
        // the SES job arrived at SES only; the first unknown-user job went to SES (failover);
        // the second arrived through Postfix, which must have refused it
        ev.ses_accepted.insert(id(0), 1);
        ev.ses_accepted.insert(id(1), 1);
        ev.deliveries.insert(id(2), 1);
        // WHEN audited
        let a = audit(&jobs, &ev);
        // THEN only the unknown-user job that Postfix took is wrong
        let bad: Vec<&str> = a.violations.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(bad, vec![id(2)]);
        assert!(a.violations[0].1.contains("must end bounced"), "{a:?}");
        assert_eq!((a.total.via_ses, a.total.failed_over), (2, 1));
        assert_eq!(a.total.delivered_files, 3);
        // AND an SES job recorded as sent that SES never took did not arrive
        let mut ev = Evidence::default();
        ev.statuses.insert(id(0), seen("sent_to_provider"));
        let a = audit(&jobs[..1], &ev);
        assert!(a.violations[0].1.contains("never arrived"), "{a:?}");
        // AND two SES copies after an ambiguous outcome are a counted duplicate
        ev.statuses.insert(id(0), seen("delivered"));
        ev.ses_accepted.insert(id(0), 2);
        ev.journal_ambiguous.insert(id(0));
        let a = audit(&jobs[..1], &ev);
        assert!(a.violations.is_empty(), "{a:?}");
        assert_eq!(a.total.duplicates_after_ambiguous, 1);
    }

    #[test]
    fn ses_bounces_and_resends_are_judged_by_ses_evidence() {
        // GIVEN SES jobs: delivered, bounced, soft-bounced and resent
        let jobs = vec![job("t", 16), job("t", 18), job("t", 19)];
        let id = |i: usize| jobs[i].message_id.clone();
        let mut ev = Evidence::default();
        ev.statuses.insert(id(0), seen("delivered"));
        ev.ses_accepted.insert(id(0), 1);
        ev.statuses.insert(id(1), seen("bounced_permanent"));
        ev.ses_accepted.insert(id(1), 1);
        ev.statuses.insert(id(2), seen("delivered"));
        ev.ses_accepted.insert(id(2), 2);
        // THEN all are where they must be
        let a = audit(&jobs, &ev);
        assert!(a.violations.is_empty(), "{a:?}");
        assert_eq!(a.total.duplicates_after_ambiguous, 0);
        // AND a third copy of the resent job is a duplicate; a delivery left unapplied, and a
        // bounce job that Postfix took without failover evidence, are wrong
        ev.ses_accepted.insert(id(2), 3);
        ev.statuses.insert(id(0), seen("sent_to_provider"));
        let a = audit(&jobs, &ev);
        let bad: Vec<&str> = a.violations.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(bad, vec![id(0), id(2)], "{a:?}");
        assert!(a.violations[0].1.contains("Delivery event was not applied"));
        assert!(a.violations[1].1.contains("delivered 3 times"));
        // AND a bounce job that SES's open circuit sent through Postfix is a failover
        let mut ev = Evidence::default();
        ev.statuses.insert(id(1), seen("sent_to_provider"));
        ev.deliveries.insert(id(1), 1);
        let a = audit(&jobs[1..2], &ev);
        assert!(a.violations.is_empty(), "{a:?}");
        assert_eq!(a.total.failed_over, 1);
    }

    #[test]
    fn invalid_jobs_are_homed_by_their_letter_and_arrivals_need_a_sent_status() {
        let jobs = vec![job("t", 13), job("t", 20)];
        let mut ev = Evidence::default();
        ev.letters.push(LetterSeen {
            letter_id: "bad".into(),
            fingerprint: jobs[0].fingerprint.clone(),
            category: "invalid_job".into(),
            has_payload: true,
        });
        ev.statuses
            .insert(jobs[1].message_id.clone(), seen("bounced_permanent"));
        ev.deliveries.insert(jobs[1].message_id.clone(), 1);
        let a = audit(&jobs, &ev);
        assert_eq!(a.violations.len(), 1);
        assert!(
            a.violations[0]
                .1
                .contains("delivered but recorded as bounced_permanent")
        );
    }
}
