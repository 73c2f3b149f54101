"""Offline deploy check: the whole of infra/template.yaml deployed as one CloudFormation stack on
moto, and every resource read back through its own service's API (`make deploy-offline`).

For each pass (PASSES: `sns`, the defaults with an alarm address; `eventbridge`, the other SES
event path with the SMTP relay and its secret, a send rate, the events replay role and allowed
senders), this:

1. checks the parameter values (AllowedValues, patterns, bounds) and the template's Rules, as
   CloudFormation does before it creates anything;
2. runs SAM's transform locally (infra/sam_local.py), each function's CodeUri a zip of its x86_64
   bootstrap (<bootstraps>/<binary>/bootstrap, the binary its Metadata.BuildProperties names)
   uploaded to a bucket on moto (once per run);
3. creates what moto's CloudFormation passes over (MOTO_CFN_SKIPS) through the services' own APIs
   from the transformed template's properties: what the stack refers to (the SES configuration
   set, the envelope-key secret, the outcome bus) before the stack, its name written into the stack's template in
   place of each reference; the rest (queue, topic and bucket policies, subscriptions, alarms,
   schedules, the SES event destination, the function URL) after it, in dependency order. What the
   stack refers to but needs the stack's own resources (the function URL: the send function's
   environment and an output carry it) is given to the stack as a placeholder (DEFERRED), and the
   real value set through the referring resource's API once it is made (RELINKERS);
4. creates one stack of everything else (the resources its conditions turn off included, for it
   to leave out), with the few rewrites moto needs to create what the template means
   (moto_workarounds, drop_novalue_items);
5. reads every resource back through its service (SQS, DynamoDB, S3, Lambda, IAM, KMS, SNS, Logs,
   EventBridge, CloudWatch, Scheduler, Step Functions, Secrets Manager, SES; a Lambda permission
   through its function's policy, found by its properties: NO_PHYSICAL_ID) and compares each
   property the template sets with what the service reports, the template's intrinsic functions
   (Ref, Fn::GetAtt, Fn::Sub, Fn::If, ...) resolved against those reads; then the stack's outputs.
   A property the template sets and no check compares fails the run, so a new one cannot slip
   through. What moto cannot show is reported as unchecked with the reason (PROPERTY_GAPS,
   UNCHECKABLE); what its CloudFormation drops but its API can set is set from the template's
   value and read back (COMPLETERS);
6. (first pass) self-checks: a live queue's retention and a function's variable changed, a
   mutated expectation, an uncompared property and a missing function must each be reported;
7. deletes what it made after the stack, the stack, what it made before it, and checks through
   each service that every resource is gone.

It prints one row per resource (logical id, type, created by, result) and exits 1 on any
mismatch, missing resource, leftover or error; 2 when it cannot start (no local endpoint, a
bootstrap missing). The emulator's limits found are in docs/deploying.md, "Offline deploy check".

Usage (moto running, AWS_ENDPOINT_URL pointing at it; `make deploy-offline` starts one):
    python infra/offline-deploy.py [--template infra/template.yaml] [--pass sns|eventbridge]...
        [--bootstraps DIR] [--keep]
"""

import argparse
import base64
import copy
import glob
import hashlib
import io
import json
import os
import re
import sys
import time
import traceback
import uuid
import zipfile
from urllib.parse import urlparse

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

sys.dont_write_bytecode = True  # no __pycache__ in infra/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sam_local import binary_of, read_template, sam_transform  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Resource types moto 5.2.5's CloudFormation has no model for (measured): it logs "No Moto
# CloudFormation support for <type>", passes over the resource and still reports CREATE_COMPLETE;
# a Ref to one resolves to nothing (a Lambda environment variable is dropped, `${X}` stays in a
# Fn::Sub). Each is created here through its own service's API instead, and read back. (An Output
# that GetAtts one fails the stack: moto 5.2.5's validate_outputs answers 500 on the missing
# resource.)
MOTO_CFN_SKIPS = {
    "AWS::CloudWatch::Alarm",
    "AWS::Events::EventBus",
    "AWS::Lambda::Url",
    "AWS::S3::BucketPolicy",
    "AWS::SES::ConfigurationSet",
    "AWS::SES::ConfigurationSetEventDestination",
    "AWS::SNS::Subscription",
    "AWS::SNS::TopicPolicy",
    "AWS::SQS::QueuePolicy",
    "AWS::Scheduler::Schedule",
    "AWS::SecretsManager::Secret",
}

# The passes: parameter values over the template's defaults.
PASSES = {
    # The defaults (SesEventsVia=sns), with an alarm address so the optional e-mail subscription
    # is made too.
    "sns": {"AlarmEmail": "alarms@courier.test"},
    # The other SES event path, and the conditional grants and variables the defaults leave out.
    "eventbridge": {
        "SesEventsVia": "eventbridge",
        "Providers": "ses,smtp",
        "SmtpHost": "smtp.courier.test",
        "SmtpCredentialsSecretArn": "arn:aws:secretsmanager:{region}:{account}:secret:courier-smtp-AbCdEf",
        "SesMaxSendRate": "14",
        "EventsReplayRoleArn": "arn:aws:iam::{account}:role/courier-replay",
        # The send policy's ses:FromAddress condition (Fn::If of Fn::Split of Fn::Sub) and
        # COURIER_ALLOWED_SENDERS, which the empty default leaves out.
        "AllowedSenders": "news@courier.test,courier.test",
    },
}

STACK_TIMEOUT = 120  # seconds moto may take to create or delete the stack


# ------------------------------------------------------------------------------- utilities
class Missing(Exception):
    """The service does not know the resource."""


class Stop(Exception):
    """The pass cannot go on (the reason is the message)."""


class Unresolved(Exception):
    """An intrinsic function refers to something not known (yet)."""


NOVALUE = object()  # AWS::NoValue: the key or list item is removed


def missing(error):
    """Missing for a service's "no such resource" answer; any other error as it is."""
    code = error.response.get("Error", {}).get("Code", "")
    if code == "404" or any(s in code for s in ("NotFound", "NoSuch", "DoesNotExist", "NonExistent")):
        return Missing(f"{code}: {error.response.get('Error', {}).get('Message', '')}")
    return error


def api(call, **kwargs):
    """A read-back call; an answer that says the resource is not there raises `missing`."""
    try:
        return call(**kwargs)
    except ClientError as e:
        raise missing(e)


def canon(value):
    """A value in a form where the template's and the service's spellings compare equal: numbers
    and numeric strings alike, booleans as "true"/"false", recursively."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(float(value)) if float(value) != int(value) else str(int(value))
    if isinstance(value, str):
        if re.fullmatch(r"-?\d+(\.\d+)?", value):
            return canon(float(value))
        if value in ("true", "false", "True", "False"):
            return value.lower()
        return value
    if isinstance(value, dict):
        return {k: canon(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canon(v) for v in value]
    return value


def short(value, limit=160):
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def as_json(text):
    return json.loads(text) if isinstance(text, str) else text


def listify(value):
    return value if isinstance(value, list) else [value]


def policy_canon(document):
    """A policy document (or its JSON text) with single values and one-item lists spelled alike
    (IAM, SQS, SNS and S3 return a policy as it was given; the template's and SAM's spellings
    differ)."""
    return _policy_canon(as_json(document))


def _policy_canon(document):
    if isinstance(document, dict):
        out = {}
        for key, value in document.items():
            if isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                out[key] = sorted(listify(value))  # "x" and ["x"] alike; order of actions, ARNs free
            else:
                out[key] = _policy_canon(value)
        return out
    if isinstance(document, list):
        return [_policy_canon(v) for v in document]
    return document


# ------------------------------------------------------------------------------- intrinsics
class Resolver:
    """The template's intrinsic functions, resolved against parameters, pseudo parameters and
    the values read back from the services (refs: logical id -> Ref value; atts: (logical id,
    attribute) -> Fn::GetAtt value)."""

    def __init__(self, template, parameters, pseudo):
        self.conditions_src = template.get("Conditions", {})
        self.parameters = parameters
        self.pseudo = pseudo
        self.refs = {}
        self.atts = {}
        self._conditions = {}

    def condition(self, name):
        if name not in self._conditions:
            self._conditions[name] = bool(self.evaluate(self.conditions_src[name]))
        return self._conditions[name]

    def evaluate(self, expr):
        """A condition expression."""
        (fn, arg), = expr.items()
        if fn == "Fn::Equals":
            return str(self.resolve(arg[0])) == str(self.resolve(arg[1]))
        if fn == "Fn::Not":
            return not self.evaluate(arg[0])
        if fn == "Fn::And":
            return all(self.evaluate(a) for a in arg)
        if fn == "Fn::Or":
            return any(self.evaluate(a) for a in arg)
        if fn == "Condition":
            return self.condition(arg)
        if fn == "Fn::Contains":  # (in Rules)
            return str(self.resolve(arg[1])) in [str(v) for v in self.resolve(arg[0])]
        raise Unresolved(f"condition function {fn}")

    def ref(self, name):
        if name == "AWS::NoValue":
            return NOVALUE
        if name in self.pseudo:
            return self.pseudo[name]
        if name in self.parameters:
            return self.parameters[name]
        if name in self.refs:
            return self.refs[name]
        raise Unresolved(f"Ref {name}")

    def getatt(self, logical, attribute):
        if (logical, attribute) in self.atts:
            return self.atts[(logical, attribute)]
        raise Unresolved(f"Fn::GetAtt {logical}.{attribute}")

    def sub(self, arg):
        text, names = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
        names = {k: self.resolve(v) for k, v in names.items()}

        def one(match):
            ref = match.group(1)
            if ref.startswith("!"):
                return "${" + ref[1:] + "}"
            if ref in names:
                return str(names[ref])
            if "." in ref and ref not in self.pseudo:
                return str(self.getatt(*ref.split(".", 1)))
            return str(self.ref(ref))

        return re.sub(r"\$\{([^}]+)\}", one, text)

    def resolve(self, value):
        if isinstance(value, list):
            items = [self.resolve(v) for v in value]
            return [v for v in items if v is not NOVALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (fn, arg), = value.items()
            if fn == "Ref":
                return self.ref(arg)
            if fn == "Fn::GetAtt":
                logical, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
                return self.getatt(logical, attribute)
            if fn == "Fn::Sub":
                return self.sub(arg)
            if fn == "Fn::Join":
                return arg[0].join(str(v) for v in self.resolve(arg[1]))
            if fn == "Fn::Select":
                return self.resolve(arg[1])[int(self.resolve(arg[0]))]
            if fn == "Fn::Split":
                return str(self.resolve(arg[1])).split(arg[0])
            if fn == "Fn::If":
                return self.resolve(arg[1] if self.condition(arg[0]) else arg[2])
            if fn in ("Fn::Equals", "Fn::Not", "Fn::And", "Fn::Or", "Fn::Contains") or (
                    fn == "Condition" and isinstance(arg, str)):
                return self.evaluate(value)
            if fn.startswith("Fn::"):
                raise Unresolved(f"intrinsic function {fn}")
        out = {}
        for key, item in value.items():
            item = self.resolve(item)
            if item is not NOVALUE:
                out[key] = item
        return out

    def active(self, resource):
        return "Condition" not in resource or self.condition(resource["Condition"])


def references(value):
    """The logical ids (and pseudo parameters) a value refers to, with Ref, Fn::GetAtt, Fn::Sub."""
    found = set()
    if isinstance(value, list):
        for v in value:
            found |= references(v)
    elif isinstance(value, dict):
        for fn, arg in value.items():
            if fn == "Ref" and isinstance(arg, str):
                found.add(arg)
            elif fn == "Fn::GetAtt":
                found.add(arg[0] if isinstance(arg, list) else arg.split(".", 1)[0])
            elif fn == "Fn::Sub":
                text, names = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
                for ref in re.findall(r"\$\{([^}!][^}]*)\}", text):
                    if ref not in names:
                        found.add(ref.split(".", 1)[0] if not ref.startswith("AWS::") else ref)
                found |= references(names)
            else:
                found |= references(arg)
    return found


def depends_on(resource):
    return set(listify(resource.get("DependsOn", [])))


# ------------------------------------------------------------------------------- AWS clients
class Aws:
    def __init__(self):
        config = Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=5, read_timeout=120)
        self._config = config
        self._clients = {}

    def __getattr__(self, service):
        if service.startswith("_"):
            raise AttributeError(service)
        if service not in self._clients:
            name = {"awslambda": "lambda"}.get(service, service)
            self._clients[service] = boto3.client(name, config=self._config)
        return self._clients[service]


def sqs_url(aws, physical):
    """The queue's URL as moto answers GetQueueUrl (moto's physical id is an sqs.<region>.amazonaws.com
    URL, not its own endpoint's)."""
    try:
        return aws.sqs.get_queue_url(QueueName=physical.rstrip("/").rsplit("/", 1)[1])["QueueUrl"]
    except ClientError as e:
        raise missing(e)


