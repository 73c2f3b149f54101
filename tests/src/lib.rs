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

/// A fresh set of Courier's resources on the target emulator, with unique names.
pub struct Stack {
    pub sdk: aws_config::SdkConfig,
    pub resources: courier_send::config::Resources,
    /// The queue SQS redrives raw messages to after maxReceiveCount.
    pub redrive_dlq_url: String,
    pub queue_arn: String,
    pub sender: String,
}

/// maxReceiveCount of the send queue in tests.
pub const MAX_RECEIVE_COUNT: i32 = 3;

#[allow(clippy::expect_used)]
impl Stack {
    pub async fn create(providers: &[&str]) -> Stack {
        use aws_sdk_dynamodb::types::{
            AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
        };
        use aws_sdk_sqs::types::QueueAttributeName;
        let sdk = aws_config().await;
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
        let id = unique("courier");
        let queue = |name: String, attrs: Vec<(QueueAttributeName, String)>| {
            let sqs = sqs.clone();
            async move {
                let mut req = sqs.create_queue().queue_name(name);
                for (k, v) in attrs {
                    req = req.attributes(k, v);
                }
                req.send()
                    .await
                    .expect("create_queue")
                    .queue_url
                    .expect("queue url")
            }
        };
        let arn_of = |url: String| {
            let sqs = sqs.clone();
            async move {
                sqs.get_queue_attributes()
                    .queue_url(url)
                    .attribute_names(QueueAttributeName::QueueArn)
                    .send()
                    .await
                    .expect("queue attributes")
                    .attributes
                    .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
                    .expect("queue arn")
            }
        };
        let redrive_dlq_url = queue(format!("{id}-redrive"), vec![]).await;
        let redrive_arn = arn_of(redrive_dlq_url.clone()).await;
        let queue_url = queue(
            format!("{id}-send"),
            vec![(
                QueueAttributeName::RedrivePolicy,
                format!(r#"{{"deadLetterTargetArn":"{redrive_arn}","maxReceiveCount":"{MAX_RECEIVE_COUNT}"}}"#),
            )],
        )
        .await;
        let queue_arn = arn_of(queue_url.clone()).await;
        let dead_letter_queue_url = queue(format!("{id}-letters"), vec![]).await;
        let table = |name: String, keys: Vec<(&'static str, KeyType)>| {
            let dynamodb = dynamodb.clone();
            async move {
                let mut req = dynamodb
                    .create_table()
                    .table_name(&name)
                    .billing_mode(BillingMode::PayPerRequest);
                for (attr, kind) in keys {
                    req = req
                        .attribute_definitions(
                            AttributeDefinition::builder()
                                .attribute_name(attr)
                                .attribute_type(ScalarAttributeType::S)
                                .build()
                                .expect("attr"),
                        )
                        .key_schema(
                            KeySchemaElement::builder()
                                .attribute_name(attr)
                                .key_type(kind)
                                .build()
                                .expect("key"),
                        );
                }
                req.send().await.expect("create_table");
                name
            }
        };
        let status_table = table(format!("{id}-status"), vec![("message_id", KeyType::Hash)]).await;
        let suppression_table = table(
            format!("{id}-suppression"),
            vec![("address", KeyType::Hash)],
        )
        .await;
        let breaker_table = table(
            format!("{id}-control"),
            vec![("pk", KeyType::Hash), ("sk", KeyType::Range)],
        )
        .await;
        let template_bucket = id.to_lowercase();
        aws_sdk_s3::Client::new(&sdk)
            .create_bucket()
            .bucket(&template_bucket)
            .send()
            .await
            .expect("create_bucket");
        let delay_state_machine_arn = aws_sdk_sfn::Client::new(&sdk)
            .create_state_machine()
            .name(format!("{id}-delay"))
            .definition(courier::delay::DEFINITION)
            .role_arn(role_arn())
            .send()
            .await
            .expect("create_state_machine")
            .state_machine_arn;
        let sender = format!("sender-{}@courier.test", std::process::id());
        aws_sdk_sesv2::Client::new(&sdk)
            .create_email_identity()
            .email_identity(&sender)
            .send()
            .await
            .expect("create_email_identity");
        let smtp = std::env::var("COURIER_SMTP_PORT").ok().map(|port| {
            courier_send::config::SmtpSettings {
                host: require_env("COURIER_SMTP_HOST"),
                port: port.parse().expect("port"),
                tls: "none".into(),
                username: None,
                password: None,
                timeout: Duration::from_secs(5),
            }
        });
        Stack {
            sdk,
            resources: courier_send::config::Resources {
                queue_url,
                dead_letter_queue_url,
                status_table,
                suppression_table,
                breaker_table,
                template_bucket,
                delay_state_machine_arn,
                providers: providers.iter().map(|p| (*p).to_owned()).collect(),
                ses_configuration_set: None,
                smtp,
            },
            redrive_dlq_url,
            queue_arn,
            sender,
        }
    }

    pub fn sqs(&self) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::new(&self.sdk)
    }

    /// Receives every message currently visible on `url` (deleting them).
    pub async fn drain(&self, url: &str) -> Vec<aws_sdk_sqs::types::Message> {
        let sqs = self.sqs();
        let mut all = Vec::new();
        loop {
            let out = sqs
                .receive_message()
                .queue_url(url)
                .max_number_of_messages(10)
                .wait_time_seconds(1)
                .message_attribute_names("All")
                .send()
                .await
                .expect("receive");
            let batch = out.messages.unwrap_or_default();
            if batch.is_empty() {
                return all;
            }
            for m in &batch {
                if let Some(h) = &m.receipt_handle {
                    sqs.delete_message()
                        .queue_url(url)
                        .receipt_handle(h)
                        .send()
                        .await
                        .expect("delete");
                }
            }
            all.extend(batch);
        }
    }
}
