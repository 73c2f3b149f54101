//! `courier-dev`: the developer's tool: the local run, the send function as a local process,
//! a stack on the emulator and the outage simulator. Nothing here is deployed.
//!
//! # Layout
//! - `demo`: a demo campaign through the send pipeline (SMTP and SES), the events function and
//!   the archiver, on the emulator and a real SMTP server (`make demo`).
//! - `drive`: the send function as a local long-running process (used by the chaos suite).
//! - `provision`: create the resources on an emulator and print the function's settings.
//! - `simulate`: the outage simulator (crate `courier-sim`), offline.
//! - `serve`: a stack on the emulator run as Lambda and SES would (`courierctl smoke` locally).

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use courier_dev::{driver, send_resources};

mod demo;
mod drive;
mod provision_cmd;
mod simulate;

#[derive(Parser)]
#[command(
    name = "courier-dev",
    version,
    about = "Develop Courier: the local run on the emulators, the local driver, provisioning, the outage simulator.",
    long_about = "Develop Courier: the local run on the emulators, the local driver, provisioning, the outage simulator.\n\nCommands that reach AWS read the usual AWS variables (AWS_ENDPOINT_URL points them at an emulator).\n\nExit codes: 0 success, 1 runtime failure, 2 bad input or usage."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create Courier's queues, tables, bucket and delay state machine on the emulator that
    /// AWS_ENDPOINT_URL points at; prints the send function's settings as `export` lines.
    Provision {
        /// Name prefix of every resource.
        #[arg(long, default_value = "courier-local")]
        prefix: String,
        /// Role the delay state machine runs as (emulators do not check it).
        #[arg(long, default_value = "arn:aws:iam::123456789012:role/courier-local")]
        role_arn: String,
    },
    /// The local run: provision Courier on the emulator, enqueue a demo campaign with a realistic
    /// failure mix, drive the send handler against the real SMTP server and SES on the emulator,
    /// publish SES's events and drive the events handler with them, run the archiver, report
    /// (use `make demo`).
    Demo {
        /// Number of jobs in the campaign.
        #[arg(long, default_value_t = 1000)]
        jobs: usize,
        /// Name prefix of the demo's stack (default `courier-demo-<pid>`).
        #[arg(long)]
        prefix: Option<String>,
    },
    /// Simulate outages, throttling, latency spikes and soft-bounce storms against the real
    /// retry policy, classifier and breaker on a simulated clock; reports amplification, send
    /// rate against the quota, drain time, dead letters and cost (offline, no AWS).
    ///
    /// Example: courier-dev simulate outage-30m --jobs 1000000 --quota 500 --compare breaker
    Simulate(simulate::SimulateArgs),
    /// Run the send function as a local process: the handler wired from the environment as at
    /// Lambda INIT, driven from COURIER_QUEUE_URL with Lambda's SQS semantics (the chaos suite
    /// kills and restarts it).
    Drive(drive::DriveArgs),
    /// Provision a stack on the emulator and run it as Lambda and SES would: the send and events
    /// functions, and SES's events for what it accepted (the mailbox simulator's addresses get
    /// theirs). Prints the settings courierctl reads as `export` lines, then `serving`.
    ///
    /// Example: courier-dev serve --seconds 600 (then courierctl smoke --from ops@courier.test)
    Serve {
        /// Name prefix of the stack (default `courier-serve-<pid>`).
        #[arg(long)]
        prefix: Option<String>,
        /// How long to serve.
        #[arg(long, default_value_t = 600)]
        seconds: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Not locked for the whole run: the demo's and serve's worker threads print too (a function's
    // EMF line), and would wait for ever on a lock this thread holds.
    let mut out = std::io::stdout();
    let result = match cli.command {
        Command::Provision { prefix, role_arn } => provision_cmd::run(&prefix, &role_arn, &mut out),
        Command::Demo { jobs, prefix } => demo::run(jobs, prefix).or_else(|e| {
            eprintln!("courier-dev demo: {e}");
            Ok(1)
        }),
        Command::Drive(args) => drive::run(&args).or_else(|e| {
            eprintln!("courier-dev drive: {e}");
            Ok(1)
        }),
        Command::Simulate(args) => simulate::run(&args, &mut out),
        Command::Serve { prefix, seconds } => {
            demo::serve::run(prefix, seconds, &mut out).or_else(|e| {
                eprintln!("courier-dev serve: {e}");
                Ok(1)
            })
        }
    };
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("courier-dev: {e}");
            ExitCode::from(1)
        }
    }
}
