"""The overview audit: one row of store totals over the selected trajectories (and run)."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from trajstore.audit.predicate import run_filter, selected_cte, where_sql
from trajstore.audit.report import Report


@dataclass(frozen=True)
class OverviewReport(Report):
    """One row of store totals: ``shards`` (files holding any matching row), ``trajectories``, ``episodes``
    (distinct ``episode_id``; ``traj stats --lineage`` has lineages and prefix sharing), ``tokens``, ``action_tokens``,
    ``sources``, ``runs``, ``steps`` (distinct run/step pairs), ``consumed`` records."""

    totals: duckdb.DuckDBPyRelation

    KEYS = {"totals": ()}


def overview_report(conn: duckdb.DuckDBPyConnection, *, where: str | None = None,
                    run: str | None = None) -> OverviewReport:
    """Store totals over the selected trajectories (and run). Raises AuditError on a bad predicate."""
    rf = run_filter(run)
    return OverviewReport(totals=conn.sql(
        f"WITH {selected_cte(conn, where)} SELECT (SELECT count(DISTINCT shard) FROM _trajectory_rows "
        f"WHERE {where_sql(conn, where)}) AS shards, "
        f"(SELECT count(*) FROM sel) AS trajectories, (SELECT count(DISTINCT episode_id) FROM sel) AS episodes, "
        f"(SELECT coalesce(sum(num_tokens), 0) FROM sel) AS tokens, "
        f"(SELECT coalesce(sum(num_action_tokens), 0) FROM sel) AS action_tokens, "
        f"(SELECT count(DISTINCT source) FROM sel) AS sources, "
        f"(SELECT count(DISTINCT run_id) FROM (SELECT run_id FROM steps WHERE {rf} UNION "
        f"SELECT run_id FROM consumed WHERE {rf})) AS runs, "
        f"(SELECT count(*) FROM (SELECT DISTINCT run_id, step FROM steps WHERE {rf})) AS steps, "
        f"(SELECT count(*) FROM consumed WHERE {rf} AND trajectory_id IN (SELECT trajectory_id FROM sel)) "
        f"AS consumed"))
