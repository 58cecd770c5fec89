"""Guess-the-number as a chat environment for real language models (the demo's task).

The environment answers every guess with higher / lower until the number is found or the
turns run out; :mod:`trajstore.trainer.apps.rollout_worker` plays it with a policy and records each
episode through the writer SDK.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from trajstore.chat_template import Message

_INTEGER = re.compile(r"-?\d+")


@dataclass(frozen=True)
class EnvReply:
    """What the environment says after one action.

    Attributes:
        text: the reply shown to the model as the next user message ("Higher.", ...); the final
            verdict when `done` (it is then not appended to the trajectory).
        done: the episode is over (number found or turns used up).
        reward: the episode reward when `done` (see :class:`GuessNumberEnv`), else None.
        guess: the integer parsed from the action, None when there was none.
    """

    text: str
    done: bool
    reward: float | None
    guess: int | None


@dataclass
class GuessNumberEnv:
    """Guess an integer in [low, high] in at most `max_turns` guesses; the environment answers
    each guess with "Higher." / "Lower." / "Correct!".

    The first integer in the model's reply is its guess. A reply without one, or with one
    outside [low, high], is answered with a reminder of the rules and uses up the turn.

    Reward (in [0, 1], credited at the end of the episode):
        * 1.0 when the number is found;
        * otherwise a shaped partial reward for getting close: ``0.5 * (1 - d / (high - low))``
          with d the smallest |guess - target| over the valid guesses, and 0.0 when no guess was
          valid. E.g. low=1, high=20, target 7, best guess 11: 0.5 * (1 - 4/19) = 0.3947.

    Args:
        target: the hidden number (drawn with :meth:`sample` for random tasks).
        low, high: the inclusive range told to the model.
        max_turns: guesses allowed (>= 3 so that feedback matters).
    """

    target: int
    low: int = 1
    high: int = 20
    max_turns: int = 4
    guesses: list[int | None] = field(default_factory=list)
    done: bool = False

    def __post_init__(self) -> None:
        if self.high <= self.low:
            raise ValueError(f"GuessNumberEnv needs low < high, got [{self.low}, {self.high}]")
        if not self.low <= self.target <= self.high:
            raise ValueError(f"target {self.target} is outside [{self.low}, {self.high}]")
        if self.max_turns < 3:
            raise ValueError(f"max_turns must be >= 3 (a multi-turn task), got {self.max_turns}")

    @classmethod
    def sample(cls, rng: random.Random, *, low: int = 1, high: int = 20, max_turns: int = 4) -> GuessNumberEnv:
        """A task with a target drawn uniformly from [low, high]."""
        return cls(target=rng.randint(low, high), low=low, high=high, max_turns=max_turns)

    @property
    def prompt_id(self) -> str:
        """Identifies the task: ``guess-<low>-<high>-<target>``."""
        return f"guess-{self.low}-{self.high}-{self.target}"

    def reset(self) -> list[Message]:
        """The opening messages (system + user) and a fresh episode."""
        self.guesses, self.done = [], False
        return [
            {"role": "system", "content": "You are playing a number guessing game. Answer with a single "
                                          "whole number and nothing else."},
            {"role": "user", "content": f"I am thinking of a whole number between {self.low} and {self.high}. "
                                        f"You have {self.max_turns} guesses. After each guess I will say "
                                        "Higher or Lower. What is your first guess?"},
        ]

    def step(self, action_text: str) -> EnvReply:
        """Answer one action (the model's reply text).

        Raises:
            RuntimeError: the episode is already over.
        """
        if self.done:
            raise RuntimeError("step() after the episode ended; call reset()")
        m = _INTEGER.search(action_text)
        guess = int(m.group()) if m else None
        valid = guess is not None and self.low <= guess <= self.high
        self.guesses.append(guess if valid else None)
        left = self.max_turns - len(self.guesses)
        if valid and guess == self.target:
            self.done = True
            return EnvReply(f"Correct! The number was {self.target}.", True, 1.0, guess)
        if left == 0:
            self.done = True
            return EnvReply(f"Out of guesses. The number was {self.target}.", True, self.partial_reward(), guess)
        if guess is None:
            text = f"I did not see a number. Reply with one whole number between {self.low} and {self.high}."
        elif not valid:
            text = f"{guess} is not between {self.low} and {self.high}. Guess again."
        elif guess < self.target:
            text = f"Higher. {left} guess{'es' if left > 1 else ''} left."
        else:
            text = f"Lower. {left} guess{'es' if left > 1 else ''} left."
        return EnvReply(text, False, None, guess)

    def partial_reward(self) -> float:
        """The shaped reward of an unsolved episode (see the class docstring)."""
        valid = [g for g in self.guesses if g is not None]
        if not valid:
            return 0.0
        d = min(abs(g - self.target) for g in valid)
        return 0.5 * (1.0 - d / (self.high - self.low))


@dataclass(frozen=True)
class EpisodeSummary:
    """What one episode produced (for progress output and the demo's summary).

    Attributes:
        trajectory_id, prompt_id: as stored.
        reward: the environment's reward in [0, 1].
        solved: the number was found.
        num_actions: model calls in the episode.
        policy_versions: version used by each action, in order.
        num_tokens: tokens in the trajectory.
        seconds: wall time of the episode (s).
    """

    trajectory_id: str
    prompt_id: str
    reward: float
    solved: bool
    num_actions: int
    policy_versions: list[int]
    num_tokens: int
    seconds: float
