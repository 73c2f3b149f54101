"""Putting jobs on Courier's send queue (SQS), in batches, with retries of transient failures;
uploading their attachments, and the bodies too large for a queue message (the claim check), to
the stack's payload bucket (S3) first.

Retrying after an ambiguous failure (a timeout after SQS may have stored the message, a 5xx)
can enqueue a job twice. That is safe: Courier sends each ``message_id`` at most once, so the
send function's claim on the id drops the second copy. Repeating an upload is as harmless: an
attachment's key is the SHA-256 of its content, and a stored body's the SHA-256 of the body, so
a second upload writes the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from botocore.exceptions import BotoCoreError, ClientError, ConnectionError, HTTPClientError

from ._job import SQS_MAX_BYTES, InvalidJob, Job, encode, validate

#: Entries in one SQS ``SendMessageBatch``.
SQS_BATCH_ENTRIES = 10

#: Where claim-checked bodies live in the payload bucket: ``claim-check/{sha256 of the body}``
#: (``KEY_PREFIX`` in shared/core/src/claim_check.rs; the stack's lifecycle rule expires them).
CLAIM_CHECK_KEY_PREFIX = "claim-check/"
#: The largest message body sent as it is, in UTF-8 bytes: SQS's 1 MiB less 16 KiB of room for
#: the message attributes, which count towards SQS's limit (``MAX_INLINE_BYTES`` in
#: shared/core/src/claim_check.rs). A larger body goes through the claim check.
MAX_INLINE_BYTES = SQS_MAX_BYTES - 16 * 1024
# The lowest claim-check threshold a queue takes.
_MIN_CLAIM_CHECK_ABOVE = 1024

# Error codes AWS uses for throttling (botocore's retry handler's list, for SQS and in general).
_THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestThrottled",
        "RequestLimitExceeded",
        "SlowDown",
        "RequestTimeout",
        "RequestTimeoutException",
        "AWS.SimpleQueueService.RequestThrottled",
    }
)
_FIRST_BACKOFF = 0.1
_MAX_BACKOFF = 5.0


class ConfigError(Exception):
    """The queue could not be found from the configuration (environment or stack)."""


@dataclass
class SendResult:
    """What became of one job.

    ``message_id`` is the job's (None when the job has none); ``ok`` whether SQS stored it, then
    with its ``sqs_message_id``. A failed job has an ``error_code``: the parser's code for a job
    refused locally (``attempts`` 0), ``too_large`` for one over 8 MiB encoded,
    ``no_payload_bucket`` for one with files to upload, or a body over the claim-check
    threshold, and no bucket to put them in, ``attachment_upload_failed`` for one whose files
    could not be uploaded, ``body_upload_failed`` for one whose body could not be stored for the
    claim check (all ``attempts`` 0: such a job is never enqueued), or SQS's (or the
    transport's) code, with ``error_message``. ``attempts`` counts the SQS calls that carried
    it.
    """

    message_id: Optional[str]
    ok: bool
    sqs_message_id: Optional[str] = None
    error_code: Optional[str] = None
    error_message: Optional[str] = None
    attempts: int = 0


def sqs_batches(sizes: Sequence[int]) -> List[range]:
    """Splits messages of `sizes` bytes, in order, into ``SendMessageBatch`` calls: at most
    :data:`SQS_BATCH_ENTRIES` each and at most 1 MiB in total. A message larger than the limit
    on its own gets a batch of its own, so only it fails (``sqs_batches`` in
    ``shared/core/src/limits.rs``)."""
    batches: List[range] = []
    start = total = 0
    for i, size in enumerate(sizes):
        full = i - start == SQS_BATCH_ENTRIES or total + size > SQS_MAX_BYTES
        if i > start and full:
            batches.append(range(start, i))
            start, total = i, 0
        total += size
    if start < len(sizes):
        batches.append(range(start, len(sizes)))
    return batches


def _transient(error: Exception) -> bool:
    """Whether a failed call is worth repeating: a connection or HTTP-level failure, a 5xx or
    a throttling code."""
    if isinstance(error, (ConnectionError, HTTPClientError)):
        return True
    if isinstance(error, ClientError):
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return status >= 500 or error.response.get("Error", {}).get("Code") in _THROTTLING_CODES
    return False


def _backoff(attempt: int) -> float:
    """The wait before call number `attempt` (2, 3, ...): 0.1 s, 0.2 s, 0.4 s, ..., at most 5 s."""
    return min(_FIRST_BACKOFF * 2 ** (attempt - 2), _MAX_BACKOFF)


class _Refused(Exception):
    """A job refused before it reaches SQS: its result's code and message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _uploads(job: Any) -> Dict[str, Tuple[bytes, str]]:
    """The files of a :class:`Job` (a validated one) to upload: key -> (content, content type).

    Each must be the content one of the job's attachments references, by size and SHA-256: a
    key is a content address, and other bytes under it would spoil every job that names it.
    """
    files = job.files if isinstance(job, Job) else {}
    refs = {ref["key"]: ref for ref in job.get("attachments", [])}
    uploads = {}
    for key, content in files.items():
        ref = refs.get(key)
        if ref is None:
            raise _Refused(
                "attachment_upload_failed",
                f"not uploaded: the job's files hold {key!r}, which none of its attachments "
                "references",
            )
        if (
            not isinstance(content, (bytes, bytearray))
            or len(content) != ref["bytes"]
            or hashlib.sha256(content).hexdigest() != ref["sha256"]
        ):
            raise _Refused(
                "attachment_upload_failed",
                f"not uploaded: the job's file {key!r} does not match its reference "
                f"{ref['filename']!r} (size and SHA-256)",
            )
        uploads[key] = (bytes(content), ref["content_type"])
    return uploads


