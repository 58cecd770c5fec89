"""The duplicates audit: ``trajectory_id`` s stored more than once, and which copy readers keep."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from trajstore.audit.predicate import where_sql
from trajstore.audit.report import Report


@dataclass(frozen=True)
class DuplicateReport(Report):
    """Duplicate ``trajectory_id`` s (readers keep the first copy in arrival order).

    Attributes:
        summary: ``rows`` stored, ``trajectories`` (distinct ids), ``duplicate_rows`` (dropped
            copies), ``duplicated_ids`` (ids stored more than once).
        ids: per duplicated id: ``copies``, ``kept_shard`` (file of the copy readers keep) and
            ``shards`` (distinct files holding it), most copies first.
    """

    summary: duckdb.DuckDBPyRelation
    ids: duckdb.DuckDBPyRelation

    KEYS = {"summary": (), "ids": ("trajectory_id",)}
    EMPTY = {"ids": "no trajectory id is stored twice"}


def duplicate_report(conn: duckdb.DuckDBPyConnection, *, where: str | None = None) -> DuplicateReport:
    """Stored copies of each ``trajectory_id`` (the predicate applies to every stored copy).

    Raises:
        AuditError: the predicate is invalid.
    """
    w = where_sql(conn, where)
    # Only ids stored more than once anywhere (``_duplicated_ids``, found when the connection was
    # made, empty when the shards' id indexes prove every id distinct) can repeat among the
    # selected rows: grouping just those avoids a hash table over every stored id (7.7x a bare
    # scan at 1M trajectories, bench/RESULTS.md).
    ((repeated,),) = conn.sql("SELECT count(*) FROM _duplicated_ids").fetchall()
    in_dup = "trajectory_id IN (SELECT trajectory_id FROM _duplicated_ids)" if repeated else "false"
    rows = (f"r AS (SELECT trajectory_id, shard, shard_row FROM _trajectory_rows WHERE {w}), "
            f"d AS (SELECT * FROM r WHERE {in_dup})")
    summary = conn.sql(
        f"WITH {rows}, g AS (SELECT trajectory_id, count(*) AS copies FROM d GROUP BY trajectory_id), "
        f"n AS (SELECT count(*) AS rows FROM r), "
        f"x AS (SELECT coalesce(sum(copies - 1), 0) AS extra, count(*) FILTER (WHERE copies > 1) AS ids FROM g) "
        f"SELECT n.rows AS rows, n.rows - x.extra AS trajectories, x.extra AS duplicate_rows, "
        f"x.ids AS duplicated_ids FROM n, x")
    ids = conn.sql(
        f"WITH {rows} SELECT trajectory_id, count(*) AS copies, arg_min(shard, (shard, shard_row)) AS kept_shard, "
        f"list(DISTINCT shard ORDER BY shard) AS shards FROM d GROUP BY trajectory_id HAVING count(*) > 1 "
        f"ORDER BY copies DESC, trajectory_id")
    return DuplicateReport(summary=summary, ids=ids)
