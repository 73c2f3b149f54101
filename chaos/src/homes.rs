//! After the chaos phase: the sweeper and the archiver run on the stack as they would on their
//! schedules, and the S3 archive is read back from S3 for the audit (each archived payload
//! fingerprinted again, independently of the index that wrote it).

use std::collections::HashMap;

use courier_adapters::aws::Clients;
use courier_archiver::ArchiveReport;
use courier_core::letters::ArchiveAges;
use courier_devkit::provision::Provisioned;

use crate::run::RunError;

/// Runs the sweeper once with no grace past the leases: a `processing` job left behind (its
/// lease expired, nothing owns it) is marked `unknown`, which the audit then finds homeless.
pub async fn sweep(
    sdk: &aws_config::SdkConfig,
    stack: &Provisioned,
) -> Result<courier_sweeper::SweepReport, RunError> {
    let sweeper = courier_sweeper::wire(
        &Clients::new(sdk),
        courier_sweeper::Settings {
            status_table: stack.status_table.clone(),
            lease_grace: chrono::Duration::zero(),
            no_outcome_after: chrono::Duration::hours(6),
            copy_grace: chrono::Duration::hours(1),
            outcome_bus: Some(stack.outcome_bus.clone()),
        },
    );
    Ok(sweeper
        .run(chrono::Utc::now() + chrono::Duration::seconds(120))
        .await?)
}

/// Archives every dead letter now (ages of zero), as a scheduled run would after the real
/// ages, until both dead-letter queues are empty of due work.
pub async fn archive(
    sdk: &aws_config::SdkConfig,
    stack: &Provisioned,
) -> Result<ArchiveReport, RunError> {
    let ages = ArchiveAges::zero();
    let settings = courier_dev::archiver_settings(stack, ages);
    let archiver = courier_archiver::wiring::wire(&Clients::new(sdk), &settings);
    let mut total = ArchiveReport::default();
    for run in 0..20 {
        let report = archiver
            .run(
                &format!("chaos-{run}"),
                chrono::Utc::now() + chrono::Duration::seconds(120),
            )
            .await
            .map_err(|e| RunError::Msg(format!("archiver: {e}")))?;
        total.archived += report.archived;
        total.objects.extend(report.objects);
        total.hidden += report.hidden;
        total.indexed_raw += report.indexed_raw;
        if !report.out_of_time {
            break;
        }
    }
    Ok(total)
}

/// Every letter in the archive bucket, read from S3: letter id -> the fingerprint of its
/// payload (empty when it has none).
pub async fn read_archive(
    sdk: &aws_config::SdkConfig,
    stack: &Provisioned,
) -> Result<HashMap<String, String>, RunError> {
    let s3 = aws_sdk_s3::Client::new(sdk);
    let mut out = HashMap::new();
    let mut token: Option<String> = None;
    loop {
        let page = s3
            .list_objects_v2()
            .bucket(&stack.archive_bucket)
            .set_continuation_token(token.take())
            .send()
            .await
            .map_err(courier_adapters::aws::store_error("list archive"))?;
        for object in page.contents() {
            let Some(key) = object.key() else { continue };
            let bytes = s3
                .get_object()
                .bucket(&stack.archive_bucket)
                .key(key)
                .send()
                .await
                .map_err(courier_adapters::aws::store_error("get archive"))?
                .body
                .collect()
                .await
                .map_err(|e| courier_core::ports::StoreError::new("read archive", e))?
                .into_bytes();
            for letter in courier_archiver::decode(&bytes)? {
                let print = letter
                    .record
                    .payload
                    .as_deref()
                    .map(courier_core::envelope::job_fingerprint)
                    .unwrap_or_default();
                out.insert(letter.letter_id, print);
            }
        }
        match page.next_continuation_token() {
            Some(next) => token = Some(next.to_owned()),
            None => return Ok(out),
        }
    }
}
