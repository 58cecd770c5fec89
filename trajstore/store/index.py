"""The shard index: the footer facts of every trajectory shard (rows, row groups, schema version,
columns, id index), kept in the store so a process lists a store of a million trajectories
without parsing a thousand footers.

Layout: ``trajectories/_index/<utc ns>-<host>-<pid>-<random>.arrow``, each file an Arrow IPC
table (uncompressed, memory-mapped on read: no decoding) of
entries (:data:`INDEX_SCHEMA`), one per shard, keyed by the shard's **name and size**: shards
never change once written (``traj migrate``'s rewrite changes the size, so its old entry no
longer matches). Files are only ever added, each atomically (one PUT, or temp + rename), so any
number of writers and readers can use the index at once:

- a listing reads the index files it has not read yet (each once per process), uses the entries
  that match a listed (name, size), reads the footers of the other shards and adds one index
  file with their facts (a process that cannot write the store just reads the footers);
- a listing that finds more than :data:`MAX_INDEX_FILES` files writes one file holding the
  entries of the shards it listed, then deletes the files it merged (a reader that listed them
  meanwhile and finds one gone reads those footers instead).

A listing that finds :data:`MAX_FILES_UNMERGED` files (merges failing: a store that takes writes
but refuses deletes) adds none. The index is a cache: a missing, stale or unreadable file costs
footer reads, never a wrong listing. Delete ``trajectories/_index/`` to rebuild it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.ipc  # noqa: F401 - pa.ipc

from trajstore.store.fsutil import ParsedFiles, list_cache_files, remove_merged
from trajstore.store.layout import INDEX_SUFFIX, SHARD_SUFFIX, new_shard_name, shard_index_dir, shard_index_file

if TYPE_CHECKING:
    from trajstore.store.handle import Store
    from trajstore.store.shards import ShardInfo

MAX_INDEX_FILES = 16
"""A listing that finds more index files than this merges them into one."""
MAX_FILES_UNMERGED = 2 * MAX_INDEX_FILES
"""A listing that finds this many index files adds none: merging is failing (deletes refused)."""
INDEX_SCHEMA = pa.schema([
    pa.field("name", pa.string(), nullable=False),
    pa.field("size", pa.int64(), nullable=False),
    pa.field("num_rows", pa.int64(), nullable=False),
    pa.field("num_row_groups", pa.int64(), nullable=False),
    pa.field("schema_version", pa.int64(), nullable=False),
    pa.field("columns", pa.string(), nullable=False),
    pa.field("row_group_rows", pa.list_(pa.int64()), nullable=False),
    pa.field("id_index", pa.binary()),
])
"""One row per shard: its file name and size (the key) and the footer facts of :class:`ShardInfo`
(``columns``: the top-level column names joined by :data:`COLUMN_SEP`)."""
COLUMN_SEP = "\n"

Entry = tuple[int, int, int, tuple[str, ...], tuple[int, ...], bytes | None]
"""(num_rows, num_row_groups, schema_version, columns, row_group_rows, id_index) of one shard."""



def _list_files(store: Store) -> list[tuple[str, int]]:
    return list_cache_files(store.fs, store.path(shard_index_dir()), INDEX_SUFFIX, refresh=not store.is_local)


def _read_file(store: Store, path: str) -> dict[tuple[str, int], Entry]:
    if store.is_local:
        with pa.memory_map(path) as src:
            t = pa.ipc.open_file(src).read_all()
    else:
        t = pa.ipc.open_file(pa.py_buffer(store.fs.cat_file(path))).read_all()
    if not t.schema.equals(INDEX_SCHEMA):
        raise ValueError("not a shard index file of this layout")
    c = {name: t.column(name).to_pylist() for name in INDEX_SCHEMA.names}
    split: dict[str, tuple[str, ...]] = {}  # shards of one writer share their columns: split each list once
    c["columns"] = [split.get(j) or split.setdefault(j, tuple(j.split(COLUMN_SEP))) for j in c["columns"]]
    return {(n, s): (r, g, v, cols, tuple(rg), idx) for n, s, r, g, v, cols, rg, idx in zip(
        c["name"], c["size"], c["num_rows"], c["num_row_groups"], c["schema_version"], c["columns"],
        c["row_group_rows"], c["id_index"])}


_FILES = ParsedFiles(_read_file, (OSError, pa.ArrowException, ValueError))
"""The entries of each index file this process read."""


def load(store: Store) -> tuple[dict[tuple[str, int], Entry], list[tuple[str, int]]]:
    """Every entry of the store's index by (shard name, size), and the index files read. A file
    that cannot be read (deleted by a merge meanwhile, damaged) is left out."""
    files = _list_files(store)
    out: dict[tuple[str, int], Entry] = {}
    for path, size in files:
        got = _FILES.get(store, path, size)
        if got is not None:
            out.update(got)
    return out, files


def _table(infos: Iterable[ShardInfo]) -> pa.Table:
    rows = [{"name": i.name, "size": i.size_bytes, "num_rows": i.num_rows, "num_row_groups": i.num_row_groups,
             "schema_version": i.schema_version, "columns": COLUMN_SEP.join(i.columns), "row_group_rows": list(i.row_group_rows),
             "id_index": i.id_index} for i in infos]
    return pa.Table.from_pylist(rows, schema=INDEX_SCHEMA)


def _write(store: Store, infos: list[ShardInfo]) -> str | None:
    """Add one index file with `infos`; None when the store cannot be written (a read-only
    listing keeps working: the index is a cache)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, INDEX_SCHEMA) as w:
        w.write_table(_table(infos))
    try:
        return store.write_bytes(shard_index_file(new_shard_name().removesuffix(SHARD_SUFFIX) + INDEX_SUFFIX),
                                 sink.getvalue().to_pybytes())
    except Exception:  # noqa: BLE001 - read-only store, full disk: the footers were read anyway
        return None


def update(store: Store, fresh: list[ShardInfo], listed: list[ShardInfo], files: list[tuple[str, int]]) -> None:
    """After a listing: add the facts of the shards whose footers it read (`fresh`), and merge
    the index into one file when it has more than :data:`MAX_INDEX_FILES` files (keeping the
    entries of the shards `listed`, the whole listing)."""
    if len(files) >= MAX_FILES_UNMERGED:
        return  # merges are not succeeding (a store that takes writes but refuses deletes): add nothing
    if len(files) + (1 if fresh else 0) > MAX_INDEX_FILES:
        written = _write(store, listed)
        if written is not None:
            remove_merged(store.fs, [p for p, _ in files], written, "shard index")
    elif fresh:
        _write(store, fresh)