# ------------------------------------------------------------------------------- a resource's check
class Check:
    """What was compared for one resource, and what differed."""

    def __init__(self, logical, rtype, props, ctx):
        self.logical, self.rtype, self.props, self.ctx = logical, rtype, props, ctx
        self.compared = set()  # the template's properties compared
        self.unchecked = set()  # and those moto cannot show (PROPERTY_GAPS)
        self.findings = []

    def eq(self, prop, expected, actual, canonical=canon, what=""):
        """Compares the template's value of `prop` (a top-level property, or a path in one:
        "Environment.Variables") with the service's."""
        top = prop.split(".")[0]
        if PROPERTY_GAPS.get(self.rtype, {}).get(top, ("",))[0] == "unchecked":
            self.unchecked.add(top)
            return
        self.compared.add(top)
        if canonical(expected) != canonical(actual):
            self.findings.append(f"{prop}{what}: template {short(expected)}, deployed {short(actual)}")

    def given(self, prop):
        return prop in self.props

    def each_given(self, pairs, actual):
        """eq() for each (template property, service field) the template sets."""
        for prop, field in pairs:
            if prop in self.props:
                self.eq(prop, self.props[prop], actual.get(field))


# Per type: read(aws, physical) -> live (raises Missing), refs(physical, live) -> (Ref value,
# {attribute: value}), check(ck, live), and for the types created through their APIs
# create(aws, ctx, logical, props) -> physical id, and delete(aws, physical).

def refs_self(physical, live):
    return physical, {}


def read_queue(aws, physical):
    url = sqs_url(aws, physical)
    try:
        attrs = aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    except ClientError as e:
        raise missing(e)
    return {"url": url, "name": url.rsplit("/", 1)[1], "attrs": attrs}


def refs_queue(physical, live):
    return physical, {"Arn": live["attrs"]["QueueArn"], "QueueName": live["name"], "QueueUrl": physical}


def check_queue(ck, live):
    a = live["attrs"]
    if ck.given("QueueName"):
        ck.eq("QueueName", ck.props["QueueName"], live["name"])
    ck.each_given([("VisibilityTimeout", "VisibilityTimeout"), ("MessageRetentionPeriod", "MessageRetentionPeriod"),
                   ("MaximumMessageSize", "MaximumMessageSize"), ("SqsManagedSseEnabled", "SqsManagedSseEnabled"),
                   ("DelaySeconds", "DelaySeconds")], a)
    for prop in ("RedrivePolicy", "RedriveAllowPolicy"):
        if ck.given(prop):
            ck.eq(prop, ck.props[prop], as_json(a.get(prop, "null")))


def read_table(aws, physical):
    try:
        table = aws.dynamodb.describe_table(TableName=physical)["Table"]
        ttl = aws.dynamodb.describe_time_to_live(TableName=physical)["TimeToLiveDescription"]
        backups = aws.dynamodb.describe_continuous_backups(TableName=physical)["ContinuousBackupsDescription"]
    except ClientError as e:
        raise missing(e)
    return {"table": table, "ttl": ttl, "backups": backups}


def refs_table(physical, live):
    return physical, {"Arn": live["table"]["TableArn"], "StreamArn": live["table"].get("LatestStreamArn")}


def check_table(ck, live):
    t = live["table"]
    p = ck.props
    ck.eq("AttributeDefinitions", sorted((d["AttributeName"], d["AttributeType"]) for d in p["AttributeDefinitions"]),
          sorted((d["AttributeName"], d["AttributeType"]) for d in t.get("AttributeDefinitions", [])))
    ck.eq("KeySchema", p["KeySchema"], t.get("KeySchema"))
    if ck.given("BillingMode"):
        ck.eq("BillingMode", p["BillingMode"], t.get("BillingModeSummary", {}).get("BillingMode"))

    def index(i):
        projection = dict(i["Projection"])
        if "NonKeyAttributes" in projection:
            projection["NonKeyAttributes"] = sorted(projection["NonKeyAttributes"])
        return {"KeySchema": i["KeySchema"], "Projection": projection}

    if ck.given("GlobalSecondaryIndexes"):
        ck.eq("GlobalSecondaryIndexes", {i["IndexName"]: index(i) for i in p["GlobalSecondaryIndexes"]},
              {i["IndexName"]: index(i) for i in t.get("GlobalSecondaryIndexes", [])})
    if ck.given("SSESpecification"):
        enabled = canon(p["SSESpecification"].get("SSEEnabled", False)) == "true"
        ck.eq("SSESpecification.SSEEnabled", "ENABLED" if enabled else "DISABLED",
              t.get("SSEDescription", {}).get("Status", "DISABLED"))
    if ck.given("TimeToLiveSpecification"):
        spec = p["TimeToLiveSpecification"]
        enabled = canon(spec.get("Enabled")) == "true"
        ck.eq("TimeToLiveSpecification", {"status": "ENABLED" if enabled else "DISABLED", "attribute": spec["AttributeName"]},
              {"status": live["ttl"].get("TimeToLiveStatus"), "attribute": live["ttl"].get("AttributeName")})
    if ck.given("PointInTimeRecoverySpecification"):
        enabled = canon(p["PointInTimeRecoverySpecification"].get("PointInTimeRecoveryEnabled")) == "true"
        ck.eq("PointInTimeRecoverySpecification", "ENABLED" if enabled else "DISABLED",
              live["backups"].get("PointInTimeRecoveryDescription", {}).get("PointInTimeRecoveryStatus"))


def read_bucket(aws, physical):
    s3 = aws.s3
    try:
        s3.head_bucket(Bucket=physical)
    except ClientError as e:
        raise missing(e)

    def get(call, key, **kw):
        try:
            return getattr(s3, call)(Bucket=physical, **kw).get(key)
        except ClientError as e:
            if e.response["Error"]["Code"] in ("NoSuchLifecycleConfiguration", "NoSuchPublicAccessBlockConfiguration",
                                               "OwnershipControlsNotFoundError", "NoSuchBucketPolicy",
                                               "ServerSideEncryptionConfigurationNotFoundError"):
                return None
            raise

    return {
        "encryption": get("get_bucket_encryption", "ServerSideEncryptionConfiguration"),
        "public_access": get("get_public_access_block", "PublicAccessBlockConfiguration"),
        "ownership": get("get_bucket_ownership_controls", "OwnershipControls"),
        "versioning": s3.get_bucket_versioning(Bucket=physical).get("Status"),
        "lifecycle": get("get_bucket_lifecycle_configuration", "Rules"),
        "policy": get("get_bucket_policy", "Policy"),
    }


def refs_bucket(physical, live):
    return physical, {"Arn": f"arn:aws:s3:::{physical}", "DomainName": f"{physical}.s3.amazonaws.com"}


def lifecycle_rule_from_template(rule):
    out = {"ID": rule.get("Id"), "Status": rule["Status"], "Prefix": rule.get("Prefix", "")}
    if "ExpirationInDays" in rule:
        out["ExpirationDays"] = rule["ExpirationInDays"]
    out["Transitions"] = [{"Days": t["TransitionInDays"], "StorageClass": t["StorageClass"]}
                          for t in rule.get("Transitions", [])]
    if "NoncurrentVersionExpiration" in rule:
        out["NoncurrentDays"] = rule["NoncurrentVersionExpiration"]["NoncurrentDays"]
    return out


def lifecycle_rule_from_s3(rule):
    out = {"ID": rule.get("ID"), "Status": rule["Status"],
           "Prefix": rule.get("Filter", {}).get("Prefix", rule.get("Prefix", ""))}
    if "Expiration" in rule and "Days" in rule["Expiration"]:
        out["ExpirationDays"] = rule["Expiration"]["Days"]
    out["Transitions"] = [{"Days": t.get("Days"), "StorageClass": t["StorageClass"]} for t in rule.get("Transitions", [])]
    if "NoncurrentVersionExpiration" in rule:
        out["NoncurrentDays"] = rule["NoncurrentVersionExpiration"]["NoncurrentDays"]
    return out


def check_bucket(ck, live):
    p = ck.props
    if ck.given("BucketEncryption"):
        ck.eq("BucketEncryption", [r["ServerSideEncryptionByDefault"] for r in p["BucketEncryption"]["ServerSideEncryptionConfiguration"]],
              # moto's CFN stores the rule under the XML element's name, which boto3 then returns
              [r.get("ServerSideEncryptionByDefault", r.get("ApplyServerSideEncryptionByDefault"))
               for r in (live["encryption"] or {}).get("Rules", [])])
    if ck.given("PublicAccessBlockConfiguration"):
        ck.eq("PublicAccessBlockConfiguration", p["PublicAccessBlockConfiguration"], live["public_access"])
    if ck.given("OwnershipControls"):
        ck.eq("OwnershipControls", p["OwnershipControls"]["Rules"], (live["ownership"] or {}).get("Rules"))
    if ck.given("VersioningConfiguration"):
        ck.eq("VersioningConfiguration", p["VersioningConfiguration"]["Status"], live["versioning"])
    if ck.given("LifecycleConfiguration"):
        ck.eq("LifecycleConfiguration", [lifecycle_rule_from_template(r) for r in p["LifecycleConfiguration"]["Rules"]],
              [lifecycle_rule_from_s3(r) for r in live["lifecycle"] or []])


def read_function(aws, physical):
    try:
        function = aws.awslambda.get_function(FunctionName=physical)
        concurrency = aws.awslambda.get_function_concurrency(FunctionName=physical).get("ReservedConcurrentExecutions")
        tags = aws.awslambda.list_tags(Resource=function["Configuration"]["FunctionArn"]).get("Tags", {})
    except ClientError as e:
        raise missing(e)
    return {"config": function["Configuration"], "concurrency": concurrency, "tags": tags}


def refs_function(physical, live):
    return live["config"]["FunctionName"], {"Arn": live["config"]["FunctionArn"]}


def check_function(ck, live):
    c, p = live["config"], ck.props
    ck.each_given([("FunctionName", "FunctionName"), ("Runtime", "Runtime"), ("Handler", "Handler"),
                   ("MemorySize", "MemorySize"), ("Timeout", "Timeout"), ("Role", "Role"),
                   ("Architectures", "Architectures")], c)
    if ck.given("Environment"):
        variables = p["Environment"].get("Variables", {})
        ck.eq("Environment.Variables", variables, c.get("Environment", {}).get("Variables", {}))
        # Lambda refuses more than 4 KB of variables in all (moto does not check).
        size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in variables.items())
        if size > 4096:
            ck.findings.append(f"Environment: {size} bytes of variables, over Lambda's 4 KB limit")
    if ck.given("TracingConfig"):
        ck.eq("TracingConfig.Mode", p["TracingConfig"]["Mode"], c.get("TracingConfig", {}).get("Mode"))
    if ck.given("ReservedConcurrentExecutions"):
        ck.eq("ReservedConcurrentExecutions", p["ReservedConcurrentExecutions"], live["concurrency"])
    if ck.given("Tags"):
        expected = {t["Key"]: t["Value"] for t in p["Tags"]}
        ck.eq("Tags", expected, {k: v for k, v in live["tags"].items() if k in expected})
    if ck.given("Code"):
        key = (p["Code"]["S3Bucket"], p["Code"]["S3Key"])
        sha = ck.ctx["zips"].get(key, {}).get("sha256")
        ck.eq("Code", sha, c.get("CodeSha256"), what=" (CodeSha256 of the uploaded zip)")


