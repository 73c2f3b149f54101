"""IAM lint of infra/template.yaml: every identity policy the deployed stack would hold, checked
by parliament (an IAM linter that knows AWS's actions, resource types and condition keys).

The template is read as CloudFormation reads it (cfn-lint's decoder), SAM's transform is run
locally (aws-sam-translator, as `sam deploy` would: the functions' policy templates such as
SQSSendMessagePolicy become the roles' inline policies), and each role's and policy's documents
are checked with their intrinsic functions resolved to ARNs of the right shape for their resource
types (placeholder account, region and names), so parliament can match each action against the
resource types it accepts. Any finding fails the run, except the ones listed in ALLOWED with
their reason.

Usage: python infra/iam-lint.py [infra/template.yaml]   (run by `make lint-infra`)
"""

import json
import os
import re
import sys

from parliament import analyze_policy_string

sys.dont_write_bytecode = True  # no __pycache__ in infra/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sam_local import read_template, sam_transform  # noqa: E402 (infra/ is not a package)

ACCOUNT = "123456789012"
REGION = "eu-west-1"
PSEUDO = {"AWS::AccountId": ACCOUNT, "AWS::Region": REGION, "AWS::Partition": "aws",
          "AWS::StackName": "courier", "AWS::URLSuffix": "amazonaws.com"}

# Parameters whose default is empty, as a deployment that sets them would (so a conditional
# grant is checked with a value of the right shape).
EXAMPLES = {
    "SmtpCredentialsSecretArn": f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:courier-smtp-AbCdEf",
    "EventsReplayRoleArn": f"arn:aws:iam::{ACCOUNT}:role/courier-replay",
    # The send policy's ses:FromAddress condition is built from it (Fn::Split of Fn::Sub).
    "AllowedSenders": "news@courier.example,courier.example",
}

# Findings that are expected, with why. Keyed by (issue, action-or-empty).
ALLOWED = {
    # SAM's policy templates carry no Version; IAM then reads them as 2008-10-17, which differs
    # only in lacking policy variables (${aws:...}), which no policy here uses.
    ("NO_VERSION", ""): "SAM's policy templates have no Version",
    # X-Ray and CloudWatch metrics have no resource-level permissions: "*" is the only resource.
    ("RESOURCE_STAR", "xray:PutTraceSegments"): "X-Ray takes no resource ARN",
    ("RESOURCE_STAR", "xray:PutTelemetryRecords"): "X-Ray takes no resource ARN",
}


def arn_of(logical_id, resource, attribute="Arn"):
    """An ARN (or name, URL) of the right shape for a resource of the template."""
    kind = resource.get("Type", "")
    name = "courier-" + re.sub(r"(?<!^)(?=[A-Z])", "-", logical_id).lower()
    arns = {
        "AWS::SQS::Queue": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}",
        "AWS::DynamoDB::Table": f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}",
        "AWS::S3::Bucket": f"arn:aws:s3:::{name}",
        "AWS::SNS::Topic": f"arn:aws:sns:{REGION}:{ACCOUNT}:{name}",
        "AWS::KMS::Key": f"arn:aws:kms:{REGION}:{ACCOUNT}:key/00000000-0000-0000-0000-000000000000",
        "AWS::Logs::LogGroup": f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{name}:*",
        "AWS::Lambda::Function": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{name}",
        "AWS::StepFunctions::StateMachine": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{name}",
        "AWS::Events::Rule": f"arn:aws:events:{REGION}:{ACCOUNT}:rule/{name}",
        "AWS::Events::EventBus": f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/{name}",
        "AWS::IAM::Role": f"arn:aws:iam::{ACCOUNT}:role/{name}",
        "AWS::SES::ConfigurationSet": name,
        "AWS::SecretsManager::Secret": f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{name}-AbCdEf",
    }
    if attribute in ("QueueName", "Name", "TopicName"):
        return name
    if kind == "AWS::SQS::Queue" and attribute is None:
        return f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{name}"
    if kind in ("AWS::StepFunctions::StateMachine", "AWS::SecretsManager::Secret") and attribute is None:
        return arns[kind]
    if attribute is None and kind not in ("AWS::SNS::Topic",):
        return name
    return arns.get(kind, f"arn:aws:unknown:{REGION}:{ACCOUNT}:{name}")


