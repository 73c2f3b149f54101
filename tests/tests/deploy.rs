//! Deployment. Two kinds of test:
//!
//! - The consistency check (no emulator needed): every function of `infra/template.yaml` (read at
//!   test time, with its `Globals`) against the `[package.metadata.lambda.*]` sections of the
//!   workspace's crates (read with `cargo metadata` at test time): function name = binary name,
//!   memory, timeout, runtime, handler, architecture, tracing, tags and the environment's variable
//!   names (and the values that are not resource references). Each disagreement is listed.
//! - `cargo lambda deploy` to the emulator's Lambda API (which creates functions without Docker
//!   and cannot invoke them) from the arm64 zips of `make lambda-zips-test` (`lambda-test`
//!   profile; `COURIER_LAMBDA_DIR`, else the release zips of `make lambda-zips`), then
//!   GetFunctionConfiguration. `make test` runs it on LocalStack (`make it-moto` skips it: the
//!   zips build in the background and only the LocalStack phase waits for them); it passes on
//!   moto too.
//!
//! Metadata env values written `${Resource}` (or `${Resource.Attr}`) stand for the template's
//! `!Ref Resource` (`!GetAtt Resource.Attr`); a real deploy passes the stack's values with
//! `--env-var`, which replaces the metadata's list (the deploy test checks that too).

#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers fail the test loudly

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value as Json;
use serde_norway::Value as Yaml;

fn repo() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Cargo's target directory (`CARGO_TARGET_DIR` when set), where `make lambda-build` writes.
fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => repo().join(dir),
        None => repo().join("target"),
    }
}

// ------------------------------------------------------------------------------ the template

/// An environment value as the template gives it.
#[derive(Clone, Debug, PartialEq)]
enum EnvValue {
    /// A literal, or a parameter's default.
    Literal(String),
    /// `!Ref R` / `!GetAtt R.Attr` of a resource: written `${R}` / `${R.Attr}` in the metadata.
    Resource(String),
    /// `!If [cond, value, !Ref AWS::NoValue]` (either order): the variable may be absent.
    Optional(Box<EnvValue>),
    /// Anything else (`!Sub`, `!Join`, ...): only the name is compared.
    Other(String),
}

/// One `AWS::Serverless::Function` with the template's `Globals.Function` applied.
#[derive(Debug)]
struct TemplateFunction {
    logical_id: String,
    function_name: Option<String>,
    binary: Option<String>,
    memory: Option<i64>,
    timeout: Option<i64>,
    runtime: Option<String>,
    handler: Option<String>,
    architectures: Vec<String>,
    tracing: Option<String>,
    tags: BTreeMap<String, String>,
    env: BTreeMap<String, EnvValue>,
}

fn tag_and_value(v: &Yaml) -> Option<(String, &Yaml)> {
    match v {
        Yaml::Tagged(t) => Some((
            t.tag.to_string().trim_start_matches('!').to_string(),
            &t.value,
        )),
        Yaml::Mapping(m) if m.len() == 1 => {
            let (k, v) = m.iter().next()?;
            let k = k.as_str()?;
            let short = match k {
                "Ref" => "Ref",
                "Fn::GetAtt" => "GetAtt",
                "Fn::If" => "If",
                "Fn::Sub" => "Sub",
                "Fn::Join" => "Join",
                "Fn::Select" => "Select",
                _ => return None,
            };
            Some((short.to_string(), v))
        }
        _ => None,
    }
}

fn scalar(v: &Yaml) -> Option<String> {
    match v {
        Yaml::String(s) => Some(s.clone()),
        Yaml::Number(n) => Some(n.to_string()),
        Yaml::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

struct Template {
    doc: Yaml,
}

impl Template {
    fn load() -> Template {
        let path = repo().join("infra/template.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        Template::parse(&text)
    }

    fn parse(text: &str) -> Template {
        Template {
            doc: serde_norway::from_str(text).expect("infra/template.yaml parses as YAML"),
        }
    }

    fn parameter_default(&self, name: &str) -> Option<String> {
        scalar(self.doc.get("Parameters")?.get(name)?.get("Default")?)
    }

    fn is_resource(&self, name: &str) -> bool {
        self.doc
            .get("Resources")
            .and_then(|r| r.get(name))
            .is_some()
    }

    fn is_no_value(v: &Yaml) -> bool {
        matches!(tag_and_value(v), Some((t, inner)) if t == "Ref" && inner.as_str() == Some("AWS::NoValue"))
    }

    fn resolve(&self, v: &Yaml) -> EnvValue {
        if let Some(s) = scalar(v) {
            return EnvValue::Literal(s);
        }
        match tag_and_value(v) {
            Some((t, inner)) if t == "Ref" => {
                let name = inner.as_str().unwrap_or_default();
                if let Some(default) = self.parameter_default(name) {
                    EnvValue::Literal(default)
                } else if self.is_resource(name) {
                    EnvValue::Resource(name.to_string())
                } else {
                    EnvValue::Other(format!("!Ref {name}"))
                }
            }
            Some((t, inner)) if t == "GetAtt" => {
                let path = match inner {
                    Yaml::Sequence(parts) => parts
                        .iter()
                        .filter_map(|p| p.as_str())
                        .collect::<Vec<_>>()
                        .join("."),
                    other => other.as_str().unwrap_or_default().to_string(),
                };
                EnvValue::Resource(path)
            }
            Some((t, inner)) if t == "If" => {
                let branches = inner.as_sequence().map(|s| s.as_slice()).unwrap_or(&[]);
                match branches {
                    [_, a, b] if Self::is_no_value(b) => {
                        EnvValue::Optional(Box::new(self.resolve(a)))
                    }
                    [_, a, b] if Self::is_no_value(a) => {
                        EnvValue::Optional(Box::new(self.resolve(b)))
                    }
                    _ => EnvValue::Other("!If".into()),
                }
            }
            Some((t, _)) => EnvValue::Other(format!("!{t}")),
            None => EnvValue::Other(format!("{v:?}")),
        }
    }

    fn number(&self, v: Option<&Yaml>) -> Option<i64> {
        match self.resolve(v?) {
            EnvValue::Literal(s) => s.parse().ok(),
            _ => None,
        }
    }

    fn string(&self, v: Option<&Yaml>) -> Option<String> {
        match self.resolve(v?) {
            EnvValue::Literal(s) => Some(s),
            _ => None,
        }
    }

    fn functions(&self) -> Vec<TemplateFunction> {
        let globals = self.doc.get("Globals").and_then(|g| g.get("Function"));
        let get = |props: &Yaml, key: &str| -> Option<Yaml> {
            props
                .get(key)
                .or_else(|| globals.and_then(|g| g.get(key)))
                .cloned()
        };
        let map_of = |v: Option<&Yaml>| -> Vec<(String, Yaml)> {
            v.and_then(|m| m.as_mapping())
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.clone())))
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut out = Vec::new();
        let Some(resources) = self.doc.get("Resources").and_then(|r| r.as_mapping()) else {
            return out;
        };
        for (id, resource) in resources {
            if resource.get("Type").and_then(|t| t.as_str()) != Some("AWS::Serverless::Function") {
                continue;
            }
            let empty = Yaml::Mapping(Default::default());
            let props = resource.get("Properties").unwrap_or(&empty);
            // Globals first, then the function's own: SAM merges maps (environment, tags).
            let mut env = BTreeMap::new();
            let mut tags = BTreeMap::new();
            let global_env = globals
                .and_then(|g| g.get("Environment"))
                .and_then(|e| e.get("Variables"));
            let own_env = props.get("Environment").and_then(|e| e.get("Variables"));
            for (k, v) in map_of(global_env).into_iter().chain(map_of(own_env)) {
                env.insert(k, self.resolve(&v));
            }
            let global_tags = globals.and_then(|g| g.get("Tags"));
            for (k, v) in map_of(global_tags)
                .into_iter()
                .chain(map_of(props.get("Tags")))
            {
                let value = match self.resolve(&v) {
                    EnvValue::Literal(s) => s,
                    other => format!("{other:?}"),
                };
                tags.insert(k, value);
            }
            let architectures = get(props, "Architectures")
                .and_then(|a| {
                    a.as_sequence()
                        .map(|s| s.iter().filter_map(scalar).collect::<Vec<_>>())
                })
                .unwrap_or_else(|| vec!["x86_64".into()]);
            out.push(TemplateFunction {
                logical_id: id.as_str().unwrap_or_default().to_string(),
                function_name: self.string(props.get("FunctionName")),
                binary: resource
                    .get("Metadata")
                    .and_then(|m| m.get("BuildProperties"))
                    .and_then(|b| b.get("Binary"))
                    .and_then(scalar),
                memory: self.number(get(props, "MemorySize").as_ref()),
                timeout: self.number(get(props, "Timeout").as_ref()),
                runtime: self.string(get(props, "Runtime").as_ref()),
                handler: self.string(get(props, "Handler").as_ref()),
                architectures,
                tracing: self.string(get(props, "Tracing").as_ref()),
                tags,
                env,
            });
        }
        out
    }
}

// ------------------------------------------------------------------------------ the crates

/// A workspace crate's binaries and `[package.metadata.lambda]`.
#[derive(Clone, Debug)]
struct Crate {
    package: String,
    manifest: String,
    bins: Vec<String>,
    lambda: Json,
}

fn workspace_crates() -> Vec<Crate> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(repo())
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Json = serde_json::from_slice(&out.stdout).unwrap();
    meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| Crate {
            package: p["name"].as_str().unwrap().to_string(),
            manifest: p["manifest_path"].as_str().unwrap().to_string(),
            bins: p["targets"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t["kind"].as_array().unwrap().iter().any(|k| k == "bin"))
                .map(|t| t["name"].as_str().unwrap().to_string())
                .collect(),
            lambda: p["metadata"]["lambda"].clone(),
        })
        .collect()
}

