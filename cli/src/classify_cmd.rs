//! `courierctl classify`: classify failure replies from arguments or stdin.

use std::io::{BufRead, Write};

use courier_core::classify::{
    ApiFailure, ApiFailureKind, SesFailureEvent, Tried, Verdict, classify_ses_api,
    classify_ses_event, classify_smtp, explain_smtp,
};
use serde::Deserialize;

/// One JSONL input line. `source` defaults to `smtp`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InputLine {
    #[serde(default)]
    source: Option<String>,
    /// SMTP: the reply text (may already contain the codes).
    #[serde(default)]
    reply: Option<String>,
    /// SMTP: basic reply code (`550`); SES API: the error code (`MessageRejected`).
    #[serde(default)]
    code: Option<serde_json::Value>,
    /// SMTP: enhanced status code (`5.1.1`).
    #[serde(default)]
    status: Option<String>,
    /// SES API: error message.
    #[serde(default)]
    message: Option<String>,
    /// SES API: HTTP status.
    #[serde(default)]
    http_status: Option<u16>,
    /// SES API: service | timeout | dispatch | response | construction (default service).
    #[serde(default)]
    kind: Option<ApiFailureKind>,
    /// SES event: `{"type": "bounce", "bounce_type": "Permanent", ...}`.
    #[serde(default)]
    event: Option<SesFailureEvent>,
}

/// Why one input line could not be classified.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InputError {
    #[error("line {line}: not valid JSON input: {source}")]
    Json {
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("line {line}: {message}")]
    Invalid { line: usize, message: String },
}

fn code_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// An input, read: an SMTP reply still to classify, or the verdict of another source.
enum Parsed {
    Smtp(String),
    Classified(Verdict),
}

/// Classifies one input: a raw SMTP reply, or a JSON object as described by [`InputLine`].
pub(crate) fn classify_input(line_no: usize, raw: &str) -> Result<Verdict, InputError> {
    Ok(match parse_input(line_no, raw)? {
        Parsed::Smtp(text) => classify_smtp(&text),
        Parsed::Classified(v) => v,
    })
}

/// [`classify_input`], with the rules tried in order (SES inputs: the one table entry).
fn explain_input(line_no: usize, raw: &str) -> Result<(Verdict, Vec<Tried>), InputError> {
    Ok(match parse_input(line_no, raw)? {
        Parsed::Smtp(text) => explain_smtp(&text),
        Parsed::Classified(v) => {
            let tried = vec![Tried {
                rule: v.rule.clone(),
                matched: true,
                note: v.class.as_str().to_owned(),
            }];
            (v, tried)
        }
    })
}

fn parse_input(line_no: usize, raw: &str) -> Result<Parsed, InputError> {
    let trimmed = raw.trim();
    if !trimmed.starts_with('{') {
        // Raw replies may carry escaped line breaks (`\n`) to stand for multi-line replies.
        return Ok(Parsed::Smtp(trimmed.replace("\\n", "\n")));
    }
    let input: InputLine = serde_json::from_str(trimmed).map_err(|source| InputError::Json {
        line: line_no,
        source,
    })?;
    let invalid = |message: &str| InputError::Invalid {
        line: line_no,
        message: message.to_owned(),
    };
    match input.source.as_deref().unwrap_or("smtp") {
        "smtp" => {
            let mut text = String::new();
            if let Some(code) = &input.code {
                text.push_str(&code_text(code));
                text.push(' ');
            }
            if let Some(status) = &input.status {
                text.push_str(status);
                text.push(' ');
            }
            text.push_str(input.reply.as_deref().unwrap_or(""));
            if text.trim().is_empty() {
                return Err(invalid("smtp input needs `reply`, `code` or `status`"));
            }
            Ok(Parsed::Smtp(text.trim().to_owned()))
        }
        "ses_api" => Ok(Parsed::Classified(classify_ses_api(&ApiFailure {
            kind: input.kind.unwrap_or(ApiFailureKind::Service),
            code: input.code.as_ref().map(code_text),
            message: input.message.or(input.reply),
            http_status: input.http_status,
        }))),
        "ses_event" => input
            .event
            .as_ref()
            .map(|e| Parsed::Classified(classify_ses_event(e)))
            .ok_or_else(|| invalid("ses_event input needs `event`")),
        other => Err(invalid(&format!(
            "unknown source {other:?}; use smtp, ses_api or ses_event"
        ))),
    }
}

