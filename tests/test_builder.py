"""trajstore/builder.py: TrajectoryBuilder refuses what would not validate when it is
added or finished, and never wraps or drops what it was given."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from trajstore import TrajectoryBuilder
from trajstore.errors import TrajectoryValidationError


# issue 11: a hole found attacking the store and the SDK (failed before its fix)
def test_builder_refuses_bad_sampling_at_finish() -> None:
    b = TrajectoryBuilder(trajectory_id="b1")
    b.add_prompt([1])
    b.add_action([2, 3], [-0.1, -0.2], policy_version=0, sampling={"top_k": -5, "max_tokens": -3})
    with pytest.raises(TrajectoryValidationError) as ei:
        b.finish()
    assert {v.field for v in ei.value.violations} == {"spans[1].top_k", "spans[1].max_tokens"}


@pytest.mark.parametrize("ids", [[2**40, 5], [2**32 + 5], np.array([2**63], dtype=np.uint64), [-(2**32)]])
def test_builder_refuses_ids_outside_int32_instead_of_wrapping(ids: Any) -> None:
    from trajstore import TrajectoryBuilder

    b = TrajectoryBuilder(trajectory_id="wrap")
    with pytest.raises(ValueError, match="must fit in int32"):
        b.add_prompt(ids)
    assert b.num_tokens == 0
