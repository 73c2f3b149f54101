//! Creates Courier's data plane on an emulator (moto or LocalStack) from `infra/template.yaml`,
//! for the local run, `courier-dev provision` and the integration tests: there is no second,
//! hand-written copy of the queue, table, bucket or state machine settings.
//!
//! [`local_template`] turns the SAM template into a plain CloudFormation template of the
//! resources an emulator can create: the SQS queues (with their redrive policies), the DynamoDB
//! tables (with their keys, GSIs, TTL), the S3 buckets (with their policies) and the delay state
//! machine (`AWS::Serverless::StateMachine` becomes `AWS::StepFunctions::StateMachine` with the
//! same definition). Functions, IAM, alarms, the dashboard, SES, SNS and schedules are left out,
//! and so is every resource that refers to one of them. Each resource is named
//! `{prefix}-{logical-id-in-kebab-case}` (buckets lower-cased), so stacks never collide.
//! [`provision`] deploys it with CloudFormation `CreateStack`, waits for it and reads the
//! physical ids back.
//!
//! Measured limitations of the emulators' CloudFormation (see `localstack/README.md`):
//! - LocalStack creates a KMS key for a table's `SSESpecification` and fails when the KMS service
//!   is not running (the harness does not start it), so the local template drops
//!   `SSESpecification` from tables. Emulators do not encrypt anything either way.
//! - moto ignores a table's `TimeToLiveSpecification` (TTL stays disabled there; moto never
//!   deletes expired items anyway); LocalStack enables it.
//! - moto with Step Functions execution switched on (as the harness runs it) serves Step
//!   Functions from another backend than the one its CloudFormation creates state machines in:
//!   `DescribeStateMachine` does not find the stack's machine, so it is then created through the
//!   Step Functions API from the same local-template properties.
//! - moto's queue physical ids (and `Ref`) are `https://sqs.us-east-1.amazonaws.com/...` URLs,
//!   so queue URLs are resolved with `GetQueueUrl` by name.
//! - moto's CloudFormation leaves an `AWS::Events::EventBus` out of the stack's resources: the
//!   outcome bus is created through EventBridge's API ([`outcome_bus`]).
//!
//! # Layout
//! - here: the local template, [`provision`] and reading the stack back.
//! - `create`: one `CreateStack` per attempt, a new name after a failure part-way, and the
//!   request token that tells this call's stacks from others'.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use aws_sdk_cloudformation::types::{Parameter, Tag};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use serde_json::{Map, Value, json};

use courier_adapters::aws::store_error;
use courier_core::ports::StoreError;

mod create;
pub use create::{
    CREATE_ATTEMPTS, CreateFailure, TOKEN_TAG, attempt_name, create_with_retries, created_by,
    ours_already, transient,
};
use create::{create_stack, discard_own, request_token};

/// The SAM template of the whole system, embedded at build time.
pub const TEMPLATE: &str = include_str!("../../../infra/template.yaml");

/// Resource types the local template keeps (the data plane the emulators can create).
pub const LOCAL_TYPES: &[&str] = &[
    "AWS::SQS::Queue",
    "AWS::SQS::QueuePolicy",
    "AWS::DynamoDB::Table",
    "AWS::S3::Bucket",
    "AWS::S3::BucketPolicy",
    "AWS::StepFunctions::StateMachine",
    "AWS::Serverless::StateMachine",
];

/// The parameter the local template adds for the state machine's role (SAM builds one on AWS).
pub const ROLE_PARAMETER: &str = "CourierLocalRoleArn";

/// How long [`provision`] waits for the stack.
pub const STACK_TIMEOUT: Duration = Duration::from_secs(300);

/// Why the template could not be turned into a local one.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("the template is not valid YAML: {0}")]
    Yaml(#[from] serde_norway::Error),
    #[error("the template is not a mapping")]
    NotAMapping,
    #[error("the template has no Resources mapping")]
    NoResources,
    #[error("{0} is not a mapping")]
    NotAMappingAt(String),
    #[error("unsupported YAML tag {0}")]
    UnknownTag(String),
    #[error("a mapping key is not a string: {0}")]
    NonStringKey(String),
    #[error("a number does not fit JSON: {0}")]
    BadNumber(String),
    #[error("!GetAtt {0} is not `Resource.Attribute`")]
    BadGetAtt(String),
    #[error("state machine {0} has no Definition")]
    NoDefinition(String),
}

