"""Smoke test of a running LocalStack for the features Courier relies on.

    $COURIER_CACHE/venv-localstack/bin/python localstack/verify.py http://127.0.0.1:PORT

Uses the boto3 of the LocalStack venv. Exits non-zero on the first failure; prints one line per check.
"""

import json
import sys
import time
import uuid

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError


def main(endpoint: str) -> None:
    session = boto3.Session(
        aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
    )
    cfg = Config(retries={"max_attempts": 1}, s3={"addressing_style": "path"})

    def client(name: str):
        return session.client(name, endpoint_url=endpoint, config=cfg)

    sqs, ddb, s3, sfn = client("sqs"), client("dynamodb"), client("s3"), client("stepfunctions")
    suffix = uuid.uuid4().hex[:8]

    def check(name: str, fn) -> None:
        t0 = time.monotonic()
        fn()
        print(f"ok   {name} ({time.monotonic() - t0:.2f} s)", flush=True)

    # --- SQS: RedrivePolicy moves a message to the DLQ, StartMessageMoveTask moves it back.
    dlq_url = sqs.create_queue(QueueName=f"dlq-{suffix}")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    q_url = sqs.create_queue(
        QueueName=f"q-{suffix}",
        Attributes={
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "1"}),
            "VisibilityTimeout": "1",
        },
    )["QueueUrl"]
    q_arn = sqs.get_queue_attributes(QueueUrl=q_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]

    def receive_one(url: str, wait: int = 5) -> dict | None:
        got = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=1, WaitTimeSeconds=wait, MessageAttributeNames=["All"]
        ).get("Messages", [])
        return got[0] if got else None

    def redrive() -> None:
        sqs.send_message(
            QueueUrl=q_url,
            MessageBody="poison",
            MessageAttributes={"k": {"DataType": "String", "StringValue": "v"}},
        )
        assert receive_one(q_url) is not None, "first receive got nothing"
        time.sleep(1.2)  # let the visibility timeout pass; the next receive exceeds maxReceiveCount
        assert receive_one(q_url, wait=1) is None, "message was not moved to the DLQ"
        msg = receive_one(dlq_url)
        assert msg and msg["Body"] == "poison", f"DLQ got {msg}"
        assert msg["MessageAttributes"]["k"]["StringValue"] == "v", "attributes lost"
        sqs.change_message_visibility(
            QueueUrl=dlq_url, ReceiptHandle=msg["ReceiptHandle"], VisibilityTimeout=0
        )

    check("sqs RedrivePolicy -> DLQ", redrive)

    def move_task() -> None:
        sqs.start_message_move_task(SourceArn=dlq_arn, DestinationArn=q_arn)
        deadline = time.monotonic() + 20
        while True:
            tasks = sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"]
            if tasks and tasks[0]["Status"] == "COMPLETED":
                break
            assert time.monotonic() < deadline, f"move task not completed: {tasks}"
            time.sleep(0.3)
        msg = receive_one(q_url)
        assert msg and msg["Body"] == "poison", f"source queue got {msg}"
        sqs.delete_message(QueueUrl=q_url, ReceiptHandle=msg["ReceiptHandle"])

    check("sqs StartMessageMoveTask DLQ -> source", move_task)

    # --- DynamoDB: CreateTable is fast (no download), conditional put fails the second time.
    table = f"t-{suffix}"

    def create_table() -> None:
        ddb.create_table(
            TableName=table,
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        ddb.get_waiter("table_exists").wait(
            TableName=table, WaiterConfig={"Delay": 1, "MaxAttempts": 20}
        )

    check("dynamodb CreateTable", create_table)

    def conditional_put() -> None:
        item = {"pk": {"S": "msg-1"}, "status": {"S": "SENT"}}
        ddb.put_item(TableName=table, Item=item, ConditionExpression="attribute_not_exists(pk)")
        try:
            ddb.put_item(TableName=table, Item=item, ConditionExpression="attribute_not_exists(pk)")
        except ClientError as e:
            code = e.response["Error"]["Code"]
            assert code == "ConditionalCheckFailedException", code
        else:
            raise AssertionError("second conditional PutItem succeeded")

    check("dynamodb conditional PutItem fails the second time", conditional_put)

    # --- S3
    def s3_roundtrip() -> None:
        bucket = f"b-{suffix}"
        s3.create_bucket(Bucket=bucket)
        s3.put_object(Bucket=bucket, Key="a/b.eml", Body=b"hello")
        assert s3.get_object(Bucket=bucket, Key="a/b.eml")["Body"].read() == b"hello"

    check("s3 CreateBucket/PutObject/GetObject", s3_roundtrip)

    # --- Step Functions: Wait(SecondsPath) then sqs:sendMessage.
    def step_functions() -> None:
        target_url = sqs.create_queue(QueueName=f"sfn-{suffix}")["QueueUrl"]
        definition = {
            "StartAt": "Wait",
            "States": {
                "Wait": {"Type": "Wait", "SecondsPath": "$.delay", "Next": "Send"},
                "Send": {
                    "Type": "Task",
                    "Resource": "arn:aws:states:::sqs:sendMessage",
                    "Parameters": {"QueueUrl.$": "$.queue", "MessageBody.$": "$.body"},
                    "End": True,
                },
            },
        }
        sm_arn = sfn.create_state_machine(
            name=f"delay-{suffix}",
            definition=json.dumps(definition),
            roleArn="arn:aws:iam::000000000000:role/sfn",
        )["stateMachineArn"]
        t0 = time.monotonic()
        ex = sfn.start_execution(
            stateMachineArn=sm_arn,
            input=json.dumps({"delay": 2, "queue": target_url, "body": "delayed"}),
        )["executionArn"]
        deadline = time.monotonic() + 30
        while (status := sfn.describe_execution(executionArn=ex)["status"]) == "RUNNING":
            assert time.monotonic() < deadline, "execution still RUNNING"
            time.sleep(0.2)
        assert status == "SUCCEEDED", status
        assert time.monotonic() - t0 >= 2, "Wait state did not wait"
        msg = receive_one(target_url)
        assert msg and msg["Body"] == "delayed", f"queue got {msg}"

    check("stepfunctions Wait(SecondsPath) -> sqs:sendMessage", step_functions)

    # --- CloudFormation: a queue and a table.
    def cloudformation() -> None:
        cfn = client("cloudformation")
        template = {
            "Resources": {
                "Q": {"Type": "AWS::SQS::Queue"},
                "T": {
                    "Type": "AWS::DynamoDB::Table",
                    "Properties": {
                        "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
                        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
                        "BillingMode": "PAY_PER_REQUEST",
                    },
                },
            },
            "Outputs": {"QueueUrl": {"Value": {"Ref": "Q"}}},
        }
        name = f"s-{suffix}"
        cfn.create_stack(StackName=name, TemplateBody=json.dumps(template))
        cfn.get_waiter("stack_create_complete").wait(
            StackName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
        )

    check("cloudformation stack with queue + table", cloudformation)

    # --- The other services answer.
    check("sts GetCallerIdentity", lambda: client("sts").get_caller_identity())
    check("iam CreateRole", lambda: client("iam").create_role(
        RoleName=f"r-{suffix}", AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []})))
    check("sns CreateTopic", lambda: client("sns").create_topic(Name=f"topic-{suffix}"))
    check("events PutRule", lambda: client("events").put_rule(
        Name=f"rule-{suffix}", ScheduleExpression="rate(1 hour)"))
    check("logs CreateLogGroup", lambda: client("logs").create_log_group(logGroupName=f"/g/{suffix}"))
    check("lambda ListFunctions", lambda: client("lambda").list_functions())
    print("all checks passed")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: verify.py ENDPOINT_URL")
    main(sys.argv[1])
