"""examples/outcome_consumer.py against a stubbed DynamoDB client (no network): the first
delivery of an outcome is handled, a repeat is dropped, a failure frees it for the retry."""

import importlib.util
from pathlib import Path

import pytest
from botocore.stub import ANY, Stubber
from test_outcome import EVENT

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "outcome_consumer.py"


@pytest.fixture
def example(monkeypatch):
    monkeypatch.setenv("SEEN_TABLE", "seen")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    spec = importlib.util.spec_from_file_location("outcome_consumer", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with Stubber(module.SEEN.meta.client) as stub:
        yield module, stub
        stub.assert_no_pending_responses()


def expect_put(stub, error=None):
    params = {
        "TableName": "seen",
        "Item": {"event_id": "m-1/2/delivered", "expires": ANY},
        "ConditionExpression": "attribute_not_exists(event_id)",
    }
    if error:
        stub.add_client_error("put_item", error, expected_params=params)
    else:
        stub.add_response("put_item", {}, params)


def test_the_first_delivery_is_handled_and_a_repeat_dropped(example, capsys):
    module, stub = example
    expect_put(stub)
    expect_put(stub, "ConditionalCheckFailedException")
    assert module.handler(EVENT, None) == {"handled": "m-1/2/delivered"}
    assert "order o-42: delivered" in capsys.readouterr().out
    assert module.handler(EVENT, None) == {"duplicate": "m-1/2/delivered"}
    assert capsys.readouterr().out == ""


def test_a_failed_dispatch_forgets_the_event_for_its_retry(example, monkeypatch):
    module, stub = example
    expect_put(stub)
    key = {"TableName": "seen", "Key": {"event_id": "m-1/2/delivered"}}
    stub.add_response("delete_item", {}, key)

    def broken(outcome):
        raise RuntimeError("downstream is down")

    monkeypatch.setattr(module, "dispatch", broken)
    with pytest.raises(RuntimeError):
        module.handler(EVENT, None)


def test_an_event_from_elsewhere_is_refused_before_any_write(example):
    module, _ = example
    with pytest.raises(ValueError):
        module.handler(dict(EVENT, source="aws.ses"), None)
