//! Reads `schema/conformance/jobs.json`, the contract's accept/reject table shared by the parser,
//! the JSON Schema and both clients (its `description` says how a case is written).

use serde_json::Value;

/// One row of the table, expanded into the job it stands for.
pub(crate) struct Case {
    pub(crate) name: String,
    pub(crate) job: Value,
    /// `None` when the job must be accepted; else the rejection code.
    pub(crate) rejection: Option<String>,
}

fn table() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../schema/conformance/jobs.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every case of the table.
pub(crate) fn cases() -> Vec<Case> {
    let table = table();
    let base = table["base"].clone();
    let Some(cases) = table["cases"].as_array() else {
        panic!("the table has no `cases`");
    };
    cases
        .iter()
        .map(|case| {
            let name = case["name"].as_str().unwrap_or("unnamed").to_owned();
            let job = match case.get("job") {
                Some(job) => expand(job),
                None => {
                    let mut job = base.clone();
                    let Some(object) = job.as_object_mut() else {
                        panic!("the table's base is not an object");
                    };
                    for field in case["remove"].as_array().into_iter().flatten() {
                        object.remove(field.as_str().unwrap_or_default());
                    }
                    for (field, value) in case["set"].as_object().into_iter().flatten() {
                        object.insert(field.clone(), expand(value));
                    }
                    job
                }
            };
            let rejection = match case["expect"].as_str() {
                Some("accept") => None,
                Some(code) => Some(code.to_owned()),
                None => panic!("case {name:?} has no `expect`"),
            };
            Case {
                name,
                job,
                rejection,
            }
        })
        .collect()
}

/// The idempotency helper's vectors: (key, message id).
#[allow(dead_code)] // used by the clients' tests, not the parser's
pub(crate) fn message_ids() -> Vec<(String, String)> {
    table()["message_ids"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| {
            (
                v["key"].as_str().unwrap_or_default().to_owned(),
                v["message_id"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Expands `{"$repeat": [v, n]}` anywhere in `value`.
fn expand(value: &Value) -> Value {
    match value {
        Value::Object(object) if object.len() == 1 && object.contains_key("$repeat") => {
            let (item, times) = match &object["$repeat"] {
                Value::Array(pair) if pair.len() == 2 => (&pair[0], pair[1].as_u64()),
                other => panic!("bad $repeat: {other}"),
            };
            let times = usize::try_from(times.unwrap_or_default()).unwrap_or_default();
            match item {
                Value::String(s) => Value::String(s.repeat(times)),
                Value::Array(items) => Value::Array(
                    std::iter::repeat_n(items, times)
                        .flatten()
                        .cloned()
                        .collect(),
                ),
                other => panic!("bad $repeat item: {other}"),
            }
        }
        Value::Object(object) => {
            Value::Object(object.iter().map(|(k, v)| (k.clone(), expand(v))).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(expand).collect()),
        other => other.clone(),
    }
}
