//! `courierctl`: Courier's operator CLI.
//!
//! # Layout
//! - `classify`: classify SMTP replies, SES API errors and SES events (pure, offline).
//! - `schema`: print the job contract's JSON Schema.
//! - `dlq`: the dead-letter workbench (stats, list/search, show, replay, discard, redrive-all).
//! - `suppression`, `status`, `reputation`: the suppression list, a job's timeline, a sending
//!   domain's rates and pause.
//! - `settings`: the `COURIER_*` settings those commands read, from the variables or from the
//!   outputs of the stack `--stack` names, resolved once before the command runs.
//!
//! The workbench's logic (selection, replay, discard, stats) is the library half of this crate,
//! [`courierctl::workbench`]. The developer's commands (demo, drive, provision, simulate) are in
//! `courier-dev`: `courierctl` is what an operator runs against a deployed stack.

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use courierctl::workbench;

mod classify_cmd;
mod dlq_cmd;
mod ops_cmd;
mod policy_cmd;
mod settings;
mod smoke_cmd;

#[derive(Parser)]
#[command(
    name = "courierctl",
    version,
    about = "Operate Courier: dead letters, suppression, job status, reputation, failure classification.",
    long_about = "Operate Courier: dead letters, suppression, job status, reputation, failure classification.\n\nCommands that read Courier's tables and queues take their names from COURIER_* variables or, with --stack NAME (or COURIER_STACK), from that CloudFormation stack's outputs; a variable that is set wins (`courier-dev provision` prints the variables of a local stack). AWS access is the AWS CLI's: AWS_PROFILE, AWS_REGION and the usual AWS variables and files.\n\nExit codes: 0 success, 1 runtime failure, 2 bad input or usage."
)]
struct Cli {
    /// The CloudFormation stack (from infra/template.yaml) whose outputs name the tables and
    /// queues; a COURIER_* variable that is set wins over its output.
    #[arg(long, global = true, env = "COURIER_STACK", value_name = "NAME")]
    stack: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Classify failure replies: prints class, retryable, suppress-recipient and the matched rule.
    ///
    /// Each argument (or, with no arguments, each stdin line) is either a raw SMTP reply
    /// (write `\n` between the lines of a multi-line reply) or a JSON object:
    ///   {"reply": "User unknown", "code": 550, "status": "5.1.1"}            (SMTP)
    ///   {"source": "ses_api", "code": "MessageRejected", "message": "...", "http_status": 400}
    ///   {"source": "ses_event", "event": {"type": "bounce", "bounce_type": "Permanent",
    ///    "bounce_subtype": "General", "diagnostic": "smtp; 550 5.1.1 user unknown"}}
    ///
    /// Example: courierctl classify '452 4.2.2 The email account is over quota'
    #[command(verbatim_doc_comment)]
    Classify {
        /// Replies to classify; read stdin when none are given.
        replies: Vec<String>,
        /// Print one JSON verdict per line.
        #[arg(long)]
        json: bool,
        /// Also list the rules tried, in order, and the one that matched (with --json: a `tried`
        /// list in each verdict).
        #[arg(long)]
        explain: bool,
    },
    /// Print the JSON Schema of the job contract (EmailJob v1).
    Schema,
    /// Work dead letters through the index: stats, list/search, show, replay, discard.
    ///
    /// Reads COURIER_LETTER_INDEX_TABLE (and COURIER_STATUS_TABLE, COURIER_RETRY_QUEUE_URL or else
    /// COURIER_QUEUE_URL, and COURIER_ENVELOPE_KEY_SECRET for replay, COURIER_CONTROL_TABLE for
    /// discard --blocklist), or the outputs of --stack, and the usual AWS variables.
    Dlq {
        #[command(subcommand)]
        command: Box<dlq_cmd::DlqCommand>,
    },
    /// The suppression list: list, add (hard or soft), remove. Reads COURIER_SUPPRESSION_TABLE.
    Suppression {
        #[command(subcommand)]
        command: ops_cmd::SuppressionCommand,
    },
    /// A job's status record and its dead letters with every attempt and the audit trail.
    /// Reads COURIER_STATUS_TABLE and COURIER_LETTER_INDEX_TABLE.
    Status {
        message_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Put back the copy of jobs the sweeper flagged because theirs never came back
    /// (SweptCopyOverdueAlarm): the job at its generation, from the body its record keeps, on the
    /// retry queue (the send queue without one), sealed. Without --confirm: a dry run (each
    /// job's body read and its copy built; nothing written or sent). Reads
    /// COURIER_STATUS_TABLE, COURIER_RETRY_QUEUE_URL or else COURIER_QUEUE_URL,
    /// COURIER_ENVELOPE_KEY_SECRET and, for a body over 300 KiB, COURIER_PAYLOAD_BUCKET, or the
    /// outputs of --stack.
    ///
    /// Example: courierctl requeue --overdue --confirm --reason "retry queue purged"
    #[command(group(clap::ArgGroup::new("jobs").required(true).args(["message_ids", "overdue"])))]
    Requeue {
        /// The jobs' message ids (as the sweeper's log and `courierctl status` name them).
        message_ids: Vec<String>,
        /// Every job the sweeper flagged as overdue, oldest flag first, up to --limit.
        #[arg(long, conflicts_with = "message_ids")]
        overdue: bool,
        /// With --overdue: at most this many jobs (default 1000; run again for more).
        #[arg(long)]
        limit: Option<usize>,
        #[command(flatten)]
        act: dlq_cmd::ActArgs,
    },
    /// A sending domain's reputation: rolling counts and bounce / complaint rates against SES's
    /// review levels, and whether the reputation guard paused its SES sends. `--resume` lifts a
    /// pause once the cause (a bad list, a broken form) is fixed. Reads COURIER_CONTROL_TABLE.
    ///
    /// Example: courierctl reputation example.com --window 24h
    Reputation {
        domain: String,
        /// How far back to count (hourly buckets).
        #[arg(long, default_value = "24h")]
        window: String,
        /// Lift the domain's pause.
        #[arg(long)]
        resume: bool,
        #[arg(long)]
        json: bool,
    },
    /// The live settings: breaker thresholds, send rates, per-destination pacing and the retry
    /// policy, changed without a redeploy (docs/live-settings.md). Reads COURIER_CONTROL_TABLE.
    ///
    /// Example: courierctl policy set settings.json --expect-version 3
    Policy {
        #[command(subcommand)]
        command: policy_cmd::PolicyCommand,
    },
    /// After a deploy: one job to each of SES's mailbox simulator addresses (success, bounce,
    /// out-of-office, complaint, suppression list), each followed to the end SES's answer must
    /// lead to (delivered, bounced_permanent, delivered, complained, bounced_permanent); prints a
    /// pass/fail table. Exit 0 when every case passed, 1 otherwise. Reads COURIER_QUEUE_URL and
    /// COURIER_STATUS_TABLE, or the outputs of --stack.
    ///
    /// Example: courierctl --stack courier smoke --from ops@example.com
    Smoke {
        /// The sender: a verified SES identity the stack may send as (AllowedSenders).
        #[arg(long)]
        from: String,
        /// Label of this run in the addresses and message ids (default: the time, UTC).
        #[arg(long)]
        run: Option<String>,
        /// How long to wait for every job's end.
        #[arg(long, default_value = "10m")]
        timeout: String,
        #[arg(long)]
        json: bool,
    },
}

/// The settings of a command that reads Courier's tables: the variables, and the stack's outputs
/// when `--stack` names one.
fn load_settings(stack: Option<&str>) -> Result<settings::Settings, settings::StackError> {
    let variable = |name: &str| std::env::var(name).ok();
    if stack.is_none() {
        return Ok(settings::Settings::resolve(variable, None));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| settings::StackError::Aws {
            name: stack.unwrap_or_default().to_owned(),
            region: String::new(),
            detail: e.to_string(),
        })?;
    runtime.block_on(async {
        let cloudformation = settings::CloudFormation::from_env().await;
        settings::load(stack, variable, &cloudformation).await
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let settings = match &cli.command {
        Command::Classify { .. } | Command::Schema => settings::Settings::default(),
        _ => match load_settings(cli.stack.as_deref()) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("courierctl: {e}");
                return ExitCode::from(e.exit_code());
            }
        },
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let result = match cli.command {
        Command::Classify {
            replies,
            json,
            explain,
        } => classify_cmd::run(
            &replies,
            json,
            explain,
            &mut std::io::stdin().lock(),
            &mut out,
            &mut std::io::stderr(),
        ),
        Command::Suppression { command } => Ok(ops_cmd::suppression(command, &settings, &mut out)),
        Command::Status { message_id, json } => {
            Ok(ops_cmd::status(&message_id, json, &settings, &mut out))
        }
        Command::Reputation {
            domain,
            window,
            resume,
            json,
        } => Ok(ops_cmd::reputation(
            &domain, &window, resume, json, &settings, &mut out,
        )),
        Command::Dlq { command } => Ok(dlq_cmd::run(*command, &settings, &mut out)),
        Command::Requeue {
            message_ids,
            overdue,
            limit,
            act,
        } => {
            let jobs = match (overdue, limit) {
                (true, limit) => dlq_cmd::Jobs::Overdue {
                    limit: limit.unwrap_or(1000),
                },
                (false, None) => dlq_cmd::Jobs::Ids(message_ids),
                (false, Some(_)) => {
                    eprintln!("courierctl requeue: --limit goes with --overdue");
                    return ExitCode::from(2);
                }
            };
            Ok(dlq_cmd::requeue(jobs, &act, &settings, &mut out))
        }
        Command::Policy { command } => Ok(policy_cmd::run(command, &settings, &mut out)),
        Command::Smoke {
            from,
            run,
            timeout,
            json,
        } => Ok(smoke_cmd::run(
            &smoke_cmd::SmokeArgs {
                from,
                run,
                timeout,
                json,
            },
            &settings,
            &mut out,
        )),
        Command::Schema => {
            serde_json::to_writer_pretty(&mut out, &courier_core::job::EmailJob::json_schema())
                .map_err(std::io::Error::other)
                .and_then(|()| writeln!(out))
                .map(|()| 0)
        }
    };
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("courierctl: {e}");
            ExitCode::from(1)
        }
    }
}
