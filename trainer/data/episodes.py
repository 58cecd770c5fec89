"""Episodes stored as several linked trajectories (schema v3 lineage: ``episode_id``,
``parent_trajectory_id``, ``link_kind``), as the trainer credits them: the parts of one line of
context form a chain, trained as one trajectory would be.

The rule (docs/sao.md mechanism 4, the skip-observation GAE of arXiv 2607.07508, extended
across parts):

* A part's **successor** is a trajectory of the same batch whose parent is that part and whose
  ``link_kind`` is ``context_rewrite`` or ``continuation`` (:data:`CHAIN_LINKS`): the same agent
  going on after its context was rewritten or after an interruption. A ``subagent`` or ``fork``
  child is a lineage of its own, never a successor. A part with several successors in a batch
  chains to the first one in arrival order; the others start chains of their own.
* A **chain** is a part without a predecessor in the batch followed by its successors. The
  skip-observation GAE runs over the chain's action tokens in order, as over one trajectory: the
  last action of one part bootstraps from the value of the first action of the next part
  (``delta = r + gamma * V(next part's first action) - V(last action)``, and the advantage
  recursion continues through it), and the length-adaptive lambda counts the chain's action
  tokens.
* **Credit once**: the episode's reward lands on the final action of each terminal lineage (a
  chain's last part: no successor), and on no other part. So a parent and its sub-agent are each
  credited (each is a terminal lineage); the parts before a context rewrite are credited only
  through the chain. Trajectory-level baselines (GRPO, running mean) take one reward per chain and
  give each part its chain's advantage.
* **Abandoned branches earn nothing**: a retry or a resample stores the attempt the harness threw
  away as its own lineage (``abandoned = true``, the parent of the ``fork`` that replaced it:
  ``traj proxy`` marks it, :mod:`trajstore.proxy.lineage`). A chain whose last part is abandoned gets no
  episode reward (:func:`credited_reward`): under the skip-observation GAE its return is 0 (its
  tokens still train, against the critic's values), and the trajectory-level baselines leave it out
  of their statistics and give it advantage 0 (a 0 in a GRPO group would raise every kept
  rollout's advantage). So the branch the harness finished is credited once, and a retried
  episode no more often than one without retries.
* **Batches**: a chain is only joined within one step batch. The stream never ends a batch
  between a part and a successor that arrives right after it (up to :data:`SUCCESSORS_OVER_BATCH`
  trajectories over ``batch_size``, and never over ``max_batch_tokens``), and a data-parallel rank
  gets whole chains. A successor that arrives in a later batch starts a chain there, and the part
  before it, alone in its batch, was credited as terminal (its own reward, nothing after it):
  the episode is then credited once per batch it spans, as without the rule.

A child's first ``fork_point`` tokens are its parent's (the proxy and ingest store them as the
child's prompt): the stream never trains them in the child (:func:`shared_prefix_end`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol

CHAIN_LINKS: Final[frozenset[str]] = frozenset({"context_rewrite", "continuation"})
"""``link_kind`` values that make a child the successor of its parent in a chain."""

SUCCESSORS_OVER_BATCH: Final[int] = 64
"""Most trajectories a step batch takes over ``batch_size`` to keep successors with their parts."""


class Linked(Protocol):
    """What the rule reads of a sample (:class:`~trajstore.trainer.data.samples.TrainSample`)."""

    trajectory_id: str
    parent_trajectory_id: str | None
    link_kind: str | None
    abandoned: bool | None


class Rewarded(Linked, Protocol):
    reward: float


def credited_reward(s: Rewarded) -> float:
    """The episode reward `s` earns at its last action when it ends its chain: its stored
    ``reward``, or 0.0 for an abandoned branch (see the module docstring)."""
    return 0.0 if s.abandoned else s.reward


def is_successor_of(s: Linked, ids: set[str] | dict[str, int]) -> bool:
    """True when `s` continues (context rewrite, continuation) one of the parts `ids`."""
    return s.link_kind in CHAIN_LINKS and s.parent_trajectory_id is not None and s.parent_trajectory_id in ids


def episode_chains(samples: Sequence[Linked]) -> list[list[int]]:
    """The chains of a batch (see the module docstring): lists of indices into `samples`, each in
    chain order, chains ordered by their first part; every index in exactly one.

    Example: P, S (context_rewrite child of P), Q (plain) -> ``[[0, 1], [2]]``.
    """
    index = {s.trajectory_id: i for i, s in enumerate(samples)}
    successor: dict[int, int] = {}
    chained: set[int] = set()
    for i, s in enumerate(samples):
        if is_successor_of(s, index):
            p = index[s.parent_trajectory_id]  # type: ignore[index]
            if p != i and p not in successor and i not in chained:
                successor[p] = i
                chained.add(i)
    out: list[list[int]] = []
    for i in range(len(samples)):
        if i in chained:
            continue
        chain, seen = [i], {i}
        while chain[-1] in successor and successor[chain[-1]] not in seen:  # a cycle cannot come from valid data
            chain.append(successor[chain[-1]])
            seen.add(chain[-1])
        out.append(chain)
    placed = {i for c in out for i in c}
    out += [[i] for i in range(len(samples)) if i not in placed]  # a cycle's members: each alone
    return out


def shared_prefix_end(parent_trajectory_id: str | None, fork_point: int | None) -> int:
    """Tokens at the start of a trajectory that are its parent's (0 for a root)."""
    return int(fork_point or 0) if parent_trajectory_id is not None else 0
