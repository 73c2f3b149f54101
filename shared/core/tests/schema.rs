//! The published JSON Schema must match the Rust types (regenerate with `make schema`).

use courier_core::job::EmailJob;

#[test]
fn published_schema_is_up_to_date() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../schema/email-job.v1.json"
    );
    let published: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(
        published,
        EmailJob::json_schema(),
        "schema/email-job.v1.json is stale: run `make schema` and commit the result"
    );
}

#[test]
fn the_readme_examples_are_valid_jobs() {
    for example in ["transactional.json", "bulk-template.json"] {
        let path = format!(
            "{}/../../schema/examples/{example}",
            env!("CARGO_MANIFEST_DIR")
        );
        let bytes = std::fs::read(&path).unwrap();
        if let Err(rejected) = EmailJob::parse(&bytes) {
            panic!("{path}: {}", rejected.error);
        }
    }
}