def read_esm(aws, physical):
    return api(aws.awslambda.get_event_source_mapping, UUID=physical)



def check_esm(ck, live):
    p = ck.props
    ck.each_given([("EventSourceArn", "EventSourceArn"), ("BatchSize", "BatchSize"),
                   ("MaximumBatchingWindowInSeconds", "MaximumBatchingWindowInSeconds"),
                   ("FunctionResponseTypes", "FunctionResponseTypes"), ("ScalingConfig", "ScalingConfig")], live)
    if ck.given("FunctionName"):
        ck.eq("FunctionName", p["FunctionName"], live.get("FunctionArn", "").rsplit(":", 1)[-1])
    # Lambda refuses an SQS source whose visibility timeout is shorter than the function's
    # timeout (moto does not check).
    queue = ck.ctx["queues_by_arn"].get(live.get("EventSourceArn"))
    function = ck.ctx["functions_by_arn"].get(live.get("FunctionArn"))
    if queue and function and int(queue["attrs"]["VisibilityTimeout"]) < int(function["config"]["Timeout"]):
        ck.findings.append(f"EventSourceArn: the queue's VisibilityTimeout {queue['attrs']['VisibilityTimeout']} s "
                           f"is under the function's Timeout {function['config']['Timeout']} s (Lambda refuses it)")
    if ck.given("Enabled"):
        ck.eq("Enabled", "Enabled" if canon(p["Enabled"]) == "true" else "Disabled", live.get("State"))


def read_role(aws, physical):
    iam = aws.iam
    try:
        role = iam.get_role(RoleName=physical)["Role"]
        names = iam.list_role_policies(RoleName=physical)["PolicyNames"]
        inline = {n: iam.get_role_policy(RoleName=physical, PolicyName=n)["PolicyDocument"] for n in names}
        attached = [a["PolicyArn"] for a in iam.list_attached_role_policies(RoleName=physical)["AttachedPolicies"]]
        tags = iam.list_role_tags(RoleName=physical)["Tags"]
    except ClientError as e:
        raise missing(e)
    return {"role": role, "inline": inline, "attached": attached, "tags": tags}


def refs_role(physical, live):
    return physical, {"Arn": live["role"]["Arn"], "RoleId": live["role"]["RoleId"]}


def check_role(ck, live):
    p = ck.props
    ck.eq("AssumeRolePolicyDocument", p["AssumeRolePolicyDocument"], live["role"]["AssumeRolePolicyDocument"], policy_canon)
    if ck.given("ManagedPolicyArns"):
        ck.eq("ManagedPolicyArns", sorted(p["ManagedPolicyArns"]), sorted(live["attached"]))
    if ck.given("Policies"):
        ck.eq("Policies", {x["PolicyName"]: x["PolicyDocument"] for x in p["Policies"]}, live["inline"], policy_canon)
    if ck.given("Tags"):
        expected = {t["Key"]: t["Value"] for t in p["Tags"]}
        ck.eq("Tags", expected, {t["Key"]: t["Value"] for t in live["tags"] if t["Key"] in expected})


def read_key(aws, physical):
    kms = aws.kms
    try:
        meta = kms.describe_key(KeyId=physical)["KeyMetadata"]
        rotation = kms.get_key_rotation_status(KeyId=physical)["KeyRotationEnabled"]
        policy = kms.get_key_policy(KeyId=physical, PolicyName="default")["Policy"]
    except ClientError as e:
        raise missing(e)
    if meta.get("KeyState") in ("PendingDeletion", "PendingReplicaDeletion"):
        raise Missing(f"key {physical} is {meta['KeyState']}")
    return {"meta": meta, "rotation": rotation, "policy": policy}


def refs_key(physical, live):
    return live["meta"]["KeyId"], {"Arn": live["meta"]["Arn"], "KeyId": live["meta"]["KeyId"]}


def check_key(ck, live):
    p = ck.props
    if ck.given("Description"):
        ck.eq("Description", p["Description"], live["meta"].get("Description"))
    if ck.given("EnableKeyRotation"):
        ck.eq("EnableKeyRotation", p["EnableKeyRotation"], live["rotation"])
    if ck.given("KeyPolicy"):
        ck.eq("KeyPolicy", p["KeyPolicy"], as_json(live["policy"]), policy_canon)
    if live["meta"].get("KeyState") != "Enabled":
        ck.findings.append(f"KeyState: {live['meta'].get('KeyState')}, not Enabled")


def read_alias(aws, physical):
    for page in aws.kms.get_paginator("list_aliases").paginate():
        for alias in page["Aliases"]:
            if alias["AliasName"] == physical:
                return alias
    raise Missing(f"no alias {physical}")



def check_alias(ck, live):
    ck.eq("AliasName", ck.props["AliasName"], live["AliasName"])
    ck.eq("TargetKeyId", ck.props["TargetKeyId"], live.get("TargetKeyId"))


def read_topic(aws, physical):
    try:
        attrs = aws.sns.get_topic_attributes(TopicArn=physical)["Attributes"]
        subs = aws.sns.list_subscriptions_by_topic(TopicArn=physical)["Subscriptions"]
    except ClientError as e:
        raise missing(e)
    return {"attrs": attrs, "subscriptions": subs}


def refs_topic(physical, live):
    return physical, {"TopicArn": physical, "TopicName": physical.rsplit(":", 1)[1]}


def check_topic(ck, live):
    ck.each_given([("KmsMasterKeyId", "KmsMasterKeyId"), ("DisplayName", "DisplayName")], live["attrs"])
    if ck.given("TopicName"):
        ck.eq("TopicName", ck.props["TopicName"], live["attrs"]["TopicArn"].rsplit(":", 1)[1])


def read_log_group(aws, physical):
    groups = aws.logs.describe_log_groups(logGroupNamePrefix=physical)["logGroups"]
    for group in groups:
        if group["logGroupName"] == physical:
            return group
    raise Missing(f"no log group {physical}")


def refs_log_group(physical, live):
    return physical, {"Arn": live.get("arn")}


def check_log_group(ck, live):
    ck.each_given([("LogGroupName", "logGroupName"), ("RetentionInDays", "retentionInDays"),
                   ("KmsKeyId", "kmsKeyId")], live)


def read_rule(aws, physical):
    bus = "default"
    name = physical
    if "|" in physical:
        bus, name = physical.split("|", 1)
    try:
        rule = aws.events.describe_rule(Name=name, EventBusName=bus)
        targets = aws.events.list_targets_by_rule(Rule=name, EventBusName=bus)["Targets"]
    except ClientError as e:
        raise missing(e)
    return {"rule": rule, "targets": targets}


def refs_rule(physical, live):
    return physical, {"Arn": live["rule"]["Arn"]}


def check_rule(ck, live):
    p, r = ck.props, live["rule"]
    ck.each_given([("Description", "Description"), ("State", "State"), ("ScheduleExpression", "ScheduleExpression"),
                   ("EventBusName", "EventBusName")], r)
    if ck.given("EventPattern"):
        ck.eq("EventPattern", p["EventPattern"], as_json(r.get("EventPattern", "null")))
    if ck.given("Targets"):
        fields = ("Id", "Arn", "RetryPolicy", "DeadLetterConfig", "Input", "RoleArn")
        ck.eq("Targets", {t["Id"]: {f: t[f] for f in fields if f in t} for t in p["Targets"]},
              {t["Id"]: {f: t[f] for f in fields if f in t} for t in live["targets"]})


def read_state_machine(aws, physical):
    try:
        machine = aws.stepfunctions.describe_state_machine(stateMachineArn=physical)
        tags = aws.stepfunctions.list_tags_for_resource(resourceArn=physical)["tags"]
    except ClientError as e:
        raise missing(e)
    return {"machine": machine, "tags": tags}


def refs_state_machine(physical, live):
    return physical, {"Name": live["machine"]["name"], "Arn": physical}


def check_state_machine(ck, live):
    p, m = ck.props, live["machine"]
    if ck.given("DefinitionString"):
        ck.eq("DefinitionString", as_json(p["DefinitionString"]), as_json(m["definition"]))
    if ck.given("RoleArn"):
        ck.eq("RoleArn", p["RoleArn"], m.get("roleArn"))
    if ck.given("StateMachineType"):
        ck.eq("StateMachineType", p["StateMachineType"], m.get("type"))
    if ck.given("Tags"):
        expected = {t["Key"]: t["Value"] for t in p["Tags"]}
        ck.eq("Tags", expected, {t["key"]: t["value"] for t in live["tags"] if t["key"] in expected})


def read_dashboard(aws, physical):
    return api(aws.cloudwatch.get_dashboard, DashboardName=physical)



def check_dashboard(ck, live):
    ck.eq("DashboardName", ck.props.get("DashboardName", live["DashboardName"]), live["DashboardName"])
    ck.eq("DashboardBody", as_json(ck.props["DashboardBody"]), as_json(live["DashboardBody"]))


# --- the types moto's CloudFormation skips: created here through their own APIs

def physical_name(ctx, logical, limit=64):
    """A name as CloudFormation makes one: stack-logical-suffix."""
    suffix = uuid.uuid4().hex[:12].upper()
    return f"{ctx['stack'][: limit - len(logical) - 14]}-{logical}-{suffix}"[:limit]


def create_secret(aws, ctx, logical, props):
    generate = props.get("GenerateSecretString")
    secret = props.get("SecretString")
    if generate:
        password = aws.secretsmanager.get_random_password(
            PasswordLength=int(generate.get("PasswordLength", 32)),
            ExcludePunctuation=canon(generate.get("ExcludePunctuation", False)) == "true",
            ExcludeCharacters=generate.get("ExcludeCharacters", ""),
        )["RandomPassword"]
        document = json.loads(generate.get("SecretStringTemplate", "{}"))
        document[generate["GenerateStringKey"]] = password
        secret = json.dumps(document)
    name = props.get("Name") or f"{logical}-{uuid.uuid4().hex[:12]}"
    kwargs = {"Name": name, "SecretString": secret}
    if "Description" in props:
        kwargs["Description"] = props["Description"]
    return aws.secretsmanager.create_secret(**kwargs)["ARN"]


def read_secret(aws, physical):
    try:
        described = aws.secretsmanager.describe_secret(SecretId=physical)
        value = aws.secretsmanager.get_secret_value(SecretId=physical)["SecretString"]
    except ClientError as e:
        raise missing(e)
    if described.get("DeletedDate"):
        raise Missing(f"secret {physical} is scheduled for deletion")
    return {"described": described, "value": value}


def refs_secret(physical, live):
    return physical, {"Id": physical}


def check_secret(ck, live):
    p = ck.props
    if ck.given("Description"):
        ck.eq("Description", p["Description"], live["described"].get("Description"))
    if ck.given("GenerateSecretString"):
        g = p["GenerateSecretString"]
        document = json.loads(live["value"])
        expected_keys = sorted(set(json.loads(g.get("SecretStringTemplate", "{}"))) | {g["GenerateStringKey"]})
        generated = str(document.get(g["GenerateStringKey"], ""))
        shape = {"keys": sorted(document), "length": len(generated)}
        if canon(g.get("ExcludePunctuation", False)) == "true":
            shape["punctuation"] = sorted(set(re.sub(r"[A-Za-z0-9]", "", generated)))
        ck.eq("GenerateSecretString",
              {"keys": expected_keys, "length": int(g.get("PasswordLength", 32)),
               **({"punctuation": []} if "punctuation" in shape else {})}, shape, what=" (the stored value's shape)")


