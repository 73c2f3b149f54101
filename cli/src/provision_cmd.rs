//! `courierctl provision`: deploys the data plane of `infra/template.yaml` (queues, tables,
//! buckets, the delay state machine) as a CloudFormation stack named after the prefix on the
//! endpoint the environment points at (an emulator) and prints the functions' configuration as
//! `export` lines.

use std::io::Write;
use std::time::Duration;

use courier::aws::provision::{QueueSettings, provision};

/// Runs the command; returns the exit code.
pub(crate) fn run(prefix: &str, role_arn: &str, out: &mut dyn Write) -> std::io::Result<i32> {
    if std::env::var("AWS_ENDPOINT_URL").is_err() {
        eprintln!(
            "courierctl provision: AWS_ENDPOINT_URL is not set; this command is for emulators (use infra/ for AWS)"
        );
        return Ok(2);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(async {
        let sdk = courier::aws::sdk_config().await;
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
    match result {
        Ok(stack) => {
            for (k, v) in [
                ("COURIER_QUEUE_URL", &stack.queue_url),
                ("COURIER_QUEUE_ARN", &stack.queue_arn),
                ("COURIER_REDRIVE_DLQ_URL", &stack.redrive_dlq_url),
                (
                    "COURIER_DEAD_LETTER_QUEUE_URL",
                    &stack.dead_letter_queue_url,
                ),
                ("COURIER_EVENTS_QUEUE_URL", &stack.events_queue_url),
                ("COURIER_LETTER_INDEX_TABLE", &stack.letter_index_table),
                ("COURIER_ARCHIVE_BUCKET", &stack.archive_bucket),
                ("COURIER_STATUS_TABLE", &stack.status_table),
                ("COURIER_SUPPRESSION_TABLE", &stack.suppression_table),
                ("COURIER_BREAKER_TABLE", &stack.control_table),
                ("COURIER_TEMPLATE_BUCKET", &stack.template_bucket),
                (
                    "COURIER_DELAY_STATE_MACHINE_ARN",
                    &stack.delay_state_machine_arn,
                ),
            ] {
                writeln!(out, "export {k}='{v}'")?;
            }
            Ok(0)
        }
        Err(e) => {
            eprintln!("courierctl provision: {e}");
            Ok(1)
        }
    }
}
