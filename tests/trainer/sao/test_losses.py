"""DIS policy loss (docs/sao.md, mechanism 1, eqs. (1)-(3)), the PPO-clip baseline, value loss and explained
variance: hand-computed values, exact gradients, invariances (the aggregations: test_aggregation.py)."""

from __future__ import annotations

import math

import pytest
import torch

from trajstore.trainer.sao.aggregation import aggregate
from trajstore.trainer.sao.losses import (
    POLICY_LOSSES,
    dis_band,
    dis_policy_loss,
    explained_variance,
    ppo_clip_policy_loss,
    value_loss,
)

f64 = torch.float64


def _policy_inputs(seed: int = 0, batch: int = 4, length: int = 30, spread: float = 0.6):
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.rand(batch, length, generator=gen) < 0.6).to(f64)
    rollout = -torch.rand(batch, length, generator=gen, dtype=f64) * 3
    logprobs = rollout + spread * torch.randn(batch, length, generator=gen, dtype=f64)
    advantages = torch.randn(batch, length, generator=gen, dtype=f64)
    return logprobs.requires_grad_(True), rollout, advantages, mask


# -- DIS -------------------------------------------------------------------------------------------


def test_dis_hand_computed_three_tokens():
    # log-ratios [0, ln 2, ln 0.25] -> r = [1, 2, 0.25]; band (1 - 0.3, 1 + 0.5) = (0.7, 1.5)
    # only token 0 is inside: loss = -(r0 * A0) / 3 action tokens = -(1 * 1) / 3
    rollout = torch.tensor([[-1.0, -2.0, -0.5]], dtype=f64)
    logprobs = (rollout + torch.tensor([[0.0, math.log(2.0), math.log(0.25)]], dtype=f64)).requires_grad_()
    advantages = torch.tensor([[1.0, 2.0, 3.0]], dtype=f64)
    loss, st = dis_policy_loss(logprobs, rollout, advantages, torch.ones(1, 3), 0.3, 0.5)
    assert loss.item() == pytest.approx(-1 / 3, abs=1e-12)
    assert st.frac_below.item() == pytest.approx(1 / 3) and st.frac_above.item() == pytest.approx(1 / 3)
    assert st.frac_zero_grad.item() == pytest.approx(2 / 3)
    assert st.ratio_min.item() == pytest.approx(0.25) and st.ratio_max.item() == pytest.approx(2.0)
    assert st.ratio_mean.item() == pytest.approx(3.25 / 3)
    # k3 = (r - 1) - ln r: token0 0, token1 1 - ln 2 = 0.30685, token2 -0.75 + ln 4 = 0.63629
    assert st.kl_k3.item() == pytest.approx((1 - math.log(2) - 0.75 + math.log(4)) / 3)
    # mean |log-ratio| = (0 + ln 2 + ln 4) / 3 = ln 2
    assert st.abs_logp_diff_mean.item() == pytest.approx(math.log(2))
    (grad,) = torch.autograd.grad(loss, logprobs)
    # d/dlogp of -r*A/3 at r=1, A=1: -1/3; zero for the two masked tokens
    assert grad.tolist() == [[pytest.approx(-1 / 3), 0.0, 0.0]]


def test_dis_unchanged_policy_ratio_exactly_one_nothing_masked():
    _, rollout, advantages, mask = _policy_inputs(seed=1)
    _, st = dis_policy_loss(rollout.clone().requires_grad_(), rollout, advantages, mask, 0.3, 5.0)
    assert st.ratio_min.item() == 1.0 and st.ratio_max.item() == 1.0 and st.ratio_mean.item() == 1.0
    assert st.frac_below.item() == 0.0 and st.frac_above.item() == 0.0
    assert st.frac_zero_grad.item() == 0.0
    assert st.kl_k3.item() == 0.0 and st.abs_logp_diff_mean.item() == 0.0


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_dis_gradient_is_surrogate_inside_band_and_exactly_zero_outside(agg):
    logprobs, rollout, advantages, mask = _policy_inputs(seed=2, spread=1.0)
    eps_low, eps_high = 0.3, 0.5
    loss, st = dis_policy_loss(logprobs, rollout, advantages, mask, eps_low, eps_high, agg=agg)
    (grad,) = torch.autograd.grad(loss, logprobs)
    ratio = (logprobs.detach() - rollout).exp()
    inside = (mask != 0) & (ratio > 1 - eps_low) & (ratio < 1 + eps_high)
    assert 0 < int(inside.sum()) < int(mask.sum())  # both kinds present
    # surrogate -r * A over in-band tokens only, same aggregation
    lp = logprobs.detach().clone().requires_grad_()
    surrogate = aggregate(-(lp - rollout).exp() * advantages * inside, mask, agg=agg)
    (expected,) = torch.autograd.grad(surrogate, lp)
    torch.testing.assert_close(grad[inside], expected[inside], rtol=1e-12, atol=1e-15)
    assert bool((grad[~inside] == 0).all())
    assert st.frac_zero_grad.item() == pytest.approx(1 - int(inside.sum()) / int(mask.sum()))


