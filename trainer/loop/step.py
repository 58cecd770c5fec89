"""One training iteration on a step batch (docs/sao.md): the critic's values,
advantages and critic targets, K critic updates, then (after the warm-up) one DIS policy update;
its statistics stay on the device until one host read at the end (step_stats.log_metrics)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trajstore.errors import TrajstoreError
from trajstore.trainer.data import StepBatch
from trajstore.trainer.loop import distributed as D
from trajstore.trainer.loop.micro import Micro, chain_groups, merged, prepare, start_pass, unmerged
from trajstore.trainer.loop.records import consumed_rows
from trajstore.trainer.loop.step_stats import (
    CriticStats,
    PolicyStats,
    StepStats,
    UpdateStats,
    ValueMoments,
    add_sums,
    critic_stats,
    log_metrics,
    merge_policy,
    policy_stats,
    trajectory_ratios,
    value_moments,
)
from trajstore.trainer.loop.token_records import capture
from trajstore.trainer.loop.trainer import Trainer


class NonFiniteUpdateError(TrajstoreError):
    """An optimiser step made parameters NaN or infinite; the run stops before recording,
    checkpointing or publishing that step (the last good version stays the latest)."""


def train_step(tr: Trainer, batch: StepBatch) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Train on one step batch; return (metrics, consumed rows of this rank).

    The loop's own code reads device tensors on the host once per step, in
    :func:`~trajstore.trainer.loop.step_stats.log_metrics`, whatever the number of micro-batches.
    The math it calls syncs on its own (the estimators' and losses' input checks).

    Raises:
        NonFiniteUpdateError: an optimiser step of this iteration made parameters non-finite on
            some rank (checked at the step's one sync, before its counters move on).
    """
    try:
        return _train_step(tr, batch)
    except BaseException:
        if tr.recorder is not None:  # a pass that raised is not "still running" (its heartbeat stops)
            tr.recorder.pass_done()
        raise


def _train_step(tr: Trainer, batch: StepBatch) -> tuple[dict[str, float], list[dict[str, Any]]]:
    cfg, env, state = tr.cfg, tr.env, tr.state
    warmup = tr.in_warmup()
    # warm-up iterations are recorded as steps -budget .. -1 (unique, increasing; an early end
    # leaves a gap before step 0)
    step = state.step if not warmup else state.iteration - cfg.algo.critic_warmup_steps
    trainer_version = state.version
    micros, n_tokens = prepare(tr, batch)
    n_seqs = len(batch.samples)
    scalar = tr.scalar_fn(batch.samples, state) if tr.scalar_fn is not None else {}
    # 1-2. values (no grad, without DDP hooks), advantages and critic targets
    values, advantage_sum, lambda_sum = _values_and_advantages(tr, micros, scalar)
    # 3. K critic updates
    critic: list[tuple[CriticStats, UpdateStats]] = []
    if tr.critic is not None:
        K = cfg.algo.critic_updates
        critic = [_critic_update(tr, micros, n_tokens, n_seqs, what=f"critic update {k + 1}/{K}") for k in range(K)]
    # 4. one policy update with DIS
    policy = _policy_update(tr, micros, n_tokens, n_seqs) if not warmup else None
    stats = StepStats(action_tokens=n_tokens, values=values, critic=tuple(c for c, _ in critic),
                      critic_steps=tuple(u for _, u in critic), policy=policy[0] if policy else None,
                      policy_step=policy[1] if policy else None, advantage_sum=advantage_sum, lambda_sum=lambda_sum,
                      ratios=tuple(m.ratios for m in micros))
    log = log_metrics(stats, batch, trainer_version=trainer_version, env=env)  # the step's one host sync
    if log.nonfinite is not None:
        what, norm = log.nonfinite
        raise NonFiniteUpdateError(
            f"iteration {state.iteration}: the {what} update made parameters non-finite (gradient norm "
            f"{norm:.3g}, {what} lr {tr.optimizers[what].param_groups[0]['lr']:g}); stopped before recording, "
            f"checkpointing or publishing it: the last good version v{tr.published} stays the latest, resume "
            "from the last checkpoint with smaller learning rates")
    ev = log.metrics.get("value/explained_variance", float("nan"))
    if warmup and cfg.algo.critic_warmup_until == "explained-variance" and ev > 0:
        state.warmup_done = True  # the critic explains returns of a batch it has not trained on
    if not warmup:  # the version moves on
        state.warmup_done = True
        state.step += 1
        state.version += 1
    if tr.token_recorder is not None and policy is not None:  # read after the sync above: the copies landed
        tr.token_recorder.write([m.tokens for m in micros], iteration=state.iteration, step=step,
                                trainer_version=trainer_version)
    consumed: list[dict[str, Any]] = []
    for m, ratios in zip(micros, log.ratios):
        consumed += consumed_rows(m.samples, step=step, trainer_version=trainer_version, rank=env.rank,
                                  ratios=ratios or None)
    state.iteration += 1
    state.cursor = batch.cursor
    return log.metrics, consumed


