//! The demo's one-click unsubscribe: the unsubscribe function behind a function URL on the
//! loopback (as the template puts it behind a public one), the send function linking to it, and,
//! after the campaign, one reader unsubscribing through the link in a delivered message and the
//! next job of that list to them not sent.

use super::*;
use courier_send::config::UnsubscribeSettings;

/// The function URL the demo serves, and the send function's settings that link to it.
pub(crate) struct Unsubscribe {
    pub(crate) settings: UnsubscribeSettings,
}

/// Creates the key secret and serves the unsubscribe function on 127.0.0.1.
pub(crate) async fn start(
    sdk: &aws_config::SdkConfig,
    clients: &courier_adapters::aws::Clients,
    suppression_table: &str,
    prefix: &str,
) -> Result<Unsubscribe, DemoError> {
    let key_secret = courier_devkit::provision::unsubscribe_key_secret(sdk, prefix).await?;
    let unsubscriber = Arc::new(courier_unsubscribe::wire(
        clients,
        &courier_unsubscribe::Settings {
            suppression_table: suppression_table.to_owned(),
            key_secret: key_secret.clone(),
        },
    ));
    let io = |e: std::io::Error| StoreError::msg("serve the unsubscribe function", e.to_string());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(io)?;
    let url = format!("http://{}/", listener.local_addr().map_err(io)?);
    tokio::spawn(courier_dev::function_url::serve(listener, unsubscriber));
    let links = courier_core::unsubscribe::Links::new(&url, None)
        .map_err(|e| StoreError::msg("unsubscribe URL", e.to_string()))?;
    Ok(Unsubscribe {
        settings: UnsubscribeSettings { links, key_secret },
    })
}

/// The first bulk job of the campaign sent to a plain reader through Postfix: (its index, its
/// list, its recipient).
fn reader_of_a_list(size: usize) -> Option<(usize, &'static str, String)> {
    (0..size)
        .find(|i| matches!(i % 100, 18..=29 | 40..=99) && !i.is_multiple_of(3))
        .map(|i| {
            let list = if i.is_multiple_of(2) {
                "winter-sale"
            } else {
                "newsletter"
            };
            (i, list, format!("reader{i}@{DOMAIN}"))
        })
}

/// After the campaign: the reader clicks the link of their message (the mailbox provider's
/// one-click POST), then a job of the same list to them comes and is not sent. The line to
/// print, and whether it went as it should.
pub(crate) async fn show(
    sdk: &aws_config::SdkConfig,
    pipeline: &Arc<courier_send::Pipeline>,
    stack: &courier_devkit::provision::Provisioned,
    size: usize,
) -> Result<(String, bool), DemoError> {
    let Some((i, list, reader)) = reader_of_a_list(size) else {
        return Ok((
            "one-click unsubscribe: skipped (no bulk job to a reader in so small a campaign)"
                .into(),
            true,
        ));
    };
    let Ok(maildir) = std::env::var("COURIER_SMTP_CAPTURE_DIR") else {
        return Ok(("one-click unsubscribe: skipped (COURIER_SMTP_CAPTURE_DIR is not set: no mailbox to read the link from)".into(), true));
    };
    let message = std::fs::read_dir(&maildir)
        .map_err(|e| StoreError::msg("read the Maildir", e.to_string()))?
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .find(|mail| mail.contains(&format!("Delivered-To: {reader}")));
    let Some(link) = message
        .as_deref()
        .and_then(courier_dev::function_url::unsubscribe_link)
    else {
        return Ok((
            format!(
                "one-click unsubscribe: FAILED: no message with a List-Unsubscribe link for {reader} (job demo-{i:05})"
            ),
            false,
        ));
    };
    let (clicked, _) =
        courier_dev::function_url::request(&link, "POST", "List-Unsubscribe=One-Click")
            .await
            .map_err(|e| StoreError::msg("POST the link", e.to_string()))?;
    // The next job of that list to the reader.
    let mut next = job(i, &format!("Courier Demo <demo@{DOMAIN}>"), &reader);
    next["message_id"] = serde_json::json!("demo-unsubscribed");
    let sqs = aws_sdk_sqs::Client::new(sdk);
    enqueue(&sqs, &stack.queue_url, &[next.to_string()]).await?;
    let driver = Driver {
        sqs: sqs.clone(),
        queue_url: stack.queue_url.clone(),
        queue_arn: queue_arn(&sqs, &stack.queue_url).await?,
        batch_size: 10,
        visibility_timeout: 5,
        wait_seconds: 1,
        function_timeout: Duration::from_secs(30),
    };
    let status = DynamoDbStatusStore::new(
        aws_sdk_dynamodb::Client::new(sdk),
        &stack.status_table,
        courier_core::status::RETENTION,
    );
    let started = Instant::now();
    let mut record = None;
    while started.elapsed() < Duration::from_secs(30) {
        driver
            .poll_once(pipeline, "demo-unsubscribe")
            .await
            .map_err(|e| StoreError::msg("drive", e.to_string()))?;
        record = status.get("demo-unsubscribed").await?;
        if record.as_ref().is_some_and(|r| r.status.is_terminal()) {
            break;
        }
    }
    let ended = record.as_ref().map(|r| r.status);
    let why = record
        .and_then(|r| r.history.last().and_then(|h| h.detail.clone()))
        .unwrap_or_default();
    let ok = clicked == 200 && ended == Some(Status::Suppressed);
    Ok((
        format!(
            "one-click unsubscribe: {reader} POSTed the link of its {list} message ({clicked}); the next {list} job to it: {} ({why}){}",
            ended.map_or("not at an end".to_owned(), |s| s.to_string()),
            if ok { "" } else { "  FAILED" }
        ),
        ok,
    ))
}