def test_dis_band_is_open_both_edges_masked():
    # pick eps so that the band edges equal the float32 ratios exactly (1 - r and r - 1 are exact
    # in float64 for r in [0.5, 2], Sterbenz), then the edge tokens must be cut out
    log_low, log_high = torch.log(torch.tensor(0.7)), torch.log(torch.tensor(1.6))
    eps_low = 1.0 - float(log_low.exp())
    eps_high = float(log_high.exp()) - 1.0
    assert 1.0 - eps_low == float(log_low.exp()) and 1.0 + eps_high == float(log_high.exp())
    logprobs = torch.stack([log_low, torch.tensor(0.01), log_high]).view(1, 3).requires_grad_()
    loss, st = dis_policy_loss(logprobs, torch.zeros(1, 3), torch.ones(1, 3), torch.ones(1, 3), eps_low, eps_high)
    (grad,) = torch.autograd.grad(loss, logprobs)
    assert grad[0, 0].item() == 0.0 and grad[0, 1].item() != 0.0 and grad[0, 2].item() == 0.0
    assert st.frac_below.item() == pytest.approx(1 / 3) and st.frac_above.item() == pytest.approx(1 / 3)


def test_dis_band_hand_computed_edges_and_nan():
    # band (1 - 0.3, 1 + 0.5) = (0.7, 1.5), open: 0.7 and 1.5 themselves are outside (1 - 0.3 and
    # 1 + 0.5 are exactly 0.7 and 1.5 in float64); NaN is in no part, inf is above, 0 below
    ratio = torch.tensor([0.0, 0.7, 0.7000001, 1.0, 1.4999999, 1.5, math.inf, math.nan], dtype=f64)
    band = dis_band(ratio, 0.3, 0.5)
    assert band.below.tolist() == [True, True, False, False, False, False, False, False]
    assert band.inside.tolist() == [False, False, True, True, True, False, False, False]
    assert band.above.tolist() == [False, False, False, False, False, True, True, False]


@pytest.mark.parametrize("loss_name", sorted(POLICY_LOSSES))
def test_ratio_stats_count_the_band_of_dis_band(loss_name):
    """Both losses report below / above from the one band rule, and DIS zeroes exactly the
    tokens outside it."""
    logprobs, rollout, advantages, mask = _policy_inputs(seed=4, spread=1.0)
    _, st = POLICY_LOSSES[loss_name](logprobs, rollout, advantages, mask, 0.3, 0.5)
    band = dis_band((logprobs.detach() - rollout).exp(), 0.3, 0.5)
    action = mask != 0
    n = int(action.sum())
    assert 0 < int((band.below & action).sum()) and 0 < int((band.above & action).sum())  # both sides occur
    assert st.frac_below.item() == pytest.approx(int((band.below & action).sum()) / n)
    assert st.frac_above.item() == pytest.approx(int((band.above & action).sum()) / n)
    if loss_name == "dis":
        assert st.frac_zero_grad.item() == pytest.approx(int((~band.inside & action).sum()) / n)


