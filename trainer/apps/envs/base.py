"""What every environment of the learning benchmark shares: the environment's reply to one
action and the episode protocol. Pure Python (no torch): an episode is
``prompt, a_0, o_0, a_1, o_1, ..., a_last`` rendered in the
:mod:`~trajstore.trainer.apps.learning_bench.codec` alphabet (the final verdict is not appended).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


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
    """One task instance: `prompt_id`, its difficulty `family`, the prompt text, then
    :meth:`step` per action; :meth:`expected` is the best next action (the demonstrator's
    target)."""

    prompt_id: str
    family: str

    def prompt(self) -> str: ...

    def expected(self) -> str: ...

    def step(self, action: str) -> Reply: ...
