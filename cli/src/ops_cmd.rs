//! `courierctl suppression ...` and `courierctl status MESSAGE_ID`.

use std::io::Write;

use chrono::Utc;
use clap::Subcommand;
use courier_adapters::aws::{
    Clients, DynamoDbLetterIndex, DynamoDbStatusStore, DynamoDbSuppressionList,
};
use courier_core::letters::LetterFilter;
use courier_core::policy::parse_duration;
use courier_core::ports::{StatusStore, StoreError, SuppressionList};
use courier_core::unsubscribe::is_list_id;
use courierctl::table::{self, Cell};

use crate::settings::{Setting, Settings};

#[derive(Subcommand)]
pub(crate) enum SuppressionCommand {
    /// Every suppressed address with its reason and, for soft entries, expiry; and every
    /// unsubscription from a list (LIST names it; `all` is a suppression of every mail).
    List {
        #[arg(long)]
        json: bool,
        /// Only the addresses unsubscribed from this list.
        #[arg(long)]
        list: Option<String>,
        /// Only unsubscriptions (from any list, or from every mail).
        #[arg(long, conflicts_with = "list")]
        unsubscribed: bool,
    },
    /// Suppress an address (hard, or soft with --expires).
    Add {
        address: String,
        #[arg(long)]
        reason: String,
        /// Soft entry: expires after this long (e.g. 30d).
        #[arg(long)]
        expires: Option<String>,
    },
    /// Take an address off the list (or, with --list, off one list's unsubscriptions).
    Remove {
        address: String,
        /// Remove the address's unsubscription from this list instead.
        #[arg(long)]
        list: Option<String>,
    },
}

/// The setting, or the usage error naming its variable and output (its message says "is not
/// set", which [`finish`] turns into exit 2).
fn setting(settings: &Settings, setting: Setting) -> Result<String, String> {
    settings
        .get(setting)
        .map(str::to_owned)
        .map_err(|e| e.to_string())
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}

fn finish(result: Result<i32, String>) -> i32 {
    result.unwrap_or_else(|e| {
        eprintln!("courierctl: {e}");
        if e.contains("is not set") || e.contains("invalid") {
            2
        } else {
            1
        }
    })
}

fn store_err(e: StoreError) -> String {
    e.to_string()
}

/// Runs `courierctl suppression ...`.
pub(crate) fn suppression(
    command: SuppressionCommand,
    settings: &Settings,
    out: &mut dyn Write,
) -> i32 {
    finish((|| {
        let table = setting(settings, Setting::SuppressionTable)?;
        runtime()?.block_on(async {
            let clients = Clients::new(&courier_adapters::aws::sdk_config().await);
            let list = DynamoDbSuppressionList::new(clients.dynamodb, table);
            match command {
                SuppressionCommand::List {
                    json,
                    list: only_list,
                    unsubscribed,
                } => {
                    if let Some(l) = only_list.as_deref().filter(|l| !is_list_id(l)) {
                        return Err(format!("--list invalid: {l:?} is not a list id"));
                    }
                    let wanted = |e: &courier_core::ports::SuppressionEntry| match &only_list {
                        Some(l) => e.list.as_ref() == Some(l),
                        None => !unsubscribed || e.reason == courier_core::unsubscribe::REASON,
                    };
                    // JSON lines stream page by page; the table is printed once every entry is
                    // in (its columns fit the widest).
                    let mut entries = Vec::new();
                    let mut cursor = None;
                    loop {
                        let (page, next) = list.list(500, cursor).await.map_err(store_err)?;
                        for e in page.into_iter().filter(wanted) {
                            if json {
                                writeln!(out, "{}", serde_json::to_string(&e).unwrap_or_default())
                                    .map_err(|e| e.to_string())?;
                            } else {
                                entries.push(e);
                            }
                        }
                        match next {
                            Some(n) => cursor = Some(n),
                            None => break,
                        }
                    }
                    if !json {
                        for line in render_suppressions(&entries) {
                            writeln!(out, "{line}").map_err(|e| e.to_string())?;
                        }
                    }
                    Ok(0)
                }
                SuppressionCommand::Add {
                    address,
                    reason,
                    expires,
                } => {
                    courier_core::job::parse_mailbox("address", &address)
                        .map_err(|e| format!("invalid address: {e}"))?;
                    let now = Utc::now();
                    let until = expires
                        .map(|d| {
                            parse_duration(&d).map(|s| {
                                now + chrono::Duration::seconds(
                                    i64::try_from(s).unwrap_or(i64::MAX / 2),
                                )
                            })
                        })
                        .transpose()
                        .map_err(|e| format!("--expires invalid: {e}"))?;
                    list.suppress_until(&address, &format!("manual: {reason}"), now, until)
                        .await
                        .map_err(store_err)?;
                    writeln!(out, "suppressed {address}").map_err(|e| e.to_string())?;
                    Ok(0)
                }
                SuppressionCommand::Remove {
                    address,
                    list: None,
                } => {
                    if list.remove(&address).await.map_err(store_err)? {
                        writeln!(out, "removed {address}").map_err(|e| e.to_string())?;
                        Ok(0)
                    } else {
                        eprintln!("courierctl: {address} is not suppressed");
                        Ok(2)
                    }
                }
                SuppressionCommand::Remove {
                    address,
                    list: Some(from),
                } => {
                    if !is_list_id(&from) {
                        return Err(format!("--list invalid: {from:?} is not a list id"));
                    }
                    if list
                        .remove_from_list(&address, &from)
                        .await
                        .map_err(store_err)?
                    {
                        writeln!(out, "removed {address} from list {from}")
                            .map_err(|e| e.to_string())?;
                        Ok(0)
                    } else {
                        eprintln!("courierctl: {address} is not unsubscribed from list {from}");
                        Ok(2)
                    }
                }
            }
        })
    })())
}

