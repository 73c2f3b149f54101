"""Courier's Python producer client: build email jobs (the ``EmailJob`` v1 contract), validate
them exactly as Courier's send function does, and put them on its SQS send queue.

>>> from courier_client import CourierQueue, build_job
>>> job = build_job(from_="Shop <shop@example.com>", to="ann@example.org", campaign_id="receipts",
...                 idempotency_key="order-4711/receipt", subject="Your receipt", text="Thanks!")
>>> CourierQueue.from_env().send(job).ok  # doctest: +SKIP
True
"""

from ._job import (
    ALLOWED_HEADERS,
    JOB_VERSION,
    MAX_BODY_BYTES,
    MAX_RECIPIENTS,
    SQS_MAX_BYTES,
    InvalidJob,
    build_job,
    encode,
    message_id_for,
    validate,
)
from ._queue import SQS_BATCH_ENTRIES, ConfigError, CourierQueue, SendResult, sqs_batches

__all__ = [
    "ALLOWED_HEADERS",
    "JOB_VERSION",
    "MAX_BODY_BYTES",
    "MAX_RECIPIENTS",
    "SQS_BATCH_ENTRIES",
    "SQS_MAX_BYTES",
    "ConfigError",
    "CourierQueue",
    "InvalidJob",
    "SendResult",
    "build_job",
    "encode",
    "message_id_for",
    "sqs_batches",
    "validate",
]
