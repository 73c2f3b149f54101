"""Sending through SQS for real: the emulator (moto) that scripts/with-harness.sh starts."""

import json
import os
import time
import uuid

import boto3
import pytest
from support import base_job

from courier_client import CourierQueue, sqs_batches


@pytest.fixture(scope="module")
def sqs():
    if not os.environ.get("AWS_ENDPOINT_URL"):
        pytest.fail(
            "AWS_ENDPOINT_URL is not set: run these tests under the harness "
            "(make client-python, or scripts/with-harness.sh moto -- python -m pytest clients/python/tests)"
        )
    return boto3.client("sqs")


@pytest.fixture
def queue_url(sqs):
    name = f"courier-client-{uuid.uuid4().hex}"
    url = sqs.create_queue(QueueName=name, Attributes={"MaximumMessageSize": "1048576"})["QueueUrl"]
    yield url
    sqs.delete_queue(QueueUrl=url)


class RecordingSqs:
    """The real client, with the entry count of each SendMessageBatch call recorded."""

    def __init__(self, client):
        self.client = client
        self.batches = []

    def send_message_batch(self, **request):
        self.batches.append(len(request["Entries"]))
        return self.client.send_message_batch(**request)


def receive_all(sqs, url, expected):
    """Every message on the queue, as parsed JSON, once `expected` have arrived (or 30 s)."""
    received = []
    deadline = time.monotonic() + 30
    while len(received) < expected and time.monotonic() < deadline:
        reply = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        received += [json.loads(m["Body"]) for m in reply.get("Messages", [])]
    return received


def test_a_batch_of_25_is_split_sent_and_received_intact(sqs, queue_url):
    jobs = [base_job(message_id=f"m-{i}", trace_id=f"t-{i}") for i in range(25)]
    for i in (1, 2, 3, 4, 12, 13, 14, 20):
        # ~300,000 characters, a non-ASCII one among them (two bytes in UTF-8).
        jobs[i]["content"] = {"subject": "Big", "text": "é" + "x" * 300_000, "html": "<p>big</p>"}
    # Within the parser's 512 KiB, but over SQS's 1 MiB once each quote is escaped.
    too_large = base_job(message_id="too-large", content={"subject": "Hi", "text": '"' * 524_286})
    recording = RecordingSqs(sqs)
    queue = CourierQueue(queue_url, sqs=recording)

    results = queue.send_batch(jobs[:10] + [too_large] + jobs[10:])

    assert [r.message_id for r in results] == [f"m-{i}" for i in range(10)] + ["too-large"] + [
        f"m-{i}" for i in range(10, 25)
    ]
    refused = results.pop(10)
    assert (refused.ok, refused.error_code, refused.attempts) == (False, "too_large", 0)
    assert all(r.ok and r.sqs_message_id and r.attempts == 1 for r in results), results
    # Three ~300 KB bodies fill a 1 MiB batch: more calls than ten entries each would need.
    assert sum(recording.batches) == 25 and len(recording.batches) > 3
    assert all(n <= 10 for n in recording.batches)
    sizes = [len(json.dumps(j, ensure_ascii=False, separators=(",", ":")).encode()) for j in jobs]
    assert recording.batches == [len(b) for b in sqs_batches(sizes)]

    received = receive_all(sqs, queue_url, 25)
    assert sorted(j["message_id"] for j in received) == sorted(j["message_id"] for j in jobs)
    by_id = {j["message_id"]: j for j in received}
    assert all(by_id[job["message_id"]] == job for job in jobs)


def test_from_env_finds_the_queue_by_its_url(sqs, queue_url, monkeypatch):
    monkeypatch.setenv("COURIER_QUEUE_URL", queue_url)
    monkeypatch.delenv("COURIER_STACK", raising=False)
    queue = CourierQueue.from_env()
    assert queue.queue_url == queue_url
    result = queue.send(base_job(message_id="from-env"))
    assert result.ok and result.attempts == 1
    assert receive_all(sqs, queue_url, 1) == [base_job(message_id="from-env")]
