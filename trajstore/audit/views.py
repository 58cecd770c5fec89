"""DuckDB views over a store (``trajectories``, ``spans``, ``steps``, ``consumed``,
``step_metrics``) on a connection that can read the store's shards and nothing else.

The store is only ever read through ``read_parquet`` over the explicit list of readable shards
(:meth:`~trajstore.store.Store.list_shards`, so corrupt shards are skipped with a warning, as
the reader does); S3 and other remote stores go through the store's fsspec filesystem
registered on the connection (no DuckDB extension is downloaded).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import duckdb
import pyarrow as pa

from trajstore.errors import TrajstoreError
from trajstore.schema import (
    CONSUMED_SCHEMA,
    SCALAR_COLUMNS,
    SPAN_FIELDS,
    STEP_SCHEMA,
    TRAJECTORY_SCHEMA,
)
from trajstore.store import RUN_CONSUMED_DIR, RUN_STEPS_DIR, RUNS_DIR, TRAJECTORIES_DIR, Store, open_store

VIEW_NAMES: tuple[str, ...] = ("trajectories", "spans", "steps", "consumed", "step_metrics")
"""Views every audit connection has (empty, with the right columns, when there is no data)."""

SPAN_GROUP_COLUMNS: tuple[str, ...] = (
    "source", "token_source", "logprob_source", "status", "model", "prompt_id", "group_id",
)
"""Trajectory scalars repeated on every row of the ``spans`` view, for grouping."""

READ_ONLY_STATEMENT_TYPES: frozenset[str] = frozenset({"SELECT"})
"""Statement types :func:`sql` runs. DuckDB parses WITH, DESCRIBE, SUMMARIZE, VALUES, FROM-first
queries and set operations as SELECT; COPY, CREATE, INSERT, ATTACH, SET, PRAGMA, EXPLAIN
(which can ANALYZE a write) and everything else are refused."""


class AuditError(TrajstoreError, ValueError):
    """An audit query cannot run: a write was attempted, SQL is invalid, or an option is wrong."""


def sql_literal(value: str) -> str:
    """``value`` as a single-quoted SQL string literal (quotes doubled)."""
    return "'" + value.replace("'", "''") + "'"


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _read_parquet(urls: Sequence[str]) -> str:
    files = ", ".join(sql_literal(u) for u in urls)
    return f"read_parquet([{files}], filename = true, file_row_number = true, union_by_name = true)"


def _empty_source(conn: duckdb.DuckDBPyConnection, name: str, schema: pa.Schema) -> str:
    """Register an empty Arrow table with `schema` plus the read_parquet extra columns."""
    empty = schema.empty_table().append_column("filename", pa.array([], pa.string()))
    empty = empty.append_column("file_row_number", pa.array([], pa.int64()))
    conn.register(name, empty)
    return name


def _shard_urls(store: Store, subdir: str) -> list[str]:
    return [store.url_of(s.path) for s in store.list_shards(subdir)]


def run_ids(store: Store) -> list[str]:
    """Run ids that have a ``runs/<run_id>/`` directory in the store, sorted."""
    return sorted(store.iter_dirs(RUNS_DIR))


def connect(uri: str | os.PathLike[str] | Store, *,
            storage_options: Mapping[str, Any] | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the store's views registered.

    Views (a snapshot of the shards listed now; reconnect to see newer shards):

    - ``trajectories``: one row per trajectory, every scalar column of schema v1 (no
      ``tokens``/``logprobs``/``spans``) plus ``shard`` (the file it was read from). Duplicate
      ``trajectory_id`` s keep the first copy in arrival order (shard name, then row), exactly
      as :mod:`trajstore.reader`.
    - ``spans``: one row per span of those trajectories: ``trajectory_id``, ``span_index``
      (0-based), ``kind``, ``start``, ``"end"`` (exclusive), ``num_tokens`` (= end - start),
      ``policy_version`` and the other span fields, plus the trajectory's
      :data:`SPAN_GROUP_COLUMNS`. Built from the ``spans`` column only: never reads tokens.
    - ``steps``, ``consumed``: the training records of every run under ``runs/<run_id>/``
      (schemas ``STEP_SCHEMA`` / ``CONSUMED_SCHEMA``), all runs together (``run_id`` column).
    - ``step_metrics``: ``steps`` pivoted to one row per (run_id, step) with ``trainer_version``,
      ``wall_time`` (latest) and one column per metric name (mean if logged more than once).

    Read-only: DuckDB's file access is limited to exactly the listed shard files
    (``allowed_paths``, ``enable_external_access = false``, then ``lock_configuration = true`` so
    SQL cannot undo it): no query can read other files, create files, or ATTACH a database.
    Because an allowed path could still be overwritten by a COPY, run untrusted SQL through
    :func:`sql`, which also accepts only SELECT statements.

    Args:
        uri: store root (local path or ``s3://bucket/prefix``) or an open :class:`Store`.
        storage_options: fsspec options for remote stores (``key``, ``secret``, ``endpoint_url``, ...).

    Raises:
        StoreError: the store cannot be opened.
    """
    store = uri if isinstance(uri, Store) else open_store(uri, storage_options=storage_options)
    conn = duckdb.connect(":memory:")
    if not store.is_local:
        conn.register_filesystem(store.fs)
    allowed: list[str] = []

    traj_urls = _shard_urls(store, TRAJECTORIES_DIR)
    allowed += traj_urls
    raw = _read_parquet(traj_urls) if traj_urls else _empty_source(conn, "_trajstore_empty_trajectories",
                                                                   TRAJECTORY_SCHEMA)
    all_cols = ", ".join(_quote_ident(f.name) for f in TRAJECTORY_SCHEMA)
    # Every row as stored, with its shard and row number (duplicates included).
    conn.execute(f"CREATE VIEW _trajectory_rows AS SELECT {all_cols}, filename AS shard, "
                 f"file_row_number AS shard_row FROM {raw}")
    # First copy of each id in arrival order: shard names sort by write time.
    conn.execute("CREATE VIEW _trajectories_full AS SELECT * FROM _trajectory_rows QUALIFY row_number() "
                 "OVER (PARTITION BY trajectory_id ORDER BY shard, shard_row) = 1")
    scalars = ", ".join(_quote_ident(c) for c in SCALAR_COLUMNS)
    conn.execute(f"CREATE VIEW trajectories AS SELECT {scalars}, shard FROM _trajectories_full")
    span_cols = ", ".join(
        f"sp.{_quote_ident(f.name)} AS {_quote_ident(f.name)}" for f, _ in SPAN_FIELDS
        if f.name not in ("kind", "start", "end", "policy_version"))
    group_cols = ", ".join(_quote_ident(c) for c in SPAN_GROUP_COLUMNS)
    conn.execute(
        f"CREATE VIEW spans AS SELECT trajectory_id, span_index, sp.kind AS kind, sp.start AS start, "
        f'sp."end" AS "end", sp."end" - sp.start AS num_tokens, sp.policy_version AS policy_version, '
        f"{span_cols}, {group_cols} FROM (SELECT trajectory_id, {group_cols}, "
        f"unnest(range(len(spans))) AS span_index, unnest(spans) AS sp FROM _trajectories_full)")

    runs = run_ids(store)
    for view, subdir, schema in (("steps", RUN_STEPS_DIR, STEP_SCHEMA),
                                 ("consumed", RUN_CONSUMED_DIR, CONSUMED_SCHEMA)):
        urls = [u for r in runs for u in _shard_urls(store, f"{RUNS_DIR}/{r}/{subdir}")]
        allowed += urls
        src = _read_parquet(urls) if urls else _empty_source(conn, f"_trajstore_empty_{view}", schema)
        cols = ", ".join(_quote_ident(f.name) for f in schema)
        conn.execute(f"CREATE VIEW {view} AS SELECT {cols} FROM {src}")

    metrics = [m for (m,) in conn.execute("SELECT DISTINCT metric FROM steps ORDER BY metric").fetchall()]
    pivots = "".join(f", avg(value) FILTER (WHERE metric = {sql_literal(m)}) AS {_quote_ident(m)}"
                     for m in metrics)
    conn.execute(f"CREATE VIEW step_metrics AS SELECT run_id, step, max(trainer_version) AS trainer_version, "
                 f"max(wall_time) AS wall_time{pivots} FROM steps GROUP BY run_id, step")

    if allowed:
        conn.execute("SET allowed_paths = ?", [allowed])
    conn.execute("SET enable_external_access = false")
    conn.execute("SET lock_configuration = true")
    return conn


def sql(conn: duckdb.DuckDBPyConnection, query: str) -> duckdb.DuckDBPyRelation:
    """Run one read-only statement on an audit connection and return its relation.

    Only statement types in :data:`READ_ONLY_STATEMENT_TYPES` are accepted, so COPY ... TO,
    CREATE, INSERT, ATTACH, SET and PRAGMA never reach DuckDB (and cannot touch the store).

    Raises:
        AuditError: the text is not exactly one statement, is not a SELECT, or DuckDB rejects it
            (parse / bind error, naming the problem).
    """
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as e:
        raise AuditError(f"invalid SQL: {e}") from e
    if len(statements) != 1:
        raise AuditError(f"expected exactly one SQL statement, got {len(statements)}")
    kind = statements[0].type.name
    if kind not in READ_ONLY_STATEMENT_TYPES:
        raise AuditError(f"read-only: refusing a {kind} statement; only SELECT queries run against the store "
                         f"(views: {', '.join(VIEW_NAMES)})")
    try:
        return conn.sql(query)
    except duckdb.Error as e:
        raise AuditError(f"query failed: {e}") from e
