//! `courierctl` end to end: the built binary (`$CARGO_TARGET_DIR/debug/courierctl`, built by the
//! Makefile's `BINS` line before the integration tests) runs against a stack provisioned on the
//! emulator, with the `COURIER_*` settings `courier-dev provision` would print. State is seeded
//! through the library's adapters (letter index, status store, suppression list, poison list)
//! and read back through them; assertions are on exit codes (0 success, 1 failure, 2 bad input
//! or usage) and on the `--json` outputs parsed into the library's types, not on the wording of
//! human-readable output, so progress bars or table layout can change without breaking this.
//! `--stack NAME` is run against small CloudFormation stacks of the test's own whose outputs name
//! the provisioned resources (the provisioned stack has no outputs).

#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers fail the test loudly

use std::process::Command;
use std::time::Duration;

use chrono::{DateTime, Utc};
use courier_adapters::aws::{
    DynamoDbLetterIndex, DynamoDbPoisonList, DynamoDbStatusStore, DynamoDbSuppressionList,
};
use courier_core::classify::ErrorClass;
use courier_core::letters::{IndexedLetter, LetterState, letter_id};
use courier_core::policy::DeadLetterCategory;
use courier_core::ports::{
    AttemptRecord, ClaimOutcome, ClaimRequest, DeadLetter, JobRecord, LetterIndex, PoisonList,
    StatusStore, StatusUpdate, SuppressionEntry, SuppressionList,
};
use courier_core::status::Status;
use courier_integration::{Stack, courierctl, eventually, require_env, unique};
use serde_json::Value;

/// What one run of the binary did.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Asserts the exit code, showing both streams when it differs.
    fn expect(self, code: i32, what: &str) -> Run {
        assert_eq!(
            self.code, code,
            "{what}: exit code {} (expected {code})\nstdout:\n{}\nstderr:\n{}",
            self.code, self.stdout, self.stderr
        );
        self
    }

    /// stdout as one JSON document per non-empty line.
    fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {l:?}\n{}", self.stdout))
            })
            .collect()
    }

    /// stdout as one JSON document.
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }
}

/// The `COURIER_*` settings of a stack, as `courier-dev provision` prints them.
fn settings(stack: &Stack) -> Vec<(&'static str, String)> {
    stack.resources.resource_env()
}

/// Runs `courierctl args` with exactly the `COURIER_*` variables in `env` (every other
/// `COURIER_*` variable of the harness removed; the AWS ones kept).
fn courierctl_with(env: &[(&str, String)], args: &[&str]) -> Run {
    courierctl_env(env, &[], args)
}

