"""The lineage tree of a trajectory's episode for ``traj view``: from the schema-v3 columns
(``episode_id``, ``parent_trajectory_id``, ``fork_point``, ``link_kind``) when the store has them;
otherwise from the metadata ``episode`` (``id``, ``part``, ``change``) that ingest and the proxy
write when they split an episode, as its parts in order. Pure functions over index rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_NODES = 500
"""Trajectories of one episode drawn at most (the rest are counted)."""


@dataclass
class LineageNode:
    """One trajectory of the episode.

    Attributes:
        trajectory_id, status, reward, num_tokens: as stored.
        link_kind: how it hangs off its parent (sub-agent, context rewrite, fork/retry, continuation;
            or the metadata's ``change`` of a part), None for a root.
        fork_point: tokens shared with the parent, when known.
        children: in creation order.
    """

    trajectory_id: str
    status: str | None = None
    reward: float | None = None
    num_tokens: int | None = None
    link_kind: str | None = None
    fork_point: int | None = None
    children: list[LineageNode] = field(default_factory=list)


@dataclass
class LineageTree:
    """The tree: `roots` (trajectories without a parent in the episode), `source` (``columns`` or
    ``metadata``), `total` (trajectories in the episode) and `shown` (drawn, at most MAX_NODES)."""

    episode: str
    roots: list[LineageNode]
    source: str
    total: int
    shown: int


def tree_from_links(episode: str, rows: Sequence[dict[str, Any]]) -> LineageTree:
    """The tree of `rows` (each with ``trajectory_id``, ``parent_trajectory_id``, ``fork_point``,
    ``link_kind``, ``status``, ``reward``, ``num_tokens``; in creation order). A row whose parent is
    not among them (or is itself, or closes a cycle) is a root."""
    kept = list(rows)[:MAX_NODES]
    nodes = {r["trajectory_id"]: LineageNode(r["trajectory_id"], r.get("status"), r.get("reward"),
                                             r.get("num_tokens"), r.get("link_kind"), r.get("fork_point"))
             for r in kept}
    parent = {r["trajectory_id"]: r.get("parent_trajectory_id") for r in kept}

    def cycles(tid: str) -> bool:
        seen = {tid}
        p = parent.get(tid)
        while p is not None and p in nodes:
            if p in seen:
                return True
            seen.add(p)
            p = parent.get(p)
        return False

    roots = []
    for r in kept:
        tid, p = r["trajectory_id"], parent[r["trajectory_id"]]
        if p is not None and p in nodes and p != tid and not cycles(tid):
            nodes[p].children.append(nodes[tid])
        else:
            roots.append(nodes[tid])
    return LineageTree(episode, roots, "columns", len(rows), len(kept))


def parts_in_order(episode: str, rows: Sequence[dict[str, Any]]) -> LineageTree:
    """The parts of a split episode (rows with ``trajectory_id``, ``episode_part``, ``change``,
    ``status``, ``reward``, ``num_tokens``) as a list in part order (each a root: the metadata says
    the order, not a parent), each linked by its ``change`` (why the context changed before it)."""
    ordered = sorted(rows, key=lambda r: (r.get("episode_part") is None, r.get("episode_part") or 0,
                                          r["trajectory_id"]))[:MAX_NODES]
    roots = [LineageNode(r["trajectory_id"], r.get("status"), r.get("reward"), r.get("num_tokens"),
                         r.get("change") if i else None) for i, r in enumerate(ordered)]
    return LineageTree(episode, roots, "metadata", len(rows), len(ordered))
