"""Evaluation of a benchmark policy: its mean reward on a seed's fixed evaluation episodes, the
same for every arm, overall and per difficulty family."""

from __future__ import annotations

import random
from typing import Any

import torch

from trajstore.trainer.apps.learning_bench.codec import CharCodec
from trajstore.trainer.apps.learning_bench.sampler import LlamaEngine, new_row, play
from trajstore.trainer.apps.learning_bench.tasks import FAMILIES, draw, make_episode, max_action_tokens, split


def eval_instances(seed: int, per_family: int, *, held_out: int = 0, task: str = "chain") -> list[tuple[str, int, int]]:
    """The fixed evaluation instances of a seed: `per_family` of each family, the same for every
    arm. With `held_out` > 0 they are drawn from the seed's held-out instances
    (:func:`~trajstore.trainer.apps.learning_bench.tasks.split`), which training never draws; with 0
    from every instance. ``chain`` and ``pref-shift`` share their instances (and these draws)."""
    rng = random.Random(f"eval-{seed}")
    sp = split("chain" if task == "pref-shift" else task, seed, held_out)
    out: list[tuple[str, int, int]] = []
    for fam in FAMILIES:
        while sum(1 for f, _, _ in out if f == fam) < per_family:
            inst = draw(rng, sp, held_out=bool(held_out))
            if inst[0] == fam:
                out.append(inst)
    return out


def evaluate(model: torch.nn.Module, task: str, instances: list[tuple[str, int, int]], *, seed: int,
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
