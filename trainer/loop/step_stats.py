"""A training step's statistics: typed records of tensors on the training device, added up over
micro-batches while the step runs, and :func:`log_metrics`, the one place where they cross to
the host (one sync per step) and become the step record's metrics and per-trajectory ratios.
"""

from __future__ import annotations

from typing import NamedTuple, TypeVar

import torch
from torch import Tensor

from trajstore.trainer.data import PackedMicroBatch, StepBatch
from trajstore.trainer.loop import distributed as D
from trajstore.trainer.sao.losses import dis_band
from trajstore.trainer.sao.types import PolicyLossStats, ValueLossStats

# Every record field below is a () float64 tensor on the training device unless its docstring
# says otherwise; "sum" fields are sums over this rank's action tokens until log_metrics adds up
# the ranks'.
f64 = torch.float64


class ValueMoments(NamedTuple):
    """Sums over action tokens from which the explained variance ``1 - Var(R - V) / Var(R)`` of
    a whole step follows (population variances); unlike a per-micro-batch explained variance they
    add up across micro-batches and ranks. R = critic target (return), V = predicted value.

    Fields (sums):
        num_tokens: action tokens.  value_sum: ``sum V``.  return_sum: ``sum R``.
        return_sq_sum: ``sum R^2``.  error_sum: ``sum (R - V)``.  error_sq_sum: ``sum (R - V)^2``.
    """

    num_tokens: Tensor
    value_sum: Tensor
    return_sum: Tensor
    return_sq_sum: Tensor
    error_sum: Tensor
    error_sq_sum: Tensor


def value_moments(values: Tensor, returns: Tensor, action_mask: Tensor) -> ValueMoments:
    """:class:`ValueMoments` of one micro-batch.

    Args:
        values: ``(1, L)`` float, the critic's values.  returns: ``(1, L)`` float, its targets.
        action_mask: ``(1, L)`` bool, True = action slot (only these count).
    """
    with torch.no_grad():
        r = torch.where(action_mask, returns.detach().to(f64), 0.0)
        v = torch.where(action_mask, values.detach().to(f64), 0.0)
        e = r - v
        return ValueMoments(action_mask.sum().to(f64), v.sum(), r.sum(), (r * r).sum(), e.sum(), (e * e).sum())


def explained_variance_of_sums(n: float, return_sum: float, return_sq_sum: float, error_sum: float,
                               error_sq_sum: float) -> float:
    """``1 - Var(R - V) / Var(R)`` from the host values of :class:`ValueMoments` (population
    variances); NaN when ``Var(R) <= 1e-12`` (all returns equal: the critic can be neither
    better nor worse than a constant) or there is no action token."""
    n = max(n, 1.0)
    var_r = return_sq_sum / n - (return_sum / n) ** 2
    var_e = error_sq_sum / n - (error_sum / n) ** 2
    return 1.0 - var_e / var_r if var_r > 1e-12 else float("nan")


class CriticStats(NamedTuple):
    """One critic update: its value loss's :class:`ValueLossStats`, summed over micro-batches.

    Fields (sums):
        loss: the micro-batches' losses (each normalised by the step's global count, so their
            sum is the step's loss).
        num_tokens: action tokens.
        clipped: tokens where the clipped branch of the value loss was taken (``clip_frac * n``).
        value_sum: predicted values at action tokens (``value_mean * n``).
    """

    loss: Tensor
    num_tokens: Tensor
    clipped: Tensor
    value_sum: Tensor


def critic_stats(loss: Tensor, st: ValueLossStats) -> CriticStats:
    """:class:`CriticStats` of one micro-batch from its value loss and its stats."""
    n = st.num_tokens.to(f64)
    return CriticStats(loss.detach().to(f64), n, st.clip_frac.to(f64) * n, st.value_mean.to(f64) * n)


class PolicyStats(NamedTuple):
    """The policy update: its loss's :class:`PolicyLossStats` summed over micro-batches (each
    mean times its ``num_tokens``), plus the policy's entropy at action tokens.

    Fields (sums unless said):
        loss: the micro-batches' losses (the step's loss, see :class:`CriticStats`).
        num_tokens: action tokens.
        below, above: tokens with ratio ``<= 1 - eps_low`` / ``>= 1 + eps_high``.
        zero_grad: tokens that got no gradient from the loss.
        ratio_sum: importance ratios.  kl_k3_sum: k3 KL estimates (nats).
        abs_logp_diff_sum: ``|logp_theta - logp_rollout|`` (nats).  entropy_sum: entropies (nats).
        ratio_min, ratio_max: smallest / largest ratio (+inf / -inf without action tokens).
    """

    loss: Tensor
    num_tokens: Tensor
    below: Tensor
    above: Tensor
    zero_grad: Tensor
    ratio_sum: Tensor
    kl_k3_sum: Tensor
    abs_logp_diff_sum: Tensor
    entropy_sum: Tensor
    ratio_min: Tensor
    ratio_max: Tensor


