//! `courier-dev provision`: deploys the data plane of `infra/template.yaml` (queues, tables,
//! buckets, the delay state machine) as a CloudFormation stack named after the prefix on the
//! endpoint the environment points at (an emulator) and prints the functions' configuration as
//! `export` lines.

use std::io::Write;
use std::time::Duration;

use courier_core::ports::StoreError;
use courier_devkit::provision::{Provisioned, QueueSettings, provision};

/// Runs the command; returns the exit code.
pub(crate) fn run(prefix: &str, role_arn: &str, out: &mut dyn Write) -> std::io::Result<i32> {
    if let Err(code) = require_endpoint(std::env::var("AWS_ENDPOINT_URL").ok().as_deref()) {
        return Ok(code);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(async {
        let sdk = courier_adapters::aws::sdk_config().await;
        provision(
            &sdk,
            prefix,
            role_arn,
            QueueSettings {
                max_receive_count: 5,
                visibility_timeout: Duration::from_secs(180),
            },
        )
        .await
    });
    report(result, out)
}

/// The command only runs against an emulator: exit code 2 without `AWS_ENDPOINT_URL`.
fn require_endpoint(endpoint: Option<&str>) -> Result<(), i32> {
    match endpoint {
        Some(e) if !e.is_empty() => Ok(()),
        _ => {
            eprintln!(
                "courier-dev provision: AWS_ENDPOINT_URL is not set; this command is for emulators (use infra/ for AWS)"
            );
            Err(2)
        }
    }
}

/// Prints the stack's settings as `export` lines (exit code 0), or the error (exit code 1).
fn report(result: Result<Provisioned, StoreError>, out: &mut dyn Write) -> std::io::Result<i32> {
    match result {
        Ok(stack) => {
            for (k, v) in [
                ("COURIER_QUEUE_URL", &stack.queue_url),
                ("COURIER_QUEUE_ARN", &stack.queue_arn),
                ("COURIER_RETRY_QUEUE_URL", &stack.retry_queue_url),
                ("COURIER_REDRIVE_DLQ_URL", &stack.redrive_dlq_url),
                (
                    "COURIER_DEAD_LETTER_QUEUE_URL",
                    &stack.dead_letter_queue_url,
                ),
                ("COURIER_EVENTS_QUEUE_URL", &stack.events_queue_url),
                ("COURIER_LETTER_INDEX_TABLE", &stack.letter_index_table),
                ("COURIER_ARCHIVE_BUCKET", &stack.archive_bucket),
                ("COURIER_PAYLOAD_BUCKET", &stack.payload_bucket),
                ("COURIER_STATUS_TABLE", &stack.status_table),
                ("COURIER_SUPPRESSION_TABLE", &stack.suppression_table),
                ("COURIER_CONTROL_TABLE", &stack.control_table),
                ("COURIER_TEMPLATE_BUCKET", &stack.template_bucket),
                (
                    "COURIER_DELAY_STATE_MACHINE_ARN",
                    &stack.delay_state_machine_arn,
                ),
                ("COURIER_ENVELOPE_KEY_SECRET", &stack.envelope_key_secret),
                ("COURIER_OUTCOME_BUS", &stack.outcome_bus),
            ] {
                writeln!(out, "export {k}='{v}'")?;
            }
            Ok(0)
        }
        Err(e) => {
            eprintln!("courier-dev provision: {e}");
            Ok(1)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn stack() -> Provisioned {
        let s = |v: &str| v.to_owned();
        Provisioned {
            stack_name: s("p"),
            queue_url: s("http://e/q"),
            queue_arn: s("arn:q"),
            retry_queue_url: s("http://e/rq"),
            redrive_dlq_url: s("http://e/r"),
            dead_letter_queue_url: s("http://e/l"),
            events_queue_url: s("http://e/ev"),
            status_table: s("p-status-table"),
            suppression_table: s("p-suppression-table"),
            control_table: s("p-control-table"),
            template_bucket: s("p-template-bucket"),
            delay_state_machine_arn: s("arn:sm"),
            letter_index_table: s("p-letter-index-table"),
            archive_bucket: s("p-archive-bucket"),
            payload_bucket: s("p-payload-bucket"),
            envelope_key_secret: s("arn:secret"),
            outcome_bus: s("p-outcome-bus"),
        }
    }

    #[test]
    fn without_an_endpoint_it_refuses_with_2() {
        assert_eq!(require_endpoint(None), Err(2));
        assert_eq!(require_endpoint(Some("")), Err(2));
        assert_eq!(require_endpoint(Some("http://127.0.0.1:4566")), Ok(()));
    }

    #[test]
    fn a_stack_prints_export_lines() {
        let mut out = Vec::new();
        assert_eq!(report(Ok(stack()), &mut out).unwrap(), 0);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("export COURIER_QUEUE_URL='http://e/q'\n"));
        assert!(text.contains("export COURIER_RETRY_QUEUE_URL='http://e/rq'\n"));
        assert!(text.contains("export COURIER_CONTROL_TABLE='p-control-table'\n"));
        assert!(text.contains("export COURIER_EVENTS_QUEUE_URL='http://e/ev'\n"));
        assert!(text.contains("export COURIER_ENVELOPE_KEY_SECRET='arn:secret'\n"));
        assert!(text.contains("export COURIER_OUTCOME_BUS='p-outcome-bus'\n"));
        assert_eq!(text.lines().count(), 16);
    }

    #[test]
    fn a_failed_stack_exits_1_and_prints_nothing() {
        let mut out = Vec::new();
        let err = StoreError::msg(
            "create stack",
            "stack p ended CREATE_FAILED: StatusTable: exists",
        );
        assert_eq!(report(Err(err), &mut out).unwrap(), 1);
        assert!(out.is_empty());
    }
}
