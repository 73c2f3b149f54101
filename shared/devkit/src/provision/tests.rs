use super::*;

fn local() -> Value {
    local_template(TEMPLATE, "courier-t1").unwrap()
}

fn resources(v: &Value) -> &Map<String, Value> {
    v["Resources"].as_object().unwrap()
}

#[test]
fn request_tokens_are_valid_for_cloudformation_and_unique_per_call() {
    let long = format!("x_y.z:{}", "a".repeat(200));
    let (a, b) = (request_token(&long), request_token(&long));
    assert_ne!(a, b);
    assert!(a.len() <= 128, "{a}");
    assert!(a.starts_with(|c: char| c.is_ascii_alphabetic()), "{a}");
    assert!(
        a.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
        "{a}"
    );
}

#[test]
fn keeps_the_data_plane_and_nothing_else() {
    // GIVEN the SAM template WHEN it is made local
    let v = local();
    // THEN exactly the queues, tables, buckets (with policies) and the state machine remain
    let kept: BTreeSet<&str> = resources(&v).keys().map(String::as_str).collect();
    let expected: BTreeSet<&str> = [
        "SendQueue",
        "RetryQueue",
        "RedriveDeadLetterQueue",
        "DeadLetterQueue",
        "EventsQueue",
        "EventsDeadLetterQueue",
        "StatusTable",
        "SuppressionTable",
        "ControlTable",
        "LetterIndexTable",
        "ArchiveBucket",
        "ArchiveBucketPolicy",
        "PayloadBucket",
        "PayloadBucketPolicy",
        "TemplateBucket",
        "TemplateBucketPolicy",
        "DelayStateMachine",
    ]
    .into_iter()
    .collect();
    assert_eq!(kept, expected);
    // the queue policy names the SNS topic, which is not kept
    for r in resources(&v).values() {
        let kind = r["Type"].as_str().unwrap();
        assert!(
            LOCAL_TYPES.contains(&kind) && !kind.starts_with("AWS::Serverless"),
            "{kind}"
        );
    }
    assert!(resources(&v).values().all(|r| r.get("Metadata").is_none()));
    for key in ["Transform", "Globals", "Outputs"] {
        assert!(v.get(key).is_none(), "{key}");
    }
}

#[test]
fn every_reference_resolves() {
    let v = local();
    let params = v["Parameters"].as_object().unwrap();
    for (id, r) in resources(&v) {
        for name in references(r) {
            assert!(
                resources(&v).contains_key(&name)
                    || params.contains_key(&name)
                    || name.starts_with("AWS::"),
                "{id} refers to {name}"
            );
        }
    }
    assert!(params.contains_key(ROLE_PARAMETER));
}

#[test]
fn names_are_prefixed_and_buckets_lower_case() {
    let v = local_template(TEMPLATE, "Courier-X").unwrap();
    let r = resources(&v);
    assert_eq!(
        r["SendQueue"]["Properties"]["QueueName"],
        "Courier-X-send-queue"
    );
    assert_eq!(
        r["StatusTable"]["Properties"]["TableName"],
        "Courier-X-status-table"
    );
    assert_eq!(
        r["TemplateBucket"]["Properties"]["BucketName"],
        "courier-x-template-bucket"
    );
    assert_eq!(
        r["DelayStateMachine"]["Properties"]["StateMachineName"],
        "Courier-X-delay-state-machine"
    );
}