/// The crates that are Lambda functions: those under `functions/`, and any crate with deploy metadata.
fn function_crates(crates: &[Crate]) -> Vec<Crate> {
    crates
        .iter()
        .filter(|c| {
            Path::new(&c.manifest)
                .parent()
                .and_then(|d| d.parent())
                .and_then(|d| d.file_name())
                == Some(std::ffi::OsStr::new("functions"))
                || !c.lambda["deploy"].is_null()
        })
        .cloned()
        .collect()
}

/// The metadata's `env` as a map (cargo-lambda accepts a table or a list of `K=V`).
fn metadata_env(deploy: &Json) -> BTreeMap<String, String> {
    let env = if deploy["env"].is_null() {
        &deploy["env_var"]
    } else {
        &deploy["env"]
    };
    match env {
        Json::Object(m) => m
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().map_or(v.to_string(), String::from)))
            .collect(),
        Json::Array(items) => items
            .iter()
            .filter_map(|i| i.as_str()?.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        _ => BTreeMap::new(),
    }
}

fn metadata_tags(deploy: &Json) -> BTreeMap<String, String> {
    let tags = if deploy["tags"].is_null() {
        &deploy["tag"]
    } else {
        &deploy["tags"]
    };
    metadata_env(&serde_json::json!({ "env": tags }))
}

// ------------------------------------------------------------------------------ the comparison

/// Every disagreement between the template's functions and the crates' metadata.
fn disagreements(template: &Template, crates: &[Crate]) -> Vec<String> {
    let mut problems = Vec::new();
    let functions = template.functions();
    let fn_crates = function_crates(crates);
    if functions.is_empty() {
        problems.push("the template has no AWS::Serverless::Function".into());
    }
    let mut matched = BTreeSet::new();
    for f in &functions {
        let id = &f.logical_id;
        let Some(binary) = f.binary.clone() else {
            problems.push(format!(
                "{id}: no Metadata.BuildProperties.Binary (cargo-lambda needs the binary's name)"
            ));
            continue;
        };
        let Some(krate) = crates.iter().find(|c| c.bins.contains(&binary)) else {
            problems.push(format!(
                "{id}: binary {binary} is not a binary of any workspace crate"
            ));
            continue;
        };
        matched.insert(krate.package.clone());
        let name = f.function_name.clone().unwrap_or_default();
        if name != binary {
            problems.push(format!(
                "{id}: FunctionName {name:?} differs from its binary {binary:?} (`cargo lambda deploy {binary}` deploys under the binary's name)"
            ));
        }
        let deploy = &krate.lambda["deploy"];
        if deploy.is_null() {
            problems.push(format!(
                "{id}: {} has no [package.metadata.lambda.deploy]",
                krate.package
            ));
            continue;
        }
        let who = format!("{id} / {}", krate.package);
        if f.memory != deploy["memory"].as_i64() {
            problems.push(format!(
                "{who}: memory: template {:?}, Cargo.toml {}",
                f.memory, deploy["memory"]
            ));
        }
        if f.timeout != deploy["timeout"].as_i64() {
            problems.push(format!(
                "{who}: timeout: template {:?}, Cargo.toml {}",
                f.timeout, deploy["timeout"]
            ));
        }
        let runtime = deploy["runtime"].as_str().unwrap_or("provided.al2023");
        if f.runtime.as_deref() != Some(runtime) {
            problems.push(format!(
                "{who}: runtime: template {:?}, cargo-lambda deploys {runtime}",
                f.runtime
            ));
        }
        if f.handler.as_deref() != Some("bootstrap") {
            problems.push(format!(
                "{who}: handler: template {:?}, cargo-lambda's is bootstrap",
                f.handler
            ));
        }
        let arm64 = krate.lambda["build"]["arm64"].as_bool().unwrap_or(false);
        let want = if arm64 { "arm64" } else { "x86_64" };
        if f.architectures != [want] {
            problems.push(format!(
                "{who}: architecture: template {:?}, Cargo.toml builds {want} ([package.metadata.lambda.build] arm64 = {arm64})",
                f.architectures
            ));
        }
        let tracing = deploy["tracing"].as_str().unwrap_or("PassThrough");
        let template_tracing = f.tracing.as_deref().unwrap_or("PassThrough");
        if !tracing.eq_ignore_ascii_case(template_tracing) {
            problems.push(format!(
                "{who}: tracing: template {template_tracing}, Cargo.toml {tracing}"
            ));
        }
        let tags = metadata_tags(deploy);
        if f.tags != tags {
            problems.push(format!(
                "{who}: tags: template {:?}, Cargo.toml {tags:?}",
                f.tags
            ));
        }
        let env = metadata_env(deploy);
        for (k, want) in &f.env {
            let (want, optional) = match want {
                EnvValue::Optional(inner) => (inner.as_ref(), true),
                other => (other, false),
            };
            match (env.get(k), want) {
                (None, _) if optional => {}
                (None, _) => problems.push(format!(
                    "{who}: env {k} is in the template, not in Cargo.toml"
                )),
                (Some(v), EnvValue::Literal(l)) if v != l => problems.push(format!(
                    "{who}: env {k}: template {l:?}, Cargo.toml {v:?}"
                )),
                (Some(v), EnvValue::Resource(r)) if *v != format!("${{{r}}}") => {
                    problems.push(format!(
                        "{who}: env {k}: template refers to {r}, Cargo.toml should say \"${{{r}}}\", says {v:?}"
                    ))
                }
                _ => {}
            }
        }
        for k in env.keys().filter(|k| !f.env.contains_key(*k)) {
            problems.push(format!(
                "{who}: env {k} is in Cargo.toml, not in the template"
            ));
        }
    }
    for c in fn_crates.iter().filter(|c| !matched.contains(&c.package)) {
        problems.push(format!(
            "{}: a function crate that no template function builds (no Metadata.BuildProperties.Binary among {:?})",
            c.package, c.bins
        ));
    }
    problems
}

/// The claim check's bucket (AWS S3 lifecycle: an `Expiration` in days removes an object that
/// many days after its creation). A stored body must outlive everything that points to it: the
/// longest wait the default policy grants, then a copy's time on the send queue (at most the
/// `QueueRetentionSeconds` maximum) and on its redrive DLQ, or a letter's on the dead-letter
/// queue (14 days each). Producers' attachments (`attachments/`) expire on the same horizon; the
/// copies the archiver keeps of archived letters' files (`retained/attachments/`) on the
/// archive's. Only the send, events and archiver roles reach it, and only its prefixes: the send
/// function reads attachments, never writes them; the events function reads and writes claim
/// checks only (a kept body over 300 KiB, a resend too large for SQS); the archiver copies
/// attachments (CopyObject needs `GetObject` on the source and `PutObject` on the copy) and
/// writes nowhere else.
#[test]
fn the_payload_bucket_outlives_every_pointer_and_only_its_prefix_is_reachable() {
    let t = Template::load();
    let rules =
        &t.doc["Resources"]["PayloadBucket"]["Properties"]["LifecycleConfiguration"]["Rules"];
    for (i, prefix, horizon) in [
        (
            0,
            courier_core::claim_check::KEY_PREFIX,
            "PayloadRetentionDays",
        ),
        (
            1,
            courier_core::job::attachment::KEY_PREFIX,
            "PayloadRetentionDays",
        ),
        (
            2,
            courier_core::job::attachment::RETAINED_PREFIX,
            "ArchiveRetentionDays",
        ),
    ] {
        let rule = &rules[i];
        assert_eq!(rule["Prefix"].as_str(), Some(prefix));
        let (tag, days) = tag_and_value(&rule["ExpirationInDays"]).expect("a !Ref");
        assert_eq!((tag.as_str(), days.as_str()), ("Ref", Some(horizon)));
    }
    // The archive expires its letters on the same parameter the retained files do.
    let archive_rule =
        &t.doc["Resources"]["ArchiveBucket"]["Properties"]["LifecycleConfiguration"]["Rules"][0];
    let (_, days) = tag_and_value(&archive_rule["ExpirationInDays"]).expect("a !Ref");
    assert_eq!(days.as_str(), Some("ArchiveRetentionDays"));
    let retention_days: u64 = t
        .parameter_default("PayloadRetentionDays")
        .unwrap()
        .parse()
        .unwrap();
    let policy = courier_core::policy::RetryPolicy::default();
    let longest_wait = [&policy.transactional, &policy.bulk]
        .iter()
        .flat_map(|tier| tier.classes.values())
        .map(|rule| rule.horizon)
        .max()
        .unwrap();
    let queue_max: u64 = scalar(&t.doc["Parameters"]["QueueRetentionSeconds"]["MaxValue"])
        .unwrap()
        .parse()
        .unwrap();
    let dlq = 14 * 86_400;
    let needed = longest_wait + queue_max + dlq;
    assert!(
        retention_days * 86_400 >= needed,
        "PayloadRetentionDays {retention_days} d is shorter than {} d",
        needed.div_ceil(86_400)
    );
    // Every statement that names the bucket: what each role may do, and where.
    let text = std::fs::read_to_string(repo().join("infra/template.yaml")).unwrap();
    let mut grants = std::collections::BTreeSet::new();
    for (name, function) in t.doc["Resources"].as_mapping().unwrap() {
        let name = name.as_str().unwrap_or_default();
        let policies = &function["Properties"]["Policies"];
        for statement in policies
            .as_sequence()
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("Statement")?.as_sequence())
            .flatten()
        {
            if !format!("{:?}", statement["Resource"]).contains("PayloadBucket") {
                continue;
            }
            let actions: Vec<&str> = match statement["Action"].as_sequence() {
                Some(list) => list.iter().filter_map(Yaml::as_str).collect(),
                None => statement["Action"].as_str().into_iter().collect(),
            };
            let resources: Vec<String> = match statement["Resource"].as_sequence() {
                Some(list) => list.iter().map(|r| format!("{r:?}")).collect(),
                None => vec![format!("{:?}", statement["Resource"])],
            };
            for (action, resource) in actions
                .iter()
                .flat_map(|a| resources.iter().map(move |r| (*a, r)))
            {
                let place = if action == "s3:ListBucket" {
                    // Listing: the bucket itself (a missing key is then a 404, not a 403).
                    assert_eq!(
                        referenced(&statement["Resource"]).as_deref(),
                        Some("PayloadBucket"),
                        "{name}"
                    );
                    "bucket"
                } else if resource.contains("${PayloadBucket.Arn}/claim-check/*") {
                    "claim-check/*"
                } else if resource.contains("${PayloadBucket.Arn}/attachments/*") {
                    "attachments/*"
                } else if resource.contains("${PayloadBucket.Arn}/retained/attachments/*") {
                    "retained/attachments/*"
                } else {
                    panic!("{name}: {action} on {resource}")
                };
                grants.insert((name.to_owned(), action.to_owned(), place));
            }
        }
    }
    let want: std::collections::BTreeSet<(String, String, &str)> = [
        ("SendFunction", "s3:PutObject", "claim-check/*"),
        ("SendFunction", "s3:GetObject", "claim-check/*"),
        ("SendFunction", "s3:GetObject", "attachments/*"),
        ("SendFunction", "s3:GetObject", "retained/attachments/*"),
        ("SendFunction", "s3:ListBucket", "bucket"),
        ("EventsFunction", "s3:PutObject", "claim-check/*"),
        ("EventsFunction", "s3:GetObject", "claim-check/*"),
        ("EventsFunction", "s3:ListBucket", "bucket"),
        ("ArchiverFunction", "s3:GetObject", "claim-check/*"),
        ("ArchiverFunction", "s3:GetObject", "attachments/*"),
        ("ArchiverFunction", "s3:PutObject", "retained/attachments/*"),
        ("ArchiverFunction", "s3:ListBucket", "bucket"),
    ]
    .into_iter()
    .map(|(n, a, p)| (n.to_owned(), a.to_owned(), p))
    .collect();
    assert_eq!(grants, want);
    assert!(
        !text.contains("BucketName: !Ref PayloadBucket"),
        "no managed policy on the bucket"
    );
}

