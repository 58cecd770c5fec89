"""Environments, one file each: the demo's chat game (:mod:`.guess_chat`) and the learning
benchmark's tasks, :mod:`.chain` (multi-token, multi-turn, three difficulty families) and
:mod:`.pref_shift` (the chain task under a reward preference that shifts in stages); shared
types in :mod:`.base`.
"""

from __future__ import annotations

import random
from typing import Literal

from trajstore.trainer.apps.envs.base import Episode, Reply
from trajstore.trainer.apps.envs.chain import FAMILIES, STEP, ChainTask
from trajstore.trainer.apps.envs.chain import MAX_ACTION_TOKENS as CHAIN_ACTION_TOKENS
from trajstore.trainer.apps.envs.pref_shift import MAX_ACTION_TOKENS as PREF_ACTION_TOKENS
from trajstore.trainer.apps.envs.pref_shift import STYLES, PrefChainTask

TaskName = Literal["chain", "pref-shift"]
"""``chain`` = :class:`ChainTask`; ``pref-shift`` = :class:`PrefChainTask` with a staged preference."""


def draw_instance(rng: random.Random) -> tuple[str, int, int]:
    """(family, x0, x1) of a fresh chain instance: family uniform over :data:`FAMILIES`, x0 a
    uniform digit, x1 = x0 + the family's step mod 10."""
    family = rng.choice(FAMILIES)
    x0 = rng.randrange(10)
    return family, x0, (x0 + STEP[family]) % 10


def held_out_starts(seed: int, per_family: int) -> dict[str, frozenset[int]]:
    """The first terms ``x0`` held out of training for `seed`: `per_family` of the 10 digits per
    family, drawn from a stream of their own (``random.Random(f"held-out-{seed}")``). There are
    30 instances in all (3 families x 10 digits); the learning benchmark trains on the others and
    evaluates on these. ``per_family = 0``: nothing held out.

    Raises:
        ValueError: `per_family` outside 0..9 (a family needs at least one training instance).
    """
    if not 0 <= per_family <= 9:
        raise ValueError(f"held-out starts per family must be 0..9, got {per_family}")
    rng = random.Random(f"held-out-{seed}")
    return {f: frozenset(rng.sample(range(10), per_family)) for f in FAMILIES}


def draw_instance_from(rng: random.Random, starts: dict[str, frozenset[int]], *, held_out: bool) -> tuple[str, int, int]:
    """An instance as :func:`draw_instance` (family uniform), with ``x0`` uniform over the
    family's held-out starts (`held_out` True) or over the others (False). With nothing held out
    and `held_out` False this is :func:`draw_instance`'s distribution.

    Raises:
        ValueError: `held_out` True and a family has no held-out start.
    """
    family = rng.choice(FAMILIES)
    pool = sorted(starts[family]) if held_out else [x for x in range(10) if x not in starts[family]]
    if not pool:
        raise ValueError(f"no held-out start for family {family!r}")
    x0 = rng.choice(pool)
    return family, x0, (x0 + STEP[family]) % 10


def make_episode(task: TaskName, instance: tuple[str, int, int], *, preferred: str | None = None) -> Episode:
    """A fresh, unstarted episode of `task` for `instance` (from :func:`draw_instance`);
    `preferred` is the style the ``pref-shift`` reward prefers.

    Raises:
        ValueError: unknown task, or ``pref-shift`` without a preferred style.
    """
    if task == "chain":
        return ChainTask(*instance)
    if task == "pref-shift":
        if preferred is None:
            raise ValueError("the pref-shift task needs the preferred style of the stage in force")
        return PrefChainTask(*instance, preferred=preferred)
    raise ValueError(f"unknown task {task!r}; expected 'chain' or 'pref-shift'")


def max_action_tokens(task: TaskName) -> int:
    """Token budget of one action of `task` (its characters and the end-of-action token)."""
    return {"chain": CHAIN_ACTION_TOKENS, "pref-shift": PREF_ACTION_TOKENS}[task]


__all__ = ["FAMILIES", "STYLES", "ChainTask", "Episode", "PrefChainTask", "Reply", "TaskName", "draw_instance",
           "draw_instance_from", "held_out_starts", "make_episode", "max_action_tokens"]
