"""Continue an arithmetic sequence mod N, one term per turn (a learning benchmark environment)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trajstore.trainer.envs.base import Reply


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
