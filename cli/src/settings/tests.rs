use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_norway::Value;

use super::*;

/// infra/template.yaml, parsed (CloudFormation's tags kept as tagged values).
fn template() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../infra/template.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    serde_norway::from_str(&text).unwrap()
}

/// `!Ref X` -> `X`.
fn reference(v: &Value) -> Option<String> {
    match v {
        Value::Tagged(t) if t.tag == "Ref" => t.value.as_str().map(str::to_owned),
        _ => None,
    }
}

/// Every `Environment.Variables` mapping in the template's resources: variable -> `!Ref` target.
fn function_variables(v: &Value, found: &mut BTreeMap<String, BTreeSet<String>>) {
    match v {
        Value::Mapping(m) => {
            for (k, v) in m {
                if k.as_str() == Some("Variables")
                    && let Value::Mapping(vars) = v
                {
                    for (name, value) in vars {
                        if let (Some(name), Some(target)) = (name.as_str(), reference(value)) {
                            found.entry(name.to_owned()).or_default().insert(target);
                        }
                    }
                }
                function_variables(v, found);
            }
        }
        Value::Sequence(s) => s.iter().for_each(|v| function_variables(v, found)),
        Value::Tagged(t) => function_variables(&t.value, found),
        _ => {}
    }
}

#[test]
fn every_output_the_mapping_names_is_in_the_template_and_names_what_the_functions_read() {
    let template = template();
    let outputs = template["Outputs"].as_mapping().unwrap();
    let mut variables = BTreeMap::new();
    function_variables(&template["Resources"], &mut variables);
    for source in &SOURCES {
        let Some(output) = outputs.get(source.output) else {
            panic!(
                "{} maps {} to the output {}, which infra/template.yaml's Outputs lacks",
                source.variable, source.variable, source.output
            );
        };
        // The output is the resource the functions get in the same variable: the mapping says
        // what the deployed functions use.
        let target = reference(&output["Value"])
            .unwrap_or_else(|| panic!("{} is not a !Ref: {output:?}", source.output));
        assert_eq!(
            variables.get(source.variable),
            Some(&BTreeSet::from([target.clone()])),
            "{} is !Ref {target} in Outputs; the functions' {} is not",
            source.output,
            source.variable
        );
    }
}

/// Every `COURIER_*` name in courierctl's sources (settings excepted), but COURIER_STACK.
fn names_in_sources() -> BTreeSet<String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
    let mut files = vec![std::path::PathBuf::from(dir)];
    let mut names = BTreeSet::new();
    while let Some(path) = files.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                files.push(entry.unwrap().path());
            }
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs")
            || path.components().any(|c| c.as_os_str() == "settings")
            || path.file_name().is_some_and(|f| f == "settings.rs")
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (at, _) in text.match_indices("COURIER_") {
            let name: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if name.len() > "COURIER_".len() && name != "COURIER_STACK" {
                names.insert(name);
            }
        }
    }
    names
}

#[test]
fn every_setting_courierctl_reads_is_covered_by_one_output() {
    let names = names_in_sources();
    // the scan finds what the commands' help names
    assert!(names.contains("COURIER_LETTER_INDEX_TABLE"), "{names:?}");
    let mapped: BTreeSet<String> = SOURCES.iter().map(|s| s.variable.to_owned()).collect();
    let unmapped: Vec<&String> = names.difference(&mapped).collect();
    assert!(
        unmapped.is_empty(),
        "read by courierctl but no stack output provides them: {unmapped:?}"
    );
    // one output per setting, one setting per output, in the order of the enum
    let outputs: BTreeSet<&str> = SOURCES.iter().map(|s| s.output).collect();
    assert_eq!(mapped.len(), SOURCES.len());
    assert_eq!(outputs.len(), SOURCES.len());
    for (i, s) in SOURCES.iter().enumerate() {
        assert_eq!(s.setting as usize, i, "{s:?}");
    }
}

fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name| map.get(name).cloned()
}

