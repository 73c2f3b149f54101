//! `courier-dev drive`: the send function as a long-running local process. Wires the pipeline
//! from the environment exactly as the Lambda's INIT does (`courier_send::wiring::from_env`) and
//! runs the local event-source driver (Lambda's SQS semantics: batches, visibility timeout,
//! partial batch responses) against `COURIER_QUEUE_URL` with several concurrent "instances",
//! and against `COURIER_RETRY_QUEUE_URL` (where copies that wait come back) with its own, as
//! the template's two event sources do, until it is killed or, with `--idle-exit`, until the
//! queues stayed empty that long.
//!
//! The chaos suite (`chaos/`) runs it as a child process and SIGKILLs it at random points.
//! With `--journal FILE`, every write to the status table that DynamoDB confirmed and that set a
//! job's status to `unknown` (the status machine recording an ambiguous outcome: a lease that
//! expired mid-send, a send that timed out after the data went out) is appended to FILE as
//! `ambiguous <message_id>`, with one `write` to an `O_APPEND` file, so lines survive a SIGKILL
//! and several processes can share the file. The chaos suite reads it to tell duplicates the
//! status machine recorded as ambiguous from silent ones.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::collections::HashMap;

use crate::driver::Driver;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeSerializationInterceptorContextRef, FinalizerInterceptorContextRef,
};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};
use courier_send::config::SendConfig;

/// Options of `courier-dev drive`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct DriveArgs {
    /// Concurrent driver loops in this process (stand-ins for Lambda instances).
    #[arg(long, default_value_t = 2)]
    pub instances: usize,
    /// Concurrent driver loops on the retry queue (`COURIER_RETRY_QUEUE_URL`; its event
    /// source's MaximumConcurrency on AWS). None without a retry queue.
    #[arg(long, default_value_t = 1, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub retry_instances: usize,
    /// Seconds a received batch stays invisible (the queue's visibility timeout on AWS).
    #[arg(long, default_value_t = 30)]
    pub visibility_timeout: i32,
    /// The function's timeout in seconds: each batch's deadline is now + this.
    #[arg(long, default_value_t = 30)]
    pub function_timeout: u64,
    /// Long-poll wait in seconds.
    #[arg(long, default_value_t = 1)]
    pub wait_seconds: i32,
    /// Exit 0 once no message was received for this many seconds (0: run until killed).
    #[arg(long, default_value_t = 0)]
    pub idle_exit: u64,
    /// Append every confirmed status write to this file (see the module docs).
    #[arg(long)]
    pub journal: Option<std::path::PathBuf>,
    /// Log the pipeline's events (tracing, `RUST_LOG` filter, default info) to stderr.
    #[arg(long)]
    pub log: bool,
    /// Name used in lease owners and progress lines.
    #[arg(long, default_value = "drive")]
    pub name: String,
}