/// The `suppression list` table: address, list (`all` for a suppression of every mail), expiry
/// (`never` for a hard entry), reason.
pub(crate) fn render_suppressions(
    entries: &[courier_core::ports::SuppressionEntry],
) -> Vec<String> {
    let mut t = table::new(&["ADDRESS", "LIST", "EXPIRES", "REASON"]);
    for e in entries {
        t.add_row(vec![
            Cell::new(&e.address),
            Cell::new(e.list.as_deref().unwrap_or("all")),
            Cell::new(e.expires_at.map_or("never".to_owned(), |t| t.to_rfc3339())),
            Cell::new(&e.reason),
        ]);
    }
    table::lines(&mut t)
}

/// Runs `courierctl reputation DOMAIN`: the domain's rolling counts and rates, and its pause;
/// `--resume` lifts a pause the reputation guard set (after the cause is fixed).
pub(crate) fn reputation(
    domain: &str,
    window: &str,
    resume: bool,
    json: bool,
    settings: &Settings,
    out: &mut dyn Write,
) -> i32 {
    use courier_core::breaker::{BreakerConfig, BreakerState, Mode};
    use courier_core::ports::{BreakerStore, ReputationStore};
    finish((|| {
        let table = setting(settings, Setting::ControlTable)?;
        let window_secs = parse_duration(window)
            .ok()
            .filter(|s| *s > 0)
            .ok_or_else(|| format!("--window: invalid duration {window:?} (e.g. 24h)"))?;
        let domain = domain.trim().trim_start_matches('@').to_ascii_lowercase();
        if domain.is_empty() || !domain.contains('.') {
            return Err(format!("invalid domain {domain:?} (e.g. example.com)"));
        }
        runtime()?.block_on(async {
            let clients = Clients::new(&courier_adapters::aws::sdk_config().await);
            let reputation = courier_adapters::aws::DynamoDbReputationStore::new(
                clients.dynamodb.clone(),
                table.clone(),
            );
            let pauses = courier_adapters::aws::DynamoDbBreakerStore::new(clients.dynamodb, table);
            let now = Utc::now();
            let since = courier_core::reputation::bucket_of(
                now - chrono::Duration::seconds(i64::try_from(window_secs).unwrap_or(86_400)),
            );
            let counts = reputation.window(&domain, since).await.map_err(store_err)?;
            let key = courier_core::reputation::pause_key(&domain);
            let pause = pauses.load(&key).await.map_err(store_err)?;
            let paused_until = pause
                .as_ref()
                .filter(|p| p.mode == Mode::Open)
                .and_then(|p| p.open_until)
                .filter(|u| *u > now);
            if resume {
                let Some(current) = pause.filter(|_| paused_until.is_some()) else {
                    writeln!(out, "{domain}: not paused; nothing to resume")
                        .map_err(|e| e.to_string())?;
                    return Ok(0);
                };
                let closed = BreakerState {
                    version: current.version + 1,
                    ..BreakerState::new(now, &BreakerConfig::default())
                };
                if !pauses
                    .save(&key, &closed, Some(current.version))
                    .await
                    .map_err(store_err)?
                {
                    return Err("the pause changed while resuming; run the command again".into());
                }
                writeln!(
                    out,
                    "{domain}: resumed; SES sends from it go ahead within seconds"
                )
                .map_err(|e| e.to_string())?;
            }
            let paused_until = if resume { None } else { paused_until };
            let lines = render_reputation(&domain, window, &counts, paused_until, json);
            for line in lines {
                writeln!(out, "{line}").map_err(|e| e.to_string())?;
            }
            Ok(0)
        })
    })())
}