/// One row of the human-readable table: class, `retryable=`, `suppress=`, `rule=`, and the input
/// (its first 100 characters). The `key=value` cells keep the output greppable.
fn human_row(input: &str, v: &Verdict) -> Vec<String> {
    vec![
        v.class.as_str().to_owned(),
        format!("retryable={}", v.retryable),
        format!("suppress={}", v.suppress_recipient),
        format!("rule={}", v.rule),
        format!("<- {}", input.trim().chars().take(100).collect::<String>()),
    ]
}

/// One input with the rules tried: as JSON, the verdict with `tried` added; as text, a table of
/// the rules (`no` / `MATCH`, the rule, the class or what it says) and the verdict.
fn write_explained(
    out: &mut dyn Write,
    input: &str,
    v: &Verdict,
    tried: &[Tried],
    json: bool,
) -> std::io::Result<()> {
    if json {
        let mut value = serde_json::to_value(v).map_err(std::io::Error::other)?;
        value["tried"] = serde_json::to_value(tried).map_err(std::io::Error::other)?;
        serde_json::to_writer(&mut *out, &value).map_err(std::io::Error::other)?;
        return writeln!(out);
    }
    writeln!(out, "<- {}", input.trim())?;
    let mut table = courierctl::table::new(&[]);
    for t in tried {
        table.add_row(vec![
            (if t.matched { "MATCH" } else { "no" }).to_owned(),
            t.rule.clone(),
            t.note.clone(),
        ]);
    }
    courierctl::table::write(out, &mut table, "   ")?;
    let mut verdict = courierctl::table::new(&[]);
    verdict.add_row(human_row(input, v).into_iter().take(4).collect::<Vec<_>>());
    courierctl::table::write(out, &mut verdict, "=> ")
}