def test_dis_non_action_positions_do_not_leak():
    logprobs, rollout, advantages, mask = _policy_inputs(seed=3)
    nan = torch.tensor(float("nan"), dtype=f64)
    rollout_nan = torch.where(mask == 0, nan, rollout)
    adv_nan = torch.where(mask == 0, nan, advantages)
    lp_junk = torch.where(mask == 0, torch.tensor(50.0, dtype=f64), logprobs.detach()).requires_grad_()
    loss, st = dis_policy_loss(lp_junk, rollout_nan, adv_nan, mask, 0.3, 5.0)
    ref_loss, ref_st = dis_policy_loss(logprobs, rollout, advantages, mask, 0.3, 5.0)
    assert torch.equal(loss.detach(), ref_loss.detach())
    (grad,) = torch.autograd.grad(loss, lp_junk)
    assert bool(torch.isfinite(grad).all()) and bool((grad[mask == 0] == 0).all())
    assert st.ratio_max.item() == ref_st.ratio_max.item()


def test_dis_huge_ratio_outside_band_gives_finite_zero_gradient():
    rollout = torch.tensor([[-300.0, -1.0]])
    logprobs = torch.tensor([[0.0, -1.0]], requires_grad=True)  # r0 = e^300 = inf in float32
    loss, st = dis_policy_loss(logprobs, rollout, torch.ones(1, 2), torch.ones(1, 2), 0.3, 5.0)
    (grad,) = torch.autograd.grad(loss, logprobs)
    assert torch.isfinite(loss) and grad[0, 0].item() == 0.0 and grad[0, 1].item() == -0.5
    assert st.frac_above.item() == 0.5


def test_dis_missing_rollout_logprob_on_action_token_raises():
    rollout = torch.tensor([[-1.0, float("nan"), -1.0]])
    with pytest.raises(ValueError, match=r"row 0, position 1"):
        dis_policy_loss(torch.zeros(1, 3), rollout, torch.ones(1, 3), torch.ones(1, 3), 0.3, 5.0)