def _values_and_advantages(tr: Trainer, micros: list[Micro], scalar: dict[str, float]
                           ) -> tuple[ValueMoments | None, torch.Tensor, torch.Tensor]:
    """The critic's values of every micro-batch (no grad, unwrapped: no DDP hooks), then the
    advantages and critic targets, stored on each :class:`Micro` (micro-batches that share a
    chain of an episode's parts in one estimator call:
    :func:`~trajstore.trainer.loop.micro.chain_groups`). Returns the values' moments against the
    targets (None without a critic), and this rank's sums of the advantages at action tokens and
    of lambda_policy over trajectories (``()`` float64)."""
    device = tr.env.device
    moments: ValueMoments | None = None
    advantage_sum = torch.zeros((), dtype=torch.float64, device=device)
    lambda_sum = torch.zeros((), dtype=torch.float64, device=device)
    for j, m in enumerate(micros):
        if tr.critic is not None:
            start_pass(tr, "critic values", j, len(micros), m)
            with torch.no_grad(), tr.autocast():
                m.values = D.unwrap(tr.critic)(m.mb.input_ids, m.mb.position_ids).float()
    # micro-batches holding parts of one chain of an episode (trainer.data.episodes) are estimated
    # together, so that a part's last action bootstraps from the next part's first
    for group in chain_groups(micros):
        ms = [micros[j] for j in group]
        if len(ms) == 1:
            m = ms[0]
            m.advantages, m.returns, lam = tr.advantage_fn(m.mb, m.samples, m.values, scalar)
        else:
            adv, ret, lam = tr.advantage_fn(*merged(ms), scalar)
            for m, a, r in zip(ms, unmerged(adv, ms), unmerged(ret, ms) if ret is not None else [None] * len(ms)):
                m.advantages, m.returns = a, r
        for m in ms:
            advantage_sum += (m.advantages * m.mb.action_mask).sum().to(device, torch.float64)
        if any(m.samples for m in ms):  # an empty micro-batch is a one-token dummy with one lambda of its own
            lambda_sum += lam.sum().to(device, torch.float64)
    for m in micros:
        if tr.critic is not None:
            mm = value_moments(m.values, m.returns, m.mb.action_mask)
            moments = mm if moments is None else add_sums(moments, mm)
    return moments, advantage_sum, lambda_sum


