//! Creates Courier's resources with the SDK, for the local run and the integration tests:
//! the send queue with its redrive DLQ, the dead-letter queue, the status, suppression, control
//! and letter-index tables, the template and archive buckets and the delay state machine.

use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use aws_sdk_sqs::types::QueueAttributeName;

use super::store_error;
use crate::ports::StoreError;

/// Names and addresses of a provisioned stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provisioned {
    pub queue_url: String,
    pub queue_arn: String,
    /// Where SQS redrives raw messages after maxReceiveCount.
    pub redrive_dlq_url: String,
    /// Where Courier writes dead letters with their records.
    pub dead_letter_queue_url: String,
    pub status_table: String,
    pub suppression_table: String,
    pub control_table: String,
    pub template_bucket: String,
    pub delay_state_machine_arn: String,
    /// The searchable dead-letter index.
    pub letter_index_table: String,
    /// Where the archiver writes archived dead letters.
    pub archive_bucket: String,
}

/// Settings of the send queue.
#[derive(Debug, Clone, Copy)]
pub struct QueueSettings {
    pub max_receive_count: u32,
    pub visibility_timeout: Duration,
}

async fn create_queue(
    sqs: &aws_sdk_sqs::Client,
    name: &str,
    attributes: Vec<(QueueAttributeName, String)>,
) -> Result<(String, String), StoreError> {
    let mut request = sqs.create_queue().queue_name(name);
    for (k, v) in attributes {
        request = request.attributes(k, v);
    }
    let url = request
        .send()
        .await
        .map_err(store_error("create queue"))?
        .queue_url
        .ok_or_else(|| StoreError::msg("create queue", "no queue url"))?;
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(store_error("queue attributes"))?
        .attributes
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .ok_or_else(|| StoreError::msg("queue attributes", "no queue arn"))?;
    Ok((url, arn))
}

async fn create_table(
    dynamodb: &aws_sdk_dynamodb::Client,
    name: &str,
    keys: &[(&str, KeyType)],
) -> Result<String, StoreError> {
    let mut request = dynamodb
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest);
    for (attr, kind) in keys {
        let definition = AttributeDefinition::builder()
            .attribute_name(*attr)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .map_err(|e| StoreError::new("create table", e))?;
        let key = KeySchemaElement::builder()
            .attribute_name(*attr)
            .key_type(kind.clone())
            .build()
            .map_err(|e| StoreError::new("create table", e))?;
        request = request.attribute_definitions(definition).key_schema(key);
    }
    request.send().await.map_err(store_error("create table"))?;
    Ok(name.to_owned())
}

/// The letter index: key `letter_id`, and two GSIs for searches newest-first by category and by
/// campaign (`dead_lettered_at` as the sort key). Projects everything: a query needs no second read.
async fn create_letter_index(
    dynamodb: &aws_sdk_dynamodb::Client,
    name: &str,
) -> Result<String, StoreError> {
    use aws_sdk_dynamodb::types::{GlobalSecondaryIndex, Projection, ProjectionType};
    let attr = |name: &str, kind: ScalarAttributeType| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(kind)
            .build()
            .map_err(|e| StoreError::new("create table", e))
    };
    let key = |name: &str, kind: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build()
            .map_err(|e| StoreError::new("create table", e))
    };
    let gsi = |index: &str, hash: &str| -> Result<GlobalSecondaryIndex, StoreError> {
        GlobalSecondaryIndex::builder()
            .index_name(index)
            .key_schema(key(hash, KeyType::Hash)?)
            .key_schema(key("dead_lettered_at", KeyType::Range)?)
            .projection(
                Projection::builder()
                    .projection_type(ProjectionType::All)
                    .build(),
            )
            .build()
            .map_err(|e| StoreError::new("create table", e))
    };
    dynamodb
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attr("letter_id", ScalarAttributeType::S)?)
        .attribute_definitions(attr("category", ScalarAttributeType::S)?)
        .attribute_definitions(attr("campaign_id", ScalarAttributeType::S)?)
        .attribute_definitions(attr("dead_lettered_at", ScalarAttributeType::N)?)
        .key_schema(key("letter_id", KeyType::Hash)?)
        .global_secondary_indexes(gsi(crate::aws::letters::BY_CATEGORY, "category")?)
        .global_secondary_indexes(gsi(crate::aws::letters::BY_CAMPAIGN, "campaign_id")?)
        .send()
        .await
        .map_err(store_error("create table"))?;
    Ok(name.to_owned())
}

/// Creates every resource, named `{prefix}-...` (the bucket lower-cased).
pub async fn provision(
    sdk: &aws_config::SdkConfig,
    prefix: &str,
    role_arn: &str,
    queue: QueueSettings,
) -> Result<Provisioned, StoreError> {
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let dynamodb = aws_sdk_dynamodb::Client::new(sdk);
    let (redrive_dlq_url, redrive_arn) = create_queue(
        &sqs,
        &format!("{prefix}-redrive"),
        vec![(QueueAttributeName::MessageRetentionPeriod, "1209600".into())],
    )
    .await?;
    let redrive = format!(
        r#"{{"deadLetterTargetArn":"{redrive_arn}","maxReceiveCount":"{}"}}"#,
        queue.max_receive_count
    );
    let (queue_url, queue_arn) = create_queue(
        &sqs,
        &format!("{prefix}-send"),
        vec![
            (QueueAttributeName::RedrivePolicy, redrive),
            (
                QueueAttributeName::VisibilityTimeout,
                queue.visibility_timeout.as_secs().to_string(),
            ),
        ],
    )
    .await?;
    let (dead_letter_queue_url, _) = create_queue(
        &sqs,
        &format!("{prefix}-letters"),
        vec![(QueueAttributeName::MessageRetentionPeriod, "1209600".into())],
    )
    .await?;
    let status_table = create_table(
        &dynamodb,
        &format!("{prefix}-status"),
        &[("message_id", KeyType::Hash)],
    )
    .await?;
    let suppression_table = create_table(
        &dynamodb,
        &format!("{prefix}-suppression"),
        &[("address", KeyType::Hash)],
    )
    .await?;
    let control_table = create_table(
        &dynamodb,
        &format!("{prefix}-control"),
        &[("pk", KeyType::Hash), ("sk", KeyType::Range)],
    )
    .await?;
    let letter_index_table =
        create_letter_index(&dynamodb, &format!("{prefix}-letters-index")).await?;
    let template_bucket = format!("{prefix}-templates").to_lowercase();
    let archive_bucket = format!("{prefix}-archive").to_lowercase();
    let s3 = aws_sdk_s3::Client::new(sdk);
    for bucket in [&template_bucket, &archive_bucket] {
        s3.create_bucket()
            .bucket(bucket)
            .send()
            .await
            .map_err(store_error("create bucket"))?;
    }
    let delay_state_machine_arn = aws_sdk_sfn::Client::new(sdk)
        .create_state_machine()
        .name(format!("{prefix}-delay"))
        .definition(crate::delay::DEFINITION)
        .role_arn(role_arn)
        .send()
        .await
        .map_err(store_error("create state machine"))?
        .state_machine_arn;
    Ok(Provisioned {
        queue_url,
        queue_arn,
        redrive_dlq_url,
        dead_letter_queue_url,
        status_table,
        suppression_table,
        control_table,
        template_bucket,
        delay_state_machine_arn,
        letter_index_table,
        archive_bucket,
    })
}
