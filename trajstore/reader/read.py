"""Eager reading into Arrow: :func:`read_trajectories` (the whole store as one table of the current schema)
and :func:`count_duplicates`; a shard whose data cannot be decoded is found shard by shard and
skipped with a warning (or raised with ``strict``). One shard: :func:`~trajstore.reader.shard_tables.read_shard`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from trajstore.reader.dedupe import first_copy_mask
from trajstore.reader.files import StoreLike, as_store, version_runs
from trajstore.reader.planned import iter_planned_tables
from trajstore.reader.scalars import is_scalar_read, read_scalars
from trajstore.reader.shard_tables import read_run, read_shards_one_by_one
from trajstore.schema import TRAJECTORY_SCHEMA
from trajstore.store import Store
from trajstore.store.compaction_records import ShardGone
from trajstore.store.layout import TRAJECTORIES_DIR


def read_trajectories(uri: StoreLike, *, columns: Sequence[str] | None = None,
                      storage_options: dict[str, Any] | None = None, strict: bool = False,
                      dedupe: bool = True) -> pa.Table:
    """Every trajectory in the store as one Arrow table of the current schema (rows in arrival order).

    Args:
        columns: subset of schema columns to read (``trajectory_id`` is always included). When
            every one is a scalar column (:data:`~trajstore.schema.SCALAR_COLUMNS`), the rows come
            from the store's scalar cache where it has them (:mod:`trajstore.store.scalar_cache`;
            the first such read of a shard reads its file and adds it to the cache).

    A shard whose footer cannot be read, or whose data pages cannot be decoded, is skipped
    with a :class:`~trajstore.store.CorruptShardWarning` naming it. Schema-v1 shards are
    converted (see :func:`trajstore.convert.upgrade_table`).

    A compaction running meanwhile changes nothing: when a shard it deleted after the listing is
    met, the read goes on from a new listing with the rows the compaction's output holds that
    were not read yet.

    Raises:
        CorruptShardError: with ``strict=True``, on the first unreadable shard.
        ValueError: a name in `columns` is not a schema column.
    """
    store = as_store(uri, storage_options)
    cols = None if columns is None else list(dict.fromkeys(["trajectory_id", *columns]))
    if cols is not None:
        unknown = [c for c in cols if c not in TRAJECTORY_SCHEMA.names]
        if unknown:
            raise ValueError(f"unknown column(s) {unknown}; the trajectory schema has {TRAJECTORY_SCHEMA.names}")
    try:
        return _read_store(store, cols, strict=strict, dedupe=dedupe)
    except ShardGone:  # a compaction deleted a listed shard meanwhile: read on from where the read was
        return read_progressively(store, cols, strict=strict, dedupe=dedupe)


def read_progressively(store: Store, cols: list[str] | None, *, strict: bool, dedupe: bool) -> pa.Table:
    """The whole store read row group by row group with a progress that survives compactions
    (:func:`~trajstore.reader.planned.iter_planned_tables`); same result as :func:`read_trajectories`."""
    parts = [t for _, _, t in iter_planned_tables(store, columns=cols, strict=strict, dedupe=dedupe)]
    if not parts:
        t = TRAJECTORY_SCHEMA.empty_table()
        return t.select(cols) if cols else t
    return pa.concat_tables(parts)


def _read_store(store: Store, cols: list[str] | None, *, strict: bool, dedupe: bool) -> pa.Table:
    shards = store.list_shards(TRAJECTORIES_DIR, strict=strict)
    if not shards:
        t = TRAJECTORY_SCHEMA.empty_table()
        return t.select(cols) if cols else t
    try:
        if is_scalar_read(cols):
            table = read_scalars(store, shards, cols, strict=strict)
        else:
            parts = [read_run(store, v, run, cols) for v, run in version_runs(shards)]
            table = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
    except (OSError, pa.ArrowException):
        # A footer that reads but damaged data pages: find the culprit(s) shard by shard.
        table = read_shards_one_by_one(store, shards, cols, strict=strict)
    if dedupe and table.num_rows:
        keep = first_copy_mask(table.column("trajectory_id"))
        if keep is not None:
            table = table.filter(pa.array(keep))
    return table


def count_duplicates(uri: StoreLike, *, storage_options: dict[str, Any] | None = None) -> int:
    """Rows whose ``trajectory_id`` already appeared earlier in arrival order (dropped by readers)."""
    t = read_trajectories(uri, columns=["trajectory_id"], storage_options=storage_options, dedupe=False)
    return t.num_rows - pc.count_distinct(t.column("trajectory_id")).as_py()
