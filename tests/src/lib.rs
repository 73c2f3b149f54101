//! Helpers for the integration tests. They run against whatever the environment points at:
//! `scripts/with-harness.sh moto|localstack -- cargo test -p courier-integration` starts the
//! emulators and the SMTP server and exports `AWS_ENDPOINT_URL` and the `COURIER_SMTP_*`
//! variables; against real AWS, set the usual AWS variables instead. A missing variable fails
//! the test with a message: integration tests are never skipped silently.

use std::time::{Duration, Instant};

/// Reads a required variable, failing the test with a clear message when it is missing.
pub fn require_env(name: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "{name} is not set: run the integration tests through `scripts/with-harness.sh moto -- cargo test -p courier-integration` (or `make test`)"
        ),
    }
}

/// Which emulator the run targets (`moto`, `localstack`, or `aws`).
pub fn emulator() -> String {
    std::env::var("COURIER_EMULATOR").unwrap_or_else(|_| "aws".into())
}

/// Shared SDK configuration from the environment (honours `AWS_ENDPOINT_URL[_<SERVICE>]`).
pub async fn aws_config() -> aws_config::SdkConfig {
    require_env("AWS_ENDPOINT_URL");
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .load()
        .await
}

/// A name unique to this test run and process, safe for queues, tables and buckets.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{prefix}-{}-{nanos:09}", std::process::id())
}

/// Polls `f` every 200 ms until it returns `Some` or `timeout` passes.
pub async fn eventually<T, F, Fut>(timeout: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if start.elapsed() > timeout {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The account id the emulators use (moto and LocalStack both default to this one).
pub const ACCOUNT: &str = "000000000000";

/// A role ARN for resources that need one; the emulators do not check it.
pub fn role_arn() -> String {
    let account = if emulator() == "moto" {
        "123456789012"
    } else {
        ACCOUNT
    };
    format!("arn:aws:iam::{account}:role/courier-test")
}
