"""One training iteration on a step batch (../shared/docs/SAO.md): the critic's values,
advantages and critic targets, K critic updates, then (after the warm-up) one DIS policy update;
returns the step's metrics and consumed rows."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from trajstore.errors import TrajstoreError
from trajstore.trainer.data import PackedMicroBatch, Sample, StepBatch, pack, split_for_rank, token_micro_batches
from trajstore.trainer.loop import distributed as D
from trajstore.trainer.loop.records import consumed_rows
from trajstore.trainer.loop.trainer import Trainer


class NonFiniteUpdateError(TrajstoreError):
    """An optimiser step made parameters NaN or infinite; the run stops before recording,
    checkpointing or publishing that step (the last good version stays the latest)."""


@dataclass
class _Micro:
    """A micro-batch and what the step computed for it. All tensors (1, L)."""

    samples: list[Sample]
    mb: PackedMicroBatch
    values: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    logprobs: torch.Tensor | None = None


def prepare(tr: Trainer, batch: StepBatch) -> tuple[list[_Micro], torch.Tensor]:
    """This rank's micro-batches (same count on every rank) and the step's global action-token count."""
    cfg, env = tr.cfg, tr.env
    local = split_for_rank(batch.samples, env.rank, env.world_size)
    parts = token_micro_batches(local, cfg.data.micro_batch_size, cfg.data.micro_batch_tokens)
    # every rank runs the same number of passes (empty micro-batches pad the shorter ranks)
    n_micro = max(1, int(D.all_reduce_max(torch.tensor([float(len(parts))], device=env.device), env)))
    micros = [_Micro(s, pack(s, env.device)) for s in parts + [[] for _ in range(n_micro - len(parts))]]
    tr.last_pass = None
    if tr.behaviour is not None:
        todo = [m for m in micros if any(s.needs_behaviour for s in m.samples)]
        for j, m in enumerate(todo):
            need = [i for i, s in enumerate(m.samples) if s.needs_behaviour]
            if need:
                start_pass(tr, "initial-policy log-probs", j, len(todo), m)
                with torch.no_grad(), tr.autocast():
                    lp, _ = tr.behaviour(m.mb.input_ids, m.mb.position_ids, m.mb.targets, m.mb.inv_temperature)
                fill = torch.zeros_like(m.mb.action_mask)
                for i in need:
                    fill[0, int(m.mb.segments[i]):int(m.mb.segments[i + 1])] = True
                fill &= m.mb.action_mask
                m.mb = m.mb._replace(rollout_logprobs=torch.where(fill, lp.float(), m.mb.rollout_logprobs))
    count = torch.tensor(float(sum(int(m.mb.action_mask.sum()) for m in micros)), device=env.device)
    return micros, D.all_reduce_sum(count, env)


def start_pass(tr: Trainer, what: str, j: int, n: int, m: _Micro) -> None:
    """Before each pass over a micro-batch: decide whether it is checkpointed (auto activation
    checkpointing) and report it: ``step 1: critic update 1/2, micro-batch 2/3 (11,500 tokens,
    2 trajectories; last pass 61 tok/s)``, with tokens/s of the previous pass of this step."""
    if tr.checkpoint_gate is not None:
        tr.checkpoint_gate.set_tokens(int(m.mb.input_ids.shape[1]))
    now = time.perf_counter()
    rate = ""
    if tr.last_pass is not None and now > tr.last_pass[0]:
        rate = f"; last pass {tr.last_pass[1] / (now - tr.last_pass[0]):,.0f} tok/s"
    tr.last_pass = (now, int(m.mb.input_ids.shape[1]))
    head = f"step {tr.state.step}" if not tr.in_warmup() else f"critic warm-up {tr.state.iteration + 1}"
    tr.say(f"{head}: {what}, micro-batch {j + 1}/{n} ({int(m.mb.input_ids.shape[1]):,} tokens, "
           f"{len(m.samples)} trajector{'y' if len(m.samples) == 1 else 'ies'}{rate})")


def _clip_and_step(tr: Trainer, params: list[nn.Parameter], opt: torch.optim.Optimizer, max_norm: float, *,
                   what: str) -> float:
    """Clip the gradients' global L2 norm, step, and refuse non-finite parameters afterwards.

    Raises:
        NonFiniteUpdateError: the step made a parameter NaN or infinite (e.g. an infinite learning
            rate, or a NaN loss); nothing of this step is recorded, checkpointed or published.
    """
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if not D.all_finite(params, tr.env):
        raise NonFiniteUpdateError(
            f"iteration {tr.state.iteration}: the {what} update made parameters non-finite (gradient norm "
            f"{float(D.full(norm)):.3g}, {what} lr {opt.param_groups[0]['lr']:g}); stopped before recording, "
            f"checkpointing or publishing it: the last good version v{tr.published} stays the latest, resume "
            "from the last checkpoint with smaller learning rates")
    return float(D.full(norm))


def _critic_update(tr: Trainer, micros: list[_Micro], n_tokens: torch.Tensor, n_seqs: int, *,
                   what: str = "critic update") -> dict[str, float]:
    """One critic update over the step's micro-batches (gradients accumulated)."""
    assert tr.critic is not None and tr.value_loss_fn is not None
    world = tr.env.world_size
    total = 0.0
    for j, m in enumerate(micros):
        start_pass(tr, what, j, len(micros), m)
        with D.maybe_no_sync(tr.critic, j < len(micros) - 1), tr.autocast():
            v = tr.critic(m.mb.input_ids, m.mb.position_ids)
            clip = tr.cfg.algo.value_clip
            loss, _stats = tr.value_loss_fn(v.float(), m.returns, m.mb.action_mask,
                                            old_values=m.values if clip is not None else None, clip_range=clip,
                                            agg=tr.cfg.algo.loss_agg, num_tokens=n_tokens, num_sequences=n_seqs)
            (loss * world).backward()
        total += float(loss.detach())
    params = [p for p in D.unwrap(tr.critic).parameters() if p.requires_grad]
    norm = _clip_and_step(tr, params, tr.optimizers["critic"], tr.cfg.optim.max_grad_norm, what="critic")
    return {"value/loss": float(D.all_reduce_sum(torch.tensor(total, device=tr.env.device), tr.env)),
            "value/grad_norm": norm}


