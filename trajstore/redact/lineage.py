"""``fork_point`` after a redaction: a secret in the context a child shares with its parent is
replaced by a marker of another length in both, so the number of leading tokens they share
changes (98 before, 87 after). Every child whose own tokens or whose parent's changed gets its
``fork_point`` recomputed from the redacted tokens, in ``traj proxy --redact``
(:func:`redact_linked`, one batch of trajectories) and in ``traj redact`` (the store's pass
after its rewrites, :mod:`trajstore.redact.store`).

The rule (:func:`refork`): a child whose fork point was the whole prefix it shared with its
parent (every one the proxy and ingest write) gets the whole prefix it shares now; one that
claimed less keeps its claim, cut to what is still shared (``tokens[:fork_point]`` must equal
the parent's, which ``traj validate`` checks)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from trajstore.models import Trajectory

StoredTokens = Callable[[list[str]], dict[str, np.ndarray]]
"""Token ids of stored trajectories by id (absent: not stored)."""


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading token ids `a` and `b` share."""
    n = min(len(a), len(b))
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if len(diff) else n


def refork(fork_point: int, child_before: np.ndarray | None, child_after: np.ndarray,
           parent_before: np.ndarray | None, parent_after: np.ndarray) -> int:
    """The ``fork_point`` of a child after redaction (see the module docstring); `*_before`:
    the token ids before it (None: unknown, the fork point is then taken as the whole shared
    prefix, as the proxy writes it)."""
    now = common_prefix(child_after, parent_after)
    if child_before is None or parent_before is None or fork_point >= common_prefix(child_before, parent_before):
        return now
    return min(fork_point, now)


def redact_linked(redact: Callable[[Trajectory], Trajectory], trajectories: Sequence[Trajectory],
                  stored_tokens: StoredTokens) -> list[Trajectory]:
    """`trajectories` through `redact`, with the ``fork_point`` of each child recomputed when its
    tokens or its parent's changed. A parent outside the batch is looked up in the store
    (`stored_tokens`: already redacted there), only for a child that changed; one not found
    leaves the fork point as it was, cut to the child's length."""
    out = [redact(t) for t in trajectories]
    before = {t.trajectory_id: np.asarray(t.tokens) for t in trajectories}
    after = {t.trajectory_id: np.asarray(t.tokens) for t in out}
    changed = {i for i in before if len(before[i]) != len(after[i]) or not np.array_equal(before[i], after[i])}
    todo = [t for t in out if t.parent_trajectory_id is not None and t.fork_point is not None
            and (t.trajectory_id in changed or t.parent_trajectory_id in changed)]
    outside = sorted({str(t.parent_trajectory_id) for t in todo if t.parent_trajectory_id not in after})
    stored = stored_tokens(outside) if outside else {}
    fixed = {}
    for t in todo:
        p = t.parent_trajectory_id
        assert p is not None and t.fork_point is not None
        if p in after:
            fork = refork(t.fork_point, before[t.trajectory_id], after[t.trajectory_id], before[p], after[p])
        elif p in stored:
            fork = refork(t.fork_point, None, after[t.trajectory_id], None, stored[p])
        else:
            fork = min(t.fork_point, len(t.tokens))
        if fork != t.fork_point:
            fixed[t.trajectory_id] = t.model_copy(update={"fork_point": fork})
    return [fixed.get(t.trajectory_id, t) for t in out]
