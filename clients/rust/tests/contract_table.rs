//! The client on the contract's shared accept/reject table (`schema/conformance/jobs.json`,
//! the same rows as the parser's, the JSON Schema's and the Python client's), and a property:
//! an email the builder accepts is one the send function's parser accepts, byte for byte.

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "../../../shared/core/tests/support/conformance.rs"]
mod conformance;

use courier_client::{Email, EmailJob, message_id_for};
use proptest::prelude::*;

#[test]
fn the_client_gives_every_row_the_parsers_answer() {
    let mut wrong = Vec::new();
    for case in conformance::cases() {
        let got = Email::from_json(case.job.clone())
            .err()
            .map(|e| e.code().to_owned());
        if got != case.rejection {
            wrong.push(format!(
                "{}: expected {:?}, got {got:?}",
                case.name, case.rejection
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn message_ids_match_the_shared_vectors() {
    let vectors = conformance::message_ids();
    assert!(!vectors.is_empty());
    for (key, id) in vectors {
        assert_eq!(message_id_for(&key), id, "key {key:?}");
    }
}

/// Mostly valid values of one kind, sometimes hostile ones: the characters the contract refuses
/// (controls, bidi overrides, zero-width spaces, a Cyrillic look-alike) and SQS's forbidden U+FFFF.
fn mostly(valid: &'static str) -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::string::string_regex(valid).unwrap(),
        1 => "[a-z@<>\"\\\\ .\u{0}\r\n\t\u{202E}\u{200B}\u{FFFF}\u{430}é用]{0,16}",
    ]
}

const ID: &str = "[a-zA-Z0-9 ._/-]{1,20}";
const MAILBOX: &str =
    "[a-z]{1,8}@[a-z]{1,8}\\.(com|org|test)|[A-Z][a-z]{0,8} <[a-z]{1,8}@[a-z]{1,8}\\.example>";
const TEMPLATE_ID: &str = "[a-z0-9_-]{1,10}(/[a-z0-9_.-]{1,10})?";
const TEXT: &str = "[a-zA-Z0-9 .,!?\u{FFFF}é用-]{1,40}";

#[derive(Debug)]
struct Input {
    id: String,
    campaign: String,
    from: String,
    to: Vec<String>,
    subject: String,
    template_id: String,
    body: String,
    reply_to: Option<String>,
    use_template: bool,
}

fn inputs() -> impl Strategy<Value = Input> {
    (
        (mostly(ID), mostly(ID), mostly(MAILBOX)),
        proptest::collection::vec(mostly(MAILBOX), 0..4),
        (mostly(TEXT), mostly(TEMPLATE_ID), mostly(TEXT)),
        (proptest::option::of(mostly(MAILBOX)), any::<bool>()),
    )
        .prop_map(|(head, to, body, tail)| {
            let ((id, campaign, from), (subject, template_id, body), (reply_to, use_template)) =
                (head, body, tail);
            Input {
                id,
                campaign,
                from,
                to,
                subject,
                template_id,
                body,
                reply_to,
                use_template,
            }
        })
}

fn build(input: Input) -> Result<Email, courier_client::InvalidEmail> {
    let mut builder = Email::builder()
        .message_id(input.id)
        .campaign(input.campaign)
        .from(input.from);
    for address in input.to {
        builder = builder.to(address);
    }
    builder = if input.use_template {
        builder
            .template(input.template_id)
            .variable("body", input.body)
    } else {
        builder.subject(input.subject).text(input.body)
    };
    if let Some(reply_to) = input.reply_to {
        builder = builder.reply_to(reply_to);
    }
    builder.build()
}

#[test]
fn an_email_the_builder_accepts_is_never_an_invalid_job() {
    // A fixed seed: the same 1,024 jobs every run.
    let mut runner = proptest::test_runner::TestRunner::new_with_rng(
        ProptestConfig::with_cases(1024),
        proptest::test_runner::TestRng::deterministic_rng(
            proptest::test_runner::RngAlgorithm::ChaCha,
        ),
    );
    let (accepted, refused) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
    runner
        .run(&inputs(), |input| {
            let Ok(email) = build(input) else {
                refused.set(refused.get() + 1);
                return Ok(());
            };
            accepted.set(accepted.get() + 1);
            // What the send function does with the SQS message body.
            let parsed = EmailJob::parse(email.body().as_bytes());
            prop_assert!(
                parsed.is_ok(),
                "accepted by the client, refused by the parser: {}",
                email.body()
            );
            prop_assert_eq!(&parsed.unwrap(), email.job());
            let forbidden = email.body().contains(['\u{FFFE}', '\u{FFFF}']);
            prop_assert!(!forbidden, "a character SQS refuses in {}", email.body());
            Ok(())
        })
        .unwrap();
    // Both sides of the property were exercised.
    assert!(
        accepted.get() > 150 && refused.get() > 150,
        "accepted {}, refused {}",
        accepted.get(),
        refused.get()
    );
}
