"""Trajectory baselines the paper compares SAO with: GRPO group normalisation and a running-mean
reward baseline, by name."""

from __future__ import annotations

import math

import pytest
import torch

from trajstore.trainer.sao.baselines import (
    GroupNormBaseline,
    RunningMeanBaseline,
    grpo_advantages,
    make_trajectory_baseline,
    to_action_tokens,
)


def test_grpo_hand_computed_with_non_contiguous_group_ids():
    # group 7: rewards [1, 0, 1] -> mean 2/3, unbiased std = sqrt(((1/3)^2 * 2 + (2/3)^2) / 2)
    #          = sqrt(1/3) = 0.57735 -> A = [1/3, -2/3, 1/3] / 0.57735 = [0.57735, -1.1547, 0.57735]
    # group -2: a single trajectory -> 0;  group 3: [2, 2] -> std 0 -> (0 / eps) = 0
    rewards = torch.tensor([1.0, 5.0, 0.0, 2.0, 1.0, 2.0], dtype=torch.float64)
    group = torch.tensor([7, -2, 7, 3, 7, 3])
    adv = grpo_advantages(rewards, group, eps=0.0 + 1e-12)
    s = math.sqrt(1 / 3)
    expected = [1 / 3 / s, 0.0, -2 / 3 / s, 0.0, 1 / 3 / s, 0.0]
    assert adv.tolist() == pytest.approx(expected, abs=1e-9)
    # without scaling: only the group mean is subtracted
    centred = grpo_advantages(rewards, group, scale=False)
    assert centred.tolist() == pytest.approx([1 / 3, 0.0, -2 / 3, 0.0, 1 / 3, 0.0])


def test_grpo_shape_errors_and_empty():
    with pytest.raises(ValueError):
        grpo_advantages(torch.zeros(3), torch.zeros(2, dtype=torch.long))
    assert grpo_advantages(torch.zeros(0), torch.zeros(0, dtype=torch.long)).shape == (0,)


def test_running_mean_window_in_trajectories():
    baseline = RunningMeanBaseline(window=2)
    # nothing seen yet -> baseline 0
    assert baseline(torch.tensor([1.0, 3.0])).tolist() == [1.0, 3.0]
    # window [1, 3] -> mean 2
    assert baseline(torch.tensor([5.0])).tolist() == [3.0]
    # window keeps the last 2 trajectories: [3, 5] -> mean 4
    assert baseline(torch.tensor([0.0])).tolist() == [-4.0]
    assert baseline.mean == 2.5  # window now [5, 0]
    restored = RunningMeanBaseline(window=2)
    restored.load_state_dict(baseline.state_dict())
    assert restored(torch.tensor([1.0])).tolist() == [-1.5]
    with pytest.raises(ValueError):
        RunningMeanBaseline(window=0)


def test_selectable_by_name():
    assert isinstance(make_trajectory_baseline("grpo"), GroupNormBaseline)
    running = make_trajectory_baseline("running-mean", window=3)
    assert isinstance(running, RunningMeanBaseline) and running.window == 3
    with pytest.raises(ValueError, match="group_id"):
        make_trajectory_baseline("grpo")(torch.ones(2))
    with pytest.raises(ValueError):
        make_trajectory_baseline("critic")  # type: ignore[arg-type]


def test_to_action_tokens():
    mask = torch.tensor([[0, 1, 1, 0], [1, 0, 0, 1]])
    out = to_action_tokens(torch.tensor([2.0, -1.0]), mask)
    assert out.tolist() == [[0.0, 2.0, 2.0, 0.0], [-1.0, 0.0, 0.0, -1.0]]