/// The text (or JSON line) of `courierctl reputation`.
pub(crate) fn render_reputation(
    domain: &str,
    window: &str,
    counts: &courier_core::reputation::ReputationCounts,
    paused_until: Option<chrono::DateTime<Utc>>,
    json: bool,
) -> Vec<String> {
    let (bounce, complaint) = counts.rates();
    if json {
        return vec![
            serde_json::json!({
                "domain": domain, "window": window, "counts": counts,
                "bounce_rate": bounce, "complaint_rate": complaint,
                "paused_until": paused_until,
            })
            .to_string(),
        ];
    }
    vec![
        format!(
            "{domain} over {window}: {} sent, {} delivered, {} bounced, {} complained",
            counts.sent, counts.delivered, counts.bounced, counts.complained
        ),
        format!(
            "  bounce rate {:.2}% (SES reviews at 5%), complaint rate {:.3}% (SES reviews at 0.1%)",
            bounce * 100.0,
            complaint * 100.0
        ),
        match paused_until {
            Some(until) => format!(
                "  PAUSED until {} by the reputation guard: SES sends from this domain wait or fail over",
                until.to_rfc3339()
            ),
            None => "  not paused".to_owned(),
        },
    ]
}

/// Runs `courierctl status MESSAGE_ID`: the job's record and its dead letters (with their attempt
/// history and audit trail), oldest first.
pub(crate) fn status(
    message_id: &str,
    json: bool,
    settings: &Settings,
    out: &mut dyn Write,
) -> i32 {
    finish((|| {
        let status_table = setting(settings, Setting::StatusTable)?;
        let index_table = setting(settings, Setting::LetterIndexTable)?;
        runtime()?.block_on(async {
            let clients = Clients::new(&courier_adapters::aws::sdk_config().await);
            let store = DynamoDbStatusStore::new(
                clients.dynamodb.clone(),
                status_table,
                courier_core::status::RETENTION,
            );
            let index = DynamoDbLetterIndex::new(clients.dynamodb, index_table);
            let record = store.get(message_id).await.map_err(store_err)?;
            let filter = LetterFilter {
                message_id: Some(message_id.to_owned()),
                ..LetterFilter::default()
            };
            let mut letters = crate::workbench::select(&index, &filter)
                .await
                .map_err(|e| e.to_string())?;
            letters.sort_by_key(|l| l.dead_lettered_at);
            if record.is_none() && letters.is_empty() {
                eprintln!("courierctl: no job {message_id:?}");
                return Ok(2);
            }
            let w = |out: &mut dyn Write, line: String| {
                writeln!(out, "{line}").map_err(|e| e.to_string())
            };
            if json {
                return w(
                    out,
                    serde_json::json!({"record": record, "letters": letters}).to_string(),
                )
                .map(|()| 0);
            }
            for line in render_status(message_id, record.as_ref(), &letters) {
                w(out, line)?;
            }
            Ok(0)
        })
    })())
}

