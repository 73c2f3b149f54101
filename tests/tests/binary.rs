//! The functions' real binaries under a local Lambda Runtime API (`bench/runtime_api.py`): wiring
//! from the environment at INIT, SQS events in, batch responses out. Two builds: the debug binary
//! (`cargo build`), and the `bootstrap` cargo-lambda makes for x86_64 (the deployed zip is the
//! same source for arm64, which this machine cannot run, built with the release profile; the
//! x86_64 one is built with `lambda-test`, unoptimised and stripped, to keep CI short; panics
//! unwind in both). `make it-moto` / `it-localstack` build both
//! first (`make lambda-build-x86`, `make lambda-build`).

#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers fail the test loudly

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use courier_integration::{Stack, require_env};

fn debug_binary(name: &str) -> PathBuf {
    let repo = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or(repo.join("target"), |d| repo.join(d));
    let path = target.join("debug").join(name);
    assert!(
        path.exists(),
        "{} is not built: run `cargo build -p {name}` (make it-moto does)",
        path.display()
    );
    path
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The `bootstrap` of `make lambda-build-x86` (cargo-lambda, zig, `lambda-test` profile).
fn release_bootstrap(name: &str) -> PathBuf {
    let repo = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or(repo.join("target"), |d| repo.join(d));
    let path = target.join("lambda-x86_64").join(name).join("bootstrap");
    assert!(
        path.exists(),
        "{} is not built: run `make lambda-build-x86` (make it-moto does)",
        path.display()
    );
    path
}

/// Runs `exe` (the function `bin`) with `env` against a runtime API serving `events`; returns the
/// API's result JSON.
fn run_function(
    exe: &Path,
    bin: &str,
    env: &[(&str, String)],
    events: &[serde_json::Value],
) -> serde_json::Value {
    // Unique per call: the tests of this file run in parallel threads of one process.
    let dir = std::env::temp_dir().join(courier_integration::unique(&format!(
        "courier-binary-{bin}"
    )));
    std::fs::create_dir_all(&dir).unwrap();
    let events_file = dir.join("events.jsonl");
    std::fs::write(
        &events_file,
        events
            .iter()
            .map(|e| e.to_string() + "\n")
            .collect::<String>(),
    )
    .unwrap();
    let out = dir.join("result.json");
    let port = free_port();
    let mut api = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../bench/runtime_api.py"
        ))
        .args(["--port", &port.to_string(), "--events"])
        .arg(&events_file)
        .arg("--out")
        .arg(&out)
        .spawn()
        .expect("python3 runtime_api.py");
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "runtime API did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut function = Command::new(exe)
        .env("AWS_LAMBDA_RUNTIME_API", format!("127.0.0.1:{port}"))
        .env("AWS_LAMBDA_FUNCTION_NAME", bin)
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "local")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{bin}"))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::from(
            std::fs::File::create(dir.join("stdout.log")).unwrap(),
        ))
        .stderr(Stdio::from(
            std::fs::File::create(dir.join("stderr.log")).unwrap(),
        ))
        .spawn()
        .expect("function binary");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = api.try_wait().unwrap() {
            assert!(status.success(), "runtime API failed");
            break;
        }
        if let Some(status) = function.try_wait().unwrap() {
            // After the last response the API shuts down and the function's next poll fails:
            // that exit is expected. Before it, the function died early.
            let finished = (0..100).any(|_| {
                std::thread::sleep(Duration::from_millis(50));
                api.try_wait().unwrap().is_some()
            });
            if finished && out.exists() {
                break;
            }
            let _ = api.kill();
            let log = std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default();
            panic!("{bin} exited early: {status}: {log}");
        }
        assert!(
            Instant::now() < deadline,
            "{bin} did not answer every event in time"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = function.kill();
    let _ = function.wait();
    let mut result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap();
    // The function's warnings and errors (its log goes to stdout, as on Lambda), so that an
    // assertion on the result says why a record failed.
    let log = std::fs::read_to_string(dir.join("stdout.log")).unwrap_or_default();
    result["log"] = log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .map(|l| serde_json::Value::String(l.chars().take(2000).collect()))
        .collect();
    result
}

fn sqs_event(bodies: &[String]) -> serde_json::Value {
    let records: Vec<serde_json::Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| serde_json::json!({"messageId": format!("m{i}"), "receiptHandle": "r", "body": b, "attributes": {"ApproximateReceiveCount": "1"}, "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs", "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:send", "awsRegion": "us-east-1"}))
        .collect();
    serde_json::json!({ "Records": records })
}

/// The send function's settings for `stack`, sending through the harness's Postfix.
fn send_env(stack: &Stack) -> Vec<(&'static str, String)> {
    let mut env = stack.resources.resource_env();
    env.extend([
        ("COURIER_PROVIDERS", "smtp".into()),
        ("COURIER_SMTP_HOST", require_env("COURIER_SMTP_HOST")),
        ("COURIER_SMTP_PORT", require_env("COURIER_SMTP_PORT")),
        ("COURIER_SMTP_TLS", "none".into()),
    ]);
    env
}