/// [`courierctl_with`], with the variables in `remove` (AWS ones) removed as well.
fn courierctl_env(env: &[(&str, String)], remove: &[&str], args: &[&str]) -> Run {
    let mut command = Command::new(courierctl());
    for (k, _) in std::env::vars() {
        if k.starts_with("COURIER_") || remove.contains(&k.as_str()) {
            command.env_remove(k);
        }
    }
    command.envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    command.env("USER", "courier-it");
    let out = command
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run courierctl {args:?}: {e}"));
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `env` without the variable `name`.
fn without(env: &[(&'static str, String)], name: &str) -> Vec<(&'static str, String)> {
    env.iter().filter(|(k, _)| *k != name).cloned().collect()
}

fn job(message_id: &str, campaign: &str, to: &str) -> String {
    serde_json::json!({
        "version": 1, "message_id": message_id, "campaign_id": campaign,
        "from": "sender@courier.test", "to": [to],
        "content": {"subject": "Hello", "text": "hello"}
    })
    .to_string()
}

/// A live letter as the send function indexes it.
#[allow(clippy::too_many_arguments)]
fn letter(
    message_id: Option<&str>,
    campaign: Option<&str>,
    category: DeadLetterCategory,
    class: ErrorClass,
    provider: Option<&str>,
    reason: &str,
    payload: &str,
    at: DateTime<Utc>,
) -> IndexedLetter {
    let fingerprint = courier_core::job::fingerprint(payload.as_bytes());
    let id = letter_id(message_id, &fingerprint, 1, category);
    IndexedLetter {
        letter_id: id.clone(),
        state: LetterState::Live,
        dead_lettered_at: at,
        archive_key: None,
        record: DeadLetter {
            id: message_id.map_or(fingerprint.clone(), str::to_owned),
            category,
            reason: reason.into(),
            message_id: message_id.map(str::to_owned),
            campaign_id: campaign.map(str::to_owned),
            trace_id: None,
            recipients: vec!["reader@courier.test".into()],
            provider: provider.map(str::to_owned),
            class,
            rule: "it.rule".into(),
            raw_code: Some(reason.split_whitespace().next().unwrap_or("").to_owned()),
            raw_text: Some(reason.into()),
            attempts: 1,
            history: vec![AttemptRecord {
                at,
                provider: provider.map(str::to_owned),
                class,
                rule: "it.rule".into(),
                code: None,
                text: Some(reason.into()),
                spent: true,
                delay_secs: None,
            }],
            first_failure_at: at,
            last_failure_at: at,
            fingerprint,
            payload: Some(payload.into()),
            payload_base64: None,
        },
        audit: vec![],
    }
}

/// The send function's claim of generation `attempt` at `now` by `req-it/<attempt>`, keeping
/// `payload` as the body to resend from.
fn claim_of(
    message_id: &str,
    attempt: u32,
    now: DateTime<Utc>,
    payload: Option<String>,
) -> ClaimRequest {
    ClaimRequest {
        message_id: message_id.into(),
        attempt,
        owner: format!("req-it/{attempt}"),
        now,
        lease_until: now + chrono::Duration::seconds(60),
        grace: chrono::Duration::seconds(900),
        check_suppressed: vec![],
        trace_id: None,
        facts: Default::default(),
        payload,
    }
}

/// Writes the job's record as the send function would: claimed as generation 1, then
/// dead-lettered with its reason in the history.
async fn dead_lettered(status: &DynamoDbStatusStore, message_id: &str, now: DateTime<Utc>) {
    let claim = claim_of(message_id, 1, now, None);
    assert_eq!(status.claim(&claim).await.unwrap(), ClaimOutcome::Claimed);
    let mut done = StatusUpdate::new(message_id, "req-it/1", Status::DeadLettered, 1, now);
    done.detail = Some("content_rejected (it.rule): 554 5.7.1 rejected by policy".into());
    status.finish(&done).await.unwrap();
}

fn ids(letters: &[IndexedLetter]) -> Vec<&str> {
    let mut ids: Vec<&str> = letters.iter().map(|l| l.letter_id.as_str()).collect();
    ids.sort_unstable();
    ids
}

fn sorted(mut ids: Vec<&str>) -> Vec<&str> {
    ids.sort_unstable();
    ids
}

/// `dlq list`/`search --json`: one letter per line.
fn listed(run: &Run) -> Vec<IndexedLetter> {
    run.json_lines()
        .into_iter()
        .map(|v| serde_json::from_value(v).expect("a dlq list line is an IndexedLetter"))
        .collect()
}

async fn one(index: &DynamoDbLetterIndex, id: &str) -> IndexedLetter {
    let mut found = index.get_many(&[id.to_owned()]).await.unwrap();
    assert_eq!(found.len(), 1, "{id} is indexed");
    found.remove(0)
}

/// Every message visible on the queue now (received and deleted).
async fn drain(stack: &Stack) -> Vec<aws_sdk_sqs::types::Message> {
    stack.drain(&stack.resources.queue_url).await
}

#[tokio::test]
async fn dlq_commands_search_show_replay_and_discard_through_the_index() {
    let stack = Stack::create(&["smtp"]).await;
    let env = settings(&stack);
    let ctl = |args: &[&str]| courierctl_with(&env, args);
    let dynamodb = aws_sdk_dynamodb::Client::new(&stack.sdk);
    let index = DynamoDbLetterIndex::new(dynamodb.clone(), &stack.resources.letter_index_table);
    let status = DynamoDbStatusStore::new(
        dynamodb.clone(),
        &stack.resources.status_table,
        courier_core::status::RETENTION,
    );
    // a fresh adapter per check: each caches the poison list for its TTL
    let poison = || {
        DynamoDbPoisonList::new(
            dynamodb.clone(),
            &stack.resources.control_table,
            Duration::from_secs(60),
        )
    };
    // whole seconds: what the index stores round-trips exactly
    let now = DateTime::from_timestamp(Utc::now().timestamp(), 0).unwrap();

    // GIVEN three live letters: a policy rejection in campaign spring (its job dead-lettered in
    // the status table), a full mailbox in campaign autumn, and an invalid job without a message id
    let policy_job = job("cli-policy", "spring", "policy@courier.test");
    let policy = letter(
        Some("cli-policy"),
        Some("spring"),
        DeadLetterCategory::NeedsReview,
        ErrorClass::ContentRejected,
        Some("smtp"),
        "554 5.7.1 rejected by policy",
        &policy_job,
        now - chrono::Duration::minutes(30),
    );
    let full = letter(
        Some("cli-full"),
        Some("autumn"),
        DeadLetterCategory::RetriesExhausted,
        ErrorClass::MailboxTemporary,
        Some("ses"),
        "452 4.2.2 Mailbox FULL, try later",
        &job("cli-full", "autumn", "full@courier.test"),
        now - chrono::Duration::minutes(20),
    );
    let broken_payload = "{\"version\": 1, \"message_id\": \"cli-broken\"";
    let broken = letter(
        None,
        None,
        DeadLetterCategory::InvalidJob,
        ErrorClass::InvalidJob,
        None,
        "the job is not JSON: EOF while parsing an object",
        broken_payload,
        now - chrono::Duration::minutes(10),
    );
    for l in [&policy, &full, &broken] {
        assert!(index.put_new(l).await.unwrap());
    }
    dead_lettered(&status, "cli-policy", now - chrono::Duration::minutes(30)).await;
    let all = sorted(vec![
        policy.letter_id.as_str(),
        full.letter_id.as_str(),
        broken.letter_id.as_str(),
    ]);

    // WHEN `dlq stats --json` THEN it counts the live letters by category, class, campaign, provider
    let counted = ctl(&["dlq", "stats", "--json"]).expect(0, "dlq stats");
    // (stderr is not a terminal here: no progress on it)
    assert!(counted.stderr.is_empty(), "{}", counted.stderr);
    let stats = counted.json();
    assert_eq!(stats["live"], 3, "{stats}");
    let by = &stats["by"];
    assert_eq!(by["category"]["needs_review"], 1, "{stats}");
    assert_eq!(by["category"]["retries_exhausted"], 1, "{stats}");
    assert_eq!(by["category"]["invalid_job"], 1, "{stats}");
    assert_eq!(by["class"]["content_rejected"], 1, "{stats}");
    assert_eq!(by["class"]["mailbox_temporary"], 1, "{stats}");
    assert_eq!(by["campaign"]["spring"], 1, "{stats}");
    assert_eq!(by["campaign"]["autumn"], 1, "{stats}");
    assert_eq!(by["provider"]["ses"], 1, "{stats}");
    assert_eq!(by["provider"]["smtp"], 1, "{stats}");
    let spring = ctl(&["dlq", "stats", "--campaign", "spring", "--json"])
        .expect(0, "dlq stats --campaign")
        .json();
    assert_eq!(spring["live"], 1, "{spring}");

    // `dlq list --json` lists every letter as the index holds it (without a campaign or category
    // filter the index is scanned, so the order is the table's, not newest first)
    let list = listed(&ctl(&["dlq", "list", "--json"]).expect(0, "dlq list"));
    assert_eq!(ids(&list), all);
    for l in [&policy, &full, &broken] {
        assert!(
            list.contains(l),
            "the JSON line is the indexed letter: {l:?}"
        );
    }
    // pages of --limit follow each other through the cursor printed on stderr
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..5 {
        let mut args = vec!["dlq", "list", "--json", "--limit", "1"];
        if let Some(c) = &cursor {
            args.extend(["--cursor", c.as_str()]);
        }
        let page = ctl(&args).expect(0, "dlq list --limit 1");
        let letters = listed(&page);
        assert!(letters.len() <= 1, "{}", page.stdout);
        paged.extend(letters);
        cursor = page
            .stderr
            .lines()
            .find_map(|l| l.trim().strip_prefix("more: --cursor "))
            .map(str::to_owned);
        if cursor.is_none() {
            break;
        }
    }
    assert!(cursor.is_none(), "more than 5 pages of 1 for 3 letters");
    assert_eq!(ids(&paged), all);
    // the table form lists them too: a header, then one row per letter, starting with its
    // whole id (as `--json` has it)
    let table = ctl(&["dlq", "list"]).expect(0, "dlq list (table)");
    assert_eq!(table.stdout.lines().count(), 4, "{}", table.stdout);
    assert!(table.stdout.starts_with("ID "), "{}", table.stdout);
    for l in [&policy, &full, &broken] {
        let shown = format!("{} ", l.letter_id);
        assert!(
            table.stdout.lines().any(|row| row.starts_with(&shown)),
            "{shown}\n{}",
            table.stdout
        );
    }

    // `dlq search` with each filter finds exactly the matching letter
    for (args, expected) in [
        (
            vec!["--campaign", "spring"],
            vec![policy.letter_id.as_str()],
        ),
        (
            vec!["--class", "mailbox_temporary"],
            vec![full.letter_id.as_str()],
        ),
        (
            vec!["--category", "invalid-job"],
            vec![broken.letter_id.as_str()],
        ),
        (vec!["--provider", "ses"], vec![full.letter_id.as_str()]),
        // case-insensitive, in the reason or raw text
        (
            vec!["--text", "mailbox full"],
            vec![full.letter_id.as_str()],
        ),
        (
            vec!["--text", "REJECTED BY POLICY"],
            vec![policy.letter_id.as_str()],
        ),
        (
            vec!["--campaign", "spring", "--category", "retries-exhausted"],
            vec![],
        ),
        (vec!["--since", "15m"], vec![broken.letter_id.as_str()]),
        (
            vec!["--state", "live", "--campaign", "autumn"],
            vec![full.letter_id.as_str()],
        ),
    ] {
        let mut command = vec!["dlq", "search", "--json"];
        command.extend(&args);
        let found = listed(&ctl(&command).expect(0, &format!("dlq search {args:?}")));
        assert_eq!(ids(&found), sorted(expected), "dlq search {args:?}");
    }
    // a filter value the CLI does not know is a usage error naming the flag
    let bad = ctl(&["dlq", "search", "--category", "lost"]).expect(2, "dlq search --category lost");
    assert!(bad.stderr.contains("--category"), "{}", bad.stderr);
    let bad = ctl(&["dlq", "search", "--class", "meh"]).expect(2, "dlq search --class meh");
    assert!(bad.stderr.contains("--class"), "{}", bad.stderr);

    // `dlq show ID` prints the letter in full; an unknown id is exit 2 naming it
    let shown: IndexedLetter = serde_json::from_value(
        ctl(&["dlq", "show", &policy.letter_id])
            .expect(0, "dlq show")
            .json(),
    )
    .unwrap();
    assert_eq!(shown, policy);
    let missing = ctl(&["dlq", "show", "no-such-letter#0#g1#poison"]).expect(2, "dlq show unknown");
    assert!(
        missing.stderr.contains("no dead letter") && missing.stderr.contains("no-such-letter"),
        "{}",
        missing.stderr
    );

    // WHEN `dlq replay ID` without --confirm THEN it is a dry run: nothing changes
    let before = status.get("cli-policy").await.unwrap().unwrap();
    assert_eq!(before.status, Status::DeadLettered);
    ctl(&["dlq", "replay", &policy.letter_id]).expect(0, "dlq replay (dry run)");
    ctl(&["dlq", "replay", "--campaign", "spring"]).expect(0, "dlq replay --campaign (dry run)");
    assert!(drain(&stack).await.is_empty(), "a dry run enqueues nothing");
    assert_eq!(one(&index, &policy.letter_id).await, policy);
    assert_eq!(status.get("cli-policy").await.unwrap().unwrap(), before);
    // --confirm without --reason is a usage error; so is a missing COURIER_* variable: neither
    // touches anything
    let no_reason = ctl(&["dlq", "replay", &policy.letter_id, "--confirm"])
        .expect(2, "dlq replay --confirm without --reason");
    assert!(
        no_reason.stderr.contains("--reason"),
        "{}",
        no_reason.stderr
    );
    let no_queue = courierctl_with(
        &without(&env, "COURIER_QUEUE_URL"),
        &[
            "dlq",
            "replay",
            &policy.letter_id,
            "--confirm",
            "--reason",
            "x",
        ],
    )
    .expect(2, "dlq replay without COURIER_QUEUE_URL");
    assert!(
        no_queue.stderr.contains("COURIER_QUEUE_URL"),
        "{}",
        no_queue.stderr
    );
    // selecting by ids and filters at once, or by nothing, is refused
    ctl(&["dlq", "replay", &policy.letter_id, "--campaign", "spring"])
        .expect(2, "dlq replay with ids and filters");
    ctl(&["dlq", "replay"]).expect(2, "dlq replay without a selection");
    assert!(drain(&stack).await.is_empty());
    assert_eq!(one(&index, &policy.letter_id).await, policy);
    assert_eq!(status.get("cli-policy").await.unwrap().unwrap(), before);

    // WHEN it is confirmed with a reason
    let confirmed = ctl(&[
        "dlq",
        "replay",
        &policy.letter_id,
        "--confirm",
        "--reason",
        "policy lifted",
        "--operator",
        "ann",
    ])
    .expect(0, "dlq replay --confirm --reason");
    // (the progress bar is for terminals: stdout has the report, stderr nothing)
    assert!(confirmed.stderr.is_empty(), "{}", confirmed.stderr);
    assert!(
        confirmed
            .stdout
            .starts_with("replayed 1 letters; skipped 0"),
        "{}",
        confirmed.stdout
    );
    // THEN the letter is replayed, with who and why in its audit trail
    let replayed = one(&index, &policy.letter_id).await;
    assert_eq!(replayed.state, LetterState::Replayed);
    assert!(
        replayed
            .audit
            .iter()
            .any(|a| a.contains("ann") && a.contains("policy lifted")),
        "{:?}",
        replayed.audit
    );
    // AND the job is reopened as a new generation
    let reopened = status.get("cli-policy").await.unwrap().unwrap();
    assert_eq!(reopened.status, Status::Pending);
    assert_eq!(reopened.attempt, before.attempt + 1);
    let last = reopened.history.last().unwrap();
    assert_eq!(
        (last.status, last.attempt, last.by.as_str()),
        (Status::Pending, reopened.attempt, "operator")
    );
    // AND exactly one message is on the send queue: the job as that generation, fresh budget
    let queued = drain(&stack).await;
    assert_eq!(queued.len(), 1, "{queued:?}");
    let body: Value = serde_json::from_str(queued[0].body().unwrap()).unwrap();
    assert_eq!(body[courier_core::envelope::ENVELOPE_KEY], 1, "{body}");
    assert_eq!(body["attempt"], reopened.attempt, "{body}");
    let job_sent: Value = serde_json::from_str(&policy_job).unwrap();
    assert_eq!(body["job"], job_sent, "{body}");
    let parsed = courier_core::envelope::parse_body(queued[0].body().unwrap().as_bytes()).unwrap();
    assert_eq!(parsed.attempt, reopened.attempt);
    assert_eq!(parsed.retry, courier_core::policy::RetryState::default());
    // the other letters are untouched
    assert_eq!(one(&index, &full.letter_id).await, full);
    assert_eq!(one(&index, &broken.letter_id).await, broken);

    // WHEN it is replayed again THEN nothing happens (exit 0, nothing enqueued, nothing written)
    ctl(&[
        "dlq",
        "replay",
        &policy.letter_id,
        "--confirm",
        "--reason",
        "again",
    ])
    .expect(0, "dlq replay of a replayed letter");
    ctl(&[
        "dlq",
        "replay",
        "--campaign",
        "spring",
        "--confirm",
        "--reason",
        "again",
    ])
    .expect(0, "dlq replay --campaign of replayed letters");
    assert!(
        drain(&stack).await.is_empty(),
        "a second replay enqueues nothing"
    );
    assert_eq!(one(&index, &policy.letter_id).await, replayed);
    assert_eq!(status.get("cli-policy").await.unwrap().unwrap(), reopened);

    // `status MESSAGE_ID` shows the job's timeline and its letter with the audit trail
    let timeline = ctl(&["status", "cli-policy", "--json"])
        .expect(0, "status --json")
        .json();
    let record: JobRecord = serde_json::from_value(timeline["record"].clone()).unwrap();
    assert_eq!(record, reopened);
    let statuses: Vec<Status> = record.history.iter().map(|h| h.status).collect();
    assert_eq!(
        statuses,
        [Status::Processing, Status::DeadLettered, Status::Pending]
    );
    let letters: Vec<IndexedLetter> = serde_json::from_value(timeline["letters"].clone()).unwrap();
    assert_eq!(letters, std::slice::from_ref(&replayed));
    let text = ctl(&["status", "cli-policy"]).expect(0, "status");
    for needle in ["pending", "dead_lettered", "operator", "policy lifted"] {
        assert!(text.stdout.contains(needle), "{needle}\n{}", text.stdout);
    }
    let unknown = ctl(&["status", "cli-no-such-job"]).expect(2, "status of an unknown job");
    assert!(
        unknown.stderr.contains("cli-no-such-job"),
        "{}",
        unknown.stderr
    );
    // a letter without a status record still has a status (its letter); the invalid job has none
    let no_record = ctl(&["status", "cli-full", "--json"])
        .expect(0, "status of a job known only by its letter")
        .json();
    assert!(no_record["record"].is_null(), "{no_record}");
    assert_eq!(
        no_record["letters"][0]["letter_id"], full.letter_id,
        "{no_record}"
    );

    // WHEN the invalid job is discarded with --blocklist THEN it is discarded with who and why,
    // and its payload's fingerprint is on the poison list
    let blocked_before = poison()
        .is_blocked(&broken.record.fingerprint)
        .await
        .unwrap();
    assert!(!blocked_before);
    // A letter without a message id has an id starting with `_#`, which the argument parser
    // takes as an id wherever it stands.
    let dashed = broken.letter_id.as_str();
    assert!(dashed.starts_with("_#"), "{dashed}");
    let no_control = courierctl_with(
        &without(&env, "COURIER_CONTROL_TABLE"),
        &[
            "dlq",
            "discard",
            "--confirm",
            "--reason",
            "x",
            "--blocklist",
            dashed,
        ],
    )
    .expect(2, "dlq discard --blocklist without COURIER_CONTROL_TABLE");
    assert!(
        no_control.stderr.contains("COURIER_CONTROL_TABLE"),
        "{}",
        no_control.stderr
    );
    assert_eq!(one(&index, dashed).await, broken);
    ctl(&["dlq", "discard", dashed, "--confirm"])
        .expect(2, "dlq discard --confirm without --reason");
    assert_eq!(one(&index, dashed).await, broken);
    ctl(&[
        "dlq",
        "discard",
        "--confirm",
        "--reason",
        "garbage from a test client",
        "--operator",
        "bob",
        "--blocklist",
        dashed,
    ])
    .expect(0, "dlq discard --blocklist");
    let discarded = one(&index, &broken.letter_id).await;
    assert_eq!(discarded.state, LetterState::Discarded);
    assert!(
        discarded
            .audit
            .iter()
            .any(|a| a.contains("bob") && a.contains("garbage from a test client")),
        "{:?}",
        discarded.audit
    );
    assert!(
        poison()
            .is_blocked(&courier_core::envelope::job_fingerprint(broken_payload))
            .await
            .unwrap(),
        "the discarded payload is blocklisted"
    );
    // AND a discard by filter without --blocklist leaves the poison list alone
    ctl(&["dlq", "discard", "--campaign", "autumn"]).expect(0, "dlq discard (dry run)");
    assert_eq!(one(&index, &full.letter_id).await, full);
    ctl(&[
        "dlq",
        "discard",
        "--campaign",
        "autumn",
        "--confirm",
        "--reason",
        "campaign cancelled",
    ])
    .expect(0, "dlq discard --campaign");
    let full_now = one(&index, &full.letter_id).await;
    assert_eq!(full_now.state, LetterState::Discarded);
    assert!(
        full_now
            .audit
            .iter()
            .any(|a| a.contains("courier-it") && a.contains("campaign cancelled")),
        "the operator defaults to $USER: {:?}",
        full_now.audit
    );
    assert!(!poison().is_blocked(&full.record.fingerprint).await.unwrap());
    assert!(drain(&stack).await.is_empty(), "a discard enqueues nothing");

    // THEN no live letters remain, and the settled ones are still searchable by state
    let stats = ctl(&["dlq", "stats", "--json"])
        .expect(0, "dlq stats after")
        .json();
    assert_eq!(stats["live"], 0, "{stats}");
    let settled = listed(
        &ctl(&["dlq", "search", "--state", "discarded", "--json"])
            .expect(0, "dlq search --state discarded"),
    );
    assert_eq!(
        ids(&settled),
        sorted(vec![full.letter_id.as_str(), broken.letter_id.as_str()])
    );
}

/// `id` claimed as generation 0 at `t` with `payload` kept, then deferred to 1, its copy due a
/// minute later.
async fn deferred_at(status: &DynamoDbStatusStore, id: &str, payload: String, t: DateTime<Utc>) {
    let claim = claim_of(id, 0, t, Some(payload));
    assert_eq!(status.claim(&claim).await.unwrap(), ClaimOutcome::Claimed);
    let mut deferred = StatusUpdate::new(id, "req-it/0", Status::Deferred, 1, t);
    deferred.copy_due = Some(t + chrono::Duration::seconds(60));
    status.finish(&deferred).await.unwrap();
}

/// The sweeper flags `id` (deferred at `t`) as overdue two hours later: its copy never came
/// back. When it flagged it.
async fn flag_overdue(status: &DynamoDbStatusStore, id: &str, t: DateTime<Utc>) -> DateTime<Utc> {
    let found = status.get(id).await.unwrap().unwrap();
    let swept_at = t + chrono::Duration::hours(2);
    let mark = courier_core::ports::SweepMark::CopyOverdue;
    assert!(status.sweep(&found, mark, swept_at).await.unwrap());
    swept_at
}

/// `requeue` puts back the lost copy of a job the sweeper flagged (`SweptCopyOverdue`): a dry
/// run without `--confirm`, a usage error without `--reason`, then one sealed copy of the job at
/// its generation on the send queue and who and why in its timeline; a job whose copy may still
/// come is refused.
#[tokio::test]
async fn requeue_puts_back_the_copy_of_a_job_the_sweeper_flagged() {
    let stack = Stack::create(&["smtp"]).await;
    // The stack's retry lane is named: put-back copies go there, not to fresh mail's queue.
    let mut env = settings(&stack);
    env.push(("COURIER_RETRY_QUEUE_URL", stack.retry_queue_url.clone()));
    let lanes = || async {
        (
            drain(&stack).await,
            stack.drain(&stack.retry_queue_url).await,
        )
    };
    let ctl = |args: &[&str]| courierctl_with(&env, args);
    let status = DynamoDbStatusStore::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk),
        &stack.resources.status_table,
        courier_core::status::RETENTION,
    );
    let t = Utc::now() - chrono::Duration::hours(3);
    let body = job("cli-lost", "spring", "ann@courier.test");
    // GIVEN jobs claimed as generation 0 and deferred to 1, their copies due a minute later
    for id in ["cli-lost", "cli-waiting"] {
        deferred_at(&status, id, body.replace("cli-lost", id), t).await;
    }
    // AND the sweeper flagged one of them: its copy never came back
    let swept_at = flag_overdue(&status, "cli-lost", t).await;
    let flagged = status.get("cli-lost").await.unwrap().unwrap();

    // WHEN `requeue ID` without --confirm THEN a dry run: nothing enqueued or written
    let dry = ctl(&["requeue", "cli-lost"]).expect(0, "requeue (dry run)");
    assert!(
        dry.stdout
            .contains("would put back the copies of 1 jobs; skipped 0"),
        "{}",
        dry.stdout
    );
    let (send, retry) = lanes().await;
    assert!(send.is_empty() && retry.is_empty(), "{send:?} {retry:?}");
    assert_eq!(status.get("cli-lost").await.unwrap().unwrap(), flagged);
    // `--overdue` finds the flagged job (and not the one still waiting)
    let listed = ctl(&["requeue", "--overdue"]).expect(0, "requeue --overdue (dry run)");
    assert!(
        listed
            .stdout
            .contains("would put back the copies of 1 jobs; skipped 0"),
        "{}",
        listed.stdout
    );
    ctl(&["requeue", "--overdue", "cli-lost"]).expect(2, "requeue with ids and --overdue");
    ctl(&["requeue", "--limit", "5", "cli-lost"]).expect(2, "requeue --limit without --overdue");
    let (send, retry) = lanes().await;
    assert!(send.is_empty() && retry.is_empty(), "{send:?} {retry:?}");
    let no_reason = ctl(&["requeue", "cli-lost", "--confirm"]).expect(2, "requeue --confirm alone");
    assert!(
        no_reason.stderr.contains("--reason"),
        "{}",
        no_reason.stderr
    );
    ctl(&["requeue"]).expect(2, "requeue without a message id");

    // WHEN confirmed with a reason
    let done = ctl(&[
        "requeue",
        "cli-lost",
        "cli-waiting",
        "--confirm",
        "--reason",
        "retry queue purged",
        "--operator",
        "ann",
    ])
    .expect(0, "requeue --confirm --reason");
    // THEN the flagged job's copy is put back; the other's may still come
    assert!(
        done.stdout
            .contains("put back the copies of 1 jobs; skipped 1"),
        "{}",
        done.stdout
    );
    assert!(
        done.stdout
            .contains("skipped cli-waiting: not flagged by the sweeper"),
        "{}",
        done.stdout
    );
    let (send, queued) = lanes().await;
    assert!(send.is_empty(), "nothing on the send queue: {send:?}");
    assert_eq!(queued.len(), 1, "{queued:?}");
    let copy: Value = serde_json::from_str(queued[0].body().unwrap()).unwrap();
    assert_eq!(copy[courier_core::envelope::ENVELOPE_KEY], 1, "{copy}");
    assert!(
        copy["seal"].is_string(),
        "sealed with the stack's key: {copy}"
    );
    let parsed = courier_core::envelope::parse_body(queued[0].body().unwrap().as_bytes()).unwrap();
    assert_eq!(
        (parsed.job.message_id.as_str(), parsed.attempt),
        ("cli-lost", 1)
    );
    let rec = status.get("cli-lost").await.unwrap().unwrap();
    assert_eq!((rec.status, rec.attempt), (Status::Deferred, 1));
    // waiting again for the copy put back (flagged again should it be lost too)
    assert!(rec.swept_at.is_none(), "{rec:?}");
    assert!(rec.copy_due.is_some_and(|due| due > swept_at), "{rec:?}");
    let listed = ctl(&["requeue", "--overdue"]).expect(0, "requeue --overdue after");
    assert!(
        listed
            .stdout
            .contains("would put back the copies of 0 jobs"),
        "{}",
        listed.stdout
    );
    let last = rec.history.last().unwrap();
    assert_eq!(
        (last.by.as_str(), last.status),
        ("operator", Status::Deferred)
    );
    assert!(
        last.detail
            .as_deref()
            .unwrap()
            .contains("ann: retry queue purged"),
        "{last:?}"
    );
    assert_eq!(
        status
            .get("cli-waiting")
            .await
            .unwrap()
            .unwrap()
            .history
            .len(),
        2,
        "nothing written to a job that was not put back"
    );
    // AND the copy claims the job at its generation
    let claim = claim_of("cli-lost", parsed.attempt, Utc::now(), None);
    assert_eq!(status.claim(&claim).await.unwrap(), ClaimOutcome::Claimed);
}

/// A job whose kept body is too large for SQS (512 KiB of text, all quotes: twice that once
/// escaped in JSON; sent through the producer's claim check) is read from the payload bucket and its put-back copy
/// stowed there again (the claim check, as the functions' copies): the retry queue gets the
/// pointer, and the pointer gives back the whole job at its generation, sealed.
#[tokio::test]
async fn requeue_puts_back_a_copy_too_large_for_sqs_through_the_claim_check() {
    use courier_core::claim_check::{self, ClaimCheck, MAX_INLINE_BYTES};
    let stack = Stack::create(&["smtp"]).await;
    let mut env = settings(&stack);
    env.push(("COURIER_RETRY_QUEUE_URL", stack.retry_queue_url.clone()));
    let status = DynamoDbStatusStore::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk),
        &stack.resources.status_table,
        courier_core::status::RETENTION,
    );
    let payloads = courier_adapters::aws::S3PayloadStore::new(
        aws_sdk_s3::Client::new(&stack.sdk),
        stack.resources.payload_bucket.clone(),
    );
    // GIVEN a deferred job whose body (kept in the payload bucket) is near 1 MiB
    let quotes = "\"".repeat(courier_core::job::MAX_BODY_BYTES - 1024);
    let large = serde_json::json!({
        "version": 1, "message_id": "cli-large", "campaign_id": "spring",
        "from": "sender@courier.test", "to": ["ann@courier.test"],
        "content": {"subject": "Hello", "text": quotes}
    })
    .to_string();
    assert!(large.len() > MAX_INLINE_BYTES, "{} bytes", large.len());
    let kept = claim_check::keep(&payloads, large.clone()).await.unwrap();
    assert!(ClaimCheck::parse(&kept).is_some(), "kept apart: {kept}");
    let t = Utc::now() - chrono::Duration::hours(3);
    deferred_at(&status, "cli-large", kept, t).await;
    // AND the sweeper flagged it: its copy never came back
    flag_overdue(&status, "cli-large", t).await;
    // AND a dry run reads its body from the bucket and builds the copy, sending nothing
    let dry = courierctl_with(&env, &["requeue", "cli-large"]).expect(0, "requeue (dry run)");
    assert!(
        dry.stdout
            .contains("would put back the copies of 1 jobs; skipped 0; failed 0"),
        "{}",
        dry.stdout
    );
    assert!(stack.drain(&stack.retry_queue_url).await.is_empty());
    // WHEN an operator puts it back
    let done = courierctl_with(
        &env,
        &[
            "requeue",
            "cli-large",
            "--confirm",
            "--reason",
            "retry queue purged",
        ],
    )
    .expect(0, "requeue --confirm of a large job");
    assert!(
        done.stdout
            .contains("put back the copies of 1 jobs; skipped 0"),
        "{}",
        done.stdout
    );
    // THEN the retry queue holds a claim check, and it gives back the whole job, sealed, at
    // its generation
    let queued = stack.drain(&stack.retry_queue_url).await;
    assert_eq!(queued.len(), 1);
    let pointer = queued[0].body().unwrap();
    assert!(pointer.len() < 1024, "a pointer: {} bytes", pointer.len());
    assert!(ClaimCheck::parse(pointer).is_some(), "{pointer}");
    let body = claim_check::redeem(Some(&payloads), pointer).await.unwrap();
    let copy: Value = serde_json::from_str(&body).unwrap();
    assert!(copy["seal"].is_string(), "sealed: {}", &body[..200]);
    let parsed = courier_core::envelope::parse_body(body.as_bytes()).unwrap();
    assert_eq!(
        (parsed.job.message_id.as_str(), parsed.attempt),
        ("cli-large", 1)
    );
    assert_eq!(
        parsed.job.content,
        courier_core::envelope::parse_body(large.as_bytes())
            .unwrap()
            .job
            .content
    );
    let rec = status.get("cli-large").await.unwrap().unwrap();
    assert_eq!(
        (rec.status, rec.attempt, rec.swept_at),
        (Status::Deferred, 1, None)
    );
}