#[test]
fn settings_come_from_the_template() {
    let v = local();
    let r = resources(&v);
    // redrive policy and visibility timeout are the template's parameters
    let send = &r["SendQueue"]["Properties"];
    assert_eq!(
        send["RedrivePolicy"]["maxReceiveCount"],
        json!({"Ref": "MaxReceiveCount"})
    );
    assert_eq!(
        send["RedrivePolicy"]["deadLetterTargetArn"],
        json!({"Fn::GetAtt": ["RedriveDeadLetterQueue", "Arn"]})
    );
    assert_eq!(
        send["VisibilityTimeout"],
        json!({"Ref": "SendQueueVisibilityTimeout"})
    );
    // each DLQ takes redrives only from its own queue, named as the emulator's queue is
    let allowed = |dlq: &str| r[dlq]["Properties"]["RedriveAllowPolicy"].clone();
    let arn = |name: &str| json!({ "Fn::Sub": format!("arn:${{AWS::Partition}}:sqs:${{AWS::Region}}:${{AWS::AccountId}}:courier-t1-{name}") });
    assert_eq!(
        allowed("RedriveDeadLetterQueue")["redrivePermission"],
        "byQueue"
    );
    assert_eq!(
        allowed("RedriveDeadLetterQueue")["sourceQueueArns"],
        json!([arn("retry-queue"), arn("send-queue")])
    );
    assert_eq!(
        allowed("EventsDeadLetterQueue")["sourceQueueArns"],
        json!([arn("events-queue")])
    );
    assert_eq!(send["QueueName"], "courier-t1-send-queue");
    // the status table's sparse by_open index
    let status = &r["StatusTable"]["Properties"];
    let gsi = &status["GlobalSecondaryIndexes"][0];
    assert_eq!(gsi["IndexName"], "by_open");
    assert_eq!(gsi["Projection"]["ProjectionType"], "INCLUDE");
    assert_eq!(
        gsi["Projection"]["NonKeyAttributes"],
        json!(["status", "lease_until", "attempt", "updated_at", "trace_id"])
    );
    assert_eq!(
        status["TimeToLiveSpecification"]["AttributeName"],
        "expires_at"
    );
    assert!(status.get("SSESpecification").is_none());
    let index = &r["LetterIndexTable"]["Properties"]["GlobalSecondaryIndexes"];
    assert_eq!(index.as_array().unwrap().len(), 2);
}

#[test]
fn the_state_machine_is_the_delay_definition() {
    let v = local();
    let sm = &resources(&v)["DelayStateMachine"];
    assert_eq!(sm["Type"], "AWS::StepFunctions::StateMachine");
    assert_eq!(sm["Properties"]["RoleArn"], json!({"Ref": ROLE_PARAMETER}));
    assert_eq!(sm["Properties"]["StateMachineType"], "STANDARD");
    let deployed: Value =
        serde_json::from_str(sm["Properties"]["DefinitionString"].as_str().unwrap()).unwrap();
    let code: Value = serde_json::from_str(courier_core::delay::DEFINITION).unwrap();
    assert_eq!(deployed["States"], code["States"]);
    assert_eq!(deployed["StartAt"], code["StartAt"]);
}

#[test]
fn short_forms_become_long_forms() {
    let v = yaml_to_json(
            "a: !Ref X\nb: !GetAtt Q.Arn\nc: !Sub '${A}-${!B}'\nd: !If [C, 1, 2.5]\ne: !GetAtt [Q, Arn]\nf: !Condition C\ng: null\nh: true\n",
        )
        .unwrap();
    assert_eq!(
        v,
        json!({"a": {"Ref": "X"}, "b": {"Fn::GetAtt": ["Q", "Arn"]}, "c": {"Fn::Sub": "${A}-${!B}"},
                   "d": {"Fn::If": ["C", 1, 2.5]}, "e": {"Fn::GetAtt": ["Q", "Arn"]}, "f": {"Condition": "C"},
                   "g": null, "h": true})
    );
}

#[test]
fn references_cover_ref_getatt_sub_and_depends_on() {
    let r = json!({
        "DependsOn": ["D1"],
        "Properties": {
            "A": {"Ref": "R"}, "B": {"Fn::GetAtt": ["G", "Arn"]},
            "C": {"Fn::Sub": "${S1}/${S2.Arn}/${!Lit}/${AWS::Region}"},
            "E": {"Fn::Sub": ["${V}-${S3}", {"V": {"Ref": "R2"}}]}
        }
    });
    let names: Vec<String> = references(&r).into_iter().collect();
    assert_eq!(
        names,
        ["AWS::Region", "D1", "G", "R", "R2", "S1", "S2", "S3"]
    );
    assert_eq!(references(&json!({"DependsOn": "D"})).len(), 1);
}

#[test]
fn dependents_of_dropped_resources_are_dropped() {
    // GIVEN a queue, a topic (not local), a policy naming the topic, and a bucket
    let t = "Resources:\n  Q: {Type: AWS::SQS::Queue}\n  T: {Type: AWS::SNS::Topic}\n  P:\n    Type: AWS::SQS::QueuePolicy\n    Properties: {Queues: [!Ref Q], PolicyDocument: {Resource: !Ref T}}\n  B: {Type: AWS::S3::Bucket, DependsOn: P}\n";
    let v = local_template(t, "p").unwrap();
    // THEN the policy and (transitively) the bucket go too
    let kept: Vec<&String> = resources(&v).keys().collect();
    assert_eq!(kept, ["Q"]);
    assert_eq!(resources(&v)["Q"]["Properties"]["QueueName"], "p-q");
}