/// Why the driver could not run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DriveError {
    #[error("wiring the send function: {0}")]
    Wiring(#[from] courier_send::wiring::WiringError),
    #[error("{0} is not set")]
    Env(&'static str),
    #[error("journal: {0}")]
    Io(#[from] std::io::Error),
}

/// Appends `ambiguous <message_id>` to the journal for every write to the status table that
/// DynamoDB confirmed and that set a job's status to `unknown`. An SDK interceptor on the
/// function's DynamoDB client, so the function's code and its `StatusStore` stay as deployed.
#[derive(Debug, Clone)]
struct UnknownJournal {
    table: String,
    file: Arc<Mutex<std::fs::File>>,
}

/// The message ids a request sets to `unknown` (kept in the request's config bag).
#[derive(Debug, Clone)]
struct SetsUnknown(Vec<String>);

impl Storable for SetsUnknown {
    type Storer = StoreReplace<Self>;
}

fn key_id(key: Option<&HashMap<String, AttributeValue>>) -> Option<String> {
    key?.get("message_id")?.as_s().ok().cloned()
}

/// Whether an update expression sets the attribute called `status` to the string `unknown`.
fn update_sets_unknown(
    expression: Option<&str>,
    names: Option<&HashMap<String, String>>,
    values: Option<&HashMap<String, AttributeValue>>,
) -> bool {
    let (Some(expression), Some(values)) = (expression, values) else {
        return false;
    };
    let mut targets = vec!["status".to_owned()];
    if let Some(names) = names {
        targets.extend(
            names
                .iter()
                .filter(|(_, v)| v.as_str() == "status")
                .map(|(k, _)| k.clone()),
        );
    }
    // Assignments in the SET clause: `<name> = <value>` separated by commas.
    let set = expression
        .split(" REMOVE ")
        .next()
        .unwrap_or_default()
        .trim_start()
        .trim_start_matches("SET ");
    set.split(',').any(|assignment| {
        let Some((lhs, rhs)) = assignment.split_once('=') else {
            return false;
        };
        targets.iter().any(|t| t == lhs.trim())
            && values
                .get(rhs.trim())
                .and_then(|v| v.as_s().ok())
                .is_some_and(|v| v == "unknown")
    })
}

impl UnknownJournal {
    fn unknown_ids(
        &self,
        input: &aws_smithy_runtime_api::client::interceptors::context::Input,
    ) -> Vec<String> {
        use aws_sdk_dynamodb::operation::{
            put_item::PutItemInput, transact_write_items::TransactWriteItemsInput,
            update_item::UpdateItemInput,
        };
        let mut ids = Vec::new();
        if let Some(u) = input.downcast_ref::<UpdateItemInput>() {
            if u.table_name() == Some(self.table.as_str())
                && update_sets_unknown(
                    u.update_expression(),
                    u.expression_attribute_names(),
                    u.expression_attribute_values(),
                )
            {
                ids.extend(key_id(u.key()));
            }
        } else if let Some(p) = input.downcast_ref::<PutItemInput>() {
            if p.table_name() == Some(self.table.as_str())
                && p.item()
                    .and_then(|i| i.get("status"))
                    .and_then(|v| v.as_s().ok())
                    == Some(&"unknown".to_owned())
            {
                ids.extend(key_id(p.item()));
            }
        } else if let Some(t) = input.downcast_ref::<TransactWriteItemsInput>() {
            for item in t.transact_items() {
                if let Some(u) = item.update()
                    && u.table_name() == self.table
                    && update_sets_unknown(
                        Some(u.update_expression()),
                        u.expression_attribute_names(),
                        u.expression_attribute_values(),
                    )
                {
                    ids.extend(key_id(Some(u.key())));
                }
                if let Some(p) = item.put()
                    && p.table_name() == self.table
                    && p.item().get("status").and_then(|v| v.as_s().ok())
                        == Some(&"unknown".to_owned())
                {
                    ids.extend(key_id(Some(p.item())));
                }
            }
        }
        ids
    }
}

impl Intercept for UnknownJournal {
    fn name(&self) -> &'static str {
        "UnknownJournal"
    }

    fn read_before_serialization(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let ids = self.unknown_ids(context.input());
        if !ids.is_empty() {
            cfg.interceptor_state().store_put(SetsUnknown(ids));
        }
        Ok(())
    }

    fn read_after_execution(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(SetsUnknown(ids)) = cfg.load::<SetsUnknown>() else {
            return Ok(());
        };
        if matches!(context.output_or_error(), Some(Ok(_))) {
            let lines: String = ids.iter().map(|id| format!("ambiguous {id}\n")).collect();
            if let Ok(mut f) = self.file.lock() {
                // One write for all lines: atomic among appenders for lines this short.
                let _ = f.write_all(lines.as_bytes());
            }
        }
        Ok(())
    }
}

pub(crate) fn run(args: &DriveArgs) -> Result<i32, DriveError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    // lettre's connection pool spawns its reaper on the runtime it is built in.
    let _entered = runtime.enter();
    runtime.block_on(run_async(args))
}