#[tokio::test]
async fn suppression_commands_add_list_and_remove() {
    let stack = Stack::create(&["smtp"]).await;
    let env = settings(&stack);
    let ctl = |args: &[&str]| courierctl_with(&env, args);
    let list = DynamoDbSuppressionList::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk),
        &stack.resources.suppression_table,
    );
    // GIVEN an entry the events function wrote (a permanent bounce)
    let now = Utc::now();
    list.suppress("bounced@courier.test", "bounce: 550 5.1.1", now)
        .await
        .unwrap();

    // WHEN an operator adds a hard and a soft entry
    ctl(&[
        "suppression",
        "add",
        "Hard@Courier.test",
        "--reason",
        "asked by phone",
    ])
    .expect(0, "suppression add (hard)");
    ctl(&[
        "suppression",
        "add",
        "soft@courier.test",
        "--reason",
        "mailbox full for weeks",
        "--expires",
        "30d",
    ])
    .expect(0, "suppression add --expires");
    // THEN `suppression list --json` shows all three, lower-cased, the soft one expiring in 30 days
    let entries: Vec<SuppressionEntry> = ctl(&["suppression", "list", "--json"])
        .expect(0, "suppression list --json")
        .json_lines()
        .into_iter()
        .map(|v| serde_json::from_value(v).expect("a suppression list line is an entry"))
        .collect();
    let entry = |address: &str| {
        entries
            .iter()
            .find(|e| e.address == address)
            .unwrap_or_else(|| panic!("{address} not listed: {entries:?}"))
    };
    assert_eq!(entries.len(), 3, "{entries:?}");
    let hard = entry("hard@courier.test");
    assert!(hard.reason.contains("asked by phone"), "{hard:?}");
    assert_eq!(hard.expires_at, None);
    let soft = entry("soft@courier.test");
    assert!(soft.reason.contains("mailbox full for weeks"), "{soft:?}");
    let expires = soft.expires_at.expect("a soft entry expires");
    let expected = now + chrono::Duration::days(30);
    assert!(
        (expires - expected).num_seconds().abs() < 120,
        "expires {expires}, expected about {expected}"
    );
    assert_eq!(entry("bounced@courier.test").expires_at, None);
    // AND the send function's check sees them (the soft one until it expires)
    let hit = list
        .suppressed(
            &[
                "hard@courier.test".into(),
                "soft@courier.test".into(),
                "free@courier.test".into(),
            ],
            now,
        )
        .await
        .unwrap();
    assert_eq!(
        sorted(hit.iter().map(String::as_str).collect()),
        ["hard@courier.test", "soft@courier.test"]
    );
    let later = list
        .suppressed(
            &["soft@courier.test".into()],
            now + chrono::Duration::days(31),
        )
        .await
        .unwrap();
    assert!(later.is_empty(), "{later:?}");
    // the table form lists them too
    let table = ctl(&["suppression", "list"]).expect(0, "suppression list");
    assert!(
        table.stdout.contains("soft@courier.test"),
        "{}",
        table.stdout
    );

    // bad input is exit 2 and writes nothing
    ctl(&["suppression", "add", "not an address", "--reason", "x"])
        .expect(2, "suppression add of an invalid address");
    ctl(&[
        "suppression",
        "add",
        "x@courier.test",
        "--reason",
        "x",
        "--expires",
        "soon",
    ])
    .expect(2, "suppression add --expires soon");
    ctl(&["suppression", "add", "x@courier.test"]).expect(2, "suppression add without --reason");

    // WHEN entries are removed THEN they are gone; an address not on the list is exit 2
    ctl(&["suppression", "remove", "hard@courier.test"]).expect(0, "suppression remove");
    let not_there = ctl(&["suppression", "remove", "never@courier.test"])
        .expect(2, "suppression remove of an unknown address");
    assert!(
        not_there.stderr.contains("never@courier.test"),
        "{}",
        not_there.stderr
    );
    ctl(&["suppression", "remove", "hard@courier.test"]).expect(2, "suppression remove twice");
    let left: Vec<String> = ctl(&["suppression", "list", "--json"])
        .expect(0, "suppression list --json after")
        .json_lines()
        .iter()
        .map(|v| v["address"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        sorted(left.iter().map(String::as_str).collect()),
        ["bounced@courier.test", "soft@courier.test"]
    );
}

