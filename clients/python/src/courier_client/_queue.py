"""Putting jobs on Courier's send queue (SQS), in batches, with retries of transient failures.

Retrying after an ambiguous failure (a timeout after SQS may have stored the message, a 5xx)
can enqueue a job twice. That is safe: Courier sends each ``message_id`` at most once, so the
send function's claim on the id drops the second copy.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

from botocore.exceptions import BotoCoreError, ClientError, ConnectionError, HTTPClientError

from ._job import SQS_MAX_BYTES, InvalidJob, encode, validate

#: Entries in one SQS ``SendMessageBatch``.
SQS_BATCH_ENTRIES = 10

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
    refused locally (``attempts`` 0), ``too_large`` for one over SQS's 1 MiB, or SQS's (or the
    transport's) code, with ``error_message``. ``attempts`` counts the SQS calls that carried it.
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


def _describe(error: Exception) -> tuple:
    """(code, message) of a failed call."""
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        return details.get("Code", type(error).__name__), details.get("Message", str(error))
    return type(error).__name__, str(error)


class CourierQueue:
    """Courier's send queue: validates jobs, encodes them and sends them in batches.

    `sqs` is a boto3 SQS client (by default ``boto3.client("sqs")``, which follows the usual AWS
    configuration, ``AWS_ENDPOINT_URL`` included). Failed entries SQS does not blame on the
    sender, and calls that failed transiently, are retried up to `max_attempts` calls in all,
    waiting 0.1 s, 0.2 s, 0.4 s, ... (at most 5 s) through `sleep` in between.
    """

    def __init__(
        self,
        queue_url: str,
        sqs: Any = None,
        max_attempts: int = 5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if sqs is None:
            import boto3

            sqs = boto3.client("sqs")
        self.queue_url = queue_url
        self.sqs = sqs
        self.max_attempts = max_attempts
        self.sleep = sleep

    @classmethod
    def from_env(cls, sqs: Any = None, cloudformation: Any = None) -> "CourierQueue":
        """The queue at ``COURIER_QUEUE_URL``, or else the ``SendQueueUrl`` output of the
        CloudFormation stack ``COURIER_STACK``; :class:`ConfigError` when neither is set."""
        url = os.environ.get("COURIER_QUEUE_URL")
        if url:
            return cls(url, sqs=sqs)
        stack = os.environ.get("COURIER_STACK")
        if stack:
            return cls.from_stack(stack, sqs=sqs, cloudformation=cloudformation)
        raise ConfigError(
            "no Courier queue configured: set COURIER_QUEUE_URL to the send queue's URL, or "
            "COURIER_STACK to the name of the Courier CloudFormation stack"
        )

    @classmethod
    def from_stack(
        cls, stack_name: str, sqs: Any = None, cloudformation: Any = None
    ) -> "CourierQueue":
        """The queue named by the ``SendQueueUrl`` output of the CloudFormation stack
        `stack_name` (`cloudformation` defaults to ``boto3.client("cloudformation")``)."""
        if cloudformation is None:
            import boto3

            cloudformation = boto3.client("cloudformation")
        stacks = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
        outputs = {o["OutputKey"]: o["OutputValue"] for s in stacks for o in s.get("Outputs", [])}
        if "SendQueueUrl" not in outputs:
            raise ConfigError(
                f"stack {stack_name!r} has no output SendQueueUrl: is it a Courier stack?"
            )
        return cls(outputs["SendQueueUrl"], sqs=sqs)

    def send(self, job: Any) -> SendResult:
        """Validates, encodes and sends one job (see :meth:`send_batch`)."""
        return self.send_batch([job])[0]

    def send_batch(self, jobs: Sequence[Any]) -> List[SendResult]:
        """Sends `jobs`, one :class:`SendResult` each, in their order.

        A job that does not validate or encode is refused here (its result says why) and not
        sent; the others still are, in ``SendMessageBatch`` calls split as :func:`sqs_batches`
        splits them. Entries SQS fails as the sender's fault are reported at once with SQS's
        code; the others, and calls that failed transiently, are retried.
        """
        results: List[SendResult] = []
        bodies: Dict[int, str] = {}
        for i, job in enumerate(jobs):
            message_id = job.get("message_id") if isinstance(job, dict) else None
            results.append(
                SendResult(message_id if isinstance(message_id, str) else None, ok=False)
            )
            try:
                validate(job)
                bodies[i] = encode(job)
            except InvalidJob as e:
                results[i].error_code, results[i].error_message = e.code, e.message
        indices = list(bodies)
        sizes = [len(bodies[i].encode("utf-8")) for i in indices]
        for batch in sqs_batches(sizes):
            self._send_batch({str(n): indices[k] for n, k in enumerate(batch)}, bodies, results)
        return results

    def _send_batch(
        self, pending: Dict[str, int], bodies: Dict[int, str], results: List[SendResult]
    ) -> None:
        """One ``SendMessageBatch`` of `pending` (entry id -> job index), repeated for the
        entries worth retrying until they succeed or the attempts run out."""
        for attempt in range(1, self.max_attempts + 1):
            if attempt > 1:
                self.sleep(min(_FIRST_BACKOFF * 2 ** (attempt - 2), _MAX_BACKOFF))
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
