"""trajstore/models.py: the pydantic trajectory model's own checks."""

from __future__ import annotations

import pytest

from tests.helpers.trajectories import valid_record
from trajstore import Trajectory, TrajectoryBuilder


# adversarial input: a hole found attacking the store and the SDK (failed before its fix)
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


def test_action_logprobs_accepts_the_old_name_logprobs() -> None:
    """Schema v3 renamed the model field; SDK callers passing ``logprobs=`` keep working."""
    import math

    import numpy as np

    rec = valid_record(created_at="2026-01-01T00:00:00Z")
    lps = rec.pop("action_logprobs")
    old = Trajectory(**rec, logprobs=lps)
    new = Trajectory(**rec, action_logprobs=lps)
    assert np.array_equal(old.action_logprobs, new.action_logprobs, equal_nan=True)
    assert old.action_logprobs.dtype == np.float32 and len(old.action_logprobs) == len(lps)
    assert [math.isnan(x) for x in old.action_logprobs.tolist()] == [x is None or math.isnan(x) for x in lps]
    assert "action_logprobs" in old.model_dump() and "logprobs" not in old.model_dump()
    assert Trajectory.model_validate({**rec, "logprobs": lps}).model_dump() == old.model_dump()
    with pytest.raises(Exception, match="action_logprobs"):
        Trajectory(**rec)  # neither name: the field is required


def test_lineage_fields_default_to_a_root_of_its_own_episode() -> None:
    t = Trajectory(**valid_record())
    assert (t.episode_id, t.parent_trajectory_id, t.fork_point, t.link_kind) == (None, None, None, None)
