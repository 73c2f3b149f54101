//! Wiring for `courierctl smoke` (the logic is [`courierctl::smoke`]).

use std::io::Write;
use std::time::Duration;

use courier_adapters::aws::{Clients, DynamoDbStatusStore, SqsRetryScheduler};
use courier_core::ports::{Requeue, RetryScheduler};
use courierctl::smoke;

use crate::settings::{Setting, Settings};

/// The arguments of `courierctl smoke`.
pub(crate) struct SmokeArgs {
    pub(crate) from: String,
    pub(crate) run: Option<String>,
    pub(crate) timeout: String,
    pub(crate) json: bool,
}

/// Runs the smoke test: 0 when every case passed, 1 when one failed, 2 on bad input.
pub(crate) fn run(args: &SmokeArgs, settings: &Settings, out: &mut dyn Write) -> i32 {
    let timeout = match courier_core::policy::parse_duration(&args.timeout) {
        Ok(secs) if secs > 0 => Duration::from_secs(secs),
        _ => {
            eprintln!(
                "courierctl: --timeout {:?}: expected a duration such as 90s or 10m",
                args.timeout
            );
            return 2;
        }
    };
    let run_id = args
        .run
        .clone()
        .unwrap_or_else(|| chrono::Utc::now().format("%Y%m%d%H%M%S").to_string());
    if run_id.is_empty()
        || !run_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        eprintln!("courierctl: --run {run_id:?}: use letters, digits and '-'");
        return 2;
    }
    let (queue, table) = match (
        settings.get(Setting::QueueUrl),
        settings.get(Setting::StatusTable),
    ) {
        (Ok(q), Ok(t)) => (q.to_owned(), t.to_owned()),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("courierctl: {e}");
            return 2;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("courierctl: {e}");
            return 1;
        }
    };
    let cases = smoke::cases(&run_id);
    let outcomes = runtime.block_on(async {
        let clients = Clients::new(&courier_adapters::aws::sdk_config().await);
        // Bare jobs, as an application sends them (SendMessageBatch, no delay).
        let queue = SqsRetryScheduler::new(clients.sqs.clone(), clients.sfn.clone(), &queue, "");
        let jobs: Vec<Requeue> = cases
            .iter()
            .map(|c| Requeue {
                message_id: c.message_id.clone(),
                body: smoke::job(c, &args.from).to_string(),
                delay_secs: 0,
            })
            .collect();
        for (case, result) in cases.iter().zip(queue.enqueue(&jobs).await) {
            if let Err(e) = result {
                return Err(format!("enqueue {}: {e}", case.message_id));
            }
        }
        eprintln!(
            "courierctl smoke: {} jobs enqueued (run {run_id}); waiting up to {} s for their ends",
            cases.len(),
            timeout.as_secs()
        );
        let status =
            DynamoDbStatusStore::new(clients.dynamodb, &table, courier_core::status::RETENTION);
        Ok(smoke::wait(&cases, &status, timeout, Duration::from_secs(3)).await)
    });
    let outcomes = match outcomes {
        Ok(o) => o,
        Err(e) => {
            eprintln!("courierctl: {e}");
            return 1;
        }
    };
    let written = if args.json {
        serde_json::to_writer(&mut *out, &outcomes)
            .map_err(std::io::Error::other)
            .and_then(|()| writeln!(out))
    } else {
        courierctl::table::write(out, &mut smoke::table(&outcomes), "")
    };
    if let Err(e) = written {
        eprintln!("courierctl: {e}");
        return 1;
    }
    if outcomes.iter().all(|o| o.passed) {
        0
    } else {
        1
    }
}