/// Names and addresses of a provisioned stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provisioned {
    /// The CloudFormation stack (named after the prefix).
    pub stack_name: String,
    pub queue_url: String,
    pub queue_arn: String,
    /// Where copies that wait come back (the retry lane's own event source).
    pub retry_queue_url: String,
    /// Where SQS redrives raw messages after maxReceiveCount.
    pub redrive_dlq_url: String,
    /// Where Courier writes dead letters with their records.
    pub dead_letter_queue_url: String,
    /// The queue SES events arrive on (through SNS on AWS).
    pub events_queue_url: String,
    pub status_table: String,
    pub suppression_table: String,
    pub control_table: String,
    pub template_bucket: String,
    pub delay_state_machine_arn: String,
    /// The searchable dead-letter index.
    pub letter_index_table: String,
    /// Where the archiver writes archived dead letters.
    pub archive_bucket: String,
    /// Where copies and letters too large for SQS are stored (the claim check).
    pub payload_bucket: String,
    /// The secret holding the retry envelopes' seal keys (ARN): the template's
    /// `EnvelopeKeySecret`, created through Secrets Manager's API ([`envelope_key_secret`]).
    pub envelope_key_secret: String,
    /// The event bus outcome events are published on (its name).
    pub outcome_bus: String,
}

/// Settings of the send queue (the template's `MaxReceiveCount` and `SendQueueVisibilityTimeout`).
#[derive(Debug, Clone, Copy)]
pub struct QueueSettings {
    pub max_receive_count: u32,
    pub visibility_timeout: Duration,
}

// ------------------------------------------------------------------ YAML to JSON

/// Converts YAML (with CloudFormation's short-form tags such as `!Ref` and `!GetAtt`) to JSON
/// with the long forms (`{"Ref": ...}`, `{"Fn::GetAtt": [...]}`).
pub fn yaml_to_json(template: &str) -> Result<Value, TemplateError> {
    convert(serde_norway::from_str(template)?)
}

fn convert(value: serde_norway::Value) -> Result<Value, TemplateError> {
    use serde_norway::Value as Y;
    Ok(match value {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                n.as_f64()
                    .and_then(serde_json::Number::from_f64)
                    .map(Value::Number)
                    .ok_or_else(|| TemplateError::BadNumber(n.to_string()))?
            }
        }
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => Value::Array(
            items
                .into_iter()
                .map(convert)
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Y::Mapping(mapping) => {
            let mut out = Map::new();
            for (k, v) in mapping {
                let Y::String(k) = k else {
                    return Err(TemplateError::NonStringKey(format!("{k:?}")));
                };
                out.insert(k, convert(v)?);
            }
            Value::Object(out)
        }
        Y::Tagged(tagged) => {
            let tag = tagged.tag.to_string();
            intrinsic(tag.trim_start_matches('!'), convert(tagged.value)?)?
        }
    })
}

const FUNCTIONS: &[&str] = &[
    "And",
    "Base64",
    "Cidr",
    // Rules' functions (the local template keeps no Rules, but the whole template is read).
    "Contains",
    "Equals",
    "FindInMap",
    "GetAZs",
    "If",
    "ImportValue",
    "Join",
    "Length",
    "Not",
    "Or",
    "Select",
    "Split",
    "Sub",
    "ToJsonString",
];

fn intrinsic(tag: &str, value: Value) -> Result<Value, TemplateError> {
    match tag {
        "Ref" | "Condition" => Ok(json!({ tag: value })),
        "GetAtt" => match value {
            Value::String(s) => match s.split_once('.') {
                Some((resource, attribute)) if !resource.is_empty() && !attribute.is_empty() => {
                    Ok(json!({ "Fn::GetAtt": [resource, attribute] }))
                }
                _ => Err(TemplateError::BadGetAtt(s)),
            },
            other => Ok(json!({ "Fn::GetAtt": other })),
        },
        f if FUNCTIONS.contains(&f) => Ok(json!({ format!("Fn::{f}"): value })),
        other => Err(TemplateError::UnknownTag(format!("!{other}"))),
    }
}

