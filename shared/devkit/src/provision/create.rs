//! Creating the stack: one `CreateStack` per attempt without the SDK's retries, a new name
//! after a failure part-way, and the request token that tells this call's stacks from others'.

use super::*;

/// The tag that carries a [`provision`] call's request token.
pub const TOKEN_TAG: &str = "courier:provision-token";

/// A token unique to one [`provision`] call (CloudFormation allows `[a-zA-Z0-9-]`, 128 chars).
pub(super) fn request_token(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let safe: String = prefix
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(80)
        .collect();
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("p{}-{call}-{nanos}-{safe}", std::process::id())
}

/// Whether the existing stack `name` was created with `token` (by this [`provision`] call), as
/// opposed to by someone else.
pub async fn created_by(
    cfn: &aws_sdk_cloudformation::Client,
    name: &str,
    token: &str,
) -> Result<bool, StoreError> {
    let out = cfn
        .describe_stacks()
        .stack_name(name)
        .send()
        .await
        .map_err(store_error("describe stacks"))?;
    Ok(out.stacks().iter().any(|s| {
        s.tags()
            .iter()
            .any(|t| t.key() == Some(TOKEN_TAG) && t.value() == Some(token))
    }))
}

/// How many stacks [`provision`] tries before it gives up on transient failures.
pub const CREATE_ATTEMPTS: u32 = 3;

/// Why one `CreateStack` call failed.
#[derive(Debug)]
pub enum CreateFailure {
    /// The emulator failed part-way (a 5xx, a dropped connection, a timeout): the stack may
    /// exist half-created, so the next attempt uses a new name.
    Transient(StoreError),
    /// The request itself is wrong (a clash, a bad template): trying again cannot help.
    Permanent(StoreError),
}

/// Whether a failed call may have failed for reasons of the moment rather than of the request:
/// no answer at all, or a 5xx answer.
pub fn transient<E>(e: &aws_smithy_runtime_api::client::result::SdkError<E, HttpResponse>) -> bool {
    use aws_smithy_runtime_api::client::result::SdkError;
    match e {
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) => true,
        _ => e
            .raw_response()
            .is_some_and(|r| r.status().is_server_error()),
    }
}

/// The name of attempt `attempt` (from 1) at the stack `prefix`: the prefix, then `prefix-rN`.
pub fn attempt_name(prefix: &str, attempt: u32) -> String {
    if attempt <= 1 {
        prefix.to_owned()
    } else {
        format!("{prefix}-r{attempt}")
    }
}

/// Runs `create` on [`attempt_name`]s until one succeeds, fails permanently, or
/// [`CREATE_ATTEMPTS`] have failed; after each transient failure, `discard` gets the failed
/// attempt's name (to delete what it left) before the next attempt. Returns the created name.
///
/// moto's CloudFormation is the reason: it creates a stack's resources inside the `CreateStack`
/// request, and when one of them fails there (measured: `create_queue` iterating moto's queue
/// map while a concurrent request adds a queue, "dictionary changed size during iteration") it
/// answers 500 and leaves the stack `CREATE_IN_PROGRESS` for ever. Retrying the same name can
/// only meet that stack.
pub async fn create_with_retries<C, CF, D, DF>(
    prefix: &str,
    mut create: C,
    mut discard: D,
) -> Result<String, StoreError>
where
    C: FnMut(String) -> CF,
    CF: std::future::Future<Output = Result<(), CreateFailure>>,
    D: FnMut(String) -> DF,
    DF: std::future::Future<Output = ()>,
{
    let mut attempt = 1;
    loop {
        let name = attempt_name(prefix, attempt);
        match create(name.clone()).await {
            Ok(()) => return Ok(name),
            Err(CreateFailure::Permanent(e)) => return Err(e),
            Err(CreateFailure::Transient(e)) if attempt >= CREATE_ATTEMPTS => {
                return Err(StoreError {
                    message: format!("{} (attempt {attempt} of {CREATE_ATTEMPTS})", e.message),
                    ..e
                });
            }
            Err(CreateFailure::Transient(e)) => {
                tracing::warn!(stack = %name, attempt, error = %e.message,
                    "create stack failed part-way; trying again under a new name");
                discard(name).await;
                tokio::time::sleep(Duration::from_millis(250 * u64::from(attempt))).await;
                attempt += 1;
            }
        }
    }
}

/// One `CreateStack` of `template` as `name`, without the SDK's retries (a retried
/// `CreateStack` after a 5xx only meets the half-created stack of the first try).
pub(super) async fn create_stack(
    cfn: &aws_sdk_cloudformation::Client,
    name: &str,
    token: &str,
    template: &Value,
    role_arn: &str,
    queue: QueueSettings,
) -> Result<(), CreateFailure> {
    let created = cfn
        .create_stack()
        .stack_name(name)
        .client_request_token(token)
        .tags(Tag::builder().key(TOKEN_TAG).value(token).build())
        .template_body(template.to_string())
        .parameters(parameter(
            "MaxReceiveCount",
            queue.max_receive_count.to_string(),
        ))
        .parameters(parameter(
            "SendQueueVisibilityTimeout",
            queue.visibility_timeout.as_secs().to_string(),
        ))
        .parameters(parameter(ROLE_PARAMETER, role_arn))
        .customize()
        .config_override(
            aws_sdk_cloudformation::config::Builder::default()
                .retry_config(aws_sdk_cloudformation::config::retry::RetryConfig::disabled()),
        )
        .send()
        .await;
    match created {
        Ok(_) => Ok(()),
        Err(e) if transient(&e) => Err(CreateFailure::Transient(store_error("create stack")(e))),
        Err(e) if ours_already(cfn, name, token, &e).await => {
            tracing::warn!(stack = %name, "create stack answered that the stack exists, and it is this call's own: taken as created");
            Ok(())
        }
        Err(e) => Err(CreateFailure::Permanent(store_error("create stack")(e))),
    }
}

/// Whether `e` says the stack `name` already exists and that stack carries this call's `token`:
/// this call's own request was applied before the answer that reports the clash (measured once on
/// LocalStack in CI: `AlreadyExistsException` for a fresh name on the first and only request).
/// Someone else's stack of that name stays a clash.
pub async fn ours_already(
    cfn: &aws_sdk_cloudformation::Client,
    name: &str,
    token: &str,
    e: &aws_smithy_runtime_api::client::result::SdkError<
        aws_sdk_cloudformation::operation::create_stack::CreateStackError,
        HttpResponse,
    >,
) -> bool {
    let exists = e
        .as_service_error()
        .is_some_and(|s| s.is_already_exists_exception());
    exists && created_by(cfn, name, token).await.unwrap_or(false)
}

/// Deletes the stack `name` if this call's `token` created it (never someone else's); best
/// effort, as the emulator that just failed may fail again.
pub(super) async fn discard_own(cfn: &aws_sdk_cloudformation::Client, name: &str, token: &str) {
    match created_by(cfn, name, token).await {
        Ok(true) => {
            if let Err(e) = cfn.delete_stack().stack_name(name).send().await {
                tracing::warn!(stack = %name, error = %aws_smithy_types::error::display::DisplayErrorContext(&e),
                    "could not delete the half-created stack");
            }
        }
        Ok(false) => {}
        Err(e) => {
            tracing::warn!(stack = %name, error = %e.message, "could not look the stack up");
        }
    }
}
