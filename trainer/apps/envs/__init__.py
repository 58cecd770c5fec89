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
           "make_episode", "max_action_tokens"]