/// The text of `courierctl status`: the record, its timeline (every transition, oldest first,
/// who wrote it and why), then its dead letters with their attempts and audit trail.
pub(crate) fn render_status(
    message_id: &str,
    record: Option<&courier_core::ports::JobRecord>,
    letters: &[courier_core::letters::IndexedLetter],
) -> Vec<String> {
    let mut lines = Vec::new();
    match record {
        Some(r) => {
            lines.push(format!(
                "{message_id}: {} (generation {}, updated {}{}{})",
                r.status,
                r.attempt,
                r.updated_at.to_rfc3339(),
                r.provider
                    .as_deref()
                    .map(|p| format!(", provider {p}"))
                    .unwrap_or_default(),
                r.provider_message_id
                    .as_deref()
                    .map(|p| format!(", provider id {p}"))
                    .unwrap_or_default(),
            ));
            if let Some(trace) = &r.trace_id {
                lines.push(format!("  trace {trace}"));
            }
            if let Some(due) = r.copy_due {
                lines.push(format!("  its copy is due back at {}", due.to_rfc3339()));
            }
            if let Some(at) = r.swept_at {
                let why = if r.copy_due.is_some() {
                    "its copy did not come back (docs/runbook.md, SweptCopyOverdueAlarm)"
                } else {
                    "no outcome event arrived"
                };
                lines.push(format!(
                    "  flagged by the sweeper at {}: {why}",
                    at.to_rfc3339()
                ));
            }
            if !r.history.is_empty() {
                lines.push("  timeline:".into());
            }
            // One row per entry: when, status, generation, who and why.
            let mut timeline = table::new(&[]);
            let mut previous: Option<&courier_core::ports::HistoryEntry> = None;
            for h in &r.history {
                // An entry that keeps the status and generation of the one before is an event
                // without a transition (a delivery delay, an undetermined bounce, a sweeper flag).
                let note = previous.is_some_and(|p| p.status == h.status && p.attempt == h.attempt);
                timeline.add_row(vec![
                    h.at.to_rfc3339(),
                    h.status.as_str().to_owned(),
                    format!("gen {}", h.attempt),
                    format!(
                        "by {}{}{}",
                        h.by,
                        h.detail
                            .as_deref()
                            .map(|d| format!(": {d}"))
                            .unwrap_or_default(),
                        if note { " (no transition)" } else { "" }
                    ),
                ]);
                previous = Some(h);
            }
            if !r.history.is_empty() {
                lines.extend(
                    table::lines(&mut timeline)
                        .into_iter()
                        .map(|l| format!("    {l}")),
                );
            }
            lines.extend(render_recipients(r));
        }
        None => lines.push(format!("{message_id}: no status record (never claimed)")),
    }
    for l in letters {
        lines.push(format!(
            "  {} dead-lettered ({}, {}): {} [{}]",
            l.dead_lettered_at.to_rfc3339(),
            l.record.category.as_str(),
            l.record.class,
            l.record.reason,
            l.state.as_str()
        ));
        for a in &l.record.history {
            lines.push(format!(
                "    {} attempt via {}: {} {} {}",
                a.at.to_rfc3339(),
                a.provider.as_deref().unwrap_or("-"),
                a.class,
                a.code.as_deref().unwrap_or(""),
                a.delay_secs
                    .map(|d| format!("-> retry in {d}s"))
                    .unwrap_or_default()
            ));
        }
        for entry in &l.audit {
            lines.push(format!("    {entry}"));
        }
    }
    lines
}