/// The resource a `!Ref`/`!GetAtt` (or its long form) names.
fn referenced(v: &Yaml) -> Option<String> {
    let (tag, inner) = tag_and_value(v)?;
    match tag.as_str() {
        "Ref" => inner.as_str().map(str::to_owned),
        "GetAtt" => inner
            .as_str()
            .map(|s| s.split('.').next().unwrap_or(s).to_owned())
            .or_else(|| inner.get(0)?.as_str().map(str::to_owned)),
        _ => None,
    }
}

/// Whether `statement` grants `service` every action of `actions`, with `aws:SourceAccount`
/// and `aws:SourceArn` conditions (the confused-deputy guard).
fn grants(statement: &Yaml, service: &str, actions: &[&str]) -> bool {
    let principal = &statement["Principal"]["Service"];
    let named = principal.as_str() == Some(service)
        || principal
            .as_sequence()
            .is_some_and(|s| s.iter().any(|p| p.as_str() == Some(service)));
    let listed: Vec<&str> = match &statement["Action"] {
        Yaml::String(a) => vec![a.as_str()],
        Yaml::Sequence(s) => s.iter().filter_map(Yaml::as_str).collect(),
        _ => Vec::new(),
    };
    let condition = format!("{:?}", statement["Condition"]);
    statement["Effect"].as_str() == Some("Allow")
        && named
        && actions.iter().all(|a| listed.contains(a))
        && condition.contains("aws:SourceAccount")
        && condition.contains("aws:SourceArn")
}

/// What keeps an AWS service from publishing to the topics it must publish to (SNS developer
/// guide, "Enable compatibility between event sources from AWS services and encrypted topics":
/// a customer-managed key whose policy allows the service `kms:GenerateDataKey*` and
/// `kms:Decrypt`; the topic policy allowing it `sns:Publish`). Every topic an alarm's action or
/// an SES event destination names is checked; an AWS-managed key (`alias/aws/...`) is a finding.
fn publishing_problems(t: &Template) -> Vec<String> {
    let resources = t.doc["Resources"].as_mapping().unwrap();
    let resource = |name: &str| -> Option<&Yaml> { t.doc["Resources"].get(name) };
    let mut publishers: BTreeSet<(String, &str)> = BTreeSet::new();
    for (_, r) in resources {
        match r["Type"].as_str() {
            Some("AWS::CloudWatch::Alarm") => {
                for key in ["AlarmActions", "OKActions", "InsufficientDataActions"] {
                    for action in r["Properties"][key].as_sequence().into_iter().flatten() {
                        if let Some(topic) = referenced(action) {
                            publishers.insert((topic, "cloudwatch.amazonaws.com"));
                        }
                    }
                }
            }
            Some("AWS::SES::ConfigurationSetEventDestination") => {
                let sns = &r["Properties"]["EventDestination"]["SnsDestination"]["TopicARN"];
                if let Some(topic) = referenced(sns) {
                    publishers.insert((topic, "ses.amazonaws.com"));
                }
            }
            _ => {}
        }
    }
    let mut problems = Vec::new();
    for (topic, service) in &publishers {
        let key_ref = &resource(topic).unwrap()["Properties"]["KmsMasterKeyId"];
        let key = referenced(key_ref)
            .filter(|k| resource(k).is_some_and(|r| r["Type"].as_str() == Some("AWS::KMS::Key")));
        let Some(key) = key else {
            problems.push(format!(
                "{topic}: {service} publishes to it, but its key {key_ref:?} is not a customer-managed key of the template (an AWS-managed key's policy cannot grant it)"
            ));
            continue;
        };
        let key = &resource(&key).unwrap()["Properties"];
        if key["EnableKeyRotation"].as_bool() != Some(true) {
            problems.push(format!("{topic}: its key does not rotate"));
        }
        let key_grants = key["KeyPolicy"]["Statement"]
            .as_sequence()
            .into_iter()
            .flatten()
            .any(|s| grants(s, service, &["kms:GenerateDataKey*", "kms:Decrypt"]));
        if !key_grants {
            problems.push(format!(
                "{topic}: its key policy does not allow {service} kms:GenerateDataKey* and kms:Decrypt (scoped to the account and source)"
            ));
        }
        let topic_grants = resources.values().any(|r| {
            r["Type"].as_str() == Some("AWS::SNS::TopicPolicy")
                && r["Properties"]["Topics"]
                    .as_sequence()
                    .into_iter()
                    .flatten()
                    .any(|t| referenced(t).as_deref() == Some(topic.as_str()))
                && r["Properties"]["PolicyDocument"]["Statement"]
                    .as_sequence()
                    .into_iter()
                    .flatten()
                    .any(|s| grants(s, service, &["sns:Publish"]))
        });
        if !topic_grants {
            problems.push(format!(
                "{topic}: no topic policy allows {service} sns:Publish (scoped to the account and source)"
            ));
        }
    }
    if publishers.is_empty() {
        problems.push("no topic an alarm or SES publishes to was found".into());
    }
    problems
}

#[test]
fn topics_that_alarms_and_ses_publish_to_use_a_key_and_policy_that_let_them() {
    let text = std::fs::read_to_string(repo().join("infra/template.yaml")).unwrap();
    let problems = publishing_problems(&Template::parse(&text));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Each way of breaking it is found: the AWS-managed key, a key policy without the service,
    // a topic policy without it.
    let managed = text.replacen(
        "KmsMasterKeyId: !Ref NotificationsKey",
        "KmsMasterKeyId: alias/aws/sns",
        1,
    );
    let found = publishing_problems(&Template::parse(&managed));
    assert!(
        found
            .iter()
            .any(|p| p.contains("not a customer-managed key")),
        "{found:?}"
    );
    let no_key_grant = text.replacen(
        "Principal: { Service: cloudwatch.amazonaws.com }\n            Action: [kms:GenerateDataKey*, kms:Decrypt]",
        "Principal: { Service: cloudwatch.amazonaws.com }\n            Action: [kms:Decrypt]",
        1,
    );
    assert_ne!(no_key_grant, text);
    let found = publishing_problems(&Template::parse(&no_key_grant));
    assert!(found.iter().any(|p| p.contains("key policy")), "{found:?}");
    let no_topic_grant = text.replacen("Action: sns:Publish", "Action: sns:Subscribe", 1);
    let found = publishing_problems(&Template::parse(&no_topic_grant));
    assert!(
        found.iter().any(|p| p.contains("topic policy")),
        "{found:?}"
    );
}