def delete_secret(aws, physical):
    aws.secretsmanager.delete_secret(SecretId=physical, ForceDeleteWithoutRecovery=True)


def create_event_bus(aws, ctx, logical, props):
    name = props.get("Name") or physical_name(ctx, logical)
    aws.events.create_event_bus(Name=name)
    return name


def read_event_bus(aws, physical):
    return api(aws.events.describe_event_bus, Name=physical)


def refs_event_bus(physical, live):
    return physical, {"Arn": live["Arn"], "Name": live["Name"]}


def check_event_bus(ck, live):
    if ck.given("Name"):
        ck.eq("Name", ck.props["Name"], live.get("Name"))


def delete_event_bus(aws, physical):
    aws.events.delete_event_bus(Name=physical)


def create_configuration_set(aws, ctx, logical, props):
    name = props.get("Name") or physical_name(ctx, logical)
    kwargs = {"ConfigurationSetName": name}
    for prop in ("ReputationOptions", "SendingOptions"):
        if prop in props:
            kwargs[prop] = {k: canon(v) == "true" for k, v in props[prop].items()}
    aws.sesv2.create_configuration_set(**kwargs)
    return name


def read_configuration_set(aws, physical):
    return api(aws.sesv2.get_configuration_set, ConfigurationSetName=physical)



def check_configuration_set(ck, live):
    for prop in ("ReputationOptions", "SendingOptions"):
        if ck.given(prop):
            ck.eq(prop, ck.props[prop], {k: live.get(prop, {}).get(k) for k in ck.props[prop]})
    if ck.given("Name"):
        ck.eq("Name", ck.props["Name"], live["ConfigurationSetName"])


def delete_configuration_set(aws, physical):
    aws.sesv2.delete_configuration_set(ConfigurationSetName=physical)


def event_destination_v1(ctx, logical, props):
    d = props["EventDestination"]
    out = {"Name": d.get("Name") or physical_name(ctx, logical),
           "Enabled": canon(d.get("Enabled", False)) == "true",
           "MatchingEventTypes": d["MatchingEventTypes"]}
    if "SnsDestination" in d:
        out["SNSDestination"] = {"TopicARN": d["SnsDestination"]["TopicARN"]}
    return out


def create_event_destination(aws, ctx, logical, props):
    destination = event_destination_v1(ctx, logical, props)
    aws.ses.create_configuration_set_event_destination(
        ConfigurationSetName=props["ConfigurationSetName"], EventDestination=destination)
    return f"{props['ConfigurationSetName']}|{destination['Name']}"


def read_event_destination(aws, physical):
    config_set, name = physical.split("|", 1)
    try:
        found = aws.ses.describe_configuration_set(
            ConfigurationSetName=config_set, ConfigurationSetAttributeNames=["eventDestinations"])
    except ClientError as e:
        raise missing(e)
    for destination in found.get("EventDestinations") or []:
        if destination and destination.get("Name") == name:
            return dict(destination, ConfigurationSetName=found["ConfigurationSet"]["Name"])
    raise Missing(f"no event destination {name} on {config_set}")



def check_event_destination(ck, live):
    d = ck.props["EventDestination"]
    ck.eq("ConfigurationSetName", ck.props["ConfigurationSetName"], live["ConfigurationSetName"])
    ck.eq("EventDestination.Enabled", d.get("Enabled", False), live.get("Enabled"))
    ck.eq("EventDestination.MatchingEventTypes", sorted(d["MatchingEventTypes"]), sorted(live.get("MatchingEventTypes", [])))
    if "SnsDestination" in d:
        ck.eq("EventDestination.SnsDestination", d["SnsDestination"]["TopicARN"], live.get("SNSDestination", {}).get("TopicARN"))




def create_queue_policy(aws, ctx, logical, props):
    for queue in props["Queues"]:
        aws.sqs.set_queue_attributes(QueueUrl=sqs_url(aws, queue), Attributes={"Policy": json.dumps(props["PolicyDocument"])})
    return "|".join(props["Queues"])


def read_queue_policy(aws, physical):
    policies = {}
    for queue in physical.split("|"):
        url = sqs_url(aws, queue)
        policy = aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"]).get("Attributes", {}).get("Policy")
        if not policy:
            raise Missing(f"queue {queue} has no policy")
        policies[queue] = json.loads(policy)
    return policies


def check_queue_policy(ck, live):
    ck.eq("Queues", sorted(ck.props["Queues"]), sorted(live))
    for queue, policy in live.items():
        ck.eq("PolicyDocument", ck.props["PolicyDocument"], policy, policy_canon)


def delete_queue_policy(aws, physical):
    for queue in physical.split("|"):
        aws.sqs.set_queue_attributes(QueueUrl=sqs_url(aws, queue), Attributes={"Policy": ""})


def create_topic_policy(aws, ctx, logical, props):
    for topic in props["Topics"]:
        aws.sns.set_topic_attributes(TopicArn=topic, AttributeName="Policy", AttributeValue=json.dumps(props["PolicyDocument"]))
    return "|".join(props["Topics"])


def read_topic_policy(aws, physical):
    policies = {}
    for topic in physical.split("|"):
        try:
            policies[topic] = json.loads(aws.sns.get_topic_attributes(TopicArn=topic)["Attributes"]["Policy"])
        except ClientError as e:
            raise missing(e)
    return policies


def check_topic_policy(ck, live):
    ck.eq("Topics", sorted(ck.props["Topics"]), sorted(live))
    for topic, policy in live.items():
        ck.eq("PolicyDocument", ck.props["PolicyDocument"], policy, policy_canon)


def create_subscription(aws, ctx, logical, props):
    return aws.sns.subscribe(TopicArn=props["TopicArn"], Protocol=props["Protocol"], Endpoint=props["Endpoint"],
                             ReturnSubscriptionArn=True)["SubscriptionArn"]


def read_subscription(aws, physical):
    try:
        return aws.sns.get_subscription_attributes(SubscriptionArn=physical)["Attributes"]
    except ClientError as e:
        raise missing(e)


def check_subscription(ck, live):
    ck.each_given([("TopicArn", "TopicArn"), ("Protocol", "Protocol"), ("Endpoint", "Endpoint"),
                   ("RawMessageDelivery", "RawMessageDelivery")], live)


def delete_subscription(aws, physical):
    aws.sns.unsubscribe(SubscriptionArn=physical)


def create_bucket_policy(aws, ctx, logical, props):
    aws.s3.put_bucket_policy(Bucket=props["Bucket"], Policy=json.dumps(props["PolicyDocument"]))
    return props["Bucket"]


def read_bucket_policy(aws, physical):
    try:
        return {"Bucket": physical, "Policy": json.loads(aws.s3.get_bucket_policy(Bucket=physical)["Policy"])}
    except ClientError as e:
        raise missing(e)


def check_bucket_policy(ck, live):
    ck.eq("Bucket", ck.props["Bucket"], live["Bucket"])  # (the bucket GetBucketPolicy read it from)
    ck.eq("PolicyDocument", ck.props["PolicyDocument"], live["Policy"], policy_canon)


def delete_bucket_policy(aws, physical):
    aws.s3.delete_bucket_policy(Bucket=physical)


ALARM_FIELDS = ["AlarmDescription", "Namespace", "MetricName", "Dimensions", "Statistic", "ExtendedStatistic", "Period",
                "EvaluationPeriods", "DatapointsToAlarm", "Threshold", "ComparisonOperator", "TreatMissingData",
                "AlarmActions", "OKActions", "InsufficientDataActions", "Metrics", "Unit", "ActionsEnabled"]


def create_alarm(aws, ctx, logical, props):
    name = props.get("AlarmName") or physical_name(ctx, logical, 255)
    kwargs = {k: props[k] for k in ALARM_FIELDS if k in props}
    for k in ("Period", "EvaluationPeriods", "DatapointsToAlarm"):
        if k in kwargs:
            kwargs[k] = int(kwargs[k])
    if "Threshold" in kwargs:
        kwargs["Threshold"] = float(kwargs["Threshold"])
    if "Metrics" in kwargs:
        kwargs["Metrics"] = [dict(m, **({"MetricStat": dict(m["MetricStat"], Period=int(m["MetricStat"]["Period"]))}
                                        if "MetricStat" in m else {}),
                                  **({"ReturnData": canon(m["ReturnData"]) == "true"} if "ReturnData" in m else {}))
                             for m in kwargs["Metrics"]]
    aws.cloudwatch.put_metric_alarm(AlarmName=name, **kwargs)
    return name


def read_alarm(aws, physical):
    alarms = aws.cloudwatch.describe_alarms(AlarmNames=[physical])["MetricAlarms"]
    if not alarms:
        raise Missing(f"no alarm {physical}")
    return alarms[0]


def refs_alarm(physical, live):
    return physical, {"Arn": live["AlarmArn"]}


def check_alarm(ck, live):
    for field in ALARM_FIELDS:
        if field in ck.props:
            ck.eq(field, ck.props[field], live.get(field))


def delete_alarm(aws, physical):
    aws.cloudwatch.delete_alarms(AlarmNames=[physical])


def create_schedule(aws, ctx, logical, props):
    name = props.get("Name") or physical_name(ctx, logical)
    kwargs = {k: props[k] for k in ("ScheduleExpression", "FlexibleTimeWindow", "Target", "State", "Description",
                                    "GroupName", "ScheduleExpressionTimezone") if k in props}
    aws.scheduler.create_schedule(Name=name, **kwargs)
    return f"{props.get('GroupName', 'default')}|{name}"


def read_schedule(aws, physical):
    group, name = physical.split("|", 1)
    try:
        return aws.scheduler.get_schedule(Name=name, GroupName=group)
    except ClientError as e:
        raise missing(e)


def refs_schedule(physical, live):
    return physical.split("|", 1)[1], {"Arn": live["Arn"]}


def check_schedule(ck, live):
    for field in ("Name", "ScheduleExpression", "FlexibleTimeWindow", "State", "Description", "ScheduleExpressionTimezone"):
        if ck.given(field):
            ck.eq(field, ck.props[field], live.get(field))
    if ck.given("Target"):
        ck.eq("Target", ck.props["Target"], {k: live["Target"].get(k) for k in ck.props["Target"]})


def delete_schedule(aws, physical):
    group, name = physical.split("|", 1)
    aws.scheduler.delete_schedule(Name=name, GroupName=group)


def function_name_of(name_or_arn):
    """A function's name from its name or (qualified or not) ARN."""
    text = str(name_or_arn)
    return text.split(":function:", 1)[1].split(":", 1)[0] if ":function:" in text else text


def create_function_url(aws, ctx, logical, props):
    kwargs = {"FunctionName": props["TargetFunctionArn"], "AuthType": props["AuthType"]}
    if "InvokeMode" in props:
        kwargs["InvokeMode"] = props["InvokeMode"]
    if "Cors" in props:
        cors = dict(props["Cors"])
        if "AllowCredentials" in cors:
            cors["AllowCredentials"] = canon(cors["AllowCredentials"]) == "true"
        if "MaxAge" in cors:
            cors["MaxAge"] = int(cors["MaxAge"])
        kwargs["Cors"] = cors
    return aws.awslambda.create_function_url_config(**kwargs)["FunctionArn"]


def read_function_url(aws, physical):
    return api(aws.awslambda.get_function_url_config, FunctionName=physical)


def refs_function_url(physical, live):
    return live["FunctionArn"], {"FunctionArn": live["FunctionArn"], "FunctionUrl": live["FunctionUrl"]}


def check_function_url(ck, live):
    p = ck.props
    ck.eq("TargetFunctionArn", function_name_of(p["TargetFunctionArn"]), function_name_of(live.get("FunctionArn")),
          what=" (the function)")
    ck.each_given([("AuthType", "AuthType"), ("InvokeMode", "InvokeMode")], live)
    if ck.given("Cors"):
        ck.eq("Cors", p["Cors"], {k: (live.get("Cors") or {}).get(k) for k in p["Cors"]})


