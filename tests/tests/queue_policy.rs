//! Who may send to the events queue, decided the way IAM decides it, for each way the template
//! can be deployed (`SesEventsVia` sns or eventbridge, `EventsReplayRoleArn` empty or set). No
//! emulator enforces queue policies, so this reads `infra/template.yaml`, resolves its intrinsic
//! functions for the chosen parameters and evaluates `EventsQueuePolicy` (and, on the EventBridge
//! path, `EventsDeadLetterQueuePolicy`) against requests, with IAM's documented rules ("Policy
//! evaluation logic"; "Condition operators"): an explicit Deny wins over any Allow; the keys of
//! one operator are ANDed, its values ORed; a negated operator (`ArnNotEquals`) is true when the
//! key is absent from the request.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers fail the test loudly

use std::collections::BTreeMap;

use serde_norway::Value as Yaml;

const TOPIC: &str = "topic:SesEventsTopic";
const RULE: &str = "arn:SesEventsRule";
const REPLAY: &str = "arn:aws:iam::123456789012:role/courier-replay";

fn template() -> Yaml {
    let path = format!("{}/../infra/template.yaml", env!("CARGO_MANIFEST_DIR"));
    serde_norway::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// One deployment's parameters: which conditions hold and what references stand for.
struct Deployment {
    conditions: BTreeMap<&'static str, bool>,
    replay: Option<&'static str>,
}

impl Deployment {
    fn new(via: &str, replay: Option<&'static str>) -> Deployment {
        let conditions = BTreeMap::from([
            ("SesEventsViaSns", via == "sns"),
            ("SesEventsViaEventBridge", via == "eventbridge"),
            ("HasEventsReplayRole", replay.is_some()),
        ]);
        Deployment { conditions, replay }
    }

    /// The value with `!If`, `!Ref` and `!GetAtt` resolved (`None`: `AWS::NoValue`).
    fn resolve(&self, v: &Yaml) -> Option<Yaml> {
        match v {
            Yaml::Tagged(t) => {
                let tag = t.tag.to_string();
                match tag.trim_start_matches('!') {
                    "If" => {
                        let args = t.value.as_sequence().unwrap();
                        let name = args[0].as_str().unwrap();
                        let holds = *self
                            .conditions
                            .get(name)
                            .unwrap_or_else(|| panic!("condition {name} not modelled"));
                        self.resolve(&args[if holds { 1 } else { 2 }])
                    }
                    "Ref" => match t.value.as_str().unwrap() {
                        "AWS::NoValue" => None,
                        "EventsReplayRoleArn" => Some(Yaml::String(self.replay?.to_owned())),
                        "SesEventsTopic" => Some(Yaml::String(TOPIC.into())),
                        other => Some(Yaml::String(format!("ref:{other}"))),
                    },
                    "GetAtt" => {
                        let name = t.value.as_str().unwrap();
                        Some(Yaml::String(match name {
                            "SesEventsRule.Arn" => RULE.into(),
                            other => format!("arn:{other}"),
                        }))
                    }
                    other => panic!("intrinsic {other} not modelled"),
                }
            }
            Yaml::Mapping(m) => Some(Yaml::Mapping(
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), self.resolve(v)?)))
                    .collect(),
            )),
            Yaml::Sequence(s) => Some(Yaml::Sequence(
                s.iter().filter_map(|v| self.resolve(v)).collect(),
            )),
            other => Some(other.clone()),
        }
    }
}

/// A `sqs:SendMessage` request to the events queue.
struct Request {
    /// `Service` principal, or `None` for an IAM principal of the account.
    service: Option<&'static str>,
    context: BTreeMap<&'static str, &'static str>,
    /// Whether the principal's own IAM policies allow `sqs:SendMessage` (same account).
    identity_allows: bool,
}

