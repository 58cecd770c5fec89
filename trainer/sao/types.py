"""Typed records returned by the SAO math (advantages, losses): one NamedTuple per result, each
field documented with its shape. Pure torch; nothing here reads files, configs or loggers.

Every statistic is a detached 0-dim float tensor (no host sync inside the loss), except counts,
which are 0-dim int64 tensors so that data-parallel ranks can sum them before dividing.
"""

from __future__ import annotations

from typing import NamedTuple

from torch import Tensor

__all__ = [
    "DISBand",
    "GAEResult",
    "PolicyLossStats",
    "SAOTargets",
    "StalenessStats",
    "ValueLossStats",
]


class GAEResult(NamedTuple):
    """Output of skip-observation GAE (docs/sao.md, mechanism 4).

    Fields:
        advantages: ``(B, T)`` float; GAE advantage at model action tokens, exactly 0 elsewhere.
        returns: ``(B, T)`` float; ``advantages + values`` at action tokens (the critic target),
            exactly 0 elsewhere.
    """

    advantages: Tensor
    returns: Tensor


class SAOTargets(NamedTuple):
    """Policy advantages and critic targets as SAO uses them (docs/sao.md, mechanisms 3 and 4).

    Fields:
        advantages: ``(B, T)`` float; skip-observation GAE with the length-adaptive
            ``lambda_policy`` of each row; 0 at non-action tokens.
        returns: ``(B, T)`` float; critic targets from GAE with ``lambda_critic = 1``, i.e. the
            discounted Monte-Carlo return over action tokens; 0 at non-action tokens.
        lambda_policy: ``(B,)`` float; the lambda used for each row's advantages.
    """

    advantages: Tensor
    returns: Tensor
    lambda_policy: Tensor


class DISBand(NamedTuple):
    """Where each importance ratio ``r`` sits relative to DIS's band (docs/sao.md, mechanism 1), the
    open interval ``(1 - eps_low, 1 + eps_high)``. Exactly one field is True for a finite or
    infinite ratio; a NaN ratio is in none of them (so it is masked out, counted as neither side).

    Fields:
        below: ``(B, T)`` bool; ``r <= 1 - eps_low`` (masked out by DIS).
        above: ``(B, T)`` bool; ``r >= 1 + eps_high`` (masked out by DIS).
        inside: ``(B, T)`` bool; ``1 - eps_low < r < 1 + eps_high`` (keeps its gradient).
    """

    below: Tensor
    above: Tensor
    inside: Tensor


class StalenessStats(NamedTuple):
    """Importance-ratio statistics of the action tokens that share one staleness value.

    Staleness is ``trainer policy version - version that generated the token`` (in policy
    versions, an integer >= 0).

    Fields:
        staleness: ``()`` int64; the staleness value these numbers are for.
        num_tokens: ``()`` int64; action tokens with this staleness.
        frac_below: ``()`` float; fraction of them with ratio ``<= 1 - eps_low``.
        frac_above: ``()`` float; fraction of them with ratio ``>= 1 + eps_high``.
        ratio_mean: ``()`` float; mean importance ratio over them.
    """

    staleness: Tensor
    num_tokens: Tensor
    frac_below: Tensor
    frac_above: Tensor
    ratio_mean: Tensor


class PolicyLossStats(NamedTuple):
    """Diagnostics of a policy-gradient loss, computed on the raw ratios before any masking.

    ``r_t = exp(logp_theta - logp_rollout)`` over action tokens only (docs/sao.md, mechanism 1).
    When the batch has no action tokens, fractions and means are 0 and min/max are NaN.

    Fields:
        num_tokens: ``()`` int64; action tokens in this (micro-)batch.
        frac_below: ``()`` float; fraction of action tokens with ``r <= 1 - eps_low``.
        frac_above: ``()`` float; fraction with ``r >= 1 + eps_high``.
        frac_zero_grad: ``()`` float; fraction of action tokens that got no gradient from this
            loss: out-of-band tokens for DIS, tokens on the active clipped branch for PPO.
        ratio_mean: ``()`` float; mean ratio.
        ratio_min: ``()`` float; smallest ratio.
        ratio_max: ``()`` float; largest ratio.
        kl_k3: ``()`` float, nats per token; k3 estimator ``(r - 1) - log r`` of
            ``KL(pi_rollout || pi_theta)``, averaged over action tokens (Schulman, "Approximating
            KL divergence", 2020). The tokens were sampled by the rollout policy, hence this
            direction.
        abs_logp_diff_mean: ``()`` float, nats; mean ``|logp_theta - logp_rollout|``.
        by_staleness: one record per distinct staleness among action tokens, ascending; empty
            when no staleness tensor was given.
    """

    num_tokens: Tensor
    frac_below: Tensor
    frac_above: Tensor
    frac_zero_grad: Tensor
    ratio_mean: Tensor
    ratio_min: Tensor
    ratio_max: Tensor
    kl_k3: Tensor
    abs_logp_diff_mean: Tensor
    by_staleness: tuple[StalenessStats, ...]


class ValueLossStats(NamedTuple):
    """Diagnostics of the critic loss over action tokens.

    Fields:
        num_tokens: ``()`` int64; action tokens in this (micro-)batch.
        value_mean: ``()`` float; mean predicted value.
        return_mean: ``()`` float; mean target return.
        clip_frac: ``()`` float; fraction of action tokens where the clipped branch was taken
            (0 when clipping is off).
        explained_variance: ``()`` float; ``1 - Var(R - V) / Var(R)`` (NaN when ``Var(R) = 0``).
    """

    num_tokens: Tensor
    value_mean: Tensor
    return_mean: Tensor
    clip_frac: Tensor
    explained_variance: Tensor