// ------------------------------------------------------------------ the local template

/// Logical ids a resource refers to (`Ref`, `Fn::GetAtt`, `${...}` in `Fn::Sub`, `DependsOn`).
pub fn references(resource: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    if let Some(depends) = resource.get("DependsOn") {
        match depends {
            Value::String(s) => {
                out.insert(s.clone());
            }
            Value::Array(items) => {
                out.extend(items.iter().filter_map(Value::as_str).map(str::to_owned))
            }
            _ => {}
        }
    }
    collect_references(resource, &mut out);
    out
}

fn collect_references(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("Ref", Value::String(name)) => {
                        out.insert(name.clone());
                    }
                    ("Fn::GetAtt", Value::Array(parts)) => {
                        if let Some(name) = parts.first().and_then(Value::as_str) {
                            out.insert(name.to_owned());
                        }
                    }
                    ("Fn::Sub", Value::String(s)) => sub_references(s, out),
                    ("Fn::Sub", Value::Array(parts)) => {
                        if let Some(s) = parts.first().and_then(Value::as_str) {
                            // Names bound by the variable map are not references.
                            let bound: BTreeSet<String> = parts
                                .get(1)
                                .and_then(Value::as_object)
                                .map(|m| m.keys().cloned().collect())
                                .unwrap_or_default();
                            let mut found = BTreeSet::new();
                            sub_references(s, &mut found);
                            out.extend(found.into_iter().filter(|n| !bound.contains(n)));
                        }
                        for part in parts.iter().skip(1) {
                            collect_references(part, out);
                        }
                    }
                    _ => collect_references(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_references(v, out)),
        _ => {}
    }
}

/// `${Name}` and `${Name.Attribute}` in a `Fn::Sub` string; `${!Literal}` is not a reference.
fn sub_references(s: &str, out: &mut BTreeSet<String>) {
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        rest = &rest[start + 2..];
        let Some(end) = rest.find('}') else { return };
        let inner = &rest[..end];
        if !inner.starts_with('!') {
            let name = inner.split('.').next().unwrap_or(inner).trim();
            if !name.is_empty() {
                out.insert(name.to_owned());
            }
        }
        rest = &rest[end + 1..];
    }
}

