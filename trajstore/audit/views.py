"""DuckDB views over a store (``trajectories``, ``spans``, ``steps``, ``consumed``,
``step_metrics``, and ``lineages`` / ``episodes``: :mod:`~trajstore.audit.lineage_views`) on a
connection that can read the store's shards and nothing else.

The store is only ever read through ``read_parquet`` over the explicit list of readable shards
(:meth:`~trajstore.store.Store.list_shards`, so corrupt shards are skipped with a warning, as
the reader does); S3 and other remote stores go through the store's fsspec filesystem
registered on the connection (no DuckDB extension is downloaded).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from trajstore.audit.lineage_views import LINEAGE_VIEW_NAMES, create_lineage_views
from trajstore.audit.sampling_sql import register_sampling_functions
from trajstore.errors import TrajstoreError, one_line
from trajstore.schema import (
    ACTION_LOGPROBS_COLUMN,
    CONSUMED_SCHEMA,
    LEGACY_LOGPROBS_COLUMN,
    SCALAR_COLUMNS,
    SCHEMA_VERSION,
    SPAN_FIELDS,
    SPAN_FIELDS_V1,
    SPAN_FIELDS_V3,
    STEP_SCHEMA,
    TRAJECTORY_SCHEMA,
)
from trajstore.store import ShardInfo, Store, decode_id_index, open_store
from trajstore.store.layout import RUNS_DIR, TRAJECTORIES_DIR, run_consumed_dir, run_steps_dir, run_tokens_dir
from trajstore.token_annotations import TOKEN_ANNOTATION_SCHEMA

VIEW_NAMES: tuple[str, ...] = ("trajectories", "spans", "span_logprobs", "steps", "consumed", "step_metrics",
                               "token_annotations", *LINEAGE_VIEW_NAMES)
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


def _read_parquet(urls: Sequence[str], *, same_columns: bool = False) -> str:
    """``read_parquet`` of `urls`. With `same_columns` (every file has the same columns, known from
    the listing) DuckDB binds the first file's schema only: ``union_by_name`` reads every file's
    schema at each bind, and a view is bound again by every query that uses it (0.45 s a query
    at a thousand shards)."""
    files = ", ".join(sql_literal(u) for u in urls)
    union = "" if same_columns else ", union_by_name = true"
    return f"read_parquet([{files}], filename = true, file_row_number = true{union})"


def _empty_source(conn: duckdb.DuckDBPyConnection, name: str, schema: pa.Schema) -> str:
    """Register an empty Arrow table with `schema` plus the read_parquet extra columns."""
    # Built from no batches: Schema.empty_table() and pa.array([]) make pyarrow import pandas
    # (to ask whether the input is a pandas object), 0.3-0.5 s of every `traj stats` / `traj sql`.
    full = schema.append(pa.field("filename", pa.string())).append(pa.field("file_row_number", pa.int64()))
    conn.register(name, pa.Table.from_batches([], schema=full))
    return name


def _duck_type(t: pa.DataType) -> str:
    """DuckDB type name of an Arrow scalar type of the schemas."""
    if pa.types.is_timestamp(t):
        return "TIMESTAMPTZ" if t.tz else "TIMESTAMP"
    return {pa.string(): "VARCHAR", pa.int64(): "BIGINT", pa.float64(): "DOUBLE", pa.bool_(): "BOOLEAN",
            pa.float32(): "FLOAT", pa.int32(): "INTEGER"}[t]


def _column_or_null(f: pa.Field, present: set[str]) -> str:
    """The column if some file has it, else a typed NULL (an older shard may lack a nullable column)."""
    if f.name in present:
        return _quote_ident(f.name)
    return f"CAST(NULL AS {_duck_type(f.type)}) AS {_quote_ident(f.name)}"


def _records_column(view: str, f: pa.Field, present: set[str]) -> str:
    """A training-records column as the view shows it: ``consumed.reuse`` is 0 (a first use) in
    records written before the replay buffer, the other columns as stored (NULL where absent)."""
    if view == "consumed" and f.name == "reuse":
        inner = _quote_ident(f.name) if f.name in present else "NULL"
        return f"CAST(coalesce({inner}, 0) AS BIGINT) AS reuse"
    return _column_or_null(f, present)


_EPISODE_ID_SQL = (
    "coalesce(CASE WHEN metadata LIKE '%\"episode\"%' AND json_valid(metadata) THEN CASE json_type(metadata, "
    "'$.episode') WHEN 'VARCHAR' THEN nullif(metadata ->> '$.episode', '') WHEN 'OBJECT' THEN CASE WHEN "
    "json_type(metadata, '$.episode.id') = 'VARCHAR' THEN nullif(metadata ->> '$.episode.id', '') END END END, "
    "trajectory_id) AS episode_id")
"""``episode_id`` of a v1 / v2 row in SQL: :func:`trajstore.convert.episode_id_of` (metadata
``episode.id`` of a split episode's part, else the trajectory's own id)."""


_LP = "_trajstore_lp"
"""The log-prob list of a row of a v1 / v2 shard group, whichever name its file has: ``logprobs``,
or ``action_logprobs`` when ``traj migrate`` rewrote the file as v3 after this connection listed
it (DuckDB binds the views again at each query, and the rewritten file has only the new name)."""


def _old_source(src: str) -> str:
    """`src` (a v1 / v2 read_parquet) with the log-prob list under :data:`_LP`."""
    return (f"(SELECT *, coalesce(*COLUMNS('^({ACTION_LOGPROBS_COLUMN}|{LEGACY_LOGPROBS_COLUMN})$')) AS {_LP} "
            f"FROM {src})")


def _old_as_current(f: pa.Field, present: set[str], version: int) -> str:
    """SQL for a column of the current schema computed from the columns of v1 to v3 shards (see
    :mod:`trajstore.schema` and :func:`trajstore.convert.upgrade_table`, the same conversion)."""
    if f.name == "schema_version":  # a converted row has the current layout (the footer keeps the file's version)
        return f"CAST({SCHEMA_VERSION} AS BIGINT) AS schema_version"
    if f.name == "spans" and version >= 2:  # v2 and v3 spans are alike; later fields are null
        kept = ", ".join(f"{_quote_ident(g.name)} := s.{_quote_ident(g.name)}" for g, _ in SPAN_FIELDS_V3)
        return f"list_transform(spans, lambda s: struct_pack({kept}, {_new_span_fields(SPAN_FIELDS_V3)})) AS spans"
    if version == 3:
        return _column_or_null(f, present)
    if f.name == "episode_id":
        return _EPISODE_ID_SQL
    if f.name == ACTION_LOGPROBS_COLUMN and version == 2:
        return f"{_LP} AS {_quote_ident(ACTION_LOGPROBS_COLUMN)}"
    if version == 1:
        return _v1_as_v2(f, present)
    return _column_or_null(f, present)


def _v1_as_v2(f: pa.Field, present: set[str]) -> str:
    """SQL for a column of schema v2 (the log-prob column under its v3 name) computed from the
    columns of v1 shards."""
    if f.name == "num_missing_logprobs":  # v1's write-time rule: engine rows have every one
        return ("CASE WHEN logprob_source = 'none' THEN num_action_tokens ELSE 0 END "
                "AS num_missing_logprobs")
    if f.name == ACTION_LOGPROBS_COLUMN:  # keep the action tokens' values, in order; null -> NaN
        # A row whose list is already num_action_tokens long is v3: `traj migrate` rewrote the
        # shard after this connection listed it as v1 (when every token is an action token the
        # two layouts hold the same values, so either branch gives the same list).
        return (f"CASE WHEN len({_LP}) = num_action_tokens "
                f"THEN list_transform({_LP}, lambda x: coalesce(x, 'NaN'::FLOAT)) "
                "ELSE flatten(list_transform(list_filter(spans, lambda s: s.kind = 'action'), lambda s: "
                f"list_transform({_LP}[s.start + 1:s.\"end\"], lambda x: coalesce(x, 'NaN'::FLOAT)))) "
                f"END AS {ACTION_LOGPROBS_COLUMN}")
    if f.name == "spans":
        kept = ", ".join(f"{_quote_ident(g.name)} := s.{_quote_ident(g.name)}" for g, _ in SPAN_FIELDS_V1)
        act = "s.kind = 'action'"
        before = ("coalesce(list_sum(list_transform(list_filter(spans[1:i - 1], lambda p: p.kind = 'action'), "
                  "lambda p: p.\"end\" - p.start)), 0)")
        missing = "CASE WHEN logprob_source = 'none' THEN s.\"end\" - s.start ELSE 0 END"
        derived = {"logprob_start": f"CASE WHEN {act} THEN {before} END",
                   "num_missing_logprobs": f"CASE WHEN {act} THEN {missing} END"}
        return f"list_transform(spans, lambda s, i: struct_pack({kept}, {_new_span_fields(SPAN_FIELDS_V1, derived)})) AS spans"
    return _column_or_null(f, present)


def _new_span_fields(old: Sequence[tuple[pa.Field, str]], derived: Mapping[str, str] | None = None) -> str:
    """``name := value`` SQL of every current span field that `old` lacks: the `derived` SQL
    where given, else a typed NULL (not recorded in the older version)."""
    have = {g.name for g, _ in old}
    return ", ".join(f"{_quote_ident(g.name)} := {(derived or {}).get(g.name, f'NULL::{_duck_type(g.type)}')}"
                     for g, _ in SPAN_FIELDS if g.name not in have)


def _maybe_duplicated(shards: Sequence[ShardInfo]) -> bool:
    """False when the shards' footer id indexes prove every trajectory id distinct (no two equal
    id hashes), so the connection needs no pass over the ids; True when some id may repeat or a
    shard has no index."""
    if any(s.id_index is None for s in shards):
        return True
    hashes = [decode_id_index(s.id_index)[0] for s in shards]
    allh = np.sort(np.concatenate(hashes)) if hashes else np.zeros(0, np.uint64)
    return bool((allh[1:] == allh[:-1]).any())


def _trajectory_rows_sql(conn: duckdb.DuckDBPyConnection, shards: Sequence[ShardInfo],
                         store: Store) -> tuple[str, list[str]]:
    """SELECT of every stored trajectory row as the current schema plus ``shard`` and ``shard_row``
    (shards of schema v1 to v3 converted in SQL), and the shard URLs it reads."""
    by_layout: dict[tuple[int, tuple[str, ...]], list[ShardInfo]] = {}
    for info in shards:  # shards of one version and one column list are read by one read_parquet
        by_layout.setdefault((info.schema_version, info.columns), []).append(info)
    selects, urls = [], []
    for (version, _), shards in sorted(by_layout.items()):
        present = {c for s in shards for c in s.columns}
        urls += [store.url_of(s.path) for s in shards]
        src = _read_parquet([store.url_of(s.path) for s in shards], same_columns=all(s.columns for s in shards))
        if version == SCHEMA_VERSION:
            cols = [_column_or_null(f, present) for f in TRAJECTORY_SCHEMA]
        else:
            cols = [_old_as_current(f, present, version) for f in TRAJECTORY_SCHEMA]
            src = _old_source(src) if version < 3 else src
        selects.append(f"SELECT {', '.join(cols)}, filename AS shard, file_row_number AS shard_row FROM {src}")
    if not selects:
        src = _empty_source(conn, "_trajstore_empty_trajectories", TRAJECTORY_SCHEMA)
        all_cols = ", ".join(_quote_ident(f.name) for f in TRAJECTORY_SCHEMA)
        selects.append(f"SELECT {all_cols}, filename AS shard, file_row_number AS shard_row FROM {src}")
    return " UNION ALL BY NAME ".join(selects), urls


def _shard_urls(store: Store, subdir: str, *, strict: bool = False) -> list[str]:
    return [store.url_of(s.path) for s in store.list_shards(subdir, strict=strict)]


def run_ids(store: Store) -> list[str]:
    """Run ids that have a ``runs/<run_id>/`` directory in the store, sorted."""
    return sorted(store.iter_dirs(RUNS_DIR))


def connect(uri: str | os.PathLike[str] | Store, *,
            storage_options: Mapping[str, Any] | None = None, strict: bool = False) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the store's views registered.

    Views (a snapshot of the shards listed now; reconnect to see newer shards):

    Shards of schema v1 to v3 are converted in SQL (as :func:`trajstore.convert.upgrade_table`
    does), so a store holding several versions reads as one; a nullable column that no shard has
    is NULL.

    - ``trajectories``: one row per trajectory, every scalar column of the current schema (no
      ``tokens``/``action_logprobs``/``spans``) plus ``shard`` (the file it was read from). Duplicate
      ``trajectory_id`` s keep the first copy in arrival order (shard name, then row), exactly
      as :mod:`trajstore.reader`.
    - ``spans``: one row per span of those trajectories: ``trajectory_id``, ``span_index``
      (0-based), ``kind``, ``start``, ``"end"`` (exclusive), ``num_tokens`` (= end - start),
      ``policy_version`` and the other span fields, plus the trajectory's
      :data:`SPAN_GROUP_COLUMNS`. Built from the ``spans`` column only: never reads tokens.
    - ``span_logprobs``: one row per action span: ``trajectory_id``, ``span_index`` (as in
      ``spans``), ``start``, ``"end"``, ``num_tokens``, ``policy_version``, ``call_id``,
      ``finish_reason``, ``temperature``, ``num_missing_logprobs`` and ``logprobs`` (FLOAT[],
      ``num_tokens`` long: the rollout log-prob of each of the span's tokens, nats, NaN where the
      engine gave none), plus :data:`SPAN_GROUP_COLUMNS`. Reads the ``action_logprobs`` column, so
      filter by trajectory when the store is large, e.g.
      ``SELECT span_index, list_sum(logprobs) FROM span_logprobs WHERE trajectory_id = 'x'``.
    - ``steps``, ``consumed``: the training records of every run under ``runs/<run_id>/``
      (schemas ``STEP_SCHEMA`` / ``CONSUMED_SCHEMA``), all runs together (``run_id`` column).
    - ``token_annotations``: the per-token trainer annotations of every run that recorded them
      (``traj train --record-tokens``; schema ``TOKEN_ANNOTATION_SCHEMA``): one row per trained action
      token, joinable with ``spans`` by ``trajectory_id`` and ``position`` (``position >= start AND
      position < "end"``).
    - ``step_metrics``: ``steps`` pivoted to one row per (run_id, step) with ``trainer_version``,
      ``wall_time`` (latest) and one column per metric name (mean if logged more than once).
    - ``lineages``, ``episodes``: one row per lineage (a trajectory and its context-rewrite /
      continuation successors) and per ``episode_id`` (:mod:`~trajstore.audit.lineage_views`).

    Functions: ``logprob_refusal(logprob_mode, temperature, top_k, top_p, min_p, sampling_params)``,
    why the trainer cannot reproduce an action span's log-probs (NULL: it can;
    :mod:`~trajstore.audit.sampling_sql`).

    Read-only: DuckDB's file access is limited to exactly the listed shard files
    (``allowed_paths``, ``enable_external_access = false``, then ``lock_configuration = true`` so
    SQL cannot undo it): no query can read other files, create files, or ATTACH a database.
    Because an allowed path could still be overwritten by a COPY, run untrusted SQL through
    :func:`sql`, which also accepts only SELECT statements.

    Args:
        uri: store root (local path or ``s3://bucket/prefix``) or an open :class:`Store`.
        storage_options: fsspec options for remote stores (``key``, ``secret``, ``endpoint_url``, ...).
        strict: raise on a shard (trajectories or training records) that cannot be read instead
            of leaving it out with a :class:`~trajstore.store.CorruptShardWarning`: an audit whose
            totals silently miss a shard's rows is wrong, so ``traj stats`` / ``traj sql`` are
            strict unless ``--skip-unreadable``.

    Raises:
        StoreError: the store cannot be opened.
        CorruptShardError: with `strict`, the first shard that cannot be read (its path and why).
    """
    store = uri if isinstance(uri, Store) else open_store(uri, storage_options=storage_options)
    conn = duckdb.connect(":memory:")
    # DuckDB draws a progress bar on stdout for queries past 2 s: it landed inside `--format json`
    # and csv output (piped or not) at a million trajectories
    conn.execute("SET enable_progress_bar = false")
    # Every query reads the same shards: keep their footers instead of parsing them per query
    # (about 0.5 ms a file, a second per query over a store of a million short trajectories).
    conn.execute("SET parquet_metadata_cache = true")
    if not store.is_local:
        conn.register_filesystem(store.fs)
    allowed: list[str] = []

    traj_shards = store.list_shards(TRAJECTORIES_DIR, strict=strict)
    rows_sql, traj_urls = _trajectory_rows_sql(conn, traj_shards, store)
    allowed += traj_urls
    # Every row as stored (as the current schema), with its shard and row number (duplicates included).
    conn.execute(f"CREATE VIEW _trajectory_rows AS {rows_sql}")
    # First copy of each id in arrival order (shard names sort by write time). The later copies
    # are found once here from the ids alone and kept as a small table; a window over the full
    # rows in every query would re-sort whole rows (spans included) each time.
    # The footers' id indexes usually prove there is no duplicate without reading any id.
    maybe = _maybe_duplicated(traj_shards)
    if maybe:
        conn.execute("CREATE TEMP TABLE _duplicated_ids AS SELECT trajectory_id FROM _trajectory_rows "
                     "GROUP BY trajectory_id HAVING count(*) > 1")
    else:  # declared, not selected: binding the rows' view to select nothing costs a start-up
        conn.execute("CREATE TEMP TABLE _duplicated_ids (trajectory_id VARCHAR)")
    if maybe and conn.execute("SELECT count(*) FROM _duplicated_ids").fetchall()[0][0]:
        conn.execute(
            "CREATE TEMP TABLE _dropped_rows AS SELECT shard, shard_row FROM (SELECT shard, shard_row, row_number() "
            "OVER (PARTITION BY trajectory_id ORDER BY shard, shard_row) AS copy FROM _trajectory_rows "
            "WHERE trajectory_id IN (SELECT trajectory_id FROM _duplicated_ids)) WHERE copy > 1")
        conn.execute("CREATE VIEW _trajectories_full AS SELECT r.* FROM _trajectory_rows r "
                     "ANTI JOIN _dropped_rows d ON r.shard = d.shard AND r.shard_row = d.shard_row")
    else:  # the usual case: one pass over the ids, and the view is the rows as stored
        conn.execute("CREATE VIEW _trajectories_full AS SELECT * FROM _trajectory_rows")
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
    # Action spans with their own log-probs (the slice of the action-aligned list).
    conn.execute(
        f"CREATE VIEW span_logprobs AS SELECT trajectory_id, span_index, sp.start AS start, sp.\"end\" AS \"end\", "
        f"sp.\"end\" - sp.start AS num_tokens, sp.policy_version AS policy_version, sp.call_id AS call_id, "
        f"sp.finish_reason AS finish_reason, sp.temperature AS temperature, "
        f"sp.num_missing_logprobs AS num_missing_logprobs, "
        f"{ACTION_LOGPROBS_COLUMN}[sp.logprob_start + 1:sp.logprob_start + sp.\"end\" - sp.start] AS logprobs, "
        f"{group_cols} FROM (SELECT trajectory_id, {ACTION_LOGPROBS_COLUMN}, {group_cols}, "
        f"unnest(range(len(spans))) AS span_index, unnest(spans) AS sp FROM _trajectories_full) "
        f"WHERE sp.kind = 'action'")
    create_lineage_views(conn)
    register_sampling_functions(conn)

    runs = run_ids(store)
    for view, records_dir, schema in (("steps", run_steps_dir, STEP_SCHEMA),
                                      ("consumed", run_consumed_dir, CONSUMED_SCHEMA),
                                      ("token_annotations", run_tokens_dir, TOKEN_ANNOTATION_SCHEMA)):
        urls = [u for r in runs for u in _shard_urls(store, records_dir(r), strict=strict)]
        allowed += urls
        src = _read_parquet(urls) if urls else _empty_source(conn, f"_trajstore_empty_{view}", schema)
        # records written before a nullable column existed (consumed.reuse) read it as NULL
        present = {r[0] for r in conn.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()}
        cols = ", ".join(_records_column(view, f, present) for f in schema)
        conn.execute(f"CREATE VIEW {view} AS SELECT {cols} FROM {src}")

    metrics = [m for (m,) in conn.execute("SELECT DISTINCT metric FROM steps ORDER BY metric").fetchall()]
    pivots = "".join(f", avg(value) FILTER (WHERE metric = {sql_literal(m)}) AS {_quote_ident(m)}"
                     for m in metrics)
    conn.execute(f"CREATE VIEW step_metrics AS SELECT run_id, step, max(trainer_version) AS trainer_version, "
                 f"max(wall_time) AS wall_time{pivots} FROM steps GROUP BY run_id, step")

    if allowed:
        conn.execute("SET allowed_paths = ?", [allowed])
    # DuckDB's temp directory (default `.tmp` under the working directory) stays readable with
    # external access disabled: point it at a private, empty directory of our own instead.
    spill = tempfile.mkdtemp(prefix="trajstore-duckdb-")
    weakref.finalize(conn, shutil.rmtree, spill, True)
    conn.execute("SET temp_directory = ?", [spill])
    conn.execute("SET enable_external_access = false")
    conn.execute("SET lock_configuration = true")
    return conn


