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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from trajstore.trainer.apps.envs.chain import FAMILIES, TURNS, ChainTask

TAGS = {"easy": "d", "medium": "e", "hard": "f"}
"""Prompt tag of each family (the mod-10 chain task uses ``a`` / ``b`` / ``c``)."""
STEP = {"easy": 1, "medium": 11, "hard": 37}
"""Common difference of each family's sequence (mod :data:`MODULUS`)."""
MODULUS = 100
MAX_ACTION_TOKENS = 3
"""Token budget of one action: a term's two digits and the end-of-action token."""


def terms(family: str, x0: int) -> frozenset[int]:
    """Every number an episode of `family` from `x0` shows: the prompt's two terms and one per turn."""
    return frozenset((x0 + k * STEP[family]) % MODULUS for k in range(TURNS[family] + 2))


@dataclass
class WideChainTask(ChainTask):
    """One instance: prompt ``S<tag><x0><x1>|`` (each term two digits, ``07``); each action should
    be the next term as two digit tokens then the end-of-action token. The environment answers
    ``R`` / ``W`` and the true term (the context always holds the true sequence) and after the
    family's number of turns (the chain task's :data:`~trajstore.trainer.apps.envs.chain.TURNS`,
    one term each) ends with reward = fraction of terms right, in [0, 1] (credited at the end).
    An action that is not exactly the two digits is wrong.

    Args:
        family: ``easy`` / ``medium`` / ``hard``.
        x0, x1: the first two terms, 0..99; x1 must be x0 + the family's step, mod 100.

    Raises:
        ValueError: an unknown family, a term outside 0..99, or x1 off the family's rule.
    """

    name: ClassVar[str] = "chain100"
    tags: ClassVar[Mapping[str, str]] = TAGS
    steps: ClassVar[Mapping[str, int]] = STEP
    modulus: ClassVar[int] = MODULUS
    digits: ClassVar[int] = 2
    terms_per_action: ClassVar[int] = 1


__all__ = ["FAMILIES", "MAX_ACTION_TOKENS", "MODULUS", "STEP", "TAGS", "TURNS", "WideChainTask", "terms"]
