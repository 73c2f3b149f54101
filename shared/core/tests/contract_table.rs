//! The send function's parser on the contract's shared accept/reject table
//! (`schema/conformance/jobs.json`): every accepted row parses, every other row is rejected with
//! its code. The same rows run through the JSON Schema and the Python client
//! (`clients/python/tests/test_contract.py`) and the Rust client (`clients/rust/tests/`).

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "support/conformance.rs"]
mod conformance;

use courier_core::job::EmailJob;

#[test]
fn the_parser_gives_every_row_its_expected_answer() {
    let cases = conformance::cases();
    assert!(cases.len() > 60, "the table lost rows: {}", cases.len());
    let mut wrong = Vec::new();
    for case in &cases {
        let got = EmailJob::from_value(case.job.clone())
            .err()
            .map(|r| r.error);
        let code = got.as_ref().map(|e| e.code().to_owned());
        if code != case.rejection {
            wrong.push(format!(
                "{}: expected {:?}, got {:?} ({})",
                case.name,
                case.rejection,
                code,
                got.map(|e| e.to_string()).unwrap_or_default()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_rejection_code_of_a_json_value_has_a_row() {
    // Codes a JSON value can earn (`not_utf8` and `malformed_json` are of bytes: unit tests).
    let codes = [
        "not_an_object",
        "missing_version",
        "unknown_version",
        "schema",
        "empty_field",
        "too_long",
        "header_injection",
        "deceptive_text",
        "invalid_address",
        "invalid_template_id",
        "no_recipients",
        "too_many_recipients",
        "body_too_large",
        "template_xor_content",
        "no_body",
        "header_not_allowed",
        "invalid_attachment",
        "attachment_denied",
        "attachments_too_large",
        "invalid_metadata",
        "invalid_list_id",
        "unsubscribe_not_possible",
    ];
    let cases = conformance::cases();
    for code in codes {
        assert!(
            cases.iter().any(|c| c.rejection.as_deref() == Some(code)),
            "no row of the table is rejected as {code}"
        );
    }
}