#[test]
fn kebab_case() {
    assert_eq!(kebab("SendQueue"), "send-queue");
    assert_eq!(kebab("Q"), "q");
    assert_eq!(kebab("already-kebab"), "already-kebab");
}

#[test]
fn errors_name_what_is_wrong() {
    let err = |t: &str| local_template(t, "p").unwrap_err().to_string();
    assert!(err("a: [unclosed").contains("not valid YAML"));
    assert_eq!(err("- a list"), "the template is not a mapping");
    assert_eq!(
        err("Parameters: {}"),
        "the template has no Resources mapping"
    );
    assert_eq!(
        err("Resources: [a]"),
        "the template has no Resources mapping"
    );
    assert_eq!(
        err("Parameters: [a]\nResources: {}"),
        "Parameters is not a mapping"
    );
    assert_eq!(err("Resources:\n  A: !Foo x"), "unsupported YAML tag !Foo");
    assert!(err("Resources:\n  1: x").starts_with("a mapping key is not a string"));
    assert_eq!(
        err("Resources:\n  A: !GetAtt NoDot"),
        "!GetAtt NoDot is not `Resource.Attribute`"
    );
    assert_eq!(
        err("Resources:\n  M: {Type: AWS::Serverless::StateMachine, Properties: {Type: STANDARD}}"),
        "state machine M has no Definition"
    );
    assert_eq!(
        err("Resources:\n  M: {Type: AWS::Serverless::StateMachine, Properties: [x]}"),
        "M.Properties is not a mapping"
    );
    assert_eq!(
        err("Resources:\n  Q: {Type: AWS::SQS::Queue, Properties: 3}"),
        "Q.Properties is not a mapping"
    );
    assert!(
        err("Resources:\n  A: .inf\n  B: {Type: AWS::SQS::Queue}").contains("does not fit JSON")
    );
}

#[test]
fn a_resource_without_properties_gets_its_name() {
    let v = local_template("Resources:\n  Q: {Type: AWS::SQS::Queue}\n  M: {Type: AWS::Serverless::StateMachine, Properties: {Definition: {StartAt: P}}}\n", "p").unwrap();
    assert_eq!(resources(&v)["Q"]["Properties"]["QueueName"], "p-q");
    assert_eq!(
        resources(&v)["M"]["Properties"]["DefinitionString"],
        r#"{"StartAt":"P"}"#
    );
    assert!(
        resources(&v)["M"]["Properties"]
            .get("StateMachineType")
            .is_none()
    );
}