/// `SendQueue` -> `send-queue`.
pub fn kebab(logical_id: &str) -> String {
    let mut out = String::with_capacity(logical_id.len() + 4);
    for (i, c) in logical_id.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('-');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The plain CloudFormation template of the data plane of `template`, every resource named
/// after `prefix` (see the module docs). Adds the parameter [`ROLE_PARAMETER`].
pub fn local_template(template: &str, prefix: &str) -> Result<Value, TemplateError> {
    let Value::Object(mut root) = yaml_to_json(template)? else {
        return Err(TemplateError::NotAMapping);
    };
    let Some(Value::Object(resources)) = root.remove("Resources") else {
        return Err(TemplateError::NoResources);
    };
    let mut parameters = match root.remove("Parameters") {
        None => Map::new(),
        Some(Value::Object(p)) => p,
        Some(_) => return Err(TemplateError::NotAMappingAt("Parameters".into())),
    };
    let mut kept: BTreeMap<String, Value> = resources
        .into_iter()
        .filter(|(_, r)| {
            r.get("Type")
                .and_then(Value::as_str)
                .is_some_and(|t| LOCAL_TYPES.contains(&t))
        })
        .collect();
    // Drop whatever refers to a resource that is not kept, until nothing changes.
    loop {
        let dangling: Vec<String> = kept
            .iter()
            .filter(|(_, r)| {
                references(r).iter().any(|name| {
                    !kept.contains_key(name)
                        && !parameters.contains_key(name)
                        && !name.starts_with("AWS::")
                })
            })
            .map(|(k, _)| k.clone())
            .collect();
        if dangling.is_empty() {
            break;
        }
        for k in dangling {
            kept.remove(&k);
        }
    }
    for (logical_id, resource) in &mut kept {
        localize(logical_id, resource, prefix)?;
    }
    allow_redrive_from_local_names(&mut kept, prefix);
    parameters.insert(
        ROLE_PARAMETER.into(),
        json!({ "Type": "String", "Description": "Role of the delay state machine (the emulators do not check it)." }),
    );
    let mut out = Map::new();
    out.insert("AWSTemplateFormatVersion".into(), json!("2010-09-09"));
    out.insert(
        "Description".into(),
        json!("Courier's data plane from infra/template.yaml, for an emulator (courier_devkit::provision)."),
    );
    out.insert("Parameters".into(), Value::Object(parameters));
    if let Some(conditions) = root.remove("Conditions") {
        out.insert("Conditions".into(), conditions);
    }
    out.insert(
        "Resources".into(),
        Value::Object(kept.into_iter().collect()),
    );
    Ok(Value::Object(out))
}

/// A dead-letter queue's `RedriveAllowPolicy` names its source queues by ARN, built on AWS from
/// their template names; locally the queues are renamed, so the allow-list names the local
/// queues whose `RedrivePolicy` targets it instead.
fn allow_redrive_from_local_names(kept: &mut BTreeMap<String, Value>, prefix: &str) {
    let sources = |dlq: &str| -> Vec<Value> {
        kept.iter()
            .filter(|(_, r)| {
                r["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]
                    == json!({ "Fn::GetAtt": [dlq, "Arn"] })
            })
            .map(|(id, _)| {
                json!({ "Fn::Sub": format!(
                    "arn:${{AWS::Partition}}:sqs:${{AWS::Region}}:${{AWS::AccountId}}:{prefix}-{}",
                    kebab(id)
                ) })
            })
            .collect()
    };
    let allow_lists: Vec<(String, Vec<Value>)> = kept
        .iter()
        .filter(|(_, r)| r["Properties"]["RedriveAllowPolicy"]["redrivePermission"] == "byQueue")
        .map(|(id, _)| (id.clone(), sources(id)))
        .collect();
    for (id, arns) in allow_lists {
        if let Some(policy) = kept
            .get_mut(&id)
            .and_then(|r| r.pointer_mut("/Properties/RedriveAllowPolicy"))
        {
            policy["sourceQueueArns"] = Value::Array(arns);
        }
    }
}

/// Names the resource after the prefix and makes it creatable on an emulator.
fn localize(logical_id: &str, resource: &mut Value, prefix: &str) -> Result<(), TemplateError> {
    let Some(resource) = resource.as_object_mut() else {
        return Err(TemplateError::NotAMappingAt(logical_id.into()));
    };
    let name = format!("{prefix}-{}", kebab(logical_id));
    // Build and checkov settings, nothing an emulator uses.
    resource.remove("Metadata");
    let kind = resource
        .get("Type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if kind == "AWS::Serverless::StateMachine" {
        to_step_functions(logical_id, resource)?;
    }
    let properties = resource
        .entry("Properties")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or_else(|| TemplateError::NotAMappingAt(format!("{logical_id}.Properties")))?;
    match kind.as_str() {
        "AWS::SQS::Queue" => {
            properties.insert("QueueName".into(), json!(name));
        }
        "AWS::DynamoDB::Table" => {
            properties.insert("TableName".into(), json!(name));
            // LocalStack needs its KMS service for this (see the module docs).
            properties.remove("SSESpecification");
        }
        "AWS::S3::Bucket" => {
            properties.insert("BucketName".into(), json!(name.to_lowercase()));
        }
        "AWS::StepFunctions::StateMachine" | "AWS::Serverless::StateMachine" => {
            properties.insert("StateMachineName".into(), json!(name));
        }
        _ => {}
    }
    Ok(())
}

/// `AWS::Serverless::StateMachine` -> `AWS::StepFunctions::StateMachine`: the same definition
/// (as `DefinitionString`), type and substitutions; the role from [`ROLE_PARAMETER`] (SAM builds
/// one from `Policies` on AWS).
fn to_step_functions(
    logical_id: &str,
    resource: &mut Map<String, Value>,
) -> Result<(), TemplateError> {
    let properties = match resource.remove("Properties") {
        Some(Value::Object(p)) => p,
        Some(_) => {
            return Err(TemplateError::NotAMappingAt(format!(
                "{logical_id}.Properties"
            )));
        }
        None => Map::new(),
    };
    let definition = properties
        .get("Definition")
        .ok_or_else(|| TemplateError::NoDefinition(logical_id.into()))?;
    let mut converted = Map::new();
    converted.insert(
        "DefinitionString".into(),
        Value::String(definition.to_string()),
    );
    converted.insert("RoleArn".into(), json!({ "Ref": ROLE_PARAMETER }));
    if let Some(kind) = properties.get("Type") {
        converted.insert("StateMachineType".into(), kind.clone());
    }
    if let Some(subs) = properties.get("DefinitionSubstitutions") {
        converted.insert("DefinitionSubstitutions".into(), subs.clone());
    }
    resource.insert("Type".into(), json!("AWS::StepFunctions::StateMachine"));
    resource.insert("Properties".into(), Value::Object(converted));
    Ok(())
}

// ------------------------------------------------------------------ deploying

/// Waits until `status` reports a settled stack status (not `*_IN_PROGRESS`), polling every
/// `poll`; an error after `timeout`.
pub async fn wait_until_settled<F, Fut>(
    mut status: F,
    poll: Duration,
    timeout: Duration,
) -> Result<String, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<String, StoreError>>,
{
    let start = Instant::now();
    loop {
        let current = status().await?;
        if !current.ends_with("_IN_PROGRESS") {
            return Ok(current);
        }
        if start.elapsed() >= timeout {
            return Err(StoreError::msg(
                "create stack",
                format!("still {current} after {} s", timeout.as_secs()),
            ));
        }
        tokio::time::sleep(poll).await;
    }
}

/// One line per failed resource: `Logical: reason`, oldest first.
pub fn failure_reasons<'a>(
    events: impl IntoIterator<Item = (&'a str, &'a str, Option<&'a str>)>,
) -> String {
    let mut lines: Vec<String> = events
        .into_iter()
        .filter(|(_, status, reason)| {
            status.ends_with("_FAILED") && reason.is_some_and(|r| !r.is_empty())
        })
        .map(|(logical, _, reason)| format!("{logical}: {}", reason.unwrap_or_default()))
        .collect();
    lines.reverse();
    lines.dedup();
    if lines.is_empty() {
        "no resource reported a reason".into()
    } else {
        lines.join("; ")
    }
}

/// The physical id of `logical` among the stack's resources.
pub fn physical<'a>(
    resources: &'a BTreeMap<String, String>,
    logical: &str,
) -> Result<&'a str, StoreError> {
    resources.get(logical).map(String::as_str).ok_or_else(|| {
        StoreError::msg(
            "describe stack resources",
            format!("the stack has no resource {logical}"),
        )
    })
}

