//! The classifier against real-world replies (`tests/fixtures/smtp_replies.jsonl`, see the
//! README beside it): every line must get its expected class.

use courier_core::classify::{ErrorClass, classify_smtp};

#[test]
fn every_real_world_reply_gets_its_expected_class() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/smtp_replies.jsonl"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let mut total = 0;
    let mut wrong = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let case: serde_json::Value = serde_json::from_str(line).unwrap();
        let reply = case["reply"].as_str().unwrap();
        assert!(
            seen.insert(reply.to_owned()),
            "line {}: duplicate reply",
            i + 1
        );
        let expect = ErrorClass::parse(case["expect"].as_str().unwrap())
            .unwrap_or_else(|| panic!("line {}: unknown class {}", i + 1, case["expect"]));
        let verdict = classify_smtp(reply);
        // `--explain` tells the same story: the same verdict, and its rule among the matches.
        let (explained, tried) = courier_core::classify::explain_smtp(reply);
        assert_eq!(explained, verdict, "line {}", i + 1);
        assert!(
            verdict.rule == "smtp.success-code-as-failure"
                || tried.iter().any(|t| t.matched && t.rule == verdict.rule),
            "line {}: {} not among the matches of {tried:?}",
            i + 1,
            verdict.rule
        );
        total += 1;
        if verdict.class != expect {
            wrong.push(format!(
                "line {}: expected {expect}, got {} by {} ({}): {:?}",
                i + 1,
                verdict.class,
                verdict.rule,
                case["source"].as_str().unwrap_or(""),
                reply
            ));
        }
    }
    assert!(total >= 150, "only {total} replies in the corpus");
    assert!(
        wrong.is_empty(),
        "{} of {total} misclassified:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// Every wording rule decides at least one real reply of the corpus (a rule nothing exercises is
/// either dead or untested).
#[test]
fn every_wording_rule_classifies_a_real_reply() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/smtp_replies.jsonl"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let used: std::collections::BTreeSet<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let case: serde_json::Value = serde_json::from_str(l).unwrap();
            classify_smtp(case["reply"].as_str().unwrap()).rule
        })
        .collect();
    let unused: Vec<&str> = courier_core::classify::text_rule_names()
        .into_iter()
        .filter(|name| !used.contains(&format!("smtp.text.{name}")))
        .collect();
    assert!(
        unused.is_empty(),
        "rules no corpus reply exercises: {unused:?}"
    );
}
