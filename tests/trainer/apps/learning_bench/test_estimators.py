"""trainer/apps/learning_bench/estimators.py: turn-level and no-skip GAE, by hand."""

from __future__ import annotations

import pytest
import torch

from trajstore.trainer.apps.learning_bench.estimators import (
    advantages_by,
    matched_turn_lambda,
    no_skip_gae,
    turn_index,
    turn_level_gae,
)


def _row(vals: list[float]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    mask = torch.tensor([[0, 1, 1, 0, 1, 1]], dtype=torch.bool)
    rewards = torch.tensor([[0, 0, 0, 0, 0, 1.0]])
    return rewards, torch.tensor([vals]), mask


def test_turn_level_and_no_skip_gae_by_hand() -> None:
    """Slots [prompt, a, a, obs, a, a], values [0, .2, .4, 9, .5, .7], reward 1 on the last slot,
    gamma 1, lambda 0.5.
    turn-last: V = (.4, .7): A_1 = 1 - .7 = .3; A_0 = (.7 - .4) + .5 * .3 = .45.
    turn-avg:  V = (.3, .6): A_1 = .4;  A_0 = (.6 - .3) + .5 * .4 = .5.
    no-skip over slots 1..5 (the observation's value 9 enters): A5 = .3; A4 = .2 + .15 = .35;
    A3 = (.5 - 9) + .5 * .35 = -8.325; A2 = (9 - .4) + .5 * -8.325 = 4.4375; A1 = .2 + .5 * 4.4375 = 2.41875."""
    r, v, m = _row([0, .2, .4, 9, .5, .7])
    assert turn_index(m).tolist() == [[-1, 0, 0, -1, 1, 1]]
    last = turn_level_gae(r, v, m, value_at="last", gamma=1.0, lam=0.5)
    assert last[0].tolist() == pytest.approx([0, .45, .45, 0, .3, .3])
    avg = turn_level_gae(r, v, m, value_at="mean", gamma=1.0, lam=0.5)
    assert avg[0].tolist() == pytest.approx([0, .5, .5, 0, .4, .4])
    ns = no_skip_gae(r, v, m, gamma=1.0, lam=0.5)
    assert ns[0].tolist() == pytest.approx([0, 2.41875, 4.4375, 0, .35, .3])


def test_matched_horizon_turn_lambda_by_hand() -> None:
    """9 action tokens in 3 turns, lambda_token = 1 - 1/(1.5 * 9) = 0.92593: per turn
    0.92593 ** 3 = 0.79383 (credit decays per turn as over a turn's 3 tokens at token level).
    turn-last-h is turn-last GAE with that lambda."""

    mask = torch.tensor([[0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1]], dtype=torch.bool)
    lam = torch.tensor([1 - 1 / 13.5])
    assert matched_turn_lambda(lam, mask).tolist() == pytest.approx([0.79383], abs=1e-5)
    rewards = torch.zeros((1, 12))
    rewards[0, -1] = 1.0
    values = torch.linspace(0, 1, 12).unsqueeze(0)
    got = advantages_by("turn-last-h", rewards, values, mask, gamma=1.0, alpha=1.5)
    want = turn_level_gae(rewards, values, mask, value_at="last", gamma=1.0, lam=torch.tensor([0.79383]))
    assert torch.allclose(got, want, atol=1e-5)
    assert not torch.allclose(got, advantages_by("turn-last", rewards, values, mask, gamma=1.0, alpha=1.5))
