"""The benchmark's multi-turn tasks, rendered in the :mod:`~trajstore.bench_learning.codec`
alphabet. Every action is one token; the environment answers with observation tokens. Pure
Python (no torch): an episode is ``prompt, a_0, o_0, a_1, o_1, ..., a_last`` (the final
verdict is not appended, as in :class:`trajstore.rollout.GuessNumberEnv`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal, Protocol

TaskName = Literal["guess", "sequence"]
"""``guess`` = guess the number (:class:`GuessNumberTask`); ``sequence`` = continue an
arithmetic sequence mod N (:class:`SequenceTask`)."""

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


@dataclass
class GuessNumberTask:
    """Guess a hidden number written as one hex digit in ``[0, high]``.

    Prompt ``G|``. Each action is one token: a hex digit is a guess; anything else (or a digit
    above `high`) is invalid and answered with ``?``. A wrong guess is answered ``<`` (the
    target is lower) or ``>`` (higher). The episode ends when the number is found or after
    `max_turns` actions. Reward (at the end): 1.0 if found, else 0.0.

    The value of a state depends on the interval still open (which the feedback so far
    implies), which is what the critic has to learn.

    Args:
        target: the hidden number, in [0, high].
        high: largest valid guess (<= 15).
        max_turns: actions allowed (>= 1).
    """

    target: int
    high: int = 15
    max_turns: int = 7
    turns: int = 0
    prompt_id: str = field(init=False)

    def __post_init__(self) -> None:
        if not 0 < self.high <= 15:
            raise ValueError(f"GuessNumberTask: high must be in [1, 15], got {self.high}")
        if not 0 <= self.target <= self.high:
            raise ValueError(f"GuessNumberTask: target {self.target} is outside [0, {self.high}]")
        if self.max_turns < 1:
            raise ValueError(f"GuessNumberTask: max_turns must be >= 1, got {self.max_turns}")
        self.prompt_id = f"guess-{self.target}"

    def prompt(self) -> str:
        return "G|"

    def step(self, action: str) -> Reply:
        self.turns += 1
        last = self.turns >= self.max_turns
        if len(action) != 1 or action not in HEX[: self.high + 1]:
            return Reply("", True, 0.0, False) if last else Reply("?", False, None, False)
        guess = HEX.index(action)
        if guess == self.target:
            return Reply("", True, 1.0, True)
        if last:
            return Reply("", True, 0.0, False)
        return Reply("<" if self.target < guess else ">", False, None, False)


@dataclass
class SequenceTask:
    """Continue an arithmetic sequence mod `modulus`, one term per turn.

    Prompt ``S x0 x1 |`` (two terms, digits). Each action is one token, the next term. The
    environment answers ``R`` (right) or ``W`` (wrong) followed by the true term, so the
    context always holds the true sequence. After `length` terms the episode ends with reward
    = fraction of terms right, in [0, 1].

    Args:
        start: first term x0, in [0, modulus).
        step: common difference d (x_{n+1} = x_n + d mod modulus).
        modulus: N <= 10 (terms are single digits).
        length: terms to produce (turns, >= 1); the knob for length-adaptive lambda.
    """

    start: int
    step_size: int
    modulus: int = 10
    length: int = 4
    terms: list[int] = field(default_factory=list)
    right: int = 0
    prompt_id: str = field(init=False)

    def __post_init__(self) -> None:
        if not 2 <= self.modulus <= 10:
            raise ValueError(f"SequenceTask: modulus must be in [2, 10], got {self.modulus}")
        if self.length < 1:
            raise ValueError(f"SequenceTask: length must be >= 1, got {self.length}")
        self.terms = [self.start % self.modulus, (self.start + self.step_size) % self.modulus]
        self.prompt_id = f"seq-{self.terms[0]}-{self.terms[1]}-{self.length}"

    def prompt(self) -> str:
        return f"S{self.terms[0]}{self.terms[1]}|"

    def step(self, action: str) -> Reply:
        true = (self.terms[-1] + self.step_size) % self.modulus
        ok = action == str(true)
        self.right += ok
        self.terms.append(true)
        produced = len(self.terms) - 2
        if produced >= self.length:
            return Reply("", True, self.right / self.length, ok)
        return Reply(("R" if ok else "W") + str(true), False, None, ok)


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
