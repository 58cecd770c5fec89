"""trainer/apps/learning_bench/estimators.py: turn-level and no-skip GAE, by hand."""

from __future__ import annotations

import pytest
import torch

from trajstore.trainer.apps.learning_bench.estimators import no_skip_gae, turn_index, turn_level_gae


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
