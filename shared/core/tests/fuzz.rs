//! Property-based fuzzing of the parsers that face untrusted input: the job parser (and the
//! retry envelope around it) and the SMTP reply classifier. Any panic found is kept below as a
//! regular test.

use courier_core::classify::{ErrorClass, classify_smtp};
use courier_core::envelope::parse_body;
use courier_core::job::EmailJob;
use proptest::prelude::*;

/// JSON-ish text: fragments of the contract glued together at random.
fn jsonish() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "\"version\"",
        "1",
        "2",
        "\"message_id\"",
        "\"m\"",
        "\"to\"",
        "\"a@b.co\"",
        "\"content\"",
        "\"subject\"",
        "\"text\"",
        "\"template\"",
        "\"id\"",
        "\"variables\"",
        "null",
        "true",
        "\"\\r\\n\"",
        "\"\\u0000\"",
        "\"courier_envelope\"",
        "\"job\"",
        "\"attempt\"",
        "-1",
        "1e400",
        "\"\\ud800\"",
        "\"héllo\"",
        " ",
    ]);
    prop::collection::vec(piece, 0..60).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn the_job_parser_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = EmailJob::parse(&bytes);
        let _ = parse_body(&bytes);
    }

    #[test]
    fn the_job_parser_never_panics_on_jsonish_text(text in jsonish()) {
        if let Err(rejected) = EmailJob::parse(text.as_bytes()) {
            prop_assert!(!rejected.error.to_string().is_empty());
        }
        let _ = parse_body(text.as_bytes());
    }

    /// A reply code of no failure class (1yz, 3yz, 6yz to 9yz) is read as no code at all.
    #[test]
    fn a_code_of_no_failure_class_is_read_as_none(
        code in prop_oneof![100u16..200, 300u16..400, 600u16..1000],
        text in "[a-zA-Z ,.;:()'-]{0,120}",
    ) {
        let with = classify_smtp(&format!("{code} {text}"));
        let without = classify_smtp(&text);
        prop_assert_eq!(
            (with.class, with.retryable, with.suppress_recipient),
            (without.class, without.retryable, without.suppress_recipient),
            "{} {:?}", code, text
        );
    }

    #[test]
    fn the_classifier_never_panics_and_4xx_is_never_permanent(code in 100u16..1000, text in ".{0,200}") {
        for reply in [format!("{code} {text}"), format!("{code}-{text}\n{code} {text}"), text.clone()] {
            let v = classify_smtp(&reply);
            prop_assert!(!v.rule.is_empty());
            if (400..500).contains(&code) && reply.starts_with(&code.to_string()) {
                prop_assert!(!v.suppress_recipient, "{reply:?} -> {v:?}");
                prop_assert!(v.retryable || v.class == ErrorClass::SenderConfig || v.class == ErrorClass::Tls, "{reply:?} -> {v:?}");
            }
        }
    }
}

/// Inputs fuzzing once found interesting, kept as plain tests.
#[test]
fn kept_cases() {
    for text in [
        "",
        "{",
        "\"\\ud800\"",
        "{\"version\":1e400}",
        "[[[[[[[[[[",
        "{\"courier_envelope\":1,\"job\":null}",
    ] {
        assert!(EmailJob::parse(text.as_bytes()).is_err(), "{text}");
        let _ = parse_body(text.as_bytes());
    }
    for reply in [
        "4",
        "45",
        "450",
        "450-",
        "5.1.1",
        "550 5.",
        "550 5.1.",
        "999 9.9.9 x",
        "\u{0}\u{0}",
    ] {
        let _ = classify_smtp(reply);
    }
}
