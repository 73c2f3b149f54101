//! `courierctl policy show|validate|set`: the glue between the command line, the control table
//! and [`courierctl::policy`].

use std::io::{Read, Write};

use clap::Subcommand;
use courier_adapters::aws::{Clients, DynamoDbLiveSettings};
use courier_core::ports::LiveSettingsStore;
use courierctl::policy::{self, Expect, PolicyError};

use crate::settings::{Setting, Settings};

#[derive(Subcommand)]
pub(crate) enum PolicyCommand {
    /// The stored document, its version, who stored it and whether it validates.
    Show {
        /// Only the stored document, as stored (`{}` when none is), to edit or to keep and set
        /// again later; its version goes to stderr (`version N`).
        #[arg(long)]
        document: bool,
    },
    /// Check a document (a file, or - for stdin) without storing it: exit 0 and what it puts in
    /// force, or exit 1 and what is wrong.
    Validate { file: String },
    /// Validate a document (a file, or - for stdin) and store it as the next version; every
    /// instance uses it within its live settings cache (30 s by default). An invalid document is
    /// not stored (exit 1), nor one made from another version than the one stored (exit 1).
    #[command(group(clap::ArgGroup::new("over").required(true).args(["expect_version", "force"])))]
    Set {
        file: String,
        /// The version the change was made from, as `policy show` printed it (0: none stored):
        /// if another is stored by now, nothing is stored.
        #[arg(long)]
        expect_version: Option<u64>,
        /// Store it over whatever version is stored.
        #[arg(long)]
        force: bool,
        /// Who is changing the settings (recorded with the version).
        #[arg(long, env = "USER", default_value = "courierctl")]
        operator: String,
    },
}

fn read(file: &str) -> Result<String, String> {
    let mut text = String::new();
    if file == "-" {
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| format!("cannot read stdin: {e}"))?;
        return Ok(text);
    }
    std::fs::read_to_string(file).map_err(|e| format!("invalid file {file:?}: {e}"))
}

/// Runs a policy command; returns the exit code (1: invalid document, conflict or store
/// failure; 2: usage).
pub(crate) fn run(command: PolicyCommand, settings: &Settings, out: &mut dyn Write) -> i32 {
    let result = (|| -> Result<i32, (i32, String)> {
        let usage = |e: String| (2, e);
        let failed = |e: String| (1, e);
        if let PolicyCommand::Validate { file } = &command {
            let text = read(file).map_err(usage)?;
            let effective = policy::validate(&text).map_err(|e| failed(e.to_string()))?;
            writeln!(out, "valid: {}", policy::summary(&effective))
                .map_err(|e| failed(e.to_string()))?;
            return Ok(0);
        }
        let table = settings
            .get(Setting::ControlTable)
            .map(str::to_owned)
            .map_err(|e| usage(e.to_string()))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| failed(e.to_string()))?;
        runtime.block_on(async {
            let clients = Clients::new(&courier_adapters::aws::sdk_config().await);
            let store = DynamoDbLiveSettings::new(clients.dynamodb, table);
            match command {
                PolicyCommand::Validate { .. } => Ok(0),
                PolicyCommand::Show { document } => {
                    let record = store.get().await.map_err(|e| failed(e.to_string()))?;
                    // --document: the document alone on stdout (`{}` when none is stored), its
                    // version on stderr, for `set --expect-version`.
                    let text = match (&record, document) {
                        (Some(r), true) => {
                            eprintln!("version {}", r.version);
                            format!("{}\n", r.document)
                        }
                        (None, true) => {
                            eprintln!("version 0 (none stored)");
                            "{}\n".to_owned()
                        }
                        (_, false) => policy::describe(record.as_ref()),
                    };
                    write!(out, "{text}").map_err(|e| failed(e.to_string()))?;
                    Ok(0)
                }
                PolicyCommand::Set {
                    file,
                    expect_version,
                    force: _,
                    operator,
                } => {
                    let text = read(&file).map_err(usage)?;
                    // clap requires one of the two: no version means --force.
                    let expect = expect_version.map_or(Expect::Current, Expect::Version);
                    let version = policy::set(&store, &text, expect, chrono::Utc::now(), &operator)
                        .await
                        .map_err(|e: PolicyError| failed(e.to_string()))?;
                    writeln!(
                        out,
                        "version {version} stored; every instance uses it within its live settings cache (30 s by default)"
                    )
                    .map_err(|e| failed(e.to_string()))?;
                    Ok(0)
                }
            }
        })
    })();
    result.unwrap_or_else(|(code, e)| {
        eprintln!("courierctl: {e}");
        code
    })
}
