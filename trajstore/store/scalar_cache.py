"""The scalar cache: the scalar columns (:data:`~trajstore.schema.SCALAR_COLUMNS`, everything but
``tokens``, the log-probs and ``spans``) of many trajectory shards in one file, kept beside the
shard index, so that reading those columns from the whole store decodes a few dozen buffers
instead of one Parquet column chunk per column, row group and shard (28 x 3 x 20 for 20,000
trajectories in 1,024-row shards; bench/RESULTS.md, "scan scalars").

Layout: ``trajectories/_index/scalars/<utc ns>-<host>-<pid>-<random>.scalars``, each file a
Parquet file (zstd, one row group: a few column chunks in all; not named ``.parquet``, so that no
engine globbing the store for shards takes it for one) of :data:`CACHE_SCHEMA`: the rows of each shard it covers in
file order (duplicates kept, older schema versions already converted), shard after shard. The
footer key :data:`COVER_KEY` lists the covered shards as JSON ``[[name, size, rows],
...]`` in row order. Entries are keyed by the shard's **name and size**, as the shard index's:
a shard never changes once written, and an in-place rewrite (``traj migrate``, ``traj redact``)
always makes it larger (:func:`trajstore.store.rewrite.rewrite_shard` pads it), so an entry of any
earlier content never matches again. A read adds only the shards whose name and size it lists
again after reading them (one listing), so a shard rewritten meanwhile is not added.

Files are only ever added, each atomically, and merged like the index's: a scalar read that
finds shards the cache lacks reads them from their shards and adds one file with their rows; one
that finds more than :data:`MAX_CACHE_FILES` files writes one file with the rows of every shard
it listed, then deletes the files it merged. Entries of shards that are gone (compacted, deleted
by ``traj gc``) are dropped at the next merge. A read that finds :data:`MAX_FILES_UNMERGED` files
(merges failing: a store that takes writes but refuses deletes) adds none. The cache is a cache: a missing, stale or
unreadable file costs shard reads, never a wrong result; a store that cannot be written is read
without it. Delete ``trajectories/_index/`` to rebuild it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from trajstore.errors import StoreError
from trajstore.schema import SCALAR_COLUMNS, TRAJECTORY_SCHEMA
from trajstore.store.encoding import VERIFY_PAGE_CHECKSUMS
from trajstore.store.fsutil import ParsedFiles, list_cache_files, remove_merged, why
from trajstore.store.layout import (
    SCALAR_CACHE_SUFFIX,
    SHARD_SUFFIX,
    TRAJECTORIES_DIR,
    new_shard_name,
    scalar_cache_dir,
    scalar_cache_file,
)

if TYPE_CHECKING:
    from trajstore.store.handle import Store

MAX_CACHE_FILES = 16
"""A scalar read that finds more cache files than this merges them into one."""
MAX_FILES_UNMERGED = 2 * MAX_CACHE_FILES
"""A scalar read that finds this many cache files adds none: merging is failing (deletes refused)."""
CACHE_SCHEMA = pa.schema([TRAJECTORY_SCHEMA.field(c).remove_metadata() for c in SCALAR_COLUMNS])
"""The scalar columns in the current schema version's types, without their docs."""
COVER_KEY = b"trajstore.scalar_cache.shards"
"""Schema metadata key of a cache file: JSON ``[[shard name, size in bytes, rows], ...]`` in row order."""

Key = tuple[str, int]
"""(shard file name, size in bytes)."""
Hit = tuple[str, int, int]
"""(cache file path, first row in it, rows) of one shard."""



def _list_files(store: Store) -> list[tuple[str, int]]:
    return list_cache_files(store.fs, store.path(scalar_cache_dir()), SCALAR_CACHE_SUFFIX, refresh=not store.is_local)


def _open(store: Store, path: str) -> pq.ParquetFile:
    return pq.ParquetFile(path if store.is_local else pa.py_buffer(store.fs.cat_file(path)),
                          page_checksum_verification=VERIFY_PAGE_CHECKSUMS)


def _cover_of(store: Store, path: str) -> list[tuple[str, int, int]]:
    with _open(store, path) as pf:
        schema, rows = pf.schema_arrow, pf.metadata.num_rows
    if not schema.remove_metadata().equals(CACHE_SCHEMA):
        raise ValueError("not a scalar cache file of this schema version")
    cover = json.loads((schema.metadata or {})[COVER_KEY])
    out = [(str(n), int(s), int(r)) for n, s, r in cover]
    if sum(r for _, _, r in out) != rows:
        raise ValueError("the covered shards' rows do not add up to the file's rows")
    return out


_COVERS = ParsedFiles(_cover_of, (OSError, pa.ArrowException, ValueError, KeyError, TypeError))
"""The covered shards of each cache file this process read (the rows themselves are read when
needed, never kept: at a million trajectories they are ~100 MB)."""


