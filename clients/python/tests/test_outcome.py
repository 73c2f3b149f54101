"""Outcome events read into `Outcome` (no network): the envelope or the detail alone, and every
way a detail can be wrong."""

import copy
import datetime
import json

import pytest

from courier_client import OUTCOME_DETAIL_TYPES, OUTCOME_SOURCE, Outcome, RecipientOutcome

# The detail of `the_event_is_built_from_the_durable_record` in shared/core/src/outcome.rs.
DETAIL = {
    "version": 1,
    "event_id": "m-1/2/delivered",
    "outcome": "delivered",
    "final": True,
    "message_id": "m-1",
    "campaign_id": "c-1",
    "trace_id": "t-1",
    "metadata": {"order": "o-42"},
    "attempt": 2,
    "provider": "ses",
    "provider_message_id": None,
    "reason": "accepted",
    "at": "1970-01-01T00:00:01.234Z",
}

# As EventBridge delivers it to a Lambda function (and, as JSON, in an SQS target's body).
EVENT = {
    "version": "0",
    "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
    "detail-type": "Email Delivered",
    "source": "courier",
    "account": "111122223333",
    "time": "1970-01-01T00:00:02Z",
    "region": "eu-west-1",
    "resources": [],
    "detail": DETAIL,
}

EXPECTED = Outcome(
    event_id="m-1/2/delivered",
    outcome="delivered",
    final=True,
    message_id="m-1",
    campaign_id="c-1",
    trace_id="t-1",
    metadata={"order": "o-42"},
    attempt=2,
    provider="ses",
    provider_message_id=None,
    reason="accepted",
    at=datetime.datetime(1970, 1, 1, 0, 0, 1, 234000, tzinfo=datetime.timezone.utc),
)


def detail(**changes):
    out = copy.deepcopy(DETAIL)
    out.update(changes)
    return out


def event(**changes):
    out = copy.deepcopy(EVENT)
    out.update(changes)
    return out


def refused(value):
    with pytest.raises(ValueError) as raised:
        Outcome.from_event(value)
    return str(raised.value)


def test_the_whole_event():
    outcome = Outcome.from_event(EVENT)
    assert outcome == EXPECTED
    assert outcome.at.tzinfo is datetime.timezone.utc
    assert outcome.version == 1


def test_the_detail_alone():
    assert Outcome.from_event(DETAIL) == EXPECTED


def test_an_sqs_targets_body():
    assert Outcome.from_event(json.loads(json.dumps(EVENT))) == EXPECTED


def test_nulls_where_the_detail_allows_them():
    outcome = Outcome.from_event(
        detail(campaign_id=None, trace_id=None, provider=None, reason=None, metadata={})
    )
    assert (outcome.campaign_id, outcome.trace_id, outcome.provider, outcome.reason) == (
        None,
        None,
        None,
        None,
    )
    assert outcome.metadata == {}


def test_an_outcome_is_frozen_and_hashable():
    outcome = Outcome.from_event(DETAIL)
    with pytest.raises(AttributeError):
        outcome.outcome = "bounced"
    assert len({outcome, Outcome.from_event(EVENT)}) == 1


@pytest.mark.parametrize("outcome,detail_type", sorted(OUTCOME_DETAIL_TYPES.items()))
def test_every_outcome_and_its_detail_type(outcome, detail_type):
    got = Outcome.from_event(event(**{"detail-type": detail_type}, detail=detail(outcome=outcome)))
    assert got.outcome == outcome


def test_the_known_outcomes():
    assert list(OUTCOME_DETAIL_TYPES) == [
        "sent",
        "delivered",
        "partially_delivered",
        "bounced",
        "complained",
        "suppressed",
        "dead_lettered",
        "failed",
    ]
    assert OUTCOME_SOURCE == "courier"


def test_an_unknown_outcome_is_refused_with_the_known_ones():
    message = refused(detail(outcome="opened"))
    assert "'opened'" in message
    assert (
        "sent, delivered, partially_delivered, bounced, complained, suppressed, dead_lettered, failed"
        in message
    )


@pytest.mark.parametrize("source", ["aws.ses", "Courier", None, ""])
def test_another_source_is_refused(source):
    assert "not a Courier outcome event" in refused(event(source=source))


def test_an_envelope_without_a_source_is_refused():
    whole = event()
    del whole["source"]
    assert "source is None" in refused(whole)