fn stack(outputs: &[(&str, &str)]) -> StackInfo {
    StackInfo {
        name: "courier-prod".into(),
        status: "CREATE_COMPLETE".into(),
        outputs: outputs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

#[test]
fn a_variable_wins_over_the_stack_which_fills_what_the_variables_lack() {
    let env = vars(&[
        ("COURIER_STATUS_TABLE", "from-env-status"),
        // empty counts as unset
        ("COURIER_SUPPRESSION_TABLE", ""),
    ]);
    let outputs = stack(&[
        ("StatusTableName", "from-stack-status"),
        ("SuppressionTableName", "from-stack-suppression"),
        ("SendQueueUrl", "https://sqs/queue"),
        ("SomethingElse", "x"),
    ]);
    let s = Settings::resolve(env, Some(&outputs));
    assert_eq!(s.get(Setting::StatusTable), Ok("from-env-status"));
    assert_eq!(
        s.get(Setting::SuppressionTable),
        Ok("from-stack-suppression")
    );
    assert_eq!(s.get(Setting::QueueUrl), Ok("https://sqs/queue"));
    // neither: the error names the variable, the output and the stack
    let missing = s.get(Setting::ControlTable).unwrap_err();
    assert_eq!(
        missing,
        Missing::NotInStack {
            variable: "COURIER_CONTROL_TABLE",
            output: "ControlTableName",
            stack: "courier-prod".into()
        }
    );
    let text = missing.to_string();
    assert!(
        text.contains("COURIER_CONTROL_TABLE is not set")
            && text.contains("ControlTableName")
            && text.contains("courier-prod"),
        "{text}"
    );
}

#[test]
fn without_a_stack_a_missing_setting_says_that_stack_provides_it() {
    let s = Settings::resolve(vars(&[("COURIER_QUEUE_URL", "q")]), None);
    assert_eq!(s.get(Setting::QueueUrl), Ok("q"));
    let text = s.get(Setting::LetterIndexTable).unwrap_err().to_string();
    assert!(
        text.contains("COURIER_LETTER_INDEX_TABLE is not set")
            && text.contains("--stack NAME")
            && text.contains("LetterIndexTableName"),
        "{text}"
    );
    // the message keeps the words the commands map to exit 2
    assert!(text.contains("is not set"));
}

#[test]
fn replayed_and_put_back_copies_take_the_retry_lane_when_the_stack_has_one() {
    let both = Settings::resolve(
        vars(&[("COURIER_QUEUE_URL", "https://sqs/send")]),
        Some(&stack(&[("RetryQueueUrl", "https://sqs/retry")])),
    );
    assert_eq!(
        both.copies_queue(),
        Ok("https://sqs/send"),
        "a variable wins over the stack"
    );
    let stack_only = Settings::resolve(
        vars(&[]),
        Some(&stack(&[
            ("SendQueueUrl", "https://sqs/send"),
            ("RetryQueueUrl", "https://sqs/retry"),
        ])),
    );
    assert_eq!(stack_only.copies_queue(), Ok("https://sqs/retry"));
    let named = Settings::resolve(
        vars(&[
            ("COURIER_QUEUE_URL", "https://sqs/send"),
            ("COURIER_RETRY_QUEUE_URL", "https://sqs/retry"),
        ]),
        None,
    );
    assert_eq!(named.copies_queue(), Ok("https://sqs/retry"));
    let send_only = Settings::resolve(vars(&[("COURIER_QUEUE_URL", "https://sqs/send")]), None);
    assert_eq!(send_only.copies_queue(), Ok("https://sqs/send"));
    // neither: the error names the send queue's setting
    let text = Settings::resolve(vars(&[]), None)
        .copies_queue()
        .unwrap_err()
        .to_string();
    assert!(text.contains("COURIER_QUEUE_URL is not set"), "{text}");
}

/// A stack lookup that answers `answer` and counts its calls.
struct Fake {
    answer: Result<StackInfo, StackError>,
    calls: Cell<usize>,
}

impl Fake {
    fn new(answer: Result<StackInfo, StackError>) -> Fake {
        Fake {
            answer,
            calls: Cell::new(0),
        }
    }
}

impl StackLookup for Fake {
    async fn describe(&self, _name: &str) -> Result<StackInfo, StackError> {
        self.calls.set(self.calls.get() + 1);
        self.answer.clone()
    }
}

#[tokio::test]
async fn load_reads_the_stack_only_when_one_is_named() {
    let lookup = Fake::new(Ok(stack(&[("StatusTableName", "s")])));
    let s = load(None, vars(&[("COURIER_STATUS_TABLE", "e")]), &lookup)
        .await
        .unwrap();
    assert_eq!(lookup.calls.get(), 0);
    assert_eq!(s.get(Setting::StatusTable), Ok("e"));
    let s = load(Some("courier-prod"), vars(&[]), &lookup)
        .await
        .unwrap();
    assert_eq!(lookup.calls.get(), 1);
    assert_eq!(s.get(Setting::StatusTable), Ok("s"));
    assert!(matches!(
        s.get(Setting::QueueUrl),
        Err(Missing::NotInStack { .. })
    ));
}

#[tokio::test]
async fn a_stack_that_is_missing_empty_or_unreadable_is_an_error_with_its_exit_code() {
    // a stack without outputs (not Courier's, or not created yet): usage, exit 2
    let empty = Fake::new(Ok(StackInfo {
        status: "CREATE_IN_PROGRESS".into(),
        ..stack(&[])
    }));
    let e = load(Some("courier-prod"), vars(&[]), &empty)
        .await
        .unwrap_err();
    assert_eq!(e.exit_code(), 2);
    let text = e.to_string();
    assert!(
        text.contains("courier-prod")
            && text.contains("no outputs")
            && text.contains("CREATE_IN_PROGRESS"),
        "{text}"
    );
    // even when the variables set everything: the stack named is checked
    let all: Vec<(&str, &str)> = SOURCES.iter().map(|s| (s.variable, "x")).collect();
    assert!(
        load(Some("courier-prod"), vars(&all), &empty)
            .await
            .is_err()
    );
    // not found: exit 2; an AWS failure: exit 1; both say which stack
    let not_found = StackError::NotFound {
        name: "courier-nope".into(),
        region: " in region eu-west-1".into(),
        detail: "Stack with id courier-nope does not exist".into(),
    };
    let e = load(
        Some("courier-nope"),
        vars(&[]),
        &Fake::new(Err(not_found.clone())),
    )
    .await
    .unwrap_err();
    assert_eq!((e.exit_code(), &e), (2, &not_found));
    assert!(
        e.to_string()
            .contains("no stack named \"courier-nope\" in region eu-west-1"),
        "{e}"
    );
    let failed = StackError::Aws {
        name: "courier-prod".into(),
        region: String::new(),
        detail: "dispatch failure".into(),
    };
    let e = load(
        Some("courier-prod"),
        vars(&[]),
        &Fake::new(Err(failed.clone())),
    )
    .await
    .unwrap_err();
    assert_eq!(e.exit_code(), 1);
    assert!(
        e.to_string()
            .contains("could not describe stack \"courier-prod\": dispatch failure"),
        "{e}"
    );
    // an empty name is a usage error, and nothing is asked
    let lookup = Fake::new(Ok(stack(&[("StatusTableName", "s")])));
    let e = load(Some(" "), vars(&[]), &lookup).await.unwrap_err();
    assert_eq!((e, lookup.calls.get()), (StackError::EmptyName, 0));
}

#[test]
fn an_error_is_shown_with_its_causes() {
    let inner = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
    assert_eq!(
        chain(&Wrapped(inner)),
        "dispatch failure: connection refused"
    );
}

#[derive(Debug)]
struct Wrapped(std::io::Error);

impl std::fmt::Display for Wrapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dispatch failure")
    }
}

impl std::error::Error for Wrapped {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

#[test]
fn describe_stacks_errors_are_not_found_for_a_validation_error_and_failures_otherwise() {
    let e = describe_error(
        "courier-nope",
        " in region eu-west-1",
        Some("ValidationError"),
        Some("Stack with id courier-nope does not exist"),
        "service error: ...".into(),
    );
    assert_eq!(e.exit_code(), 2);
    assert!(
        e.to_string()
            .ends_with(": Stack with id courier-nope does not exist"),
        "{e}"
    );
    for code in [None, Some("AccessDenied"), Some("Throttling")] {
        let e = describe_error(
            "courier-prod",
            "",
            code,
            Some("not authorized"),
            "dispatch failure: connection refused".into(),
        );
        assert_eq!(e.exit_code(), 1, "{code:?}");
        assert!(
            e.to_string().contains("connection refused"),
            "the error with its causes: {e}"
        );
    }
}
