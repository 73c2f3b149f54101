//! Where the commands' settings come from: the `COURIER_*` variables, and the outputs of the
//! CloudFormation stack `--stack NAME` (or `COURIER_STACK`) names. A variable that is set wins over
//! the stack's output. Resolved once, before a command runs, into [`Settings`]; a command asks it
//! for what it needs ([`Settings::get`]), and a setting neither gives is a usage error naming the
//! variable and the output.

use std::collections::BTreeMap;

use aws_sdk_cloudformation::error::ProvideErrorMetadata;

/// A setting a command reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Setting {
    StatusTable,
    SuppressionTable,
    ControlTable,
    LetterIndexTable,
    QueueUrl,
    /// The secret of the retry envelopes' seal key (`dlq replay` seals what it enqueues).
    EnvelopeKeySecret,
    /// The retry lane's queue, where `dlq replay` and `requeue` put copies when the stack has one
    /// ([`Settings::copies_queue`]).
    RetryQueueUrl,
    /// The payload bucket: a kept body over 300 KiB that `requeue` puts back is read from it, and
    /// a copy too large for SQS stored in it (a claim check).
    PayloadBucket,
}

/// Where a setting comes from: the variable that sets it and the output of `infra/template.yaml`
/// that provides it.
#[derive(Debug)]
pub(crate) struct Source {
    pub(crate) setting: Setting,
    pub(crate) variable: &'static str,
    pub(crate) output: &'static str,
}

/// Every setting courierctl reads, in the order of [`Setting`]'s variants.
pub(crate) const SOURCES: [Source; 8] = [
    Source {
        setting: Setting::StatusTable,
        variable: "COURIER_STATUS_TABLE",
        output: "StatusTableName",
    },
    Source {
        setting: Setting::SuppressionTable,
        variable: "COURIER_SUPPRESSION_TABLE",
        output: "SuppressionTableName",
    },
    Source {
        setting: Setting::ControlTable,
        variable: "COURIER_CONTROL_TABLE",
        output: "ControlTableName",
    },
    Source {
        setting: Setting::LetterIndexTable,
        variable: "COURIER_LETTER_INDEX_TABLE",
        output: "LetterIndexTableName",
    },
    Source {
        setting: Setting::QueueUrl,
        variable: "COURIER_QUEUE_URL",
        output: "SendQueueUrl",
    },
    Source {
        setting: Setting::EnvelopeKeySecret,
        variable: "COURIER_ENVELOPE_KEY_SECRET",
        output: "EnvelopeKeySecretArn",
    },
    Source {
        setting: Setting::RetryQueueUrl,
        variable: "COURIER_RETRY_QUEUE_URL",
        output: "RetryQueueUrl",
    },
    Source {
        setting: Setting::PayloadBucket,
        variable: "COURIER_PAYLOAD_BUCKET",
        output: "PayloadBucketName",
    },
];

impl Setting {
    fn source(self) -> &'static Source {
        let source = &SOURCES[self as usize];
        debug_assert_eq!(source.setting, self, "SOURCES is in the order of Setting");
        source
    }
}

/// The stack `--stack` names, as DescribeStacks describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StackInfo {
    pub(crate) name: String,
    /// `CREATE_COMPLETE`, `UPDATE_IN_PROGRESS`, ...
    pub(crate) status: String,
    /// Output key -> value.
    pub(crate) outputs: BTreeMap<String, String>,
}

/// The settings of one run: each setting's value, if the variables or the stack gave one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Settings {
    values: [Option<String>; SOURCES.len()],
    /// Which of them a variable set (the others came from the stack, or nowhere).
    set: [bool; SOURCES.len()],
    /// The stack they were read from, for the message of a setting it lacks.
    stack: Option<String>,
}

/// A setting neither a variable nor the stack gives (a usage error, exit 2).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Missing {
    #[error(
        "{variable} is not set; `--stack NAME` (or COURIER_STACK) provides it from the stack's output {output} (for a local stack, `courier-dev provision` prints the settings)"
    )]
    NoStack {
        variable: &'static str,
        output: &'static str,
    },
    #[error(
        "{variable} is not set, and stack {stack:?} (--stack) has no output {output}: is it a stack of infra/template.yaml?"
    )]
    NotInStack {
        variable: &'static str,
        output: &'static str,
        stack: String,
    },
}

impl Settings {
    /// Each setting from `variable` (its `COURIER_*` variable; empty counts as unset), else from
    /// the stack's output.
    pub(crate) fn resolve(
        variable: impl Fn(&str) -> Option<String>,
        stack: Option<&StackInfo>,
    ) -> Settings {
        let set = SOURCES
            .each_ref()
            .map(|s| variable(s.variable).is_some_and(|v| !v.is_empty()));
        let values = SOURCES.each_ref().map(|s| {
            variable(s.variable)
                .filter(|v| !v.is_empty())
                .or_else(|| stack.and_then(|st| st.outputs.get(s.output).cloned()))
                .filter(|v| !v.is_empty())
        });
        Settings {
            values,
            set,
            stack: stack.map(|s| s.name.clone()),
        }
    }

