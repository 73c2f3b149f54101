"""Sending through SQS (and uploading attachments to S3) for real: the emulator (moto) that
scripts/with-harness.sh starts."""

import hashlib
import json
import os
import time
import uuid

import boto3
import pytest
from support import base_job

from courier_client import SQS_MAX_BYTES, Attachment, CourierQueue, build_job, encode, sqs_batches


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


@pytest.fixture
def bucket(sqs):
    s3 = boto3.client("s3")
    name = f"courier-client-{uuid.uuid4().hex}"
    s3.create_bucket(Bucket=name)
    yield name
    for item in s3.list_objects_v2(Bucket=name).get("Contents", []):
        s3.delete_object(Bucket=name, Key=item["Key"])
    s3.delete_bucket(Bucket=name)


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
    # Within the parser's 512 KiB, but over SQS's 1 MiB once each quote is escaped: it needs the
    # claim check, and this queue has no payload bucket.
    too_large = base_job(message_id="too-large", content={"subject": "Hi", "text": '"' * 524_286})
    recording = RecordingSqs(sqs)
    queue = CourierQueue(queue_url, sqs=recording)

    results = queue.send_batch(jobs[:10] + [too_large] + jobs[10:])

    assert [r.message_id for r in results] == [f"m-{i}" for i in range(10)] + ["too-large"] + [
        f"m-{i}" for i in range(10, 25)
    ]
    refused = results.pop(10)
    assert (refused.ok, refused.error_code, refused.attempts) == (False, "no_payload_bucket", 0)
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


def test_a_job_with_an_attachment_is_enqueued_after_its_file_is_stored(sqs, queue_url, bucket):
    s3 = boto3.client("s3")
    content = b"\x00%PDF-1.7\r\n\xff\xfe\x00 binary \x80\xff" + bytes(range(256))
    attachment = Attachment("invoice 4711.pdf", "application/pdf", content)
    job = build_job(
        from_="Shop <shop@example.com>",
        to="ann@example.org",
        campaign_id="invoices",
        idempotency_key="order-4711/invoice",
        subject="Your invoice",
        text="Attached.",
        attachments=[attachment],
    )
    queue = CourierQueue(queue_url, sqs=sqs, s3=s3, payload_bucket=bucket)

    result = queue.send(job)

    assert result.ok and result.attempts == 1, result
    (received,) = receive_all(sqs, queue_url, 1)
    assert received == job
    (reference,) = received["attachments"]
    assert reference == attachment.ref()
    assert reference["key"] == "attachments/" + hashlib.sha256(content).hexdigest()
    stored = s3.get_object(Bucket=bucket, Key=reference["key"])
    assert stored["Body"].read() == content
    assert stored["ContentLength"] == reference["bytes"] == len(content)
    assert stored["ContentType"] == "application/pdf"


def test_from_env_reads_the_payload_bucket(sqs, queue_url, bucket, monkeypatch):
    monkeypatch.setenv("COURIER_QUEUE_URL", queue_url)
    monkeypatch.setenv("COURIER_PAYLOAD_BUCKET", bucket)
    monkeypatch.delenv("COURIER_STACK", raising=False)
    queue = CourierQueue.from_env()
    attachment = Attachment("notes.txt", "text/plain", b"from the environment\n")
    job = build_job(
        from_="Shop <shop@example.com>",
        to="ann@example.org",
        campaign_id="notes",
        message_id="from-env-bucket",
        subject="Notes",
        text="Attached.",
        attachments=[attachment],
    )
    assert queue.send(job).ok
    stored = boto3.client("s3").get_object(Bucket=bucket, Key=attachment.key)
    assert stored["Body"].read() == b"from the environment\n"
    assert receive_all(sqs, queue_url, 1) == [job]


def test_a_job_over_one_mebibyte_goes_through_the_claim_check(sqs, queue_url, bucket):
    s3 = boto3.client("s3")
    # 200,000 U+0001, six bytes each once JSON escapes them: a body of about 1.2 MB.
    job = base_job(message_id="claim-checked", content={"subject": "Hi", "text": "\x01" * 200_000})
    body = encode(job).encode("utf-8")
    assert len(body) > SQS_MAX_BYTES
    digest = hashlib.sha256(body).hexdigest()
    queue = CourierQueue(queue_url, sqs=sqs, s3=s3, payload_bucket=bucket)

    result = queue.send(job)

    assert result.ok and result.attempts == 1, result
    reply = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=5)
    (message,) = reply["Messages"]
    assert message["Body"] == (
        '{"courier_claim_check":1,"key":"claim-check/' + digest + '","bytes":'
        + str(len(body)) + ',"sha256":"' + digest + '"}'
    )
    stored = s3.get_object(Bucket=bucket, Key="claim-check/" + digest)
    assert stored["Body"].read() == body
    assert stored["ContentLength"] == len(body)
    assert stored["ContentType"] == "application/json"
    assert json.loads(body) == job