/// The record's recipients: one row each (address, role, outcome), then its timeline, oldest
/// first. Nothing for a record without a list (before this generation's send recorded it: a
/// later generation's claim removes the earlier send's).
fn render_recipients(r: &courier_core::ports::JobRecord) -> Vec<String> {
    if r.recipients.is_empty() {
        return Vec::new();
    }
    let mut rows = table::new(&["RECIPIENT", "ROLE", "OUTCOME", "TIMELINE"]);
    for (i, rcpt) in r.recipients.iter().enumerate() {
        let timeline: Vec<String> = r
            .recipient_log
            .iter()
            .filter(|e| e.recipient == i)
            .map(|e| {
                format!(
                    "{} {}{}",
                    e.at.to_rfc3339(),
                    e.status,
                    e.detail
                        .as_deref()
                        .map(|d| format!(" ({d})"))
                        .unwrap_or_default()
                )
            })
            .collect();
        rows.add_row(vec![
            rcpt.address.clone(),
            rcpt.role.as_str().to_owned(),
            rcpt.status.as_str().to_owned(),
            timeline.join("; "),
        ]);
    }
    let mut lines = vec![format!("  recipients ({}):", r.recipients.len())];
    lines.extend(
        table::lines(&mut rows)
            .into_iter()
            .map(|l| format!("    {l}")),
    );
    lines
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};
    use courier_core::ports::{HistoryEntry, JobRecord};
    use courier_core::status::Status;

    use super::render_status;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    #[test]
    fn reputation_shows_rates_against_the_review_levels_and_the_pause() {
        let counts = courier_core::reputation::ReputationCounts {
            sent: 1000,
            delivered: 955,
            bounced: 45,
            complained: 1,
        };
        let lines = super::render_reputation("example.com", "24h", &counts, Some(t(3600)), false);
        assert_eq!(
            lines[0],
            "example.com over 24h: 1000 sent, 955 delivered, 45 bounced, 1 complained"
        );
        assert!(lines[1].contains("bounce rate 4.50%"), "{}", lines[1]);
        assert!(lines[1].contains("complaint rate 0.100%"), "{}", lines[1]);
        assert!(lines[2].contains("PAUSED until"));
        let json = super::render_reputation("example.com", "24h", &counts, None, true);
        let v: serde_json::Value = serde_json::from_str(&json[0]).unwrap();
        assert_eq!(v["counts"]["bounced"], 45);
        assert!(v["paused_until"].is_null());
    }

    #[test]
    fn the_suppression_list_is_a_table_of_address_list_expiry_and_reason() {
        use courier_core::ports::SuppressionEntry;
        let entries = [
            SuppressionEntry {
                address: "ann@example.com".into(),
                list: Some("news".into()),
                reason: "unsubscribed".into(),
                suppressed_at: t(0),
                expires_at: None,
            },
            SuppressionEntry {
                address: "bounced@example.com".into(),
                list: None,
                reason: "bounce: 550 5.1.1".into(),
                suppressed_at: t(0),
                expires_at: None,
            },
            SuppressionEntry {
                address: "a@example.com".into(),
                list: None,
                reason: "soft: mailbox full".into(),
                suppressed_at: t(0),
                expires_at: Some(t(3600)),
            },
        ];
        assert_eq!(
            super::render_suppressions(&entries),
            [
                "ADDRESS              LIST  EXPIRES                    REASON",
                "ann@example.com      news  never                      unsubscribed",
                "bounced@example.com  all   never                      bounce: 550 5.1.1",
                "a@example.com        all   2027-01-15T09:00:00+00:00  soft: mailbox full",
            ]
        );
        assert_eq!(
            super::render_suppressions(&[]),
            ["ADDRESS  LIST  EXPIRES  REASON"]
        );
    }

    #[test]
    fn the_timeline_lists_every_transition_with_who_and_why() {
        let mut r = JobRecord::new("m1", Status::Delivered, 1, t(30));
        r.provider = Some("ses".into());
        let entry = |at, status, attempt, by: &str, detail: Option<&str>| HistoryEntry {
            at: t(at),
            status,
            attempt,
            by: by.into(),
            detail: detail.map(str::to_owned),
        };
        r.history = vec![
            entry(0, Status::Processing, 0, "send", Some("claimed by req-1/a")),
            entry(
                1,
                Status::Deferred,
                1,
                "req-1/a",
                Some("throttled (smtp.basic.421); retry in 8 s"),
            ),
            entry(10, Status::Processing, 1, "send", None),
            entry(
                11,
                Status::SentToProvider,
                1,
                "req-2/b",
                Some("accepted by ses"),
            ),
            entry(
                20,
                Status::SentToProvider,
                1,
                "events",
                Some(
                    "DeliveryDelay/MailboxFull event at 2026-11-30T10:00:20Z: delivery delayed, SES keeps trying",
                ),
            ),
            entry(
                30,
                Status::Delivered,
                1,
                "events",
                Some("delivered (Delivery event)"),
            ),
        ];
        let lines = render_status("m1", Some(&r), &[]);
        assert!(lines[0].starts_with("m1: delivered (generation 1"));
        assert_eq!(lines[1], "  timeline:");
        assert_eq!(lines.len(), 8);
        // The delay is in the timeline, marked as changing nothing; transitions are not marked.
        assert!(
            lines[6].contains("sent_to_provider")
                && lines[6].contains("delivery delayed")
                && lines[6].ends_with("(no transition)"),
            "{}",
            lines[6]
        );
        assert!(!lines[5].contains("(no transition)"), "{}", lines[5]);
        assert!(
            lines[3].contains("deferred") && lines[3].contains("retry in 8 s"),
            "{}",
            lines[3]
        );
        assert!(lines[7].contains("by events: delivered (Delivery event)"));
        // the timeline's columns are aligned: every generation starts where the first does
        let gen_at = lines[2].find("gen ").unwrap();
        for line in &lines[2..8] {
            assert_eq!(line.find("gen "), Some(gen_at), "{line}");
            assert!(line.starts_with("    2027-"), "{line}");
        }
        assert!(
            lines[2].contains("processing        gen 0  by send: claimed by req-1/a"),
            "{}",
            lines[2]
        );
        assert_eq!(
            render_status("m2", None, &[]),
            vec!["m2: no status record (never claimed)".to_owned()]
        );
    }

    #[test]
    fn each_recipient_is_a_row_with_its_outcome_and_timeline() {
        use courier_core::recipients::{Recipient, RecipientEntry, RecipientStatus, Role};
        let mut r = JobRecord::new("m3", Status::PartiallyDelivered, 0, t(40));
        let rcpt = |address: &str, role, status| Recipient {
            address: address.into(),
            role,
            status,
        };
        r.recipients = vec![
            rcpt("ann@example.org", Role::To, RecipientStatus::Delivered),
            rcpt(
                "bob@example.org",
                Role::Cc,
                RecipientStatus::BouncedPermanent,
            ),
            rcpt("cy@example.org", Role::Bcc, RecipientStatus::Suppressed),
        ];
        let entry = |recipient, at, status, detail: &str| RecipientEntry {
            recipient,
            status,
            at: t(at),
            detail: Some(detail.into()),
        };
        r.recipient_log = vec![
            entry(0, 10, RecipientStatus::Sent, "accepted by ses"),
            entry(1, 10, RecipientStatus::Sent, "accepted by ses"),
            entry(2, 10, RecipientStatus::Suppressed, "accepted by ses"),
            entry(
                0,
                20,
                RecipientStatus::Delivered,
                "delivered (Delivery event)",
            ),
            entry(
                1,
                30,
                RecipientStatus::BouncedPermanent,
                "Permanent/General bounce",
            ),
        ];
        let lines = render_status("m3", Some(&r), &[]);
        assert!(lines[0].starts_with("m3: partially_delivered"), "{lines:?}");
        let at = lines.iter().position(|l| l == "  recipients (3):").unwrap();
        let rows = &lines[at + 1..];
        assert!(
            rows[0]
                .split_whitespace()
                .eq(["RECIPIENT", "ROLE", "OUTCOME", "TIMELINE"])
        );
        let fields = |row: &str| {
            row.split_whitespace()
                .take(3)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        assert_eq!(fields(&rows[1]), ["ann@example.org", "to", "delivered"]);
        assert_eq!(
            fields(&rows[2]),
            ["bob@example.org", "cc", "bounced_permanent"]
        );
        assert_eq!(fields(&rows[3]), ["cy@example.org", "bcc", "suppressed"]);
        // Each recipient's timeline, oldest first, its own entries only.
        assert!(rows[1].contains("sent (accepted by ses); "), "{}", rows[1]);
        assert!(
            rows[1].ends_with("delivered (delivered (Delivery event))"),
            "{}",
            rows[1]
        );
        assert!(!rows[1].contains("bounce"), "{}", rows[1]);
        assert!(
            rows[2].ends_with("bounced_permanent (Permanent/General bounce)"),
            "{}",
            rows[2]
        );
        // A record without recipients (written before they were kept) has no such section.
        let old = JobRecord::new("m4", Status::Delivered, 0, t(1));
        assert!(
            !render_status("m4", Some(&old), &[])
                .iter()
                .any(|l| l.contains("recipients"))
        );
    }

    #[test]
    fn a_waiting_job_shows_when_its_copy_is_due_and_why_the_sweeper_flagged_it() {
        let mut r = JobRecord::new("m5", Status::Deferred, 2, t(1));
        r.copy_due = Some(t(60));
        let lines = render_status("m5", Some(&r), &[]);
        assert!(
            lines.contains(&format!("  its copy is due back at {}", t(60).to_rfc3339())),
            "{lines:?}"
        );
        r.swept_at = Some(t(4000));
        let lines = render_status("m5", Some(&r), &[]);
        assert!(
            lines
                .iter()
                .any(|l| l.contains("flagged by the sweeper") && l.contains("did not come back")),
            "{lines:?}"
        );
        // A sent job flagged for its missing outcome says so.
        let mut sent = JobRecord::new("m6", Status::SentToProvider, 0, t(1));
        sent.swept_at = Some(t(4000));
        assert!(
            render_status("m6", Some(&sent), &[])
                .iter()
                .any(|l| l.ends_with("no outcome event arrived")),
        );
    }
}
