"""trajstore/models.py: the pydantic trajectory model's own checks."""

from __future__ import annotations

import math
from typing import Any

import pytest

from trajstore import Trajectory, TrajectoryBuilder

NAN = math.nan


def _valid(**update: Any) -> dict[str, Any]:
    d: dict[str, Any] = dict(
        trajectory_id="hole", source="sdk", reward=1.0, tokens=[1, 2, 3, 4],
        logprobs=[NAN, -0.1, -0.2, NAN],
        spans=[dict(kind="prompt", start=0, end=1),
               dict(kind="action", start=1, end=3, policy_version=0),
               dict(kind="observation", start=3, end=4)])
    d.update(update)
    return d


# issue 11: a hole found attacking the store and the SDK (failed before its fix)
def test_created_at_out_of_range_is_a_validation_error_not_overflow() -> None:
    from pydantic import ValidationError

    # 0001-01-01T00:00:00+05:00 is 0000-12-31T19:00 UTC, before datetime.min: astimezone
    # raised a raw OverflowError.
    with pytest.raises(ValidationError, match="created_at") as ei:
        Trajectory(**_valid(created_at="0001-01-01T00:00:00+05:00"))
    assert "outside the range" in str(ei.value)
    b = TrajectoryBuilder(trajectory_id="b2")
    b.add_prompt([1])
    from datetime import datetime, timedelta, timezone

    with pytest.raises(ValidationError, match="created_at"):
        b.finish(created_at=datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))))
