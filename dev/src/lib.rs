//! `courier-dev`: the developer's side of Courier, which no Lambda and not `courierctl` links:
//! the local event-source driver and the wiring of the functions onto a stack provisioned on an
//! emulator. The `courier-dev` binary (demo, drive, provision, simulate) is built on it, and so
//! are the integration tests, the chaos suite and the benchmarks.
//!
//! # Layout
//! - [`driver`]: Lambda's SQS event source mapping as a local loop.
//! - [`function_url`]: a Lambda function URL on the loopback (the unsubscribe function's).
//! - [`ses`]: a stand-in for SES's event destination (the events SES would publish for what it
//!   accepted), for the demo and the chaos suite.
//! - [`send_resources`], [`archiver_settings`], [`events_settings`]: the functions' resources on a
//!   provisioned stack.
//! - The binary: `demo` (what `make demo` runs), `drive` (the send function as a local process),
//!   `provision` (a stack on the emulator) and `simulate` (the outage simulator, offline).

pub mod driver;
pub mod function_url;
pub mod ses;

use courier_core::ports::Provider;
use courier_devkit::provision::Provisioned;
use courier_send::config::{Resources, SmtpSettings};

/// The resources of a stack provisioned on an emulator ([`courier_devkit::provision`]), sending
/// through `providers` in that order.
pub fn send_resources(
    stack: &Provisioned,
    providers: &[Provider],
    ses_configuration_set: Option<String>,
    smtp: Option<SmtpSettings>,
) -> Resources {
    Resources {
        queue_url: stack.queue_url.clone(),
        retry_queue_url: Some(stack.retry_queue_url.clone()),
        dead_letter_queue_url: stack.dead_letter_queue_url.clone(),
        letter_index_table: stack.letter_index_table.clone(),
        status_table: stack.status_table.clone(),
        suppression_table: stack.suppression_table.clone(),
        control_table: stack.control_table.clone(),
        template_bucket: stack.template_bucket.clone(),
        payload_bucket: stack.payload_bucket.clone(),
        delay_state_machine_arn: stack.delay_state_machine_arn.clone(),
        providers: providers.to_vec(),
        ses_configuration_set,
        smtp,
        envelope_key_secret: stack.envelope_key_secret.clone(),
        outcome_bus: Some(stack.outcome_bus.clone()),
        unsubscribe: None,
    }
}

/// The archiver's settings on a stack provisioned on an emulator, archiving at `ages`.
pub fn archiver_settings(
    stack: &Provisioned,
    ages: courier_core::letters::ArchiveAges,
) -> courier_archiver::wiring::Settings {
    courier_archiver::wiring::Settings {
        dead_letter_queue_url: stack.dead_letter_queue_url.clone(),
        redrive_queue_url: stack.redrive_dlq_url.clone(),
        letter_index_table: stack.letter_index_table.clone(),
        archive_bucket: stack.archive_bucket.clone(),
        payload_bucket: stack.payload_bucket.clone(),
        ages,
    }
}

/// The events function's settings on a stack provisioned on an emulator, admitting unsigned
/// notifications (the SES stand-in, [`ses`], holds no SNS key).
pub fn events_settings(
    stack: &Provisioned,
    policy: courier_core::policy::RetryPolicy,
) -> courier_events::wiring::Settings {
    courier_events::wiring::Settings {
        status_table: stack.status_table.clone(),
        suppression_table: stack.suppression_table.clone(),
        control_table: stack.control_table.clone(),
        queue_url: stack.queue_url.clone(),
        retry_queue_url: Some(stack.retry_queue_url.clone()),
        delay_state_machine_arn: stack.delay_state_machine_arn.clone(),
        dead_letter_queue_url: stack.dead_letter_queue_url.clone(),
        letter_index_table: stack.letter_index_table.clone(),
        payload_bucket: stack.payload_bucket.clone(),
        policy,
        guard: courier_core::reputation::GuardConfig::default(),
        soft_suppression: chrono::Duration::days(
            courier_events::wiring::DEFAULT_SOFT_SUPPRESSION_DAYS,
        ),
        admission: courier_events::Admission::Any,
        archive_retention_days: courier_adapters::aws::letters::DEFAULT_ARCHIVE_RETENTION_DAYS,
        envelope_key_secret: stack.envelope_key_secret.clone(),
        live_settings_cache: chrono::Duration::seconds(30),
        outcome_bus: Some(stack.outcome_bus.clone()),
    }
}

/// The ARN of the queue at `url` in the account and region of `sibling_arn` (another queue's
/// ARN): SQS names a queue by the last segment of both.
pub fn sibling_queue_arn(sibling_arn: &str, url: &str) -> String {
    let name = url.rsplit('/').next().unwrap_or_default();
    match sibling_arn.rsplit_once(':') {
        Some((account, _)) => format!("{account}:{name}"),
        None => format!("arn:aws:sqs:us-east-1:000000000000:{name}"),
    }
}

/// A queue's ARN, read from its attributes (the local driver reports it in each record).
pub async fn queue_arn(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
) -> Result<String, courier_core::ports::StoreError> {
    use aws_sdk_sqs::types::QueueAttributeName;
    sqs.get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(courier_adapters::aws::store_error("queue attributes"))?
        .attributes
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .ok_or_else(|| {
            courier_core::ports::StoreError::msg("queue attributes", format!("no arn for {url}"))
        })
}
