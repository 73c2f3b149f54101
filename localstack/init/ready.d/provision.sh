#!/usr/bin/env bash
# LocalStack "ready" hook: deploys Courier's stack (infra/template.yaml) as CloudFormation stack
# `courier`. Fails (non-zero, message on stderr) if the template is missing or the deploy fails.
#
# In Docker (localstack/docker-compose.yml) LocalStack runs it from /etc/localstack/init/ready.d/,
# with infra/ mounted at /opt/courier/infra and `awslocal` on the PATH.
# On the host: AWS_ENDPOINT_URL=http://127.0.0.1:PORT localstack/init/ready.d/provision.sh
# (uses `aws` from the LocalStack venv, or from PATH; without AWS_ENDPOINT_URL it targets
# http://$LOCALSTACK_HOST, which LocalStack sets for its hooks, else http://localhost:4566).
# Env: COURIER_TEMPLATE (template path), COURIER_STACK_NAME (default courier),
#      COURIER_STACK_PARAMETERS (space-separated Key=Value pairs), COURIER_DEPLOY_TIMEOUT (s, 300).
set -euo pipefail

REPO=$(cd "$(dirname "$(readlink -f "$0")")/../../.." && pwd)

die() { echo "provision.sh: ERROR: $*" >&2; exit 1; }

if [[ -n ${COURIER_TEMPLATE:-} ]]; then
    TEMPLATE=$COURIER_TEMPLATE
elif [[ -d /opt/courier/infra ]]; then
    TEMPLATE=/opt/courier/infra/template.yaml
else
    TEMPLATE=$REPO/infra/template.yaml
fi
STACK=${COURIER_STACK_NAME:-courier}

[[ -f $TEMPLATE ]] || die "CloudFormation template not found at $TEMPLATE: infra/template.yaml must exist (in Docker, infra/ is mounted at /opt/courier/infra)"

export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-test}
export AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-test}
export AWS_DEFAULT_REGION=${AWS_DEFAULT_REGION:-${AWS_REGION:-us-east-1}}

if command -v awslocal >/dev/null 2>&1 && [[ -z ${AWS_ENDPOINT_URL:-} ]]; then
    AWS=(awslocal)
else
    aws_bin=${COURIER_CACHE:-$REPO/.cache}/venv-localstack/bin/aws
    [[ -x $aws_bin ]] || aws_bin=$(command -v aws) \
        || die "neither awslocal nor aws found (run localstack/install.sh for host mode)"
    AWS=("$aws_bin" --endpoint-url "${AWS_ENDPOINT_URL:-http://${LOCALSTACK_HOST:-localhost:4566}}")
fi

# Same steps as `aws cloudformation deploy` (change set, execute, wait), but polling every second:
# the CLI's built-in waiters sleep 30 s between checks, which made a local deploy take 30 s.
cfn() { "${AWS[@]}" cloudformation "$@"; }
fail_events() {
    cfn describe-stack-events --stack-name "$STACK" --output text \
        --query 'StackEvents[?contains(ResourceStatus, `FAILED`)].[LogicalResourceId,ResourceType,ResourceStatusReason]' >&2 || true
}
deadline=$((SECONDS + ${COURIER_DEPLOY_TIMEOUT:-300}))

status=$(cfn describe-stacks --stack-name "$STACK" --query 'Stacks[0].StackStatus' --output text 2>/dev/null || echo NONE)
case $status in
    NONE|REVIEW_IN_PROGRESS) type=CREATE ;;
    ROLLBACK_COMPLETE) die "stack $STACK is in ROLLBACK_COMPLETE from an earlier failed create; delete it first" ;;
    *) type=UPDATE ;;
esac

params=()
for kv in ${COURIER_STACK_PARAMETERS:-}; do
    [[ $kv == *=* ]] || die "COURIER_STACK_PARAMETERS entry '$kv' is not Key=Value"
    params+=("ParameterKey=${kv%%=*},ParameterValue=${kv#*=}")
done

echo "provision.sh: deploying $TEMPLATE as stack $STACK ($type)" >&2
change_set=courier-$(date +%Y%m%d%H%M%S)
cfn create-change-set --stack-name "$STACK" --change-set-name "$change_set" --change-set-type "$type" \
    --template-body "file://$TEMPLATE" \
    --capabilities CAPABILITY_IAM CAPABILITY_NAMED_IAM CAPABILITY_AUTO_EXPAND \
    ${params[@]:+--parameters "${params[@]}"} >/dev/null \
    || die "CreateChangeSet for stack $STACK from $TEMPLATE was rejected (see the error above)"

while :; do
    read -r cs_status cs_reason < <(cfn describe-change-set --stack-name "$STACK" --change-set-name "$change_set" \
        --query '[Status,StatusReason]' --output text) || die "DescribeChangeSet failed"
    case $cs_status in
        CREATE_COMPLETE) break ;;
        FAILED)
            if [[ $cs_reason == *"didn't contain changes"* || $cs_reason == *"No updates"* ]]; then
                cfn delete-change-set --stack-name "$STACK" --change-set-name "$change_set" >/dev/null 2>&1 || true
                echo "provision.sh: stack $STACK is up to date" >&2
                exit 0
            fi
            die "change set for stack $STACK failed: $cs_reason" ;;
    esac
    ((SECONDS < deadline)) || die "change set for stack $STACK still $cs_status after ${COURIER_DEPLOY_TIMEOUT:-300} s"
    sleep 1
done

cfn execute-change-set --stack-name "$STACK" --change-set-name "$change_set" >/dev/null \
    || die "ExecuteChangeSet for stack $STACK failed"
while :; do
    status=$(cfn describe-stacks --stack-name "$STACK" --query 'Stacks[0].StackStatus' --output text) \
        || die "DescribeStacks failed"
    case $status in
        CREATE_COMPLETE|UPDATE_COMPLETE) break ;;
        *ROLLBACK*|*FAILED)
            fail_events
            die "deploying stack $STACK from $TEMPLATE failed: $status (failed resources above)" ;;
    esac
    ((SECONDS < deadline)) || die "stack $STACK still $status after ${COURIER_DEPLOY_TIMEOUT:-300} s"
    sleep 1
done

cfn describe-stacks --stack-name "$STACK" --query 'Stacks[0].Outputs' --output table || true
echo "provision.sh: stack $STACK deployed ($status)" >&2
