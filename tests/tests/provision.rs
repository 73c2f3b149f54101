//! Local provisioning from `infra/template.yaml` (`courier_devkit::provision`) on the emulator:
//! the stack has the template's settings, and a stack that cannot be created is an error that
//! says why.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers fail the test loudly

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::QueueAttributeName;
use courier_devkit::provision::{QueueSettings, TOKEN_TAG, created_by, ours_already, provision};
use courier_integration::{aws_config, emulator, role_arn, unique};
use serde_json::Value;

const SETTINGS: QueueSettings = QueueSettings {
    max_receive_count: 3,
    visibility_timeout: Duration::from_secs(30),
};

async fn queue_attributes(sqs: &aws_sdk_sqs::Client, url: &str) -> Value {
    let attrs = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .expect("queue attributes")
        .attributes
        .unwrap_or_default();
    attrs
        .into_iter()
        .map(|(k, v)| (k.as_str().to_owned(), Value::String(v)))
        .collect()
}

#[tokio::test]
async fn the_stack_has_the_templates_settings() {
    // GIVEN the emulator WHEN Courier's data plane is provisioned from the template
    let sdk = aws_config().await;
    let started = Instant::now();
    let p = provision(&sdk, &unique("prov"), &role_arn(), SETTINGS)
        .await
        .expect("provision");
    eprintln!(
        "one stack on {}: {:.2} s",
        emulator(),
        started.elapsed().as_secs_f64()
    );

    // THEN the send queue has the template's redrive policy and the given settings
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let send = queue_attributes(&sqs, &p.queue_url).await;
    assert_eq!(send["VisibilityTimeout"], "30");
    assert_eq!(send["MessageRetentionPeriod"], "345600");
    assert_eq!(send["QueueArn"].as_str(), Some(p.queue_arn.as_str()));
    let redrive: Value = serde_json::from_str(send["RedrivePolicy"].as_str().unwrap()).unwrap();
    let redrive_dlq = queue_attributes(&sqs, &p.redrive_dlq_url).await;
    assert_eq!(redrive["deadLetterTargetArn"], redrive_dlq["QueueArn"]);
    assert_eq!(
        redrive["maxReceiveCount"].to_string().trim_matches('"'),
        "3"
    );
    assert_eq!(redrive_dlq["MessageRetentionPeriod"], "1209600");
    let letters = queue_attributes(&sqs, &p.dead_letter_queue_url).await;
    assert_eq!(letters["MessageRetentionPeriod"], "1209600");
    // the URLs point at the emulator: a message goes through
    sqs.send_message()
        .queue_url(&p.events_queue_url)
        .message_body("ping")
        .send()
        .await
        .expect("send to the events queue");

    // AND the tables have the template's keys and indexes
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let status = dynamodb
        .describe_table()
        .table_name(&p.status_table)
        .send()
        .await
        .expect("status table")
        .table
        .unwrap();
    assert_eq!(status.key_schema()[0].attribute_name(), "message_id");
    let by_open = status
        .global_secondary_indexes()
        .iter()
        .find(|g| g.index_name() == Some("by_open"))
        .expect("by_open index");
    let keys: Vec<&str> = by_open
        .key_schema()
        .iter()
        .map(|k| k.attribute_name())
        .collect();
    assert_eq!(keys, ["open_state", "open_at"]);
    let projection = by_open.projection().unwrap();
    assert_eq!(projection.projection_type().unwrap().as_str(), "INCLUDE");
    let non_key: BTreeSet<&str> = projection
        .non_key_attributes()
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(
        non_key,
        BTreeSet::from(["status", "lease_until", "attempt", "updated_at", "trace_id"])
    );
    let control = dynamodb
        .describe_table()
        .table_name(&p.control_table)
        .send()
        .await
        .expect("control table")
        .table
        .unwrap();
    let keys: Vec<&str> = control
        .key_schema()
        .iter()
        .map(|k| k.attribute_name())
        .collect();
    assert_eq!(keys, ["pk", "sk"]);
    let index = dynamodb
        .describe_table()
        .table_name(&p.letter_index_table)
        .send()
        .await
        .expect("letter index")
        .table
        .unwrap();
    let gsis: BTreeSet<&str> = index
        .global_secondary_indexes()
        .iter()
        .filter_map(|g| g.index_name())
        .collect();
    assert_eq!(gsis, BTreeSet::from(["by_campaign", "by_category"]));
    dynamodb
        .describe_table()
        .table_name(&p.suppression_table)
        .send()
        .await
        .expect("suppression table");

    // AND both buckets exist
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&sdk)
            .force_path_style(true)
            .build(),
    );
    for bucket in [&p.template_bucket, &p.archive_bucket] {
        s3.head_bucket()
            .bucket(bucket)
            .send()
            .await
            .unwrap_or_else(|e| panic!("bucket {bucket}: {e:?}"));
    }

    // AND the state machine runs the delay definition of the code
    let machine = aws_sdk_sfn::Client::new(&sdk)
        .describe_state_machine()
        .state_machine_arn(&p.delay_state_machine_arn)
        .send()
        .await
        .expect("state machine");
    let deployed: Value = serde_json::from_str(machine.definition()).unwrap();
    let code: Value = serde_json::from_str(courier_core::delay::DEFINITION).unwrap();
    assert_eq!(deployed["States"], code["States"]);
}