def _policy_update(tr: Trainer, micros: list[_Micro], n_tokens: torch.Tensor, n_seqs: int) -> dict[str, float]:
    """One policy update (DIS or PPO-clip) over the step's micro-batches."""
    cfg, world = tr.cfg, tr.env.world_size
    sums = {k: 0.0 for k in ("loss", "n", "below", "above", "zero", "ratio", "kl", "entropy")}
    rmin, rmax = math.inf, -math.inf
    for j, m in enumerate(micros):
        start_pass(tr, "policy update", j, len(micros), m)
        with D.maybe_no_sync(tr.policy, j < len(micros) - 1), tr.autocast():
            lp, ent = tr.policy(m.mb.input_ids, m.mb.position_ids, m.mb.targets, m.mb.inv_temperature)
            loss, st = tr.policy_loss_fn(lp.float(), m.mb.rollout_logprobs, m.advantages, m.mb.action_mask,
                                         cfg.algo.eps_low, cfg.algo.eps_high, agg=cfg.algo.loss_agg,
                                         num_tokens=n_tokens, num_sequences=n_seqs)
            (loss * world).backward()
        m.logprobs = lp.detach()
        n = float(st.num_tokens)
        sums["loss"] += float(loss.detach())
        sums["n"] += n
        sums["below"] += float(st.frac_below) * n
        sums["above"] += float(st.frac_above) * n
        sums["zero"] += float(st.frac_zero_grad) * n
        sums["ratio"] += float(st.ratio_mean) * n
        sums["kl"] += float(st.kl_k3) * n
        sums["entropy"] += float((ent * m.mb.action_mask).sum())
        if n:
            rmin, rmax = min(rmin, float(st.ratio_min)), max(rmax, float(st.ratio_max))
    norm = _clip_and_step(tr, [p for p in tr.loaded.model.parameters() if p.requires_grad], tr.optimizers["policy"],
                          cfg.optim.max_grad_norm, what="policy")
    keys = sorted(sums)
    red = D.all_reduce_sum(torch.tensor([sums[k] for k in keys], dtype=torch.float64, device=tr.env.device), tr.env)
    s = dict(zip(keys, red.tolist()))
    lo = D.all_reduce_max(torch.tensor([-rmin, rmax], dtype=torch.float64, device=tr.env.device), tr.env).tolist()
    n = max(s["n"], 1.0)
    return {"policy/loss": s["loss"], "policy/grad_norm": norm, "policy/entropy": s["entropy"] / n,
            "policy/kl_k3": s["kl"] / n, "ratio/mean": s["ratio"] / n, "ratio/masked_below": s["below"] / n,
            "ratio/masked_above": s["above"] / n, "ratio/zero_grad": s["zero"] / n,
            "ratio/min": -lo[0], "ratio/max": lo[1]}


