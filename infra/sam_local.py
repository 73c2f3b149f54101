"""infra/template.yaml as `sam deploy` would hand it to CloudFormation, made locally.

The template is read as CloudFormation reads it (cfn-lint's decoder: YAML short forms such as
!Ref become their long forms) and SAM's transform runs here (aws-sam-translator), as the SAM
CLI runs it before `CreateChangeSet`: each AWS::Serverless::Function becomes a function, its
role (policy templates such as SQSSendMessagePolicy expanded into inline policies), its event
source mappings and schedules; the state machine becomes AWS::StepFunctions::StateMachine.

Shared by infra/iam-lint.py (the IAM lint) and infra/offline-deploy.py (the whole stack on moto).
"""

import copy
import os

from cfnlint.decode import decode
from samtranslator.translator.transform import transform

# What the IAM lint points every function's code at: any s3:// URI does for the transform.
PLACEHOLDER_CODE_URI = "s3://courier-build/function.zip"


class NoManagedPolicies:
    """SAM asks IAM for managed policies named in a function's Policies; the template names none
    (it uses ARNs and policy templates), so nothing is looked up."""

    def load(self):
        return {}


def read_template(path):
    """The template as CloudFormation reads it; raises ValueError when it does not decode."""
    template, matches = decode(path)
    if matches:
        raise ValueError(f"{path}: does not decode: {matches}")
    return template


def binary_of(resource):
    """The cargo binary a function is built from (Metadata.BuildProperties.Binary, what
    `sam build`'s rust-cargolambda build method reads), or None."""
    metadata = resource.get("Metadata") or {}
    if metadata.get("BuildMethod") != "rust-cargolambda":
        return None
    return (metadata.get("BuildProperties") or {}).get("Binary")


def sam_transform(template, code_uri=None, region="us-east-1"):
    """The transformed template (a new dict; `template` is not changed). Each function's CodeUri
    becomes `code_uri(logical_id, resource)` when given, else PLACEHOLDER_CODE_URI."""
    template = copy.deepcopy(template)
    for logical, resource in template.get("Resources", {}).items():
        if resource.get("Type") == "AWS::Serverless::Function":
            uri = code_uri(logical, resource) if code_uri else PLACEHOLDER_CODE_URI
            resource["Properties"]["CodeUri"] = uri
    # The translator builds ARNs for the region it is told (boto3's default region).
    os.environ.setdefault("AWS_DEFAULT_REGION", region)
    return transform(template, {}, NoManagedPolicies())