#[tokio::test(start_paused = true)]
async fn waiting_returns_the_settled_status() {
    let mut calls = 0;
    let status = wait_until_settled(
        || {
            calls += 1;
            let s = if calls < 3 {
                "CREATE_IN_PROGRESS"
            } else {
                "ROLLBACK_COMPLETE"
            };
            async move { Ok(s.to_owned()) }
        },
        Duration::from_millis(100),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    assert_eq!(status, "ROLLBACK_COMPLETE");
    assert_eq!(calls, 3);
}

#[tokio::test(start_paused = true)]
async fn waiting_gives_up_after_the_timeout() {
    let err = wait_until_settled(
        || async { Ok("CREATE_IN_PROGRESS".to_owned()) },
        Duration::from_millis(100),
        Duration::from_secs(5),
    )
    .await
    .unwrap_err();
    assert_eq!(err.operation, "create stack");
    assert!(
        err.message.contains("still CREATE_IN_PROGRESS after 5 s"),
        "{}",
        err.message
    );
}

#[tokio::test(start_paused = true)]
async fn waiting_passes_errors_on() {
    let err = wait_until_settled(
        || async { Err(StoreError::msg("describe stacks", "boom")) },
        Duration::from_millis(100),
        Duration::from_secs(5),
    )
    .await
    .unwrap_err();
    assert_eq!(err.operation, "describe stacks");
}

fn transient_failure(n: u32) -> CreateFailure {
    CreateFailure::Transient(StoreError::msg("create stack", format!("500 on try {n}")))
}

/// Runs [`create_with_retries`] on `outcomes` (one per attempt, in order); returns its
/// result, the names tried and the names discarded.
async fn retries(
    mut outcomes: Vec<Result<(), CreateFailure>>,
) -> (Result<String, StoreError>, Vec<String>, Vec<String>) {
    outcomes.reverse();
    let tried = std::cell::RefCell::new(Vec::new());
    let discarded = std::cell::RefCell::new(Vec::new());
    let outcomes = std::cell::RefCell::new(outcomes);
    let result = create_with_retries(
        "courier-x",
        |name| {
            tried.borrow_mut().push(name);
            let outcome = outcomes.borrow_mut().pop().expect("an outcome per attempt");
            async move { outcome }
        },
        |name| {
            discarded.borrow_mut().push(name);
            async {}
        },
    )
    .await;
    (result, tried.into_inner(), discarded.into_inner())
}

#[tokio::test(start_paused = true)]
async fn a_stack_that_failed_part_way_is_discarded_and_created_under_a_new_name() {
    let (result, tried, discarded) = retries(vec![Err(transient_failure(1)), Ok(())]).await;
    assert_eq!(result.unwrap(), "courier-x-r2");
    assert_eq!(tried, ["courier-x", "courier-x-r2"]);
    assert_eq!(discarded, ["courier-x"]);
}

#[tokio::test(start_paused = true)]
async fn a_permanent_failure_is_not_retried() {
    let (result, tried, discarded) = retries(vec![Err(CreateFailure::Permanent(StoreError::msg(
        "create stack",
        "Stack courier-x already exists",
    )))])
    .await;
    assert!(result.unwrap_err().message.contains("already exists"));
    assert_eq!(tried, ["courier-x"]);
    assert!(discarded.is_empty());
}

#[tokio::test(start_paused = true)]
async fn transient_failures_give_up_after_the_last_attempt() {
    let outcomes = (1..=CREATE_ATTEMPTS)
        .map(|n| Err(transient_failure(n)))
        .collect();
    let (result, tried, discarded) = retries(outcomes).await;
    let err = result.unwrap_err();
    assert_eq!(err.operation, "create stack");
    assert!(
        err.message.contains("500 on try 3 (attempt 3 of 3)"),
        "{}",
        err.message
    );
    assert_eq!(tried, ["courier-x", "courier-x-r2", "courier-x-r3"]);
    assert_eq!(discarded, ["courier-x", "courier-x-r2"]);
}

#[test]
fn only_missing_and_5xx_answers_are_transient() {
    use aws_sdk_cloudformation::operation::create_stack::CreateStackError;
    use aws_smithy_runtime_api::client::result::SdkError;
    use aws_smithy_types::body::SdkBody;
    let answer = |status: u16| {
        SdkError::<CreateStackError, HttpResponse>::response_error(
            "an answer the SDK cannot parse",
            HttpResponse::new(status.try_into().unwrap(), SdkBody::empty()),
        )
    };
    assert!(transient(&answer(500)));
    assert!(transient(&answer(503)));
    assert!(!transient(&answer(400)));
    assert!(transient(
        &SdkError::<CreateStackError, HttpResponse>::timeout_error("no answer in time")
    ));
}

#[test]
fn failure_reasons_list_failed_resources_oldest_first() {
    let events = [
        ("stack", "ROLLBACK_COMPLETE", None),
        ("B", "CREATE_FAILED", Some("second")),
        ("A", "CREATE_FAILED", Some("first")),
        ("A", "CREATE_IN_PROGRESS", None),
        ("C", "CREATE_FAILED", Some("")),
    ];
    assert_eq!(failure_reasons(events), "A: first; B: second");
    assert_eq!(
        failure_reasons([("A", "CREATE_COMPLETE", None)]),
        "no resource reported a reason"
    );
}

#[test]
fn machine_settings_come_from_the_local_template() {
    let v = local_template(TEMPLATE, "p").unwrap();
    let (name, definition, kind) = machine_settings(&v, "DelayStateMachine").unwrap();
    assert_eq!(name, "p-delay-state-machine");
    assert!(definition.contains("sqs:sendMessage"));
    assert_eq!(kind, Some("STANDARD"));
    let err = machine_settings(&v, "SendQueue").unwrap_err();
    assert_eq!(err.operation, "create state machine");
    assert_eq!(
        err.message,
        "SendQueue has no StateMachineName in the local template"
    );
}

/// Metric names an alarm reads, and its threshold.
fn alarms(template: &Value) -> Vec<(String, BTreeSet<String>, Value)> {
    template["Resources"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::CloudWatch::Alarm")
        .map(|(id, r)| {
            let p = &r["Properties"];
            let mut names = BTreeSet::new();
            if let Some(n) = p["MetricName"].as_str() {
                names.insert(n.to_owned());
            }
            for m in p["Metrics"].as_array().into_iter().flatten() {
                if let Some(n) = m["MetricStat"]["Metric"]["MetricName"].as_str() {
                    names.insert(n.to_owned());
                }
            }
            (id.clone(), names, p["Threshold"].clone())
        })
        .collect()
}

#[test]
fn the_template_alarms_on_every_category_and_class() {
    // GIVEN the template's alarms and the code's dead-letter categories and error classes
    let t = yaml_to_json(TEMPLATE).unwrap();
    let alarms = alarms(&t);
    let params = t["Parameters"].as_object().unwrap();
    let mut thresholds = BTreeSet::new();
    // THEN each category the send function writes has an alarm with a threshold of its own
    for category in courier_core::policy::DeadLetterCategory::ALL {
        if category == courier_core::policy::DeadLetterCategory::Redriven {
            continue; // the archiver's category; raw redrives are alarmed on the queue
        }
        let metric = format!("DeadLettered_{}", category.as_str());
        let (id, _, threshold) = alarms
            .iter()
            .find(|(_, names, _)| names.contains(&metric))
            .unwrap_or_else(|| panic!("no alarm on {metric}"));
        let param = threshold["Ref"]
            .as_str()
            .unwrap_or_else(|| panic!("{id}: threshold"));
        assert!(params.contains_key(param), "{id}: {param}");
        assert!(thresholds.insert(param.to_owned()), "{param} shared");
    }
    // AND exhausted retries count the events function's give-ups (transient bounces past
    // the horizon) as well as the send function's
    let exhausted = &t["Resources"]["DeadLetterRetriesExhaustedAlarm"]["Properties"]["Metrics"];
    let functions: BTreeSet<&str> = exhausted
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["MetricStat"]["Metric"]["Dimensions"][0]["Value"].as_str())
        .collect();
    assert_eq!(functions, BTreeSet::from(["send", "events"]));
    let redriven = alarms
        .iter()
        .find(|(id, _, _)| id == "DeadLetterRedrivenAlarm")
        .unwrap();
    assert!(redriven.1.contains("ApproximateNumberOfMessagesVisible"));
    assert!(thresholds.insert(redriven.2["Ref"].as_str().unwrap().to_owned()));
    // AND every error class has its share-of-outcomes alarm
    for class in courier_core::classify::ErrorClass::ALL {
        let metric = format!("Failures_{}", class.as_str());
        assert!(
            alarms
                .iter()
                .any(|(_, names, _)| names.contains(&metric) && names.contains("Outcomes")),
            "no share alarm on {metric}"
        );
    }
    for metric in [
        "BreakerTransitions",
        "NewUnknownErrorCode",
        "ReputationGuardTripped",
        "SweptStuckProcessing",
        "SweptNoOutcome",
        "Sent",
    ] {
        assert!(
            alarms.iter().any(|(_, names, _)| names.contains(metric)),
            "no alarm on {metric}"
        );
    }
    // AND the dashboard shows them all
    let body = t["Resources"]["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
        .as_str()
        .unwrap();
    let dashboard: Value = serde_json::from_str(body).unwrap();
    let shown = dashboard.to_string();
    for class in courier_core::classify::ErrorClass::ALL {
        assert!(shown.contains(&format!("\"Failures_{}\"", class.as_str())));
    }
    for metric in [
        "DeadLettered_poison",
        "DeadLettered_invalid_job",
        "DeadLettered_needs_review",
        "DeadLettered_retries_exhausted",
        "BreakerTransitions",
        "BounceRate",
        "ComplaintRate",
        "SweptStuckProcessing",
        "SweptNoOutcome",
        "ApproximateNumberOfMessagesVisible",
    ] {
        assert!(shown.contains(&format!("\"{metric}\"")), "{metric}");
    }
}

#[test]
fn ses_events_take_one_path_chosen_at_deploy_time() {
    // GIVEN the template's SES event resources
    let t = yaml_to_json(TEMPLATE).unwrap();
    let r = t["Resources"].as_object().unwrap();
    let parameter = &t["Parameters"]["SesEventsVia"];
    assert_eq!(parameter["Default"], "sns");
    assert_eq!(parameter["AllowedValues"], json!(["sns", "eventbridge"]));
    for (condition, value) in [
        ("SesEventsViaSns", "sns"),
        ("SesEventsViaEventBridge", "eventbridge"),
    ] {
        assert_eq!(
            t["Conditions"][condition],
            json!({"Fn::Equals": [{"Ref": "SesEventsVia"}, value]})
        );
    }
    // THEN each event destination is created under its own value of the parameter: one
    // path at a time, so no event is delivered twice
    let mut destinations: Vec<(&str, &str)> = r
        .iter()
        .filter(|(_, v)| v["Type"] == "AWS::SES::ConfigurationSetEventDestination")
        .map(|(id, v)| {
            let condition = v["Condition"].as_str();
            (
                condition.unwrap_or_else(|| panic!("{id} has no Condition")),
                id.as_str(),
            )
        })
        .collect();
    destinations.sort_unstable();
    assert_eq!(
        destinations,
        [
            ("SesEventsViaEventBridge", "SesEventBridgeDestination"),
            ("SesEventsViaSns", "SesEventDestination"),
        ]
    );
    let destination = |id: &str| &r[id]["Properties"]["EventDestination"];
    assert_eq!(
        destination("SesEventDestination")["MatchingEventTypes"],
        destination("SesEventBridgeDestination")["MatchingEventTypes"]
    );
    assert!(
            destination("SesEventBridgeDestination")["EventBridgeDestination"]["EventBusArn"]
                ["Fn::Sub"]
                .as_str()
                .unwrap()
                .ends_with(":event-bus/default")
        );
    // AND the SNS resources come with the SNS path only, the rule with the EventBridge path
    for id in ["SesEventsTopic", "SesEventsSubscription"] {
        assert_eq!(r[id]["Condition"], "SesEventsViaSns", "{id}");
    }
    let rule = &r["SesEventsRule"];
    assert_eq!(rule["Type"], "AWS::Events::Rule");
    assert_eq!(rule["Condition"], "SesEventsViaEventBridge");
    let pattern = &rule["Properties"]["EventPattern"];
    assert_eq!(pattern["source"], json!(["aws.ses"]));
    assert_eq!(
        pattern["detail"]["mail"]["tags"]["ses:configuration-set"],
        json!([{"Ref": "SesConfigurationSet"}])
    );
    let target = &rule["Properties"]["Targets"][0];
    assert_eq!(target["Arn"], json!({"Fn::GetAtt": ["EventsQueue", "Arn"]}));
    assert_eq!(
        target["DeadLetterConfig"]["Arn"],
        json!({"Fn::GetAtt": ["EventsDeadLetterQueue", "Arn"]})
    );
    // AND the events queue admits the chosen path's sender only, from that topic or rule
    let statement =
        &r["EventsQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"][0]["Fn::If"];
    assert_eq!(statement[0], "SesEventsViaSns");
    let sender = |s: &Value| {
        (
            s["Principal"]["Service"].clone(),
            s["Condition"]["ArnEquals"]["aws:SourceArn"].clone(),
        )
    };
    assert_eq!(
        sender(&statement[1]),
        (json!("sns.amazonaws.com"), json!({"Ref": "SesEventsTopic"}))
    );
    assert_eq!(
        sender(&statement[2]),
        (
            json!("events.amazonaws.com"),
            json!({"Fn::GetAtt": ["SesEventsRule", "Arn"]})
        )
    );
    let dlq_policy = &r["EventsDeadLetterQueuePolicy"];
    assert_eq!(dlq_policy["Condition"], "SesEventsViaEventBridge");
    assert_eq!(
        sender(&dlq_policy["Properties"]["PolicyDocument"]["Statement"][0]),
        (
            json!("events.amazonaws.com"),
            json!({"Fn::GetAtt": ["SesEventsRule", "Arn"]})
        )
    );
}

#[test]
fn physical_ids_and_queue_names() {
    let map: BTreeMap<String, String> = [(
        "SendQueue".to_owned(),
        "https://sqs.us-east-1.amazonaws.com/1/p-send-queue".to_owned(),
    )]
    .into();
    assert_eq!(
        queue_name(physical(&map, "SendQueue").unwrap()),
        "p-send-queue"
    );
    assert_eq!(queue_name("plain"), "plain");
    let err = physical(&map, "Nope").unwrap_err();
    assert_eq!(err.message, "the stack has no resource Nope");
}