/// Every function writes to a log group of the template that expires (CloudWatch Logs keeps a
/// group Lambda creates itself for ever): named as Lambda names it (`/aws/lambda/<name>`), its
/// retention the `LogRetentionDays` parameter, created before the function (`DependsOn`), so no
/// invocation can create it first.
#[test]
fn every_function_logs_to_a_group_that_expires() {
    let t = Template::load();
    let resources = t.doc["Resources"].as_mapping().unwrap();
    let mut functions = 0;
    for (name, r) in resources {
        if r["Type"].as_str() != Some("AWS::Serverless::Function") {
            continue;
        }
        functions += 1;
        let name = name.as_str().unwrap();
        let function_name = r["Properties"]["FunctionName"].as_str().unwrap();
        let depends: Vec<&str> = match &r["DependsOn"] {
            Yaml::String(d) => vec![d.as_str()],
            Yaml::Sequence(s) => s.iter().filter_map(Yaml::as_str).collect(),
            _ => Vec::new(),
        };
        let group = depends
            .iter()
            .filter_map(|d| t.doc["Resources"].get(*d))
            .find(|g| g["Type"].as_str() == Some("AWS::Logs::LogGroup"))
            .unwrap_or_else(|| panic!("{name} does not depend on a log group"));
        assert_eq!(
            group["Properties"]["LogGroupName"].as_str(),
            Some(format!("/aws/lambda/{function_name}").as_str()),
            "{name}"
        );
        let (tag, days) = tag_and_value(&group["Properties"]["RetentionInDays"]).unwrap();
        assert_eq!(
            (tag.as_str(), days.as_str()),
            ("Ref", Some("LogRetentionDays")),
            "{name}"
        );
    }
    assert_eq!(functions, 5);
    assert_eq!(
        t.parameter_default("LogRetentionDays").as_deref(),
        Some("30")
    );
}

#[test]
fn cargo_lambda_metadata_matches_the_template() {
    let template = Template::load();
    let crates = workspace_crates();
    let functions = template.functions();
    assert!(
        functions.len() >= 3,
        "expected the template's functions, found {functions:?}"
    );
    let problems = disagreements(&template, &crates);
    assert!(
        problems.is_empty(),
        "infra/template.yaml and the functions' [package.metadata.lambda.*] disagree:\n  {}",
        problems.join("\n  ")
    );
}

/// The check itself: each kind of disagreement is reported.
#[test]
fn the_consistency_check_reports_each_kind_of_disagreement() {
    let template = Template::parse(
        r#"
Parameters:
  Timeout: { Type: Number, Default: 60 }
  Providers: { Type: String, Default: ses }
  Policy: { Type: String, Default: "" }
Conditions:
  HasPolicy: !Not [!Equals [!Ref Policy, ""]]
Globals:
  Function:
    Runtime: provided.al2023
    Architectures: [arm64]
    Handler: bootstrap
    MemorySize: 128
    Tracing: Active
    Tags: { project: courier }
    Environment: { Variables: { AWS_LAMBDA_LOG_FORMAT: JSON } }
Resources:
  Queue: { Type: AWS::SQS::Queue }
  Machine: { Type: AWS::Serverless::StateMachine }
  Fn:
    Type: AWS::Serverless::Function
    Metadata: { BuildMethod: rust-cargolambda, BuildProperties: { Binary: courier-x } }
    Properties:
      FunctionName: courier-x
      Timeout: !Ref Timeout
      Environment:
        Variables:
          COURIER_QUEUE_URL: !Ref Queue
          COURIER_MACHINE: !GetAtt Machine.Arn
          COURIER_PROVIDERS: !Ref Providers
          COURIER_POLICY: !If [HasPolicy, !Ref Policy, !Ref AWS::NoValue]
          COURIER_NEW: "1"
"#,
    );
    let krate = |lambda: Json| Crate {
        package: "courier-x".into(),
        manifest: "/w/functions/x/Cargo.toml".into(),
        bins: vec!["courier-x".into()],
        lambda,
    };
    let good = serde_json::json!({
        "build": { "arm64": true },
        "deploy": { "memory": 128, "timeout": 60, "tracing": "active", "tags": { "project": "courier" },
                    "env": { "AWS_LAMBDA_LOG_FORMAT": "JSON", "COURIER_QUEUE_URL": "${Queue}",
                             "COURIER_MACHINE": "${Machine.Arn}", "COURIER_PROVIDERS": "ses", "COURIER_NEW": "1" } }
    });
    assert_eq!(
        disagreements(&template, &[krate(good.clone())]),
        Vec::<String>::new()
    );

    let mut bad = good.clone();
    bad["build"]["arm64"] = false.into();
    bad["deploy"]["memory"] = 256.into();
    bad["deploy"]["timeout"] = 30.into();
    bad["deploy"]["tracing"] = "PassThrough".into();
    bad["deploy"]["tags"] = serde_json::json!({ "project": "other" });
    let env = bad["deploy"]["env"].as_object_mut().unwrap();
    env.remove("COURIER_NEW");
    env.insert("COURIER_QUEUE_URL".into(), "${Machine}".into());
    env.insert("COURIER_PROVIDERS".into(), "smtp".into());
    env.insert("COURIER_STALE".into(), "x".into());
    let problems = disagreements(&template, &[krate(bad)]).join("\n");
    for expected in [
        "memory",
        "timeout",
        "architecture",
        "tracing",
        "tags",
        "env COURIER_NEW is in the template, not in Cargo.toml",
        "env COURIER_QUEUE_URL",
        "env COURIER_PROVIDERS",
        "env COURIER_STALE is in Cargo.toml, not in the template",
    ] {
        assert!(
            problems.contains(expected),
            "not reported: {expected}\n{problems}"
        );
    }
    assert!(!problems.contains("COURIER_POLICY"), "{problems}");

    // A function crate the template does not build, and a crate without deploy metadata.
    let mut other = krate(serde_json::json!(null));
    other.package = "courier-y".into();
    other.bins = vec!["courier-y".into()];
    other.manifest = "/w/functions/y/Cargo.toml".into();
    let problems = disagreements(&template, &[krate(serde_json::json!(null)), other]).join("\n");
    assert!(
        problems.contains("courier-x has no [package.metadata.lambda.deploy]"),
        "{problems}"
    );
    assert!(
        problems.contains("courier-y: a function crate that no template function builds"),
        "{problems}"
    );
}

// ------------------------------------------------------------------------------ deploying

