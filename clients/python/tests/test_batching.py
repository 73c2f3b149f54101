"""Batch splitting, retries and encoding, with a fake SQS client (no network)."""

import json

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from support import base_job

from courier_client import SQS_MAX_BYTES, ConfigError, CourierQueue, InvalidJob, encode, sqs_batches

K = 1024


def test_batches_hold_ten_messages_at_most():
    assert sqs_batches([1] * 23) == [range(0, 10), range(10, 20), range(20, 23)]
    assert sqs_batches([]) == []


def test_batches_hold_one_mebibyte_at_most():
    # Four 300 KiB bodies: three fit in 1 MiB, the fourth starts the next batch.
    assert sqs_batches([300 * K] * 4) == [range(0, 3), range(3, 4)]
    # Exactly the limit fits; one byte more does not.
    assert sqs_batches([512 * K, 512 * K]) == [range(0, 2)]
    assert sqs_batches([512 * K, 512 * K + 1]) == [range(0, 1), range(1, 2)]
    # An oversized message is alone, and its neighbours batch as usual.
    assert sqs_batches([10, SQS_MAX_BYTES + 1, 10, 10]) == [range(0, 1), range(1, 2), range(2, 4)]


def test_every_message_is_in_exactly_one_batch_in_order():
    sizes = [(i * 7919) % 400_000 for i in range(200)]
    batches = sqs_batches(sizes)
    assert [i for batch in batches for i in batch] == list(range(200))
    for batch in batches:
        assert len(batch) <= 10
        assert sum(sizes[i] for i in batch) <= SQS_MAX_BYTES or len(batch) == 1


def throttled():
    return ClientError(
        {
            "Error": {"Code": "ServiceUnavailable", "Message": "try later"},
            "ResponseMetadata": {"HTTPStatusCode": 503},
        },
        "SendMessageBatch",
    )


class FakeSqs:
    """Records SendMessageBatch calls; `script` says per call what happens: an exception to
    raise, or a dict entry id -> (code, sender_fault) of entries to fail (others succeed)."""

    def __init__(self, *script):
        self.script = list(script)
        self.calls = []

    def send_message_batch(self, QueueUrl, Entries):
        self.calls.append([json.loads(entry["MessageBody"])["message_id"] for entry in Entries])
        step = self.script.pop(0) if self.script else {}
        if isinstance(step, Exception):
            raise step
        ok = [e for e in Entries if e["Id"] not in step]
        failed = [e for e in Entries if e["Id"] in step]
        return {
            "Successful": [{"Id": e["Id"], "MessageId": "sqs-" + e["Id"]} for e in ok],
            "Failed": [
                {
                    "Id": e["Id"],
                    "Code": step[e["Id"]][0],
                    "Message": "m",
                    "SenderFault": step[e["Id"]][1],
                }
                for e in failed
            ],
        }


def jobs(n):
    return [base_job(message_id=f"m-{i}") for i in range(n)]


def queue(sqs, **options):
    sleeps = []
    return CourierQueue("https://sqs.example/q", sqs=sqs, sleep=sleeps.append, **options), sleeps


def test_only_failed_entries_that_are_not_the_senders_fault_are_retried():
    sqs = FakeSqs({"3": ("InternalError", False), "5": ("InvalidMessageContents", True)})
    q, sleeps = queue(sqs)
    results = q.send_batch(jobs(8))
    assert sqs.calls == [[f"m-{i}" for i in range(8)], ["m-3"]]
    assert sleeps == [0.1]
    assert [r.message_id for r in results] == [f"m-{i}" for i in range(8)]
    assert [r.ok for r in results] == [True] * 5 + [False] + [True] * 2
    assert (
        results[3].attempts == 2
        and results[3].error_code is None
        and results[3].sqs_message_id == "sqs-3"
    )
    assert (results[5].error_code, results[5].attempts) == ("InvalidMessageContents", 1)
    assert results[0].attempts == 1 and results[0].sqs_message_id == "sqs-0"


def test_a_call_that_failed_transiently_is_repeated_whole():
    sqs = FakeSqs(throttled(), EndpointConnectionError(endpoint_url="https://sqs.example"), {})
    q, sleeps = queue(sqs)
    results = q.send_batch(jobs(3))
    assert sqs.calls == [["m-0", "m-1", "m-2"]] * 3
    assert sleeps == [0.1, 0.2]
    assert all(r.ok and r.attempts == 3 and r.error_code is None for r in results)


def test_exhausted_attempts_are_reported_with_the_last_error():
    sqs = FakeSqs(*[{"1": ("InternalError", False)}] * 10)
    q, sleeps = queue(sqs, max_attempts=4)
    results = q.send_batch(jobs(2))
    assert sqs.calls == [["m-0", "m-1"], ["m-1"], ["m-1"], ["m-1"]]
    assert sleeps == [0.1, 0.2, 0.4]
    assert results[0].ok
    assert (results[1].ok, results[1].error_code, results[1].attempts) == (
        False,
        "InternalError",
        4,
    )