def test_dis_staleness_breakdown_hand_computed():
    # 5 action tokens (last column is an observation), ratios [1, 2, 0.5, 1, 8], eps 0.3 / 5.0
    # band (0.7, 6.0): below = {0.5}, above = {8}
    log_r = torch.log(torch.tensor([[1.0, 2.0, 0.5, 1.0, 8.0, 1.0]], dtype=f64))
    staleness = torch.tensor([[0, 0, 1, 1, 1, 7]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    _, st = dis_policy_loss(log_r, torch.zeros_like(log_r), torch.ones_like(log_r), mask, 0.3, 5.0,
                            staleness=staleness)
    assert [int(s.staleness) for s in st.by_staleness] == [0, 1]  # 7 sits on a non-action token
    s0, s1 = st.by_staleness
    assert int(s0.num_tokens) == 2 and s0.frac_below.item() == 0 and s0.frac_above.item() == 0
    assert s0.ratio_mean.item() == pytest.approx(1.5)
    # staleness 1: ratios [0.5, 1, 8] -> 1/3 below, 1/3 above, mean 9.5 / 3
    assert int(s1.num_tokens) == 3
    assert s1.frac_below.item() == pytest.approx(1 / 3) and s1.frac_above.item() == pytest.approx(1 / 3)
    assert s1.ratio_mean.item() == pytest.approx(9.5 / 3)


def test_bad_eps_raises():
    args = (torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2))
    with pytest.raises(ValueError):
        dis_policy_loss(*args, 0.0, 1.0)
    with pytest.raises(ValueError):
        dis_policy_loss(*args, 0.3, -1.0)


# -- PPO clip baseline -------------------------------------------------------------------------


def test_ppo_clip_hand_computed():
    # r = [2, 2, 1], A = [1, -1, 1], eps_low = 0.2, eps_high = 0.2 -> clip range [0.8, 1.2]
    # token0: max(-2*1, -1.2*1) = -1.2 (clipped branch, zero gradient)
    # token1: max(-2*-1, -1.2*-1) = 2 (unclipped, gradient -A*r = 2)
    # token2: max(-1, -1) = -1 (gradient -1)
    # token-mean: (-1.2 + 2 - 1) / 3 = -0.2 / 3
    rollout = torch.zeros(1, 3, dtype=f64)
    logprobs = torch.log(torch.tensor([[2.0, 2.0, 1.0]], dtype=f64)).requires_grad_()
    advantages = torch.tensor([[1.0, -1.0, 1.0]], dtype=f64)
    loss, st = ppo_clip_policy_loss(logprobs, rollout, advantages, torch.ones(1, 3), 0.2, 0.2)
    assert loss.item() == pytest.approx(-0.2 / 3)
    (grad,) = torch.autograd.grad(loss, logprobs)
    torch.testing.assert_close(grad, torch.tensor([[0.0, 2 / 3, -1 / 3]], dtype=f64))
    assert st.frac_zero_grad.item() == pytest.approx(1 / 3)
    assert st.frac_above.item() == pytest.approx(2 / 3)  # r = 2 >= 1.2, twice; nothing masked though


def test_ppo_clip_does_not_mask_far_off_policy_tokens():
    # r = 8 with A < 0: DIS would cut the token out, PPO keeps the unclipped (larger) loss
    logprobs = torch.log(torch.tensor([[8.0]])).requires_grad_()
    dis, _ = dis_policy_loss(logprobs, torch.zeros(1, 1), -torch.ones(1, 1), torch.ones(1, 1), 0.3, 5.0)
    ppo, _ = ppo_clip_policy_loss(logprobs, torch.zeros(1, 1), -torch.ones(1, 1), torch.ones(1, 1), 0.3, 5.0)
    assert dis.item() == 0.0 and ppo.item() == pytest.approx(8.0)


# -- value loss ----------------------------------------------------------------------------------


def test_value_loss_hand_computed_and_clipped():
    # action tokens at positions 0, 1; V = [1, 3], R = [2, 0]: 0.5 * (1 + 9) / 2 = 2.5
    values = torch.tensor([[1.0, 3.0, 100.0]], requires_grad=True)
    returns = torch.tensor([[2.0, 0.0, float("nan")]])
    mask = torch.tensor([[1, 1, 0]])
    loss, st = value_loss(values, returns, mask)
    assert loss.item() == 2.5
    (grad,) = torch.autograd.grad(loss, values)
    # d/dV 0.5 (V - R)^2 / 2 = (V - R) / 2 -> [-0.5, 1.5, 0]
    assert grad.tolist() == [[-0.5, 1.5, 0.0]]
    assert st.value_mean.item() == 2.0 and st.return_mean.item() == 1.0 and st.clip_frac.item() == 0.0
    # clipped: V_old = [1.5, 1.0], clip 0.2 -> V_clip = [1.3, 1.2]
    # token0: max((1-2)^2, (1.3-2)^2) = max(1, 0.49) = 1 (unclipped)
    # token1: max((3-0)^2, (1.2-0)^2) = 9 (unclipped); -> same 2.5, clip_frac 0
    # with R = [0.5, 4]: token0 max(0.25, 0.64) = 0.64 (clipped), token1 max(1, 7.84) = 7.84 (clipped)
    old = torch.tensor([[1.5, 1.0, 0.0]])
    loss_c, st_c = value_loss(values, torch.tensor([[0.5, 4.0, 0.0]]), mask, old_values=old, clip_range=0.2)
    assert loss_c.item() == pytest.approx(0.5 * (0.64 + 7.84) / 2)
    assert st_c.clip_frac.item() == 1.0
    (grad_c,) = torch.autograd.grad(loss_c, values)
    assert grad_c.abs().sum().item() == 0.0  # both tokens on the clipped (constant) branch
    with pytest.raises(ValueError):
        value_loss(values, returns, mask, old_values=old)


def test_explained_variance():
    returns = torch.tensor([[1.0, 2.0, 3.0, 4.0, 99.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    assert explained_variance(returns, returns, mask).item() == 1.0
    # constant prediction at the mean: Var(R - V) = Var(R) -> 0
    assert explained_variance(torch.full_like(returns, 2.5), returns, mask).item() == pytest.approx(0.0)
    # V = R - [1, -1, 1, -1]: Var(R) = 1.25, Var(R - V) = 1 -> 1 - 1 / 1.25 = 0.2
    v = returns - torch.tensor([[1.0, -1.0, 1.0, -1.0, 0.0]])
    assert explained_variance(v, returns, mask).item() == pytest.approx(0.2)
    assert math.isnan(explained_variance(returns, torch.ones_like(returns), mask).item())
