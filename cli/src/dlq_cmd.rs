//! Argument parsing and wiring for `courierctl dlq`.

use std::io::Write;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use courier_adapters::aws::{
    Clients, DynamoDbLetterIndex, DynamoDbPoisonList, DynamoDbStatusStore, S3PayloadStore,
    SecretsManagerSecretStore, SqsRetryScheduler,
};
use courier_adapters::seal_secret::{SealingScheduler, SecretSealKeys};
use courier_core::classify::ErrorClass;
use courier_core::letters::{LetterFilter, LetterState};
use courier_core::policy::{DeadLetterCategory, parse_duration};
use courier_core::ports::{LetterIndex, PayloadStore, PoisonList};
use courierctl::progress::{Bar, Progress};

use crate::settings::{Missing, Setting, Settings};
use crate::workbench::{self as dlq, DlqError};
use courierctl::requeue::PutBack;

#[derive(Subcommand)]
pub(crate) enum DlqCommand {
    /// Counts of dead letters (live ones unless --state) by category, class, campaign and
    /// provider, with bars. Counts every matching letter, a page at a time.
    Stats {
        #[command(flatten)]
        filter: FilterArgs,
        #[arg(long)]
        json: bool,
    },
    /// List dead letters (same filters as `search`): newest first when filtered by --campaign or
    /// --category (an index query), otherwise in the index's scan order.
    #[command(alias = "search")]
    List {
        #[command(flatten)]
        filter: FilterArgs,
        /// Letters per page.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Continue after this cursor (printed at the end of a page).
        #[arg(long)]
        cursor: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// One letter in full: record, attempt history, audit trail.
    Show { id: String },
    /// Put letters' jobs back, on the retry queue (the send queue without one), with a fresh
    /// attempt budget.
    ///
    /// Dry run unless --confirm; --reason is then required. Select by ids or by filters. Live
    /// letters by default; `--state archived` replays letters the archiver has moved to S3 (from
    /// their index entries, with their attachments as the archiver retained them).
    /// Example: courierctl dlq replay --category needs-review --campaign spring --confirm --reason "template fixed"
    Replay {
        /// Letter ids (as `dlq list` prints them); or select with filters instead.
        ids: Vec<String>,
        #[command(flatten)]
        filter: FilterArgs,
        #[command(flatten)]
        act: ActArgs,
        /// Letters per second.
        #[arg(long, default_value_t = 10.0)]
        rate: f64,
    },
    /// Mark letters discarded (kept in the index, dropped from the queue by the archiver).
    Discard {
        /// Letter ids (as `dlq list` prints them); or select with filters instead.
        ids: Vec<String>,
        #[command(flatten)]
        filter: FilterArgs,
        #[command(flatten)]
        act: ActArgs,
        /// Also blocklist each payload's fingerprint: identical jobs then go straight to poison.
        #[arg(long)]
        blocklist: bool,
    },
    /// Move EVERY message of the redrive DLQ back to the queue it came from, send or retry (SQS
    /// StartMessageMoveTask).
    ///
    /// No filter, no index, no per-letter audit: use `replay` unless you have fixed the root
    /// cause of all of them.
    RedriveAll {
        /// ARN of the redrive dead-letter queue.
        #[arg(long)]
        source_arn: String,
        /// Where to move them (default: the queues they were redriven from).
        #[arg(long)]
        destination_arn: Option<String>,
        /// Messages per second (SQS allows at most 500).
        #[arg(long, default_value_t = 50)]
        rate: i32,
        #[arg(long)]
        i_understand_this_moves_everything: bool,
    },
}

#[derive(Args, Default)]
pub(crate) struct FilterArgs {
    /// retries-exhausted | invalid-job | poison | needs-review | redriven
    #[arg(long)]
    category: Option<String>,
    /// A campaign id, exactly
    #[arg(long)]
    campaign: Option<String>,
    /// ses | smtp
    #[arg(long)]
    provider: Option<String>,
    /// An error class, e.g. content_rejected
    #[arg(long)]
    class: Option<String>,
    /// live (the default of stats, replay and discard) | archiving | archived | replaying |
    /// replayed | discarded | all. `replay --state replaying` finishes replays that stopped;
    /// `replay --state archived` replays archived letters.
    #[arg(long)]
    state: Option<String>,
    /// RFC 3339 time, or an age such as 2h or 3d (meaning: that long ago)
    #[arg(long)]
    since: Option<String>,
    /// Like --since: letters dead-lettered before this
    #[arg(long)]
    until: Option<String>,
    /// Case-insensitive text in the reason, raw code or raw text
    #[arg(long)]
    text: Option<String>,
}

#[derive(Args)]
pub(crate) struct ActArgs {
    /// Really do it (otherwise: print what would be done).
    #[arg(long)]
    confirm: bool,
    /// Why (recorded on every letter); required with --confirm.
    #[arg(long)]
    reason: Option<String>,
    /// Who (recorded); defaults to $USER.
    #[arg(long, env = "USER", hide_env_values = true)]
    operator: Option<String>,
}

fn time_arg(name: &str, v: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, DlqError> {
    if let Ok(t) = DateTime::parse_from_rfc3339(v) {
        return Ok(t.with_timezone(&Utc));
    }
    let secs = parse_duration(v)
        .map_err(|e| DlqError::Usage(format!("--{name}: {e} (or an RFC 3339 time)")))?;
    Ok(now - chrono::Duration::seconds(i64::try_from(secs).unwrap_or(i64::MAX / 2)))
}

impl FilterArgs {
    pub(crate) fn to_filter(
        &self,
        now: DateTime<Utc>,
        default_state: Option<LetterState>,
    ) -> Result<LetterFilter, DlqError> {
        let category = match &self.category {
            None => None,
            Some(c) => Some(DeadLetterCategory::parse(&c.replace('-', "_")).ok_or_else(|| {
                DlqError::Usage(format!("--category {c:?}: use retries-exhausted, invalid-job, poison, needs-review or redriven"))
            })?),
        };
        let class = match &self.class {
            None => None,
            Some(c) => Some(ErrorClass::parse(&c.replace('-', "_")).ok_or_else(|| {
                DlqError::Usage(format!(
                    "--class {c:?}: use one of {}",
                    ErrorClass::ALL.map(ErrorClass::as_str).join(", ")
                ))
            })?),
        };
        let state = match self.state.as_deref() {
            None => default_state,
            Some("all") => None,
            Some(s) => Some(LetterState::parse(s).ok_or_else(|| {
                DlqError::Usage(format!(
                    "--state {s:?}: use live, archiving, archived, replaying, replayed, discarded or all"
                ))
            })?),
        };
        Ok(LetterFilter {
            category,
            campaign: self.campaign.clone(),
            provider: self.provider.clone(),
            class,
            state,
            since: self
                .since
                .as_deref()
                .map(|v| time_arg("since", v, now))
                .transpose()?,
            until: self
                .until
                .as_deref()
                .map(|v| time_arg("until", v, now))
                .transpose()?,
            text: self.text.clone(),
            message_id: None,
        })
    }

    fn is_empty(&self) -> bool {
        self.category.is_none()
            && self.campaign.is_none()
            && self.provider.is_none()
            && self.class.is_none()
            && self.since.is_none()
            && self.until.is_none()
            && self.text.is_none()
            && self.state.is_none()
    }
}

/// The setting, or the usage error naming its variable and output.
fn setting(settings: &Settings, setting: Setting) -> Result<String, DlqError> {
    settings
        .get(setting)
        .map(str::to_owned)
        .map_err(|e: Missing| DlqError::Usage(e.to_string()))
}

/// The retry lane (else the send queue, [`Settings::copies_queue`]), through the stack's seal:
/// replays and put-back copies are later generations, which the send function would otherwise
/// take as first copies of jobs it has seen (and drop).
async fn sealing_scheduler(
    clients: &Clients,
    settings: &Settings,
    payloads: Option<&Arc<dyn PayloadStore>>,
) -> Result<SealingScheduler, DlqError> {
    let keys = Arc::new(SecretSealKeys::from_secret(
        &setting(settings, Setting::EnvelopeKeySecret)?,
        Arc::new(SecretsManagerSecretStore::new(clients.secrets.clone())),
    ));
    keys.keys().await?;
    let mut scheduler = SqsRetryScheduler::new(
        clients.sqs.clone(),
        clients.sfn.clone(),
        settings
            .copies_queue()
            .map_err(|e| DlqError::Usage(e.to_string()))?,
        "",
    );
    if let Some(payloads) = payloads {
        // A copy too large for SQS goes through the claim check, as the functions' do.
        scheduler = scheduler.with_payloads(Arc::clone(payloads));
    }
    Ok(SealingScheduler::new(Arc::new(scheduler), keys))
}

/// The payload bucket, when the settings name one (`COURIER_PAYLOAD_BUCKET`, `PayloadBucketName`):
/// where kept bodies over 300 KiB are read and copies too large for SQS stored.
fn payload_store(clients: &Clients, settings: &Settings) -> Option<Arc<dyn PayloadStore>> {
    let bucket = settings.get(Setting::PayloadBucket).ok()?;
    Some(Arc::new(S3PayloadStore::new(clients.s3.clone(), bucket)))
}

/// The jobs `courierctl requeue` works on.
pub(crate) enum Jobs {
    Ids(Vec<String>),
    /// The jobs the sweeper flagged as overdue, oldest flag first, at most `limit`.
    Overdue {
        limit: usize,
    },
}

/// Runs `courierctl requeue` ([`courierctl::requeue`]); returns the exit code.
pub(crate) fn requeue(jobs: Jobs, act: &ActArgs, settings: &Settings, out: &mut dyn Write) -> i32 {
    let run = async {
        let clients = Clients::new(&courier_adapters::aws::sdk_config().await);
        let status = DynamoDbStatusStore::new(
            clients.dynamodb.clone(),
            setting(settings, Setting::StatusTable)?,
            courier_core::status::RETENTION,
        );
        let message_ids = match jobs {
            Jobs::Ids(ids) => ids,
            Jobs::Overdue { limit } => {
                courierctl::requeue::overdue(&status, limit, Utc::now()).await?
            }
        };
        let who = confirmed(
            act,
            "put back the copies of",
            (message_ids.len(), "jobs"),
            out,
        )?;
        // Optional: only a body kept over 300 KiB needs it (such a job fails without it).
        let payloads = payload_store(&clients, settings);
        let scheduler = match who {
            Some(_) => Some(sealing_scheduler(&clients, settings, payloads.as_ref()).await?),
            None => None,
        };
        let put_back =
            who.as_ref()
                .zip(scheduler.as_ref())
                .map(|((operator, reason), scheduler)| PutBack {
                    scheduler,
                    operator,
                    reason,
                });
        let outcome = courierctl::requeue::requeue(
            &message_ids,
            &status,
            payloads.as_deref(),
            put_back.as_ref(),
            Utc::now(),
        )
        .await;
        let verb = match put_back {
            Some(_) => "put back the copies of",
            None => "would put back the copies of",
        };
        writeln!(
            out,
            "{verb} {} jobs; skipped {}; failed {}",
            outcome.done.len(),
            outcome.skipped.len(),
            outcome.failed.len()
        )?;
        for (id, why) in &outcome.skipped {
            writeln!(out, "  skipped {id}: {why}")?;
        }
        for (id, error) in &outcome.failed {
            writeln!(out, "  failed {id}: {error} (trying again is safe)")?;
        }
        Ok::<i32, DlqError>(i32::from(!outcome.failed.is_empty()))
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("courierctl requeue: {e}");
            return 1;
        }
    };
    match runtime.block_on(run) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("courierctl requeue: {e}");
            e.exit_code()
        }
    }
}

