"""Courier's Python producer client: build email jobs (the ``EmailJob`` v1 contract), validate
them exactly as Courier's send function does, upload their attachments (and any body too large
for a queue message: the claim check) to the stack's payload bucket and put them on its SQS send
queue; read the outcome events Courier publishes back (:class:`Outcome`).

>>> from courier_client import Attachment, CourierQueue, build_job
>>> job = build_job(from_="Shop <shop@example.com>", to="ann@example.org", campaign_id="receipts",
...                 idempotency_key="order-4711/receipt", subject="Your receipt", text="Thanks!",
...                 attachments=[Attachment("receipt.txt", "text/plain", b"4711: 12.00 EUR")])
>>> CourierQueue.from_env().send(job).ok  # doctest: +SKIP
True
"""

from ._job import (
    ALLOWED_HEADERS,
    ATTACHMENT_KEY_PREFIX,
    DENIED_CONTENT_TYPES,
    DENIED_EXTENSIONS,
    JOB_VERSION,
    MAX_ATTACHMENT_BYTES,
    MAX_ATTACHMENTS,
    MAX_BODY_BYTES,
    MAX_FILENAME_LEN,
    MAX_LIST_ID_LEN,
    MAX_MESSAGE_BYTES,
    MAX_METADATA_BYTES,
    MAX_METADATA_ENTRIES,
    MAX_METADATA_KEY_LEN,
    MAX_METADATA_VALUE_LEN,
    MAX_RECIPIENTS,
    SQS_MAX_BYTES,
    Attachment,
    InvalidJob,
    Job,
    build_job,
    encode,
    message_id_for,
    validate,
)
from ._outcome import OUTCOME_DETAIL_TYPES, OUTCOME_SOURCE, Outcome, RecipientOutcome
from ._queue import (
    CLAIM_CHECK_KEY_PREFIX,
    MAX_INLINE_BYTES,
    SQS_BATCH_ENTRIES,
    ConfigError,
    CourierQueue,
    SendResult,
    sqs_batches,
)

__all__ = [
    "ALLOWED_HEADERS",
    "ATTACHMENT_KEY_PREFIX",
    "CLAIM_CHECK_KEY_PREFIX",
    "DENIED_CONTENT_TYPES",
    "DENIED_EXTENSIONS",
    "JOB_VERSION",
    "MAX_ATTACHMENT_BYTES",
    "MAX_ATTACHMENTS",
    "MAX_BODY_BYTES",
    "MAX_FILENAME_LEN",
    "MAX_INLINE_BYTES",
    "MAX_LIST_ID_LEN",
    "MAX_MESSAGE_BYTES",
    "MAX_METADATA_BYTES",
    "MAX_METADATA_ENTRIES",
    "MAX_METADATA_KEY_LEN",
    "MAX_METADATA_VALUE_LEN",
    "MAX_RECIPIENTS",
    "OUTCOME_DETAIL_TYPES",
    "OUTCOME_SOURCE",
    "SQS_BATCH_ENTRIES",
    "SQS_MAX_BYTES",
    "Attachment",
    "ConfigError",
    "CourierQueue",
    "InvalidJob",
    "Job",
    "Outcome",
    "RecipientOutcome",
    "SendResult",
    "build_job",
    "encode",
    "message_id_for",
    "sqs_batches",
    "validate",
]
