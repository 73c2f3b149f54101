//! `courierctl suppression ...` and `courierctl status MESSAGE_ID`.

use std::io::Write;

use chrono::Utc;
use clap::Subcommand;
use courier::aws::{Clients, DynamoDbLetterIndex, DynamoDbStatusStore, DynamoDbSuppressionList};
use courier::letters::LetterFilter;
use courier::policy::parse_duration;
use courier::ports::{StatusStore, StoreError, SuppressionList};

#[derive(Subcommand)]
pub(crate) enum SuppressionCommand {
    /// Every suppressed address with its reason and, for soft entries, expiry.
    List {
        #[arg(long)]
        json: bool,
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
    /// Take an address off the list.
    Remove { address: String },
}

fn env(name: &'static str) -> Result<String, String> {
    std::env::var(name)
        .map_err(|_| format!("{name} is not set (`courierctl provision` prints the settings)"))
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
pub(crate) fn suppression(command: SuppressionCommand, out: &mut dyn Write) -> i32 {
    finish((|| {
        let table = env("COURIER_SUPPRESSION_TABLE")?;
        runtime()?.block_on(async {
            let clients = Clients::new(&courier::aws::sdk_config().await);
            let list = DynamoDbSuppressionList::new(clients.dynamodb, table);
            match command {
                SuppressionCommand::List { json } => {
                    let mut cursor = None;
                    loop {
                        let (page, next) = list.list(500, cursor).await.map_err(store_err)?;
                        for e in page {
                            if json {
                                writeln!(out, "{}", serde_json::to_string(&e).unwrap_or_default())
                                    .map_err(|e| e.to_string())?;
                            } else {
                                let expiry =
                                    e.expires_at.map_or("never".to_owned(), |t| t.to_rfc3339());
                                writeln!(
                                    out,
                                    "{:<40} expires {expiry:<26} {}",
                                    e.address, e.reason
                                )
                                .map_err(|e| e.to_string())?;
                            }
                        }
                        match next {
                            Some(n) => cursor = Some(n),
                            None => return Ok(0),
                        }
                    }
                }
                SuppressionCommand::Add {
                    address,
                    reason,
                    expires,
                } => {
                    courier::job::parse_mailbox("address", &address)
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
                SuppressionCommand::Remove { address } => {
                    if list.remove(&address).await.map_err(store_err)? {
                        writeln!(out, "removed {address}").map_err(|e| e.to_string())?;
                        Ok(0)
                    } else {
                        eprintln!("courierctl: {address} is not suppressed");
                        Ok(2)
                    }
                }
            }
        })
    })())
}

/// Runs `courierctl status MESSAGE_ID`: the job's record and its dead letters (with their attempt
/// history and audit trail), oldest first.
pub(crate) fn status(message_id: &str, json: bool, out: &mut dyn Write) -> i32 {
    finish((|| {
        let status_table = env("COURIER_STATUS_TABLE")?;
        let index_table = env("COURIER_LETTER_INDEX_TABLE")?;
        runtime()?.block_on(async {
            let clients = Clients::new(&courier::aws::sdk_config().await);
            let store = DynamoDbStatusStore::new(
                clients.dynamodb.clone(),
                status_table,
                courier_send::wiring::STATUS_RETENTION,
            );
            let index = DynamoDbLetterIndex::new(clients.dynamodb, index_table);
            let record = store.get(message_id).await.map_err(store_err)?;
            let filter = LetterFilter {
                message_id: Some(message_id.to_owned()),
                ..LetterFilter::default()
            };
            let mut letters = courier::workbench::select(&index, &filter)
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
            match &record {
                Some(r) => w(
                    out,
                    format!(
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
                    ),
                )?,
                None => w(
                    out,
                    format!("{message_id}: no status record (never claimed)"),
                )?,
            }
            for l in &letters {
                w(
                    out,
                    format!(
                        "  {} dead-lettered ({}, {}): {} [{}]",
                        l.dead_lettered_at.to_rfc3339(),
                        l.record.category.as_str(),
                        l.record.class,
                        l.record.reason,
                        l.state.as_str()
                    ),
                )?;
                for a in &l.record.history {
                    w(
                        out,
                        format!(
                            "    {} attempt via {}: {} {} {}",
                            a.at.to_rfc3339(),
                            a.provider.as_deref().unwrap_or("-"),
                            a.class,
                            a.code.as_deref().unwrap_or(""),
                            a.delay_secs
                                .map(|d| format!("-> retry in {d}s"))
                                .unwrap_or_default()
                        ),
                    )?;
                }
                for entry in &l.audit {
                    w(out, format!("    {entry}"))?;
                }
            }
            Ok(0)
        })
    })())
}