/// Runs a dlq command; returns the exit code.
pub(crate) fn run(command: DlqCommand, settings: &Settings, out: &mut dyn Write) -> i32 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("courierctl dlq: {e}");
            return 1;
        }
    };
    match runtime.block_on(run_async(command, settings, out)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("courierctl dlq: {e}");
            e.exit_code()
        }
    }
}

async fn run_async(
    command: DlqCommand,
    settings: &Settings,
    out: &mut dyn Write,
) -> Result<i32, DlqError> {
    let now = Utc::now();
    let index_table = setting(settings, Setting::LetterIndexTable)?;
    let sdk = courier_adapters::aws::sdk_config().await;
    let clients = Clients::new(&sdk);
    let index = DynamoDbLetterIndex::new(clients.dynamodb.clone(), index_table);
    match command {
        DlqCommand::Stats { filter, json } => {
            let filter = filter.to_filter(now, Some(LetterState::Live))?;
            let counted = dlq::count(&index, &filter, &mut *progress_out()).await?;
            dlq::stats(&counted, json, out)?;
        }
        DlqCommand::List {
            filter,
            limit,
            cursor,
            json,
        } => {
            let (page, next) = index
                .search(&filter.to_filter(now, None)?, limit.max(1), cursor)
                .await?;
            dlq::table(&page, now, json, out)?;
            if let Some(next) = next {
                eprintln!("more: --cursor {next}");
            }
        }
        DlqCommand::Show { id } => {
            let letter = dlq::by_ids(&index, std::slice::from_ref(&id)).await?;
            serde_json::to_writer_pretty(&mut *out, &letter[0]).map_err(std::io::Error::other)?;
            writeln!(out)?;
        }
        DlqCommand::Replay {
            ids,
            filter,
            act,
            rate,
        } => {
            let letters = selection(&index, &ids, &filter, now).await?;
            let Some((operator, reason)) =
                confirmed(&act, "replay", (letters.len(), "letters"), out)?
            else {
                dlq::table(&letters, now, false, out)?;
                return Ok(0);
            };
            let status = DynamoDbStatusStore::new(
                clients.dynamodb.clone(),
                setting(settings, Setting::StatusTable)?,
                courier_core::status::RETENTION,
            );
            // A replayed job comes from its index entry (at most 300 KiB): it fits a message.
            let scheduler = sealing_scheduler(&clients, settings, None).await?;
            let outcome = dlq::replay(
                &letters,
                &status,
                &scheduler,
                &index,
                &operator,
                &reason,
                rate,
                Utc::now,
                &mut *progress_out(),
            )
            .await?;
            report("replayed", &outcome, out)?;
        }
        DlqCommand::Discard {
            ids,
            filter,
            act,
            blocklist,
        } => {
            let letters = selection(&index, &ids, &filter, now).await?;
            let Some((operator, reason)) =
                confirmed(&act, "discard", (letters.len(), "letters"), out)?
            else {
                dlq::table(&letters, now, false, out)?;
                return Ok(0);
            };
            let control = if blocklist {
                Some(DynamoDbPoisonList::new(
                    clients.dynamodb.clone(),
                    setting(settings, Setting::ControlTable)?,
                    std::time::Duration::from_secs(60),
                ))
            } else {
                None
            };
            let outcome = dlq::discard(
                &letters,
                &index,
                control.as_ref().map(|c| c as &dyn PoisonList),
                &operator,
                &reason,
                now,
                &mut *progress_out(),
            )
            .await?;
            report("discarded", &outcome, out)?;
        }
        DlqCommand::RedriveAll {
            source_arn,
            destination_arn,
            rate,
            i_understand_this_moves_everything,
        } => {
            eprintln!(
                "WARNING: this moves every message of {source_arn} back to its source queue, without filter,"
            );
            eprintln!(
                "         index or audit. Messages whose root cause is not fixed will fail and come back."
            );
            eprintln!("         Prefer `courierctl dlq replay` with filters.");
            if !i_understand_this_moves_everything {
                return Err(DlqError::Usage(
                    "add --i-understand-this-moves-everything to proceed".into(),
                ));
            }
            let task = courier_adapters::aws::letters::redrive_all(
                &clients.sqs,
                &source_arn,
                destination_arn.as_deref(),
                rate,
            )
            .await?;
            writeln!(out, "started move task {task}")?;
        }
    }
    Ok(0)
}