#[test]
fn a_missing_setting_is_exit_2_naming_the_variable() {
    // The emulator is not reached: each command stops at its first missing variable.
    require_env("AWS_ENDPOINT_URL");
    for (args, variable) in [
        (vec!["dlq", "stats", "--json"], "COURIER_LETTER_INDEX_TABLE"),
        (vec!["dlq", "list"], "COURIER_LETTER_INDEX_TABLE"),
        (vec!["dlq", "show", "x"], "COURIER_LETTER_INDEX_TABLE"),
        (
            vec!["suppression", "list", "--json"],
            "COURIER_SUPPRESSION_TABLE",
        ),
        (
            vec!["suppression", "add", "a@courier.test", "--reason", "r"],
            "COURIER_SUPPRESSION_TABLE",
        ),
        (vec!["status", "m1"], "COURIER_STATUS_TABLE"),
    ] {
        let run = courierctl_with(&[], &args).expect(2, &format!("{args:?} without settings"));
        assert!(
            run.stderr.contains(variable),
            "{args:?}: stderr does not name {variable}:\n{}",
            run.stderr
        );
        assert!(
            run.stderr.contains("--stack NAME"),
            "{args:?}: stderr does not say --stack provides it:\n{}",
            run.stderr
        );
        assert!(run.stdout.is_empty(), "{args:?}: {}", run.stdout);
    }
    // `status` needs both tables: with the status table set, the index is named
    let run = courierctl_with(&[("COURIER_STATUS_TABLE", "t".into())], &["status", "m1"])
        .expect(2, "status without COURIER_LETTER_INDEX_TABLE");
    assert!(
        run.stderr.contains("COURIER_LETTER_INDEX_TABLE"),
        "{}",
        run.stderr
    );
    // usage mistakes clap catches are exit 2 as well
    courierctl_with(&[], &["dlq", "replay", "--rate"]).expect(2, "a flag without its value");
    courierctl_with(&[], &["dlq", "frobnicate"]).expect(2, "an unknown subcommand");
}