/// Runs the command; returns the process exit code (0 ok, 2 when any input line was invalid).
pub(crate) fn run(
    replies: &[String],
    json: bool,
    explain: bool,
    stdin: &mut dyn BufRead,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> std::io::Result<i32> {
    let mut inputs: Vec<String> = replies.to_vec();
    if inputs.is_empty() {
        for line in stdin.lines() {
            let line = line?;
            if !line.trim().is_empty() {
                inputs.push(line);
            }
        }
    }
    let mut status = 0;
    // The table is printed once every input is classified (its columns fit the widest).
    let mut rows = courierctl::table::new(&[]);
    for (i, input) in inputs.iter().enumerate() {
        if explain {
            match explain_input(i + 1, input) {
                Ok((v, tried)) => write_explained(out, input, &v, &tried, json)?,
                Err(e) => {
                    writeln!(err, "courierctl classify: {e}")?;
                    status = 2;
                }
            }
            continue;
        }
        match classify_input(i + 1, input) {
            Ok(v) if json => {
                serde_json::to_writer(&mut *out, &v).map_err(std::io::Error::other)?;
                writeln!(out)?;
            }
            Ok(v) => {
                rows.add_row(human_row(input, &v));
            }
            Err(e) => {
                writeln!(err, "courierctl classify: {e}")?;
                status = 2;
            }
        }
    }
    if !rows.is_empty() {
        courierctl::table::write(out, &mut rows, "")?;
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_on(args: &[&str], stdin: &str, json: bool) -> (i32, String, String) {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let code = run(
            &args,
            json,
            false,
            &mut stdin.as_bytes(),
            &mut out,
            &mut err,
        )
        .unwrap();
        (
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    #[test]
    fn classifies_arguments_and_stdin_lines() {
        let (code, out, _) = run_on(&["550 5.1.1 User unknown"], "", false);
        assert_eq!(code, 0);
        assert!(out.starts_with("recipient_permanent"), "{out}");
        assert!(out.contains("suppress=true"));
        let stdin = "452 4.2.2 Mailbox full\n\n{\"code\": 421, \"status\": \"4.7.0\", \"reply\": \"Too many connections\"}\n{\"source\": \"ses_api\", \"code\": \"TooManyRequestsException\", \"http_status\": 429}\n{\"source\": \"ses_event\", \"event\": {\"type\": \"bounce\", \"bounce_type\": \"Permanent\", \"bounce_subtype\": \"NoEmail\", \"diagnostic\": null}}\n";
        let (code, out, _) = run_on(&[], stdin, true);
        assert_eq!(code, 0);
        let classes: Vec<String> = out
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["class"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(
            classes,
            [
                "mailbox_temporary",
                "throttled",
                "throttled",
                "recipient_permanent"
            ]
        );
    }

    #[test]
    fn verdicts_are_a_table_of_aligned_columns() {
        let (code, out, _) = run_on(
            &["550 5.1.1 User unknown", "452 4.2.2 Mailbox full"],
            "",
            false,
        );
        assert_eq!(code, 0);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(
            lines[0].starts_with("recipient_permanent  retryable=false  suppress=true   rule="),
            "{out}"
        );
        assert!(
            lines[1].starts_with("mailbox_temporary    retryable=true   suppress=false  rule="),
            "{out}"
        );
        let input_at = lines[0].find("<- ").unwrap();
        assert_eq!(lines[1].find("<- "), Some(input_at), "{out}");
        assert!(lines[1].ends_with("<- 452 4.2.2 Mailbox full"), "{out}");
    }

    #[test]
    fn escaped_newlines_make_multiline_replies() {
        let (_, out, _) = run_on(
            &[
                "550-5.1.1 The email account that you tried to reach does not exist.\\n550 5.1.1 https://support.google.com/mail/?p=NoSuchUser",
            ],
            "",
            true,
        );
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v["raw_code"], "550 5.1.1");
        assert!(v["raw_text"].as_str().unwrap().contains('\n'));
    }

    #[test]
    fn bad_lines_are_reported_with_their_number_and_fail_the_exit_code() {
        let stdin =
            "{\"code\": 550\n{\"source\": \"pigeon\"}\n{\"source\": \"ses_event\"}\n{}\n550 ok\n";
        let (code, out, err) = run_on(&[], stdin, false);
        assert_eq!(code, 2);
        assert!(err.contains("line 1: not valid JSON"), "{err}");
        assert!(err.contains("line 2: unknown source \"pigeon\""), "{err}");
        assert!(
            err.contains("line 3: ses_event input needs `event`"),
            "{err}"
        );
        assert!(err.contains("line 4: smtp input needs"), "{err}");
        assert_eq!(out.lines().count(), 1);
    }

    #[test]
    fn explain_lists_the_rules_tried_and_the_match() {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let args = vec!["554 5.9.9 flux capacitor".to_owned()];
        let code = run(&args, false, true, &mut "".as_bytes(), &mut out, &mut err).unwrap();
        assert_eq!(code, 0);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "<- 554 5.9.9 flux capacitor");
        assert!(lines[1].trim_start().starts_with("no "), "{text}");
        assert!(text.contains("MATCH  smtp.basic.554"), "{text}");
        assert!(text.contains("smtp.permanent-signal"), "{text}");
        assert!(
            lines
                .last()
                .unwrap()
                .starts_with("=> unknown  retryable=false"),
            "{text}"
        );
        // With --json: the verdict's fields, and `tried` ending with the matched rule.
        let mut out = Vec::new();
        let args = vec![r#"{"source":"ses_event","event":{"type":"bounce","bounce_type":"Permanent","bounce_subtype":"General"}}"#.to_owned()];
        run(&args, true, true, &mut "".as_bytes(), &mut out, &mut err).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["class"], "recipient_permanent");
        assert_eq!(v["tried"][0]["rule"], v["rule"]);
        assert_eq!(v["tried"][0]["matched"], true);
    }
}