async fn run_async(args: &DriveArgs) -> Result<i32, DriveError> {
    let queue_url =
        std::env::var("COURIER_QUEUE_URL").map_err(|_| DriveError::Env("COURIER_QUEUE_URL"))?;
    let queue_arn = std::env::var("COURIER_QUEUE_ARN").unwrap_or_else(|_| {
        let name = queue_url.rsplit('/').next().unwrap_or("courier");
        format!("arn:aws:sqs:us-east-1:000000000000:{name}")
    });
    // The retry queue's event source, when the stack has one (its ARN: the send queue's account
    // and region, its own name).
    let mut lanes = vec![(queue_url.clone(), queue_arn.clone(), args.instances.max(1))];
    if let Ok(retry_url) = std::env::var("COURIER_RETRY_QUEUE_URL")
        && !retry_url.is_empty()
        && retry_url != queue_url
    {
        let arn = courier_dev::sibling_queue_arn(&queue_arn, &retry_url);
        lanes.push((retry_url, arn, args.retry_instances));
    }
    if args.log {
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
            )
            .with_writer(std::io::stderr)
            .init();
    }
    // As `courier_send::wiring::from_env`, with the journal on the DynamoDB client.
    let (config, resources, policy) = SendConfig::from_lookup(|k| std::env::var(k).ok())
        .map_err(courier_send::wiring::WiringError::from)?;
    let sdk = courier_adapters::aws::sdk_config().await;
    let mut clients = courier_adapters::aws::Clients::new(&sdk);
    if let Some(path) = &args.journal {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let journal = UnknownJournal {
            table: resources.status_table.clone(),
            file: Arc::new(Mutex::new(file)),
        };
        clients.dynamodb = aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(&sdk)
                .interceptor(journal)
                .build(),
        );
    }
    let pipeline = Arc::new(courier_send::wiring::wire(
        &clients, config, &resources, policy,
    )?);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let last_received = Arc::new(Mutex::new(Instant::now()));
    let totals: Arc<Mutex<std::collections::BTreeMap<String, u64>>> = Arc::default();
    let started = Instant::now();
    for (url, _, instances) in &lanes {
        println!(
            "{}: driving {url} with {instances} instances (pid {})",
            args.name,
            std::process::id()
        );
    }
    let lanes = lanes
        .into_iter()
        .enumerate()
        .flat_map(|(lane, (url, arn, n))| (0..n).map(move |k| (lane, k, url.clone(), arn.clone())));
    for (lane, instance, url, arn) in lanes {
        let driver = Driver {
            sqs: sqs.clone(),
            queue_url: url,
            queue_arn: arn,
            batch_size: 10,
            visibility_timeout: args.visibility_timeout,
            wait_seconds: args.wait_seconds,
            function_timeout: Duration::from_secs(args.function_timeout),
        };
        let pipeline = Arc::clone(&pipeline);
        let last_received = Arc::clone(&last_received);
        let totals = Arc::clone(&totals);
        let lane = if lane == 0 { "" } else { "retry-" };
        let name = format!("{}-{}-{lane}{instance}", args.name, std::process::id());
        let function_timeout = args.function_timeout;
        tokio::spawn(async move {
            let mut n = 0u64;
            loop {
                n += 1;
                // Lambda ends an invocation at the function's timeout and resets the execution
                // environment; so does this process (the chaos suite starts a new one).
                let limit = Duration::from_secs(function_timeout + 5);
                let polled = tokio::time::timeout(
                    limit,
                    driver.poll_once(&pipeline, &format!("{name}-{n}")),
                )
                .await;
                let Ok(polled) = polled else {
                    eprintln!(
                        "{name}: invocation {n} ran past the function timeout ({} s); exiting as Lambda resets the environment",
                        limit.as_secs()
                    );
                    std::process::exit(3);
                };
                match polled {
                    Ok((stats, report)) => {
                        if stats.received > 0
                            && let Ok(mut t) = last_received.lock()
                        {
                            *t = Instant::now();
                        }
                        if let Ok(mut t) = totals.lock() {
                            for (k, v) in report.metrics.counts {
                                *t.entry(k).or_default() += v;
                            }
                        }
                    }
                    Err(e) => {
                        eprintln!("{name}: {e}");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
            }
        });
    }
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let snapshot = totals.lock().map(|t| t.clone()).unwrap_or_default();
        let line: Vec<String> = snapshot.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!(
            "{}: {:.0} s {}",
            args.name,
            started.elapsed().as_secs_f64(),
            line.join(" ")
        );
        let idle = last_received
            .lock()
            .map(|t| t.elapsed())
            .unwrap_or_default();
        if args.idle_exit > 0 && idle >= Duration::from_secs(args.idle_exit) {
            println!(
                "{}: queue idle for {} s; exiting",
                args.name,
                idle.as_secs()
            );
            return Ok(0);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: DriveArgs,
    }

    /// One loop on the retry queue unless told otherwise; none is refused (the queue's copies
    /// would never be taken).
    #[test]
    fn the_retry_queue_gets_at_least_one_loop() {
        let parse =
            |args: &[&str]| T::try_parse_from(std::iter::once("drive").chain(args.iter().copied()));
        assert_eq!(parse(&[]).unwrap().a.retry_instances, 1);
        assert_eq!(
            parse(&["--retry-instances", "3"])
                .unwrap()
                .a
                .retry_instances,
            3
        );
        let zero = parse(&["--retry-instances", "0"])
            .err()
            .unwrap()
            .to_string();
        assert!(zero.contains("--retry-instances"), "{zero}");
    }
}