def delete_function_url(aws, physical):
    aws.awslambda.delete_function_url_config(FunctionName=physical)


# A permission's statement in the function's policy (GetPolicy). moto's CloudFormation model of
# AWS::Lambda::Permission adds the statement (with a random Sid) but has no physical id
# (ListStackResources answers ""), so the statement is found here by the template's Action and
# Principal on the function it names (locate_permission), then compared whole. Lambda writes
# FunctionUrlAuthType and InvokedViaFunctionUrl as conditions (StringEquals
# lambda:FunctionUrlAuthType, Bool lambda:InvokedViaFunctionUrl "true"); moto 5.2.5 keeps them as
# the statement's own keys, as given (measured): either form is read.
PERMISSION_CONDITIONS = {  # property: (condition operator, key)
    "FunctionUrlAuthType": ("StringEquals", "lambda:FunctionUrlAuthType"),
    "InvokedViaFunctionUrl": ("Bool", "lambda:InvokedViaFunctionUrl"),
    "SourceArn": ("ArnLike", "AWS:SourceArn"),
    "SourceAccount": ("StringEquals", "AWS:SourceAccount"),
    "PrincipalOrgID": ("StringEquals", "aws:PrincipalOrgID"),
}


def permission_principal(principal):
    """A statement's principal as AddPermission's Principal parameter spells it."""
    if isinstance(principal, dict) and len(principal) == 1:
        principal = next(iter(principal.values()))
    match = re.fullmatch(r"arn:aws[\w-]*:iam::(\d{12}):root", str(principal))
    return match.group(1) if match else principal


def policy_statements(aws, function):
    try:
        return json.loads(aws.awslambda.get_policy(FunctionName=function)["Policy"]).get("Statement", [])
    except ClientError as e:
        raise missing(e)


def locate_permission(aws, props, taken):
    """The physical id (function|Sid) of the statement granting the template's Action to its
    Principal, among those no other resource claimed."""
    function = function_name_of(props["FunctionName"])
    for statement in policy_statements(aws, function):
        physical = f"{function}|{statement.get('Sid')}"
        if (physical not in taken and statement.get("Action") == props["Action"]
                and permission_principal(statement.get("Principal")) == props["Principal"]):
            return physical
    raise Missing(f"no statement granting {props['Action']} to {props['Principal']} in {function}'s policy")


def read_permission(aws, physical):
    function, sid = physical.rsplit("|", 1)
    for statement in policy_statements(aws, function):
        if statement.get("Sid") == sid:
            return statement
    raise Missing(f"no statement {sid} in {function}'s policy")


def check_permission(ck, live):
    p = ck.props
    ck.eq("FunctionName", function_name_of(p["FunctionName"]), function_name_of(live.get("Resource")),
          what=" (the statement's Resource)")
    ck.eq("Action", p["Action"], live.get("Action"))
    ck.eq("Principal", p["Principal"], permission_principal(live.get("Principal")))
    condition = live.get("Condition") or {}
    for prop, (operator, key) in PERMISSION_CONDITIONS.items():
        if ck.given(prop):
            actual = condition.get(operator, {}).get(key, live.get(prop))
            ck.eq(prop, p[prop], actual, what=f" (condition {operator} {key})")


class Spec:
    def __init__(self, read, refs, check, create=None, delete=None):
        self.read, self.refs, self.check, self.create, self.delete = read, refs, check, create, delete


SPECS = {
    "AWS::SQS::Queue": Spec(read_queue, refs_queue, check_queue),
    "AWS::DynamoDB::Table": Spec(read_table, refs_table, check_table),
    "AWS::S3::Bucket": Spec(read_bucket, refs_bucket, check_bucket),
    "AWS::Lambda::Function": Spec(read_function, refs_function, check_function),
    "AWS::Lambda::EventSourceMapping": Spec(read_esm, refs_self, check_esm),
    "AWS::IAM::Role": Spec(read_role, refs_role, check_role),
    "AWS::KMS::Key": Spec(read_key, refs_key, check_key),
    "AWS::KMS::Alias": Spec(read_alias, refs_self, check_alias),
    "AWS::SNS::Topic": Spec(read_topic, refs_topic, check_topic),
    "AWS::Logs::LogGroup": Spec(read_log_group, refs_log_group, check_log_group),
    "AWS::Events::Rule": Spec(read_rule, refs_rule, check_rule),
    "AWS::StepFunctions::StateMachine": Spec(read_state_machine, refs_state_machine, check_state_machine),
    "AWS::CloudWatch::Dashboard": Spec(read_dashboard, refs_self, check_dashboard),
    # created through their own APIs (MOTO_CFN_SKIPS)
    "AWS::SecretsManager::Secret": Spec(read_secret, refs_secret, check_secret, create_secret, delete_secret),
    "AWS::Events::EventBus": Spec(read_event_bus, refs_event_bus, check_event_bus, create_event_bus, delete_event_bus),
    "AWS::SES::ConfigurationSet": Spec(read_configuration_set, refs_self, check_configuration_set,
                                       create_configuration_set, delete_configuration_set),
    "AWS::SES::ConfigurationSetEventDestination": Spec(read_event_destination, refs_self,
                                                       check_event_destination, create_event_destination),
    # (deleted with its configuration set: moto has no DeleteConfigurationSetEventDestination)
    "AWS::SQS::QueuePolicy": Spec(read_queue_policy, refs_self, check_queue_policy, create_queue_policy, delete_queue_policy),
    "AWS::SNS::TopicPolicy": Spec(read_topic_policy, refs_self, check_topic_policy, create_topic_policy),
    "AWS::SNS::Subscription": Spec(read_subscription, refs_self, check_subscription, create_subscription, delete_subscription),
    "AWS::S3::BucketPolicy": Spec(read_bucket_policy, refs_self, check_bucket_policy, create_bucket_policy, delete_bucket_policy),
    "AWS::CloudWatch::Alarm": Spec(read_alarm, refs_alarm, check_alarm, create_alarm, delete_alarm),
    "AWS::Scheduler::Schedule": Spec(read_schedule, refs_schedule, check_schedule, create_schedule, delete_schedule),
    "AWS::Lambda::Url": Spec(read_function_url, refs_function_url, check_function_url, create_function_url,
                             delete_function_url),
    # made by the stack, with no physical id from moto (NO_PHYSICAL_ID); gone with its function
    "AWS::Lambda::Permission": Spec(read_permission, refs_self, check_permission),
}

# Types moto's CloudFormation creates without a physical id (ListStackResources answers "";
# measured): locate(aws, resolved properties, physical ids taken) -> the physical id read back.
NO_PHYSICAL_ID = {
    "AWS::Lambda::Permission": locate_permission,
}

# What moto cannot show at all, per resource (predicate on the resolved properties), and why.
UNCHECKABLE = {
    "AWS::SES::ConfigurationSetEventDestination": (
        lambda props: "EventBridgeDestination" in props.get("EventDestination", {}),
        "moto has no SES v2 event-destination API, and SES v1's event destinations have no EventBridge target",
    ),
}

# Properties moto 5.2.5 cannot show (measured), per type: ("api", why) when its CloudFormation
# drops the property but the service's API can set it (set here from the template's value after
# the stack, then read back: COMPLETERS), ("unchecked", why) when nothing can.
PROPERTY_GAPS = {
    "AWS::SQS::Queue": {
        "RedriveAllowPolicy": ("unchecked", "moto keeps it but GetQueueAttributes never returns it"),
    },
    "AWS::DynamoDB::Table": {
        "TimeToLiveSpecification": ("api", "moto's CFN drops it"),
        "PointInTimeRecoverySpecification": ("api", "moto's CFN drops it"),
        "SSESpecification": ("unchecked", "moto's CFN drops it and its UpdateTable ignores SSESpecification"),
    },
    "AWS::S3::Bucket": {
        "PublicAccessBlockConfiguration": ("api", "moto's CFN drops it"),
        "OwnershipControls": ("api", "moto's CFN drops it"),
        "VersioningConfiguration": ("api", "moto's CFN drops it"),
        "LifecycleConfiguration": ("api", "moto's CFN drops it"),
    },
    "AWS::Lambda::Function": {
        "Tags": ("api", "moto's CFN drops them"),
        "Architectures": ("unchecked", "moto's CFN drops it (x86_64) and its Lambda API cannot change it"),
        "TracingConfig": ("unchecked", "moto's CFN drops it (PassThrough) and its UpdateFunctionConfiguration ignores it"),
    },
    "AWS::IAM::Role": {
        "ManagedPolicyArns": ("unchecked", "moto's CFN drops them, and moto holds no AWS managed policies to attach"),
    },
    "AWS::SES::ConfigurationSet": {
        "SendingOptions": ("unchecked", "moto's GetConfigurationSet nests the SendingOptions object inside SendingEnabled"),
    },
}


def complete_table(aws, physical, props):
    if "TimeToLiveSpecification" in props:
        spec = props["TimeToLiveSpecification"]
        aws.dynamodb.update_time_to_live(TableName=physical, TimeToLiveSpecification={
            "AttributeName": spec["AttributeName"], "Enabled": canon(spec.get("Enabled")) == "true"})
    if "PointInTimeRecoverySpecification" in props:
        enabled = canon(props["PointInTimeRecoverySpecification"].get("PointInTimeRecoveryEnabled")) == "true"
        aws.dynamodb.update_continuous_backups(
            TableName=physical, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": enabled})


def complete_bucket(aws, physical, props):
    if "PublicAccessBlockConfiguration" in props:
        aws.s3.put_public_access_block(Bucket=physical, PublicAccessBlockConfiguration={
            k: canon(v) == "true" for k, v in props["PublicAccessBlockConfiguration"].items()})
    if "OwnershipControls" in props:
        aws.s3.put_bucket_ownership_controls(Bucket=physical, OwnershipControls=props["OwnershipControls"])
    if "VersioningConfiguration" in props:
        aws.s3.put_bucket_versioning(Bucket=physical, VersioningConfiguration={
            "Status": props["VersioningConfiguration"]["Status"]})
    if "LifecycleConfiguration" in props:
        rules = []
        for rule in props["LifecycleConfiguration"]["Rules"]:
            r = lifecycle_rule_from_template(rule)
            out = {"ID": r["ID"], "Status": r["Status"], "Filter": {"Prefix": r["Prefix"]}}
            if "ExpirationDays" in r:
                out["Expiration"] = {"Days": int(r["ExpirationDays"])}
            if r["Transitions"]:
                out["Transitions"] = [{"Days": int(t["Days"]), "StorageClass": t["StorageClass"]} for t in r["Transitions"]]
            if "NoncurrentDays" in r:
                out["NoncurrentVersionExpiration"] = {"NoncurrentDays": int(r["NoncurrentDays"])}
            rules.append(out)
        aws.s3.put_bucket_lifecycle_configuration(Bucket=physical, LifecycleConfiguration={"Rules": rules})


def complete_function(aws, physical, props):
    if props.get("Tags"):
        arn = aws.awslambda.get_function_configuration(FunctionName=physical)["FunctionArn"]
        aws.awslambda.tag_resource(Resource=arn, Tags={t["Key"]: t["Value"] for t in props["Tags"]})


COMPLETERS = {
    "AWS::DynamoDB::Table": complete_table,
    "AWS::S3::Bucket": complete_bucket,
    "AWS::Lambda::Function": complete_function,
}


# What the stack refers to and can only be made after it (a resource of MOTO_CFN_SKIPS that itself
# refers to the stack's resources: the function URL of the stack's function, whose URL the send
# function's environment and an output carry): the stack is given a placeholder for each of its
# values (Placeholders), the resource is made through its API after the stack, and each stack
# resource that carries a placeholder gets the real value through its service's API (RELINKERS),
# then is read back and compared with the template like the rest. An output cannot be changed
# after the stack is made: one carrying a placeholder is reported unchecked.
def placeholder(logical, attribute=None):
    return f"<offline-deploy-placeholder:{logical}" + (f".{attribute}>" if attribute else ">")


class Placeholders(dict):
    """{attribute: placeholder} of a resource made after the stack, each made when first asked."""

    def __init__(self, logical):
        super().__init__()
        self.logical = logical

    def __missing__(self, attribute):
        self[attribute] = placeholder(self.logical, attribute)
        return self[attribute]


def relink_function(aws, physical, live, replacements):
    """Sets the real values in place of the placeholders in the function's environment; returns
    the properties changed."""
    variables = live["config"].get("Environment", {}).get("Variables", {})
    # (as strings: moto's CFN keeps a Number parameter's value as a number, which the API refuses)
    out, changed = {}, []
    for name, value in variables.items():
        text = str(value)
        for marker, real in replacements.items():
            text = text.replace(marker, str(real))
        if text != str(value):
            changed.append(f"Environment.Variables.{name}")
        out[name] = text
    if changed:
        aws.awslambda.update_function_configuration(FunctionName=physical, Environment={"Variables": out})
    return changed


RELINKERS = {
    "AWS::Lambda::Function": relink_function,
}


# ------------------------------------------------------------------------------- the stack's template
def substitute(value, literals):
    """The value with Ref, Fn::GetAtt and Fn::Sub references to `literals` (logical id -> (Ref
    value, {attribute: value})) replaced by their values."""
    if isinstance(value, list):
        return [substitute(v, literals) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (fn, arg), = value.items()
        if fn == "Ref" and arg in literals:
            return literals[arg][0]
        if fn == "Fn::GetAtt":
            logical, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
            if logical in literals:
                return literals[logical][1][attribute]
        if fn == "Fn::Sub":
            text, names = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])

            def one(match):
                ref = match.group(1)
                logical, _, attribute = ref.partition(".")
                if ref in names or logical not in literals:
                    return match.group(0)
                return str(literals[logical][1][attribute] if attribute else literals[logical][0])

            text = re.sub(r"\$\{([^}!][^}]*)\}", one, text)
            return {"Fn::Sub": text if isinstance(arg, str) else [text, substitute(names, literals)]}
    return {k: substitute(v, literals) for k, v in value.items()}