/// Creates the CloudFormation stack `name` on the emulator with `outputs` as literal values (and
/// a queue, as a stack needs a resource), and waits until it is created.
async fn stack_with_outputs(sdk: &aws_config::SdkConfig, name: &str, outputs: &[(&str, &str)]) {
    let cfn = aws_sdk_cloudformation::Client::new(sdk);
    let mut template = serde_json::json!({
        "AWSTemplateFormatVersion": "2010-09-09",
        "Resources": {"Placeholder": {"Type": "AWS::SQS::Queue"}},
    });
    if !outputs.is_empty() {
        template["Outputs"] = outputs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), serde_json::json!({ "Value": v })))
            .collect::<serde_json::Map<_, _>>()
            .into();
    }
    cfn.create_stack()
        .stack_name(name)
        .template_body(template.to_string())
        .send()
        .await
        .unwrap_or_else(|e| panic!("create stack {name}: {e:?}"));
    let status = eventually(Duration::from_secs(120), || {
        let cfn = cfn.clone();
        async move {
            let out = cfn.describe_stacks().stack_name(name).send().await.ok()?;
            let status = out.stacks().first()?.stack_status()?.as_str().to_owned();
            (!status.ends_with("IN_PROGRESS")).then_some(status)
        }
    })
    .await;
    assert_eq!(status.as_deref(), Some("CREATE_COMPLETE"), "stack {name}");
}

