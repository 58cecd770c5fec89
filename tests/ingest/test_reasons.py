"""trajstore/ingest/reasons.py: why a record was refused, in one line, in the input's terms."""

from __future__ import annotations

import pytest

from trajstore.errors import TrajectoryValidationError, Violation
from trajstore.ingest.reasons import problem_reason
from trajstore.ingest.records import Reward
from trajstore.models import Trajectory


# hostile tester: a fault found in `traj ingest` (failed before its fix)
def test_invalid_trajectory_reasons_are_one_line_naming_the_input_field():
    e = TrajectoryValidationError("x", [Violation("reward_raw", "is not valid JSON (NaN)\n  at 1"),
                                        Violation("spans[2].end", "end 5 is past the last token (4 tokens)")])
    item = type("Item", (), {"reward": Reward(None, float("nan"), field="resolved")})()
    assert problem_reason(e, item) == ("the trajectory built from it would be invalid: the reward (field 'resolved'): is not "
                             "valid JSON (NaN) at 1; turn span 3 (end): end 5 is past the last token (4 tokens)")


# hostile tester: a fault found in `traj ingest` (failed before its fix)
def test_pydantic_errors_are_one_line_naming_the_input_field():
    with pytest.raises(Exception) as e:
        Trajectory(trajectory_id="x", model={"name": "m"}, tokens=[1], logprobs=[None], spans=[])
    why = problem_reason(e.value)
    assert "\n" not in why and "validation error" not in why and "pydantic.dev" not in why
    assert why.startswith("the model name: Input should be a valid string (got {'name': 'm'})")
