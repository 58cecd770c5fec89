"""trajstore/models.py: the pydantic trajectory model's own checks."""

from __future__ import annotations

import pytest

from tests.helpers.trajectories import valid_record
from trajstore import Trajectory, TrajectoryBuilder


# issue 11: a hole found attacking the store and the SDK (failed before its fix)
def test_created_at_out_of_range_is_a_validation_error_not_overflow() -> None:
    from pydantic import ValidationError

    # 0001-01-01T00:00:00+05:00 is 0000-12-31T19:00 UTC, before datetime.min: astimezone
    # raised a raw OverflowError.
    with pytest.raises(ValidationError, match="created_at") as ei:
        Trajectory(**valid_record(created_at="0001-01-01T00:00:00+05:00"))
    assert "outside the range" in str(ei.value)
    b = TrajectoryBuilder(trajectory_id="b2")
    b.add_prompt([1])
    from datetime import datetime, timedelta, timezone

    with pytest.raises(ValidationError, match="created_at"):
        b.finish(created_at=datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))))
