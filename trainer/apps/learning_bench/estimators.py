"""Advantage estimators the benchmark compares with SAO's token-level skip-observation GAE, each
changing one thing (pure torch), and their adapters to the trainer's picked-once
``Trainer.advantage_fn``.

* turn-level GAE (``turn-last`` / ``turn-avg``): one GAE step per action (turn) instead of per
  action token; a turn's value is the critic's value at its last action slot, or the mean over
  its action slots; its advantage goes to every token of the turn. The paper's appendix compares
  token-level with step-level (turn) GAE (docs/sao.md, mechanism 4: AIME25 89.8 vs 85.8 / 87.3).
  With SAO's lambda applied once per turn, credit decays per turn as it decays per *token* at
  token level: a shorter effective horizon.
* matched-horizon turn-level GAE (``turn-last-h`` / ``turn-avg-h``): the same with
  ``lambda_turn = lambda ** (l / K)`` (``l`` action tokens, ``K`` turns of the row), so that one
  turn step decays credit as much as the turn's average number of token steps does at token
  level: the same effective horizon in tokens (``alpha * l``) as the token-level arm.
* no-skip GAE (``no-skip``): token-level GAE over every slot from the first action to the last
  one, so the values at observation slots enter the deltas; advantages are kept on actions.

Everything else is SAO's: lambda_policy = 1 - 1/(alpha l) with l = action tokens of the
trajectory, gamma, and the critic's targets (Monte-Carlo returns, lambda = 1, over action slots).

Notation: n trajectories, T slots per row (prediction frame, zero-padded); action_mask[b, t] = 1
where slot t predicts a model action token; a *turn* is a maximal run of consecutive action slots
(in the benchmark's tasks every two actions are separated by an observation).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from trajstore.trainer.data import gae_inputs, to_packed
from trajstore.trainer.sao.advantages import length_adaptive_lambda, sao_targets, skip_observation_gae

EstimatorName = Literal["token", "turn-last", "turn-avg", "turn-last-h", "turn-avg-h", "no-skip"]
"""``token`` = SAO (skip-observation, token level); the others as in the module docstring."""


def turn_index(action_mask: Tensor) -> Tensor:
    """``(n, T)`` int64: the 0-based turn of each action slot (runs of consecutive action slots),
    -1 at non-action slots."""
    m = action_mask.bool()
    prev = torch.zeros_like(m)
    prev[:, 1:] = m[:, :-1]
    starts = m & ~prev
    idx = starts.long().cumsum(-1) - 1
    return torch.where(m, idx, torch.full_like(idx, -1))


def turn_level_gae(rewards: Tensor, values: Tensor, action_mask: Tensor, *, value_at: Literal["last", "mean"],
                   gamma: float, lam: Tensor | float) -> Tensor:
    """Turn-level (step-level) GAE: one step per turn, broadcast to the turn's tokens.

    For turn k with value ``V_k`` (the value at its last action slot, or the mean over its
    action slots) and reward ``r_k`` (the sum of the rewards on its slots)::

        delta_k = r_k + gamma * V_{k+1} - V_k        (V after the last turn = 0)
        A_k     = delta_k + gamma * lambda * A_{k+1}

    Args:
        rewards: ``(n, T)``; nonzero only on action slots (the trajectory reward on its last one).
        values: ``(n, T)`` critic values (read on action slots only).
        action_mask: ``(n, T)``, 1 = action slot.
        value_at: ``"last"`` or ``"mean"``.
        gamma: discount per turn.
        lam: float or ``(n,)`` per-row lambda.

    Returns:
        ``(n, T)`` float32 advantages: ``A_k`` on every action slot of turn k, 0 elsewhere.
    """
    turn = turn_index(action_mask)
    n = action_mask.shape[0]
    k_max = int(turn.max()) + 1 if turn.numel() else 0
    if k_max <= 0:
        return torch.zeros(action_mask.shape, dtype=torch.float32)
    m = action_mask.bool()
    slot = torch.where(m, turn, torch.full_like(turn, k_max))  # non-actions into a spill column
    r_t = torch.zeros((n, k_max + 1), dtype=torch.float64).scatter_add_(1, slot, rewards.double() * m)
    if value_at == "mean":
        v_sum = torch.zeros((n, k_max + 1), dtype=torch.float64).scatter_add_(1, slot, values.double() * m)
        cnt = torch.zeros((n, k_max + 1), dtype=torch.float64).scatter_add_(1, slot, m.double())
        v_t = v_sum / cnt.clamp(min=1)
    else:
        # last action slot of each turn: the slot whose successor is not an action of the same turn
        nxt = torch.full_like(turn, -1)
        nxt[:, :-1] = turn[:, 1:]
        last = m & (nxt != turn)
        v_t = torch.zeros((n, k_max + 1), dtype=torch.float64).scatter_add_(1, slot, values.double() * last)
    has = torch.zeros((n, k_max + 1), dtype=torch.bool).scatter_(1, slot, m)[:, :k_max]
    adv_t = skip_observation_gae(r_t[:, :k_max], v_t[:, :k_max].masked_fill(~has, 0.0), has, gamma, lam).advantages
    out = torch.gather(torch.cat([adv_t, torch.zeros((n, 1), dtype=adv_t.dtype)], 1), 1, slot)
    return (out * m).float()


def no_skip_gae(rewards: Tensor, values: Tensor, action_mask: Tensor, *, gamma: float, lam: Tensor | float) -> Tensor:
    """Token-level GAE that does not skip observations: every slot from a row's first action slot
    to its last one is a step (observation values enter the deltas); advantages are returned on
    action slots only. Shapes and arguments as :func:`turn_level_gae`; returns ``(n, T)`` float32."""
    m = action_mask.bool()
    pos = torch.arange(m.shape[1]).unsqueeze(0)
    first = torch.where(m, pos, m.shape[1]).min(dim=1, keepdim=True).values
    last = torch.where(m, pos, -1).max(dim=1, keepdim=True).values
    span = (pos >= first) & (pos <= last)
    adv = skip_observation_gae(rewards, values, span, gamma, lam).advantages
    return (adv * m).float()


def advantages_by(name: EstimatorName, rewards: Tensor, values: Tensor, action_mask: Tensor, *, gamma: float,
                  alpha: float) -> Tensor:
    """The named estimator's ``(n, T)`` advantages with SAO's lambda_policy (``l`` = action
    tokens of the row; docs/sao.md mechanism 4)."""
    if name == "token":
        return sao_targets(rewards, values, action_mask, gamma=gamma, alpha=alpha).advantages.float()
    lam = length_adaptive_lambda(action_mask.float().sum(-1), alpha)
    if name == "no-skip":
        return no_skip_gae(rewards, values, action_mask, gamma=gamma, lam=lam)
    if name in ("turn-last", "turn-avg", "turn-last-h", "turn-avg-h"):
        if name.endswith("-h"):
            lam = matched_turn_lambda(lam, action_mask)
        return turn_level_gae(rewards, values, action_mask, value_at="last" if name.startswith("turn-last") else "mean",
                              gamma=gamma, lam=lam)
    raise ValueError(f"unknown estimator {name!r}; expected token, turn-last, turn-avg, turn-last-h, turn-avg-h or "
                     "no-skip")


def matched_turn_lambda(lam_token: Tensor, action_mask: Tensor) -> Tensor:
    """``(n,)`` per-turn lambda with the token-level effective horizon: ``lam_token ** (l / K)``
    for a row of ``l`` action tokens in ``K`` turns (a row without actions keeps its lambda).

    Example: l = 9 tokens in K = 3 turns with ``lam_token = 1 - 1/(1.5 * 9) = 0.926``: ``0.926 ** 3
    = 0.794`` per turn."""
    tokens = action_mask.float().sum(-1)
    turns = (turn_index(action_mask).max(dim=-1).values + 1).clamp(min=1).float()
    return torch.where(tokens > 0, lam_token.float() ** (tokens / turns), lam_token.float())


def trainer_advantage_fn(name: EstimatorName, gamma: float, alpha: float):  # noqa: ANN201 - a loop.AdvantageFn
    """An ``AdvantageFn`` for ``Trainer.advantage_fn``: the named estimator's advantages for the
    policy and SAO's critic targets (lambda = 1 returns), so only the policy's advantages change."""

    def fn(mb, samples, values, _scalar):  # noqa: ANN001, ANN202
        x = gae_inputs(mb, samples, values)
        t = sao_targets(x.rewards, x.values, x.action_mask, gamma=gamma, alpha=alpha)
        adv = advantages_by(name, x.rewards, x.values, x.action_mask, gamma=gamma, alpha=alpha)
        return to_packed(adv, mb.segments), to_packed(t.returns, mb.segments), t.lambda_policy

    return fn
