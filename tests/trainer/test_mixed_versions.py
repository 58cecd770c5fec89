"""The trainer reads a mixed-version action span (tokens from two policy versions, boundary
unknown; schema field ``policy_version_max``) at its oldest version, so staleness is never
under-counted, and counts such spans per step."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

import trajstore as ts  # noqa: E402
from trajstore import open_store  # noqa: E402
from trajstore.trainer.loop.config import DataConfig  # noqa: E402
from trajstore.trainer.data import TrajectoryStream  # noqa: E402


def test_mixed_span_trains_at_its_oldest_version_and_is_counted(tmp_path):
    b = ts.TrajectoryBuilder(trajectory_id="m", tokenizer="tiny-llama")
    b.add_prompt([1, 2])
    b.add_action([3, 4], [-0.1, -0.2], policy_version=2)
    b.add_observation([5])
    b.add_action([6, 7, 8], [-0.3, -0.4, -0.5], policy_version=3, policy_version_max=4)
    b.set_reward(1.0)
    ts.write_trajectories(str(tmp_path), [b.finish()])
    stream = TrajectoryStream(open_store(str(tmp_path)), DataConfig(batch_size=1, micro_batch_size=1),
                              tokenizer="tiny-llama", vocab_size=16)
    (s,) = stream.next_batch().samples
    # tokens: prompt 1 2 | action 3 4 (v2) | observation 5 | action 6 7 8 (v3..v4, counted at v3)
    np.testing.assert_array_equal(s.policy_version, [-1, -1, 2, 2, -1, 3, 3, 3])
    assert s.mixed_version_actions == 1
    assert (s.min_policy_version, s.max_policy_version) == (2, 3)
