"""The learning benchmark's tasks and their split into training and held-out instances: the mod-10
``chain`` and ``pref-shift`` tasks (:mod:`trajstore.trainer.apps.envs`) and the mod-100 ``chain100``
(:mod:`.wide_chain`).

An instance is ``(family, x0, x1)``. A :class:`Split` lists, per family, the first terms training
(RL and, when asked, the warm start) may draw and those the evaluation draws:

* ``chain`` / ``pref-shift``: ``per_family`` of the 10 first terms held out
  (:func:`~trajstore.trainer.apps.envs.held_out_starts`). Every instance of a family is a phase of
  the same 10-cycle, so training instances pass through the held-out numbers: held out by prompt,
  not by content.
* ``chain100``: ``per_family`` of the 100 first terms held out, and training keeps only the first
  terms whose numbers (:func:`~.wide_chain.terms`) meet no held-out instance's: no held-out number
  of a family is ever shown, prompted or graded, in a training episode of that family.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from trajstore.trainer.apps import envs
from trajstore.trainer.apps.envs import Episode
from trajstore.trainer.apps.envs.chain import STEP, TURNS
from trajstore.trainer.apps.learning_bench import wide_chain

BenchTask = Literal["chain", "pref-shift", "chain100"]
"""Tasks a run may be on."""
CHAIN_TASKS: tuple[str, ...] = ("chain", "chain100")
"""Tasks the chain arms (and the chain claims' ``auc``) may run on."""
FAMILIES = envs.FAMILIES
"""Difficulty families, the same names in every task."""


@dataclass(frozen=True)
class Split:
    """Per family, the first terms training may draw (`train`) and those held out for the evaluation
    (`held`, empty: nothing held out, the evaluation draws from every instance)."""

    task: str
    train: dict[str, tuple[int, ...]]
    held: dict[str, tuple[int, ...]]


def _step(task: str, family: str, x0: int) -> int:
    if task == "chain100":
        return (x0 + wide_chain.STEP[family]) % wide_chain.MODULUS
    return (x0 + STEP[family]) % 10


def split(task: str, seed: int, per_family: int) -> Split:
    """The seed's split of `task` (module docstring); `per_family` = 0 holds nothing out.

    Raises:
        ValueError: `per_family` out of range (chain tasks: 0..9; chain100: 0..20), or an unknown task.
    """
    if task in ("chain", "pref-shift"):
        held = envs.held_out_starts(seed, per_family) if per_family else {f: frozenset() for f in FAMILIES}
        return Split(task, {f: tuple(x for x in range(10) if x not in held[f]) for f in FAMILIES},
                     {f: tuple(sorted(held[f])) for f in FAMILIES})
    if task != "chain100":
        raise ValueError(f"unknown task {task!r}; expected chain, pref-shift or chain100")
    if not 0 <= per_family <= 20:
        raise ValueError(f"chain100: held-out first terms per family must be 0..20, got {per_family}")
    rng = random.Random(f"held-out-chain100-{seed}")
    train, held = {}, {}
    for f in FAMILIES:
        held[f] = tuple(sorted(rng.sample(range(wide_chain.MODULUS), per_family)))
        shown = frozenset().union(*(wide_chain.terms(f, h) for h in held[f]))
        train[f] = tuple(x for x in range(wide_chain.MODULUS) if not wide_chain.terms(f, x) & shown)
    return Split(task, train, held)


def draw(rng: random.Random, sp: Split, *, held_out: bool) -> tuple[str, int, int]:
    """An instance: family uniform, first term uniform over the family's held-out (`held_out`) or
    training terms. On the chain tasks this is the draw of :func:`~trajstore.trainer.apps.envs.draw_instance_from`
    (the same random stream), so runs before ``chain100`` existed reproduce.

    Raises:
        ValueError: `held_out` and a family holds nothing out."""
    family = rng.choice(FAMILIES)
    pool = sp.held[family] if held_out else sp.train[family]
    if not pool:
        raise ValueError(f"no {'held-out' if held_out else 'training'} first term for family {family!r}")
    x0 = rng.choice(pool)
    return family, x0, _step(sp.task, family, x0)


def turns(task: str, family: str) -> int:
    """Actions per episode of `family` on `task`."""
    return wide_chain.TURNS[family] if task == "chain100" else TURNS[family]


def make_episode(task: str, instance: tuple[str, int, int], *, preferred: str | None = None) -> Episode:
    """A fresh episode of `task` (``pref-shift`` needs `preferred`; see envs.make_episode)."""
    if task == "chain100":
        return wide_chain.WideChainTask(*instance)
    return envs.make_episode(task, instance, preferred=preferred)  # type: ignore[arg-type]


def max_action_tokens(task: str) -> int:
    """Token budget of one action of `task`."""
    return wide_chain.MAX_ACTION_TOKENS if task == "chain100" else envs.max_action_tokens(task)  # type: ignore[arg-type]


__all__ = ["CHAIN_TASKS", "FAMILIES", "BenchTask", "Split", "draw", "make_episode", "max_action_tokens", "split",
           "turns"]
