"""An AWS Lambda function for Courier's outcome events: the target of an EventBridge rule on the
stack's outcome bus (docs/outcomes.md). `event` is the EventBridge envelope (`source`,
`detail-type`, `detail`). Needs courier_client in the deployment package, the table's name in
SEEN_TABLE (partition key `event_id`, a string; TTL on `expires`), and dynamodb:PutItem and
dynamodb:DeleteItem on it."""

import os
import time

import boto3

from courier_client import Outcome

SEEN = boto3.resource("dynamodb").Table(os.environ["SEEN_TABLE"])
KEEP_SECONDS = 7 * 24 * 3600  # longer than any redelivery (EventBridge retries for 24 h at most)


def handler(event, context):
    outcome = Outcome.from_event(event)  # ValueError: not a Courier outcome event
    # Delivery is at least once: Courier republishes an outcome whose publication it cannot
    # confirm, and EventBridge and Lambda retry their own deliveries. Each outcome has one
    # event_id however often it arrives, so the first put of it wins and the others are dropped.
    try:
        SEEN.put_item(
            Item={"event_id": outcome.event_id, "expires": int(time.time()) + KEEP_SECONDS},
            ConditionExpression="attribute_not_exists(event_id)",
        )
    except SEEN.meta.client.exceptions.ConditionalCheckFailedException:
        return {"duplicate": outcome.event_id}
    try:
        dispatch(outcome)
    except Exception:
        # Not handled after all: forget it, so the retry of this event is not dropped.
        SEEN.delete_item(Key={"event_id": outcome.event_id})
        raise
    return {"handled": outcome.event_id}


def dispatch(outcome: Outcome) -> None:
    order = outcome.metadata.get("order")  # the job's own metadata, as build_job was given it
    if outcome.outcome == "delivered":
        print(f"order {order}: delivered to the recipient's server at {outcome.at:%H:%M:%S}")
    elif outcome.outcome in ("bounced", "complained", "suppressed"):
        print(f"order {order}: stop mailing this address ({outcome.outcome}: {outcome.reason})")
    elif outcome.outcome in ("dead_lettered", "failed"):
        print(f"order {order}: not sent ({outcome.reason}); see Courier's dead letters")
    elif outcome.outcome == "sent" and outcome.final:
        print(f"order {order}: handed to the SMTP relay, the last thing Courier learns")
    # "sent" with final false (SES): delivered, bounced or complained follows.