/// A queue's name from its physical id (a queue URL).
pub fn queue_name(physical_id: &str) -> &str {
    physical_id.rsplit('/').next().unwrap_or(physical_id)
}

fn parameter(key: &str, value: impl Into<String>) -> Parameter {
    Parameter::builder()
        .parameter_key(key)
        .parameter_value(value)
        .build()
}

/// Creates the stack `prefix` from the template's data plane (see the module docs) and returns
/// the addresses of what it created. When the emulator fails part-way, the stack is created
/// again as `prefix-r2`, then `prefix-r3` ([`create_with_retries`]); [`Provisioned::stack_name`]
/// says which.
pub async fn provision(
    sdk: &aws_config::SdkConfig,
    prefix: &str,
    role_arn: &str,
    queue: QueueSettings,
) -> Result<Provisioned, StoreError> {
    let cfn = aws_sdk_cloudformation::Client::new(sdk);
    // The token, sent as CloudFormation's idempotency token and as a tag (the emulators ignore
    // the former), marks the stacks this call made: only those are deleted after a failure.
    let token = request_token(prefix);
    let name = create_with_retries(
        prefix,
        |name| {
            let (cfn, token) = (&cfn, &token);
            async move {
                let template = local_template(TEMPLATE, &name)
                    .map_err(|e| CreateFailure::Permanent(StoreError::new("local template", e)))?;
                create_stack(cfn, &name, token, &template, role_arn, queue).await
            }
        },
        |name| {
            let (cfn, token) = (&cfn, &token);
            async move { discard_own(cfn, &name, token).await }
        },
    )
    .await?;
    let prefix = name.as_str();
    let template =
        local_template(TEMPLATE, prefix).map_err(|e| StoreError::new("local template", e))?;
    let status = wait_until_settled(
        || async {
            let out = cfn
                .describe_stacks()
                .stack_name(prefix)
                .send()
                .await
                .map_err(store_error("describe stacks"))?;
            out.stacks()
                .first()
                .and_then(|s| s.stack_status())
                .map(|s| s.as_str().to_owned())
                .ok_or_else(|| StoreError::msg("describe stacks", format!("no stack {prefix}")))
        },
        Duration::from_millis(100),
        STACK_TIMEOUT,
    )
    .await?;
    if status != "CREATE_COMPLETE" {
        let events = cfn
            .describe_stack_events()
            .stack_name(prefix)
            .send()
            .await
            .map_err(store_error("describe stack events"))?;
        let reasons = failure_reasons(events.stack_events().iter().map(|e| {
            (
                e.logical_resource_id().unwrap_or("?"),
                e.resource_status().map_or("", |s| s.as_str()),
                e.resource_status_reason(),
            )
        }));
        return Err(StoreError::msg(
            "create stack",
            format!("stack {prefix} ended {status}: {reasons}"),
        ));
    }
    let resources: BTreeMap<String, String> = cfn
        .describe_stack_resources()
        .stack_name(prefix)
        .send()
        .await
        .map_err(store_error("describe stack resources"))?
        .stack_resources()
        .iter()
        // moto lists bucket policies without ids: nothing here needs them.
        .filter_map(|r| {
            Some((
                r.logical_resource_id()?.to_owned(),
                r.physical_resource_id()?.to_owned(),
            ))
        })
        .collect();
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let queue_url = |logical: &'static str| {
        let sqs = sqs.clone();
        let resources = &resources;
        async move {
            let name = queue_name(physical(resources, logical)?);
            sqs.get_queue_url()
                .queue_name(name)
                .send()
                .await
                .map_err(store_error("get queue url"))?
                .queue_url
                .ok_or_else(|| StoreError::msg("get queue url", format!("no url for {name}")))
        }
    };
    let send_queue_url = queue_url("SendQueue").await?;
    let queue_arn = sqs
        .get_queue_attributes()
        .queue_url(&send_queue_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(store_error("queue attributes"))?
        .attributes
        .and_then(|a| {
            a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn)
                .cloned()
        })
        .ok_or_else(|| StoreError::msg("queue attributes", "no queue arn"))?;
    let name = |logical: &str| physical(&resources, logical).map(str::to_owned);
    let envelope_key_secret = envelope_key_secret(sdk, prefix).await?;
    Ok(Provisioned {
        envelope_key_secret,
        stack_name: prefix.to_owned(),
        queue_url: send_queue_url,
        queue_arn,
        retry_queue_url: queue_url("RetryQueue").await?,
        redrive_dlq_url: queue_url("RedriveDeadLetterQueue").await?,
        dead_letter_queue_url: queue_url("DeadLetterQueue").await?,
        events_queue_url: queue_url("EventsQueue").await?,
        status_table: name("StatusTable")?,
        suppression_table: name("SuppressionTable")?,
        control_table: name("ControlTable")?,
        letter_index_table: name("LetterIndexTable")?,
        template_bucket: name("TemplateBucket")?,
        archive_bucket: name("ArchiveBucket")?,
        payload_bucket: name("PayloadBucket")?,
        outcome_bus: outcome_bus(sdk, prefix).await?,
        delay_state_machine_arn: state_machine(
            &aws_sdk_sfn::Client::new(sdk),
            &template,
            "DelayStateMachine",
            physical(&resources, "DelayStateMachine")?,
            role_arn,
        )
        .await?,
    })
}

