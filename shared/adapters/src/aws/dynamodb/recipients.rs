//! A status record's recipients (`rcpt`), their timeline (`rcpt_log`) and its version
//! (`rcpt_v`), in short attribute names: at 50 recipients the record must stay under the
//! 400 KB item with a kept payload of 300 KiB (sizes in `docs/tables.md`).

use super::*;
use courier_core::recipients::{
    Recipient, RecipientChange, RecipientEntry, RecipientFill, RecipientStatus, Role,
};

/// The `SET` clauses `finish` adds for a new roll (`:rcpt`, `:rlog`, `:zero`, `:one`, and
/// `:empty` which `finish` binds already).
pub(super) const SET_ROLL: [&str; 3] = [
    "rcpt = :rcpt",
    "rcpt_v = if_not_exists(rcpt_v, :zero) + :one",
    "rcpt_log = list_append(if_not_exists(rcpt_log, :empty), :rlog)",
];

/// The values of [`SET_ROLL`] (but `:empty`).
pub(super) fn roll_values(
    list: &[Recipient],
    at: DateTime<Utc>,
    detail: Option<&str>,
    notes: &[(String, String)],
) -> Vec<(&'static str, AttributeValue)> {
    let roll = list
        .iter()
        .map(|r| {
            AttributeValue::M(HashMap::from([
                ("a".to_owned(), s(&r.address)),
                ("r".to_owned(), s(r.role.as_str())),
                ("s".to_owned(), s(r.status.as_str())),
            ]))
        })
        .collect();
    vec![
        (":rcpt", AttributeValue::L(roll)),
        (
            ":rlog",
            log_value(&courier_core::recipients::entries_of(
                list, at, detail, notes,
            )),
        ),
        (":zero", n(0)),
        (":one", n(1)),
    ]
}

fn log_value(entries: &[RecipientEntry]) -> AttributeValue {
    AttributeValue::L(
        entries
            .iter()
            .map(|e| {
                let mut m = HashMap::from([
                    ("i".to_owned(), n(e.recipient)),
                    ("s".to_owned(), s(e.status.as_str())),
                    ("at".to_owned(), n(ms(e.at))),
                ]);
                if let Some(d) = &e.detail {
                    m.insert("d".to_owned(), s(d));
                }
                AttributeValue::M(m)
            })
            .collect(),
    )
}

/// The record's recipients, timeline and version as stored.
pub(super) fn read(
    item: &HashMap<String, AttributeValue>,
) -> (Vec<Recipient>, Vec<RecipientEntry>, u32) {
    let list = |key: &str| {
        item.get(key)
            .and_then(|v| v.as_l().ok())
            .map(|l| l.iter().filter_map(|v| v.as_m().ok()).collect::<Vec<_>>())
            .unwrap_or_default()
    };
    let roll = list("rcpt")
        .into_iter()
        .filter_map(|m| {
            Some(Recipient {
                address: get_s(m, "a")?,
                role: Role::parse(&get_s(m, "r")?)?,
                status: RecipientStatus::parse(&get_s(m, "s")?)?,
            })
        })
        .collect();
    let log = list("rcpt_log")
        .into_iter()
        .filter_map(|m| {
            Some(RecipientEntry {
                recipient: usize::try_from(get_n(m, "i")?).ok()?,
                status: RecipientStatus::parse(&get_s(m, "s")?)?,
                at: time(m, "at")?,
                detail: get_s(m, "d"),
            })
        })
        .collect();
    let version = u32::try_from(get_n(item, "rcpt_v").unwrap_or(0)).unwrap_or(0);
    (roll, log, version)
}

/// Writes `change` if the record's recipients are still at its version.
pub(super) async fn update(
    client: &Client,
    table: &str,
    message_id: &str,
    change: &RecipientChange,
) -> Result<bool, StoreError> {
    if change.version == 0 || change.set.is_empty() {
        // No roll was written (version 0), or nothing to write.
        return Ok(false);
    }
    let mut set: Vec<String> = change
        .set
        .iter()
        .enumerate()
        .map(|(k, (i, _))| format!("rcpt[{i}].s = :s{k}"))
        .collect();
    set.push("rcpt_v = rcpt_v + :one".into());
    let mut req = client
        .update_item()
        .table_name(table)
        .key("message_id", s(message_id))
        // `rcpt` too: the next generation's claim removes the list and keeps its version.
        .condition_expression("rcpt_v = :v AND attribute_exists(rcpt)")
        .expression_attribute_values(":v", n(change.version))
        .expression_attribute_values(":one", n(1));
    for (k, (_, status)) in change.set.iter().enumerate() {
        req = req.expression_attribute_values(format!(":s{k}"), s(status.as_str()));
    }
    if !change.log.is_empty() {
        set.push("rcpt_log = list_append(rcpt_log, :rlog)".into());
        req = req.expression_attribute_values(":rlog", log_value(&change.log));
    }
    let result = req
        .update_expression(format!("SET {}", set.join(", ")))
        .send()
        .await;
    Ok(crate::aws::conditional(result, "status update recipients")?.is_some())
}

/// Writes `fill` where the record has no list, at its generation and send (see
/// [`courier_core::ports::StatusStore::fill_recipients`]).
pub(super) async fn fill(
    client: &Client,
    table: &str,
    message_id: &str,
    fill: &RecipientFill,
) -> Result<bool, StoreError> {
    let mut req = client
        .update_item()
        .table_name(table)
        .key("message_id", s(message_id))
        .condition_expression(
            "attribute_not_exists(rcpt) AND attempt = :a AND provider_message_id = :pid \
             AND #s IN (:open0, :open1, :open2)",
        )
        .expression_attribute_names("#s", "status")
        .update_expression(format!("SET {}", SET_ROLL.join(", ")))
        .expression_attribute_values(":a", n(fill.attempt))
        .expression_attribute_values(":pid", s(&fill.provider_message_id))
        .expression_attribute_values(":empty", empty_list());
    let [open0, open1, open2] = courier_core::recipients::FILLABLE;
    for (name, status) in [(":open0", open0), (":open1", open1), (":open2", open2)] {
        req = req.expression_attribute_values(name, s(status.as_str()));
    }
    for (name, value) in roll_values(&fill.list, fill.at, Some(&fill.detail), &[]) {
        req = req.expression_attribute_values(name, value);
    }
    Ok(crate::aws::conditional(req.send().await, "status fill recipients")?.is_some())
}
