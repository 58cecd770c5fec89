"""Skip-observation GAE (docs/sao.md, mechanism 4, eqs. (6)-(9)): hand-computed cases, fast vs reference on random
span layouts, and the invariances the method promises."""

from __future__ import annotations

import math

import pytest
import torch

from trajstore.trainer.sao.advantages import (
    LAMBDA_CRITIC,
    length_adaptive_lambda,
    sao_targets,
    skip_observation_gae,
    skip_observation_gae_reference,
)

IMPLEMENTATIONS = [skip_observation_gae, skip_observation_gae_reference]
f64 = torch.float64


def _t(rows):
    return torch.tensor(rows, dtype=f64)


@pytest.mark.parametrize("gae", IMPLEMENTATIONS)
def test_three_actions_reward_at_end_gamma_lambda_not_one(gae):
    # gamma = 0.9, lambda = 0.5, so gamma * lambda = 0.45; actions only, V = [1, 2, 3], r = [0, 0, 1]
    # t=2 (last, terminal): delta = 1 + 0 - 3 = -2.0          A = -2.0                 R = A + V = 1.0
    # t=1: delta = 0 + 0.9 * 3 - 2 = 0.7                      A = 0.7 + 0.45 * -2.0 = -0.2   R = 1.8
    # t=0: delta = 0 + 0.9 * 2 - 1 = 0.8                      A = 0.8 + 0.45 * -0.2 = 0.71   R = 1.71
    rewards, values, mask = _t([[0, 0, 1]]), _t([[1, 2, 3]]), _t([[1, 1, 1]])
    adv, ret = gae(rewards, values, mask, 0.9, 0.5)
    torch.testing.assert_close(adv, _t([[0.71, -0.2, -2.0]]), rtol=0, atol=1e-12)
    torch.testing.assert_close(ret, _t([[1.71, 1.8, 1.0]]), rtol=0, atol=1e-12)


@pytest.mark.parametrize("gae", IMPLEMENTATIONS)
def test_two_actions_with_observation_between(gae):
    # layout: [prompt, a0, obs, obs, a1, pad]; gamma = 0.9, lambda = 0.5 (gamma * lambda = 0.45)
    # values at prompt/obs/pad (5, 7, 8, 9) must be ignored; V(a0) = 1, V(a1) = 2; reward 1 on a1.
    # a1 (terminal): delta = 1 + 0 - 2 = -1            A = -1                       R = 1
    # a0: successor is a1 (the observations are skipped, no extra discount for them):
    #     delta = 0 + 0.9 * 2 - 1 = 0.8                A = 0.8 + 0.45 * -1 = 0.35    R = 1.35
    rewards = _t([[0, 0, 0, 0, 1, 0]])
    values = _t([[5, 1, 7, 8, 2, 9]])
    mask = _t([[0, 1, 0, 0, 1, 0]])
    adv, ret = gae(rewards, values, mask, 0.9, 0.5)
    torch.testing.assert_close(adv, _t([[0, 0.35, 0, 0, -1, 0]]), rtol=0, atol=1e-12)
    torch.testing.assert_close(ret, _t([[0, 1.35, 0, 0, 1, 0]]), rtol=0, atol=1e-12)


@pytest.mark.parametrize("gae", IMPLEMENTATIONS)
def test_per_row_lambda(gae):
    # two identical rows [a0, a1], V = [0, 0], r = [0, 1], gamma = 1:
    # a1: A = 1; a0: delta = 0 + 1 * 0 - 0 = 0, A = 0 + lambda * 1 = lambda  -> row 0: 0.25, row 1: 1.0
    rewards, values, mask = _t([[0, 1], [0, 1]]), _t([[0, 0], [0, 0]]), _t([[1, 1], [1, 1]])
    adv, _ = gae(rewards, values, mask, 1.0, torch.tensor([0.25, 1.0], dtype=f64))
    torch.testing.assert_close(adv, _t([[0.25, 1.0], [1.0, 1.0]]), rtol=0, atol=1e-12)


@pytest.mark.parametrize("gae", IMPLEMENTATIONS)
def test_reward_on_non_action_token_raises_with_row_and_position(gae):
    rewards = torch.zeros(2, 5)
    mask = torch.tensor([[1, 1, 0, 0, 1], [0, 1, 1, 0, 0]], dtype=torch.float32)
    rewards[1, 3] = 1.0
    with pytest.raises(ValueError, match=r"row 1, position 3"):
        gae(rewards, torch.zeros(2, 5), mask, 1.0, 1.0)