fn strings(v: &Yaml) -> Vec<String> {
    match v {
        Yaml::String(s) => vec![s.clone()],
        Yaml::Sequence(s) => s
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

fn condition_holds(condition: Option<&Yaml>, request: &Request) -> bool {
    let Some(Yaml::Mapping(operators)) = condition else {
        return condition.is_none();
    };
    operators.iter().all(|(operator, keys)| {
        let keys = keys.as_mapping().unwrap();
        keys.iter().all(|(key, values)| {
            let values = strings(values);
            let present = request.context.get(key.as_str().unwrap());
            match operator.as_str().unwrap() {
                "ArnEquals" => present.is_some_and(|p| values.iter().any(|v| v == p)),
                "ArnNotEquals" => present.is_none_or(|p| values.iter().all(|v| v != p)),
                other => panic!("operator {other} not modelled"),
            }
        })
    })
}

fn applies(statement: &Yaml, request: &Request) -> bool {
    let principal = &statement["Principal"];
    let principal_matches = principal.as_str() == Some("*")
        || request
            .service
            .is_some_and(|s| strings(&principal["Service"]).iter().any(|p| p == s));
    let actions = strings(&statement["Action"]);
    principal_matches
        && actions
            .iter()
            .any(|a| a == "sqs:SendMessage" || a == "sqs:*")
        && condition_holds(statement.get("Condition"), request)
}

/// IAM's decision for a same-account request against the queue's resource policy.
fn allowed(policy: &Yaml, request: &Request) -> bool {
    let statements = policy["Statement"].as_sequence().unwrap();
    let by = |effect: &str| {
        statements
            .iter()
            .any(|s| s["Effect"].as_str() == Some(effect) && applies(s, request))
    };
    !by("Deny") && (by("Allow") || request.identity_allows)
}

fn events_queue_policy(template: &Yaml, deployment: &Deployment) -> Yaml {
    let resource = &template["Resources"]["EventsQueuePolicy"];
    assert_eq!(
        strings(
            &deployment
                .resolve(&resource["Properties"]["Queues"])
                .unwrap()
        ),
        vec!["ref:EventsQueue".to_owned()]
    );
    deployment
        .resolve(&resource["Properties"]["PolicyDocument"])
        .unwrap()
}

fn sns(source: &'static str) -> Request {
    Request {
        service: Some("sns.amazonaws.com"),
        context: BTreeMap::from([("aws:SourceArn", source)]),
        identity_allows: false,
    }
}

fn eventbridge(source: &'static str) -> Request {
    Request {
        service: Some("events.amazonaws.com"),
        context: BTreeMap::from([("aws:SourceArn", source)]),
        identity_allows: false,
    }
}

/// A role of the account whose own policy allows `sqs:SendMessage` on `*`.
fn role(arn: &'static str) -> Request {
    Request {
        service: None,
        context: BTreeMap::from([("aws:PrincipalArn", arn)]),
        identity_allows: true,
    }
}

/// `EventsDeadLetterQueuePolicy` for one deployment, each statement checked to be about the
/// events DLQ only.
fn events_dead_letter_queue_policy(template: &Yaml, deployment: &Deployment) -> Yaml {
    let resource = &template["Resources"]["EventsDeadLetterQueuePolicy"];
    assert_eq!(
        strings(
            &deployment
                .resolve(&resource["Properties"]["Queues"])
                .unwrap()
        ),
        vec!["ref:EventsDeadLetterQueue".to_owned()]
    );
    let policy = deployment
        .resolve(&resource["Properties"]["PolicyDocument"])
        .unwrap();
    for statement in policy["Statement"].as_sequence().unwrap() {
        assert_eq!(
            strings(&statement["Resource"]),
            ["arn:EventsDeadLetterQueue.Arn"],
            "{statement:?}"
        );
    }
    policy
}

fn decisions(template: &Yaml, via: &str, replay: Option<&'static str>) -> Vec<(String, bool)> {
    decisions_on(&events_queue_policy(
        template,
        &Deployment::new(via, replay),
    ))
}

/// IAM's decision for each sender of interest against one queue policy.
fn decisions_on(policy: &Yaml) -> Vec<(String, bool)> {
    [
        ("the stack's topic", sns(TOPIC)),
        (
            "another topic",
            sns("arn:aws:sns:eu-west-1:123456789012:other"),
        ),
        ("the stack's rule", eventbridge(RULE)),
        (
            "another rule",
            eventbridge("arn:aws:events:eu-west-1:123456789012:rule/other"),
        ),
        (
            "an application role",
            role("arn:aws:iam::123456789012:role/app"),
        ),
        ("the replay role", role(REPLAY)),
    ]
    .into_iter()
    .map(|(who, request)| (who.to_owned(), allowed(policy, &request)))
    .collect()
}

fn admitted(decisions: &[(String, bool)]) -> Vec<&str> {
    decisions
        .iter()
        .filter(|(_, allowed)| *allowed)
        .map(|(who, _)| who.as_str())
        .collect()
}

#[test]
fn only_the_ses_path_and_the_named_replay_role_may_send_to_the_events_queue() {
    let t = template();
    assert_eq!(admitted(&decisions(&t, "sns", None)), ["the stack's topic"]);
    assert_eq!(
        admitted(&decisions(&t, "eventbridge", None)),
        ["the stack's rule"]
    );
    assert_eq!(
        admitted(&decisions(&t, "sns", Some(REPLAY))),
        ["the stack's topic", "the replay role"]
    );
    assert_eq!(
        admitted(&decisions(&t, "eventbridge", Some(REPLAY))),
        ["the stack's rule", "the replay role"]
    );
}

#[test]
fn without_the_deny_any_role_of_the_account_could_forge_events() {
    // The evaluation sees the difference the Deny makes: the same template without it admits
    // every role whose own policy allows sqs:SendMessage.
    let mut t = template();
    let statements =
        t["Resources"]["EventsQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"]
            .as_sequence_mut()
            .unwrap();
    let before = statements.len();
    statements.retain(|s| s["Effect"].as_str() != Some("Deny"));
    assert_eq!(statements.len(), before - 1, "one Deny statement");
    assert_eq!(
        admitted(&decisions(&t, "sns", None)),
        [
            "the stack's topic",
            "an application role",
            "the replay role"
        ]
    );
}

/// On the EventBridge path the rule's undeliverable events go to the events DLQ, from which a
/// message move task (the replay role) brings them back to the events queue: a message anyone
/// put there would be replayed as an SES event, and no SNS signature vouches for it on this
/// path. So only the rule may send to it; the replay role only moves messages out (and SQS's
/// own redrive from the events queue is no SendMessage call).
#[test]
fn only_the_rule_may_send_to_the_events_dead_letter_queue() {
    let t = template();
    assert_eq!(
        t["Resources"]["EventsDeadLetterQueuePolicy"]["Condition"].as_str(),
        Some("SesEventsViaEventBridge"),
        "the policy of the EventBridge path, where the rule sends dead letters"
    );
    for replay in [None, Some(REPLAY)] {
        let policy = events_dead_letter_queue_policy(&t, &Deployment::new("eventbridge", replay));
        assert_eq!(
            admitted(&decisions_on(&policy)),
            ["the stack's rule"],
            "replay role {replay:?}"
        );
    }
}

#[test]
fn without_its_deny_any_role_of_the_account_could_put_forged_events_in_the_events_dlq() {
    let mut t = template();
    let statements = t["Resources"]["EventsDeadLetterQueuePolicy"]["Properties"]["PolicyDocument"]
        ["Statement"]
        .as_sequence_mut()
        .unwrap();
    let before = statements.len();
    statements.retain(|s| s["Effect"].as_str() != Some("Deny"));
    assert_eq!(statements.len(), before - 1, "one Deny statement");
    let policy = events_dead_letter_queue_policy(&t, &Deployment::new("eventbridge", None));
    assert_eq!(
        admitted(&decisions_on(&policy)),
        ["the stack's rule", "an application role", "the replay role"]
    );
}

#[test]
fn the_events_function_is_told_its_path_and_topic() {
    let t = template();
    let env = &t["Resources"]["EventsFunction"]["Properties"]["Environment"]["Variables"];
    for (via, topic) in [("sns", Some(TOPIC)), ("eventbridge", None)] {
        let d = Deployment::new(via, None);
        let value = |name: &str| env.get(name).and_then(|v| d.resolve(v));
        assert_eq!(
            value("COURIER_SES_EVENTS_VIA")
                .as_ref()
                .and_then(Yaml::as_str),
            Some("ref:SesEventsVia")
        );
        assert_eq!(
            value("COURIER_SES_EVENTS_TOPIC_ARN")
                .as_ref()
                .and_then(Yaml::as_str),
            topic
        );
    }
    let allowed = strings(&t["Parameters"]["SesEventsVia"]["AllowedValues"]);
    assert_eq!(
        allowed,
        ["sns", "eventbridge"],
        "the values the function accepts"
    );
}

/// A string intrinsic as CloudFormation evaluates it for one stack: `!Sub` (with a variable
/// map), `!Select`, `!Split` and `!Ref` of the pseudo parameters.
fn evaluate(v: &Yaml) -> Yaml {
    const STACK_ID: &str = "arn:aws:cloudformation:eu-west-1:123456789012:stack/courier/0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9";
    let pseudo = |name: &str| match name {
        "AWS::StackId" => STACK_ID.to_owned(),
        "AWS::Partition" => "aws".into(),
        "AWS::Region" => "eu-west-1".into(),
        "AWS::AccountId" => "123456789012".into(),
        other => panic!("reference {other} not modelled"),
    };
    let Yaml::Tagged(t) = v else {
        return v.clone();
    };
    let text = |v: &Yaml| evaluate(v).as_str().unwrap().to_owned();
    match t.tag.to_string().trim_start_matches('!') {
        "Ref" => Yaml::String(pseudo(t.value.as_str().unwrap())),
        "Split" => {
            let args = t.value.as_sequence().unwrap();
            let sep = args[0].as_str().unwrap();
            Yaml::Sequence(
                text(&args[1])
                    .split(sep)
                    .map(|p| Yaml::String(p.into()))
                    .collect(),
            )
        }
        "Select" => {
            let args = t.value.as_sequence().unwrap();
            let i = args[0].as_u64().unwrap() as usize;
            evaluate(&args[1]).as_sequence().unwrap()[i].clone()
        }
        "Sub" => {
            let (template, names) = match &t.value {
                Yaml::String(s) => (s.clone(), BTreeMap::new()),
                Yaml::Sequence(args) => (
                    args[0].as_str().unwrap().to_owned(),
                    args[1]
                        .as_mapping()
                        .unwrap()
                        .iter()
                        .map(|(k, v)| (k.as_str().unwrap().to_owned(), text(v)))
                        .collect(),
                ),
                other => panic!("!Sub {other:?}"),
            };
            let mut out = template;
            while let Some(start) = out.find("${") {
                let end = start + out[start..].find('}').unwrap();
                let name = &out[start + 2..end];
                let value = names.get(name).cloned().unwrap_or_else(|| pseudo(name));
                out.replace_range(start..=end, &value);
            }
            Yaml::String(out)
        }
        other => panic!("intrinsic {other} not modelled"),
    }
}

/// "RedriveAllowPolicy ... byQueue: only the source queues named in sourceQueueArns may use this
/// queue as their dead-letter queue" (SQS Developer Guide, "Configuring a dead-letter queue
/// redrive permission"). Each DLQ names exactly the queues whose RedrivePolicy targets it, by the
/// ARN their QueueName gets on a real stack; every other queue denies all (without the policy,
/// SQS allows every queue of the account).
#[test]
fn each_dead_letter_queue_takes_redrives_only_from_its_own_queue() {
    let t = template();
    let resources = t["Resources"].as_mapping().unwrap();
    let queues: Vec<(&str, &Yaml)> = resources
        .iter()
        .filter(|(_, r)| r["Type"].as_str() == Some("AWS::SQS::Queue"))
        .map(|(k, r)| (k.as_str().unwrap(), &r["Properties"]))
        .collect();
    let target = |p: &Yaml| match &p["RedrivePolicy"]["deadLetterTargetArn"] {
        Yaml::Tagged(t) => t
            .value
            .as_str()
            .map(|s| s.trim_end_matches(".Arn").to_owned()),
        _ => None,
    };
    let mut checked = 0;
    for (dlq, properties) in &queues {
        let sources: Vec<&str> = queues
            .iter()
            .filter(|(_, p)| target(p).as_deref() == Some(*dlq))
            .map(|(k, _)| *k)
            .collect();
        let allow = &properties["RedriveAllowPolicy"];
        if sources.is_empty() {
            // Without a RedriveAllowPolicy, SQS allows every queue of the account.
            assert_eq!(
                allow["redrivePermission"].as_str(),
                Some("denyAll"),
                "{dlq}"
            );
            continue;
        }
        assert_eq!(
            allow["redrivePermission"].as_str(),
            Some("byQueue"),
            "{dlq}"
        );
        let allowed: Vec<String> = allow["sourceQueueArns"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|v| evaluate(v).as_str().unwrap().to_owned())
            .collect();
        let expected: Vec<String> = sources
            .iter()
            .map(|source| {
                let name = evaluate(&resources[*source]["Properties"]["QueueName"]);
                format!(
                    "arn:aws:sqs:eu-west-1:123456789012:{}",
                    name.as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(allowed, expected, "{dlq}");
        for name in &expected {
            let name = name.rsplit(':').next().unwrap();
            assert!(
                name.len() <= 80,
                "SQS queue names are at most 80 characters: {name}"
            );
        }
        checked += 1;
    }
    assert_eq!(checked, 2, "the redrive DLQ and the events DLQ");
}
