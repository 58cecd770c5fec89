"""The step's typed statistics and their one logging function (trainer/loop/step_stats.py):
hand-computed records, merged micro-batches equal the whole batch, the explained variance from
summed moments equals the reference over the whole step, and per-trajectory ratios equal a
loop written out here."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from trajstore.sampling import SamplingArrays, no_truncation
from trajstore.trainer.data import DataCursor, PackedMicroBatch, StepBatch, TrainSample
from trajstore.trainer.loop.distributed import DistEnv
from trajstore.trainer.loop.step_stats import (
    StepStats,
    UpdateStats,
    add_sums,
    critic_stats,
    explained_variance_of_sums,
    log_metrics,
    merge_policy,
    policy_stats,
    trajectory_ratios,
    value_moments,
)
from trajstore.trainer.sao.losses import dis_policy_loss, explained_variance, value_loss

CPU = DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
f64 = torch.float64


def _sample(i: int, *, versions: list[int], reward: float) -> TrainSample:
    """A trajectory of a prompt token then one action token per entry of `versions`."""
    n = len(versions) + 1
    return TrainSample(trajectory_id=f"t{i}", group_id=None, shard="s", row=i, tokens=np.zeros(n, np.int64),
                  rollout_logprobs=np.zeros(n, np.float32), action_mask=np.array([False] + [True] * (n - 1)),
                  policy_version=np.array([-1, *versions], np.int64), sampling=no_truncation(n),
                  reward=reward, needs_behaviour=False, cursor=DataCursor())


def _empty_stats(**kw) -> StepStats:  # noqa: ANN003
    zero = torch.zeros((), dtype=f64)
    base = dict(action_tokens=torch.tensor(3.0), values=None, critic=(), critic_steps=(), policy=None,
                policy_step=None, advantage_sum=zero, lambda_sum=zero, ratios=())
    return StepStats(**{**base, **kw})


def test_policy_metrics_hand_computed_from_two_micro_batches() -> None:
    # micro-batch A: log-ratios [0, ln 2] -> r = [1, 2]; B: [ln 0.25, (not an action)] -> r = [0.25]
    # band (1 - 0.3, 1 + 0.5) = (0.7, 1.5): 1 inside, 2 above, 0.25 below; 3 action tokens in all
    lr = torch.tensor([[0.0, math.log(2.0)], [math.log(0.25), 5.0]], dtype=f64)
    mask = torch.tensor([[1, 1], [1, 0]])
    adv = torch.ones(2, 2, dtype=f64)
    parts = []
    for row in (0, 1):
        loss, st = dis_policy_loss(lr[row:row + 1], torch.zeros(1, 2, dtype=f64), adv[row:row + 1],
                                   mask[row:row + 1], 0.3, 0.5, num_tokens=3)
        parts.append(policy_stats(loss, st, torch.tensor(0.6 if row == 0 else 0.3)))
    stats = _empty_stats(policy=merge_policy(*parts), policy_step=UpdateStats(torch.tensor(0.5), torch.tensor(0.0)),
                         advantage_sum=torch.tensor(6.0, dtype=f64), lambda_sum=torch.tensor(1.5, dtype=f64))
    batch = StepBatch([_sample(0, versions=[0, 1], reward=1.0), _sample(1, versions=[1], reward=0.0)],
                      DataCursor(), {"overlong": 2})
    log = log_metrics(stats, batch, trainer_version=2, env=CPU)
    m = log.metrics
    assert m["policy/loss"] == pytest.approx(-1 / 3)  # only r = 1 (A = 1) inside: -(1 * 1) / 3 tokens
    assert m["ratio/mean"] == pytest.approx((1 + 2 + 0.25) / 3)
    assert (m["ratio/masked_below"], m["ratio/masked_above"], m["ratio/zero_grad"]) == pytest.approx((1 / 3, 1 / 3,
                                                                                                       2 / 3))
    assert (m["ratio/min"], m["ratio/max"]) == (pytest.approx(0.25), pytest.approx(2.0))
    # k3 = (r - 1) - ln r: 0, 1 - ln 2, -0.75 + ln 4; |log-ratio|: 0, ln 2, ln 4
    assert m["policy/kl_k3"] == pytest.approx((1 - math.log(2) - 0.75 + math.log(4)) / 3)
    assert m["policy/abs_logp_diff_mean"] == pytest.approx(math.log(2))  # (ln 2 + 2 ln 2) / 3
    assert m["policy/entropy"] == pytest.approx(0.3)  # (0.6 + 0.3) / 3
    assert m["policy/grad_norm"] == 0.5 and m["policy/advantage_mean"] == 2.0  # 6 / 3 tokens
    assert m["policy/lambda_mean"] == 0.75  # 1.5 / 2 trajectories
    # staleness (trainer v2): tokens of v0, v1, v1 -> 2, 1, 1
    assert (m["staleness/mean"], m["staleness/max"]) == (pytest.approx(4 / 3), 2.0)
    assert (m["reward/mean"], m["data/trajectories"], m["data/action_tokens"], m["data/skipped_overlong"]) == (
        0.5, 2.0, 3.0, 2.0)
    assert not any(k.startswith("value/") for k in m) and log.nonfinite is None


def test_value_metrics_and_the_first_non_finite_update() -> None:
    # values [0, 1, 1], returns [1, 1, 3]: R - V = [1, 0, 2]; Var(R) = 8/9, Var(R - V) = 2/3 -> EV = 1/4
    v = torch.tensor([[0.0, 1.0, 1.0, 9.0]])
    r = torch.tensor([[1.0, 1.0, 3.0, 9.0]])
    mask = torch.tensor([[True, True, True, False]])

    critic = [critic_stats(*value_loss(v + k, r, mask.long(), old_values=v, clip_range=0.5, num_tokens=3))
              for k in (0.0, 1.0)]  # the second update moved every value by +1, beyond the clip of 0.5
    steps = (UpdateStats(torch.tensor(1.0), torch.tensor(0.0)), UpdateStats(torch.tensor(7.0), torch.tensor(1.0)))
    stats = _empty_stats(values=value_moments(v, r, mask), critic=tuple(critic), critic_steps=steps)
    log = log_metrics(stats, StepBatch([_sample(0, versions=[0, 0, 0], reward=3.0)], DataCursor(), {}),
                      trainer_version=0, env=CPU)
    m = log.metrics
    assert m["value/explained_variance"] == pytest.approx(0.25) and m["warn/critic_ev_not_positive"] == 0.0
    assert m["value/mean"] == pytest.approx(2 / 3) and m["value/return_mean"] == pytest.approx(5 / 3)
    # last update: V = [1, 2, 2] vs V_clip = [0.5, 1.5, 1.5]: (V - R)^2 = [0, 1, 1], (V_clip - R)^2 =
    # [0.25, 0.25, 2.25]: the clipped branch is the larger on tokens 0 and 2
    assert m["value/clip_frac"] == pytest.approx(2 / 3) and m["value/last_update_mean"] == pytest.approx(5 / 3)
    assert m["value/loss"] == pytest.approx(0.5 * (0.25 + 1 + 2.25) / 3) and m["value/grad_norm"] == 7.0
    assert log.nonfinite == ("critic", 7.0)  # the second critic step made parameters non-finite


def _ev_reference_split(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    values = torch.randn(6, 20, generator=gen)
    returns = values + 0.5 * torch.randn(6, 20, generator=gen) + torch.randn(6, 1, generator=gen)
    mask = torch.rand(6, 20, generator=gen) < 0.6
    return (values, returns, mask)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_explained_variance_of_summed_moments_equals_the_whole_step(seed: int) -> None:
    """Fast (micro-batch moments, added) vs reference (sao.losses.explained_variance over the
    whole step), over uneven splits; a single-trajectory part with constant returns has no
    explained variance of its own (NaN) but still adds up."""
    values, returns, mask = _ev_reference_split(seed)
    returns[0] = 2.0  # one trajectory with a constant return (gamma = 1, lambda_critic = 1)
    parts = [value_moments(values[a:b].reshape(1, -1), returns[a:b].reshape(1, -1), mask[a:b].reshape(1, -1))
             for a, b in ((0, 1), (1, 4), (4, 6))]
    assert math.isnan(explained_variance(values[:1], returns[:1], mask[:1]).item())
    total = add_sums(add_sums(parts[0], parts[1]), parts[2])
    fast = explained_variance_of_sums(*(float(x) for x in (total.num_tokens, total.return_sum, total.return_sq_sum,
                                                            total.error_sum, total.error_sq_sum)))
    reference = explained_variance(values.double(), returns.double(), mask).item()
    assert fast == pytest.approx(reference, rel=1e-9, abs=1e-12)


def test_trajectory_ratios_equal_a_loop_over_each_trajectory() -> None:
    gen = torch.Generator().manual_seed(3)
    seg = torch.tensor([0, 7, 10, 18])
    L = 18
    mask = torch.rand(1, L, generator=gen) < 0.7
    mask[0, 7:10] = False  # the second trajectory has no action slot
    rollout = torch.where(mask, -torch.rand(1, L, generator=gen) * 3, 0.0)
    logprobs = rollout + 0.8 * torch.randn(1, L, generator=gen)
    z = torch.zeros(1, L, dtype=torch.int64)
    mb = PackedMicroBatch(z, z, z, mask, rollout, z, SamplingArrays(*(torch.as_tensor(x)[None] for x in no_truncation(L))), seg)
    trajectory = torch.repeat_interleave(torch.arange(3), seg.diff())
    got = trajectory_ratios(logprobs, mb, trajectory, 3, 0.3, 0.5)
    for i in range(3):
        a, b = int(seg[i]), int(seg[i + 1])
        m = mask[0, a:b]
        r = torch.exp(logprobs[0, a:b][m] - rollout[0, a:b][m])
        expected = [int(m.sum()), int((r <= 0.7).sum()), int((r >= 1.5).sum()), float(r.sum())]
        assert [got.num_tokens[i].item(), got.below[i].item(), got.above[i].item()] == expected[:3], i
        assert got.ratio_sum[i].item() == pytest.approx(expected[3], rel=1e-6)
    assert got.num_tokens[1].item() == 0 and 0 < got.below.sum().item() and 0 < got.above.sum().item()
