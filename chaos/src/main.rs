//! `courier-chaos`: the chaos suite (see the crate docs and `make chaos`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "courier-chaos",
    about = "Jobs through the local system while drivers are SIGKILLed, Postfix restarts and faults hit the emulator link; then every job is audited.",
    long_about = "Jobs through the local system while drivers are SIGKILLed, Postfix restarts and faults hit the emulator link; then every job is audited.\n\nRun inside the harness: scripts/with-harness.sh moto -- courier-chaos ... (make chaos).\nExit codes: 0 no violation, 1 violations or an incomplete run, 2 the run could not be set up."
)]
struct Cli {
    /// Jobs to send.
    #[arg(long, default_value_t = 10_000)]
    jobs: usize,
    /// SIGKILLs of a driver process during the chaos phase.
    #[arg(long, default_value_t = 20)]
    kills: usize,
    /// Seed of the plan and the proxies (default: the clock; printed at the start).
    #[arg(long)]
    seed: Option<u64>,
    /// Length of the chaos phase in seconds (jobs arrive over its first 60 %).
    #[arg(long, default_value_t = 300)]
    duration: u64,
    /// Seconds to wait after the chaos phase for every job to settle.
    #[arg(long, default_value_t = 1800)]
    settle_deadline: u64,
    /// Driver processes (`courier-dev drive`) running at once.
    #[arg(long, default_value_t = 2)]
    drivers: usize,
    /// Driver loops per process.
    #[arg(long, default_value_t = 3)]
    instances: usize,
    /// Real Postfix restarts during the chaos phase (0: none).
    #[arg(long, default_value_t = 2)]
    postfix_restarts: usize,
    /// Seconds the AWS emulator is unreachable (the proxy refuses every connection).
    #[arg(long, default_value_t = 8)]
    aws_outage: u64,
    /// Also inject resets and stalls on the SMTP link (default: latency only; see docs/testing.md).
    #[arg(long)]
    smtp_resets: bool,
    /// Run DynamoDB on DynamoDB Local (this jar) with its tables on disk, so the outage restarts
    /// it for real; SQS and S3 stay on the harness's emulator.
    #[arg(long)]
    dynamodb_local: Option<PathBuf>,
    /// The courier-dev binary (default: next to this one).
    #[arg(long)]
    driver_bin: Option<PathBuf>,
    /// Where the journal, driver logs and the violation list go
    /// (default: $COURIER_HARNESS_DIR/chaos, else a directory under /tmp).
    #[arg(long)]
    work_dir: Option<PathBuf>,
}

/// With `--dynamodb-local`, runs this program again with `AWS_ENDPOINT_URL_DYNAMODB` set (the SDK
/// reads per-service endpoints from the environment; this process cannot set its own).
fn trampoline(jar: &std::path::Path) -> ExitCode {
    let port = match std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(addr) => addr.port(),
        Err(e) => {
            eprintln!("courier-chaos: no free port for DynamoDB Local: {e}");
            return ExitCode::from(2);
        }
    };
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("courier-chaos"));
    let status = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(
            "AWS_ENDPOINT_URL_DYNAMODB",
            format!("http://127.0.0.1:{port}"),
        )
        .env(courier_chaos::dynamodb_local::ENV_JAR, jar)
        .env(courier_chaos::dynamodb_local::ENV_PORT, port.to_string())
        .status();
    match status {
        Ok(s) => ExitCode::from(u8::try_from(s.code().unwrap_or(2)).unwrap_or(2)),
        Err(e) => {
            eprintln!("courier-chaos: {e}");
            ExitCode::from(2)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(jar) = &cli.dynamodb_local
        && std::env::var_os(courier_chaos::dynamodb_local::ENV_PORT).is_none()
    {
        return trampoline(jar);
    }
    let seed = cli.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64 % 1_000_000)
    });
    let driver_bin = cli.driver_bin.unwrap_or_else(|| {
        std::env::current_exe()
            .map(|p| p.with_file_name("courier-dev"))
            .unwrap_or_else(|_| PathBuf::from("courier-dev"))
    });
    let work_dir = cli
        .work_dir
        .unwrap_or_else(|| match std::env::var("COURIER_HARNESS_DIR") {
            Ok(dir) => PathBuf::from(dir).join("chaos"),
            Err(_) => std::env::temp_dir().join(format!("courier-chaos-{}", std::process::id())),
        });
    let settings = courier_chaos::run::Settings {
        jobs: cli.jobs,
        kills: cli.kills,
        seed,
        duration: Duration::from_secs(cli.duration),
        settle_deadline: Duration::from_secs(cli.settle_deadline),
        drivers: cli.drivers.max(1),
        instances: cli.instances.max(1),
        postfix_restarts: cli.postfix_restarts,
        aws_outage: Duration::from_secs(cli.aws_outage),
        smtp_resets: cli.smtp_resets,
        driver_bin,
        work_dir,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("courier-chaos: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(courier_chaos::run::run(settings)) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            eprintln!("courier-chaos: {e}");
            ExitCode::from(2)
        }
    }
}