def drop_novalue_items(value, resolver):
    """moto keeps a null in a list where `Fn::If` chose AWS::NoValue (CloudFormation removes the
    item; moto's IAM role model then fails on the null policy): such items are decided here."""
    if isinstance(value, list):
        out = []
        for item in value:
            if isinstance(item, dict) and list(item) == ["Fn::If"] and {"Ref": "AWS::NoValue"} in item["Fn::If"][1:]:
                condition, yes, no = item["Fn::If"]
                item = yes if resolver.condition(condition) else no
                if item == {"Ref": "AWS::NoValue"}:
                    continue
            out.append(drop_novalue_items(item, resolver))
        return out
    if isinstance(value, dict):
        return {k: drop_novalue_items(v, resolver) for k, v in value.items()}
    return value


def moto_workarounds(resource):
    """The resource as moto's CloudFormation can create it, meaning the same."""
    props = resource.get("Properties", {})
    if resource["Type"] == "AWS::KMS::Key" and isinstance(props.get("KeyPolicy"), dict):
        # moto stores a KeyPolicy object as it is, where its KMS API expects the JSON text (every
        # KMS call on the key then answers 500); CloudFormation takes either for a Json property.
        props["KeyPolicy"] = {"Fn::ToJsonString": props["KeyPolicy"]}
    if resource["Type"] == "AWS::IAM::Role":
        # moto stores an inline policy object with str() (GetRolePolicy then answers a Python
        # repr, not JSON): given as JSON text, it answers the document.
        for policy in props.get("Policies", []):
            if isinstance(policy.get("PolicyDocument"), dict):
                policy["PolicyDocument"] = {"Fn::ToJsonString": policy["PolicyDocument"]}
    return resource


def topological(logicals, resources):
    order, seen = [], set()

    def visit(logical, path=()):
        if logical in seen:
            return
        if logical in path:
            raise ValueError(f"dependency cycle through {logical}")
        resource = resources[logical]
        for dep in sorted((references(resource.get("Properties", {})) | depends_on(resource)) & set(logicals)):
            visit(dep, path + (logical,))
        seen.add(logical)
        order.append(logical)

    for logical in sorted(logicals):
        visit(logical)
    return order


# ------------------------------------------------------------------------------- code
def shown(path):
    """A path relative to the repository when inside it."""
    path = os.path.abspath(path)
    return os.path.relpath(path, REPO) if path.startswith(REPO + os.sep) else path


def function_binaries(template, bootstraps):
    """{logical id: (binary, bootstrap path)} for each function, after checking that a crate
    under functions/ declares the binary."""
    declared = {}
    for manifest in glob.glob(os.path.join(REPO, "functions", "*", "Cargo.toml")):
        with open(manifest) as f:
            # [[bin]] name = "..." (or the [package]'s name when there is no [[bin]]); no tomllib
            # (Python 3.11) needed for that.
            sections = re.split(r"^\s*(\[\[?[\w.-]+\]\]?)\s*$", f.read(), flags=re.M)
        names = {"[[bin]]": [], "[package]": []}
        for header, body in zip(sections[1::2], sections[2::2]):
            found = re.search(r'^\s*name\s*=\s*"([^"]+)"', body, re.M)
            if header in names and found:
                names[header].append(found.group(1))
        for binary in names["[[bin]]"] or names["[package]"]:
            declared[binary] = os.path.relpath(manifest, REPO)
    out, problems = {}, []
    for logical, resource in template["Resources"].items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        binary = binary_of(resource)
        if not binary:
            problems.append(f"{logical}: no Metadata.BuildProperties.Binary (BuildMethod rust-cargolambda)")
            continue
        if binary not in declared:
            problems.append(f"{logical}: binary {binary} is declared by no functions/*/Cargo.toml")
        path = os.path.join(bootstraps, binary, "bootstrap")
        if not os.path.isfile(path):
            problems.append(f"{logical}: {shown(path)} is missing: build it first (`make lambda-build-x86`)")
        out[logical] = (binary, path)
    return out, problems


def zip_bootstrap(path):
    """A Lambda zip of one bootstrap, the same bytes for the same binary (fixed timestamp)."""
    buffer = io.BytesIO()
    info = zipfile.ZipInfo("bootstrap", date_time=(1980, 1, 1, 0, 0, 0))
    info.external_attr = 0o100755 << 16
    with open(path, "rb") as f, zipfile.ZipFile(buffer, "w") as z:
        z.writestr(info, f.read(), compress_type=zipfile.ZIP_DEFLATED, compresslevel=1)
    return buffer.getvalue()


# ------------------------------------------------------------------------------- one pass
class Row:
    def __init__(self, logical, rtype, how):
        self.logical, self.rtype, self.how = logical, rtype, how
        self.api_props = []  # properties set through the service's API after the stack
        self.relinked = []  # (property, [logical ids]): a placeholder replaced through the API (DEFERRED)
        self.result = "?"
        self.findings = []
        self.unchecked = []
        self.ok = False


def wait_stack(aws, stack_id, goal):
    deadline = time.monotonic() + STACK_TIMEOUT
    while True:
        stack = aws.cloudformation.describe_stacks(StackName=stack_id)["Stacks"][0]
        status = stack["StackStatus"]
        if not status.endswith("_IN_PROGRESS"):
            if status != goal:
                events = aws.cloudformation.describe_stack_events(StackName=stack_id)["StackEvents"]
                reasons = [f"{e['LogicalResourceId']}: {e.get('ResourceStatusReason')}" for e in events
                           if e.get("ResourceStatus", "").endswith("FAILED")]
                raise RuntimeError(f"stack {status} ({stack.get('StackStatusReason')}); {reasons[:5]}")
            return stack
        if time.monotonic() > deadline:
            raise RuntimeError(f"stack still {status} after {STACK_TIMEOUT} s")
        time.sleep(0.2)