/// Progress bars go to stderr when it is a terminal (stdout stays clean for tables and JSON).
fn progress_out() -> Box<dyn Progress> {
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() {
        Box::new(Bar::stderr())
    } else {
        Box::new(std::io::sink())
    }
}

async fn selection(
    index: &dyn LetterIndex,
    ids: &[String],
    filter: &FilterArgs,
    now: DateTime<Utc>,
) -> Result<Vec<courier_core::letters::IndexedLetter>, DlqError> {
    match (ids.is_empty(), filter.is_empty()) {
        (false, true) => dlq::by_ids(index, ids).await,
        (true, false) => dlq::select(index, &filter.to_filter(now, Some(LetterState::Live))?).await,
        (false, false) => Err(DlqError::Usage("give ids or filters, not both".into())),
        (true, true) => Err(DlqError::Usage(
            "select letters by ids or by at least one filter (e.g. --category, --campaign)".into(),
        )),
    }
}

fn confirmed(
    act: &ActArgs,
    verb: &str,
    (count, noun): (usize, &str),
    out: &mut dyn Write,
) -> Result<Option<(String, String)>, DlqError> {
    if !act.confirm {
        writeln!(
            out,
            "dry run: would {verb} {count} {noun} (add --confirm --reason \"...\" to do it):"
        )?;
        return Ok(None);
    }
    let reason = act
        .reason
        .clone()
        .filter(|r| !r.trim().is_empty())
        .ok_or_else(|| DlqError::Usage(format!("--reason is required to {verb}")))?;
    // --operator, else $USER (through clap), else unknown.
    let operator = act.operator.clone().unwrap_or_else(|| "unknown".into());
    Ok(Some((operator, reason)))
}