#[tokio::test]
async fn a_failed_attempt_recognises_its_own_stack_by_the_token_tag() {
    // GIVEN a stack created with a provision token tag (as an attempt of `provision` that failed
    // part-way leaves it; only such a stack is deleted before the next attempt)
    let sdk = aws_config().await;
    let cfn = aws_sdk_cloudformation::Client::new(&sdk);
    let name = unique("prov-token");
    let template = serde_json::json!({
        "Resources": {"Q": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": format!("{name}-q")}}}
    });
    cfn.create_stack()
        .stack_name(&name)
        .template_body(template.to_string())
        .tags(
            aws_sdk_cloudformation::types::Tag::builder()
                .key(TOKEN_TAG)
                .value("token-of-the-first-attempt")
                .build(),
        )
        .send()
        .await
        .expect("create stack");
    // THEN the same call's token claims it, and any other token does not
    assert!(
        created_by(&cfn, &name, "token-of-the-first-attempt")
            .await
            .unwrap()
    );
    assert!(!created_by(&cfn, &name, "someone-else").await.unwrap());
    // AND a second create of that name (a request applied twice) is this token's own stack,
    // while for any other token it stays a clash
    let clash = cfn
        .create_stack()
        .stack_name(&name)
        .template_body(template.to_string())
        .send()
        .await
        .expect_err("the name is taken");
    assert!(ours_already(&cfn, &name, "token-of-the-first-attempt", &clash).await);
    assert!(!ours_already(&cfn, &name, "someone-else", &clash).await);
}

#[tokio::test]
async fn a_second_stack_of_the_same_name_is_refused() {
    let sdk = aws_config().await;
    let prefix = unique("prov-twice");
    provision(&sdk, &prefix, &role_arn(), SETTINGS)
        .await
        .expect("first provision");
    let err = provision(&sdk, &prefix, &role_arn(), SETTINGS)
        .await
        .expect_err("the same stack twice");
    assert_eq!(err.operation, "create stack");
    assert!(err.message.contains("exists"), "{}", err.message);
}

#[tokio::test]
async fn a_stack_that_cannot_be_created_reports_why() {
    // GIVEN a table that already has the name the stack's status table will get
    let sdk = aws_config().await;
    let prefix = unique("prov-clash");
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    dynamodb
        .create_table()
        .table_name(format!("{prefix}-status-table"))
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("k")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("k")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("create the clashing table");
    // WHEN the stack is created THEN it fails, and says why
    let err = provision(&sdk, &prefix, &role_arn(), SETTINGS)
        .await
        .expect_err("a clashing table");
    assert_eq!(err.operation, "create stack");
    if emulator() == "moto" {
        // moto answers CreateStack itself with DynamoDB's error (as JSON the SDK cannot parse).
        assert!(!err.message.is_empty());
    } else {
        assert!(
            err.message.contains("StatusTable") && err.message.contains("already exists"),
            "{}",
            err.message
        );
    }
}

#[tokio::test]
async fn concurrent_stacks_all_get_created() {
    // GIVEN several stacks created at once (moto creates their resources inside CreateStack,
    // and its queue map is not safe under concurrent creation: a stack can fail part-way)
    let sdk = aws_config().await;
    let prefixes: Vec<String> = (0..4).map(|i| unique(&format!("prov-par{i}"))).collect();
    let role = role_arn();
    // WHEN they are provisioned concurrently
    let stacks =
        futures::future::join_all(prefixes.iter().map(|p| provision(&sdk, p, &role, SETTINGS)))
            .await;
    // THEN every one is created, each under its prefix (or the prefix of a later attempt), and
    // its resources carry its name
    for (prefix, stack) in prefixes.iter().zip(stacks) {
        let stack = stack.unwrap_or_else(|e| panic!("{prefix}: {e}"));
        assert!(stack.stack_name.starts_with(prefix.as_str()));
        assert!(
            stack.status_table.starts_with(&stack.stack_name),
            "{} in {}",
            stack.status_table,
            stack.stack_name
        );
    }
}
