"""The job's `metadata`: the parser's limits, codes and messages, in its order, and build_job's
argument (no network). The conformance table's metadata rows run in test_contract.py."""

import pytest
from support import base_job

from courier_client import (
    MAX_METADATA_BYTES,
    MAX_METADATA_ENTRIES,
    MAX_METADATA_KEY_LEN,
    MAX_METADATA_VALUE_LEN,
    InvalidJob,
    build_job,
    encode,
    validate,
)


def refusal(metadata, **changes):
    with pytest.raises(InvalidJob) as raised:
        validate(base_job(metadata=metadata, **changes))
    return raised.value


def reason(metadata):
    """The reason of an `invalid_metadata` refusal (the text after the parser's prefix)."""
    error = refusal(metadata)
    assert error.code == "invalid_metadata", error.message
    prefix = "field `metadata` is invalid: "
    assert error.message.startswith(prefix)
    return error.message[len(prefix) :]


def test_the_limits_are_the_parsers():
    assert (MAX_METADATA_ENTRIES, MAX_METADATA_KEY_LEN) == (20, 64)
    assert (MAX_METADATA_VALUE_LEN, MAX_METADATA_BYTES) == (512, 4096)


def test_each_limit_has_the_parsers_reason():
    # The cases of `each_limit_has_its_own_reason` in shared/core/src/job/metadata.rs.
    many = {f"k{i}": "v" for i in range(21)}
    assert reason(many) == "21 entries (at most 20)"
    assert reason({"a b": "1"}) == (
        'key "a b" must be 1 to 64 ASCII letters, digits, `_`, `.`, `:` or `-`'
    )
    assert reason({"k": "é" * 513}) == 'the value of "k" is longer than 512 characters'
    assert reason({"k": "a\x85b"}) == 'the value of "k" contains a control character at offset 1'
    big = {f"k{i}": "x" * 500 for i in range(9)}
    assert reason(big) == "4518 bytes of keys and values (at most 4096)"


@pytest.mark.parametrize(
    "key", ["", "a b", "ü", "a/b", "k" * 65, "k\n", "\u212a", "k\u200b", "tab\tkey"]
)
def test_keys_are_short_ascii_words(key):
    assert reason({key: "1"}).startswith("key ")


@pytest.mark.parametrize("value", ["\x00", "a\nb", "\t", "\x1f", "\x7f", "\x80", "\x9f"])
def test_values_hold_no_control_character(value):
    assert "control character" in reason({"k": value})


def test_the_offset_of_a_control_character_is_in_bytes_as_the_parser_counts():
    assert reason({"k": "éé\n"}).endswith("at offset 4")


def test_limits_count_characters_and_bytes_as_the_parser_does():
    # 512 characters of two bytes each: within the value limit, and 1 + 1024 bytes in total.
    validate(base_job(metadata={"k": "é" * MAX_METADATA_VALUE_LEN}))
    # Exactly 4096 bytes passes, one more does not (keys count too).
    exact = {f"k{i}": "x" * (512 - 2) for i in range(8)}
    assert sum(len(k) + len(v) for k, v in exact.items()) == MAX_METADATA_BYTES
    validate(base_job(metadata=exact))
    exact["k0"] += "x"
    assert reason(exact) == "4097 bytes of keys and values (at most 4096)"
    # UTF-8 bytes, not characters: 4 x (1 + 2 x 512).
    assert reason({key: "é" * 512 for key in "klmn"}) == (
        "4100 bytes of keys and values (at most 4096)"
    )
    keys = {"k" * 64: "", "a.b:c_d-E9": "", "K": ""}
    validate(base_job(metadata=keys))
    validate(base_job(metadata={f"k{i}": "" for i in range(MAX_METADATA_ENTRIES)}))


def test_ok_values_hold_what_is_not_a_control_character():
    validate(base_job(metadata={"k": "für Ann \u200b \u202e 😀 \xa0 \u2028"}))


def test_entries_are_checked_in_key_order_as_the_parsers_btreemap_holds_them():
    assert reason({"b": "\n", "a b": "1"}).startswith('key "a b"')
    assert reason({"z z": "1", "a": "\n"}).startswith('the value of "a"')
    # Uppercase sorts before lowercase (byte order).
    assert reason({"a": "\n", "B": "\n"}).startswith('the value of "B"')


def test_the_count_is_checked_before_the_entries_and_the_size_after():
    many = {f"k{i}": "\n" for i in range(21)}
    assert reason(many).startswith("21 entries")
    assert reason({"a b": "x" * 5000}).startswith('key "a b"')


def test_metadata_is_checked_after_every_other_rule():
    error = refusal({"a b": "1"}, to=[])
    assert error.code == "no_recipients"
    bad_ref = {"filename": "x", "content_type": "text/plain", "key": "nope", "bytes": 1,
               "sha256": "0" * 64}
    assert refusal({"a b": "1"}, attachments=[bad_ref]).code == "invalid_attachment"


@pytest.mark.parametrize(
    "metadata",
    [None, [], "k=v", {"k": 1}, {"k": None}, {"k": ["v"]}, {"k": {"v": "w"}}, {"k": True}],
)
def test_what_is_not_an_object_of_strings_is_a_schema_error(metadata):
    error = refusal(metadata)
    assert error.code == "schema", error.message


def test_a_non_string_key_is_a_schema_error():
    assert refusal({1: "v"}).code == "schema"


def test_empty_metadata_is_none():
    validate(base_job(metadata={}))


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


def test_build_job_carries_metadata():
    job = build(metadata={"order": "o-42", "tenant.id": "t:7"})
    assert job["metadata"] == {"order": "o-42", "tenant.id": "t:7"}
    assert '"metadata":{"order":"o-42","tenant.id":"t:7"}' in encode(job)


def test_build_job_copies_the_mapping():
    given = {"order": "o-42"}
    job = build(metadata=given)
    given["order"] = "changed"
    assert job["metadata"] == {"order": "o-42"}


@pytest.mark.parametrize("metadata", [None, {}])
def test_build_job_without_metadata_writes_no_field(metadata):
    assert "metadata" not in build(metadata=metadata)


def test_build_job_refuses_invalid_metadata():
    with pytest.raises(InvalidJob) as raised:
        build(metadata={"order id": "1"})
    assert raised.value.code == "invalid_metadata"
    for wrong in ({"order": 42}, [("order", "o-42")], "order=o-42"):
        with pytest.raises(InvalidJob) as raised:
            build(metadata=wrong)
        assert raised.value.code == "schema"
