"""Continue a digit sequence whose rule depends on the instance, two terms per action over
several turns (a learning benchmark environment: multi-token actions, multi-turn credit
assignment, heterogeneous difficulty).

Three families, named by a tag in the prompt, each with its own step and number of turns. How
hard a family is comes from the warm start: the noisy demonstrator the policy is first fitted to
is right 90 % / 60 % / 35 % of the time on easy / medium / hard
(:data:`trajstore.trainer.apps.learning_bench.warmstart.DEMO_ACCURACY`), so the expected reward
differs strongly between instances and a single global baseline fits none of them well:

========  =====  ========================  =====
family    tag    rule (mod 10)             turns
========  =====  ========================  =====
easy      ``a``  ``x[n+1] = x[n] + 1``       2
medium    ``b``  ``x[n+1] = x[n] + 3``       3
hard      ``c``  ``x[n+1] = x[n] + 7``       4
========  =====  ========================  =====
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from trajstore.trainer.apps.envs.base import Reply

FAMILIES = ("easy", "medium", "hard")
"""Difficulty groups, in order."""
TAGS = {"easy": "a", "medium": "b", "hard": "c"}
"""Prompt tag of each family."""
TURNS = {"easy": 2, "medium": 3, "hard": 4}
"""Actions (turns) per episode of each family."""
STEP = {"easy": 1, "medium": 3, "hard": 7}
"""Common difference of each family's sequence (mod 10)."""
TERMS_PER_ACTION = 2
"""Digits an action must contain (then the end-of-action token)."""
MAX_ACTION_TOKENS = TERMS_PER_ACTION + 1
"""Token budget of one action: the digits and the end-of-action token."""


@dataclass
class ChainTask:
    """One instance: prompt ``S<tag><x0><x1>|``; each action should be the next two terms as two
    digit tokens then the end-of-action token (the rollout stops at it or after
    :data:`MAX_ACTION_TOKENS`). The environment grades each term, answers ``R`` / ``W`` per term
    followed by the two true terms (so the context always holds the true sequence), and after
    the family's number of turns ends with reward = fraction of terms right, in [0, 1] (credited
    at the end). An action that is not exactly two digits gets both of its terms wrong.

    Args:
        family: ``easy`` / ``medium`` / ``hard`` (:data:`FAMILIES`).
        x0, x1: the first two terms, digits; x1 must be x0 + the family's step, mod 10.
    """

    family: str
    x0: int
    x1: int
    terms: list[int] = field(default_factory=list)
    right: int = 0
    turn: int = 0
    prompt_id: str = field(init=False)

    # The rule's numbers; a variant of the task (wide_chain's mod-100 one) sets its own.
    name: ClassVar[str] = "chain"
    """Prefix of the prompt id."""
    tags: ClassVar[Mapping[str, str]] = TAGS
    steps: ClassVar[Mapping[str, int]] = STEP
    modulus: ClassVar[int] = 10
    digits: ClassVar[int] = 1
    """Digits per term in the prompt, the actions and the feedback."""
    terms_per_action: ClassVar[int] = TERMS_PER_ACTION

    def __post_init__(self) -> None:
        who, top = type(self).__name__, self.modulus - 1
        if self.family not in FAMILIES:
            raise ValueError(f"{who}: unknown family {self.family!r}; expected one of {FAMILIES}")
        if not (0 <= self.x0 <= top and 0 <= self.x1 <= top):
            raise ValueError(f"{who}: x0, x1 must be 0..{top}, got {self.x0}, {self.x1}")
        step = self.steps[self.family]
        if self.x1 != (self.x0 + step) % self.modulus:
            raise ValueError(f"{who}: a {self.family} instance needs x1 = x0 + {step} mod {self.modulus}, "
                             f"got {self.x0}, {self.x1}")
        self.terms = [self.x0, self.x1]
        self.prompt_id = f"{self.name}-{self.family}-{self._text(self.x0)}{self._text(self.x1)}"

    def _text(self, term: int) -> str:
        return f"{term:0{self.digits}d}"

    def _split(self, digits: str) -> list[str]:
        """`digits` cut into terms (``digits`` characters each)."""
        return [digits[i:i + self.digits] for i in range(0, len(digits), self.digits)]

    @property
    def turns(self) -> int:
        """Actions in this episode."""
        return TURNS[self.family]

    @property
    def total_terms(self) -> int:
        return self.turns * self.terms_per_action

    def prompt(self) -> str:
        return f"S{self.tags[self.family]}{self._text(self.x0)}{self._text(self.x1)}|"

    def expected(self) -> str:
        """The correct next action's digits (what a perfect policy writes before the end token)."""
        t = list(self.terms)
        out = ""
        for _ in range(self.terms_per_action):
            t.append((t[-1] + self.steps[self.family]) % self.modulus)
            out += self._text(t[-1])
        return out

    def grade(self, action: str) -> list[bool]:
        """Per-term correctness of `action` (its digits, end token stripped) without stepping; an
        action that is not exactly the expected number of digits gets every term wrong."""
        want = self.expected()
        if len(action) != len(want) or not action.isdigit():
            return [False] * self.terms_per_action
        return [a == w for a, w in zip(self._split(action), self._split(want))]

    def step(self, action: str) -> Reply:
        """Grade `action` (the digits, without the end-of-action token) and move on one turn."""
        marks = self.grade(action)
        want = self.expected()
        self.right += sum(marks)
        self.terms += [int(w) for w in self._split(want)]
        self.turn += 1
        if self.turn >= self.turns:
            return Reply("", True, self.right / self.total_terms, all(marks))
        return Reply("".join("R" if m else "W" for m in marks) + want, False, None, all(marks))