def sql(conn: duckdb.DuckDBPyConnection, query: str, *, limit: int | None = None) -> duckdb.DuckDBPyRelation:
    """Run one read-only statement on an audit connection and return its relation (lazy: read
    it in batches with ``rel.to_arrow_reader(n)`` to keep memory bounded by a batch).

    Only statement types in :data:`READ_ONLY_STATEMENT_TYPES` are accepted, so COPY ... TO,
    CREATE, INSERT, ATTACH, SET and PRAGMA never reach DuckDB (and cannot touch the store).

    Args:
        limit: at most this many rows (>= 1); None = all.

    Raises:
        AuditError: the text is not exactly one statement, is not a SELECT, or DuckDB rejects it
            (parse / bind error, naming the problem on one line); `limit` < 1.
    """
    if limit is not None and limit < 1:
        raise AuditError(f"limit must be >= 1, got {limit}")
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as e:
        raise AuditError(f"invalid SQL: {one_line(str(e))}") from e
    if len(statements) != 1:
        raise AuditError(f"expected exactly one SQL statement, got {len(statements)}")
    kind = statements[0].type.name
    if kind not in READ_ONLY_STATEMENT_TYPES:
        raise AuditError(f"read-only: refusing this {kind.replace('_', ' ')} statement; only SELECT queries run "
                         f"against the store (views: {', '.join(VIEW_NAMES)})")
    try:
        rel = conn.sql(query)
        return rel if limit is None else rel.limit(limit)
    except duckdb.Error as e:
        raise AuditError(f"query failed: {one_line(str(e))}{_list_column_hint(str(e))}") from e


_LIST_COLUMN_HINTS = {
    "tokens": "token ids are in no view: read them with trajstore.read_trajectories(STORE, columns=['tokens'])",
    ACTION_LOGPROBS_COLUMN: "the rollout log-probs are in the view span_logprobs, one row per action span",
    LEGACY_LOGPROBS_COLUMN: "the rollout log-probs are in the view span_logprobs, one row per action span",
    "spans": "the spans are in the view spans, one row per span"}
"""Where the list columns of the schema are: the ``trajectories`` view holds the scalar columns
only, while ``traj schema`` lists every column of the stored rows."""


def _list_column_hint(message: str) -> str:
    m = re.search(r'Referenced column "(\w+)" not found', message)
    if m and m.group(1) in _LIST_COLUMN_HINTS:
        return f" (the trajectories view holds the scalar columns; {_LIST_COLUMN_HINTS[m.group(1)]})"
    return ""
