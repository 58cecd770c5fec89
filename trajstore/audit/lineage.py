"""The lineage audit (``traj stats --lineage``): episodes, lineages per episode and how much of
the stored tokens are prefixes shared with a parent (the views of
:mod:`~trajstore.audit.lineage_views`, restricted to the selected trajectories)."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from trajstore.audit.predicate import selected_cte
from trajstore.audit.report import Report


@dataclass(frozen=True)
class LineageReport(Report):
    """Episodes and lineages of the selected trajectories.

    Attributes:
        totals: one row: ``episodes``, ``trajectories``, ``lineages``, ``split_episodes``
            (episodes of more than one trajectory), ``lineages_per_episode_mean`` / ``_max``,
            ``trajectories_per_episode_mean`` / ``_max``, ``tokens``, ``shared_prefix_tokens``
            (sum of the children's fork points: tokens a child stores again from its parent)
            and ``shared_prefix_share`` (of ``tokens``; NULL without tokens).
        by_link_kind: per ``link_kind`` (``root`` for a trajectory without a parent):
            ``trajectories``, ``tokens``, ``fork_point_mean``, ``fork_point_max``,
            ``shared_prefix_tokens``.
        lineages_per_episode: per number of ``lineages``: ``episodes``.
    """

    totals: duckdb.DuckDBPyRelation
    by_link_kind: duckdb.DuckDBPyRelation
    lineages_per_episode: duckdb.DuckDBPyRelation

    KEYS = {"totals": (), "by_link_kind": ("link_kind",), "lineages_per_episode": ("lineages",)}
    EMPTY = {"by_link_kind": "no trajectories selected", "lineages_per_episode": "no trajectories selected"}
    NOTES = {"totals": "a lineage: a trajectory and its context-rewrite / continuation successors; counted over "
                       "the selected trajectories"}


def lineage_report(conn: duckdb.DuckDBPyConnection, *, where: str | None = None) -> LineageReport:
    """Episodes, lineages per episode and prefix sharing over the selected trajectories (an
    episode or lineage counts its selected trajectories only).

    Raises:
        AuditError: the predicate is invalid.
    """
    base = (f"WITH {selected_cte(conn, where)}, p AS (SELECT * FROM _lineage_parts "
            "WHERE trajectory_id IN (SELECT trajectory_id FROM sel)), "
            "e AS (SELECT episode_id, count(*) AS n, count(DISTINCT lineage_id) AS lineages FROM p "
            "GROUP BY episode_id)")
    shared = "coalesce(sum(fork_point) FILTER (WHERE parent_trajectory_id IS NOT NULL), 0)"
    totals = conn.sql(
        f"{base} SELECT (SELECT count(*) FROM e) AS episodes, (SELECT count(*) FROM p) AS trajectories, "
        "(SELECT count(DISTINCT lineage_id) FROM p) AS lineages, "
        "(SELECT count(*) FROM e WHERE n > 1) AS split_episodes, "
        "(SELECT avg(lineages) FROM e) AS lineages_per_episode_mean, "
        "(SELECT max(lineages) FROM e) AS lineages_per_episode_max, "
        "(SELECT avg(n) FROM e) AS trajectories_per_episode_mean, "
        "(SELECT max(n) FROM e) AS trajectories_per_episode_max, "
        f"(SELECT coalesce(sum(num_tokens), 0) FROM p) AS tokens, (SELECT {shared} FROM p) AS shared_prefix_tokens, "
        f"(SELECT {shared} / nullif(sum(num_tokens), 0) FROM p) AS shared_prefix_share")
    by_kind = conn.sql(
        f"{base} SELECT coalesce(link_kind, 'root') AS link_kind, count(*) AS trajectories, "
        "sum(num_tokens) AS tokens, avg(fork_point) AS fork_point_mean, max(fork_point) AS fork_point_max, "
        f"{shared} AS shared_prefix_tokens FROM p GROUP BY ALL ORDER BY link_kind")
    per = conn.sql(f"{base} SELECT lineages, count(*) AS episodes FROM e GROUP BY lineages ORDER BY lineages")
    return LineageReport(totals=totals, by_link_kind=by_kind, lineages_per_episode=per)
