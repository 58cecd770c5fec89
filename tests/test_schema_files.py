"""schemas/ for other languages: the Arrow IPC schema files round-trip to the live schemas and
have not drifted; the JSON Schema has not drifted and accepts the SDK's own records (and refuses
broken ones)."""

from __future__ import annotations

import json
import math
from datetime import datetime

import jsonschema
import pyarrow as pa
import pytest

from tests.helpers.paths import REPO_ROOT
from trajstore import TrajectoryBuilder
from trajstore.convert import trajectories_to_table
from trajstore.schema import READABLE_VERSIONS, trajectory_schema
from trajstore.schema_files import ARROW_FILE, JSON_SCHEMA_FILE, arrow_schema_bytes, json_schema_text

SCHEMAS = REPO_ROOT / "schemas"
REGENERATE = "regenerate with `python -m trajstore.schema_files`"


@pytest.mark.parametrize("version", READABLE_VERSIONS)
def test_arrow_ipc_schema_round_trips(version: int) -> None:
    path = SCHEMAS / ARROW_FILE.format(version=version)
    read = pa.ipc.read_schema(pa.memory_map(str(path)))
    assert read.equals(trajectory_schema(version), check_metadata=True)
    assert read.metadata[b"trajstore.schema_version"] == str(version).encode()
    assert path.read_bytes() == arrow_schema_bytes(version), f"{path.name} drifted: {REGENERATE}"


@pytest.mark.parametrize("version", READABLE_VERSIONS)
def test_json_schema_has_not_drifted(version: int) -> None:
    path = SCHEMAS / JSON_SCHEMA_FILE.format(version=version)
    assert path.read_text() == json_schema_text(version), f"{path.name} drifted: {REGENERATE}"
    jsonschema.Draft202012Validator.check_schema(json.loads(path.read_text()))


def sdk_records(version: int) -> list[dict]:
    """Rows the SDK writes, as JSON lines carry them: timestamps as RFC 3339, NaN as null."""
    trajs = []
    for i in range(3):
        b = TrajectoryBuilder(trajectory_id=f"j{i}", tokenizer="t", metadata={"k": i})
        b.add_prompt([1, 2], role="user")
        b.add_action([3, 4], [-0.5, None if i == 1 else -0.25], policy_version=i, sampling={"temperature": 1.0})
        b.add_observation([5])
        b.set_reward(1.0, raw=True)
        trajs.append(b.finish(status="truncated" if i == 2 else "completed"))

    def plain(v):  # noqa: ANN001, ANN202
        if isinstance(v, datetime):
            return v.isoformat()
        if isinstance(v, float) and math.isnan(v):
            return None
        if isinstance(v, list):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return [plain(r) for r in trajectories_to_table(trajs, version=version).to_pylist()]


@pytest.mark.parametrize("version", READABLE_VERSIONS)
def test_json_schema_validates_sdk_records(version: int) -> None:
    validator = jsonschema.Draft202012Validator(
        json.loads((SCHEMAS / JSON_SCHEMA_FILE.format(version=version)).read_text()),
        format_checker=jsonschema.FormatChecker())
    records = sdk_records(version)
    for r in records:
        validator.validate(r)
    bad = [dict(records[0], status="done"), {k: v for k, v in records[0].items() if k != "tokens"},
           dict(records[0], tokens=[1, 2**40]), dict(records[0], extra=1)]
    for r in bad:
        assert list(validator.iter_errors(r)), r
