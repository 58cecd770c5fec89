"""trajstore/export/samples.py: a stored trajectory cut into aligned arrays, checked by hand on t1 of
tests/helpers/export.py, plus a mixed-version call and an action without a version."""

from __future__ import annotations

import numpy as np

from tests.helpers.export import three_turn_trajectories
from trajstore import TrajectoryBuilder
from trajstore.convert import trajectories_to_table
from trajstore.export.samples import rows_of, sample_from_row

F = np.float32


def _sample(t):
    return sample_from_row(rows_of(trajectories_to_table([t]))[0])


def test_sample_of_the_three_turn_trajectory():
    s = _sample(three_turn_trajectories()[0])
    assert s.tokens.tolist() == [11, 12, 13, 21, 22, 31, 41, 42, 43, 51, 52, 61]
    assert s.loss_mask.tolist() == [0, 0, 0, 1, 1, 0, 1, 1, 1, 0, 0, 1]
    np.testing.assert_array_equal(s.logprobs, np.array([0, 0, 0, -0.1, -0.2, 0, -0.3, -0.4, -0.5, 0, 0, -0.6], F))
    assert s.versions.tolist() == [-1, -1, -1, 3, 3, -1, 4, 4, 4, -1, -1, 4]
    assert (s.prompt_len, s.response_len, s.dropped_tail, s.num_turns) == (3, 9, 0, 6)
    assert [(c.start, c.end, c.policy_version) for c in s.calls] == [(3, 5, 3), (6, 9, 4), (11, 12, 4)]
    assert (s.min_version, s.max_version, s.num_missing_logprobs, s.reward) == (3, 4, 0, 1.0)


def test_trailing_observation_is_cut_and_counted():
    s = _sample(three_turn_trajectories()[1])
    assert (s.tokens.tolist(), s.dropped_tail, s.num_turns) == ([14, 23], 1, 2)


def test_mixed_version_call_unknown_version_and_missing_logprobs():
    b = TrajectoryBuilder(trajectory_id="x")
    b.add_prompt([1])
    b.add_action([2, 3], [-0.5, None], policy_version=2, policy_version_max=4)
    b.add_observation([4])
    b.add_action([5], [-0.25], policy_version=5)
    s = _sample(b.finish())
    assert s.versions.tolist() == [-1, 2, 2, -1, 5]  # the mixed call's tokens get its oldest version
    assert (s.mixed_version_calls, s.min_version, s.max_version) == (1, 2, 5)
    assert s.num_missing_logprobs == 1 and np.isnan(s.logprobs[2])
    b = TrajectoryBuilder(trajectory_id="y")
    b.add_prompt([1])
    b.add_action([2], None, policy_version=None)
    s = _sample(b.finish())
    assert (s.unknown_version_calls, s.min_version, s.max_version, s.versions.tolist()) == (1, None, None, [-1, -1])


def test_no_action_span_gives_no_sample():
    b = TrajectoryBuilder(trajectory_id="z")
    b.add_prompt([1])
    b.add_observation([2])
    assert _sample(b.finish()) is None
