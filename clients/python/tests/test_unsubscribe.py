"""The job's `list_id` and `unsubscribe`: the parser's codes and messages, in its order, and
build_job's arguments (no network). The conformance table's rows run in test_contract.py."""

import pytest
from support import base_job

from courier_client import MAX_LIST_ID_LEN, InvalidJob, build_job, encode, validate


def refusal(**changes):
    with pytest.raises(InvalidJob) as raised:
        validate(base_job(**changes))
    return raised.value


def test_the_limit_is_the_parsers():
    assert MAX_LIST_ID_LEN == 64


@pytest.mark.parametrize(
    "list_id",
    ["", "news\n", "\nnews", "-news", "_news", "a/b", "a:b", "ne\u0301ws", "\u212a", "l" * 65],
)
def test_a_list_id_is_short_ascii_words(list_id):
    error = refusal(list_id=list_id)
    assert error.code == "invalid_list_id", error.message
    assert error.message.endswith(
        "is invalid: letters, digits, `.`, `_` and `-`, starting with a letter or digit, "
        "at most 64 characters"
    )


@pytest.mark.parametrize("list_id", ["a", "9", "A.b_c-D", "news-2026", "l" * 64])
def test_ok_list_ids(list_id):
    validate(base_job(list_id=list_id))


@pytest.mark.parametrize("list_id", [7, True, [], {}, ["news"]])
def test_a_list_id_that_is_not_a_string_is_a_schema_error(list_id):
    assert refusal(list_id=list_id).code == "schema"


@pytest.mark.parametrize("mode", ["yes", "List", "", 1, True, ["list"], {}])
def test_an_unknown_mode_is_a_schema_error(mode):
    assert refusal(unsubscribe=mode).code == "schema"


def test_the_refusals_have_the_parsers_messages():
    # Every recipient counts, bcc too.
    error = refusal(unsubscribe="list", bcc=["bo@example.org"])
    assert error.code == "unsubscribe_not_possible"
    assert error.message == (
        "`unsubscribe: list` needs exactly one recipient (the link names it), found 2"
    )
    error = refusal(
        unsubscribe="global", to=["a@example.org", "b@example.org"], cc=["c@example.org"]
    )
    assert error.message == (
        "`unsubscribe: global` needs exactly one recipient (the link names it), found 3"
    )
    error = refusal(unsubscribe="list", campaign_id="spring sale")
    assert error.code == "unsubscribe_not_possible"
    assert error.message == (
        "`unsubscribe: list` needs a `list_id` (the `campaign_id` is not a list id)"
    )


def test_global_and_none_need_no_list():
    validate(base_job(unsubscribe="global", campaign_id="spring sale"))
    validate(base_job(unsubscribe="none", campaign_id="spring sale", cc=["bo@example.org"]))
    validate(base_job(priority="bulk", campaign_id="spring sale", cc=["bo@example.org"]))


def test_the_rules_run_after_metadata_and_in_the_parsers_order():
    assert refusal(list_id="a b", metadata={"a b": "1"}).code == "invalid_metadata"
    assert refusal(list_id="a b", unsubscribe="global", cc=["bo@example.org"]).code == (
        "invalid_list_id"
    )
    # The recipient count is checked before the list.
    error = refusal(unsubscribe="list", campaign_id="spring sale", cc=["bo@example.org"])
    assert "exactly one recipient" in error.message


def build(**changes):
    fields = dict(
        from_="Shop <shop@example.com>",
        to="ann@example.org",
        campaign_id="c-1",
        message_id="m-1",
        subject="Hi",
        text="Hello",
    )
    fields.update(changes)
    return build_job(**fields)


def test_build_job_carries_list_id_and_unsubscribe():
    job = build(list_id="weekly", unsubscribe="list")
    assert (job["list_id"], job["unsubscribe"]) == ("weekly", "list")
    assert '"list_id":"weekly","unsubscribe":"list"' in encode(job)


def test_build_job_without_them_writes_no_field():
    job = build()
    assert "list_id" not in job and "unsubscribe" not in job


def test_build_job_refuses_what_the_parser_refuses():
    for changes, code in [
        (dict(list_id=".news"), "invalid_list_id"),
        (dict(unsubscribe="always"), "schema"),
        (dict(unsubscribe="list", cc=["bo@example.org"]), "unsubscribe_not_possible"),
    ]:
        with pytest.raises(InvalidJob) as raised:
            build(**changes)
        assert raised.value.code == code
