"""The claim check: a body over the queue's threshold is stored in the payload bucket and the
queue carries a pointer to it (fake S3 and SQS, no network)."""

import hashlib
import json

import pytest
from botocore.exceptions import ClientError
from support import base_job

from courier_client import (
    CLAIM_CHECK_KEY_PREFIX,
    MAX_INLINE_BYTES,
    MAX_MESSAGE_BYTES,
    SQS_MAX_BYTES,
    Attachment,
    CourierQueue,
    InvalidJob,
    build_job,
    encode,
    sqs_batches,
)
from courier_client._queue import _claim_check

K = 1024
# `{"a":1}`: its SHA-256 (hashlib's), and the pointer serde_json writes for it
# (`ClaimCheck::of(...).to_body()` in shared/core/src/claim_check.rs).
A1_SHA256 = "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"
A1_POINTER = (
    '{"courier_claim_check":1,"key":"claim-check/' + A1_SHA256 + '","bytes":7,'
    '"sha256":"' + A1_SHA256 + '"}'
)


def error(code, status):
    return ClientError(
        {
            "Error": {"Code": code, "Message": code.lower()},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "PutObject",
    )


class FakeS3:
    """Records PutObject calls; `failures` maps a key to the errors its successive calls raise."""

    def __init__(self, log, failures=None):
        self.log = log
        self.failures = {key: list(errors) for key, errors in (failures or {}).items()}
        self.objects = {}
        self.calls = []

    def put_object(self, Bucket, Key, Body, ContentType):
        self.calls.append((Bucket, Key, ContentType))
        self.log.append(("put", Key))
        errors = self.failures.get(Key)
        if errors:
            raise errors.pop(0)
        self.objects[(Bucket, Key)] = Body
        return {"ETag": '"etag"'}


class FakeSqs:
    """Records the message bodies of each SendMessageBatch call, as sent."""

    def __init__(self, log):
        self.log = log
        self.calls = []

    def send_message_batch(self, QueueUrl, Entries):
        bodies = [entry["MessageBody"] for entry in Entries]
        self.calls.append(bodies)
        self.log.append(("send", len(bodies)))
        return {"Successful": [{"Id": e["Id"], "MessageId": "sqs-" + e["Id"]} for e in Entries]}


def queue(failures=None, bucket="payloads", **options):
    log, sleeps = [], []
    s3, sqs = FakeS3(log, failures), FakeSqs(log)
    q = CourierQueue(
        "https://sqs.example/q",
        sqs=sqs,
        s3=s3,
        payload_bucket=bucket,
        sleep=sleeps.append,
        **options,
    )
    return q, s3, sqs, log, sleeps


def redeem(s3, body):
    """The job a queue body stands for, as the send function reads it: itself, or the stored
    body its pointer names (size and digest checked)."""
    if not body.startswith('{"courier_claim_check"'):
        return json.loads(body)
    pointer = json.loads(body)
    assert list(pointer) == ["courier_claim_check", "key", "bytes", "sha256"]
    assert pointer["courier_claim_check"] == 1
    assert pointer["key"] == CLAIM_CHECK_KEY_PREFIX + pointer["sha256"]
    stored = s3.objects[("payloads", pointer["key"])]
    assert len(stored) == pointer["bytes"]
    assert hashlib.sha256(stored).hexdigest() == pointer["sha256"]
    return json.loads(stored.decode("utf-8"))


def sized(message_id, size):
    """A valid job whose encoded body is exactly `size` bytes: its text is quotes (two bytes
    each once escaped, so the parser's 512 KiB count half `size`) and an x when `size` asks."""
    job = base_job(message_id=message_id, content={"subject": "Hi", "text": ""})
    pad = size - len(encode(job))
    assert pad > 0
    job["content"]["text"] = '"' * (pad // 2) + "x" * (pad % 2)
    assert len(encode(job).encode("utf-8")) == size
    return job


def utf8_len(body):
    return len(body.encode("utf-8"))


# --- the pointer -------------------------------------------------------------------------------


def test_the_pointer_is_byte_for_byte_the_cores():
    key, data, pointer = _claim_check('{"a":1}')
    assert hashlib.sha256(b'{"a":1}').hexdigest() == A1_SHA256
    assert key == "claim-check/" + A1_SHA256
    assert data == b'{"a":1}'
    assert pointer == A1_POINTER
    assert pointer.startswith('{"courier_claim_check"')


def test_the_pointer_counts_utf8_bytes():
    body = '{"t":"é€"}'
    key, data, pointer = _claim_check(body)
    assert data == body.encode("utf-8") and len(data) == len(body) + 3
    digest = hashlib.sha256(data).hexdigest()
    assert json.loads(pointer) == {
        "courier_claim_check": 1,
        "key": "claim-check/" + digest,
        "bytes": len(data),
        "sha256": digest,
    }
    assert key == "claim-check/" + digest and pointer.isascii()


def test_the_limits():
    assert MAX_INLINE_BYTES == 1_048_576 - 16_384 == 1_032_192
    assert MAX_MESSAGE_BYTES == 8 * 1024 * 1024 == 8_388_608
    assert CLAIM_CHECK_KEY_PREFIX == "claim-check/"


# --- sending -----------------------------------------------------------------------------------


def test_a_body_over_the_threshold_goes_as_a_pointer_to_the_stored_body():
    job = base_job(message_id="big", content={"subject": "Hi", "text": "y" * 300_000})
    body = encode(job)
    assert 256 * K < utf8_len(body) < MAX_INLINE_BYTES
    q, s3, sqs, log, sleeps = queue(claim_check_above=256 * K)

    result = q.send(job)

    assert (result.ok, result.error_code, result.attempts) == (True, None, 1)
    key, data, pointer = _claim_check(body)
    assert sqs.calls == [[pointer]]
    assert s3.calls == [("payloads", key, "application/json")]
    assert s3.objects == {("payloads", key): body.encode("utf-8")}
    assert log == [("put", key), ("send", 1)]
    assert redeem(s3, pointer) == job and sleeps == []


def test_a_body_over_one_mebibyte_goes_through_the_claim_check_by_default():
    # 200,000 U+0001: JSON writes each as \u0001, six bytes: a body of about 1.2 MB, within
    # the parser's 512 KiB (counted before escaping).
    job = base_job(message_id="big", content={"subject": "Hi", "text": "\x01" * 200_000})
    body = encode(job)
    assert SQS_MAX_BYTES < utf8_len(body) < MAX_MESSAGE_BYTES
    q, s3, sqs, log, _ = queue()
    assert q.claim_check_above == MAX_INLINE_BYTES

    result = q.send(job)

    assert result.ok and result.attempts == 1
    ((sent,),) = sqs.calls
    assert sent == _claim_check(body)[2] and utf8_len(sent) < 300
    (stored,) = s3.objects.values()
    assert stored == body.encode("utf-8")
    assert redeem(s3, sent) == job


def test_a_body_at_the_threshold_goes_as_it_is():
    at, over = sized("at", 2048), sized("over", 2049)
    q, s3, sqs, _, _ = queue(claim_check_above=2048)
    results = q.send_batch([at, over])
    assert all(r.ok for r in results)
    assert sqs.calls == [[encode(at), _claim_check(encode(over))[2]]]
    assert [key for _, key, _ in s3.calls] == [_claim_check(encode(over))[0]]


def test_a_body_over_the_threshold_without_a_payload_bucket_is_refused():
    big = base_job(message_id="big", content={"subject": "Hi", "text": "\x01" * 200_000})
    size = utf8_len(encode(big))
    q, s3, sqs, _, _ = queue(bucket=None)

    results = q.send_batch([base_job(message_id="m-0"), big, base_job(message_id="m-2")])

    assert [(r.message_id, r.ok, r.error_code, r.attempts) for r in results] == [
        ("m-0", True, None, 1),
        ("big", False, "no_payload_bucket", 0),
        ("m-2", True, None, 1),
    ]
    message = results[1].error_message
    assert f"is {size} bytes" in message and "payload bucket" in message
    assert "COURIER_PAYLOAD_BUCKET" in message and "PayloadBucketName" in message
    assert s3.calls == [] and [[json.loads(b)["message_id"] for b in c] for c in sqs.calls] == [
        ["m-0", "m-2"]
    ]


def test_a_failed_body_upload_keeps_the_job_off_the_queue():
    big = base_job(message_id="big", content={"subject": "Hi", "text": "y" * 300_000})
    key = _claim_check(encode(big))[0]
    q, s3, sqs, log, sleeps = queue({key: [error("AccessDenied", 403)]}, claim_check_above=256 * K)

    (result,) = q.send_batch([big])

    assert (result.ok, result.error_code, result.attempts) == (False, "body_upload_failed", 0)
    assert key in result.error_message and "AccessDenied" in result.error_message
    # Refused for good: not repeated, and nothing enqueued.
    assert s3.calls == [("payloads", key, "application/json")] and s3.objects == {}
    assert sqs.calls == [] and sleeps == []


def test_a_failed_body_upload_spares_the_other_jobs():
    big = base_job(message_id="big", content={"subject": "Hi", "text": "y" * 300_000})
    key = _claim_check(encode(big))[0]
    q, s3, sqs, log, _ = queue({key: [error("AccessDenied", 403)]}, claim_check_above=256 * K)
    results = q.send_batch([base_job(message_id="m-0"), big])
    assert [r.error_code for r in results] == [None, "body_upload_failed"]
    assert log == [("put", key), ("send", 1)]


def test_a_transient_body_upload_failure_is_retried_then_exhausted():
    big = base_job(message_id="big", content={"subject": "Hi", "text": "y" * 300_000})
    key = _claim_check(encode(big))[0]
    failures = {key: [error("SlowDown", 503), error("InternalError", 500)]}
    q, s3, sqs, log, sleeps = queue(failures, claim_check_above=256 * K)
    assert q.send(big).ok
    assert log == [("put", key)] * 3 + [("send", 1)] and sleeps == [0.1, 0.2]

    q, s3, sqs, log, sleeps = queue(
        {key: [error("SlowDown", 503)] * 5}, claim_check_above=256 * K, max_attempts=3
    )
    result = q.send(big)
    assert (result.ok, result.error_code, result.attempts) == (False, "body_upload_failed", 0)
    assert "SlowDown" in result.error_message
    assert len(s3.calls) == 3 and sqs.calls == [] and sleeps == [0.1, 0.2]


def test_the_files_are_stored_before_the_body_and_a_failed_file_stores_no_body():
    pdf = Attachment("invoice.pdf", "application/pdf", b"%PDF-1.7 ...")
    job = build_job(
        from_="Shop <shop@example.com>",
        to="ann@example.org",
        campaign_id="c-1",
        message_id="big",
        subject="Your invoice",
        text="y" * 300_000,
        attachments=[pdf],
    )
    key = _claim_check(encode(job))[0]
    q, s3, sqs, log, _ = queue(claim_check_above=256 * K)
    assert q.send(job).ok
    assert log == [("put", pdf.key), ("put", key), ("send", 1)]
    assert s3.calls[1] == ("payloads", key, "application/json")
    assert redeem(s3, sqs.calls[0][0]) == job

    q, s3, sqs, log, _ = queue({pdf.key: [error("AccessDenied", 403)]}, claim_check_above=256 * K)
    result = q.send(job)
    assert result.error_code == "attachment_upload_failed"
    assert log == [("put", pdf.key)] and s3.objects == {}


def test_a_batch_is_split_by_the_pointers_sizes():
    small = [base_job(message_id=f"s-{i}") for i in range(8)]
    large = [
        base_job(message_id=f"l-{i}", content={"subject": "Hi", "text": "\x01" * (200_000 + i)})
        for i in range(4)
    ]
    # ~600 KB: under the threshold, so sent as it is; two do not fit in one batch.
    inline = [sized(f"i-{i}", 600_000) for i in range(2)]
    jobs = [inline[0], large[0], small[0], large[1], inline[1], *small[1:], large[2], large[3]]
    q, s3, sqs, _, _ = queue()

    results = q.send_batch(jobs)

    assert all(r.ok and r.attempts == 1 for r in results), results
    sent = [body for call in sqs.calls for body in call]
    assert [redeem(s3, body) for body in sent] == jobs
    # Each large job is its pointer on the queue (and in the split); the rest as they are.
    assert [body.startswith('{"courier_claim_check"') for body in sent] == [
        job["message_id"].startswith("l-") for job in jobs
    ]
    assert len(s3.objects) == 4
    sizes = [utf8_len(body) for body in sent]
    assert [len(call) for call in sqs.calls] == [len(b) for b in sqs_batches(sizes)]
    # 600 KB, two pointers and a small job fit in 1 MiB; the second 600 KB starts the next
    # batch, which the other ten jobs (two of them large) fill to ten entries.
    assert [len(call) for call in sqs.calls] == [4, 10]
    # Had the large bodies counted, no two of them would have shared a batch.
    assert len(sqs_batches([utf8_len(encode(job)) for job in jobs])) > 3


def test_a_body_several_jobs_share_is_stored_once():
    big = base_job(message_id="big", content={"subject": "Hi", "text": "y" * 300_000})
    q, s3, sqs, _, _ = queue(claim_check_above=256 * K)
    results = q.send_batch([big, dict(big)])
    assert [r.ok for r in results] == [True, True]
    assert len(s3.calls) == 1 and sqs.calls == [[_claim_check(encode(big))[2]] * 2]


# --- the threshold and the ceiling ------------------------------------------------------------


@pytest.mark.parametrize("threshold", [1024, 256 * K, MAX_INLINE_BYTES])
def test_the_threshold_takes_1024_to_max_inline_bytes(threshold):
    assert queue(claim_check_above=threshold)[0].claim_check_above == threshold


@pytest.mark.parametrize(
    "threshold", [1023, 0, -1, MAX_INLINE_BYTES + 1, SQS_MAX_BYTES, True, 2048.0, "4096", None]
)
def test_a_threshold_out_of_range_or_not_an_int_is_refused(threshold):
    with pytest.raises(ValueError, match=r"claim_check_above must be an int from 1024 to 1032192"):
        queue(claim_check_above=threshold)


def test_encode_refuses_only_bodies_over_eight_mebibytes():
    # Not a valid job (its text is over the parser's 512 KiB): encode does not validate.
    job = base_job(content={"subject": "Hi", "text": ""})
    job["content"]["text"] = "x" * (MAX_MESSAGE_BYTES - len(encode(job)))
    assert utf8_len(encode(job)) == MAX_MESSAGE_BYTES
    job["content"]["text"] += "x"
    with pytest.raises(InvalidJob) as raised:
        encode(job)
    assert raised.value.code == "too_large"
    assert f"{MAX_MESSAGE_BYTES + 1} bytes" in raised.value.message
    # Between SQS's 1 MiB and 8 MiB, a body is valid: it goes through the claim check.
    quotes = base_job(content={"subject": "Hi", "text": '"' * 524_286})
    assert SQS_MAX_BYTES < utf8_len(encode(quotes)) < MAX_MESSAGE_BYTES