#[tokio::test]
async fn stack_outputs_name_the_tables_and_a_set_variable_wins() {
    let stack = Stack::create(&["smtp"]).await;
    let r = &stack.resources;
    let status = stack.status_store();
    let list = DynamoDbSuppressionList::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk),
        &r.suppression_table,
    );
    // GIVEN a dead-lettered job and a suppressed address in the provisioned tables
    let now = DateTime::from_timestamp(Utc::now().timestamp(), 0).unwrap();
    dead_lettered(&status, "cli-stacked", now).await;
    list.suppress("stacked@courier.test", "bounce: 550 5.1.1", now)
        .await
        .unwrap();
    // AND a stack whose outputs name those resources, as the deployed template's do
    let named = unique("courier-outputs");
    stack_with_outputs(
        &stack.sdk,
        &named,
        &[
            ("StatusTableName", &r.status_table),
            ("SuppressionTableName", &r.suppression_table),
            ("ControlTableName", &r.control_table),
            ("LetterIndexTableName", &r.letter_index_table),
            ("SendQueueUrl", &r.queue_url),
            ("SomethingElse", "ignored"),
        ],
    )
    .await;

    // WHEN courierctl runs with --stack and no COURIER_* variable THEN it reads those tables
    let shown = courierctl_with(&[], &["--stack", &named, "status", "cli-stacked", "--json"])
        .expect(0, "--stack status")
        .json();
    let record: JobRecord = serde_json::from_value(shown["record"].clone()).unwrap();
    assert_eq!(record, status.get("cli-stacked").await.unwrap().unwrap());
    assert_eq!(record.status, Status::DeadLettered);
    let listed_addresses = |run: &Run| -> Vec<String> {
        run.json_lines()
            .iter()
            .map(|v| v["address"].as_str().unwrap().to_owned())
            .collect()
    };
    let suppressed = courierctl_with(&[], &["suppression", "list", "--json", "--stack", &named])
        .expect(0, "suppression list --stack (after the subcommand)");
    assert_eq!(listed_addresses(&suppressed), ["stacked@courier.test"]);
    // COURIER_STACK does the same as the flag
    let from_env = courierctl_with(
        &[("COURIER_STACK", named.clone())],
        &["suppression", "list", "--json"],
    )
    .expect(0, "COURIER_STACK suppression list");
    assert_eq!(listed_addresses(&from_env), ["stacked@courier.test"]);
    // the table form: a header, the address, and nothing on stderr
    let table = courierctl_with(&[], &["--stack", &named, "suppression", "list"])
        .expect(0, "--stack suppression list (table)");
    let rows: Vec<&str> = table.stdout.lines().collect();
    assert_eq!(rows.len(), 2, "{}", table.stdout);
    assert!(rows[0].starts_with("ADDRESS "), "{}", table.stdout);
    assert!(
        rows[1].starts_with("stacked@courier.test ") && rows[1].contains("bounce: 550 5.1.1"),
        "{}",
        table.stdout
    );
    assert!(table.stderr.is_empty(), "{}", table.stderr);
    // dlq reads the letter index through the stack too
    let stats = courierctl_with(&[], &["--stack", &named, "dlq", "stats", "--json"])
        .expect(0, "--stack dlq stats")
        .json();
    assert_eq!(stats["live"], 0, "{stats}");

    // GIVEN a stack whose outputs name a suppression table that does not exist, and no status table
    let partial = unique("courier-partial");
    stack_with_outputs(
        &stack.sdk,
        &partial,
        &[("SuppressionTableName", "courier-it-no-such-table")],
    )
    .await;
    // THEN its output is used where no variable is set (and fails: the table is not there)
    courierctl_with(&[], &["--stack", &partial, "suppression", "list", "--json"])
        .expect(1, "--stack with an output naming a missing table");
    // AND a COURIER_* variable that is set wins over the output
    let env_wins = courierctl_with(
        &[("COURIER_SUPPRESSION_TABLE", r.suppression_table.clone())],
        &["--stack", &partial, "suppression", "list", "--json"],
    )
    .expect(0, "COURIER_SUPPRESSION_TABLE over the stack's output");
    assert_eq!(listed_addresses(&env_wins), ["stacked@courier.test"]);
    // AND a setting neither gives is exit 2 naming the variable, the output and the stack
    let missing = courierctl_with(&[], &["--stack", &partial, "status", "cli-stacked"])
        .expect(2, "--stack without the status table's output");
    for needle in ["COURIER_STATUS_TABLE", "StatusTableName", partial.as_str()] {
        assert!(
            missing.stderr.contains(needle),
            "{needle}: {}",
            missing.stderr
        );
    }
    assert!(missing.stdout.is_empty(), "{}", missing.stdout);

    // GIVEN a stack without outputs THEN it is exit 2, saying so, even with every variable set
    let bare = unique("courier-bare");
    stack_with_outputs(&stack.sdk, &bare, &[]).await;
    let no_outputs = courierctl_with(
        &settings(&stack),
        &["--stack", &bare, "status", "cli-stacked"],
    )
    .expect(2, "--stack of a stack without outputs");
    assert!(
        no_outputs.stderr.contains("no outputs") && no_outputs.stderr.contains(&bare),
        "{}",
        no_outputs.stderr
    );

    // AWS access is the AWS CLI's: with no AWS_REGION and no keys in the environment, the
    // profile AWS_PROFILE names gives both
    let region = require_env("AWS_REGION");
    let dir = std::env::temp_dir().join(unique("courierctl-aws"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config");
    std::fs::write(
        &config,
        format!(
            "[profile courier-it]\nregion = {region}\naws_access_key_id = courier\naws_secret_access_key = courier\n\n\
             [profile elsewhere]\nregion = ap-southeast-2\naws_access_key_id = courier\naws_secret_access_key = courier\n"
        ),
    )
    .unwrap();
    let aws_env = [
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
    ];
    let with_profile = |profile: &str, extra: &[(&'static str, String)]| {
        let mut env = vec![
            ("AWS_CONFIG_FILE", config.display().to_string()),
            (
                "AWS_SHARED_CREDENTIALS_FILE",
                dir.join("no-credentials").display().to_string(),
            ),
            ("AWS_PROFILE", profile.to_owned()),
        ];
        env.extend(extra.iter().cloned());
        courierctl_env(
            &env,
            &aws_env,
            &["--stack", &named, "status", "cli-stacked", "--json"],
        )
    };
    let run = with_profile("courier-it", &[]).expect(0, "AWS_PROFILE courier-it");
    assert_eq!(run.json()["record"]["message_id"], "cli-stacked");
    // the other profile's region has no such stack: exit 2, naming the region
    let elsewhere = with_profile("elsewhere", &[]).expect(2, "AWS_PROFILE elsewhere");
    assert!(
        elsewhere.stderr.contains("no stack named")
            && elsewhere.stderr.contains(&named)
            && elsewhere.stderr.contains("ap-southeast-2"),
        "{}",
        elsewhere.stderr
    );
    // AWS_REGION wins over the profile's region, as with the AWS CLI
    with_profile("elsewhere", &[("AWS_REGION", region.clone())])
        .expect(0, "AWS_REGION over the profile's region");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unknown_stack_is_exit_2_and_an_unreachable_cloudformation_exit_1() {
    require_env("AWS_ENDPOINT_URL");
    let name = unique("courier-no-such-stack");
    for args in [
        vec!["--stack", name.as_str(), "status", "m1"],
        vec!["dlq", "list", "--stack", name.as_str()],
        vec!["suppression", "list", "--json", "--stack", name.as_str()],
    ] {
        let run = courierctl_with(&[], &args).expect(2, &format!("{args:?}"));
        assert!(
            run.stderr.contains("no stack named") && run.stderr.contains(&name),
            "{args:?}: {}",
            run.stderr
        );
        assert!(run.stdout.is_empty(), "{args:?}: {}", run.stdout);
    }
    // the offline commands never look the stack up
    courierctl_with(
        &[],
        &["--stack", &name, "classify", "550 5.1.1 User unknown"],
    )
    .expect(0, "classify with --stack");
    // an empty name is a usage error
    courierctl_with(&[], &["--stack", "", "status", "m1"]).expect(2, "--stack ''");
    // CloudFormation that cannot be reached: an AWS failure, exit 1, naming the stack
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let run = courierctl_with(
        &[
            ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}")),
            ("AWS_MAX_ATTEMPTS", "1".into()),
        ],
        &["--stack", &name, "status", "m1"],
    )
    .expect(1, "--stack with CloudFormation unreachable");
    assert!(
        run.stderr.contains("could not describe stack") && run.stderr.contains(&name),
        "{}",
        run.stderr
    );
}

/// `courierctl policy`: validate without storing, set a valid document as the next version
/// (recorded with its operator), refuse an invalid one or one made from another version (exit
/// 1, nothing stored) unless forced, show what is stored; without the control table, or without
/// the version a change was made from, it is a usage error (exit 2).
#[tokio::test]
async fn policy_commands_validate_set_and_show_the_live_settings() {
    use courier_core::ports::LiveSettingsStore;
    let stack = Stack::create(&["ses"]).await;
    let env = settings(&stack);
    let ctl = |args: &[&str]| courierctl_with(&env, args);
    let dir = std::env::temp_dir().join(unique("policy"));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.json");
    std::fs::write(
        &good,
        r#"{"breaker": {"min_calls": 20}, "send_rates": {"ses": 14}}"#,
    )
    .unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"{"breaker": {"failure_ratio": 3}}"#).unwrap();
    let (good, bad) = (good.to_str().unwrap(), bad.to_str().unwrap());
    let store = courier_adapters::aws::DynamoDbLiveSettings::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk),
        &stack.resources.control_table,
    );
    // validate: what it puts in force, nothing stored
    let v = ctl(&["policy", "validate", good]).expect(0, "policy validate (good)");
    assert!(v.stdout.contains("ses 14/s"), "{}", v.stdout);
    let v = ctl(&["policy", "validate", bad]).expect(1, "policy validate (bad)");
    assert!(v.stderr.contains("breaker.failure_ratio"), "{}", v.stderr);
    assert!(store.get().await.unwrap().is_none());
    ctl(&["policy", "show"]).expect(0, "policy show (none)");
    let none = ctl(&["policy", "show", "--document"]).expect(0, "policy show --document (none)");
    assert_eq!(
        (none.stdout.trim(), none.stderr.trim()),
        ("{}", "version 0 (none stored)")
    );
    // set: version 1, then an invalid one is refused and version 1 stays
    ctl(&["policy", "set", good]).expect(2, "policy set (from no version)");
    ctl(&["policy", "set", good, "--expect-version", "0"]).expect(0, "policy set (good)");
    ctl(&["policy", "set", bad, "--expect-version", "1"]).expect(1, "policy set (bad)");
    let stored = store.get().await.unwrap().unwrap();
    assert_eq!(stored.version, 1);
    assert_eq!(stored.updated_by, "courier-it");
    assert!(stored.document.contains("\"min_calls\": 20"));
    let shown = ctl(&["policy", "show"]).expect(0, "policy show");
    assert!(
        shown.stdout.starts_with("version 1 stored"),
        "{}",
        shown.stdout
    );
    // a change made from an older version is refused, the stored one stays; --force stores it
    let stale = dir.join("stale.json");
    std::fs::write(&stale, r#"{"breaker": {"min_calls": 5}}"#).unwrap();
    let stale = stale.to_str().unwrap();
    let refused =
        ctl(&["policy", "set", stale, "--expect-version", "0"]).expect(1, "policy set (stale)");
    assert!(
        refused
            .stderr
            .contains("version 1 of the live settings is stored, not version 0"),
        "{}",
        refused.stderr
    );
    assert_eq!(store.get().await.unwrap().unwrap().version, 1);
    ctl(&["policy", "set", stale, "--force"]).expect(0, "policy set (forced)");
    // show --document prints the document alone, ready to be set again
    let kept = ctl(&["policy", "show", "--document"]).expect(0, "policy show --document");
    assert_eq!(kept.stdout.trim(), r#"{"breaker": {"min_calls": 5}}"#);
    assert_eq!(kept.stderr.trim(), "version 2");
    assert_eq!(store.get().await.unwrap().unwrap().version, 2);
    // a file that cannot be read, and no control table: usage errors
    let unread = ctl(&["policy", "set", "/nonexistent/policy.json", "--force"])
        .expect(2, "policy set (no file)");
    assert!(unread.stderr.contains("invalid file"), "{}", unread.stderr);
    courierctl_with(&without(&env, "COURIER_CONTROL_TABLE"), &["policy", "show"])
        .expect(2, "policy show (no table)");
}
