"""What every environment of the learning benchmark shares: the environment's reply to one
action, the episode protocol and how a phase of a run draws its instances. Pure Python (no
torch): an episode is ``prompt, a_0, o_0, a_1, o_1, ..., a_last`` rendered in the
:mod:`~trajstore.trainer.learning_bench.codec` alphabet (the final verdict is not appended).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

HEX = "0123456789abcdef"


@dataclass(frozen=True)
class Reply:
    """The environment's answer to one action.

    Attributes:
        observation: characters appended to the trajectory as an observation span ('' when done).
        done: the episode is over.
        reward: the episode reward in [0, 1] when `done`, else None.
        correct: this action was right (a found number, a right term); False for invalid actions.
    """

    observation: str
    done: bool
    reward: float | None
    correct: bool


class Episode(Protocol):
    """One task instance: `prompt_id`, the prompt text, then :meth:`step` per action."""

    prompt_id: str

    def prompt(self) -> str: ...

    def step(self, action: str) -> Reply: ...


@dataclass(frozen=True)
class TaskPhase:
    """How instances are drawn in one phase of a run (a reward shift starts a new phase).

    Attributes:
        target_low, target_high: guess: the hidden number is uniform in this inclusive range.
        max_turns: guess: actions allowed.
        length: sequence: terms to produce.
        step_sizes: sequence: common differences drawn uniformly.
    """

    target_low: int = 0
    target_high: int = 7
    max_turns: int = 7
    length: int = 4
    step_sizes: tuple[int, ...] = (1, 2)
