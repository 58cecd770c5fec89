"""The data behind ``traj view``: the store's audit connection (the DuckDB views of
:mod:`trajstore.audit`) plus one in-memory table of the scalar columns every listing reads, built
once per snapshot of the store. A list page is then a query over memory, not over every shard's
columns (a million trajectories in under a second, bench/view.py); tokens are read only when a
trajectory is opened, by id (:mod:`trajstore.view.trajectory`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb

from trajstore import audit
from trajstore.audit.predicate import where_sql
from trajstore.audit.views import run_ids
from trajstore.store import Store, open_existing_store
from trajstore.view.config import ViewConfig

INDEX_TABLE = "_view_index"
EPISODES_TABLE = "_view_episodes"
EPISODE_AGGREGATES = (
    "any_value(episode) AS episode, count(*) AS trajectories, "
    "arg_min(trajectory_id, coalesce(episode_part, 0)) AS first_trajectory_id, "
    "any_value(source) AS source, arg_max(status, coalesce(episode_part, 0)) AS status, "
    "max(reward) AS reward, sum(num_tokens) AS num_tokens, max(created_at) AS created_at")
"""One episode row from its trajectories' index rows: ``episode``, ``trajectories``,
``first_trajectory_id`` (its first part), ``source``, ``status`` (of the last part),
``reward`` (the largest), ``num_tokens`` (summed), ``created_at`` (the latest)."""
SINGLE_EPISODE_COLUMNS = (
    "episode, 1 AS trajectories, trajectory_id AS first_trajectory_id, source, status, reward, num_tokens, "
    "created_at")
"""The same columns for a trajectory alone in its episode (no grouping needed)."""
"""The in-memory table of the listing's columns (one row per trajectory, duplicates resolved)."""

LINEAGE_COLUMNS: tuple[str, ...] = ("episode_id", "parent_trajectory_id", "fork_point", "link_kind")
"""Columns of schema v3 that link trajectories into episodes; shown when the store has them."""

LEFT_OUT: tuple[str, ...] = ("metadata", "reward_raw", "shard")
"""Columns of the trajectories view the index leaves out (large text, read per trajectory only)."""

_META_OK = "json_valid(metadata) AND json_type(metadata) = 'OBJECT'"
GAPS_SQL = (f"CASE WHEN {_META_OK} AND json_type(metadata, '$.fidelity_gaps') = 'OBJECT' "
            "THEN json_keys(metadata, '$.fidelity_gaps') ELSE []::VARCHAR[] END")
"""The trajectory's ingest fidelity flags (metadata ``fidelity_gaps`` keys: what ingest approximated)."""
EPISODE_META_SQL = f"CASE WHEN {_META_OK} THEN json_extract_string(metadata, '$.episode.id') END"
"""The episode id ingest and the proxy write in the metadata (``episode.id``) of a split episode."""
PART_SQL = f"CASE WHEN {_META_OK} THEN TRY_CAST(json_extract(metadata, '$.episode.part') AS BIGINT) END"
CHANGE_SQL = f"CASE WHEN {_META_OK} THEN json_extract_string(metadata, '$.episode.change') END"
"""Why a part of a split episode starts a new trajectory (metadata ``episode.change``)."""


@dataclass
class Snapshot:
    """What the index knows of the store as listed at ``built_at``.

    Attributes:
        columns: columns of the ``trajectories`` view (schema v2, or v3 with the lineage columns).
        has_lineage: every column of :data:`LINEAGE_COLUMNS` is there.
        trajectories: rows in the index. episodes: distinct episodes among them. sources / statuses: distinct values, most frequent first.
        gap_flags: the fidelity flags found in the metadata, most frequent first.
        tokenizers: the most frequent tokenizer names (at most 8).
        runs: run ids with a ``runs/<run_id>/`` folder. run_versions: each run's newest trainer
            version (from its consumption records), None for a run that consumed nothing yet.
        annotated_runs: runs that recorded per-token annotations.
        build_s: seconds the connection and the index took.
    """

    columns: tuple[str, ...]
    has_lineage: bool
    trajectories: int
    episodes: int
    sources: list[tuple[str, int]]
    statuses: list[tuple[str, int]]
    gap_flags: list[tuple[str, int]]
    tokenizers: list[tuple[str, int]]
    runs: list[str]
    run_versions: dict[str, int | None]
    annotated_runs: list[str]
    built_at: float
    build_s: float
    run_tables: dict[str, str] = field(default_factory=dict)
    episodes_built: bool = False


