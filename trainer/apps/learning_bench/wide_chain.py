"""The ``chain100`` task: the chain task on two-digit numbers mod 100, so that instances can be held
out for real (a learning benchmark environment).

The mod-10 chain task has one cycle per family: every instance of a family is a phase of the same
ten terms, so a "held-out" first term is passed through by every training instance. Here the
numbers run mod 100 and an instance covers only 4-6 of them, so whole instances can be kept away
from training: :func:`~trajstore.trainer.apps.learning_bench.tasks.split` holds out instances
whose numbers (in their family) no training or warm-start episode ever shows. What stays shared is
the per-digit rule (the units digit steps, the tens digit follows with its carry), which is what
a policy must learn for the held-out evaluation to move.

========  =====  =================================  =====
family    tag    rule (mod 100)                     turns
========  =====  =================================  =====
easy      ``d``  ``x[n+1] = x[n] + 1``                2
medium    ``e``  ``x[n+1] = x[n] + 11``               3
hard      ``f``  ``x[n+1] = x[n] + 37``               4
========  =====  =================================  =====
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trajstore.trainer.apps.envs.base import Reply

FAMILIES = ("easy", "medium", "hard")
TAGS = {"easy": "d", "medium": "e", "hard": "f"}
"""Prompt tag of each family (the mod-10 chain task uses ``a`` / ``b`` / ``c``)."""
STEP = {"easy": 1, "medium": 11, "hard": 37}
"""Common difference of each family's sequence (mod :data:`MODULUS`)."""
TURNS = {"easy": 2, "medium": 3, "hard": 4}
"""Actions (turns) per episode of each family: one term each."""
MODULUS = 100
MAX_ACTION_TOKENS = 3
"""Token budget of one action: a term's two digits and the end-of-action token."""


def terms(family: str, x0: int) -> frozenset[int]:
    """Every number an episode of `family` from `x0` shows: the prompt's two terms and one per turn."""
    return frozenset((x0 + k * STEP[family]) % MODULUS for k in range(TURNS[family] + 2))


@dataclass
class WideChainTask:
    """One instance: prompt ``S<tag><x0><x1>|`` (each term two digits, ``07``); each action should
    be the next term as two digit tokens then the end-of-action token. The environment answers
    ``R`` / ``W`` and the true term (the context always holds the true sequence) and after the
    family's number of turns ends with reward = fraction of terms right, in [0, 1] (credited at
    the end). An action that is not exactly the two digits is wrong.

    Args:
        family: ``easy`` / ``medium`` / ``hard``.
        x0, x1: the first two terms, 0..99; x1 must be x0 + the family's step, mod 100.

    Raises:
        ValueError: an unknown family, a term outside 0..99, or x1 off the family's rule.
    """

    family: str
    x0: int
    x1: int
    seq: list[int] = field(default_factory=list)
    right: int = 0
    turn: int = 0
    prompt_id: str = field(init=False)

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"WideChainTask: unknown family {self.family!r}; expected one of {FAMILIES}")
        if not (0 <= self.x0 < MODULUS and 0 <= self.x1 < MODULUS):
            raise ValueError(f"WideChainTask: x0, x1 must be 0..99, got {self.x0}, {self.x1}")
        if self.x1 != (self.x0 + STEP[self.family]) % MODULUS:
            raise ValueError(f"WideChainTask: a {self.family} instance needs x1 = x0 + {STEP[self.family]} mod 100, "
                             f"got {self.x0}, {self.x1}")
        self.seq = [self.x0, self.x1]
        self.prompt_id = f"chain100-{self.family}-{self.x0:02d}{self.x1:02d}"

    @property
    def turns(self) -> int:
        return TURNS[self.family]

    def prompt(self) -> str:
        return f"S{TAGS[self.family]}{self.x0:02d}{self.x1:02d}|"

    def expected(self) -> str:
        """The correct next action's digits: the next term, two digits."""
        return f"{(self.seq[-1] + STEP[self.family]) % MODULUS:02d}"

    def step(self, action: str) -> Reply:
        """Grade `action` (its digits, end token stripped) and move on one turn."""
        want = self.expected()
        ok = action == want
        self.right += ok
        self.seq.append(int(want))
        self.turn += 1
        if self.turn >= self.turns:
            return Reply("", True, self.right / self.turns, ok)
        return Reply(("R" if ok else "W") + want, False, None, ok)


__all__ = ["FAMILIES", "MAX_ACTION_TOKENS", "MODULUS", "STEP", "TAGS", "TURNS", "WideChainTask", "terms"]