def policy_stats(loss: Tensor, st: PolicyLossStats, entropy_sum: Tensor) -> PolicyStats:
    """:class:`PolicyStats` of one micro-batch from its policy loss, its stats and the sum of
    the policy's entropy over its action tokens (``()`` float, nats)."""
    n = st.num_tokens.to(f64)
    has = st.num_tokens > 0
    return PolicyStats(
        loss.detach().to(f64), n, st.frac_below.to(f64) * n, st.frac_above.to(f64) * n,
        st.frac_zero_grad.to(f64) * n, st.ratio_mean.to(f64) * n, st.kl_k3.to(f64) * n,
        st.abs_logp_diff_mean.to(f64) * n, entropy_sum.detach().to(f64),
        torch.where(has, st.ratio_min.to(f64), torch.inf), torch.where(has, st.ratio_max.to(f64), -torch.inf))


def merge_policy(a: PolicyStats, b: PolicyStats) -> PolicyStats:
    """Two micro-batches' :class:`PolicyStats` as one: sums add, min / max combine."""
    sums = [x + y for x, y in zip(a[:-2], b[:-2])]
    return PolicyStats(*sums, torch.minimum(a.ratio_min, b.ratio_min), torch.maximum(a.ratio_max, b.ratio_max))


Sums = TypeVar("Sums", "ValueMoments", "CriticStats")
"""A record whose fields are all sums."""


def add_sums(a: Sums, b: Sums) -> Sums:
    """Field-wise sum of two records of the same all-sums type (:class:`ValueMoments`,
    :class:`CriticStats`): two micro-batches (or updates' passes) as one."""
    return type(a)(*(x + y for x, y in zip(a, b)))


class TrajectoryRatios(NamedTuple):
    """Importance ratios of the trajectories of one micro-batch, for the consumed rows; each
    field ``(n,)`` float64, n = trajectories in the micro-batch, in packing order.

    Fields:
        num_tokens: action slots.  below / above: slots outside DIS's band on that side
            (:func:`~trajstore.trainer.sao.losses.dis_band`).  ratio_sum: sum of the ratios.
    """

    num_tokens: Tensor
    below: Tensor
    above: Tensor
    ratio_sum: Tensor


def trajectory_ratios(logprobs: Tensor, mb: PackedMicroBatch, trajectory: Tensor, n: int, eps_low: float,
                      eps_high: float) -> TrajectoryRatios:
    """:class:`TrajectoryRatios` of a packed micro-batch.

    Args:
        logprobs: ``(1, L)`` float, nats; the current policy's log-probs of `mb`'s targets.
        mb: the packed micro-batch (its rollout log-probs and action mask are read).
        trajectory: ``(L,)`` int64 on the device, the trajectory index of each packed position.
        n: trajectories in the micro-batch.
        eps_low, eps_high: DIS's band (see :func:`~trajstore.trainer.sao.losses.dis_band`).
    """
    with torch.no_grad():
        mask = mb.action_mask[0]
        ratio = torch.where(mask, logprobs[0].detach().float() - mb.rollout_logprobs[0], 0.0).exp()
        band = dis_band(ratio, eps_low, eps_high)

        def per_trajectory(x: Tensor) -> Tensor:
            return torch.zeros(n, dtype=f64, device=x.device).index_add_(0, trajectory, x.to(f64))

        return TrajectoryRatios(per_trajectory(mask), per_trajectory(band.below & mask),
                                per_trajectory(band.above & mask), per_trajectory(torch.where(mask, ratio, 0.0)))


class UpdateStats(NamedTuple):
    """One optimiser step.

    Fields:
        grad_norm: ``()`` float, global L2 norm of the gradients before clipping.
        nonfinite: ``()`` float, 1.0 when a parameter of this rank is NaN or infinite after the
            step, else 0.0.
    """

    grad_norm: Tensor
    nonfinite: Tensor


