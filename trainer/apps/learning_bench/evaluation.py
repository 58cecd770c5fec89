"""Evaluation of a benchmark policy: its mean reward on a seed's fixed evaluation episodes, the
same for every arm, overall and per difficulty family."""

from __future__ import annotations

import random
from typing import Any

import torch

from trajstore.trainer.apps.envs import (
    FAMILIES,
    TaskName,
    draw_instance,
    draw_instance_from,
    held_out_starts,
    make_episode,
    max_action_tokens,
)
from trajstore.trainer.apps.learning_bench.codec import CharCodec
from trajstore.trainer.apps.learning_bench.sampler import LlamaEngine, new_row, play


def eval_instances(seed: int, per_family: int, *, held_out: int = 0) -> list[tuple[str, int, int]]:
    """The fixed evaluation instances of a seed: `per_family` of each family, the same for every
    arm. With `held_out` > 0 they are drawn from the seed's held-out starts
    (:func:`~trajstore.trainer.apps.envs.held_out_starts`), which training never sees; with 0
    from every instance (so that no evaluation episode repeats a training instance)."""
    rng = random.Random(f"eval-{seed}")
    starts = held_out_starts(seed, held_out) if held_out else None
    out: list[tuple[str, int, int]] = []
    for fam in FAMILIES:
        while sum(1 for f, _, _ in out if f == fam) < per_family:
            inst = draw_instance(rng) if starts is None else draw_instance_from(rng, starts, held_out=True)
            if inst[0] == fam:
                out.append(inst)
    return out


def evaluate(model: torch.nn.Module, task: TaskName, instances: list[tuple[str, int, int]], *, seed: int,
             preferred: str | None) -> dict[str, Any]:
    """Mean reward of the float32 policy (no mismatch, temperature 1) on `instances`, sampled with
    a generator seeded by `seed`, overall and per family."""
    codec = CharCodec()
    rows = [new_row(make_episode(task, inst, preferred=preferred), codec, max_action_tokens(task)) for inst in instances]
    play(LlamaEngine(model), rows, codec, generator=torch.Generator().manual_seed(seed))
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(r.episode.family, []).append(float(r.reward or 0.0))
    allr = [x for v in by.values() for x in v]
    return {"reward": sum(allr) / len(allr), "by_family": {f: sum(v) / len(v) for f, v in by.items()},
            "preferred": preferred}