def run_pass(aws, pass_name, overrides, transformed, ctx, selftest):
    started = time.monotonic()
    resources = transformed["Resources"]
    parameters = {k: str(v.get("Default", "")) for k, v in transformed.get("Parameters", {}).items()}
    overrides = {k: v.format(region=ctx["region"], account=ctx["account"]) for k, v in overrides.items()}
    parameters.update(overrides)
    stack_name = f"courier-offline-{ctx['run']}-{pass_name}"
    pseudo = {"AWS::StackName": stack_name, "AWS::Region": ctx["region"], "AWS::AccountId": ctx["account"],
              "AWS::Partition": "aws", "AWS::URLSuffix": "amazonaws.com"}
    resolver = Resolver(transformed, parameters, pseudo)
    pctx = dict(ctx, stack=stack_name)
    active = [logical for logical, r in resources.items() if resolver.active(r)]
    inactive = sorted(set(resources) - set(active))
    rows = {}
    for logical in active:
        rtype = resources[logical]["Type"]
        how = "API (CFN skips the type)" if rtype in MOTO_CFN_SKIPS else "stack"
        rows[logical] = Row(logical, rtype, how)
        if rtype not in SPECS:
            rows[logical].how = "unchecked"
            rows[logical].findings.append(f"no reader for {rtype} in offline-deploy.py")
        elif rtype in UNCHECKABLE and UNCHECKABLE[rtype][0](resources[logical].get("Properties", {})):
            rows[logical].how = f"unchecked: {UNCHECKABLE[rtype][1]}"
            rows[logical].result, rows[logical].ok = "-", True
    by_api = [l for l in active if resources[l]["Type"] in MOTO_CFN_SKIPS and not rows[l].how.startswith("unchecked")]
    in_stack = [l for l in active if resources[l]["Type"] not in MOTO_CFN_SKIPS]
    # The stack's template keeps the resources its conditions turn off, for CloudFormation to leave out.
    stack_resources = [l for l in resources if resources[l]["Type"] not in MOTO_CFN_SKIPS]
    # Created before the stack: what the stack's resources and outputs refer to.
    wanted = set()
    for logical in in_stack:
        wanted |= references(resources[logical].get("Properties", {})) | depends_on(resources[logical])
    wanted |= references(transformed.get("Outputs", {}))
    pre = set()
    todo = [l for l in by_api if l in wanted]
    while todo:
        logical = todo.pop()
        if logical not in pre:
            pre.add(logical)
            todo += [r for r in references(resources[logical].get("Properties", {})) if r in by_api]
    # Of those, what refers to the stack's resources (or to such a one) is made after it (DEFERRED).
    deferred = set()
    while True:
        more = {l for l in pre - deferred
                if (references(resources[l].get("Properties", {})) | depends_on(resources[l]))
                & (set(stack_resources) | deferred)}
        if not more:
            break
        deferred |= more
    pre -= deferred
    post = [l for l in by_api if l not in pre]
    live, physical, created = {}, {}, []  # created: (logical, physical, delete, pre|post) in order
    stack_id = None
    print(f"\n== pass {pass_name}: stack {stack_name}; parameters over the defaults: "
          f"{', '.join(f'{k}={v}' for k, v in overrides.items()) or 'none'}")

    def create_by_api(logical):
        rtype = resources[logical]["Type"]
        props = resolver.resolve(resources[logical].get("Properties", {}))
        physical[logical] = SPECS[rtype].create(aws, pctx, logical, props)
        created.append((logical, physical[logical], SPECS[rtype].delete, "pre" if logical in pre else "post"))
        read_back(logical)

    def read_back(logical):
        rtype = resources[logical]["Type"]
        spec = SPECS[rtype]
        live[logical] = spec.read(aws, physical[logical])
        ref, atts = spec.refs(physical[logical], live[logical])
        resolver.refs[logical] = ref
        resolver.atts.update({(logical, k): v for k, v in atts.items()})

    rows["(Parameters, Rules)"] = check_parameters_and_rules(transformed, parameters, resolver)
    try:
        if not rows["(Parameters, Rules)"].ok:
            raise Stop("CloudFormation would refuse these parameters: nothing created")
        for logical in topological(pre, resources):
            create_by_api(logical)
        literals = {l: (resolver.refs[l], {a: v for (x, a), v in resolver.atts.items() if x == l}) for l in pre}
        literals.update({l: (placeholder(l), Placeholders(l)) for l in deferred})
        stack_template = copy.deepcopy(transformed)
        stack_template["Resources"] = {}
        for logical in stack_resources:
            resource = substitute(copy.deepcopy(resources[logical]), literals)
            if "DependsOn" in resource:
                resource["DependsOn"] = [d for d in listify(resource["DependsOn"]) if d in stack_resources]
            stack_template["Resources"][logical] = moto_workarounds(drop_novalue_items(resource, resolver))
        stack_template["Outputs"] = substitute(transformed.get("Outputs", {}), literals)
        t0 = time.monotonic()
        stack_id = aws.cloudformation.create_stack(
            StackName=stack_name, TemplateBody=json.dumps(stack_template),
            Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in overrides.items()],
            Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"])["StackId"]
        stack = wait_stack(aws, stack_id, "CREATE_COMPLETE")
        print(f"stack {stack['StackStatus']} in {time.monotonic() - t0:.1f} s ({len(stack_resources)} resources in "
              f"its template, {len(in_stack)} on by their conditions; {len(pre)} made through their APIs before it)")
        resolver.pseudo["AWS::StackId"] = stack_id
        summaries = {}
        for page in aws.cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack_id):
            for s in page["StackResourceSummaries"]:
                summaries[s["LogicalResourceId"]] = s
        conditions = Row("(Conditions)", "-", "ListStackResources")
        rows["(Conditions)"] = conditions
        made = sorted(l for l in stack_resources if l not in in_stack and l in summaries)
        if made:
            conditions.findings.append(f"created although their conditions are false: {', '.join(made)}")
        else:
            conditions.ok = True
            conditions.result = f"ok ({len(stack_resources) - len(in_stack)} in the stack's template off, none created)"
        unnamed = []  # created, without a physical id from moto (NO_PHYSICAL_ID)
        for logical in in_stack:
            row = rows[logical]
            s = summaries.get(logical)
            if s and s.get("ResourceStatus") == "CREATE_COMPLETE" and not s.get("PhysicalResourceId") \
                    and row.rtype in NO_PHYSICAL_ID:
                unnamed.append(logical)
                continue
            if not s or s.get("ResourceStatus") != "CREATE_COMPLETE" or not s.get("PhysicalResourceId"):
                row.findings.append(f"MISSING: not among the stack's created resources ({s and s.get('ResourceStatus')})")
                continue
            physical[logical] = s["PhysicalResourceId"]
        elsewhere = []
        for logical in in_stack:
            if logical not in physical:
                continue
            try:
                read_back(logical)
            except Missing as e:
                if rows[logical].rtype == "AWS::StepFunctions::StateMachine":
                    elsewhere.append(logical)
                else:
                    rows[logical].findings.append(f"MISSING: the stack says CREATE_COMPLETE, the service: {short(str(e))}")
        for logical in unnamed:
            try:
                props = resolver.resolve(resources[logical].get("Properties", {}))
                physical[logical] = NO_PHYSICAL_ID[rows[logical].rtype](aws, props, set(physical.values()))
                rows[logical].how = "stack (found by its properties)"
                read_back(logical)
            except (Missing, Unresolved) as e:
                rows[logical].findings.append(f"MISSING: the stack says CREATE_COMPLETE, the service: {short(str(e))}")
        for logical in elsewhere:
            # moto with Step Functions execution on (as the harness runs it) serves the API from
            # another backend than its CloudFormation's (shared/devkit/src/provision.rs): made
            # there from the same properties, under the same name (so the same ARN).
            props = resolver.resolve(resources[logical]["Properties"])
            name = physical[logical].rsplit(":", 1)[1]
            arn = aws.stepfunctions.create_state_machine(
                name=name, definition=props["DefinitionString"], roleArn=props["RoleArn"],
                type=props.get("StateMachineType", "STANDARD"),
                tags=[{"key": t["Key"], "value": t["Value"]} for t in props.get("Tags", [])])["stateMachineArn"]
            created.append((logical, arn, lambda a, p: a.stepfunctions.delete_state_machine(stateMachineArn=p), "post"))
            rows[logical].how = "API (SFN: other backend)"
            if arn != physical[logical]:
                rows[logical].findings.append(f"ARN {arn} differs from the stack's {physical[logical]}")
            read_back(logical)
        # What moto's CloudFormation dropped and the service's API can set (PROPERTY_GAPS).
        for logical in in_stack:
            rtype = resources[logical]["Type"]
            gaps = [p for p, (how, _) in PROPERTY_GAPS.get(rtype, {}).items()
                    if how == "api" and p in resources[logical].get("Properties", {})]
            if gaps and logical in live:
                COMPLETERS[rtype](aws, physical[logical], resolver.resolve(
                    {p: resources[logical]["Properties"][p] for p in gaps}))
                rows[logical].api_props = gaps
                read_back(logical)
        for logical in topological(post, resources):
            create_by_api(logical)
        # The real values in place of the placeholders the stack was given for what was made after it.
        replacements = {}
        for logical in deferred:
            replacements[placeholder(logical)] = resolver.refs[logical]
            for attribute, marker in literals[logical][1].items():
                replacements[marker] = resolver.getatt(logical, attribute)
        for logical in in_stack:
            refers = sorted(references(resources[logical].get("Properties", {})) & deferred)
            if not refers or logical not in live:
                continue
            rtype = resources[logical]["Type"]
            if rtype not in RELINKERS:
                rows[logical].findings.append(f"refers to {', '.join(refers)}, made after the stack: nothing sets "
                                              "the real value in place of the stack's placeholder")
                continue
            changed = RELINKERS[rtype](aws, physical[logical], live[logical], replacements)
            rows[logical].relinked = [(prop, refers) for prop in changed]
            read_back(logical)
        # Compare every resource with the template.
        pctx["queues_by_arn"] = {v["attrs"]["QueueArn"]: v for l, v in live.items()
                                 if resources[l]["Type"] == "AWS::SQS::Queue"}
        pctx["functions_by_arn"] = {v["config"]["FunctionArn"]: v for l, v in live.items()
                                    if resources[l]["Type"] == "AWS::Lambda::Function"}
        for logical in active:
            row = rows[logical]
            if row.how.startswith("unchecked") or logical not in live:
                continue
            try:
                props = resolver.resolve(resources[logical].get("Properties", {}))
            except Unresolved as e:
                row.findings.append(f"cannot resolve the template's value: {e}")
                continue
            try:
                compare(row, props, live[logical], pctx)
            except Exception as e:  # noqa: BLE001 - this row fails, the others are still compared
                row.findings.append(f"comparing it raised {type(e).__name__}: {short(str(e))}")
        rows["(Outputs)"] = check_outputs(aws, stack_id, transformed, resolver, deferred)
        if selftest:
            rows["(self-checks)"] = self_checks(aws, resources, resolver, physical, live, pctx)
    except Exception as e:  # noqa: BLE001 - reported in the table, and fails the run
        if not isinstance(e, Stop):
            traceback.print_exc()
        rows["(run)"] = Row("(run)", "-", "-")
        rows["(run)"].findings.append(f"{type(e).__name__}: {short(str(e), 600)}")
    finally:
        if not ctx["keep"]:
            rows["(teardown)"] = teardown(aws, stack_id, resources, physical, created)
    for row in rows.values():
        if not row.findings and row.result == "?":
            row.result = "not reached"
        elif row.findings:
            row.ok = False
            row.result = "FAIL: " + row.findings[0] if len(row.findings) == 1 else f"FAIL: {len(row.findings)} findings"
    failures = sum(1 for r in rows.values() if not r.ok)
    print_table(rows.values())
    counted = [r for r in rows.values() if not r.logical.startswith("(") and r.result != "not reached"]
    gaps = sorted({(r.rtype, p) for r in counted for p in r.unchecked})
    completed = sorted({(r.rtype, p) for r in counted for p in r.api_props})
    for rtype, prop in completed:
        print(f"  +API  {rtype} {prop}: {PROPERTY_GAPS[rtype][prop][1]}; set through the service's API, read back")
    for r in counted:
        for prop, refers in r.relinked:
            print(f"  +API  {r.logical} {prop}: a placeholder in the stack for {', '.join(refers)} (made through "
                  "its API after the stack, as it refers to the stack's resources); the real value set through "
                  "the service's API, read back")
    outputs_row = rows.get("(Outputs)")
    for key, refers in (outputs_row.unchecked if outputs_row else []):
        print(f"  unchecked  output {key}: refers to {', '.join(refers)}, made through its API after the stack "
              "(moto's CloudFormation cannot create it, and it needs the stack's resources): the stack's output "
              "holds the placeholder it was given, and an output cannot be set after the stack is made (the "
              "value itself is read back and compared in its resource's row)")
    for rtype, prop in gaps:
        print(f"  unchecked  {rtype} {prop}: {PROPERTY_GAPS[rtype][prop][1]}")
    for r in counted:
        if r.how.startswith("unchecked:"):
            print(f"  unchecked  {r.logical} ({r.rtype}): {r.how[len('unchecked: '):]}")
    elapsed = time.monotonic() - started
    n_outputs = len(outputs_row.unchecked if outputs_row else [])
    summary = {
        "resources": sum(1 for r in rows.values() if not r.logical.startswith("(")),
        "stack": sum(1 for r in counted if r.how.startswith("stack")),
        "api": sum(1 for r in counted if r.how.startswith("API")),
        "unchecked": sum(1 for r in counted if r.how.startswith("unchecked")),
        "unchecked_properties": sum(len(r.unchecked) for r in counted) + n_outputs,
        "failed": failures,
        "inactive": len(inactive),
        "seconds": elapsed,
    }
    print(f"pass {pass_name}: {summary['resources']} resources ({len(inactive)} more off by their conditions): "
          f"{summary['stack']} created by the stack and read back, {summary['api']} created through their APIs "
          f"and read back, {summary['unchecked']} unchecked; {summary['unchecked_properties']} properties "
          f"unchecked ({len(gaps)} kinds, {n_outputs} output{'' if n_outputs == 1 else 's'}, above); {failures} failed rows; {elapsed:.1f} s")
    return summary


def check_parameters_and_rules(template, parameters, resolver):
    """What CloudFormation checks before it creates anything and moto does not: each parameter
    value against its Type, AllowedValues, AllowedPattern, Min/MaxValue and Min/MaxLength, and
    the template's Rules."""
    row = Row("(Parameters, Rules)", "-", "evaluated here")
    for name, spec in template.get("Parameters", {}).items():
        value = parameters[name]
        problems = []
        if spec.get("Type") == "Number":
            try:
                number = float(value)
                if "MinValue" in spec and number < float(spec["MinValue"]):
                    problems.append(f"under MinValue {spec['MinValue']}")
                if "MaxValue" in spec and number > float(spec["MaxValue"]):
                    problems.append(f"over MaxValue {spec['MaxValue']}")
            except ValueError:
                problems.append("not a number")
        if "AllowedValues" in spec and value not in [str(v) for v in spec["AllowedValues"]]:
            problems.append(f"not among {spec['AllowedValues']}")
        if "AllowedPattern" in spec and not re.fullmatch(spec["AllowedPattern"], value):
            problems.append(f"does not match {spec['AllowedPattern']}")
        if "MinLength" in spec and len(value) < int(spec["MinLength"]):
            problems.append(f"shorter than {spec['MinLength']}")
        if "MaxLength" in spec and len(value) > int(spec["MaxLength"]):
            problems.append(f"longer than {spec['MaxLength']}")
        if problems:
            row.findings.append(f"parameter {name}={value!r}: {'; '.join(problems)}")
    rules = template.get("Rules", {})
    for name, rule in rules.items():
        if "RuleCondition" in rule and not resolver.evaluate(rule["RuleCondition"]):
            continue
        for assertion in rule.get("Assertions", []):
            if not resolver.evaluate(assertion["Assert"]):
                row.findings.append(f"rule {name}: {assertion.get('AssertDescription', 'assertion fails')}")
    if not row.findings:
        row.result, row.ok = f"ok ({len(parameters)} parameters, {len(rules)} rules)", True
    return row