/// The outcome bus (the template's `OutcomeBus`), created through EventBridge's API: moto's
/// CloudFormation answers a stack with an `AWS::Events::EventBus` without the bus among its
/// resources. Named `{prefix}-outcomes`; an existing one is kept.
pub async fn outcome_bus(sdk: &aws_config::SdkConfig, prefix: &str) -> Result<String, StoreError> {
    let name = format!("{prefix}-outcomes");
    let created = aws_sdk_eventbridge::Client::new(sdk)
        .create_event_bus()
        .name(&name)
        .send()
        .await;
    match created {
        Ok(_) => Ok(name),
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_resource_already_exists_exception()) =>
        {
            Ok(name)
        }
        Err(e) => Err(store_error("create event bus")(e)),
    }
}

/// Creates the stack's seal-key secret (`{prefix}-envelope-key`) through Secrets Manager's API,
/// as the template's `EnvelopeKeySecret` generates it on AWS: `{"key": ...}` with 64 random
/// alphanumerics (here hex from the time and process; an emulator's stack needs no better). The
/// emulators' CloudFormation skips `AWS::SecretsManager::Secret` (moto) or its generated
/// string, so the local template leaves it out. An existing secret of that name is kept.
pub async fn envelope_key_secret(
    sdk: &aws_config::SdkConfig,
    prefix: &str,
) -> Result<String, StoreError> {
    key_secret(sdk, &format!("{prefix}-envelope-key")).await
}