def _claim_check(body: str) -> Tuple[str, bytes, str]:
    """The claim check of a message body: (the key it is stored at, the bytes stored, the
    pointer the queue carries instead).

    The key is ``claim-check/`` and the SHA-256 (lower-case hex) of the body's UTF-8 bytes; the
    pointer is the compact JSON ``{"courier_claim_check":1,"key":...,"bytes":...,"sha256":...}``,
    ``courier_claim_check`` first (the send function tests that prefix), byte for byte what
    ``ClaimCheck::to_body`` in shared/core/src/claim_check.rs writes. The send function redeems
    it, checking the stored body's size and digest, before it parses the job.
    """
    data = body.encode("utf-8")
    sha256 = hashlib.sha256(data).hexdigest()
    key = CLAIM_CHECK_KEY_PREFIX + sha256
    pointer = json.dumps(
        {"courier_claim_check": 1, "key": key, "bytes": len(data), "sha256": sha256},
        separators=(",", ":"),
    )
    return key, data, pointer


def _describe(error: Exception) -> tuple:
    """(code, message) of a failed call."""
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        return details.get("Code", type(error).__name__), details.get("Message", str(error))
    return type(error).__name__, str(error)


class CourierQueue:
    """Courier's send queue: validates jobs, uploads their attachments, encodes them and sends
    them in batches, a body too large for a queue message through the claim check.

    `sqs` is a boto3 SQS client (by default ``boto3.client("sqs")``, which follows the usual AWS
    configuration, ``AWS_ENDPOINT_URL`` included). Failed entries SQS does not blame on the
    sender, and calls that failed transiently, are retried up to `max_attempts` calls in all,
    waiting 0.1 s, 0.2 s, 0.4 s, ... (at most 5 s) through `sleep` in between.

    `payload_bucket` is the stack's payload bucket (its ``PayloadBucketName`` output), where the
    files of a :class:`~courier_client.Job` are uploaded before it is enqueued; `s3` is a boto3
    S3 client (by default ``boto3.client("s3")``, made when the first file is uploaded). Uploads
    are retried as the SQS calls are.

    A job whose encoded body is longer than `claim_check_above` UTF-8 bytes (by default
    :data:`MAX_INLINE_BYTES`, 1 MiB less 16 KiB) goes through the claim check: the body is
    stored in the payload bucket at ``claim-check/{sha256 of the body}`` (content type
    ``application/json``) and the queue carries a pointer to it, which the send function
    redeems. `claim_check_above` is an int from 1024 to :data:`MAX_INLINE_BYTES`.
    """

    def __init__(
        self,
        queue_url: str,
        sqs: Any = None,
        max_attempts: int = 5,
        sleep: Callable[[float], None] = time.sleep,
        s3: Any = None,
        payload_bucket: Optional[str] = None,
        claim_check_above: int = MAX_INLINE_BYTES,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if (
            not isinstance(claim_check_above, int)
            or isinstance(claim_check_above, bool)
            or not _MIN_CLAIM_CHECK_ABOVE <= claim_check_above <= MAX_INLINE_BYTES
        ):
            raise ValueError(
                f"claim_check_above must be an int from {_MIN_CLAIM_CHECK_ABOVE} to "
                f"{MAX_INLINE_BYTES} (bytes; a larger body is stored in the payload bucket and "
                f"the queue carries a pointer to it), found {claim_check_above!r}"
            )
        if sqs is None:
            import boto3

            sqs = boto3.client("sqs")
        self.queue_url = queue_url
        self.sqs = sqs
        self.max_attempts = max_attempts
        self.sleep = sleep
        self.s3 = s3
        self.payload_bucket = payload_bucket or None
        self.claim_check_above = claim_check_above

    @classmethod
    def from_env(
        cls, sqs: Any = None, cloudformation: Any = None, s3: Any = None
    ) -> "CourierQueue":
        """The queue at ``COURIER_QUEUE_URL``, or else the ``SendQueueUrl`` output of the
        CloudFormation stack ``COURIER_STACK``; :class:`ConfigError` when neither is set.

        The payload bucket is ``COURIER_PAYLOAD_BUCKET``, or else (with ``COURIER_STACK``) the
        stack's ``PayloadBucketName`` output; without one, jobs with files to upload or a body
        over the claim-check threshold are refused (``no_payload_bucket``) and the others sent
        as usual."""
        bucket = os.environ.get("COURIER_PAYLOAD_BUCKET") or None
        url = os.environ.get("COURIER_QUEUE_URL")
        if url:
            return cls(url, sqs=sqs, s3=s3, payload_bucket=bucket)
        stack = os.environ.get("COURIER_STACK")
        if stack:
            queue = cls.from_stack(stack, sqs=sqs, cloudformation=cloudformation, s3=s3)
            queue.payload_bucket = bucket or queue.payload_bucket
            return queue
        raise ConfigError(
            "no Courier queue configured: set COURIER_QUEUE_URL to the send queue's URL, or "
            "COURIER_STACK to the name of the Courier CloudFormation stack"
        )

    @classmethod
    def from_stack(
        cls, stack_name: str, sqs: Any = None, cloudformation: Any = None, s3: Any = None
    ) -> "CourierQueue":
        """The queue named by the ``SendQueueUrl`` output of the CloudFormation stack
        `stack_name` (`cloudformation` defaults to ``boto3.client("cloudformation")``), with
        the payload bucket of its ``PayloadBucketName`` output."""
        if cloudformation is None:
            import boto3

            cloudformation = boto3.client("cloudformation")
        stacks = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
        outputs = {o["OutputKey"]: o["OutputValue"] for s in stacks for o in s.get("Outputs", [])}
        if "SendQueueUrl" not in outputs:
            raise ConfigError(
                f"stack {stack_name!r} has no output SendQueueUrl: is it a Courier stack?"
            )
        return cls(
            outputs["SendQueueUrl"],
            sqs=sqs,
            s3=s3,
            payload_bucket=outputs.get("PayloadBucketName"),
        )

    def send(self, job: Any) -> SendResult:
        """Validates, encodes and sends one job (see :meth:`send_batch`)."""
        return self.send_batch([job])[0]

    def send_batch(self, jobs: Sequence[Any]) -> List[SendResult]:
        """Sends `jobs`, one :class:`SendResult` each, in their order.

        A job that does not validate or encode is refused here (its result says why) and not
        sent. Then the files of each :class:`~courier_client.Job` are uploaded to the payload
        bucket, and each body over `claim_check_above` bytes is stored there too (the claim
        check: the queue carries a pointer to it), every one before any job is enqueued; a job
        whose files cannot all be uploaded (``attachment_upload_failed``), whose body cannot be
        stored (``body_upload_failed``), or that needs the bucket and the queue has none
        (``no_payload_bucket``), is not sent. The others still are, in ``SendMessageBatch``
        calls split as :func:`sqs_batches` splits them (a claim-checked job counting as its
        pointer). Entries SQS fails as the sender's fault are reported at once with SQS's code;
        the others, and calls that failed transiently, are retried.
        """
        results: List[SendResult] = []
        bodies: Dict[int, str] = {}
        uploads: Dict[int, Dict[str, Tuple[bytes, str]]] = {}
        checks: Dict[int, Tuple[str, bytes, str]] = {}  # claim-checked: (key, body, pointer)
        for i, job in enumerate(jobs):
            message_id = job.get("message_id") if isinstance(job, dict) else None
            results.append(
                SendResult(message_id if isinstance(message_id, str) else None, ok=False)
            )
            try:
                validate(job)
                body = encode(job)
                files = _uploads(job)
                if files and self.payload_bucket is None:
                    raise _Refused(
                        "no_payload_bucket",
                        f"the job has {len(files)} attachment file(s) to upload and no payload "
                        "bucket is configured: set COURIER_PAYLOAD_BUCKET (or COURIER_STACK, "
                        "whose PayloadBucketName output names it), or pass payload_bucket= to "
                        "CourierQueue",
                    )
                size = len(body.encode("utf-8"))
                if size > self.claim_check_above and self.payload_bucket is None:
                    raise _Refused(
                        "no_payload_bucket",
                        f"the job's message body is {size} bytes, over the queue's claim-check "
                        f"threshold of {self.claim_check_above}: it must be stored in the payload "
                        "bucket and none is configured: set COURIER_PAYLOAD_BUCKET (or "
                        "COURIER_STACK, whose PayloadBucketName output names it), or pass "
                        "payload_bucket= to CourierQueue",
                    )
            except (InvalidJob, _Refused) as e:
                results[i].error_code, results[i].error_message = e.code, e.message
                continue
            bodies[i] = body
            if files:
                uploads[i] = files
            if size > self.claim_check_above:
                checks[i] = _claim_check(body)
        # Every file before any message: a job must never be on the queue before its files.
        uploaded: Dict[str, Optional[str]] = {}  # key -> None, or why its upload failed
        for i, files in uploads.items():
            for key, (content, content_type) in files.items():
                if key not in uploaded:
                    uploaded[key] = self._upload(key, content, content_type)
                if uploaded[key] is not None:
                    results[i].error_code = "attachment_upload_failed"
                    results[i].error_message = f"{key} not uploaded: {uploaded[key]}"
                    del bodies[i]
                    break
        # Then the bodies too large for the queue (of the jobs whose files are stored): the
        # pointer takes the body's place, on the queue and in the batch sizes.
        for i, (key, data, pointer) in checks.items():
            if i not in bodies:
                continue
            if key not in uploaded:
                uploaded[key] = self._upload(key, data, "application/json")
            if uploaded[key] is not None:
                results[i].error_code = "body_upload_failed"
                results[i].error_message = (
                    f"the job's message body ({len(data)} bytes, over the claim-check threshold "
                    f"of {self.claim_check_above}) not stored at {key}: {uploaded[key]}"
                )
                del bodies[i]
            else:
                bodies[i] = pointer
        indices = list(bodies)
        sizes = [len(bodies[i].encode("utf-8")) for i in indices]
        for batch in sqs_batches(sizes):
            self._send_batch({str(n): indices[k] for n, k in enumerate(batch)}, bodies, results)
        return results

    def _s3_client(self) -> Any:
        if self.s3 is None:
            import boto3

            self.s3 = boto3.client("s3")
        return self.s3

    def _upload(self, key: str, content: bytes, content_type: str) -> Optional[str]:
        """Puts one object (a file, or a claim-checked body) at `key` in the payload bucket,
        retrying transient failures: None, or the last error's code and message."""
        reason = None
        for attempt in range(1, self.max_attempts + 1):
            if attempt > 1:
                self.sleep(_backoff(attempt))
            try:
                self._s3_client().put_object(
                    Bucket=self.payload_bucket, Key=key, Body=content, ContentType=content_type
                )
                return None
            except (ClientError, BotoCoreError) as error:
                code, message = _describe(error)
                reason = f"{code}: {message} (bucket {self.payload_bucket}, attempt {attempt})"
                if not _transient(error):
                    break
        return reason

    def _send_batch(
        self, pending: Dict[str, int], bodies: Dict[int, str], results: List[SendResult]
    ) -> None:
        """One ``SendMessageBatch`` of `pending` (entry id -> job index), repeated for the
        entries worth retrying until they succeed or the attempts run out."""
        for attempt in range(1, self.max_attempts + 1):
            if attempt > 1:
                self.sleep(_backoff(attempt))
            for index in pending.values():
                results[index].attempts = attempt
            entries = [
                {"Id": entry, "MessageBody": bodies[index]} for entry, index in pending.items()
            ]
            try:
                response = self.sqs.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
            except (ClientError, BotoCoreError) as error:
                code, message = _describe(error)
                for index in pending.values():
                    results[index].error_code, results[index].error_message = code, message
                if not _transient(error):
                    return
                continue
            for done in response.get("Successful", []):
                result = results[pending.pop(done["Id"])]
                result.ok, result.sqs_message_id = True, done["MessageId"]
                result.error_code = result.error_message = None
            for failed in response.get("Failed", []):
                result = results[pending[failed["Id"]]]
                result.error_code, result.error_message = failed.get("Code"), failed.get("Message")
                if failed.get("SenderFault"):
                    del pending[failed["Id"]]
            if not pending:
                return
