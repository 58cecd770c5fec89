"""Fetching trajectories by id: :func:`read_trajectories_by_id` finds the rows from each shard's
footer id index and decodes only the row groups that hold them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trajstore.convert import read_columns, upgrade_table
from trajstore.reader.files import StoreLike, as_store, file_version, open_shard, relisting, skip_or_raise
from trajstore.reader.id_lookup import IdLookup, lookup_for, sorted_unique
from trajstore.schema import TRAJECTORY_SCHEMA
from trajstore.store import ShardInfo, Store
from trajstore.store.compaction_records import ShardGone


def read_trajectories_by_id(uri: StoreLike, ids: Sequence[str], *, columns: Sequence[str] | None = None,
                            storage_options: dict[str, Any] | None = None, strict: bool = False) -> pa.Table:
    """The trajectories with the given ids (first stored copy of each), in arrival order; ids
    not in the store are absent from the result.

    The rows are found in the process's merged id index of the store
    (:mod:`trajstore.reader.id_lookup`, built once from the shard index and kept current as
    shards come and go): shards without a wanted id are never opened, each shard holding some
    is opened once and only the row groups holding a wanted row are decoded (a shard without
    an id index, e.g. one written before it existed, has its ``trajectory_id`` column read
    instead). A warm fetch costs a binary search and the row-group reads: it grows with the
    number of ids asked for and the row-group size (``ROW_GROUP_TARGET_MB``), not with the
    store. An id the lookup misses costs one listing of the store (it may be in a new shard).

    Args:
        ids: trajectory ids to fetch.
        columns: subset of schema columns (``trajectory_id`` is always included).

    Raises:
        CorruptShardError: with ``strict=True``, on the first unreadable shard.
        ValueError: a name in `columns` is not a schema column.
    """
    store = as_store(uri, storage_options)
    cols = list(dict.fromkeys(["trajectory_id", *(columns if columns is not None else TRAJECTORY_SCHEMA.names)]))
    unknown = [c for c in cols if c not in TRAJECTORY_SCHEMA.names]
    if unknown:
        raise ValueError(f"unknown column(s) {unknown}; the trajectory schema has {TRAJECTORY_SCHEMA.names}")
    return relisting(lambda: _fetch(store, list(ids), cols, strict=strict), "read_trajectories_by_id")


def _fetch(store: Store, ids: list[str], cols: list[str], *, strict: bool) -> pa.Table:
    lookup, built = lookup_for(store, strict=strict)
    try:
        table, complete = _fetch_with(store, lookup, ids, cols, strict=strict)
        if complete or (built and lookup.verified):
            return table
        # an id missed: a shard added since the lookup was built may hold it (or a rewrite moved it)
        lookup, _ = lookup_for(store, strict=strict, rebuild=True)
        return _fetch_with(store, lookup, ids, cols, strict=strict)[0]
    except ShardGone:
        lookup_for(store, strict=strict, rebuild=True)  # a compaction deleted a shard: the retry uses a new listing
        raise


def _fetch_with(store: Store, lookup: IdLookup, ids: list[str], cols: list[str], *, strict: bool
                ) -> tuple[pa.Table, bool]:
    """(the first stored copy of each of `ids` the lookup finds, in arrival order; whether every
    id was found). Rows are read row group by row group, each shard opened once."""
    wanted = dict.fromkeys(ids)
    parts: list[pa.Table] = []
    for s, rows in lookup.candidates(list(wanted)).items():
        if not wanted:
            break
        shard = lookup.shards[s]
        try:
            got = _rows_of(store, shard, rows, wanted, cols)
        except (OSError, pa.ArrowException) as e:
            skip_or_raise(store, shard, e, strict=strict, stacklevel=3)
            continue
        if got is not None:
            parts.append(got)
            for t in got.column("trajectory_id").to_pylist():
                wanted.pop(t, None)
    table = pa.concat_tables(parts) if parts else TRAJECTORY_SCHEMA.empty_table().select(cols)
    return table, not wanted


def _positions(rows: np.ndarray | list[int]) -> pa.Array:
    """int64 Arrow array of row positions for ``take``, built from its buffer: ``pa.array`` (and
    ``take`` of a numpy array) imports pandas on first use, about 0.7 s of a new process's
    first fetch (``traj show``)."""
    values = np.ascontiguousarray(rows, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


FETCH_BATCH_ROWS = 64
"""Rows decoded at a time while fetching from a row group: decoding stops after the last wanted row."""


def _rows_of_group(pf: pq.ParquetFile, rg: int, columns: list[str], local: np.ndarray) -> pa.Table:
    """Rows `local` (sorted, within row group `rg`) of `columns`. Parquet pages are decoded in
    order, so when the last wanted row lies in the first half of the row group it is decoded in
    batches of :data:`FETCH_BATCH_ROWS` up to that row only (a row near the start costs a fraction
    of the row group); otherwise the row group is decoded at once (threads, no batch overhead)."""
    last = int(local[-1])
    if last >= pf.metadata.row_group(rg).num_rows // 2:
        return pf.read_row_group(rg, columns=columns).take(_positions(local))
    parts, seen = [], 0
    for batch in pf.iter_batches(batch_size=FETCH_BATCH_ROWS, row_groups=[rg], columns=columns, use_threads=False):
        lo, hi = seen, seen + batch.num_rows
        mine = local[(local >= lo) & (local < hi)] - lo
        if len(mine):
            parts.append(batch.take(_positions(mine)))
        seen = hi
        if seen > last:
            break
    return pa.Table.from_batches(parts)


def _rows_of(store: Store, shard: ShardInfo, candidates: np.ndarray | None, wanted: dict[str, None],
             cols: list[str]) -> pa.Table | None:
    """The first row of each wanted id in one shard (`candidates`: rows that may hold one, from
    the id index; None = find them from the shard's ``trajectory_id`` column)."""
    pf = open_shard(store, shard)
    version = file_version(pf, shard)  # the listing's version and row groups may predate a migrate
    if candidates is None:
        shard_ids = pf.read(columns=["trajectory_id"]).column("trajectory_id")
        hit = pc.is_in(shard_ids, value_set=pa.array(list(wanted), pa.string())).to_numpy(zero_copy_only=False)
        candidates = np.flatnonzero(hit)
        if not len(candidates):
            return None
    bounds = np.cumsum([0, *(pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups))])
    read = read_columns(cols, version)
    present = set(pf.schema_arrow.names)
    read = [c for c in read if c in present]
    out = []
    for rg in sorted_unique(np.sort(np.searchsorted(bounds, candidates, side="right") - 1)).tolist():
        local = candidates[(candidates >= bounds[rg]) & (candidates < bounds[rg + 1])] - bounds[rg]
        out.append(_rows_of_group(pf, rg, read, local))
    table = upgrade_table(pa.concat_tables(out), version, columns=cols)
    # exact ids (a hash can collide), first copy inside the shard
    tids = table.column("trajectory_id").to_pylist()
    seen: set[str] = set()
    keep = [i for i, t in enumerate(tids) if t in wanted and not (t in seen or seen.add(t))]
    return table.take(_positions(keep)) if keep else None
