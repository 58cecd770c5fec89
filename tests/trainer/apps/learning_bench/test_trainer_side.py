"""trainer/apps/learning_bench/trainer_side.py: the no-correction loss makes every ratio one."""

from __future__ import annotations

import pytest
import torch


def test_no_correction_makes_every_ratio_one() -> None:
    from trajstore.trainer.apps.learning_bench.trainer_side import no_correction_loss
    from trajstore.trainer.sao.losses import dis_policy_loss

    lp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    rollout = torch.tensor([[-3.0, -2.0, 0.0]])  # ratios e^2, 1, e^-0.5: DIS would mask the first
    adv = torch.tensor([[1.0, -1.0, 2.0]])
    mask = torch.ones((1, 3), dtype=torch.bool)
    loss, st = no_correction_loss(dis_policy_loss)(lp, rollout, adv, mask, 0.3, 5.0)
    assert float(st.ratio_mean) == 1.0 and float(st.frac_zero_grad) == 0.0
    loss.backward()
    # plain policy gradient of -mean(A * log pi): d/dlp = -A / 3
    assert lp.grad[0].tolist() == pytest.approx([-1 / 3, 1 / 3, -2 / 3])