/// cargo-lambda from PATH or from the venv `scripts/install-deps.sh lambda` makes.
fn cargo_lambda_path() -> String {
    let cache = std::env::var("COURIER_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo().join(".cache"));
    let venv = cache.join("venv-lambda/bin");
    assert!(
        venv.join("cargo-lambda").exists(),
        "{} is missing: run `scripts/install-deps.sh lambda` (make test does)",
        venv.display()
    );
    format!(
        "{}:{}",
        venv.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Where the arm64 zips are: `COURIER_LAMBDA_DIR` (`make it-localstack` sets it to the
/// `lambda-test` zips of `make lambda-zips-test`), else the release zips of `make lambda-zips`.
fn lambda_dir() -> PathBuf {
    match std::env::var_os("COURIER_LAMBDA_DIR") {
        Some(dir) => repo().join(dir),
        None => target_dir().join("lambda"),
    }
}

/// The arm64 zip of `bin` in [`lambda_dir`].
fn zip_of(bin: &str) -> PathBuf {
    let zip = lambda_dir().join(bin).join("bootstrap.zip");
    assert!(
        zip.exists(),
        "{} is missing: run `make lambda-zips-test` (make it-localstack does) or `make lambda-zips`",
        zip.display()
    );
    zip
}

fn deploy(name: &str, endpoint: &str, role: &str, extra: &[String]) {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(repo())
        .env("PATH", cargo_lambda_path())
        .args(["lambda", "deploy", name, "--endpoint-url", endpoint])
        .arg("--lambda-dir")
        .arg(lambda_dir())
        .args(["--region", "us-east-1", "--iam-role", role])
        .args(["--output-format", "json"])
        .args(extra)
        .output()
        .expect("cargo lambda deploy");
    assert!(
        out.status.success(),
        "cargo lambda deploy {name} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Lambda's GetFunctionConfiguration (REST: GET /2015-03-31/functions/NAME/configuration).
/// The emulators do not check signatures; the credential scope tells them the region.
fn get_function_configuration(endpoint: &str, name: &str) -> Json {
    let out = Command::new("curl")
        .args(["-sS", "--fail-with-body", "-H"])
        .arg("Authorization: AWS4-HMAC-SHA256 Credential=test/20261130/us-east-1/lambda/aws4_request, SignedHeaders=host, Signature=0")
        .arg(format!(
            "{}/2015-03-31/functions/{name}/configuration",
            endpoint.trim_end_matches('/')
        ))
        .output()
        .expect("curl");
    assert!(
        out.status.success(),
        "GetFunctionConfiguration {name}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Creates the functions' execution role on the emulator (IAM query API, unsigned).
fn create_role(endpoint: &str, name: &str) -> String {
    let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"lambda.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
    let out = Command::new("curl")
        .args(["-sS", "-H"])
        .arg("Authorization: AWS4-HMAC-SHA256 Credential=test/20261130/us-east-1/iam/aws4_request, SignedHeaders=host, Signature=0")
        .args(["--data-urlencode", "Action=CreateRole"])
        .args(["--data-urlencode", "Version=2010-05-08"])
        .args(["--data-urlencode", &format!("RoleName={name}")])
        .args([
            "--data-urlencode",
            &format!("AssumeRolePolicyDocument={trust}"),
        ])
        .arg(format!("{}/", endpoint.trim_end_matches('/')))
        .output()
        .expect("curl");
    let body = String::from_utf8_lossy(&out.stdout).to_string();
    body.split("<Arn>")
        .nth(1)
        .and_then(|s| s.split("</Arn>").next())
        .map(String::from)
        .unwrap_or_else(|| panic!("CreateRole {name}: {body}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn cargo_lambda_deploys_every_function_as_the_template_configures_it() {
    let endpoint = courier_integration::require_env("AWS_ENDPOINT_URL");
    let template = Template::load();
    let crates = workspace_crates();
    let role = create_role(&endpoint, &courier_integration::unique("courier-fn"));

    for f in template.functions() {
        let bin = f.binary.clone().expect("the consistency test names it");
        let krate = crates.iter().find(|c| c.bins.contains(&bin)).unwrap();
        let expected_env = metadata_env(&krate.lambda["deploy"]);
        zip_of(&bin);
        deploy(&bin, &endpoint, &role, &[]);
        let config = get_function_configuration(&endpoint, &bin);
        let context = format!("{bin}: {config:#}");
        assert_eq!(config["FunctionName"], bin, "{context}");
        assert_eq!(config["Runtime"], "provided.al2023", "{context}");
        assert_eq!(config["Handler"], "bootstrap", "{context}");
        assert_eq!(
            config["Architectures"],
            serde_json::json!(f.architectures),
            "{context}"
        );
        assert_eq!(config["MemorySize"].as_i64(), f.memory, "{context}");
        assert_eq!(config["Timeout"].as_i64(), f.timeout, "{context}");
        assert_eq!(config["Role"], role.as_str(), "{context}");
        assert!(
            config["CodeSize"].as_i64().unwrap_or(0) > 1_000_000,
            "{context}"
        );
        let deployed: BTreeMap<String, String> = config["Environment"]["Variables"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(deployed, expected_env, "{context}");
        let required: BTreeSet<&String> = f
            .env
            .iter()
            .filter(|(_, v)| !matches!(v, EnvValue::Optional(_)))
            .map(|(k, _)| k)
            .collect();
        let names: BTreeSet<&String> = deployed.keys().collect();
        assert!(
            names.is_superset(&required) && names.iter().all(|k| f.env.contains_key(*k)),
            "deployed variables {names:?} vs the template's {:?}",
            f.env.keys().collect::<Vec<_>>()
        );
        if let Some(mode) = config["TracingConfig"]["Mode"].as_str() {
            assert_eq!(Some(mode), f.tracing.as_deref(), "{context}");
        }
    }

    // A real deploy: the stack's values with --env-var replace the metadata's placeholders.
    // Deployed as a new function from the same binary and metadata (`--binary-name`): LocalStack
    // without Docker refuses to update a function whose first version never started.
    let stack = courier_integration::Stack::create(&["ses"]).await;
    let mut real = vec![("AWS_LAMBDA_LOG_FORMAT", "JSON".to_string())];
    real.extend(stack.resources.resource_env());
    real.extend([
        ("COURIER_PROVIDERS", "ses".to_string()),
        ("COURIER_SES_CONFIGURATION_SET", "courier".to_string()),
    ]);
    let name = courier_integration::unique("courier-send");
    let mut args = vec!["--binary-name".to_string(), "courier-send".to_string()];
    for (k, v) in &real {
        args.push("--env-var".to_string());
        args.push(format!("{k}={v}"));
    }
    deploy(&name, &endpoint, &role, &args);
    let config = get_function_configuration(&endpoint, &name);
    let deployed = &config["Environment"]["Variables"];
    for (k, v) in &real {
        assert_eq!(deployed[k], v.as_str(), "{k}: {config:#}");
    }
    assert_eq!(
        deployed.as_object().map(|m| m.len()),
        Some(real.len()),
        "{config:#}"
    );
    assert_eq!(config["MemorySize"], 128, "{config:#}");
}

/// The statements of a function's inline policies (`Policies: - Statement: ...`).
fn inline_statements<'a>(t: &'a Template, function: &str) -> Vec<&'a Yaml> {
    t.doc["Resources"][function]["Properties"]["Policies"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|p| p.get("Statement")?.as_sequence())
        .flatten()
        .collect()
}

/// A statement's actions (one or a list).
fn actions(statement: &Yaml) -> Vec<String> {
    match &statement["Action"] {
        Yaml::String(a) => vec![a.clone()],
        Yaml::Sequence(v) => v
            .iter()
            .filter_map(|a| a.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

/// SES sends are scoped to this account's identities in the stack's region and to the stack's
/// configuration set (never `*`), and, when `AllowedSenders` is set, to those identities
/// (`ses:FromAddress`); the quota that paces sends (`GetAccount`, which has no resource-level
/// permissions) is readable: the send function reads it at INIT when `SesMaxSendRate` is empty,
/// its default.
#[test]
fn ses_sends_are_scoped_and_the_quota_that_paces_them_is_readable() {
    let t = Template::load();
    let statements = inline_statements(&t, "SendFunction");
    let sends: Vec<&&Yaml> = statements
        .iter()
        .filter(|s| actions(s).iter().any(|a| a == "ses:SendEmail"))
        .collect();
    assert_eq!(sends.len(), 1);
    let resources: Vec<String> = sends[0]["Resource"]
        .as_sequence()
        .expect("a list of resources, not *")
        .iter()
        .map(|r| format!("{r:?}"))
        .collect();
    assert_eq!(resources.len(), 2, "{resources:?}");
    assert!(resources[0].contains(":identity/*") && resources[0].contains("${AWS::AccountId}"));
    assert!(resources[1].contains(":configuration-set/${SesConfigurationSet}"));
    assert!(
        statements
            .iter()
            .any(|s| actions(s) == ["ses:GetAccount"] && s["Resource"].as_str() == Some("*"))
    );
    assert_eq!(t.parameter_default("SesMaxSendRate").as_deref(), Some(""));

    // With AllowedSenders set, only from those identities (ses:FromAddress); empty, no
    // condition (every verified identity, as the parameter's Description says).
    let (tag, branches) = tag_and_value(&sends[0]["Condition"]).expect("Condition: !If");
    assert_eq!(tag, "If");
    let branches = branches.as_sequence().unwrap();
    assert_eq!(branches[0].as_str(), Some("HasAllowedSenders"));
    assert!(Template::is_no_value(&branches[2]), "{:?}", branches[2]);
    assert_eq!(
        t.doc["Conditions"]["HasAllowedSenders"],
        serde_norway::from_str::<Yaml>(r#"!Not [!Equals [!Ref AllowedSenders, ""]]"#).unwrap()
    );
    let condition = branches[1].as_mapping().unwrap();
    assert_eq!(condition.len(), 1, "one operator: {condition:?}");
    let keys = branches[1]["StringLike"].as_mapping().expect("StringLike");
    assert_eq!(keys.len(), 1, "one key: {keys:?}");
    let parameters = BTreeMap::from([("AllowedSenders", "news@x.example,y.example")]);
    let patterns: Vec<String> =
        evaluate(&branches[1]["StringLike"]["ses:FromAddress"], &parameters)
            .as_sequence()
            .expect("a list of patterns")
            .iter()
            .map(|p| p.as_str().unwrap().to_owned())
            .collect();
    assert_eq!(
        patterns,
        [
            "news@x.example",
            "y.example",
            "*@news@x.example",
            "*@y.example"
        ]
    );
    let allowed = |from: &str| patterns.iter().any(|p| string_like(p, from));
    for from in ["news@x.example", "a@y.example"] {
        assert!(allowed(from), "{from}");
    }
    // Another domain, another address of an address entry's domain, a subdomain (the stack's
    // own check takes none either), and another case (IAM compares case-sensitively; the
    // parameter's Description asks for lower case).
    for from in [
        "a@z.example",
        "other@x.example",
        "a@sub.y.example",
        "a@y.example.z.example",
        "News@x.example",
    ] {
        assert!(!allowed(from), "{from}");
    }
    let parameter = &t.doc["Parameters"]["AllowedSenders"];
    // CloudFormation cannot trim entries: " y.example" would match no address, so the
    // parameter refuses whitespace (and empty entries) before anything is created.
    assert_eq!(
        parameter["AllowedPattern"].as_str(),
        Some(r"^([^,\s]+(,[^,\s]+)*)?$")
    );
    let description = parameter["Description"].as_str().unwrap();
    for words in [
        "without spaces",
        "Empty (the default) allows every verified SES identity",
        "set it for production",
        "ses:FromAddress",
    ] {
        assert!(description.contains(words), "{words}: {description}");
    }
    assert_eq!(t.parameter_default("AllowedSenders").as_deref(), Some(""));
}

/// A string intrinsic as CloudFormation evaluates it for the given parameter values: `!Ref` of
/// a parameter, `!Sub` with a variable map, `!Join` and `!Split`.
fn evaluate(v: &Yaml, parameters: &BTreeMap<&str, &str>) -> Yaml {
    if let Yaml::Sequence(items) = v {
        return Yaml::Sequence(items.iter().map(|v| evaluate(v, parameters)).collect());
    }
    let Some((tag, inner)) = tag_and_value(v) else {
        return v.clone();
    };
    let text = |v: &Yaml| evaluate(v, parameters).as_str().unwrap().to_owned();
    let args = inner.as_sequence();
    match tag.as_str() {
        "Ref" => {
            let name = inner.as_str().unwrap();
            let value = parameters
                .get(name)
                .unwrap_or_else(|| panic!("parameter {name} not given"));
            Yaml::String((*value).to_owned())
        }
        "Split" => {
            let args = args.unwrap();
            let separator = args[0].as_str().unwrap();
            Yaml::Sequence(
                text(&args[1])
                    .split(separator)
                    .map(|p| Yaml::String(p.into()))
                    .collect(),
            )
        }
        "Join" => {
            let args = args.unwrap();
            let parts: Vec<String> = evaluate(&args[1], parameters)
                .as_sequence()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap().to_owned())
                .collect();
            Yaml::String(parts.join(args[0].as_str().unwrap()))
        }
        "Sub" => {
            let args = args.unwrap();
            let mut out = args[0].as_str().unwrap().to_owned();
            for (name, value) in args[1].as_mapping().unwrap() {
                out = out.replace(&format!("${{{}}}", name.as_str().unwrap()), &text(value));
            }
            assert!(!out.contains("${"), "unbound variable in {out}");
            Yaml::String(out)
        }
        other => panic!("intrinsic {other} not modelled"),
    }
}

/// IAM's `StringLike`: `*` any run of characters (none included), `?` any one, the rest
/// compared case-sensitively.
fn string_like(pattern: &str, value: &str) -> bool {
    fn from(p: &[char], v: &[char]) -> bool {
        match p.split_first() {
            None => v.is_empty(),
            Some(('*', rest)) => (0..=v.len()).any(|i| from(rest, &v[i..])),
            Some(('?', rest)) => !v.is_empty() && from(rest, &v[1..]),
            Some((c, rest)) => v.first() == Some(c) && from(rest, &v[1..]),
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let v: Vec<char> = value.chars().collect();
    from(&p, &v)
}

/// Outcome events (docs/outcomes.md): the bus is the stack's own; each function that writes
/// outcomes (send, events) or relays them (sweeper) finds it in `COURIER_OUTCOME_BUS` and may
/// `PutEvents` on that bus and nothing else (not `*`, not the account's default bus, where
/// other applications' rules would see Courier's events); no other function may publish. The
/// status table keeps the sparse, keys-only `by_outbox` index the sweeper queries, and only
/// the sweeper may query it besides the writers.
#[test]
fn outcome_events_go_to_the_stacks_own_bus_and_nowhere_else() {
    let t = Template::load();
    assert_eq!(
        t.doc["Resources"]["OutcomeBus"]["Type"].as_str(),
        Some("AWS::Events::EventBus")
    );
    let publishers = ["SendFunction", "EventsFunction", "SweeperFunction"];
    for (id, r) in t.doc["Resources"].as_mapping().unwrap() {
        let id = id.as_str().unwrap();
        if r["Type"].as_str() != Some("AWS::Serverless::Function") {
            continue;
        }
        let env = &r["Properties"]["Environment"]["Variables"]["COURIER_OUTCOME_BUS"];
        let puts: Vec<&Yaml> = inline_statements(&t, id)
            .into_iter()
            .filter(|s| actions(s).iter().any(|a| a.starts_with("events:")))
            .collect();
        if !publishers.contains(&id) {
            assert!(
                puts.is_empty() && env.is_null(),
                "{id} may not publish outcomes"
            );
            continue;
        }
        assert_eq!(referenced(env).as_deref(), Some("OutcomeBus"), "{id}");
        assert_eq!(puts.len(), 1, "{id}: one events statement");
        assert_eq!(actions(puts[0]), ["events:PutEvents"], "{id}");
        let resource = &puts[0]["Resource"];
        assert!(
            referenced(resource).as_deref() == Some("OutcomeBus")
                && format!("{resource:?}").contains("OutcomeBus.Arn"),
            "{id}: PutEvents on the bus's ARN only, found {resource:?}"
        );
    }
    let table = &t.doc["Resources"]["StatusTable"]["Properties"];
    let index = table["GlobalSecondaryIndexes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|i| i["IndexName"].as_str() == Some("by_outbox"))
        .expect("the status table's by_outbox index");
    assert_eq!(
        index["Projection"]["ProjectionType"].as_str(),
        Some("KEYS_ONLY")
    );
    let keys: Vec<(&str, &str)> = index["KeySchema"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["AttributeName"].as_str().unwrap(),
                k["KeyType"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(keys, [("outbox", "HASH"), ("outbox_at", "RANGE")]);
    let sweeper = format!("{:?}", inline_statements(&t, "SweeperFunction"));
    assert!(
        sweeper.contains("index/by_outbox"),
        "the sweeper queries the outbox"
    );
    for output in ["OutcomeBusName", "OutcomeBusArn"] {
        assert!(t.doc["Outputs"][output].is_mapping(), "{output}");
    }
}

/// The letter index expires: its TTL is on `expires_at`, which the two functions that index
/// letters (send and events) set from the archive's retention (`ArchiveRetentionDays`) plus a
/// margin, so an entry never outlives the retention policy nor expires before its archived copy.
#[test]
fn letter_index_entries_expire_after_the_archive_they_point_to() {
    let t = Template::load();
    let ttl = &t.doc["Resources"]["LetterIndexTable"]["Properties"]["TimeToLiveSpecification"];
    assert_eq!(ttl["AttributeName"].as_str(), Some("expires_at"));
    assert_eq!(ttl["Enabled"].as_bool(), Some(true));
    for function in ["SendFunction", "EventsFunction"] {
        let value = &t.doc["Resources"][function]["Properties"]["Environment"]["Variables"]["COURIER_ARCHIVE_RETENTION_DAYS"];
        assert_eq!(
            referenced(value).as_deref(),
            Some("ArchiveRetentionDays"),
            "{function}"
        );
    }
    let bucket_days = &t.doc["Resources"]["ArchiveBucket"]["Properties"]["LifecycleConfiguration"];
    assert!(
        format!("{bucket_days:?}").contains("ArchiveRetentionDays"),
        "the archive expires by the same parameter"
    );
}

/// The DynamoDB actions a function's role grants, listed explicitly (no SAM `DynamoDB*Policy`,
/// whose Crud variant brings DeleteItem and Scan): every action the adapters the functions use
/// call is granted, and none deletes or scans. Read from the adapters' sources, each SDK call
/// mapped to its IAM action (a transaction is checked per item: `Update`, `ConditionCheck`);
/// the calls only `courierctl` makes (removing or listing suppressions, searching letters) are
/// named, and no function calls those methods.
#[test]
fn functions_get_explicit_dynamodb_actions_and_none_deletes_or_scans() {
    let t = Template::load();
    let text = std::fs::read_to_string(repo().join("infra/template.yaml")).unwrap();
    assert!(
        !text.contains("DynamoDBCrudPolicy")
            && !text.contains("DynamoDBWritePolicy")
            && !text.contains("DynamoDBReadPolicy"),
        "SAM's DynamoDB policy templates grant more than the functions use"
    );
    // What the adapters call, and from which method.
    let calls = [
        ("get_item", "dynamodb:GetItem"),
        ("batch_get_item", "dynamodb:BatchGetItem"),
        ("query", "dynamodb:Query"),
        ("put_item", "dynamodb:PutItem"),
        ("update_item", "dynamodb:UpdateItem"),
        ("transact_write_items", "dynamodb:ConditionCheckItem"),
        ("delete_item", "dynamodb:DeleteItem"),
        ("scan", "dynamodb:Scan"),
        ("batch_write_item", "dynamodb:BatchWriteItem"),
    ];
    let cli_only = [
        ("delete_item", "remove"),
        ("delete_item", "remove_from_list"),
        ("scan", "list"),
        ("scan", "search"),
    ];
    let mut used = BTreeSet::new();
    // Every source file of the DynamoDB adapters, their submodules' included.
    let mut sources = vec![repo().join("shared/adapters/src/aws/letters.rs")];
    sources.extend(rust_files(&repo().join("shared/adapters/src/aws/dynamodb")));
    for path in sources {
        let source = std::fs::read_to_string(&path).unwrap();
        for (call, action) in calls {
            for (at, _) in source.match_indices(&format!(".{call}()")) {
                let method = source[..at]
                    .rfind("fn ")
                    .map(|f| {
                        source[f + 3..]
                            .split(|c: char| !c.is_alphanumeric() && c != '_')
                            .next()
                            .unwrap_or_default()
                    })
                    .unwrap_or_default();
                if cli_only.contains(&(call, method)) {
                    continue;
                }
                used.insert(action);
                if call == "transact_write_items" {
                    used.insert("dynamodb:UpdateItem");
                }
            }
        }
    }
    assert!(used.len() >= 6, "{used:?}");
    for function in [
        "SendFunction",
        "EventsFunction",
        "ArchiverFunction",
        "SweeperFunction",
        "UnsubscribeFunction",
    ] {
        let granted: BTreeSet<String> = inline_statements(&t, function)
            .into_iter()
            .flat_map(actions)
            .filter(|a| a.starts_with("dynamodb:"))
            .collect();
        for forbidden in [
            "dynamodb:DeleteItem",
            "dynamodb:Scan",
            "dynamodb:BatchWriteItem",
            "dynamodb:*",
        ] {
            assert!(
                !granted.contains(forbidden),
                "{function} grants {forbidden}"
            );
        }
        if function == "UnsubscribeFunction" {
            // Public behind its URL: it may only add suppression entries.
            assert_eq!(granted, BTreeSet::from(["dynamodb:PutItem".into()]));
            continue;
        }
        if function == "SweeperFunction" {
            // Narrower still: it queries two indexes, reads and updates what it finds.
            assert_eq!(
                granted,
                BTreeSet::from([
                    "dynamodb:GetItem".into(),
                    "dynamodb:Query".into(),
                    "dynamodb:UpdateItem".into()
                ])
            );
            continue;
        }
        for action in &used {
            assert!(granted.contains(*action), "{function} lacks {action}");
        }
    }
    // No function calls what only courierctl may.
    for crate_dir in [
        "functions/send/src",
        "functions/events/src",
        "functions/archiver/src",
        "functions/sweeper/src",
        "functions/unsubscribe/src",
    ] {
        let dir = repo().join(crate_dir);
        for path in rust_files(&dir) {
            // Unit tests (`tests.rs`, `tests/`) may use what a function may not.
            let relative = path.strip_prefix(&dir).unwrap();
            if relative.ends_with("tests.rs") || relative.starts_with("tests") {
                continue;
            }
            let source = std::fs::read_to_string(&path).unwrap();
            for call in [
                "suppression.remove(",
                "suppression.list(",
                ".search(",
                ".remove_from_list(",
            ] {
                assert!(!source.contains(call), "{} calls {call}", path.display());
            }
        }
    }
}

/// Every `.rs` file under `dir`, its submodule directories' included.
fn rust_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for path in std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()) {
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// SES checks that it may publish to the topic when the event destination is made: the
/// destination must come after the topic's policy (`DependsOn`), or the first deploy fails.
#[test]
fn the_ses_event_destination_waits_for_the_topic_policy() {
    let t = Template::load();
    let destination = &t.doc["Resources"]["SesEventDestination"];
    let depends: Vec<String> = match &destination["DependsOn"] {
        Yaml::String(s) => vec![s.clone()],
        Yaml::Sequence(v) => v
            .iter()
            .filter_map(|d| d.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    };
    assert!(
        depends.iter().any(|d| d == "SesEventsTopicPolicy"),
        "{depends:?}"
    );
    assert_eq!(
        referenced(&destination["Properties"]["EventDestination"]["SnsDestination"]["TopicARN"])
            .as_deref(),
        Some("SesEventsTopic")
    );
}

/// SMTP deploys from the template: the relay's host, port and TLS mode reach the send function
/// (no plaintext mode is offered), and its credentials come from one Secrets Manager secret the
/// function alone may read, never from a plain variable.
#[test]
fn smtp_is_configured_from_the_template_with_its_credentials_in_a_secret() {
    let t = Template::load();
    let send = &t.doc["Resources"]["SendFunction"]["Properties"];
    let env = &send["Environment"]["Variables"];
    for (variable, parameter) in [
        ("COURIER_SMTP_HOST", "SmtpHost"),
        ("COURIER_SMTP_PORT", "SmtpPort"),
        ("COURIER_SMTP_TLS", "SmtpTls"),
        (
            "COURIER_SMTP_CREDENTIALS_SECRET",
            "SmtpCredentialsSecretArn",
        ),
    ] {
        assert!(
            format!("{:?}", env[variable]).contains(parameter),
            "{variable}: {:?}",
            env[variable]
        );
    }
    for plain in ["COURIER_SMTP_USERNAME", "COURIER_SMTP_PASSWORD"] {
        assert!(
            env.get(plain).is_none(),
            "{plain} must not be a plain variable"
        );
    }
    let tls: Vec<&str> = t.doc["Parameters"]["SmtpTls"]["AllowedValues"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(Yaml::as_str)
        .collect();
    assert_eq!(tls, ["starttls", "tls"]);
    let grants = format!("{:?}", send["Policies"]);
    assert!(grants.contains("secretsmanager:GetSecretValue"));
    assert!(grants.contains("HasSmtpSecret") && grants.contains("SmtpCredentialsSecretArn"));
    assert!(!grants.contains("secretsmanager:*"));
}

/// A stack told to send through SMTP without a relay is refused when it is created or updated
/// (a template Rule), not at the send function's INIT.
#[test]
fn smtp_without_a_relay_is_refused_at_deploy_time() {
    let t = Template::load();
    let rule = &t.doc["Rules"]["SmtpNeedsAHost"];
    let condition = format!("{:?}", rule["RuleCondition"]);
    for providers in ["smtp", "ses,smtp", "smtp,ses"] {
        assert!(
            condition.contains(&format!("\"{providers}\"")),
            "{condition}"
        );
    }
    let allowed: Vec<&str> = t.doc["Parameters"]["Providers"]["AllowedValues"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(Yaml::as_str)
        .filter(|p| p.contains("smtp"))
        .collect();
    assert_eq!(
        allowed.len(),
        3,
        "every value naming smtp is in the rule: {allowed:?}"
    );
    let assertion = format!("{:?}", rule["Assertions"]);
    assert!(
        assertion.contains("SmtpHost") && assertion.contains("Not"),
        "{assertion}"
    );
}

/// Forgery pages someone: a refused SES event (forged, misrouted, or a signature that does not
/// verify: the events function's `EventsRefused`) and a retry envelope whose seal does not verify
/// (the send function's `EnvelopesUnverified`) each have an alarm on the alarm topic, firing on
/// one.
#[test]
fn a_refused_event_or_an_unsealed_envelope_raises_an_alarm() {
    let t = Template::load();
    for (alarm, metric, function, emitter) in [
        (
            "EventsRefusedAlarm",
            "EventsRefused",
            "events",
            "functions/events/src/lib.rs",
        ),
        (
            "EnvelopesUnverifiedAlarm",
            "EnvelopesUnverified",
            "send",
            "functions/send/src/lib.rs",
        ),
    ] {
        let alarm = &t.doc["Resources"][alarm]["Properties"];
        assert_eq!(alarm["Namespace"].as_str(), Some("Courier"));
        assert_eq!(alarm["MetricName"].as_str(), Some(metric));
        assert!(format!("{:?}", alarm["Dimensions"]).contains(function));
        assert_eq!(alarm["Threshold"].as_i64(), Some(0));
        assert_eq!(
            alarm["ComparisonOperator"].as_str(),
            Some("GreaterThanThreshold")
        );
        let actions = alarm["AlarmActions"].as_sequence().unwrap();
        assert!(
            actions
                .iter()
                .any(|a| referenced(a).as_deref() == Some("AlarmTopic"))
        );
        // The metric is what the function emits (its source names it).
        let source = std::fs::read_to_string(repo().join(emitter)).unwrap();
        assert!(source.contains(&format!("\"{metric}\"")), "{metric}");
    }
}

/// The unsubscribe function is public (RFC 8058: mailbox providers POST without credentials)
/// and so is narrow: a function URL with AuthType NONE, capped concurrency, one table action and
/// one secret; the send function links to that URL and signs with that secret.
#[test]
fn the_unsubscribe_function_is_public_only_through_its_url_and_can_only_add_suppressions() {
    let t = Template::load();
    let function = &t.doc["Resources"]["UnsubscribeFunction"]["Properties"];
    assert_eq!(
        function["FunctionUrlConfig"]["AuthType"].as_str(),
        Some("NONE")
    );
    assert!(
        function["ReservedConcurrentExecutions"]
            .as_i64()
            .is_some_and(|n| (1..=50).contains(&n)),
        "a public endpoint's concurrency is capped"
    );
    let statements = inline_statements(&t, "UnsubscribeFunction");
    let all: BTreeSet<String> = statements.iter().copied().flat_map(actions).collect();
    assert_eq!(
        all,
        BTreeSet::from([
            "dynamodb:PutItem".into(),
            "secretsmanager:GetSecretValue".into()
        ])
    );
    for statement in &statements {
        let resource = format!("{:?}", statement["Resource"]);
        assert!(
            resource.contains("SuppressionTable") || resource.contains("UnsubscribeKeySecret"),
            "{resource}"
        );
        assert!(!resource.contains('*'), "{resource}");
    }
    // The send function links to the URL and may read the signing key.
    let send_env = &t.doc["Resources"]["SendFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(
        format!("{:?}", send_env["COURIER_UNSUBSCRIBE_URL"]),
        format!(
            "{:?}",
            serde_norway::from_str::<Yaml>("!GetAtt UnsubscribeFunctionUrl.FunctionUrl").unwrap()
        )
    );
    assert!(
        inline_statements(&t, "SendFunction")
            .iter()
            .any(|s| format!("{:?}", s["Resource"]).contains("UnsubscribeKeySecret")),
        "the send function reads the unsubscribe key"
    );
    // No other function has a URL.
    for f in [
        "SendFunction",
        "EventsFunction",
        "ArchiverFunction",
        "SweeperFunction",
    ] {
        assert!(
            t.doc["Resources"][f]["Properties"]
                .get("FunctionUrlConfig")
                .is_none(),
            "{f} has a function URL"
        );
    }
}

/// The queues a resource's `SQSSendMessagePolicy` templates let it send to.
fn sqs_send_targets(t: &Template, resource: &str) -> BTreeSet<String> {
    t.doc["Resources"][resource]["Properties"]["Policies"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|p| referenced(&p.get("SQSSendMessagePolicy")?["QueueName"]))
        .collect()
}

/// The retry lane's own concurrency: every copy that waits goes to the retry queue, polled by
/// its own event source capped at `RetryConcurrency`, so a retry backlog never holds the send
/// queue's `SendConcurrency` instances (docs/architecture.md, Retry lane). `MaximumConcurrency`
/// takes 2..=1000 (Lambda API reference, `ScalingConfig`). Event source mappings do not account
/// for reserved concurrency and take messages the function is then throttled on (AWS knowledge
/// center, "lambda-sqs-scaling"); CloudFormation cannot add the two sources' caps into one
/// reservation, so the send function reserves none.
#[test]
fn copies_that_wait_have_their_own_queue_event_source_and_concurrency() {
    let t = Template::load();
    let r = &t.doc["Resources"];
    let queue = |id: &str| &r[id]["Properties"];
    // GIVEN the retry queue: the send queue's settings (redrive included), its own name
    for key in [
        "VisibilityTimeout",
        "MessageRetentionPeriod",
        "MaximumMessageSize",
        "SqsManagedSseEnabled",
        "RedrivePolicy",
    ] {
        assert_eq!(queue("RetryQueue")[key], queue("SendQueue")[key], "{key}");
    }
    assert!(format!("{:?}", queue("RetryQueue")["QueueName"]).contains("courier-retry-${Id}"));
    // AND the redrive DLQ takes redrives from both queues
    let allowed = format!(
        "{:?}",
        queue("RedriveDeadLetterQueue")["RedriveAllowPolicy"]["sourceQueueArns"]
    );
    assert!(allowed.contains("courier-send-${Id}") && allowed.contains("courier-retry-${Id}"));
    // THEN the send function has one event source per queue, each with its own cap
    let events = &r["SendFunction"]["Properties"]["Events"];
    let source = |name: &str| &events[name]["Properties"];
    for (name, queue, cap) in [
        ("Jobs", "SendQueue", "SendConcurrency"),
        ("Retries", "RetryQueue", "RetryConcurrency"),
    ] {
        assert_eq!(events[name]["Type"].as_str(), Some("SQS"), "{name}");
        assert_eq!(referenced(&source(name)["Queue"]).as_deref(), Some(queue));
        assert_eq!(
            referenced(&source(name)["ScalingConfig"]["MaximumConcurrency"]).as_deref(),
            Some(cap)
        );
        assert_eq!(source(name)["BatchSize"].as_i64(), Some(10), "{name}");
        assert_eq!(
            source(name)["FunctionResponseTypes"][0].as_str(),
            Some("ReportBatchItemFailures"),
            "{name}"
        );
        let parameter = &t.doc["Parameters"][cap];
        assert!(parameter["MinValue"].as_i64() >= Some(2), "{cap}");
        assert!(
            parameter["MaxValue"].as_i64().is_some_and(|m| m <= 1000),
            "{cap}"
        );
    }
    assert!(
        r["SendFunction"]["Properties"]
            .get("ReservedConcurrentExecutions")
            .is_none()
    );
    // AND both functions put copies on the retry queue, never on the send queue (fresh mail's)
    let functions = t.functions();
    for id in ["SendFunction", "EventsFunction"] {
        let f = functions.iter().find(|f| f.logical_id == id).unwrap();
        assert_eq!(
            f.env.get("COURIER_RETRY_QUEUE_URL"),
            Some(&EnvValue::Resource("RetryQueue".into())),
            "{id}"
        );
        let targets = sqs_send_targets(&t, id);
        assert!(targets.contains("RetryQueue"), "{id}: {targets:?}");
        assert!(!targets.contains("SendQueue"), "{id}: {targets:?}");
    }
    // AND the delay state machine may put them back on it (and on the send queue, for waits
    // started before an upgrade added the retry queue)
    assert_eq!(
        sqs_send_targets(&t, "DelayStateMachine"),
        BTreeSet::from(["RetryQueue".to_owned(), "SendQueue".to_owned()])
    );
    // AND the backlog alarm reads both queues and its condition adds them up
    let metrics = &r["BacklogGrowingAlarm"]["Properties"]["Metrics"];
    let queue_of = |id: &str| {
        let metric = metrics
            .as_sequence()
            .unwrap()
            .iter()
            .find(|m| m["Id"].as_str() == Some(id))
            .unwrap();
        referenced(&metric["MetricStat"]["Metric"]["Dimensions"][0]["Value"])
    };
    assert_eq!(queue_of("fresh").as_deref(), Some("SendQueue"));
    assert_eq!(queue_of("retries").as_deref(), Some("RetryQueue"));
    let stalling = format!("{:?}", metrics[3]["Expression"]);
    assert!(
        stalling.contains("FILL(fresh, 0) + FILL(retries, 0) >")
            && stalling.contains("DIFF(FILL(fresh, 0) + FILL(retries, 0)) > 0"),
        "{stalling}"
    );
}

/// A delay state machine execution that fails, times out or is aborted takes its copy with it
/// and leaves the job `deferred`: an alarm on Step Functions' own per-state-machine metrics
/// (namespace `AWS/States`, dimension `StateMachineArn`: "Monitoring Step Functions metrics
/// using Amazon CloudWatch") tells the alarm topic on the first one.
#[test]
fn a_delay_that_never_puts_its_copy_back_raises_an_alarm() {
    let t = Template::load();
    let alarm = &t.doc["Resources"]["DelayExecutionsFailedAlarm"]["Properties"];
    let metrics = alarm["Metrics"].as_sequence().unwrap();
    let mut read = BTreeSet::new();
    for m in metrics.iter().filter(|m| m.get("MetricStat").is_some()) {
        let metric = &m["MetricStat"]["Metric"];
        assert_eq!(metric["Namespace"].as_str(), Some("AWS/States"));
        assert_eq!(
            metric["Dimensions"][0]["Name"].as_str(),
            Some("StateMachineArn")
        );
        assert_eq!(
            referenced(&metric["Dimensions"][0]["Value"]).as_deref(),
            Some("DelayStateMachine")
        );
        assert_eq!(m["ReturnData"].as_bool(), Some(false));
        read.insert((
            m["Id"].as_str().unwrap().to_owned(),
            metric["MetricName"].as_str().unwrap().to_owned(),
        ));
    }
    let names: BTreeSet<&str> = read.iter().map(|(_, name)| name.as_str()).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "ExecutionsAborted",
            "ExecutionsFailed",
            "ExecutionsTimedOut"
        ])
    );
    // The one series returned adds all three up; one is enough to fire.
    let returned: Vec<&Yaml> = metrics
        .iter()
        .filter(|m| m["ReturnData"].as_bool() == Some(true))
        .collect();
    assert_eq!(returned.len(), 1);
    let expression = returned[0]["Expression"].as_str().unwrap();
    for (id, _) in &read {
        assert!(
            expression.contains(&format!("FILL({id}, 0)")),
            "{expression}"
        );
    }
    fires_on_the_first_to_the_alarm_topic(alarm);
    let runbook = std::fs::read_to_string(repo().join("docs/runbook.md")).unwrap();
    assert!(runbook.contains("| `DelayExecutionsFailedAlarm` |"));
}

/// An alarm that fires on the first occurrence (above 0) and tells the alarm topic.
fn fires_on_the_first_to_the_alarm_topic(alarm: &Yaml) {
    assert_eq!(alarm["Threshold"].as_i64(), Some(0));
    assert_eq!(
        alarm["ComparisonOperator"].as_str(),
        Some("GreaterThanThreshold")
    );
    assert!(
        alarm["AlarmActions"]
            .as_sequence()
            .unwrap()
            .iter()
            .any(|a| referenced(a).as_deref() == Some("AlarmTopic"))
    );
}

/// A `deferred` or `unknown` job whose copy never comes back (a purged or deleted queue, past
/// the queue's retention, a delay execution that failed) is flagged by the sweeper
/// `SweepCopyGrace` past its due time (`SweptCopyOverdue`, namespace `Courier`, dimension
/// `Function`: the EMF the sweeper prints), and the first one tells the alarm topic.
#[test]
fn a_waiting_job_whose_copy_never_comes_back_raises_an_alarm() {
    let t = Template::load();
    let alarm = &t.doc["Resources"]["SweptCopyOverdueAlarm"]["Properties"];
    assert_eq!(alarm["Namespace"].as_str(), Some("Courier"));
    assert_eq!(alarm["MetricName"].as_str(), Some("SweptCopyOverdue"));
    assert_eq!(alarm["Dimensions"][0]["Name"].as_str(), Some("Function"));
    assert_eq!(alarm["Dimensions"][0]["Value"].as_str(), Some("sweeper"));
    assert_eq!(alarm["Statistic"].as_str(), Some("Sum"));
    fires_on_the_first_to_the_alarm_topic(alarm);
    // The metric is the one the sweeper emits.
    let report = courier_sweeper::SweepReport {
        copy_overdue: 1,
        ..Default::default()
    };
    let emf = report.to_emf(0);
    assert_eq!(emf["SweptCopyOverdue"], 1);
    assert_eq!(emf["Function"], "sweeper");
    // The grace reaches the sweeper from its parameter, and its default parses as the sweeper
    // parses it at INIT.
    let env = &t.doc["Resources"]["SweeperFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(
        referenced(&env["COURIER_SWEEP_COPY_GRACE"]).as_deref(),
        Some("SweepCopyGrace")
    );
    let default = scalar(&t.doc["Parameters"]["SweepCopyGrace"]["Default"]).unwrap();
    let settings = courier_sweeper::Settings::from_lookup(|name| match name {
        "COURIER_STATUS_TABLE" => Some("status".into()),
        "COURIER_SWEEP_COPY_GRACE" => Some(default.clone()),
        _ => None,
    })
    .unwrap();
    assert_eq!(settings.copy_grace, chrono::Duration::hours(6));
    let runbook = std::fs::read_to_string(repo().join("docs/runbook.md")).unwrap();
    assert!(runbook.contains("| `SweptCopyOverdueAlarm` |"));
}