fn report(verb: &str, outcome: &dlq::Outcome, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{verb} {} letters; skipped {}",
        outcome.done.len(),
        outcome.skipped.len()
    )?;
    for (id, why) in &outcome.skipped {
        writeln!(out, "  skipped {id}: {why}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_parse_with_clear_errors() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let args = FilterArgs {
            category: Some("needs-review".into()),
            since: Some("2h".into()),
            class: Some("content_rejected".into()),
            ..FilterArgs::default()
        };
        let f = args.to_filter(now, Some(LetterState::Live)).unwrap();
        assert_eq!(f.category, Some(DeadLetterCategory::NeedsReview));
        assert_eq!(f.since, Some(now - chrono::Duration::hours(2)));
        assert_eq!(f.state, Some(LetterState::Live));
        let every = FilterArgs {
            state: Some("all".into()),
            ..FilterArgs::default()
        };
        assert_eq!(
            every.to_filter(now, Some(LetterState::Live)).unwrap().state,
            None
        );
        let stopped = FilterArgs {
            state: Some("replaying".into()),
            ..FilterArgs::default()
        };
        assert!(
            !stopped.is_empty(),
            "--state alone selects (to finish stopped replays)"
        );
        assert_eq!(
            stopped
                .to_filter(now, Some(LetterState::Live))
                .unwrap()
                .state,
            Some(LetterState::Replaying)
        );
        for bad in [
            FilterArgs {
                category: Some("lost".into()),
                ..FilterArgs::default()
            },
            FilterArgs {
                class: Some("meh".into()),
                ..FilterArgs::default()
            },
            FilterArgs {
                since: Some("yesterday".into()),
                ..FilterArgs::default()
            },
            FilterArgs {
                state: Some("gone".into()),
                ..FilterArgs::default()
            },
        ] {
            assert!(matches!(bad.to_filter(now, None), Err(DlqError::Usage(_))));
        }
    }

    #[test]
    fn acting_needs_confirmation_and_a_reason() {
        let mut out = Vec::new();
        let dry = ActArgs {
            confirm: false,
            reason: None,
            operator: None,
        };
        assert!(
            confirmed(&dry, "replay", (3, "letters"), &mut out)
                .unwrap()
                .is_none()
        );
        assert!(
            String::from_utf8(out)
                .unwrap()
                .contains("dry run: would replay 3")
        );
        let no_reason = ActArgs {
            confirm: true,
            reason: Some(" ".into()),
            operator: None,
        };
        assert!(matches!(
            confirmed(&no_reason, "replay", (3, "letters"), &mut Vec::new()),
            Err(DlqError::Usage(_))
        ));
        let ok = ActArgs {
            confirm: true,
            reason: Some("fixed".into()),
            operator: Some("ann".into()),
        };
        assert_eq!(
            confirmed(&ok, "replay", (3, "letters"), &mut Vec::new()).unwrap(),
            Some(("ann".into(), "fixed".into()))
        );
    }
}
