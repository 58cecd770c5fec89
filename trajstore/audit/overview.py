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


BRIEF_TOP_SOURCES = 20
"""Sources listed one per row by :func:`brief_report`; the rest are one ``(N other sources)`` row."""


@dataclass(frozen=True)
class BriefReport(Report):
    """The store at a glance (``traj stats`` without a report flag): one row per source and one
    per training run, scalar columns and training records only (never spans or tokens).

    Attributes:
        by_source: per source (the :data:`BRIEF_TOP_SOURCES` largest; the others summed in one
            ``(N other sources)`` row): ``trajectories``, ``completed`` (status completed),
            ``reward_mean`` (over trajectories with a reward; null when none has one),
            ``tokens_p50`` (nearest rank), ``logprob_share`` (share of action tokens with an
            engine log-prob), ``versioned_share`` (share of trajectories whose actions carry a policy version).
        runs: per training run with consumption records: ``steps`` (policy steps, warm-up not
            counted), ``consumed`` (trajectories trained), ``trainer_version`` (newest),
            ``staleness_mean`` (mean over consumed trajectories of trainer version - oldest
            policy version, in versions), ``masked`` (share of trained action tokens DIS masked out).
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
        f"quantile_disc(num_tokens, 0.5) AS tokens_p50, sum(num_action_tokens) AS act, "
        f"sum(num_missing_logprobs) AS missing, count(min_policy_version) AS versioned FROM sel GROUP BY source), "
        f"ranked AS (SELECT *, row_number() OVER (ORDER BY n DESC, source) AS rk, count(*) OVER () AS k FROM per), "
        f"rows AS (SELECT source, n, completed, reward_mean, tokens_p50, act, missing, versioned, rk FROM ranked "
        f"WHERE rk <= {top} OR k = {top + 1} "
        f"UNION ALL SELECT '(' || count(*) || ' other sources)', sum(n), sum(completed), "
        f"sum(reward_mean * n) / sum(n), NULL, sum(act), sum(missing), sum(versioned), {top + 1} FROM ranked "
        f"WHERE rk > {top} AND k > {top + 1} HAVING count(*) > 0) "
        f"SELECT source, n AS trajectories, completed, reward_mean, tokens_p50, "
        f"CASE WHEN act > 0 THEN 1 - missing / act END AS logprob_share, versioned / n AS versioned_share "
        f"FROM rows ORDER BY rk")
    runs = conn.sql(
        f"WITH {selected_cte(conn, where)}, c AS (SELECT * FROM consumed WHERE {run_filter(run)} "
        f"AND trajectory_id IN (SELECT trajectory_id FROM sel)) "
        f"SELECT run_id, count(DISTINCT step) FILTER (WHERE step >= 0) AS steps, "
        f"count(DISTINCT trajectory_id) AS consumed, max(trainer_version) AS trainer_version, "
        f"avg(staleness_max) AS staleness_mean, "
        f"sum((masked_below + masked_above) * num_action_tokens) / sum(num_action_tokens) "
        f"FILTER (WHERE masked_below IS NOT NULL) AS masked FROM c GROUP BY run_id ORDER BY run_id")
    return BriefReport(by_source=by_source, runs=runs)
