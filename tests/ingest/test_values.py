"""trajstore/ingest/values.py: a field of the wrong type is named with what was expected."""

from __future__ import annotations

import pytest

from tests.helpers.ingest import write_jsonl
from trajstore.ingest import ingest_paths


# hostile tester: a fault found in `traj ingest` (failed before its fix)
@pytest.mark.parametrize("fmt, row, reason", [
    ("swe-agent", {"trajectory": 2.5, "history": [], "info": {}},
     "trajectory is a number (2.5), expected a list of steps"),
    ("openhands-v0-eval", {"instance_id": "i", "history": [{"id": 0, "observation": {"kind": "run"}}]},
     "event 0: observation is an object (keys: kind), expected the observation's kind (a string)"),
])
def test_odd_types_in_other_formats_name_the_field(tmp_path, fmt, row, reason):
    f = write_jsonl(tmp_path / "rows.jsonl", [row])
    (p,) = ingest_paths([str(f)], str(tmp_path / "s"), input_format=fmt).problems
    assert p.reason == reason
