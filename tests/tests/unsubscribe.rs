//! One-click unsubscribe end to end on the emulators: a bulk job's message carries the link (read
//! back from Postfix's Maildir and from the SES emulator), the unsubscribe function behind a
//! function URL on the loopback (`courier_dev::function_url`) records the one-click POST in the
//! stack's suppression table, and the next bulk job of that list to that recipient is not sent.
//! The producer's client writes the jobs (`list_id`, bulk priority).
#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers fail the test loudly

use std::sync::Arc;
use std::time::{Duration, Instant};

use courier_client::{CourierQueue, Email, Priority};
use courier_core::ports::StatusStore;
use courier_core::status::Status;
use courier_integration::{Stack, courierctl, require_env, unique};

/// A stack whose send function links to an unsubscribe function served on the loopback.
struct Linked {
    stack: Stack,
    pipeline: Arc<courier_send::Pipeline>,
    port: u16,
}

async fn linked(providers: &[&str]) -> Linked {
    let mut stack = Stack::create(providers).await;
    let key_secret =
        courier_devkit::provision::unsubscribe_key_secret(&stack.sdk, &unique("unsub"))
            .await
            .expect("the unsubscribe key secret");
    let clients = courier_adapters::aws::Clients::new(&stack.sdk);
    let unsubscriber = Arc::new(courier_unsubscribe::wire(
        &clients,
        &courier_unsubscribe::Settings {
            suppression_table: stack.resources.suppression_table.clone(),
            key_secret: key_secret.clone(),
        },
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(courier_dev::function_url::serve(listener, unsubscriber));
    stack.resources.unsubscribe = Some(courier_send::config::UnsubscribeSettings {
        links: courier_core::unsubscribe::Links::new(
            &format!("http://127.0.0.1:{port}/"),
            Some("unsubscribe@courier.test"),
        )
        .unwrap(),
        key_secret,
    });
    let pipeline = Arc::new(
        courier_send::wiring::wire(
            &clients,
            courier_send::config::SendConfig::default(),
            &stack.resources,
            courier_core::policy::RetryPolicy::default(),
        )
        .unwrap(),
    );
    Linked {
        stack,
        pipeline,
        port,
    }
}

fn bulk(stack: &Stack, id: &str, list: &str, to: &str) -> Email {
    Email::builder()
        .message_id(id)
        .campaign("spring campaign")
        .list_id(list)
        .priority(Priority::Bulk)
        .from(stack.sender.clone())
        .to(to)
        .subject("Our news")
        .text("Hello")
        .build()
        .unwrap()
}

/// Enqueues `email` and runs the send pipeline until its job reaches `want`.
async fn send(l: &Linked, email: &Email, want: Status) {
    CourierQueue::new(l.stack.sqs(), &l.stack.resources.queue_url)
        .send(email)
        .await
        .unwrap();
    let driver = l.stack.driver(2);
    let store = l.stack.status_store();
    let started = Instant::now();
    let mut status = None;
    while started.elapsed() < Duration::from_secs(40) && status != Some(want) {
        driver.poll_once(&l.pipeline, "unsubscribe").await.unwrap();
        status = store
            .get(email.message_id())
            .await
            .unwrap()
            .map(|r| r.status);
    }
    assert_eq!(status, Some(want), "job {}", email.message_id());
}

/// The mails Postfix delivered to `rcpt` (waiting up to `wait` for `count` of them).
async fn mailbox(rcpt: &str, count: usize, wait: Duration) -> Vec<String> {
    let maildir = require_env("COURIER_SMTP_CAPTURE_DIR");
    let started = Instant::now();
    loop {
        let mails: Vec<String> = std::fs::read_dir(&maildir)
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .filter(|mail| mail.contains(&format!("Delivered-To: {rcpt}")))
            .collect();
        if mails.len() >= count || started.elapsed() > wait {
            return mails;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One HTTP/1.1 request to the loopback; the status code and body.
async fn http(port: u16, method: &str, target: &str, body: &str) -> (u16, String) {
    courier_dev::function_url::request(&format!("http://127.0.0.1:{port}{target}"), method, body)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_one_click_unsubscribe_through_the_url_stops_the_next_bulk_job_of_that_list() {
    // GIVEN a bulk job of the list "news-…" sent to ann through Postfix
    let l = linked(&["smtp"]).await;
    let ann = format!("{}@courier.test", unique("ann"));
    let list = unique("news");
    send(
        &l,
        &bulk(&l.stack, &unique("first"), &list, &ann),
        Status::SentToProvider,
    )
    .await;
    let mails = mailbox(&ann, 1, Duration::from_secs(20)).await;
    assert_eq!(mails.len(), 1);
    // THEN her message carries the one-click link, the mailto form and List-Unsubscribe-Post
    let value =
        courier_dev::function_url::header(&mails[0], "List-Unsubscribe").expect("List-Unsubscribe");
    let prefix = format!("<http://127.0.0.1:{}/?t=", l.port);
    let token = value
        .strip_prefix(&prefix)
        .and_then(|rest| rest.split_once('>'))
        .map(|(t, _)| t.to_owned())
        .unwrap_or_else(|| panic!("{value}"));
    assert!(
        value.ends_with(&format!(
            ", <mailto:unsubscribe@courier.test?subject=unsubscribe%20{token}>"
        )),
        "{value}"
    );
    assert_eq!(
        courier_dev::function_url::header(&mails[0], "List-Unsubscribe-Post").as_deref(),
        Some("List-Unsubscribe=One-Click")
    );
    let target = format!("/?t={token}");
    // WHEN the link is opened (GET): a page with the button, nothing recorded
    let (status, page) = http(l.port, "GET", &target, "").await;
    assert_eq!(status, 200);
    assert!(
        page.contains("name=\"List-Unsubscribe\" value=\"One-Click\""),
        "{page}"
    );
    let table = l.stack.resources.suppression_table.clone();
    let env = [("COURIER_SUPPRESSION_TABLE", table)];
    let listed = |args: &[&str]| {
        let out = std::process::Command::new(courierctl())
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (_, before, _) = listed(&["suppression", "list", "--unsubscribed", "--json"]);
    assert!(!before.contains(&ann), "{before}");
    // AND a tampered token is refused, changing nothing
    let mut tampered = token.clone().into_bytes();
    let mid = tampered.len() / 2;
    tampered[mid] = if tampered[mid] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let (status, _) = http(
        l.port,
        "POST",
        &format!("/?t={tampered}"),
        "List-Unsubscribe=One-Click",
    )
    .await;
    assert_eq!(status, 400);
    // AND the mailbox provider's one-click POST unsubscribes her (a replay too answers 200)
    for _ in 0..2 {
        let (status, body) = http(l.port, "POST", &target, "List-Unsubscribe=One-Click").await;
        assert_eq!(status, 200, "{body}");
    }
    let lists: Vec<serde_json::Value> =
        listed(&["suppression", "list", "--unsubscribed", "--json"])
            .1
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
    let hers: Vec<&serde_json::Value> = lists
        .iter()
        .filter(|e| e["address"] == ann.as_str())
        .collect();
    assert_eq!(hers.len(), 1, "{lists:?}");
    assert_eq!(hers[0]["list"], list.as_str());
    assert_eq!(hers[0]["reason"], "unsubscribed");
    // THEN the next bulk job of that list to her is not sent: suppressed, unsubscribed
    let second = bulk(&l.stack, &unique("second"), &list, &ann);
    send(&l, &second, Status::Suppressed).await;
    let record = l
        .stack
        .status_store()
        .get(second.message_id())
        .await
        .unwrap()
        .unwrap();
    let detail = record
        .history
        .last()
        .and_then(|h| h.detail.clone())
        .unwrap_or_default();
    assert!(detail.starts_with("unsubscribed"), "{detail}");
    // AND a job of another list still reaches her
    let other = bulk(&l.stack, &unique("other"), &unique("offers"), &ann);
    send(&l, &other, Status::SentToProvider).await;
    assert_eq!(mailbox(&ann, 2, Duration::from_secs(20)).await.len(), 2);
    // AND the operator can take her off the list again
    let (code, out, err) = listed(&["suppression", "remove", &ann, "--list", &list]);
    assert_eq!(code, Some(0), "{out}{err}");
    // (again: nothing to remove; a list id that is none: refused as bad input)
    let (code, _, err) = listed(&["suppression", "remove", &ann, "--list", &list]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("is not unsubscribed from list"), "{err}");
    let (code, _, err) = listed(&["suppression", "list", "--list", "spring sale"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--list invalid"), "{err}");
    let again = bulk(&l.stack, &unique("again"), &list, &ann);
    send(&l, &again, Status::SentToProvider).await;
}

#[tokio::test]
async fn a_bulk_message_sent_through_ses_carries_the_one_click_headers() {
    let l = linked(&["ses"]).await;
    let list = unique("digest");
    let email = bulk(&l.stack, &unique("ses-bulk"), &list, "ann@example.org");
    send(&l, &email, Status::SentToProvider).await;
    // SES v2 is moto's on both emulators; its state holds the raw message sent.
    let state = courier_integration::moto_state(&require_env("COURIER_MOTO_URL")).await;
    let link = format!("List-Unsubscribe: <http://127.0.0.1:{}/?t=", l.port);
    let at = state
        .find(&link)
        .unwrap_or_else(|| panic!("no {link} in moto's SES state"));
    let token = state[at + link.len()..]
        .split('>')
        .next()
        .unwrap()
        .to_owned();
    let keys = courier_core::seal::SealKeys::parse(
        &aws_sdk_secretsmanager::Client::new(&l.stack.sdk)
            .get_secret_value()
            .secret_id(&l.stack.resources.unsubscribe.as_ref().unwrap().key_secret)
            .send()
            .await
            .unwrap()
            .secret_string
            .unwrap(),
    )
    .unwrap();
    let subscription = courier_core::unsubscribe::verify(&token, &keys).unwrap();
    assert_eq!(subscription.address, "ann@example.org");
    assert_eq!(
        subscription.scope,
        courier_core::unsubscribe::Scope::List(list)
    );
    assert!(state.contains("List-Unsubscribe-Post: List-Unsubscribe=One-Click"));
}