def load(store: Store) -> tuple[dict[Key, Hit], list[tuple[str, int]]]:
    """Where each covered shard's rows are, by (shard name, size), and the cache files found. A
    file that cannot be read (merged away meanwhile, damaged, another schema version) is left
    out; a shard covered by two files is taken from the newest (a reader that found an entry not
    matching its shard wrote a newer one)."""
    files = _list_files(store)
    out: dict[Key, Hit] = {}
    for path, size in reversed(files):  # names sort by write time: newest first
        cover = _COVERS.get(store, path, size)
        if cover is None:
            continue
        offset = 0
        for name, shard_size, rows in cover:
            out.setdefault((name, shard_size), (path, offset, rows))
            offset += rows
    return out, files


def read_file(store: Store, path: str, columns: list[str]) -> pa.Table:
    """`columns` (scalar column names) of one cache file, decoding only those.

    Raises:
        OSError, pyarrow.ArrowException: the file is gone or damaged.
    """
    with _open(store, path) as pf:
        return pf.read(columns=columns).replace_schema_metadata(None)


def _write(store: Store, parts: list[tuple[Key, pa.Table]]) -> str | None:
    """Add one cache file with `parts` (each a shard's rows, :data:`CACHE_SCHEMA`); None when the
    store cannot be written (the rows were read anyway)."""
    cover = [[name, size, t.num_rows] for (name, size), t in parts]
    schema = CACHE_SCHEMA.with_metadata({COVER_KEY: json.dumps(cover, separators=(",", ":")).encode()})
    table = pa.concat_tables([t for _, t in parts]).cast(CACHE_SCHEMA).replace_schema_metadata(schema.metadata)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=max(1, table.num_rows), compression="zstd", write_statistics=False,
                   write_page_checksum=True)
    try:
        return store.write_bytes(scalar_cache_file(new_shard_name().removesuffix(SHARD_SUFFIX) + SCALAR_CACHE_SUFFIX),
                                 sink.getvalue().to_pybytes())
    except Exception:  # noqa: BLE001 - read-only store, full disk: the cache is only a cache
        return None


def update(store: Store, fresh: list[tuple[Key, pa.Table]], listed: list[Key], hits: dict[Key, Hit],
           files: list[tuple[str, int]], replaced: frozenset[str] = frozenset()) -> None:
    """After a scalar read: add the rows of the shards read from their files (`fresh`, each of
    :data:`CACHE_SCHEMA`); or, when that would make more than :data:`MAX_CACHE_FILES` files or
    the cache holds a shard the listing shows is gone (`replaced` by a compaction, or not listed
    though older than the listing's newest shard: deleted, rewritten), write one
    file with the rows of every shard `listed` (from `fresh` and the cache `hits`) and delete
    the files merged, so a deleted trajectory's scalars do not outlive its shard in the cache."""
    if len(files) >= MAX_FILES_UNMERGED:
        return  # merges are not succeeding (a store that takes writes but refuses deletes): add nothing
    if fresh:  # a shard rewritten (traj redact) or deleted while it was read is not added
        now = {p.rsplit("/", 1)[-1]: n for p, n in store.shard_paths(TRAJECTORIES_DIR)}
        fresh = [(k, t) for k, t in fresh if now.get(k[0]) == k[1]]
    # an unlisted entry newer than this listing was added by a reader that listed later: not stale
    listed_set, newest = set(listed), max((name for name, _ in listed), default="")
    stale = any(k not in listed_set and (k[0] <= newest or k[0] in replaced) for k in hits)
    if not stale and len(files) + (1 if fresh else 0) <= MAX_CACHE_FILES:
        if fresh:
            _write(store, fresh)
        return
    new = dict(fresh)
    try:
        tables = {path: read_file(store, path, list(CACHE_SCHEMA.names)) for path in {hits[k][0] for k in listed
                                                                                    if k in hits and k not in new}}
    except (OSError, pa.ArrowException):
        return  # a file merged away by another process meanwhile: the next read merges
    merged = [(k, new[k] if k in new else tables[hits[k][0]].slice(hits[k][1], hits[k][2]))
              for k in listed if k in new or k in hits]
    written = _write(store, merged) if merged else None
    if merged and written is None:
        return
    remove_merged(store.fs, [p for p, _ in files], written, "scalar cache")


def clear(store: Store) -> int:
    """Delete every cache file (``traj redact`` and ``traj gc`` do after changing shards, so that no
    copy of a redacted or deleted trajectory's scalars stays behind); return how many. A scalar
    read running meanwhile may still add a file of what it read before: its entries match no
    shard any more and the next scalar read's merge drops them.

    Raises:
        StoreError: a file could not be deleted (it may hold what was redacted or deleted).
    """
    removed = 0
    for path, _ in _list_files(store):
        try:
            store.fs.rm_file(path)
            removed += 1
        except FileNotFoundError:
            pass
        except Exception as e:  # noqa: BLE001 - no delete permission, unreachable endpoint
            raise StoreError(f"could not delete scalar cache file {store.url_of(path)}, which may still hold the "
                             f"scalar columns (metadata included) of changed trajectories: {why(e)}; delete "
                             f"{store.url(scalar_cache_dir())} by hand") from e
    return removed