def _critic_update(tr: Trainer, micros: list[Micro], n_tokens: torch.Tensor, n_seqs: int, *,
                   what: str) -> tuple[CriticStats, UpdateStats]:
    """One critic update over the step's micro-batches (gradients accumulated)."""
    assert tr.critic is not None and tr.value_loss_fn is not None
    clip = tr.cfg.algo.value_clip
    acc: CriticStats | None = None
    for j, m in enumerate(micros):
        start_pass(tr, what, j, len(micros), m)
        with D.maybe_no_sync(tr.critic, j < len(micros) - 1), tr.autocast():
            v = tr.critic(m.mb.input_ids, m.mb.position_ids)
            loss, st = tr.value_loss_fn(v.float(), m.returns, m.mb.action_mask,
                                        old_values=m.values if clip is not None else None, clip_range=clip,
                                        agg=tr.cfg.algo.loss_agg, num_tokens=n_tokens, num_sequences=n_seqs,
                                        segment_ids=m.trajectory.unsqueeze(0))
            (loss * tr.env.world_size).backward()
        s = critic_stats(loss, st)
        acc = s if acc is None else add_sums(acc, s)
    assert acc is not None  # prepare() gives at least one micro-batch
    params = [p for p in D.unwrap(tr.critic).parameters() if p.requires_grad]
    return acc, _clip_and_step(tr, params, tr.optimizers["critic"])


def _policy_update(tr: Trainer, micros: list[Micro], n_tokens: torch.Tensor,
                   n_seqs: int) -> tuple[PolicyStats, UpdateStats]:
    """One policy update (DIS or PPO-clip) over the step's micro-batches; each micro-batch's
    per-trajectory ratios are kept on it for the consumed rows."""
    algo = tr.cfg.algo
    acc: PolicyStats | None = None
    for j, m in enumerate(micros):
        start_pass(tr, "policy update", j, len(micros), m)
        with D.maybe_no_sync(tr.policy, j < len(micros) - 1), tr.autocast():
            lp, ent = tr.policy(m.mb.input_ids, m.mb.position_ids, m.mb.targets, m.mb.sampling)
            loss, st = tr.policy_loss_fn(lp.float(), m.mb.rollout_logprobs, m.advantages, m.mb.action_mask,
                                         algo.eps_low, algo.eps_high, agg=algo.loss_agg,
                                         num_tokens=n_tokens, num_sequences=n_seqs,
                                         segment_ids=m.trajectory.unsqueeze(0))
            (loss * tr.env.world_size).backward()
        s = policy_stats(loss, st, (ent * m.mb.action_mask).sum())
        acc = s if acc is None else merge_policy(acc, s)
        if m.samples:
            m.ratios = trajectory_ratios(lp, m.mb, m.trajectory, len(m.samples), algo.eps_low, algo.eps_high)
        if tr.token_recorder is not None and m.samples:
            m.tokens = capture(m.mb, m.samples, tr.token_recorder.recorded(m.samples), lp, m.advantages, m.values,
                               m.returns, algo.eps_low, algo.eps_high)
    assert acc is not None
    params = [p for p in tr.loaded.model.parameters() if p.requires_grad]
    return acc, _clip_and_step(tr, params, tr.optimizers["policy"])


def _clip_and_step(tr: Trainer, params: list[nn.Parameter], opt: torch.optim.Optimizer) -> UpdateStats:
    """Clip the gradients' global L2 norm to ``optim.max_grad_norm``, step, and measure (on the
    device) whether a parameter became non-finite; :func:`train_step` refuses that at its sync."""
    norm = torch.nn.utils.clip_grad_norm_(params, tr.cfg.optim.max_grad_norm)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return UpdateStats(grad_norm=D.full(norm).detach(), nonfinite=_nonfinite(params, tr.env.device))


def _nonfinite(params: list[nn.Parameter], device: torch.device) -> torch.Tensor:
    """``()`` float64 on `device`: 1.0 when an element of this rank's parameters (its shards,
    under FSDP) is NaN or infinite, else 0.0. One pass: the sum of per-tensor norms is
    non-finite iff some element is, or so large that its square overflows (no usable weight)."""
    local = [p.to_local() if hasattr(p, "to_local") else p for p in params]
    local = [p.detach() for p in local if p.numel()]
    if not local:
        return torch.zeros((), dtype=torch.float64, device=device)
    total = torch.stack([n.float() for n in torch._foreach_norm(local)]).sum()
    return (~torch.isfinite(total)).to(device=device, dtype=torch.float64)