def compare(row, props, live, ctx):
    ck = Check(row.logical, row.rtype, props, ctx)
    SPECS[row.rtype].check(ck, live)
    for prop in sorted(set(props) - ck.compared - ck.unchecked):
        ck.findings.append(f"{prop}: set by the template, not compared by offline-deploy.py")
    row.findings.extend(ck.findings)
    row.unchecked = sorted(ck.unchecked)
    if not ck.findings:
        row.result, row.ok = f"ok ({len(ck.compared)} compared" + (
            f"; unchecked: {', '.join(row.unchecked)})" if row.unchecked else ")"), True
    return ck


def check_outputs(aws, stack_id, transformed, resolver, deferred=frozenset()):
    """The stack's outputs against the template's; those referring to what was made after the
    stack (DEFERRED) hold a placeholder, and are left unchecked (row.unchecked: (key, refers))."""
    row = Row("(Outputs)", "stack outputs", "DescribeStacks")
    outputs = {o["OutputKey"]: o["OutputValue"] for o in
               aws.cloudformation.describe_stacks(StackName=stack_id)["Stacks"][0].get("Outputs", [])}
    expected = {}
    for key, output in transformed.get("Outputs", {}).items():
        if "Condition" in output and not resolver.condition(output["Condition"]):
            continue
        refers = sorted(references(output["Value"]) & set(deferred))
        if refers:
            row.unchecked.append((key, refers))
            outputs.pop(key, None)
            continue
        expected[key] = resolver.resolve(output["Value"])
    for key in sorted(set(expected) | set(outputs)):
        if canon(expected.get(key)) != canon(outputs.get(key)):
            row.findings.append(f"{key}: template {short(expected.get(key))}, stack {short(outputs.get(key))}")
    if not row.findings:
        row.result, row.ok = f"ok ({len(expected)} outputs" + (
            f"; unchecked: {', '.join(k for k, _ in row.unchecked)})" if row.unchecked else ")"), True
    return row


def self_checks(aws, resources, resolver, physical, live, ctx):
    """Each must be reported: proof that the comparison can fail."""
    row = Row("(self-checks)", "-", "tampered deployments and expectations")
    caught, cases = [], []

    def case(name, logical, props, live_value, needle):
        ck = Check(logical, resources[logical]["Type"], props, ctx) if logical else None
        if ck:
            SPECS[ck.rtype].check(ck, live_value)
            for prop in sorted(set(props) - ck.compared - ck.unchecked):
                ck.findings.append(f"{prop}: set by the template, not compared by offline-deploy.py")
        found = ck.findings if ck else []
        cases.append(name)
        if any(needle in f for f in found):
            caught.append(name)
        else:
            row.findings.append(f"self-check '{name}' not caught (findings: {found})")

    def expected(logical):
        return resolver.resolve(resources[logical]["Properties"])

    queue = next(l for l, r in resources.items() if r["Type"] == "AWS::SQS::Queue" and l in live)
    url = live[queue]["url"]
    retention = live[queue]["attrs"]["MessageRetentionPeriod"]
    aws.sqs.set_queue_attributes(QueueUrl=url, Attributes={"MessageRetentionPeriod": str(int(retention) + 60)})
    case("queue retention changed after creation", queue, expected(queue), read_queue(aws, physical[queue]),
         "MessageRetentionPeriod")
    aws.sqs.set_queue_attributes(QueueUrl=url, Attributes={"MessageRetentionPeriod": retention})

    function = next(l for l, r in resources.items() if r["Type"] == "AWS::Lambda::Function" and l in live)
    # (as strings: moto's CFN keeps a Number parameter's value as a number, which the API refuses)
    variables = {k: str(v) for k, v in live[function]["config"]["Environment"]["Variables"].items()}
    first = sorted(k for k in variables if k.startswith("COURIER_"))[0]
    variables[first] = f"{variables[first]}-tampered"
    aws.awslambda.update_function_configuration(FunctionName=physical[function], Environment={"Variables": variables})
    case(f"function variable {first} changed after creation", function, expected(function),
         read_function(aws, physical[function]), first)

    key = next(l for l, r in resources.items() if r["Type"] == "AWS::KMS::Key" and l in live)
    mutated = json.loads(json.dumps(expected(key)))
    mutated["KeyPolicy"]["Statement"][-1]["Principal"] = {"Service": "sns.amazonaws.com"}
    case("key policy principal mutated in the expectation", key, mutated, live[key], "KeyPolicy")

    mutated = dict(expected(queue), FifoQueue=True)
    case("a template property no check compares", queue, mutated, live[queue], "FifoQueue")

    cases.append("a function that does not exist")
    try:
        read_function(aws, f"{ctx['stack']}-no-such-function")
        row.findings.append("self-check 'a function that does not exist' not caught: it was read")
    except Missing:
        caught.append("a function that does not exist")
    if not row.findings:
        row.result, row.ok = f"ok ({len(caught)}/{len(cases)} caught)", True
    return row


def teardown(aws, stack_id, resources, physical, created):
    """Deletes what was created through the APIs after the stack, the stack, then what was
    created before it (the reverse of creation), and checks through each service that every
    resource is gone."""
    row = Row("(teardown)", "-", "API deletes, DeleteStack, read back")

    def delete(phase):
        for logical, physical_id, remove, when in reversed(created):
            if when != phase or not remove:
                continue
            try:
                remove(aws, physical_id)
            except Exception as e:  # noqa: BLE001 - reported, and the rest still deleted
                row.findings.append(f"{logical}: delete failed: {type(e).__name__}: {short(str(e))}")

    delete("post")
    try:
        if stack_id:
            aws.cloudformation.delete_stack(StackName=stack_id)
            wait_stack(aws, stack_id, "DELETE_COMPLETE")
    except Exception as e:  # noqa: BLE001
        row.findings.append(f"stack deletion: {type(e).__name__}: {short(str(e), 300)}")
    delete("pre")
    api_created = {logical for logical, _, _, _ in created}
    left = []
    for logical, physical_id in physical.items():
        rtype = resources[logical]["Type"]
        if rtype == "AWS::StepFunctions::StateMachine" and logical not in api_created:
            continue  # in a backend the Step Functions API does not serve (see run_pass)
        try:
            SPECS[rtype].read(aws, physical_id)
            left.append(logical)
        except Missing:
            pass
        except Exception as e:  # noqa: BLE001 - reported
            row.findings.append(f"{logical}: reading it after deletion: {type(e).__name__}: {short(str(e))}")
    if left:
        row.findings.append(f"still there after deletion: {', '.join(left)}")
    if not row.findings:
        row.result, row.ok = f"ok ({len(physical)} resources gone)", True
    return row


def print_table(rows):
    rows = list(rows)
    cells = [(r.logical, r.rtype, r.how + (f" +API: {', '.join(r.api_props + [p for p, _ in r.relinked])}"
                                           if r.api_props or r.relinked else ""), r.result)
             for r in rows]
    header = ("logical id", "type", "created by", "read back through the service's API")
    widths = [max(len(c[i]) for c in cells + [header]) for i in range(3)]
    line = f"{{:<{widths[0]}}}  {{:<{widths[1]}}}  {{:<{widths[2]}}}  {{}}"
    print(line.format(*header))
    unreached = [r for r in rows if r.result == "not reached"]
    for row, cell in zip(rows, cells):
        if row in unreached:
            continue
        print(line.format(*cell))
        if len(row.findings) > 1 or (row.findings and len(row.findings[0]) > 100):
            for finding in row.findings:
                print(f"    - {finding}")
    if unreached:
        print(f"FAIL: {len(unreached)} resources not reached (the run stopped): "
              f"{', '.join(r.logical for r in unreached[:8])}{', ...' if len(unreached) > 8 else ''}")


# ------------------------------------------------------------------------------- main
def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--template", default=os.path.join(REPO, "infra", "template.yaml"))
    parser.add_argument("--pass", dest="passes", action="append", choices=sorted(PASSES),
                        help="run only this pass (repeatable; default: all)")
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
    parser.add_argument("--bootstraps", default=os.path.join(os.path.abspath(target), "lambda-x86_64"),
                        help="where <binary>/bootstrap are (default: $CARGO_TARGET_DIR/lambda-x86_64)")
    parser.add_argument("--keep", action="store_true", help="leave the stacks and resources in place")
    args = parser.parse_args()

    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    if urlparse(endpoint).hostname not in ("127.0.0.1", "localhost", "::1"):
        print(f"offline-deploy: AWS_ENDPOINT_URL={endpoint!r} is not a local emulator; refusing to run "
              "(run it with `make deploy-offline`, which starts moto)")
        return 2
    os.environ.setdefault("AWS_DEFAULT_REGION", os.environ.get("AWS_REGION", "us-east-1"))
    started = time.monotonic()
    template = read_template(args.template)
    binaries, problems = function_binaries(template, args.bootstraps)
    if problems:
        for problem in problems:
            print(f"offline-deploy: {problem}")
        return 2
    aws = Aws()
    region = aws.sts.meta.region_name
    account = aws.sts.get_caller_identity()["Account"]
    run = uuid.uuid4().hex[:8]
    code_bucket = f"courier-offline-code-{run}"
    aws.s3.create_bucket(Bucket=code_bucket)
    zips = {}
    t0 = time.monotonic()
    for logical, (binary, path) in sorted(binaries.items()):
        key = f"{binary}.zip"
        if (code_bucket, key) not in zips:
            body = zip_bootstrap(path)
            aws.s3.put_object(Bucket=code_bucket, Key=key, Body=body)
            zips[(code_bucket, key)] = {"sha256": base64.b64encode(hashlib.sha256(body).digest()).decode(),
                                        "size": len(body)}
    print(f"offline-deploy: {len(zips)} function zips ({sum(z['size'] for z in zips.values()) // 2**20} MiB, "
          f"from {shown(args.bootstraps)}) uploaded to s3://{code_bucket} in {time.monotonic() - t0:.1f} s; "
          f"functions: {', '.join(f'{l}={b}' for l, (b, _) in sorted(binaries.items()))}")

    def code_uri(logical, resource):
        return f"s3://{code_bucket}/{binaries[logical][0]}.zip"

    transformed = sam_transform(template, code_uri, region)
    ctx = {"run": run, "region": region, "account": account, "zips": zips, "keep": args.keep}
    summaries = {}
    try:
        for i, name in enumerate(args.passes or list(PASSES)):
            summaries[name] = run_pass(aws, name, PASSES[name], transformed, ctx, selftest=(i == 0))
    finally:
        if not args.keep:
            for obj in aws.s3.list_objects_v2(Bucket=code_bucket).get("Contents", []):
                aws.s3.delete_object(Bucket=code_bucket, Key=obj["Key"])
            aws.s3.delete_bucket(Bucket=code_bucket)
    failed = sum(s["failed"] for s in summaries.values())
    print(f"\noffline-deploy: {len(summaries)} passes, "
          + "; ".join(f"{n}: {s['stack']} by the stack + {s['api']} through APIs read back, {s['unchecked']} unchecked"
                      for n, s in summaries.items())
          + f"; {failed} failed rows; {time.monotonic() - started:.1f} s in all")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