class StoreIndex:
    """The store's connection and listing index, shared by the app's requests (one query at a
    time: a DuckDB connection is not for concurrent use).

    Raises:
        StoreError: the store does not exist or is not a store.
        AuditError: ``cfg.where`` is not a valid predicate over the trajectories view.
    """

    def __init__(self, cfg: ViewConfig):
        self.cfg = cfg
        self.store: Store = open_existing_store(cfg.store, storage_options=cfg.storage_options or None)
        self.lock = threading.RLock()
        self.conn: duckdb.DuckDBPyConnection | None = None
        self.base_where = "TRUE"
        self.snapshot: Snapshot = self.refresh()

    def refresh(self) -> Snapshot:
        """List the store again and rebuild the index (new shards become visible)."""
        t0 = time.perf_counter()
        conn = audit.connect(self.store)
        base_where = where_sql(conn, self.cfg.where)
        cols = tuple(r[0] for r in conn.execute("DESCRIBE trajectories").fetchall())
        has_lineage = all(c in cols for c in LINEAGE_COLUMNS)
        kept = ", ".join(f'"{c}"' for c in cols if c not in LEFT_OUT)
        episode = f"coalesce(episode_id, {EPISODE_META_SQL}, trajectory_id)" if has_lineage else \
            f"coalesce({EPISODE_META_SQL}, trajectory_id)"
        # rid: a row's number in this snapshot (the sorts' tie-break, cheaper than the id);
        # ek: its episode's 64-bit hash (grouping a million ids by an integer, not by text)
        conn.execute(f"CREATE TEMP TABLE {INDEX_TABLE} AS SELECT row_number() OVER () AS rid, *, hash(episode) AS ek "
                     f"FROM (SELECT {kept}, {GAPS_SQL} AS gaps, {episode} AS episode, {PART_SQL} AS episode_part, "
                     f"{CHANGE_SQL} AS episode_change "
                     f"FROM trajectories WHERE {base_where})")

        def counts(sql: str) -> list[tuple[str, int]]:
            return [(str(a), int(b)) for a, b in conn.execute(sql).fetchall()]

        runs = run_ids(self.store)
        versions = dict(conn.execute("SELECT run_id, max(trainer_version) FROM consumed GROUP BY run_id").fetchall())
        annotated = [r for (r,) in conn.execute(
            "SELECT DISTINCT run_id FROM token_annotations ORDER BY run_id").fetchall()]
        snap = Snapshot(
            columns=cols, has_lineage=has_lineage,
            trajectories=conn.execute(f"SELECT count(*) FROM {INDEX_TABLE}").fetchall()[0][0],
            episodes=conn.execute(f"SELECT count(DISTINCT ek) FROM {INDEX_TABLE}").fetchall()[0][0],
            sources=counts(f"SELECT source, count(*) AS n FROM {INDEX_TABLE} GROUP BY 1 ORDER BY n DESC, 1"),
            statuses=counts(f"SELECT status, count(*) AS n FROM {INDEX_TABLE} GROUP BY 1 ORDER BY n DESC, 1"),
            tokenizers=counts(f"SELECT tokenizer, count(*) AS n FROM {INDEX_TABLE} WHERE tokenizer IS NOT NULL "
                              "GROUP BY 1 ORDER BY n DESC, 1 LIMIT 8"),
            gap_flags=counts(f"SELECT g, count(*) AS n FROM (SELECT unnest(gaps) AS g FROM {INDEX_TABLE}) "
                             "GROUP BY 1 ORDER BY n DESC, 1"),
            runs=runs, run_versions={r: versions.get(r) for r in runs}, annotated_runs=annotated,
            built_at=time.time(), build_s=time.perf_counter() - t0)
        with self.lock:
            old, self.conn, self.base_where, self.snapshot = self.conn, conn, base_where, snap
        if old is not None:
            old.close()
        return snap

    RUN_TABLES_KEPT = 4
    """Runs whose staleness tables are kept at once (each a copy of the index plus two columns)."""

    def run_table(self, run: str) -> str:
        """The index with two more columns for `run`: ``staleness`` (the trainer version the run
        trained the trajectory at, or the run's newest version when it has not, minus the
        trajectory's oldest policy version; versions) and ``trained_step`` (the run's step that
        trained it, null when none did). Built on first use per snapshot (a join of the index with
        the run's consumption records, once), so that sorting and filtering by staleness is a
        query over one table.

        Raises:
            KeyError: `run` is not a run of the store.
        """
        snap = self.snapshot
        if run not in snap.runs:
            raise KeyError(run)
        with self.lock:
            name = snap.run_tables.get(run)
            if name is None:
                name = f"_view_run_{abs(hash((run, snap.built_at))) % 10**12}"
                self.conn.execute(
                    f"CREATE TEMP TABLE {name} AS SELECT i.*, coalesce(r.tv, CAST(? AS BIGINT)) - i.min_policy_version "
                    f"AS staleness, r.step AS trained_step FROM {INDEX_TABLE} i LEFT JOIN (SELECT trajectory_id, "
                    f"max(trainer_version) AS tv, max(step) AS step FROM consumed WHERE run_id = ? "
                    f"GROUP BY trajectory_id) r USING (trajectory_id)", [snap.run_versions.get(run), run])
                if len(snap.run_tables) >= self.RUN_TABLES_KEPT:
                    oldest = next(iter(snap.run_tables))
                    self.conn.execute(f"DROP TABLE {snap.run_tables.pop(oldest)}")
                snap.run_tables[run] = name
            return name

    def episode_table(self) -> str:
        """The episodes of every trajectory of the index (``ek`` and :data:`EPISODE_AGGREGATES`),
        built on first use per snapshot."""
        snap = self.snapshot
        with self.lock:
            if not snap.episodes_built:
                self.conn.execute(f"CREATE OR REPLACE TEMP TABLE {EPISODES_TABLE} AS SELECT ek, {EPISODE_AGGREGATES} "
                                  f"FROM {INDEX_TABLE} GROUP BY ek")
                snap.episodes_built = True
        return EPISODES_TABLE

    def query(self, sql: str, params: Sequence[Any] = ()) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Columns and rows of one read-only query on the connection (serialised)."""
        with self.lock:
            rel = self.conn.execute(sql, list(params))
            cols = [d[0] for d in rel.description]
            return cols, rel.fetchall()

    def close(self) -> None:
        with self.lock:
            if self.conn is not None:
                self.conn.close()
                self.conn = None