class StepStats(NamedTuple):
    """Everything one step measured, still on the device.

    Fields:
        action_tokens: ``()`` float, the step's action tokens, all ranks (already reduced).
        values: the critic's values before its updates; None without a critic.
        critic: one :class:`CriticStats` per critic update, in order (empty without a critic).
        critic_steps: the matching optimiser steps.
        policy: None in a critic-only (warm-up) iteration.
        policy_step: the policy's optimiser step; None likewise.
        advantage_sum: ``()`` sum of the advantages at this rank's action tokens (reward units).
        lambda_sum: ``()`` sum of lambda_policy over this rank's trajectories.
        ratios: per micro-batch, :class:`TrajectoryRatios` (None for a warm-up iteration or an
            empty micro-batch).
    """

    action_tokens: Tensor
    values: ValueMoments | None
    critic: tuple[CriticStats, ...]
    critic_steps: tuple[UpdateStats, ...]
    policy: PolicyStats | None
    policy_step: UpdateStats | None
    advantage_sum: Tensor
    lambda_sum: Tensor
    ratios: tuple[TrajectoryRatios | None, ...]


class StepLog(NamedTuple):
    """A step's statistics on the host, from :func:`log_metrics`.

    Fields:
        metrics: the step record's metrics (``runs/<run_id>/steps``, names in
            :data:`~trajstore.trainer.loop.records.METRIC_DOCS`) except ``perf/*``, which the
            run loop adds.
        ratios: per micro-batch, per trajectory ``(masked_below, masked_above, ratio_mean)`` for
            the consumed rows (None for a trajectory without an action slot); an empty list for
            a micro-batch without ratios (a critic-only iteration, an empty micro-batch).
        nonfinite: ``(what, gradient norm)`` of the first optimiser step ("critic" or "policy")
            that made parameters non-finite on some rank, else None.
    """

    metrics: dict[str, float]
    ratios: list[list[tuple[float, float, float] | None]]
    nonfinite: tuple[str, float] | None


def log_metrics(stats: StepStats, batch: StepBatch, *, trainer_version: int, env: D.DistEnv) -> StepLog:
    """Turn a step's typed statistics into its record, with one host sync: the sums are
    all-reduced in one collective and the maxima in another (data-parallel ranks), then every
    scalar and per-trajectory vector is concatenated and read with a single ``.tolist()``.
    Staleness, reward and data counts come from the step batch, already on the host.

    Args:
        stats: this rank's :class:`StepStats`.
        batch: the step batch (all ranks' trajectories; every rank holds all of them).
        trainer_version: the policy version the step started from.
        env: the process group.
    """
    sums: dict[str, Tensor] = {"advantage_sum": stats.advantage_sum, "lambda_sum": stats.lambda_sum}
    maxima: dict[str, Tensor] = {}
    kept: dict[str, Tensor] = {"action_tokens": stats.action_tokens}
    if stats.values is not None:
        sums.update({f"values.{k}": t for k, t in stats.values._asdict().items()})
    if stats.critic:
        sums.update({f"critic.{k}": t for k, t in stats.critic[-1]._asdict().items()})
    steps = [("critic", u) for u in stats.critic_steps]
    if stats.policy_step is not None:
        steps.append(("policy", stats.policy_step))
    for i, (_, u) in enumerate(steps):
        kept[f"step{i}.grad_norm"] = u.grad_norm
        maxima[f"step{i}.nonfinite"] = u.nonfinite
    if stats.policy is not None:
        p = stats.policy._asdict()
        maxima.update({"policy.neg_ratio_min": -p.pop("ratio_min"), "policy.ratio_max": p.pop("ratio_max")})
        sums.update({f"policy.{k}": t for k, t in p.items()})
    for j, r in enumerate(stats.ratios):
        if r is not None:
            kept.update({f"ratios{j}.{k}": t for k, t in r._asdict().items()})
    h = _to_host(sums, maxima, kept, env)

    nonfinite = next(((what, h[f"step{i}.grad_norm"]) for i, (what, _) in enumerate(steps)
                      if h[f"step{i}.nonfinite"] > 0), None)
    n_tokens = max(h["action_tokens"], 1.0)
    m: dict[str, float] = {}
    if stats.values is not None:
        ev = explained_variance_of_sums(h["values.num_tokens"], h["values.return_sum"], h["values.return_sq_sum"],
                                        h["values.error_sum"], h["values.error_sq_sum"])
        m["value/explained_variance"] = ev
        m["value/mean"] = h["values.value_sum"] / n_tokens
        m["value/return_mean"] = h["values.return_sum"] / n_tokens
        # NaN (all returns equal) says nothing either way: no warning
        m["warn/critic_ev_not_positive"] = 1.0 if ev <= 0 else 0.0
    if stats.critic:
        n = max(h["critic.num_tokens"], 1.0)
        m["value/loss"] = h["critic.loss"]
        m["value/grad_norm"] = h[f"step{len(stats.critic_steps) - 1}.grad_norm"]
        m["value/clip_frac"] = h["critic.clipped"] / n
        m["value/last_update_mean"] = h["critic.value_sum"] / n
    if stats.policy is not None:
        n = max(h["policy.num_tokens"], 1.0)
        m.update({
            "policy/loss": h["policy.loss"], "policy/grad_norm": h[f"step{len(steps) - 1}.grad_norm"],
            "policy/entropy": h["policy.entropy_sum"] / n, "policy/kl_k3": h["policy.kl_k3_sum"] / n,
            "policy/abs_logp_diff_mean": h["policy.abs_logp_diff_sum"] / n,
            "ratio/mean": h["policy.ratio_sum"] / n, "ratio/masked_below": h["policy.below"] / n,
            "ratio/masked_above": h["policy.above"] / n, "ratio/zero_grad": h["policy.zero_grad"] / n,
            "ratio/min": -h["policy.neg_ratio_min"], "ratio/max": h["policy.ratio_max"],
            "policy/advantage_mean": h["advantage_sum"] / n_tokens,
            "policy/lambda_mean": h["lambda_sum"] / max(len(batch.samples), 1),
        })
    m.update(_data_metrics(batch, trainer_version, h["action_tokens"]))
    ratios = []
    for j, r in enumerate(stats.ratios):
        if r is None:
            ratios.append([])
            continue
        per = zip(*(h[f"ratios{j}.{k}"] for k in TrajectoryRatios._fields))
        ratios.append([(below / n, above / n, total / n) if n else None for n, below, above, total in per])
    return StepLog(m, ratios, nonfinite)