def resolve(value, resources, parameters):
    """The value with Ref, Fn::GetAtt, Fn::Sub, Fn::Join, Fn::Split and Fn::If resolved (If: first
    branch)."""
    if isinstance(value, list):
        return [resolve(v, resources, parameters) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (key, arg), = value.items()
        if key == "Ref":
            if arg in PSEUDO:
                return PSEUDO[arg]
            if arg in resources:
                return arn_of(arg, resources[arg], None)
            if arg in EXAMPLES:
                return EXAMPLES[arg]
            return str(parameters.get(arg, {}).get("Default", arg)) or arg
        if key == "Fn::GetAtt":
            logical, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
            return arn_of(logical, resources.get(logical, {}), attribute)
        if key == "Fn::Sub":
            text, names = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])

            def sub(m):
                ref = m.group(1)
                if ref in names:
                    return str(resolve(names[ref], resources, parameters))
                if "." in ref:
                    logical, attribute = ref.split(".", 1)
                    return arn_of(logical, resources.get(logical, {}), attribute)
                return str(resolve({"Ref": ref}, resources, parameters))

            return re.sub(r"\$\{([^}!]+)\}", sub, text)
        if key == "Fn::Join":
            sep, parts = arg
            return sep.join(str(p) for p in resolve(parts, resources, parameters))
        if key == "Fn::Split":
            sep, text = arg
            return str(resolve(text, resources, parameters)).split(sep)
        if key == "Fn::If":
            return resolve(arg[1], resources, parameters)
    return {k: resolve(v, resources, parameters) for k, v in value.items()}


def identity_policies(template):
    """(where, policy document) of every role's inline policy and every IAM policy resource."""
    resources = template.get("Resources", {})
    for logical, resource in resources.items():
        props = resource.get("Properties", {})
        if resource.get("Type") == "AWS::IAM::Role":
            for policy in props.get("Policies", []):
                # A conditional policy (Fn::If): the branch that grants, checked as if it held.
                while isinstance(policy, dict) and "Fn::If" in policy:
                    policy = policy["Fn::If"][1]
                if isinstance(policy, dict) and "PolicyDocument" in policy:
                    yield f"{logical}/{policy.get('PolicyName')}", policy["PolicyDocument"]
        if resource.get("Type") in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            yield logical, props["PolicyDocument"]


# Functions anyone may invoke (resource policies with Principal "*"), and how: only through their
# function URL, as Lambda requires for AuthType NONE since October 2025 (both lambda:InvokeFunctionUrl
# with FunctionUrlAuthType NONE and lambda:InvokeFunction with InvokedViaFunctionUrl,
# https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html).
PUBLIC_THROUGH_URL = {"UnsubscribeFunction"}


def public_permission_findings(resources):
    """Findings on the transformed template's AWS::Lambda::Permission resources: a public one
    for a function not in PUBLIC_THROUGH_URL, or not limited to the URL; a listed function
    lacking either of the two permissions its URL needs."""
    findings, seen = [], {}
    for logical, resource in resources.items():
        if resource.get("Type") != "AWS::Lambda::Permission":
            continue
        props = resource.get("Properties", {})
        if props.get("Principal") != "*":
            continue
        target = props.get("FunctionName")
        function = next(iter(target.values())) if isinstance(target, dict) else target
        if isinstance(function, list):
            function = function[0]
        action = props.get("Action")
        via_url = (action == "lambda:InvokeFunctionUrl" and props.get("FunctionUrlAuthType") == "NONE") or (
            action == "lambda:InvokeFunction" and props.get("InvokedViaFunctionUrl") is True)
        if function not in PUBLIC_THROUGH_URL:
            findings.append(f"{logical}: {function} may be invoked by anyone ({action})")
        elif not via_url:
            findings.append(f"{logical}: {function}'s public {action} is not limited to its function URL")
        else:
            seen.setdefault(function, set()).add(action)
    for function in sorted(PUBLIC_THROUGH_URL):
        missing = {"lambda:InvokeFunctionUrl", "lambda:InvokeFunction"} - seen.get(function, set())
        if missing:
            findings.append(f"{function}: its public URL lacks {sorted(missing)} (AuthType NONE needs both)")
    return findings


def main(path):
    try:
        template = read_template(path)
    except ValueError as e:
        print(e)
        return 1
    transformed = sam_transform(template, region=REGION)
    resources = transformed.get("Resources", {})
    parameters = transformed.get("Parameters", {})
    checked, failures = 0, []
    for where, document in identity_policies(transformed):
        document = resolve(document, resources, parameters)
        checked += 1
        for finding in analyze_policy_string(json.dumps(document)).findings:
            location = finding.location or {}
            action = location.get("action", "") if isinstance(location, dict) else ""
            if (finding.issue, action) in ALLOWED:
                continue
            failures.append(f"{where}: {finding.issue} {finding.detail} {location}")
    public = public_permission_findings(resources)
    failures.extend(public)
    for failure in failures:
        print(failure)
    print(f"iam-lint: {checked} policies checked, {len(failures)} findings"
          f" (public invoke permissions: {len(public)} findings)")
    if checked == 0:
        print("iam-lint: no policy found: the transform did not run as expected")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "infra/template.yaml"))
