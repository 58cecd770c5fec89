"""trajstore/ingest/records.py: a Problem prints as one line."""

from __future__ import annotations

from trajstore.ingest.records import Origin, Problem


# hostile tester: a fault found in `traj ingest` (failed before its fix)
def test_a_problem_reason_is_always_one_line():
    p = Problem(Origin("f.jsonl", 3), "invalid", "bad:\n  - a\n\n  - b")
    assert str(p) == "f.jsonl:3: invalid: bad: - a - b"
