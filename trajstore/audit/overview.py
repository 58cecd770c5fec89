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


BRIEF_TOP_SOURCES = 3
"""Sources listed one per row by :func:`brief_report` (the largest); the rest are one ``(N other
sources)`` row, so the overview fits an 80x24 terminal however many sources a store has."""
BRIEF_TOP_RUNS = 3
"""Training runs listed one per row by :func:`brief_report` (the ones that consumed last); the
rest are one ``(N other runs)`` row."""


@dataclass(frozen=True)
class BriefReport(Report):
    """The store at a glance (``traj stats`` without a report flag; small enough for an 80x24
    terminal): a few rows per source and per training run, scalar columns and training records
    only (never spans or tokens). The other reports hold the rest (``traj stats --all``).

    Attributes:
        by_source: per source (the :data:`BRIEF_TOP_SOURCES` largest; the others summed in one
            ``(N other sources)`` row): ``trajectories``, ``completed`` (status completed),
            ``reward_mean`` (over trajectories with a reward; null when none has one),
            ``logprob_share`` (share of action tokens with an engine log-prob).
        runs: per training run with consumption records (the :data:`BRIEF_TOP_RUNS` that consumed
            last, newest first; the others in one ``(N other runs)`` row): ``steps`` (policy steps,
            warm-up not counted), ``consumed`` (trajectories trained), ``staleness_mean`` (mean
            over consumed trajectories of trainer version - oldest policy version, in versions),
            ``masked`` (share of trained action tokens DIS masked out).
    """

    by_source: duckdb.DuckDBPyRelation
    runs: duckdb.DuckDBPyRelation

    KEYS = {"by_source": ("source",), "runs": ("run_id",)}
    EMPTY = {"by_source": "no trajectories selected", "runs": "no training run consumed the selected trajectories"}


def brief_report(conn: duckdb.DuckDBPyConnection, *, where: str | None = None,
                 run: str | None = None) -> BriefReport:
    """The short overview of the selected trajectories (and run). Raises AuditError on a bad predicate."""
    top = BRIEF_TOP_SOURCES
    by_source = conn.sql(
        f"WITH {selected_cte(conn, where)}, per AS (SELECT source, count(*) AS n, "
        f"count(*) FILTER (WHERE status = 'completed') AS completed, avg(reward) AS reward_mean, "
        f"sum(num_action_tokens) AS act, sum(num_missing_logprobs) AS missing FROM sel GROUP BY source), "
        f"ranked AS (SELECT *, row_number() OVER (ORDER BY n DESC, source) AS rk, count(*) OVER () AS k FROM per), "
        f"rows AS (SELECT source, n, completed, reward_mean, act, missing, rk FROM ranked "
        f"WHERE rk <= {top} OR k = {top + 1} "
        f"UNION ALL SELECT '(' || count(*) || ' other sources)', sum(n), sum(completed), "
        f"sum(reward_mean * n) / sum(n), sum(act), sum(missing), {top + 1} FROM ranked "
        f"WHERE rk > {top} AND k > {top + 1} HAVING count(*) > 0) "
        f"SELECT source, n AS trajectories, completed, reward_mean, "
        f"CASE WHEN act > 0 THEN 1 - missing / act END AS logprob_share "
        f"FROM rows ORDER BY rk")
    top = BRIEF_TOP_RUNS
    runs = conn.sql(
        f"WITH {selected_cte(conn, where)}, c AS (SELECT * FROM consumed WHERE {run_filter(run)} "
        f"AND trajectory_id IN (SELECT trajectory_id FROM sel)), "
        f"per AS (SELECT run_id, count(DISTINCT step) FILTER (WHERE step >= 0) AS steps, "
        f"count(DISTINCT trajectory_id) AS consumed, sum(staleness_max) AS st_sum, count(staleness_max) AS st_n, "
        f"sum((masked_below + masked_above) * num_action_tokens) AS m_sum, "
        f"sum(num_action_tokens) FILTER (WHERE masked_below IS NOT NULL) AS m_n, max(consumed_at) AS last "
        f"FROM c GROUP BY run_id), "
        f"ranked AS (SELECT *, row_number() OVER (ORDER BY last DESC, run_id) AS rk, count(*) OVER () AS k "
        f"FROM per), "
        f"rows AS (SELECT run_id, steps, consumed, st_sum, st_n, m_sum, m_n, rk FROM ranked "
        f"WHERE rk <= {top} OR k = {top + 1} "
        f"UNION ALL SELECT '(' || count(*) || ' other runs)', sum(steps), sum(consumed), sum(st_sum), sum(st_n), "
        f"sum(m_sum), sum(m_n), {top + 1} FROM ranked WHERE rk > {top} AND k > {top + 1} HAVING count(*) > 0) "
        f"SELECT run_id, steps, consumed, st_sum / st_n AS staleness_mean, m_sum / m_n AS masked "
        f"FROM rows ORDER BY rk")
    return BriefReport(by_source=by_source, runs=runs)