def _value_stats(tr: Trainer, micros: list[_Micro], n_tokens: torch.Tensor) -> dict[str, float]:
    """Global value statistics before the critic update, incl. explained variance
    ``1 - Var(R - V) / Var(R)`` over all action tokens of the step (all ranks; `n_tokens` is
    their count, from :func:`_prepare`)."""
    acc = torch.zeros(5, dtype=torch.float64, device=tr.env.device)
    for m in micros:
        mask = m.mb.action_mask
        r, v = m.returns[mask].double(), m.values[mask].double()
        acc += torch.stack([r.sum(), (r * r).sum(), (r - v).sum(), ((r - v) ** 2).sum(), v.sum()])
    acc = D.all_reduce_sum(acc, tr.env)
    n = max(float(n_tokens), 1.0)
    var_r = float(acc[1] / n - (acc[0] / n) ** 2)
    var_e = float(acc[3] / n - (acc[2] / n) ** 2)
    return {"value/explained_variance": 1.0 - var_e / var_r if var_r > 1e-12 else float("nan"),
            "value/mean": float(acc[4]) / n, "value/return_mean": float(acc[0]) / n}


def train_step(tr: Trainer, batch: StepBatch) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Train on one step batch; return (metrics, consumed rows of this rank)."""
    cfg, env, state = tr.cfg, tr.env, tr.state
    warmup = tr.in_warmup()
    # warm-up iterations are recorded as steps -budget .. -1 (unique, increasing; an early end
    # leaves a gap before step 0)
    step = state.step if not warmup else state.iteration - cfg.algo.critic_warmup_steps
    trainer_version = state.version
    micros, n_tokens = prepare(tr, batch)
    scalar = tr.scalar_fn(batch.samples, state) if tr.scalar_fn is not None else {}
    metrics: dict[str, float] = {}
    # 1-2. values (no grad, without DDP hooks), advantages and critic targets
    for j, m in enumerate(micros):
        if tr.critic is not None:
            start_pass(tr, "critic values", j, len(micros), m)
            with torch.no_grad(), tr.autocast():
                m.values = D.unwrap(tr.critic)(m.mb.input_ids, m.mb.position_ids).float()
        m.advantages, m.returns, lam = tr.advantage_fn(m.mb, m.samples, m.values, scalar)
        metrics.setdefault("_lam", 0.0)
        metrics["_lam"] += float(lam.sum()) if m.samples else 0.0
    lam_sum = float(D.all_reduce_sum(torch.tensor(metrics.pop("_lam"), device=env.device), env))
    # 3. K critic updates
    if tr.critic is not None:
        metrics.update(_value_stats(tr, micros, n_tokens))
        ev = metrics["value/explained_variance"]
        # NaN (all returns equal) says nothing either way: no warning, and no end of the warm-up
        metrics["warn/critic_ev_not_positive"] = 1.0 if ev <= 0 else 0.0
        if warmup and cfg.algo.critic_warmup_until == "explained-variance" and ev > 0:
            state.warmup_done = True  # the critic explains returns of a batch it has not trained on
        for k in range(cfg.algo.critic_updates):
            metrics.update(_critic_update(tr, micros, n_tokens, len(batch.samples),
                                          what=f"critic update {k + 1}/{cfg.algo.critic_updates}"))
    # 4. one policy update with DIS, then the version moves on
    if not warmup:
        state.warmup_done = True
        metrics.update(_policy_update(tr, micros, n_tokens, len(batch.samples)))
        adv = sum(float((m.advantages * m.mb.action_mask).sum()) for m in micros)
        metrics["policy/advantage_mean"] = float(D.all_reduce_sum(torch.tensor(adv, device=env.device), env)) / max(
            float(n_tokens), 1.0)
        metrics["policy/lambda_mean"] = lam_sum / max(len(batch.samples), 1)
        state.step += 1
        state.version += 1
    consumed: list[dict[str, Any]] = []
    for m in micros:
        consumed += consumed_rows(m.samples, step=step, trainer_version=trainer_version, rank=env.rank,
                                  logprobs=m.logprobs, packed=m.mb, eps_low=cfg.algo.eps_low,
                                  eps_high=cfg.algo.eps_high)
    # staleness is defined only for action tokens with a policy version (text-only logs have none);
    # without any, the step has no staleness metric rather than a made-up 0 or trainer_version + 1
    stale = [trainer_version - v for s in batch.samples for v in s.versioned_policy_version.tolist()]
    if stale:
        metrics["staleness/mean"] = sum(stale) / len(stale)
        metrics["staleness/max"] = float(max(stale))
    metrics["staleness/unversioned_action_tokens"] = float(
        sum(s.num_action_tokens - len(s.versioned_policy_version) for s in batch.samples))
    metrics["staleness/mixed_version_actions"] = float(sum(s.mixed_version_actions for s in batch.samples))
    metrics["reward/mean"] = sum(s.reward for s in batch.samples) / len(batch.samples)
    metrics["data/trajectories"] = float(len(batch.samples))
    metrics["data/action_tokens"] = float(n_tokens)
    for reason, k in batch.skipped.items():
        metrics[f"data/skipped_{reason}"] = float(k)
    state.iteration += 1
    state.cursor = batch.cursor
    return metrics, consumed

