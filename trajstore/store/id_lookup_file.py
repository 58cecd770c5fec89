"""The merged id lookup kept in the store: every trajectory shard's footer id index
(:mod:`trajstore.store.id_index`) merged into one sorted ``(id hash, shard, row)`` table, so that a
new process finds any trajectory by id without decoding a thousand id indexes and sorting a
million hashes (0.4 s at a million trajectories; reading this file costs a few ms).

Layout: ``trajectories/_index/ids/<utc ns>-<host>-<pid>-<random>.ids``, each an Arrow IPC file
(uncompressed, memory-mapped on read: no decoding) of :data:`LOOKUP_SCHEMA` in one record batch,
sorted by hash. The schema metadata key :data:`COVER_KEY` lists the shards it covers as JSON
``[[name, size, rows, indexed], ...]``; an entry's ``shard`` is a position in that list. Shards
are keyed by **name and size**, as the shard index's and the scalar cache's: a shard never
changes once written and an in-place rewrite (``traj migrate``, ``traj redact``) makes it
larger, so the entries of a rewritten shard never match it again.

A reader (:func:`trajstore.reader.id_lookup.build`) takes the newest readable file as a base,
keeps the entries of the shards it still lists, decodes only the id indexes of the shards the
file lacks, and writes a new file (then deletes the older ones) when the shards differ. Files
are only ever added, each atomically, so readers and writers need no lock. The file is a cache:
a missing, damaged or stale file costs a rebuild from the shard index, never a wrong row (a
fetch compares each row's ``trajectory_id`` with the id asked for; a miss rebuilds without the
file). Delete ``trajectories/_index/`` to rebuild it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.ipc  # noqa: F401 - pa.ipc

from trajstore.store.fsutil import list_cache_files, remove_merged
from trajstore.store.layout import ID_LOOKUP_SUFFIX, SHARD_SUFFIX, id_lookup_dir, id_lookup_file, new_shard_name

if TYPE_CHECKING:
    from trajstore.store.handle import Store

LOOKUP_SCHEMA = pa.schema([
    pa.field("hash", pa.uint64(), nullable=False),
    pa.field("shard", pa.int32(), nullable=False),
    pa.field("row", pa.uint32(), nullable=False),
])
"""One row per stored trajectory row: its id hash (:func:`trajstore.store.id_hashes`), its shard
(a position in the file's cover) and its row in that shard; sorted by hash."""
NUMPY_TYPES = (np.uint64, np.int32, np.uint32)
"""The numpy types of :data:`LOOKUP_SCHEMA`'s columns."""
COVER_KEY = b"trajstore.id_lookup.shards"
"""Schema metadata key: JSON ``[[shard name, size in bytes, rows, indexed (0/1)], ...]``."""

Key = tuple[str, int]
"""(shard file name, size in bytes)."""


@dataclass(frozen=True)
class StoredLookup:
    """A merged id lookup read from (or about to be written to) the store.

    Attributes:
        cover: (name, size, rows, indexed) of each shard covered, in the order ``shard`` indexes.
        hashes: uint64 (n,) sorted. shard_of: int32 (n,). row_of: uint32 (n,).
        path: the file it was read from (None when not read from one).
    """

    cover: list[tuple[str, int, int, bool]]
    hashes: np.ndarray
    shard_of: np.ndarray
    row_of: np.ndarray
    path: str | None = None


def list_files(store: Store) -> list[tuple[str, int]]:
    """(path, size) of the lookup's files, oldest first."""
    return list_cache_files(store.fs, store.path(id_lookup_dir()), ID_LOOKUP_SUFFIX, refresh=not store.is_local)


def _read(store: Store, path: str) -> StoredLookup:
    if store.is_local:
        with pa.memory_map(path) as src:
            t = pa.ipc.open_file(src).read_all()
    else:
        t = pa.ipc.open_file(pa.py_buffer(store.fs.cat_file(path))).read_all()
    if not t.schema.remove_metadata().equals(LOOKUP_SCHEMA):
        raise ValueError("not an id lookup file of this layout")
    cover = [(str(n), int(s), int(r), bool(i)) for n, s, r, i in json.loads((t.schema.metadata or {})[COVER_KEY])]
    t = t.combine_chunks()
    cols = [_values(t.column(c).chunk(0), dtype) if t.num_rows else np.empty(0, dtype)
            for c, dtype in zip(LOOKUP_SCHEMA.names, NUMPY_TYPES)]
    got = StoredLookup(cover, cols[0], cols[1], cols[2], path)
    problem = check(got)
    if problem:
        raise ValueError(problem)
    return got


def _values(array: pa.Array, dtype: type) -> np.ndarray:
    """The values of a primitive array without nulls, zero-copy (``Array.to_numpy`` imports
    pandas on first use: 0.5-1.5 s of a new process's first fetch)."""
    width = np.dtype(dtype).itemsize
    return np.frombuffer(array.buffers()[1], dtype, count=len(array), offset=array.offset * width)


def check(lookup: StoredLookup) -> str | None:
    """Why `lookup` cannot be right (None when it may be): hashes out of order, a shard position
    outside the cover, a row past its shard's end, or a shard with another number of entries
    than it has rows. What this cannot see (two rows swapped) costs a rebuild at fetch time."""
    h, s, r = lookup.hashes, lookup.shard_of, lookup.row_of
    if not (len(h) == len(s) == len(r)):
        return "columns of different lengths"
    if len(h) > 1 and bool((h[1:] < h[:-1]).any()):
        return "hashes not sorted"
    rows = np.asarray([c[2] if c[3] else 0 for c in lookup.cover], np.int64)
    if len(s) and (int(s.min()) < 0 or int(s.max()) >= len(rows)):
        return "a shard outside the cover"
    if not np.array_equal(np.bincount(s, minlength=len(rows)), rows):
        return "a shard's entries do not match its rows"
    if len(r) and bool((r.astype(np.int64) >= rows[s]).any()):
        return "a row past its shard's end"
    return None


def load(store: Store) -> tuple[StoredLookup | None, list[tuple[str, int]]]:
    """The newest readable lookup file of the store (None when there is none, or none that
    passes :func:`check`) and every lookup file found."""
    files = list_files(store)
    for path, _ in reversed(files):
        try:
            return _read(store, path), files
        except (OSError, pa.ArrowException, ValueError, KeyError, TypeError):
            continue  # merged away meanwhile, damaged: an older one, or a rebuild
    return None, files


def save(store: Store, lookup: StoredLookup, files: list[tuple[str, int]]) -> str | None:
    """Add one file holding `lookup`, then delete `files` (the ones it replaces). None (nothing
    written) when the store cannot be written: the lookup is a cache."""
    meta = {COVER_KEY: json.dumps([[n, s, r, int(i)] for n, s, r, i in lookup.cover], separators=(",", ":")).encode()}
    batch = pa.record_batch([pa.Array.from_buffers(f.type, len(a), [None, pa.py_buffer(np.ascontiguousarray(a))])
                             for a, f in zip((lookup.hashes, lookup.shard_of, lookup.row_of), LOOKUP_SCHEMA)],
                            schema=LOOKUP_SCHEMA.with_metadata(meta))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, batch.schema) as w:
        w.write_batch(batch)
    try:
        written = store.write_bytes(id_lookup_file(new_shard_name().removesuffix(SHARD_SUFFIX) + ID_LOOKUP_SUFFIX),
                                    sink.getvalue().to_pybytes())
    except Exception:  # noqa: BLE001 - read-only store, full disk: the lookup was built anyway
        return None
    remove_merged(store.fs, [p for p, _ in files if p != written], written, "id lookup")
    return written