def test_backoff_is_capped_at_five_seconds():
    sqs = FakeSqs(*[throttled()] * 10)
    q, sleeps = queue(sqs, max_attempts=9)
    (result,) = q.send_batch(jobs(1))
    assert sleeps == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    assert (result.ok, result.error_code, result.attempts) == (False, "ServiceUnavailable", 9)


def test_a_call_refused_for_good_is_not_repeated():
    denied = ClientError(
        {
            "Error": {"Code": "AccessDenied", "Message": "no"},
            "ResponseMetadata": {"HTTPStatusCode": 403},
        },
        "SendMessageBatch",
    )
    sqs = FakeSqs(denied)
    q, sleeps = queue(sqs)
    results = q.send_batch(jobs(2))
    assert len(sqs.calls) == 1 and sleeps == []
    assert [(r.ok, r.error_code, r.attempts) for r in results] == [(False, "AccessDenied", 1)] * 2


def test_a_job_too_large_for_sqs_without_a_payload_bucket_is_refused_and_its_neighbours_sent():
    # 524,286 quotes and "Hi": exactly the parser's 512 KiB, but each quote is escaped to two
    # bytes in JSON, so the body is over 1 MiB: it must go through the claim check, and this
    # queue has no payload bucket.
    big = base_job(message_id="big", content={"subject": "Hi", "text": '"' * 524_286})
    invalid = base_job(message_id="bad", to=[])
    sqs = FakeSqs()
    q, _ = queue(sqs)
    results = q.send_batch([jobs(1)[0], big, invalid, base_job(message_id="m-3")])
    assert sqs.calls == [["m-0", "m-3"]]
    assert [(r.message_id, r.ok, r.error_code, r.attempts) for r in results] == [
        ("m-0", True, None, 1),
        ("big", False, "no_payload_bucket", 0),
        ("bad", False, "no_recipients", 0),
        ("m-3", True, None, 1),
    ]
    size = len(encode(big).encode("utf-8"))
    assert size > SQS_MAX_BYTES
    assert f"{size} bytes" in results[1].error_message
    assert "COURIER_PAYLOAD_BUCKET" in results[1].error_message


def test_send_is_a_batch_of_one():
    sqs = FakeSqs()
    q, _ = queue(sqs)
    result = q.send(base_job())
    assert (result.message_id, result.ok, result.sqs_message_id) == ("m-1", True, "sqs-0")
    assert q.send("not a job").error_code == "not_an_object"
    assert len(sqs.calls) == 1


def test_encode_escapes_what_sqs_refuses_raw():
    job = base_job(content={"subject": "Hi \ufffe", "text": "a\uffffb é \x00 \ue000"})
    body = encode(job)
    assert body == (
        '{"version":1,"message_id":"m-1","campaign_id":"c-1","from":"Shop <shop@example.com>",'
        '"to":["ann@example.org"],"content":{"subject":"Hi \\ufffe","text":"a\\uffffb é \\u0000 \ue000"}}'
    )
    assert json.loads(body) == job


def test_encode_refuses_a_lone_surrogate():
    with pytest.raises(InvalidJob) as raised:
        encode(base_job(message_id="m-\ud800"))
    assert raised.value.code == "schema"


class FakeCloudFormation:
    def __init__(self, outputs):
        self.outputs = outputs

    def describe_stacks(self, StackName):
        outputs = [{"OutputKey": k, "OutputValue": v} for k, v in self.outputs.items()]
        return {"Stacks": [{"StackName": StackName, "Outputs": outputs}]}


def test_from_env_reads_the_queue_url_from_the_stack(monkeypatch):
    monkeypatch.delenv("COURIER_QUEUE_URL", raising=False)
    monkeypatch.setenv("COURIER_STACK", "courier-prod")
    stack = FakeCloudFormation({"SendQueueUrl": "https://sqs.example/send", "SendQueueArn": "arn"})
    assert (
        CourierQueue.from_env(sqs=FakeSqs(), cloudformation=stack).queue_url
        == "https://sqs.example/send"
    )
    with pytest.raises(ConfigError, match="SendQueueUrl"):
        CourierQueue.from_env(sqs=FakeSqs(), cloudformation=FakeCloudFormation({}))


def test_from_env_without_configuration_says_what_to_set(monkeypatch):
    monkeypatch.delenv("COURIER_QUEUE_URL", raising=False)
    monkeypatch.delenv("COURIER_STACK", raising=False)
    with pytest.raises(ConfigError, match="COURIER_QUEUE_URL.*COURIER_STACK"):
        CourierQueue.from_env(sqs=FakeSqs())
