"""A step's micro-batches: this rank's share of the step batch split under the token bound and
packed (the same count on every rank), behaviour log-probs filled in for text-only data, and
the line each pass over a micro-batch shows the user."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from trajstore.sampling import SamplingArrays
from trajstore.trainer.data import (
    PackedMicroBatch,
    StepBatch,
    TrainSample,
    episode_chains,
    pack,
    split_for_rank,
    token_micro_batches,
)
from trajstore.trainer.loop import distributed as D
from trajstore.trainer.loop.step_stats import TrajectoryRatios
from trajstore.trainer.loop.token_records import TokenCapture
from trajstore.trainer.loop.trainer import Trainer


@dataclass
class Micro:
    """A micro-batch and what the step computed for it. All tensors (1, L) unless said."""

    samples: list[TrainSample]
    mb: PackedMicroBatch
    trajectory: torch.Tensor
    """(L,) int64 on the device: the index in `samples` of each packed position's trajectory."""
    values: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    ratios: TrajectoryRatios | None = None
    """Per-trajectory importance ratios from the policy update (None before it, or in warm-up)."""
    tokens: TokenCapture | None = None
    """Per-token annotations of its recorded trajectories (``--record-tokens``; from the policy update)."""


def trajectory_index(segments: torch.Tensor) -> torch.Tensor:
    """``(L,)`` int64: the trajectory of each position of a packing with offsets `segments`
    (``(n + 1,)`` int64, :attr:`PackedMicroBatch.segments`), on the device of `segments` (the
    CPU for :func:`~trajstore.trainer.data.pack`'s, where this needs no host sync). Computed once per
    micro-batch; as ``(1, L)`` it is also the ``segment_ids`` of the seq-* loss aggregations."""
    return torch.repeat_interleave(torch.arange(len(segments) - 1, device=segments.device), segments.diff())


def prepare(tr: Trainer, batch: StepBatch) -> tuple[list[Micro], torch.Tensor]:
    """This rank's micro-batches (same count on every rank) and the step's global action-token
    count (``()`` float on the device). Every rank holds the whole step batch, so each works out
    every rank's split on the host: no collective decides the count of passes."""
    cfg, env = tr.cfg, tr.env

    def parts_of(rank: int) -> list[list[TrainSample]]:
        local = split_for_rank(batch.samples, rank, env.world_size)
        return token_micro_batches(local, cfg.data.micro_batch_size, cfg.data.micro_batch_tokens)

    parts = parts_of(env.rank)
    # every rank runs the same number of passes (empty micro-batches pad the shorter ranks)
    n_micro = max(1, len(parts), *(len(parts_of(r)) for r in range(env.world_size) if r != env.rank))
    micros = []
    for s in parts + [[] for _ in range(n_micro - len(parts))]:
        mb = pack(s, env.device)
        micros.append(Micro(s, mb, trajectory_index(mb.segments).to(env.device)))
    tr.last_pass = None
    if tr.behaviour is not None:
        todo = [m for m in micros if any(s.needs_behaviour for s in m.samples)]
        for j, m in enumerate(todo):
            start_pass(tr, "initial-policy log-probs", j, len(todo), m)
            with torch.no_grad(), tr.autocast():
                lp, _ = tr.behaviour(m.mb.input_ids, m.mb.position_ids, m.mb.targets, m.mb.sampling)
            need = torch.tensor([s.needs_behaviour for s in m.samples], device=env.device)
            fill = need[m.trajectory].unsqueeze(0) & m.mb.action_mask
            m.mb = m.mb._replace(rollout_logprobs=torch.where(fill, lp.float(), m.mb.rollout_logprobs))
    count = torch.stack([m.mb.action_mask.sum() for m in micros]).sum().float()
    return micros, D.all_reduce_sum(count, env)


def start_pass(tr: Trainer, what: str, j: int, n: int, m: Micro) -> None:
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


def chain_groups(micros: list[Micro]) -> list[list[int]]:
    """Indices of `micros` in groups whose advantages are computed together: micro-batches that
    hold parts of one chain (:func:`~trajstore.trainer.data.episode_chains`: an episode's parts
    joined by a context rewrite or a continuation) are in one group, every other micro-batch alone
    (the usual case: one group per micro-batch). Groups in micro-batch order."""
    where = [j for j, m in enumerate(micros) for _ in m.samples]
    parent = list(range(len(micros)))

    def root(j: int) -> int:
        while parent[j] != j:
            parent[j] = parent[parent[j]]
            j = parent[j]
        return j

    for chain in episode_chains([s for m in micros for s in m.samples]):
        for i in chain[1:]:
            parent[root(where[i])] = root(where[chain[0]])
    groups: dict[int, list[int]] = {}
    for j in range(len(micros)):
        groups.setdefault(root(j), []).append(j)
    return sorted(groups.values())


def merged(micros: list[Micro]) -> tuple[PackedMicroBatch, list[TrainSample], torch.Tensor | None]:
    """Several micro-batches as one packing (their rows one after the other), their samples and
    values, for an estimator that must see a chain whole; :func:`unmerged` cuts its results back."""
    def cat(parts: list) -> Any:  # a (1, L) tensor, or the sampling parameters' (1, L) tensors
        if isinstance(parts[0], SamplingArrays):
            return SamplingArrays(*(torch.cat(xs, dim=1) for xs in zip(*parts)))
        return torch.cat(parts, dim=1)

    fields = [cat([getattr(m.mb, f) for m in micros]) for f in PackedMicroBatch._fields[:-1]]
    offsets = [0]
    for m in micros:
        offsets += (m.mb.segments[1:] + offsets[-1]).tolist()
    values = None if micros[0].values is None else torch.cat([m.values for m in micros], dim=1)
    return (PackedMicroBatch(*fields, torch.tensor(offsets, dtype=torch.int64)),
            [s for m in micros for s in m.samples], values)


def unmerged(x: torch.Tensor, micros: list[Micro]) -> list[torch.Tensor]:
    """A ``(1, L)`` result over :func:`merged` micro-batches, cut into each one's ``(1, L_j)``."""
    return list(torch.split(x, [int(m.mb.input_ids.shape[1]) for m in micros], dim=1))
