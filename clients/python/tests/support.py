"""Shared paths and the conformance table, resolved from this file (repo root = tests/../../..)."""

import copy
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCHEMA_PATH = ROOT / "schema" / "email-job.v1.json"
TABLE = json.loads((ROOT / "schema" / "conformance" / "jobs.json").read_text("utf-8"))


def expand(value):
    """The table's values with every {"$repeat": [v, n]} written out."""
    if isinstance(value, dict):
        if set(value) == {"$repeat"}:
            item, count = value["$repeat"]
            return item * count
        return {key: expand(item) for key, item in value.items()}
    if isinstance(value, list):
        return [expand(item) for item in value]
    return value


def case_job(case):
    """The job of one table case: `job`, or `base` with `remove` removed and `set` set."""
    if "job" in case:
        return expand(case["job"])
    job = copy.deepcopy(TABLE["base"])
    for field in case.get("remove", []):
        del job[field]
    job.update(expand(case.get("set", {})))
    return job


def base_job(**changes):
    """The table's base job (valid), with `changes`."""
    job = copy.deepcopy(TABLE["base"])
    job.update(changes)
    return job