@pytest.mark.parametrize("gae", IMPLEMENTATIONS)
def test_non_finite_reward_or_action_value_raises(gae):
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    with pytest.raises(ValueError, match=r"row 0, position 2 is not finite"):
        gae(torch.tensor([[0.0, 0.0, float("nan")]]), torch.zeros(1, 3), mask, 1.0, 1.0)
    with pytest.raises(ValueError, match="non-finite value"):
        gae(torch.zeros(1, 3), torch.tensor([[0.0, float("inf"), 0.0]]), mask, 1.0, 1.0)


@pytest.mark.parametrize("gae", IMPLEMENTATIONS)
def test_mask_must_be_zero_or_one(gae):
    mask = torch.tensor([[1.0, 0.5]])
    with pytest.raises(ValueError, match="0 or 1"):
        gae(torch.zeros(1, 2), torch.zeros(1, 2), mask, 1.0, 1.0)


@pytest.mark.parametrize(
    "kwargs",
    [{"gamma": 1.1, "lam": 1.0}, {"gamma": 1.0, "lam": -0.1}, {"gamma": 1.0, "lam": torch.ones(3)}],
)
def test_bad_gamma_or_lambda_raises(kwargs):
    with pytest.raises(ValueError):
        skip_observation_gae(torch.zeros(2, 4), torch.zeros(2, 4), torch.ones(2, 4), **kwargs)


