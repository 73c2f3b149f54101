"""Attachments: references, validation edge cases, and uploads before enqueueing (fake S3 and
SQS, no network)."""

import copy
import hashlib
import json
import pickle

import pytest
from botocore.exceptions import ClientError
from support import base_job

from courier_client import (
    ATTACHMENT_KEY_PREFIX,
    MAX_ATTACHMENT_BYTES,
    MAX_ATTACHMENTS,
    Attachment,
    ConfigError,
    CourierQueue,
    InvalidJob,
    Job,
    build_job,
    encode,
    validate,
)

# SHA-256 of b"abc" (FIPS 180-2's example; `fingerprint_is_stable_hex_sha256` in the core).
ABC_SHA256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
BINARY = bytes(range(256)) + b"\x00\xff"


def error(code, status, operation="PutObject"):
    return ClientError(
        {
            "Error": {"Code": code, "Message": code.lower()},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        operation,
    )


def ref(content=b"abc", **changes):
    """A valid reference to `content`, with `changes`."""
    out = Attachment("invoice 4711.pdf", "application/pdf", content).ref()
    out.update(changes)
    return out


def job_with(message_id, *attachments):
    return build_job(
        from_="Shop <shop@example.com>",
        to="ann@example.org",
        campaign_id="c-1",
        message_id=message_id,
        subject="Your invoice",
        text="Attached.",
        attachments=list(attachments),
    )


# --- references --------------------------------------------------------------------------------


def test_a_reference_names_its_content_by_digest():
    attachment = Attachment("invoice.pdf", "application/pdf", b"abc")
    assert attachment.ref() == {
        "filename": "invoice.pdf",
        "content_type": "application/pdf",
        "key": "attachments/" + ABC_SHA256,
        "bytes": 3,
        "sha256": ABC_SHA256,
    }
    assert attachment.key == ATTACHMENT_KEY_PREFIX + ABC_SHA256 == attachment.ref()["key"]
    binary = Attachment("data.bin", "application/octet-stream", bytearray(BINARY))
    assert binary.content == BINARY and isinstance(binary.content, bytes)
    assert binary.ref()["bytes"] == 258
    assert binary.ref()["sha256"] == hashlib.sha256(BINARY).hexdigest()


def test_an_attachment_is_frozen_and_holds_bytes():
    attachment = Attachment("a.txt", "text/plain", b"x")
    with pytest.raises(AttributeError):
        attachment.content = b"y"
    assert attachment == Attachment("a.txt", "text/plain", b"x")
    with pytest.raises(TypeError, match="content must be bytes"):
        Attachment("a.txt", "text/plain", "not bytes")


def test_build_job_returns_a_job_with_references_and_files():
    pdf = Attachment("invoice.pdf", "application/pdf", b"%PDF-1.7 ...")
    again = Attachment("copy of invoice.pdf", "application/pdf", b"%PDF-1.7 ...")
    binary = Attachment("data.bin", "application/octet-stream", BINARY)
    job = job_with("m-1", pdf, again, binary)

    assert isinstance(job, Job) and isinstance(job, dict)
    assert job["attachments"] == [pdf.ref(), again.ref(), binary.ref()]
    # Same content, same key: one file.
    assert job.files == {pdf.key: b"%PDF-1.7 ...", binary.key: BINARY}
    written = json.loads(json.dumps(job))
    assert written == dict(job) and written["attachments"][2]["bytes"] == 258
    assert json.loads(encode(job)) == written
    assert validate(job) is None
    # Copies keep the files; a plain dict of the job has none.
    assert copy.deepcopy(job).files == job.files
    assert pickle.loads(pickle.dumps(job)).files == job.files
    assert not hasattr(dict(job), "files")


def test_build_job_without_attachments_has_no_field_and_no_files():
    job = job_with("m-1")
    assert isinstance(job, Job) and job.files == {} and "attachments" not in job


def test_build_job_takes_references_of_files_already_uploaded():
    uploaded = ref(b"stored by the producer")
    job = job_with("m-1", uploaded, Attachment("a.txt", "text/plain", b"abc"))
    assert job["attachments"][0] == uploaded
    assert list(job.files) == ["attachments/" + ABC_SHA256]


def test_build_job_refuses_what_the_parser_refuses():
    with pytest.raises(InvalidJob) as raised:
        job_with("m-1", Attachment("setup.exe", "application/octet-stream", b"MZ"))
    assert raised.value.code == "attachment_denied"
    assert "setup.exe" in raised.value.message
    with pytest.raises(InvalidJob) as raised:
        job_with("m-1", Attachment("empty.txt", "text/plain", b""))
    assert (raised.value.code, raised.value.message) == (
        "invalid_attachment",
        "attachment `attachments[0]` is invalid: the file is empty",
    )
    eleven = [Attachment(f"{i}.txt", "text/plain", b"x") for i in range(MAX_ATTACHMENTS + 1)]
    with pytest.raises(InvalidJob) as raised:
        job_with("m-1", *eleven)
    assert raised.value.code == "attachments_too_large"


# --- validation, beyond the conformance table --------------------------------------------------


@pytest.mark.parametrize(
    "changes, expect",
    [
        # Rust's to_ascii_lowercase: the Kelvin sign is not a k, so this is no .apk.
        ({"filename": "report.ap\u212a"}, None),
        ({"filename": "README", "content_type": "text/plain"}, None),
        ({"filename": "archive."}, None),
        ({"filename": "x" * 255}, None),
        ({"filename": "x" * 256}, "invalid_attachment"),
        ({"filename": " \u3000"}, "invalid_attachment"),
        ({"filename": "."}, "invalid_attachment"),
        ({"filename": "a\\b.pdf"}, "invalid_attachment"),
        ({"filename": "fdp.\u202eexe"}, "invalid_attachment"),
        ({"filename": "a\u200bb.pdf"}, "invalid_attachment"),
        ({"content_type": "application/pdf/x"}, "invalid_attachment"),
        ({"content_type": "application/-pdf"}, "invalid_attachment"),
        (
            {"sha256": ABC_SHA256.upper(), "key": "attachments/" + ABC_SHA256.upper()},
            "invalid_attachment",
        ),
        # The file's own faults come before its type's.
        ({"filename": "setup.exe", "content_type": "pdf"}, "invalid_attachment"),
        ({"filename": "setup.exe", "bytes": 0}, "invalid_attachment"),
        ({"filename": "RUN.Ps1"}, "attachment_denied"),
        ({"content_type": "APPLICATION/X-MSDOWNLOAD"}, "attachment_denied"),
        ({"bytes": MAX_ATTACHMENT_BYTES}, None),
        ({"bytes": MAX_ATTACHMENT_BYTES + 1, "filename": "setup.exe"}, "attachments_too_large"),
        ({"bytes": True}, "schema"),
        ({"bytes": 3.0}, "schema"),
        ({"bytes": -1}, "schema"),
        ({"bytes": 2**64}, "schema"),
        ({"filename": None}, "schema"),
    ],
)
def test_attachment_rules_match_the_parser(changes, expect):
    job = base_job(attachments=[ref(**changes)])
    if expect is None:
        assert validate(job) is None
    else:
        with pytest.raises(InvalidJob) as raised:
            validate(job)
        assert raised.value.code == expect, raised.value.message


def test_attachment_structure_is_schema():
    missing = ref()
    del missing["sha256"]
    for attachments in (None, {}, ["x"], [missing]):
        with pytest.raises(InvalidJob) as raised:
            validate(base_job(attachments=attachments))
        assert raised.value.code == "schema", attachments
    assert validate(base_job(attachments=[])) is None


def test_counts_come_before_each_attachment_and_sizes_saturate():
    with pytest.raises(InvalidJob) as raised:
        validate(base_job(attachments=[ref(bytes=0)] * 11))
    assert raised.value.code == "attachments_too_large"
    assert "11 files" in raised.value.message
    with pytest.raises(InvalidJob) as raised:
        validate(base_job(attachments=[ref(bytes=2**64 - 1)] * 2))
    assert raised.value.code == "attachments_too_large"
    assert f"{2**64 - 1} bytes" in raised.value.message


def test_attachments_are_checked_after_the_content():
    with pytest.raises(InvalidJob) as raised:
        validate(base_job(content={"subject": "Hi"}, attachments=[ref(bytes=0)]))
    assert raised.value.code == "no_body"


# --- uploads -----------------------------------------------------------------------------------


class Log:
    """The order of the calls made to the fake S3 and SQS."""

    def __init__(self):
        self.events = []


class FakeS3:
    """Records PutObject calls; `failures` maps a key to the errors its successive calls raise."""

    def __init__(self, log, failures=None):
        self.log = log
        self.failures = {key: list(errors) for key, errors in (failures or {}).items()}
        self.objects = {}
        self.calls = []

    def put_object(self, Bucket, Key, Body, ContentType):
        self.calls.append((Bucket, Key, ContentType))
        self.log.events.append(("put", Key))
        errors = self.failures.get(Key)
        if errors:
            raise errors.pop(0)
        self.objects[(Bucket, Key)] = Body
        return {"ETag": '"etag"'}


class FakeSqs:
    def __init__(self, log):
        self.log = log
        self.calls = []

    def send_message_batch(self, QueueUrl, Entries):
        ids = [json.loads(entry["MessageBody"])["message_id"] for entry in Entries]
        self.calls.append(ids)
        self.log.events.append(("send", ids))
        return {"Successful": [{"Id": e["Id"], "MessageId": "sqs-" + e["Id"]} for e in Entries]}


def queue(failures=None, bucket="payloads", **options):
    log = Log()
    s3, sqs, sleeps = FakeS3(log, failures), FakeSqs(log), []
    q = CourierQueue(
        "https://sqs.example/q",
        sqs=sqs,
        s3=s3,
        payload_bucket=bucket,
        sleep=sleeps.append,
        **options,
    )
    return q, s3, sqs, log, sleeps


def test_files_are_uploaded_before_the_batch_that_carries_their_job():
    pdf = Attachment("invoice.pdf", "application/pdf", b"%PDF-1.7 ...")
    binary = Attachment("data.bin", "application/octet-stream", BINARY)
    jobs = [job_with("m-0", pdf), base_job(message_id="m-1"), job_with("m-2", binary, pdf)]
    q, s3, sqs, log, sleeps = queue()

    results = q.send_batch(jobs)

    assert [(r.message_id, r.ok, r.error_code, r.attempts) for r in results] == [
        ("m-0", True, None, 1),
        ("m-1", True, None, 1),
        ("m-2", True, None, 1),
    ]
    # Each key once (content-addressed), with its content type, then the one batch.
    assert log.events == [("put", pdf.key), ("put", binary.key), ("send", ["m-0", "m-1", "m-2"])]
    assert s3.calls == [
        ("payloads", pdf.key, "application/pdf"),
        ("payloads", binary.key, "application/octet-stream"),
    ]
    assert s3.objects == {("payloads", pdf.key): pdf.content, ("payloads", binary.key): BINARY}
    assert sleeps == []


def test_an_upload_failure_keeps_only_its_job_off_the_queue():
    good = Attachment("good.pdf", "application/pdf", b"good")
    bad = Attachment("bad.pdf", "application/pdf", b"bad")
    jobs = [job_with("m-0", good), job_with("m-1", good, bad), base_job(message_id="m-2")]
    q, s3, sqs, log, sleeps = queue({bad.key: [error("AccessDenied", 403)]})

    results = q.send_batch(jobs)

    assert sqs.calls == [["m-0", "m-2"]]
    assert log.events.index(("put", bad.key)) < log.events.index(("send", ["m-0", "m-2"]))
    assert [(r.ok, r.error_code, r.attempts) for r in results] == [
        (True, None, 1),
        (False, "attachment_upload_failed", 0),
        (True, None, 1),
    ]
    assert bad.key in results[1].error_message and "AccessDenied" in results[1].error_message
    # Refused for good: not repeated.
    assert [key for _, key, _ in s3.calls] == [good.key, bad.key] and sleeps == []


def test_a_transient_upload_failure_is_retried():
    pdf = Attachment("invoice.pdf", "application/pdf", b"%PDF")
    failures = {pdf.key: [error("SlowDown", 503), error("InternalError", 500)]}
    q, s3, sqs, log, sleeps = queue(failures)
    result = q.send(job_with("m-0", pdf))
    assert result.ok and result.attempts == 1
    assert log.events == [("put", pdf.key)] * 3 + [("send", ["m-0"])]
    assert sleeps == [0.1, 0.2]


def test_exhausted_upload_attempts_refuse_the_job():
    pdf = Attachment("invoice.pdf", "application/pdf", b"%PDF")
    q, s3, sqs, log, sleeps = queue({pdf.key: [error("SlowDown", 503)] * 5}, max_attempts=3)
    result = q.send(job_with("m-0", pdf))
    assert (result.ok, result.error_code, result.attempts) == (
        False,
        "attachment_upload_failed",
        0,
    )
    assert "SlowDown" in result.error_message
    assert len(s3.calls) == 3 and sqs.calls == [] and sleeps == [0.1, 0.2]


def test_files_without_a_payload_bucket_are_refused():
    pdf = Attachment("invoice.pdf", "application/pdf", b"%PDF")
    # A plain dict with references: the producer uploaded the files itself.
    uploaded = dict(job_with("m-1", pdf))
    q, s3, sqs, log, _ = queue(bucket=None)

    results = q.send_batch([job_with("m-0", pdf), uploaded])

    assert (results[0].ok, results[0].error_code, results[0].attempts) == (
        False,
        "no_payload_bucket",
        0,
    )
    assert "COURIER_PAYLOAD_BUCKET" in results[0].error_message
    assert results[1].ok
    assert s3.calls == [] and sqs.calls == [["m-1"]]


def test_files_that_do_not_match_their_references_are_not_uploaded():
    pdf = Attachment("invoice.pdf", "application/pdf", b"%PDF")
    altered = job_with("m-0", pdf)
    altered.files[pdf.key] = b"%PDF, altered"
    stray = job_with("m-1", pdf)
    stray.files["attachments/" + ABC_SHA256] = b"abc"
    q, s3, sqs, _, _ = queue()

    results = q.send_batch([altered, stray, job_with("m-2", pdf)])

    assert [r.error_code for r in results] == [
        "attachment_upload_failed",
        "attachment_upload_failed",
        None,
    ]
    assert "does not match" in results[0].error_message
    assert "none of its attachments" in results[1].error_message
    assert s3.objects == {("payloads", pdf.key): b"%PDF"} and sqs.calls == [["m-2"]]


def test_an_invalid_job_uploads_nothing():
    job = Job(base_job(message_id="m-0", to=[], attachments=[ref()]), {ref()["key"]: b"abc"})
    q, s3, sqs, _, _ = queue()
    (result,) = q.send_batch([job])
    assert result.error_code == "no_recipients" and s3.calls == [] and sqs.calls == []


class FakeCloudFormation:
    def __init__(self, outputs):
        self.outputs = outputs

    def describe_stacks(self, StackName):
        outputs = [{"OutputKey": k, "OutputValue": v} for k, v in self.outputs.items()]
        return {"Stacks": [{"StackName": StackName, "Outputs": outputs}]}


def test_the_payload_bucket_comes_from_the_environment_or_the_stack(monkeypatch):
    log = Log()
    stack = FakeCloudFormation(
        {"SendQueueUrl": "https://sqs.example/send", "PayloadBucketName": "stack-payloads"}
    )
    monkeypatch.delenv("COURIER_STACK", raising=False)
    monkeypatch.delenv("COURIER_PAYLOAD_BUCKET", raising=False)
    monkeypatch.setenv("COURIER_QUEUE_URL", "https://sqs.example/q")
    assert CourierQueue.from_env(sqs=FakeSqs(log)).payload_bucket is None
    monkeypatch.setenv("COURIER_PAYLOAD_BUCKET", "env-payloads")
    assert CourierQueue.from_env(sqs=FakeSqs(log)).payload_bucket == "env-payloads"

    monkeypatch.delenv("COURIER_QUEUE_URL")
    monkeypatch.setenv("COURIER_STACK", "courier-prod")
    from_stack = CourierQueue.from_env(sqs=FakeSqs(log), cloudformation=stack)
    assert from_stack.payload_bucket == "env-payloads"
    monkeypatch.delenv("COURIER_PAYLOAD_BUCKET")
    from_stack = CourierQueue.from_env(sqs=FakeSqs(log), cloudformation=stack)
    assert (from_stack.queue_url, from_stack.payload_bucket) == (
        "https://sqs.example/send",
        "stack-payloads",
    )
    s3 = FakeS3(log)
    direct = CourierQueue.from_stack(
        "courier-prod", sqs=FakeSqs(log), cloudformation=stack, s3=s3
    )
    assert (direct.payload_bucket, direct.s3) == ("stack-payloads", s3)
    with pytest.raises(ConfigError, match="SendQueueUrl"):
        CourierQueue.from_stack("x", sqs=FakeSqs(log), cloudformation=FakeCloudFormation({}))
