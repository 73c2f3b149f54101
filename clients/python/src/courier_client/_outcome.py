"""Outcome events: what Courier publishes on its outcome bus (EventBridge) when a job reaches an
outcome, read back into an :class:`Outcome` (``OutcomeDetail`` in shared/core/src/outcome.rs;
the format is in docs/outcomes.md)."""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

#: The events' ``source``.
OUTCOME_SOURCE = "courier"
#: The layout of ``detail`` this client reads (``detail.version``).
OUTCOME_DETAIL_VERSION = 1
#: Each ``detail.outcome`` and its event's ``detail-type``.
OUTCOME_DETAIL_TYPES = {
    "sent": "Email Sent",
    "delivered": "Email Delivered",
    "partially_delivered": "Email Partially Delivered",
    "bounced": "Email Bounced",
    "complained": "Email Complained",
    "suppressed": "Email Suppressed",
    "dead_lettered": "Email Dead-Lettered",
    "failed": "Email Failed",
}

# RFC 3339 date-time; the fraction is read to microseconds (Courier writes milliseconds).
_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})"
)


@dataclass(frozen=True)
class RecipientOutcome:
    """One recipient of the job and its own outcome so far: ``role`` is ``to``, ``cc`` or
    ``bcc``; ``status`` one of ``unknown``, ``sent``, ``bounced_transient``, ``resent`` (sent
    again as a job of its own), ``delivered``, ``complained``, ``bounced_permanent``,
    ``suppressed``."""

    address: str
    role: str
    status: str


@dataclass(frozen=True)
class Outcome:
    """One outcome of one job: the ``detail`` of a Courier outcome event.

    ``event_id`` (``{message_id}/{attempt}/{outcome}``) is the same each time one outcome is
    published: delivery is at least once, so dedupe on it. ``final`` is false only for
    ``sent`` through a provider that reports later (SES: ``delivered``, ``bounced`` or
    ``complained`` usually follows); a ``complained`` can also follow ``delivered``. ``metadata`` is the
    job's own (``{}`` when it had none); ``at`` is when the outcome was written (UTC).
    ``recipients`` holds each recipient's own outcome (empty before a send recorded them);
    ``partially_delivered`` means some were delivered and the others bounced.
    """

    event_id: str
    outcome: str
    final: bool
    message_id: str
    campaign_id: Optional[str]
    trace_id: Optional[str]
    metadata: Dict[str, str] = field(hash=False)  # a dict: left out of the hash
    attempt: int
    provider: Optional[str]
    provider_message_id: Optional[str]
    reason: Optional[str]
    at: datetime.datetime
    version: int = OUTCOME_DETAIL_VERSION
    recipients: "tuple[RecipientOutcome, ...]" = ()

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> "Outcome":
        """The outcome of an EventBridge event from Courier's outcome bus (the envelope, with
        ``source``, ``detail-type`` and ``detail``, as a Lambda target or an SQS target's
        message body holds it), or of its ``detail`` alone.

        Raises ``ValueError`` when the envelope's ``source`` is not ``courier`` or its
        ``detail-type`` does not match the outcome, and when a field of the detail is missing,
        of the wrong type, or not a known value (``outcome``, ``version``). Fields the detail
        has beyond these are ignored.
        """
        if not isinstance(event, Mapping):
            raise ValueError(
                f"an outcome event must be a JSON object, found {type(event).__name__}"
            )
        if "detail" in event:
            source = event.get("source")
            if source != OUTCOME_SOURCE:
                raise ValueError(
                    f"not a Courier outcome event: source is {source!r}, not {OUTCOME_SOURCE!r}"
                )
            detail = event["detail"]
            if not isinstance(detail, Mapping):
                raise ValueError(f"`detail` must be an object, found {type(detail).__name__}")
        else:
            detail = event
        outcome = _field(detail, "outcome", str)
        if outcome not in OUTCOME_DETAIL_TYPES:
            raise ValueError(
                f"unknown outcome {outcome!r}; known: {', '.join(OUTCOME_DETAIL_TYPES)}"
            )
        if detail is not event and "detail-type" in event:
            expected = OUTCOME_DETAIL_TYPES[outcome]
            if event["detail-type"] != expected:
                raise ValueError(
                    f"detail-type {event['detail-type']!r} does not match outcome {outcome!r} "
                    f"(expected {expected!r})"
                )
        version = _field(detail, "version", int)
        if version != OUTCOME_DETAIL_VERSION:
            raise ValueError(
                f"unknown detail version {version}; this client reads {OUTCOME_DETAIL_VERSION}"
            )
        metadata = _field(detail, "metadata", dict)
        for key, value in metadata.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValueError(
                    f"outcome event detail `metadata` must map strings to strings, "
                    f"found {key!r}: {value!r}"
                )
        attempt = _field(detail, "attempt", int)
        if attempt < 0:
            raise ValueError(f"`attempt` must not be negative, found {attempt}")
        return cls(
            event_id=_field(detail, "event_id", str),
            outcome=outcome,
            final=_field(detail, "final", bool),
            message_id=_field(detail, "message_id", str),
            campaign_id=_field(detail, "campaign_id", str, nullable=True),
            trace_id=_field(detail, "trace_id", str, nullable=True),
            metadata=dict(metadata),
            attempt=attempt,
            provider=_field(detail, "provider", str, nullable=True),
            provider_message_id=_field(detail, "provider_message_id", str, nullable=True),
            reason=_field(detail, "reason", str, nullable=True),
            at=_timestamp(_field(detail, "at", str)),
            version=version,
            recipients=_recipients(detail),
        )


def _recipients(detail: Mapping[str, Any]) -> "tuple[RecipientOutcome, ...]":
    listed = detail.get("recipients", [])
    if not isinstance(listed, list):
        raise ValueError(
            f"outcome event detail `recipients` must be a list, found {type(listed).__name__}"
        )
    out = []
    for r in listed:
        if not isinstance(r, Mapping) or not all(
            isinstance(r.get(k), str) for k in ("address", "role", "status")
        ):
            raise ValueError(
                "each of the outcome event detail's `recipients` must be an object with "
                f"string `address`, `role` and `status`, found {r!r}"
            )
        out.append(RecipientOutcome(address=r["address"], role=r["role"], status=r["status"]))
    return tuple(out)


def _field(detail: Mapping[str, Any], name: str, kind: type, nullable: bool = False) -> Any:
    if name not in detail:
        raise ValueError(f"outcome event detail has no `{name}`")
    value = detail[name]
    if nullable and value is None:
        return None
    # bool is an int in Python; JSON keeps them apart.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        found = "null" if value is None else type(value).__name__
        raise ValueError(
            f"outcome event detail `{name}` must be {'null or ' if nullable else ''}"
            f"{kind.__name__}, found {found}"
        )
    return value


def _timestamp(text: str) -> datetime.datetime:
    """An RFC 3339 date-time as an aware datetime in UTC (``fromisoformat`` before Python 3.11
    takes neither ``Z`` nor fractions other than 3 or 6 digits)."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise ValueError(f"outcome event detail `at` is not an RFC 3339 date-time: {text!r}")
    date, time, fraction, offset = match.groups()
    fraction = (fraction or "0")[:6].ljust(6, "0")
    offset = "+00:00" if offset in ("Z", "z") else offset
    try:
        at = datetime.datetime.fromisoformat(f"{date}T{time}.{fraction}{offset}")
    except ValueError as e:
        raise ValueError(f"outcome event detail `at` is not a valid date-time: {text!r}") from e
    return at.astimezone(datetime.timezone.utc)
