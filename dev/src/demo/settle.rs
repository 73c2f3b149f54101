//! The end of the local run: waiting for the queues and the open jobs to settle, and the report.

use super::*;

/// Checks in a row (2 s apart) with both queues empty after which the run has settled.
pub(super) const IDLE_CHECKS: u32 = 3;

/// Whether every queue in `urls` is empty: no visible, in-flight or delayed message.
pub(super) async fn queues_idle(
    sqs: &aws_sdk_sqs::Client,
    urls: &[&str],
) -> Result<bool, StoreError> {
    for url in urls {
        let out = sqs
            .get_queue_attributes()
            .queue_url(*url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
            .send()
            .await
            .map_err(store_error("queue attributes"))?;
        if out
            .attributes()
            .is_some_and(|a| a.values().any(|v| v != "0"))
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Status records not at an end (message id, status), read with a scan of the demo's table.
pub(super) async fn open_jobs(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<Vec<(String, String)>, StoreError> {
    let mut open = Vec::new();
    let mut cursor = None;
    loop {
        let out = dynamodb
            .scan()
            .table_name(table)
            .projection_expression("message_id, #s")
            .expression_attribute_names("#s", "status")
            .set_exclusive_start_key(cursor)
            .send()
            .await
            .map_err(store_error("scan the status table"))?;
        for item in out.items() {
            let text = |k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
            let (Some(id), Some(status)) = (text("message_id"), text("status")) else {
                continue;
            };
            // `sent_to_provider` is the end for SMTP (no events); `bounced_transient` is not
            // (its resend is under way).
            let at_end = Status::parse(&status)
                .is_some_and(|s| s.is_terminal() || s == Status::SentToProvider);
            if !at_end {
                open.push((id, status));
            }
        }
        cursor = out.last_evaluated_key;
        if cursor.is_none() {
            break;
        }
    }
    open.sort();
    Ok(open)
}

pub(super) fn region(sdk: &aws_config::SdkConfig) -> String {
    sdk.region()
        .map_or_else(|| "us-east-1".to_owned(), |r| r.as_ref().to_owned())
}

/// What the final report shows.
pub(super) struct Report<'a> {
    pub(super) totals: &'a BTreeMap<String, u64>,
    pub(super) events: &'a EventTotals,
    pub(super) ses: &'a SesJobs,
    /// Recipients of published bounces and complaints found on the suppression list.
    pub(super) suppressed: usize,
    pub(super) guard: &'a GuardConfig,
    pub(super) letters: &'a [DeadLetter],
    pub(super) archived: &'a courier_archiver::ArchiveReport,
    pub(super) jobs: usize,
    pub(super) took: Duration,
}

pub(super) fn report(r: &Report<'_>) {
    println!("\nreport: {} jobs in {:.1} s", r.jobs, r.took.as_secs_f64());
    let get = |k: &str| r.totals.get(k).copied().unwrap_or(0);
    let ses_jobs = r.ses.ended.len() + r.ses.pending.len();
    println!(
        "  sent to provider            {:>6}  (SES: {} jobs by their provider hint, {} sent again after a transient bounce)",
        get("Sent"),
        ses_jobs,
        r.ses.extra_sends()
    );
    println!(
        "  bounced permanently (SMTP)  {:>6}  (recipient suppressed)",
        get("BouncedPermanent")
    );
    println!("  suppressed before sending   {:>6}", get("Suppressed"));
    println!(
        "  duplicates acknowledged     {:>6}",
        get("DuplicatesSkipped")
    );
    println!("  retried, by class:");
    for (k, v) in r.totals.iter().filter(|(k, _)| k.starts_with("Retried_")) {
        println!("    {:<26}{v:>6}", k.trim_start_matches("Retried_"));
    }
    let mut by_category: BTreeMap<&str, usize> = BTreeMap::new();
    for l in r.letters {
        *by_category.entry(l.category.as_str()).or_default() += 1;
    }
    println!("  dead-lettered, by category (read back from the dead-letter index):");
    for (k, v) in &by_category {
        println!("    {k:<26}{v:>6}");
    }
    println!(
        "  archived to S3              {:>6}  in {} objects, e.g. {}",
        r.archived.archived,
        r.archived.objects.len(),
        r.archived.objects.first().map_or("-", String::as_str)
    );
    let ev = r.events;
    let published: Vec<String> = ev
        .published
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    println!(
        "  SES events published        {:>6}  (SNS notifications on the events queue: {})",
        ev.published.values().sum::<u64>(),
        published.join(", ")
    );
    let applied = |k: &str| ev.applied.get(k).copied().unwrap_or(0);
    let to_suppress: BTreeSet<&String> = ev.to_suppress.iter().collect();
    println!(
        "  applied by the events function (each delivery of an event; a redelivery counts again):"
    );
    println!("    delivered                 {:>6}", applied("delivered"));
    println!(
        "    bounced permanently       {:>6}  (recipients suppressed: {} of {}, read back from the suppression list)",
        applied("bounced_permanent"),
        r.suppressed,
        to_suppress.len()
    );
    println!(
        "    complaints                {:>6}  (recipients suppressed, counted above)",
        applied("complained")
    );
    if applied("recipients") > 0 {
        println!(
            "    one recipient's outcome   {:>6}  (the job waits for its other recipients)",
            applied("recipients")
        );
    }
    println!(
        "    transient bounces resent  {:>6}  (through the retry queue; sent again by the send function)",
        applied("resent")
    );
    println!(
        "    delivery delays           {:>6}  (status unchanged: SES keeps trying; noted in the job's timeline)",
        ev.published.get("DeliveryDelay").copied().unwrap_or(0)
    );
    println!(
        "    absorbed                  {:>6}  (Send events on recorded sends, duplicates, late events)",
        applied("absorbed")
    );
    println!(
        "    ahead of their record     {:>6}  (left on the queue, applied on a later delivery)",
        applied("not_yet")
    );
    for (k, label) in [
        ("gave_up", "transient bounces given up"),
        ("changed_other", "unknown jobs resolved"),
        ("uncorrelated", "uncorrelated"),
    ] {
        if applied(k) > 0 {
            println!("    {label:<26}{:>6}", applied(k));
        }
    }
    if ev.unparseable > 0 {
        println!("    not SES events            {:>6}", ev.unparseable);
    }
    for (domain, (bounce, complaint)) in &ev.rates {
        println!(
            "  reputation of {domain}: bounce rate {:.1} %, complaint rate {:.2} % (the guard judges from {} messages, trips at {:.0} % / {:.2} %)",
            bounce * 100.0,
            complaint * 100.0,
            r.guard.min_volume,
            r.guard.bounce_trip * 100.0,
            r.guard.complaint_trip * 100.0,
        );
    }
    for (domain, reason) in &ev.paused {
        println!("  reputation guard paused SES sends from {domain}: {reason}");
    }
    let mut ends: BTreeMap<&str, usize> = BTreeMap::new();
    for e in r.ses.ended.values() {
        *ends.entry(e.status.as_str()).or_default() += 1;
    }
    let ends: Vec<String> = ends.iter().map(|(k, v)| format!("{k} {v}")).collect();
    println!(
        "  SES jobs at their end       {:>6}  of {ses_jobs} (read back from the status table: {})",
        r.ses.ended.len(),
        ends.join(", ")
    );
    for (id, e) in r.ses.ended.iter().filter(|(_, e)| e.status != e.expected) {
        println!(
            "    {id}: {} through {} (its script ends it {}; see `courierctl status {id}`)",
            e.status,
            e.provider.as_deref().unwrap_or("no provider"),
            e.expected
        );
    }
    if let Some((id, e)) = r.ses.ended.iter().find(|(_, e)| e.recipients.len() > 1) {
        let each: Vec<String> = e
            .recipients
            .iter()
            .map(|(address, outcome)| format!("{address} {outcome}"))
            .collect();
        println!(
            "  one message to {} recipients: {id} {} ({})",
            e.recipients.len(),
            e.status,
            each.join(", ")
        );
    }
    if !r.ses.pending.is_empty() {
        let pending: Vec<&str> = r.ses.pending.keys().map(String::as_str).take(10).collect();
        println!("    not at an end: {}", pending.join(", "));
    }
    if let Some(sample) = r.letters.iter().find(|l| l.history.len() > 1) {
        println!(
            "\na dead letter as an operator sees it:\n{}",
            serde_json::to_string_pretty(sample).unwrap_or_default()
        );
    }
}