def _random_layout(batch: int, length: int, gen: torch.Generator) -> torch.Tensor:
    """Rows of [prompt, (action, observation)*, padding] with random span lengths."""
    mask = torch.zeros(batch, length, dtype=f64)
    for b in range(batch):
        t = int(torch.randint(0, max(1, length // 8), (), generator=gen))  # prompt
        end = length - int(torch.randint(0, max(1, length // 6), (), generator=gen))  # padding
        action = True
        while t < end:
            span = int(torch.randint(1, max(2, length // 10), (), generator=gen))
            if action:
                mask[b, t : min(t + span, end)] = 1
            t += span
            action = not action
    return mask


def _random_problem(batch: int, length: int, gen: torch.Generator):
    mask = _random_layout(batch, length, gen)
    # sparse rewards on action tokens, including the usual final-token reward
    rewards = torch.randn(batch, length, generator=gen, dtype=f64)
    rewards *= (torch.rand(batch, length, generator=gen) < 0.05).to(f64) * mask
    for b in range(batch):
        idx = mask[b].nonzero()
        if len(idx):
            rewards[b, idx[-1]] = float(torch.randn((), generator=gen))
    values = torch.randn(batch, length, generator=gen, dtype=f64)
    return rewards, values, mask


@pytest.mark.parametrize("seed", range(6))
def test_fast_equals_reference_on_random_span_layouts(seed):
    gen = torch.Generator().manual_seed(seed)
    for gamma in (1.0, 0.99, 0.9, 0.0):
        batch = int(torch.randint(1, 6, (), generator=gen))
        length = int(torch.randint(1, 400, (), generator=gen))
        rewards, values, mask = _random_problem(batch, length, gen)
        lam_choices = [
            torch.rand(batch, generator=gen, dtype=f64) * 0.5 + 0.5,
            length_adaptive_lambda(mask.sum(-1)).to(f64),
            float(torch.rand((), generator=gen)),
            1.0,
            0.0,
        ]
        for lam in lam_choices:
            fast = skip_observation_gae(rewards, values, mask, gamma, lam)
            ref = skip_observation_gae_reference(rewards, values, mask, gamma, lam)
            torch.testing.assert_close(fast.advantages, ref.advantages, rtol=1e-10, atol=1e-10)
            torch.testing.assert_close(fast.returns, ref.returns, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("gamma, lam", [(0.99, 0.95), (1.0, 0.9999), (0.3, 0.2), (0.99, 1.0)])
def test_fast_float32_matches_float64_reference_on_long_rows(gamma, lam):
    # long rows exercise several scan levels (and, for gamma * lambda = 0.06, the unscaled path)
    gen = torch.Generator().manual_seed(7)
    rewards, values, mask = _random_problem(3, 6000, gen)
    ref = skip_observation_gae_reference(rewards, values, mask, gamma, lam)
    fast = skip_observation_gae(rewards.float(), values.float(), mask.float(), gamma, lam)
    assert fast.advantages.dtype == torch.float32
    scale = ref.returns.abs().max().item() + 1.0
    torch.testing.assert_close(fast.advantages.double(), ref.advantages, rtol=0, atol=2e-5 * scale)
    torch.testing.assert_close(fast.returns.double(), ref.returns, rtol=0, atol=2e-5 * scale)


@pytest.mark.parametrize("gamma, lam", [(1.0, 0.999), (0.99, 0.5)])
def test_fast_equals_reference_on_dense_long_rows(gamma, lam):
    # every token an action (no chunk skipped) over thousands of tokens: the chunk-level
    # recursion then spans several blocks and recurses
    gen = torch.Generator().manual_seed(11)
    mask = torch.ones(2, 9000, dtype=f64)
    mask[1, 8000:] = 0  # padding
    rewards = torch.randn(2, 9000, generator=gen, dtype=f64) * mask
    values = torch.randn(2, 9000, generator=gen, dtype=f64)
    fast = skip_observation_gae(rewards, values, mask, gamma, lam)
    ref = skip_observation_gae_reference(rewards, values, mask, gamma, lam)
    torch.testing.assert_close(fast.advantages, ref.advantages, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(fast.returns, ref.returns, rtol=1e-9, atol=1e-9)


def _compress(x: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    return [x[b][mask[b] != 0] for b in range(x.shape[0])]


@pytest.mark.parametrize("gae", IMPLEMENTATIONS)
def test_inserting_observations_leaves_action_advantages_unchanged(gae):
    gen = torch.Generator().manual_seed(1)
    # actions only: 2 rows x 12 tokens
    rewards = torch.randn(2, 12, generator=gen, dtype=f64)
    values = torch.randn(2, 12, generator=gen, dtype=f64)
    mask = torch.ones(2, 12, dtype=f64)
    before = gae(rewards, values, mask, 0.95, 0.8)
    # insert observation runs (arbitrary values, zero reward) after action tokens 2, 5 and 9
    def widen(x, fill):
        parts = []
        for b in range(2):
            row = []
            for t in range(12):
                row.append(x[b, t : t + 1])
                if t in (2, 5, 9):
                    row.append(fill(b, t))
            parts.append(torch.cat(row))
        return torch.stack(parts)

    obs_len = {2: 3, 5: 1, 9: 7}
    wide_rewards = widen(rewards, lambda b, t: torch.zeros(obs_len[t], dtype=f64))
    wide_values = widen(values, lambda b, t: 100 * torch.randn(obs_len[t], generator=gen, dtype=f64))
    wide_mask = widen(mask, lambda b, t: torch.zeros(obs_len[t], dtype=f64))
    after = gae(wide_rewards, wide_values, wide_mask, 0.95, 0.8)
    for a, b in zip(_compress(after.advantages, wide_mask), _compress(before.advantages, mask)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    for a, b in zip(_compress(after.returns, wide_mask), _compress(before.returns, mask)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert bool((after.advantages[wide_mask == 0] == 0).all())
    assert bool((after.returns[wide_mask == 0] == 0).all())


@pytest.mark.parametrize("gae", IMPLEMENTATIONS)
def test_values_at_observation_positions_change_nothing(gae):
    gen = torch.Generator().manual_seed(2)
    rewards, values, mask = _random_problem(4, 300, gen)
    base = gae(rewards, values, mask, 0.99, 0.9)
    for junk in (1e6, -3.0, float("inf"), float("nan")):
        changed = torch.where(mask == 0, torch.full_like(values, junk), values)
        out = gae(rewards, changed, mask, 0.99, 0.9)
        assert torch.equal(out.advantages, base.advantages)
        assert torch.equal(out.returns, base.returns)


@pytest.mark.parametrize("gae", IMPLEMENTATIONS)
def test_gamma_lambda_one_returns_are_monte_carlo(gae):
    gen = torch.Generator().manual_seed(3)
    rewards, values, mask = _random_problem(4, 250, gen)
    _, ret = gae(rewards, values, mask, 1.0, 1.0)
    # Monte-Carlo return: sum of this and all later rewards of the row (values play no part)
    mc = rewards.flip(-1).cumsum(-1).flip(-1) * mask
    torch.testing.assert_close(ret, mc, rtol=1e-12, atol=1e-12)


def test_empty_and_single_token_rows():
    adv, ret = skip_observation_gae(torch.zeros(0, 5), torch.zeros(0, 5), torch.zeros(0, 5), 1.0, 1.0)
    assert adv.shape == (0, 5) and ret.shape == (0, 5)
    # one action token: A = r - V = 2 - 0.5 = 1.5, R = 2
    adv, ret = skip_observation_gae(_t([[2.0]]), _t([[0.5]]), _t([[1.0]]), 0.9, 0.5)
    assert adv.item() == 1.5 and ret.item() == 2.0
    # a row without action tokens is all zeros
    values = torch.randn(1, 4, generator=torch.Generator().manual_seed(0))
    adv, ret = skip_observation_gae(torch.zeros(1, 4), values, torch.zeros(1, 4), 0.9, 0.5)
    assert bool((adv == 0).all()) and bool((ret == 0).all())


def test_length_adaptive_lambda_values_and_clamp():
    # 1 - 1 / (1.5 * l): l = 1 -> 1/3; l = 2 -> 2/3; l = 100 -> 1 - 1/150; l = 0 is clamped to l = 1
    lam = length_adaptive_lambda(torch.tensor([1, 2, 100, 0]))
    torch.testing.assert_close(lam, torch.tensor([1 / 3, 2 / 3, 1 - 1 / 150, 1 / 3]))
    # alpha = 0.5, l = 1: 1 - 1 / 0.5 = -1 -> clamped to 0
    assert length_adaptive_lambda(1, alpha=0.5).item() == 0.0
    with pytest.raises(ValueError):
        length_adaptive_lambda(3, alpha=0.0)


def test_sao_targets_use_adaptive_policy_lambda_and_critic_lambda_one():
    gen = torch.Generator().manual_seed(4)
    rewards, values, mask = _random_problem(3, 120, gen)
    out = sao_targets(rewards, values, mask, gamma=1.0, alpha=1.5)
    lengths = mask.sum(-1)
    expected_lam = 1 - 1 / (1.5 * lengths.clamp(min=1))
    torch.testing.assert_close(out.lambda_policy, expected_lam.float())
    ref_adv = skip_observation_gae_reference(rewards, values, mask, 1.0, expected_lam).advantages
    torch.testing.assert_close(out.advantages, ref_adv, rtol=1e-6, atol=1e-6)
    # critic targets: lambda_critic = 1 -> Monte-Carlo returns, independent of the values
    assert LAMBDA_CRITIC == 1.0
    mc = rewards.flip(-1).cumsum(-1).flip(-1) * mask
    torch.testing.assert_close(out.returns, mc, rtol=1e-10, atol=1e-10)
    other = sao_targets(rewards, torch.randn(values.shape, generator=gen, dtype=values.dtype), mask)
    torch.testing.assert_close(other.returns, out.returns, rtol=1e-10, atol=1e-10)


def test_accepts_bool_mask_and_returns_float32_for_float32_inputs():
    mask = torch.tensor([[True, False, True]])
    adv, ret = skip_observation_gae(torch.tensor([[0.0, 0.0, 1.0]]), torch.zeros(1, 3), mask, 1.0, 1.0)
    assert adv.dtype == torch.float32
    # gamma = lambda = 1, V = 0: every action token's advantage is the final reward 1
    assert adv.tolist() == [[1.0, 0.0, 1.0]] and ret.tolist() == [[1.0, 0.0, 1.0]]
    assert math.isclose(float(ret.sum()), 2.0)


def test_non_contiguous_inputs():
    gen = torch.Generator().manual_seed(12)
    rewards, values, mask = _random_problem(3, 512, gen)  # a multiple of the chunk: no padding copy
    # the same data laid out column-major: (B, T) views of (T, B) tensors
    r_t, v_t, m_t = (x.t().contiguous().t() for x in (rewards, values, mask))
    assert not r_t.is_contiguous()
    out = skip_observation_gae(r_t, v_t, m_t, 0.99, 0.9)
    ref = skip_observation_gae_reference(rewards, values, mask, 0.99, 0.9)
    torch.testing.assert_close(out.advantages, ref.advantages, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(out.returns, ref.returns, rtol=1e-10, atol=1e-10)