/// Creates the stack's unsubscribe-key secret (`{prefix}-unsubscribe-key`), as the template's
/// `UnsubscribeKeySecret` generates it (see [`envelope_key_secret`]).
pub async fn unsubscribe_key_secret(
    sdk: &aws_config::SdkConfig,
    prefix: &str,
) -> Result<String, StoreError> {
    key_secret(sdk, &format!("{prefix}-unsubscribe-key")).await
}

async fn key_secret(sdk: &aws_config::SdkConfig, name: &str) -> Result<String, StoreError> {
    let client = aws_sdk_secretsmanager::Client::new(sdk);
    let prefix = name;
    let name = name.to_owned();
    let seed = format!(
        "{prefix}/{}/{:?}",
        std::process::id(),
        std::time::SystemTime::now()
    );
    let key = courier_core::job::fingerprint(seed.as_bytes());
    let created = client
        .create_secret()
        .name(&name)
        .secret_string(json!({ "key": key }).to_string())
        .send()
        .await;
    match created {
        Ok(out) => out.arn,
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_resource_exists_exception()) =>
        {
            client
                .describe_secret()
                .secret_id(&name)
                .send()
                .await
                .map_err(store_error("describe secret"))?
                .arn
        }
        Err(e) => return Err(store_error("create secret")(e)),
    }
    .ok_or_else(|| StoreError::msg("create secret", format!("no ARN for {name}")))
}

/// Name, definition and type (if given) of a state machine of the local template.
pub fn machine_settings<'a>(
    template: &'a Value,
    logical: &str,
) -> Result<(&'a str, &'a str, Option<&'a str>), StoreError> {
    let properties = &template["Resources"][logical]["Properties"];
    let field = |key: &str| {
        properties[key].as_str().ok_or_else(|| {
            StoreError::msg(
                "create state machine",
                format!("{logical} has no {key} in the local template"),
            )
        })
    };
    Ok((
        field("StateMachineName")?,
        field("DefinitionString")?,
        properties["StateMachineType"].as_str(),
    ))
}

/// The state machine's ARN, once Step Functions answers for it. moto with execution switched on
/// (as the harness runs it) serves Step Functions from another backend than the one its
/// CloudFormation writes to: there the machine is created through the API from the same
/// template properties (name, definition, type).
async fn state_machine(
    sfn: &aws_sdk_sfn::Client,
    template: &Value,
    logical: &str,
    arn: &str,
    role_arn: &str,
) -> Result<String, StoreError> {
    match sfn
        .describe_state_machine()
        .state_machine_arn(arn)
        .send()
        .await
    {
        Ok(_) => return Ok(arn.to_owned()),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_state_machine_does_not_exist()) => {}
        Err(e) => return Err(store_error("describe state machine")(e)),
    }
    let (name, definition, kind) = machine_settings(template, logical)?;
    let mut request = sfn
        .create_state_machine()
        .name(name)
        .definition(definition)
        .role_arn(role_arn);
    if let Some(kind) = kind {
        request = request.r#type(aws_sdk_sfn::types::StateMachineType::from(kind));
    }
    Ok(request
        .send()
        .await
        .map_err(store_error("create state machine"))?
        .state_machine_arn)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
