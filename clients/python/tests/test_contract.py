"""The shared conformance table through the published JSON Schema and through the client."""

import json

import pytest
from support import ROOT, SCHEMA_PATH, TABLE, case_job
from jsonschema import Draft202012Validator

import courier_client
from courier_client import InvalidJob, message_id_for, validate

CASES = TABLE["cases"]
SCHEMA = json.loads(SCHEMA_PATH.read_text("utf-8"))
SCHEMA_VALIDATOR = Draft202012Validator(SCHEMA, format_checker=Draft202012Validator.FORMAT_CHECKER)


def test_the_table_covers_every_outcome():
    assert len(CASES) > 60
    assert {case["expect"] for case in CASES} >= {
        "accept",
        "schema",
        "invalid_address",
        "body_too_large",
        "attachments_too_large",
        "invalid_attachment",
        "attachment_denied",
        "invalid_metadata",
    }
    assert {case.get("schema") for case in CASES if case["expect"] != "accept"} == {
        "rejects",
        "cannot_express",
    }


def test_the_schema_is_a_valid_draft_2020_12_schema():
    Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_the_published_schema_agrees_with_the_table(case):
    errors = list(SCHEMA_VALIDATOR.iter_errors(case_job(case)))
    if case["expect"] == "accept" or case["schema"] == "cannot_express":
        assert errors == [], f"the schema rejects a case it should accept: {errors[0].message}"
    else:
        assert case["schema"] == "rejects"
        assert errors, "the schema accepts a case the parser rejects"


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_the_client_gives_the_parsers_code(case):
    job = case_job(case)
    if case["expect"] == "accept":
        assert validate(job) is None
    else:
        with pytest.raises(InvalidJob) as raised:
            validate(job)
        assert raised.value.code == case["expect"], raised.value.message


@pytest.mark.parametrize(
    "vector", TABLE["message_ids"], ids=[v["key"] for v in TABLE["message_ids"]]
)
def test_message_id_vectors(vector):
    assert message_id_for(vector["key"]) == vector["message_id"]


def test_the_packaged_schema_is_the_published_one():
    packaged = ROOT / "clients" / "python" / "src" / "courier_client" / "email-job.v1.json"
    assert packaged.read_bytes() == SCHEMA_PATH.read_bytes()


def test_the_installed_package_ships_the_schema():
    from importlib import resources

    shipped = resources.files(courier_client).joinpath("email-job.v1.json").read_bytes()
    assert shipped == SCHEMA_PATH.read_bytes()