#[tokio::test(flavor = "multi_thread")]
async fn the_send_binary_wires_from_the_environment_and_answers_batches() {
    let stack = Stack::create(&["smtp"]).await;
    let r = &stack.resources;
    let env = send_env(&stack);
    let job = |id: &str, to: &str| {
        serde_json::json!({"version": 1, "message_id": id, "campaign_id": "bin", "from": "bin@courier.test", "to": [to], "content": {"subject": "s", "text": "t"}}).to_string()
    };
    let events = vec![
        sqs_event(&[
            job("bin-1", "a@courier.test"),
            job("bin-2", "policy@courier.test"),
            "{broken".into(),
        ]),
        sqs_event(&[job("bin-1", "a@courier.test")]),
    ];
    let result = run_function(&debug_binary("courier-send"), "courier-send", &env, &events);
    let responses: Vec<&serde_json::Value> = result["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["response"])
        .collect();
    assert_eq!(responses.len(), 2, "{result}");
    for response in responses {
        assert_eq!(
            response["batchItemFailures"],
            serde_json::json!([]),
            "{result}"
        );
    }
    assert!(result["ready_ms"].is_null() || result["ready_ms"].as_f64().is_some());
    let store = courier_adapters::aws::DynamoDbStatusStore::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk),
        &r.status_table,
        Duration::from_secs(60),
    );
    use courier_core::ports::StatusStore;
    assert_eq!(
        store.get("bin-1").await.unwrap().unwrap().status,
        courier_core::status::Status::SentToProvider
    );
    assert_eq!(
        store.get("bin-2").await.unwrap().unwrap().status,
        courier_core::status::Status::DeadLettered
    );

    // A missing setting fails INIT with a message naming it (reported to the runtime API).
    let mut broken = env.clone();
    broken.retain(|(k, _)| *k != "COURIER_STATUS_TABLE");
    let dir_result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_function(
            &debug_binary("courier-send"),
            "courier-send",
            &broken,
            &[sqs_event(&[job("bin-3", "a@courier.test")])],
        )
    }));
    assert!(
        dir_result.is_err(),
        "the function started without COURIER_STATUS_TABLE"
    );
}

/// The release bootstrap (what cargo-lambda builds and `cargo lambda deploy` uploads, here for
/// x86_64) on SQS events: a batch of seven good jobs, one the receiver rejects for policy and a
/// broken record; then a second event (the warm path) with a new job and a duplicate of a sent
/// one. (A duplicate inside one batch is not used: one of the two copies loses the claim race and
/// is reported for redelivery, and which one is not fixed.)
#[tokio::test(flavor = "multi_thread")]
async fn the_release_bootstrap_answers_sqs_batches() {
    let stack = Stack::create(&["smtp"]).await;
    let r = &stack.resources;
    let env = send_env(&stack);
    let job = |id: &str, to: &str| {
        serde_json::json!({"version": 1, "message_id": id, "campaign_id": "release", "from": "rel@courier.test", "to": [to], "content": {"subject": "s", "text": "t"}}).to_string()
    };
    let mut first: Vec<String> = (0..7)
        .map(|i| job(&format!("rel-{i}"), &format!("r{i}@courier.test")))
        .collect();
    first.push(job("rel-policy", "policy@courier.test"));
    first.push("{broken".into());
    let (new, duplicate) = (
        job("rel-7", "r7@courier.test"),
        job("rel-0", "r0@courier.test"),
    );
    let events = if courier_integration::atomic_conditional_writes() {
        vec![sqs_event(&first), sqs_event(&[new, duplicate])]
    } else {
        // moto: the duplicate's claim is a transaction that fails, and moto restores a copy of
        // its tables taken before it, undoing a concurrent record's claim (seen: "the lease is no
        // longer ours" on rel-7's finish). One record per batch keeps the claims apart there.
        vec![
            sqs_event(&first),
            sqs_event(&[new]),
            sqs_event(&[duplicate]),
        ]
    };
    let result = run_function(
        &release_bootstrap("courier-send"),
        "courier-send",
        &env,
        &events,
    );
    assert_eq!(result["errors"], serde_json::json!([]), "{result}");
    let results = result["results"].as_array().unwrap();
    assert_eq!(results.len(), events.len(), "{result}");
    for r in results {
        // Every record found its next home (sent, dead letter, duplicate absorbed): no failures.
        assert_eq!(
            r["response"]["batchItemFailures"],
            serde_json::json!([]),
            "{result}"
        );
    }
    let store = courier_adapters::aws::DynamoDbStatusStore::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk),
        &r.status_table,
        Duration::from_secs(60),
    );
    use courier_core::ports::StatusStore;
    for id in (0..8).map(|i| format!("rel-{i}")) {
        assert_eq!(
            store.get(&id).await.unwrap().unwrap().status,
            courier_core::status::Status::SentToProvider,
            "{id}"
        );
    }
    assert_eq!(
        store.get("rel-policy").await.unwrap().unwrap().status,
        courier_core::status::Status::DeadLettered
    );
}

/// The unsubscribe function reads its token keys at INIT: a secret it cannot read, or no secret
/// named, stops it there with the variable named (Lambda reports an INIT failure), instead of
/// answering every one-click POST with 503.
#[test]
fn the_unsubscribe_binary_does_not_start_without_its_token_keys() {
    require_env("AWS_ENDPOINT_URL");
    let run = |secret: Option<String>| {
        let mut command = Command::new(debug_binary("courier-unsubscribe"));
        command
            .env("COURIER_SUPPRESSION_TABLE", "courier-unsubscribe-it")
            .env_remove("COURIER_UNSUBSCRIBE_KEY_SECRET")
            // Not under a Lambda runtime: INIT is all it may get to.
            .env_remove("AWS_LAMBDA_RUNTIME_API")
            .stdin(Stdio::null());
        if let Some(secret) = secret {
            command.env("COURIER_UNSUBSCRIBE_KEY_SECRET", secret);
        }
        let out = command.output().expect("run courier-unsubscribe");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(Some(courier_integration::unique("no-such-secret")));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("courier-unsubscribe: cannot start: COURIER_UNSUBSCRIBE_KEY_SECRET: "),
        "{stderr}"
    );
    let (code, stderr) = run(None);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot start: COURIER_UNSUBSCRIBE_KEY_SECRET is required"),
        "{stderr}"
    );
}
