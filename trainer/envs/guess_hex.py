"""Guess a hidden hex digit with higher / lower feedback, one token per action (a learning
benchmark environment)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trajstore.trainer.envs.base import HEX, Reply


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