def _to_host(sums: dict[str, Tensor], maxima: dict[str, Tensor], kept: dict[str, Tensor],
             env: D.DistEnv) -> dict[str, float | list[float]]:
    """Named tensors on the host: `sums` summed and `maxima` maxed over ranks (one collective
    each), `kept` as they are (scalars, or vectors read as lists). The step's one host sync."""
    device = env.device

    def flat(group: dict[str, Tensor]) -> Tensor:
        parts = [t.to(device=device, dtype=f64).reshape(-1) for t in group.values()]
        return torch.cat(parts) if parts else torch.zeros(0, dtype=f64, device=device)

    reduced = [D.all_reduce_sum(flat(sums), env), D.all_reduce_max(flat(maxima), env), flat(kept)]
    values = torch.cat(reduced).tolist()  # the one host sync of the step
    out: dict[str, float | list[float]] = {}
    i = 0
    for group in (sums, maxima, kept):
        for name, t in group.items():
            k = t.numel()
            out[name] = values[i] if t.dim() == 0 else values[i:i + k]
            i += k
    return out


def _data_metrics(batch: StepBatch, trainer_version: int, action_tokens: float) -> dict[str, float]:
    """The step batch's staleness, reward and data counts (host data, no tensor)."""
    m: dict[str, float] = {}
    # staleness is defined only for action tokens with a policy version (text-only logs have none);
    # without any, the step has no staleness metric rather than a made-up 0 or trainer_version + 1
    stale = [trainer_version - v for s in batch.samples for v in s.versioned_policy_version.tolist()]
    if stale:
        m["staleness/mean"] = sum(stale) / len(stale)
        m["staleness/max"] = float(max(stale))
    m["staleness/unversioned_action_tokens"] = float(
        sum(s.num_action_tokens - len(s.versioned_policy_version) for s in batch.samples))
    m["staleness/mixed_version_actions"] = float(sum(s.mixed_version_actions for s in batch.samples))
    m["reward/mean"] = sum(s.reward for s in batch.samples) / len(batch.samples)
    m["data/trajectories"] = float(len(batch.samples))
    m["data/episodes"] = float(len({s.episode_id or s.trajectory_id for s in batch.samples}))
    m["data/action_tokens"] = action_tokens
    for reason, k in batch.skipped.items():
        m[f"data/skipped_{reason}"] = float(k)
    return m
