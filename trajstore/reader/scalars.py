"""Reading only scalar columns through the store's scalar cache (:mod:`trajstore.store.scalar_cache`):
what :func:`~trajstore.reader.read.read_trajectories` does when every column asked for is in
:data:`~trajstore.schema.SCALAR_COLUMNS` (rewards, statuses, counts, ids, metadata)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from trajstore.reader.files import version_runs
from trajstore.reader.shard_tables import read_run, read_shards_one_by_one
from trajstore.schema import SCALAR_COLUMNS
from trajstore.store import ShardInfo, Store, scalar_cache
from trajstore.store.scalar_cache import CACHE_SCHEMA, Key

ALL_SCALARS = list(SCALAR_COLUMNS)


def is_scalar_read(cols: Sequence[str] | None) -> bool:
    """Whether a read of `cols` can be served by the scalar cache."""
    return cols is not None and set(cols) <= set(SCALAR_COLUMNS)


def read_scalars(store: Store, shards: Sequence[ShardInfo], cols: list[str], *, strict: bool) -> pa.Table:
    """`cols` of the listed `shards`, rows in listing order and file order (duplicates kept, as
    :func:`~trajstore.reader.shard_tables.read_run` returns them). Shards the cache covers are taken from
    it; the others are read from their files (every scalar column, converted to the current
    schema version) and then added to the cache.

    Raises:
        CorruptShardError: with ``strict``, a shard the cache lacks cannot be decoded.
        ShardGone: a shard the cache lacks was deleted after the listing (a compaction).
    """
    hits, files = scalar_cache.load(store)
    keys: list[Key] = [(s.name, s.size_bytes) for s in shards]
    for s, k in zip(shards, keys):
        if k in hits and hits[k][2] != s.num_rows:  # a damaged or forged entry: read the shard instead
            del hits[k]
    fresh = _read_missing(store, [s for s, k in zip(shards, keys) if k not in hits], strict=strict)

    tables: dict[str, pa.Table] = {}
    for path in dict.fromkeys(hits[k][0] for k in keys if k in hits and k not in fresh):
        try:
            tables[path] = scalar_cache.read_file(store, path, cols)
        except (OSError, pa.ArrowException):  # merged away meanwhile, damaged: read those shards instead
            gone = [s for s, k in zip(shards, keys) if k in hits and hits[k][0] == path and k not in fresh]
            fresh.update(_read_missing(store, gone, strict=strict))

    # (source, first row, rows) per shard, adjacent runs of one source merged into one slice
    pieces: list[list] = []
    for k in keys:
        if k in fresh:
            src, start, rows = ("fresh", k), 0, fresh[k].num_rows
        elif k in hits and hits[k][0] in tables:
            src, start, rows = hits[k]
        else:
            continue  # unreadable, skipped with a warning by _read_missing
        if pieces and pieces[-1][0] == src and pieces[-1][1] + pieces[-1][2] == start:
            pieces[-1][2] += rows
        else:
            pieces.append([src, start, rows])
    parts = [(fresh[src[1]].select(cols) if isinstance(src, tuple) else tables[src]).slice(start, rows)
             for src, start, rows in pieces]
    replaced = frozenset(n for s in shards for p in s.parts for n in p.names())  # compacted away
    scalar_cache.update(store, list(fresh.items()), keys, hits, files, replaced)
    if not parts:
        return CACHE_SCHEMA.empty_table().select(cols)
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


def _read_missing(store: Store, shards: list[ShardInfo], *, strict: bool) -> dict[Key, pa.Table]:
    """Every scalar column of each of `shards` (of :data:`CACHE_SCHEMA`), by (name, size); a
    shard that cannot be decoded is left out with a warning (raised with `strict`)."""
    out: dict[Key, pa.Table] = {}
    for version, run in version_runs(shards):
        try:
            table = read_run(store, version, run, ALL_SCALARS)
        except (OSError, pa.ArrowException):
            table = None  # damaged data pages somewhere in the run: shard by shard below
        if table is not None and table.num_rows == sum(s.num_rows for s in run):
            offset = 0
            for s in run:
                out[(s.name, s.size_bytes)] = table.slice(offset, s.num_rows).select(ALL_SCALARS).cast(CACHE_SCHEMA)
                offset += s.num_rows
            continue
        for s in run:
            t = read_shards_one_by_one(store, [s], ALL_SCALARS, strict=strict)
            if t.num_rows or not s.num_rows:
                out[(s.name, s.size_bytes)] = t.select(ALL_SCALARS).cast(CACHE_SCHEMA)
    return out
