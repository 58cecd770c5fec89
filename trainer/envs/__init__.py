"""Environments: the demo's chat game (:mod:`.guess_chat`) and the learning benchmark's
tasks (:mod:`.guess_hex`, :mod:`.sequence`; shared types in :mod:`.base`), one file each.
"""

from __future__ import annotations

import random
from typing import Literal

from trajstore.trainer.envs.base import Episode, TaskPhase
from trajstore.trainer.envs.guess_hex import GuessNumberTask
from trajstore.trainer.envs.sequence import SequenceTask

TaskName = Literal["guess", "sequence"]
"""``guess`` = guess the number (:class:`GuessNumberTask`); ``sequence`` = continue an
arithmetic sequence mod N (:class:`SequenceTask`)."""


def sample_episode(task: TaskName, phase: TaskPhase, rng: random.Random, *, modulus: int = 10) -> Episode:
    """A fresh task instance drawn from `phase` with `rng`.

    Raises:
        ValueError: unknown task name or an inconsistent phase.
    """
    if task == "guess":
        return GuessNumberTask(rng.randint(phase.target_low, phase.target_high), max_turns=phase.max_turns)
    if task == "sequence":
        return SequenceTask(rng.randrange(modulus), rng.choice(phase.step_sizes), modulus=modulus,
                            length=phase.length)
    raise ValueError(f"unknown task {task!r}; expected 'guess' or 'sequence'")


def clone_episode(ep: Episode) -> Episode:
    """A fresh copy of an unstarted instance (GRPO groups play the same instance several times)."""
    if isinstance(ep, GuessNumberTask):
        return GuessNumberTask(ep.target, high=ep.high, max_turns=ep.max_turns)
    if isinstance(ep, SequenceTask):
        return SequenceTask(ep.start, ep.step_size, modulus=ep.modulus, length=ep.length)
    raise TypeError(f"cannot clone {type(ep).__name__}")