def test_a_detail_type_that_does_not_match_the_outcome_is_refused():
    message = refused(event(**{"detail-type": "Email Bounced"}))
    assert "'Email Bounced'" in message and "'Email Delivered'" in message


@pytest.mark.parametrize("name", sorted(DETAIL))
def test_a_missing_field_is_refused(name):
    incomplete = detail()
    del incomplete[name]
    assert f"has no `{name}`" in refused(incomplete)
    assert f"has no `{name}`" in refused(event(detail=incomplete))


@pytest.mark.parametrize(
    "name,value",
    [
        ("event_id", None),
        ("event_id", 1),
        ("outcome", None),
        ("final", "true"),
        ("final", 1),
        ("message_id", None),
        ("campaign_id", 7),
        ("trace_id", ["t"]),
        ("metadata", None),
        ("metadata", [["k", "v"]]),
        ("attempt", "2"),
        ("attempt", 2.0),
        ("attempt", True),
        ("provider", 1),
        ("provider_message_id", {}),
        ("reason", False),
        ("at", None),
        ("at", 0),
        ("version", "1"),
    ],
)
def test_a_field_of_the_wrong_type_is_refused(name, value):
    assert f"`{name}` must be" in refused(detail(**{name: value}))


@pytest.mark.parametrize("metadata", [{"k": 1}, {"k": None}, {1: "v"}])
def test_metadata_must_map_strings_to_strings(metadata):
    assert "`metadata` must map strings to strings" in refused(detail(metadata=metadata))


def test_a_negative_attempt_is_refused():
    assert "`attempt` must not be negative" in refused(detail(attempt=-1))


def test_another_detail_version_is_refused():
    assert "unknown detail version 2" in refused(detail(version=2))


def test_fields_beyond_the_known_ones_are_ignored():
    assert Outcome.from_event(detail(later="x")) == EXPECTED


@pytest.mark.parametrize(
    "at,expected",
    [
        ("2026-12-02T09:00:00.123Z", datetime.datetime(2026, 12, 2, 9, 0, 0, 123000)),
        ("2026-12-02T09:00:00Z", datetime.datetime(2026, 12, 2, 9, 0, 0)),
        ("2026-12-02t09:00:00.1234567z", datetime.datetime(2026, 12, 2, 9, 0, 0, 123456)),
        ("2026-12-02T10:30:00.5+01:30", datetime.datetime(2026, 12, 2, 9, 0, 0, 500000)),
    ],
)
def test_at_is_read_as_rfc_3339_and_given_in_utc(at, expected):
    got = Outcome.from_event(detail(at=at)).at
    assert got == expected.replace(tzinfo=datetime.timezone.utc)
    assert got.utcoffset() == datetime.timedelta(0)


@pytest.mark.parametrize(
    "at", ["", "2026-12-02", "2026-12-02T09:00:00", "2026-12-02 09:00:00Z", "2026-13-02T09:00:00Z"]
)
def test_at_that_is_not_an_rfc_3339_date_time_is_refused(at):
    assert "`at` is not" in refused(detail(at=at))


@pytest.mark.parametrize("value", [None, [], "{}", 1])
def test_what_is_not_an_object_is_refused(value):
    assert "must be a JSON object" in refused(value)


def test_a_detail_that_is_not_an_object_is_refused():
    assert "`detail` must be an object" in refused(event(detail="{}"))


def test_each_recipients_outcome_is_read():
    got = Outcome.from_event(
        detail(
            outcome="partially_delivered",
            recipients=[
                {"address": "ann@example.org", "role": "to", "status": "delivered"},
                {"address": "bob@example.org", "role": "cc", "status": "bounced_permanent"},
            ],
        )
    )
    assert got.recipients == (
        RecipientOutcome("ann@example.org", "to", "delivered"),
        RecipientOutcome("bob@example.org", "cc", "bounced_permanent"),
    )
    # Without the field (before a send recorded the recipients): none.
    assert Outcome.from_event(DETAIL).recipients == ()


@pytest.mark.parametrize(
    "recipients", ["ann", [{"address": "ann@example.org", "role": "to"}], [1], [{"address": 1, "role": "to", "status": "sent"}]]
)
def test_recipients_of_the_wrong_shape_are_refused(recipients):
    assert "recipients" in refused(detail(recipients=recipients))
