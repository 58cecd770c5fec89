"""The lineage views of an audit connection (schema v3 lineage columns; a store of v1 / v2 shards
reads as one trajectory per episode and lineage): ``lineages`` and ``episodes``.

A **lineage** is one line of context of one agent: a trajectory that is not the successor of
another (a root, a ``subagent`` or a ``fork`` child, or a child whose parent is not stored) and
the trajectories that continue it, recursively (children with ``link_kind`` ``context_rewrite``
or ``continuation``), as the trainer chains them (:mod:`trajstore.trainer.data.episodes`; there,
a part with two successors in one batch chains to the first).
An **episode** is every trajectory with one ``episode_id``.

Views:

- ``lineages``: one row per lineage: ``lineage_id`` (its first trajectory), ``episode_id``,
  ``parent_trajectory_id``, ``link_kind`` (NULL for a root), ``fork_point`` (of the first
  trajectory), ``parts`` (trajectories), ``context_rewrites``, ``continuations``, ``actions``,
  ``tokens``, ``action_tokens``, ``shared_prefix_tokens`` (sum of its trajectories' fork
  points: tokens stored again from a parent), ``status`` and ``reward`` of its latest trajectory
  (by ``created_at``), ``source`` of its first, ``first_created_at``, ``last_created_at``.
- ``episodes``: one row per episode: ``episode_id``, ``trajectories``, ``lineages``, ``roots``
  (trajectories without a parent), ``subagents``, ``forks``, ``context_rewrites``,
  ``continuations`` (trajectories per ``link_kind``), ``actions``, ``tokens``, ``action_tokens``,
  ``shared_prefix_tokens``, ``status`` and ``reward`` of its latest trajectory, ``statuses``
  (distinct statuses of its trajectories), ``source`` of its first, ``first_created_at``,
  ``last_created_at``.

Both are computed from the ``trajectories`` view's scalar columns (a recursive walk over the
links, as deep as the longest chain of rewrites), never from tokens.
"""

from __future__ import annotations

from typing import Final

import duckdb

LINEAGE_VIEW_NAMES: Final[tuple[str, ...]] = ("lineages", "episodes")
"""The views :func:`create_lineage_views` adds."""

CHAIN_KINDS_SQL: Final[str] = "('context_rewrite', 'continuation')"
"""``link_kind`` values that continue a lineage (SQL list)."""


def create_lineage_views(conn: duckdb.DuckDBPyConnection) -> None:
    """Add ``_lineage_parts`` (every trajectory with its ``lineage_id`` and ``lineage_part``,
    0 for the first) and the views of :data:`LINEAGE_VIEW_NAMES` on a connection that has the
    ``trajectories`` view."""
    conn.execute(
        "CREATE VIEW _lineage_parts AS WITH RECURSIVE walk(trajectory_id, lineage_id, lineage_part) AS ("
        "SELECT trajectory_id, trajectory_id, 0 FROM trajectories "
        f"WHERE link_kind IS NULL OR link_kind NOT IN {CHAIN_KINDS_SQL} "
        "OR parent_trajectory_id NOT IN (SELECT trajectory_id FROM trajectories) "
        "UNION ALL SELECT c.trajectory_id, w.lineage_id, w.lineage_part + 1 FROM trajectories c "
        f"JOIN walk w ON c.parent_trajectory_id = w.trajectory_id WHERE c.link_kind IN {CHAIN_KINDS_SQL}) "
        "SELECT t.*, w.lineage_id, w.lineage_part FROM walk w JOIN trajectories t USING (trajectory_id)")
    common = ("sum(num_actions) AS actions, sum(num_tokens) AS tokens, sum(num_action_tokens) AS action_tokens, "
              "coalesce(sum(fork_point) FILTER (WHERE parent_trajectory_id IS NOT NULL), 0) AS shared_prefix_tokens, "
              "arg_max(status, created_at) AS status, arg_max_null(reward, created_at) AS reward")
    tail = ("arg_min(source, created_at) AS source, min(created_at) AS first_created_at, "
            "max(created_at) AS last_created_at")
    head = "FILTER (WHERE lineage_part = 0)"
    conn.execute(
        f"CREATE VIEW lineages AS SELECT lineage_id, first(episode_id) {head} AS episode_id, "
        f"first(parent_trajectory_id) {head} AS parent_trajectory_id, first(link_kind) {head} AS link_kind, "
        f"first(fork_point) {head} AS fork_point, count(*) AS parts, "
        "count(*) FILTER (WHERE link_kind = 'context_rewrite') AS context_rewrites, "
        f"count(*) FILTER (WHERE link_kind = 'continuation') AS continuations, {common}, {tail} "
        "FROM _lineage_parts GROUP BY lineage_id")
    kinds = ", ".join(f"count(*) FILTER (WHERE link_kind = '{k}') AS {k}s"
                      for k in ("subagent", "fork", "context_rewrite", "continuation"))
    conn.execute(
        "CREATE VIEW episodes AS SELECT episode_id, count(*) AS trajectories, count(DISTINCT lineage_id) AS lineages, "
        f"count(*) FILTER (WHERE parent_trajectory_id IS NULL) AS roots, {kinds}, {common}, "
        f"list_sort(list_distinct(list(status))) AS statuses, {tail} FROM _lineage_parts GROUP BY episode_id")