    /// Where replayed and put-back copies go: the retry lane (its own event source and
    /// concurrency, so a bulk replay does not hold up fresh mail), or the send queue when no
    /// retry queue is named. A variable wins over the stack: `COURIER_RETRY_QUEUE_URL`, then
    /// `COURIER_QUEUE_URL`, then the stack's `RetryQueueUrl`, then its `SendQueueUrl`; the
    /// error names the send queue's setting.
    pub(crate) fn copies_queue(&self) -> Result<&str, Missing> {
        let (retry, send) = (Setting::RetryQueueUrl as usize, Setting::QueueUrl as usize);
        match &self.values[retry] {
            Some(url) if self.set[retry] || !self.set[send] => Ok(url),
            _ => self.get(Setting::QueueUrl),
        }
    }

    /// The setting's value, or the usage error that says where it would come from.
    pub(crate) fn get(&self, setting: Setting) -> Result<&str, Missing> {
        let source = setting.source();
        self.values[setting as usize]
            .as_deref()
            .ok_or_else(|| match &self.stack {
                None => Missing::NoStack {
                    variable: source.variable,
                    output: source.output,
                },
                Some(stack) => Missing::NotInStack {
                    variable: source.variable,
                    output: source.output,
                    stack: stack.clone(),
                },
            })
    }
}

/// Why the stack `--stack` names could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StackError {
    #[error("--stack: give the name of a stack (it is empty)")]
    EmptyName,
    #[error(
        "no stack named {name:?}{region} (check --stack / COURIER_STACK, and AWS_PROFILE / AWS_REGION for the account and region): {detail}"
    )]
    NotFound {
        name: String,
        /// ` in region R`, or empty when no region is configured.
        region: String,
        detail: String,
    },
    #[error(
        "stack {name:?} has no outputs (status {status}): give the stack created from infra/template.yaml, once it is created"
    )]
    NoOutputs { name: String, status: String },
    #[error("could not describe stack {name:?}{region}: {detail}")]
    Aws {
        name: String,
        region: String,
        detail: String,
    },
}

impl StackError {
    /// 2 for a stack that does not exist or is not a Courier stack (usage), 1 for an AWS failure.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            StackError::Aws { .. } => 1,
            _ => 2,
        }
    }
}

/// Reads a stack's outputs: CloudFormation ([`CloudFormation`]), or a fake in tests.
pub(crate) trait StackLookup {
    fn describe(
        &self,
        name: &str,
    ) -> impl std::future::Future<Output = Result<StackInfo, StackError>>;
}

/// Resolves the settings: with `stack`, from the stack's outputs where `variable` sets nothing.
/// A stack that cannot be read, or has no outputs, is an error even where the variables would
/// do: the operator named it, and a typo must not go unnoticed.
pub(crate) async fn load(
    stack: Option<&str>,
    variable: impl Fn(&str) -> Option<String>,
    lookup: &impl StackLookup,
) -> Result<Settings, StackError> {
    let Some(name) = stack else {
        return Ok(Settings::resolve(variable, None));
    };
    if name.trim().is_empty() {
        return Err(StackError::EmptyName);
    }
    let info = lookup.describe(name).await?;
    if info.outputs.is_empty() {
        return Err(StackError::NoOutputs {
            name: info.name,
            status: info.status,
        });
    }
    Ok(Settings::resolve(variable, Some(&info)))
}

/// The stack's outputs through CloudFormation's DescribeStacks, with AWS access as the AWS CLI
/// has it (the SDK's default chain: `AWS_PROFILE`, `AWS_REGION`, the usual variables and files).
pub(crate) struct CloudFormation {
    client: aws_sdk_cloudformation::Client,
    /// ` in region R` for messages.
    region: String,
}

impl CloudFormation {
    pub(crate) async fn from_env() -> CloudFormation {
        let sdk = courier_adapters::aws::sdk_config().await;
        CloudFormation {
            client: aws_sdk_cloudformation::Client::new(&sdk),
            region: sdk
                .region()
                .map(|r| format!(" in region {r}"))
                .unwrap_or_default(),
        }
    }
}

impl StackLookup for CloudFormation {
    async fn describe(&self, name: &str) -> Result<StackInfo, StackError> {
        let out = self
            .client
            .describe_stacks()
            .stack_name(name)
            .send()
            .await
            .map_err(|e| describe_error(name, &self.region, e.code(), e.message(), chain(&e)))?;
        let Some(stack) = out.stacks().first() else {
            return Err(StackError::NotFound {
                name: name.to_owned(),
                region: self.region.clone(),
                detail: "DescribeStacks returned no stack".into(),
            });
        };
        Ok(StackInfo {
            name: stack.stack_name().unwrap_or(name).to_owned(),
            status: stack
                .stack_status()
                .map_or_else(|| "unknown".to_owned(), |s| s.as_str().to_owned()),
            outputs: stack
                .outputs()
                .iter()
                .filter_map(|o| Some((o.output_key()?.to_owned(), o.output_value()?.to_owned())))
                .collect(),
        })
    }
}

/// The error and its causes, `: `-separated (`dispatch failure: io error: ... Connection refused`).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// What a failed DescribeStacks means: CloudFormation answers a stack that does not exist (and a
/// name that cannot be one) with `ValidationError` (`message` says which); anything else is a
/// failure to reach or use AWS (`context`: the error with its causes).
fn describe_error(
    name: &str,
    region: &str,
    code: Option<&str>,
    message: Option<&str>,
    context: String,
) -> StackError {
    if code == Some("ValidationError") {
        StackError::NotFound {
            name: name.to_owned(),
            region: region.to_owned(),
            detail: message.map_or(context, str::to_owned),
        }
    } else {
        StackError::Aws {
            name: name.to_owned(),
            region: region.to_owned(),
            detail: context,
        }
    }
}

#[cfg(test)]
mod tests;
