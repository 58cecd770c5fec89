"""Listing a store folder's shards and reading their footers: which ``*.parquet`` files are
there, whether each is ours (schema version, columns) and its row counts and id index, with
a process-wide cache of footer facts (shards are immutable) so no footer is read twice."""

from __future__ import annotations

import dataclasses
import os
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from trajstore.errors import CorruptShardError, NewerSchemaError, StoreError, TrajstoreWarning
from trajstore.schema import (
    CONSUMED_SCHEMA,
    METADATA_SCHEMA_VERSION_KEY,
    READABLE_VERSIONS,
    SCHEMA_VERSION,
    STEP_SCHEMA,
    trajectory_schema,
)
from trajstore.store import index as shard_index
from trajstore.store.compaction_records import CompactionSource, Resolution, read_records, resolve
from trajstore.store.fsutil import why
from trajstore.store.id_index import METADATA_ID_INDEX_KEY
from trajstore.store.layout import (
    RUN_CONSUMED_DIR,
    RUN_STEPS_DIR,
    RUN_TOKENS_DIR,
    RUNS_DIR,
    SHARD_SUFFIX,
    TRAJECTORIES_DIR,
)
from trajstore.token_annotations import TOKEN_ANNOTATION_SCHEMA

if TYPE_CHECKING:
    from trajstore.store.handle import Store

BROKEN_LINK_SIZE = -1
"""Size :meth:`Store.shard_paths` gives a symlink that points to no regular file."""
SHARD_CACHE_MAX_ENTRIES = 1_000_000


class CorruptShardWarning(TrajstoreWarning):
    """A shard was skipped because it cannot be read.

    Attributes:
        shard: the skipped shard's URL, when the warning names one (None for a message-only warning).
    """

    def __init__(self, message: str, shard: str | None = None):
        super().__init__(message)
        self.shard = shard


@dataclass(frozen=True)
class ShardInfo:
    """A readable shard: its path inside the store's filesystem, rows, size in bytes and
    row groups, and the schema version stamped in its metadata."""

    path: str
    num_rows: int
    size_bytes: int
    num_row_groups: int
    schema_version: int
    columns: tuple[str, ...] = ()
    """Top-level column names in the file (an older shard may lack a nullable column)."""
    row_group_rows: tuple[int, ...] = ()
    """Rows in each row group, in order."""
    id_index: bytes | None = None
    """The footer's id index (:data:`METADATA_ID_INDEX_KEY`), None when the shard has none."""
    parts: tuple[CompactionSource, ...] = ()
    """For a compaction output: the shards it replaced, in row order (:mod:`trajstore.store.compaction_records`)."""

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


_SHARD_CACHE: dict[tuple[str, int, object], ShardInfo | str] = {}
"""Footer facts (or why a shard is unreadable) by (URL, size, expected schema): shards are
immutable, a rewrite (``traj migrate``) changes the size, so every Store of the process shares
it and a store opened per call does not re-read every footer."""
_SHARD_CACHE_LOCK = threading.Lock()
_SCHEMA_NAMES: dict[tuple[object, int, object], tuple[str, ...]] = {}
"""Column names of each distinct serialised Arrow schema that passed the schema check."""


def _cache_put(key: tuple[str, int, object], value: ShardInfo | str) -> None:
    if len(_SHARD_CACHE) >= SHARD_CACHE_MAX_ENTRIES:
        _SHARD_CACHE.clear()
    _SHARD_CACHE[key] = value


def _schema_key(expected: object) -> object:
    """Hashable identity of what a shard was checked against (a schema, a per-version function, None)."""
    if expected is None:
        return None
    if isinstance(expected, pa.Schema):
        return expected.to_string()
    return getattr(expected, "cache_key", id(expected))


def check_schema_version(path: str, version: int) -> None:
    """Refuse a shard stamped with a schema version newer than this package reads.

    Raises:
        NewerSchemaError: `version` > :data:`~trajstore.schema.SCHEMA_VERSION`, naming `path`,
            both versions and the upgrade (never reported as a corrupt shard, never skipped).
    """
    if version > SCHEMA_VERSION:
        raise NewerSchemaError(path, version, SCHEMA_VERSION)


def shard_paths(store: Store, subdir: str = TRAJECTORIES_DIR, *, vanished: list[str] | None = None
                ) -> list[tuple[str, int]]:
    """(path, size) of every ``*.parquet`` directly under `subdir`, sorted by name
    (= arrival order). Hidden and temporary files are never listed. A symbolic link (local
    stores) is listed with the size of the file it points to, or :data:`BROKEN_LINK_SIZE`
    when it points to no regular file (:func:`inspect_shard` then reports it)."""
    base = store.path(subdir)
    if store.is_local:
        return _local_shard_paths(store, subdir, base, vanished)
    try:
        entries = store.fs.ls(base, detail=True, refresh=True)
    except FileNotFoundError:
        return []
    except Exception as e:  # unreachable endpoint, bad credentials or options, a file in the way
        raise StoreError(f"cannot list {store.url(subdir)}: {why(e)}") from e
    out = []
    for e in entries:
        p = e["name"]
        name = p.rsplit("/", 1)[-1]
        if not name.endswith(SHARD_SUFFIX) or name.startswith((".", "_")):
            continue
        if e.get("type") == "file":
            out.append((p, int(e.get("size") or 0)))
        elif e.get("islink"):  # local symlink: read what it points to; a broken one is reported
            out.append((p, os.path.getsize(p) if os.path.isfile(p) else BROKEN_LINK_SIZE))
    out.sort(key=lambda x: x[0].rsplit("/", 1)[-1])
    return out


def _local_shard_paths(store: Store, subdir: str, base: str, vanished: list[str] | None = None
                       ) -> list[tuple[str, int]]:
    """:func:`shard_paths` of a local folder through ``os.scandir`` (one ``stat`` per entry, where
    fsspec's ``ls`` costs about 60 us an entry: 60 ms at a thousand shards). An entry deleted
    between the folder's read and its ``stat`` is left out and its path added to `vanished`."""
    out = []
    try:
        with os.scandir(base) as it:
            for e in it:
                name = e.name
                if not name.endswith(SHARD_SUFFIX) or name.startswith((".", "_")):
                    continue
                path = f"{base}/{name}"
                if e.is_symlink():  # read what it points to; a broken one is reported
                    out.append((path, os.path.getsize(path) if os.path.isfile(path) else BROKEN_LINK_SIZE))
                elif e.is_file(follow_symlinks=False):
                    try:
                        out.append((path, e.stat(follow_symlinks=False).st_size))
                    except FileNotFoundError:  # deleted since the folder was read (a compaction)
                        if vanished is not None:
                            vanished.append(path)
                        continue
    except FileNotFoundError:
        return []
    except OSError as e:  # a file in the way, no permission
        raise StoreError(f"cannot list {store.url(subdir)}: {why(e)}") from e
    out.sort(key=lambda x: x[0].rsplit("/", 1)[-1])
    return out


def inspect_shard(store: Store, path: str, size: int,
                  expected: pa.Schema | Callable[[int], pa.Schema | None] | None = None) -> ShardInfo:
    """Read a shard's footer and check it is ours.

    With `expected` (a schema, or a function from the shard's schema version to the schema
    of that version), the file's columns must also fit that schema: no unknown columns,
    every known column with its type, every required column present (a nullable column
    may be missing: older schema versions lack it).

    Raises:
        CorruptShardError: truncated or not Parquet, no schema version, or (with `expected`)
            columns that do not fit.
        FileNotFoundError: the shard is gone (deleted since it was listed).
        NewerSchemaError: the schema version is newer than this package reads (a newer
            trajstore wrote it: upgrade, see :func:`check_schema_version`).
    """
    if size == BROKEN_LINK_SIZE:
        dest = os.readlink(path) if os.path.islink(path) else "?"
        raise CorruptShardError(store.url_of(path), f"broken symlink to {dest} (not a readable file)")
    key = (store.url_of(path), size, _schema_key(expected))
    with _SHARD_CACHE_LOCK:
        cached = _SHARD_CACHE.get(key)
    if isinstance(cached, ShardInfo):
        return cached
    if isinstance(cached, str):
        raise CorruptShardError(store.url_of(path), cached)
    try:
        if store.is_local:
            md = pq.read_metadata(path)
        else:
            with store.fs.open(path, "rb") as fh:
                md = pq.read_metadata(fh)
        kv = md.metadata or {}
        version = int(kv.get(METADATA_SCHEMA_VERSION_KEY, b"-1"))
        if version < 0:
            raise ValueError("no trajstore schema version in the file metadata")
        check_schema_version(store.url_of(path), version)  # not caught below: not corruption
        # Shards of one writer carry the same serialised Arrow schema: check each distinct one once.
        schema_key = (kv.get(b"ARROW:schema"), version, _schema_key(expected))
        names = _SCHEMA_NAMES.get(schema_key) if schema_key[0] is not None else None
        if names is None:
            arrow_schema = md.schema.to_arrow_schema()
            want = expected(version) if callable(expected) else expected
            if want is not None:
                problem = _schema_mismatch(arrow_schema, want)
                if problem:
                    raise ValueError(problem)
            names = tuple(arrow_schema.names)
            if schema_key[0] is not None:
                _SCHEMA_NAMES[schema_key] = names
        info = ShardInfo(path, md.num_rows, size, md.num_row_groups, version, names,
                         tuple(md.row_group(i).num_rows for i in range(md.num_row_groups)),
                         kv.get(METADATA_ID_INDEX_KEY))
    except FileNotFoundError:
        raise  # deleted since it was listed (a compaction, traj gc): not corrupt
    except (OSError, ValueError, pa.ArrowException) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        with _SHARD_CACHE_LOCK:
            _cache_put(key, reason)
        raise CorruptShardError(store.url_of(path), reason) from e
    with _SHARD_CACHE_LOCK:
        _cache_put(key, info)
    return info


def list_shards(store: Store, subdir: str = TRAJECTORIES_DIR, *, strict: bool = False) -> list[ShardInfo]:
    """Readable shards under `subdir` in arrival order. Under ``trajectories/`` the compaction
    rule applies (:func:`trajstore.store.compaction_records.resolve`): shards a committed compaction
    replaced are not listed, its output is (with :attr:`ShardInfo.parts`).

    A shard that cannot be read is skipped with a warning naming it; with ``strict=True``
    it raises :class:`~trajstore.errors.CorruptShardError` instead.

    Raises:
        NewerSchemaError: a shard of a schema version newer than this package reads, with or
            without ``strict`` (skipping it would silently drop its rows).
    """
    return list_view(store, subdir, strict=strict)[0]


LISTING_ATTEMPTS = 8
"""Listings tried while shards keep disappearing under them (see :func:`list_view`); the last one
leaves vanished shards out."""


def list_view(store: Store, subdir: str = TRAJECTORIES_DIR, *, strict: bool = False
              ) -> tuple[list[ShardInfo], Resolution | None]:
    """:func:`list_shards` and, under ``trajectories/``, the :class:`Resolution` it applied
    (which listed shards are replaced, pending or visible); None elsewhere.

    A shard deleted while the listing ran (a compaction that committed its output and deleted
    its sources meanwhile) makes it list again, up to :data:`LISTING_ATTEMPTS` times: a listing
    that had read the folder before the output appeared and stat'ed the sources after they were
    deleted would otherwise hold neither."""
    for _ in range(LISTING_ATTEMPTS - 1):
        vanished: list[str] = []
        got = _list_view(store, subdir, strict=strict, vanished=vanished)
        if not vanished:
            return got
    return _list_view(store, subdir, strict=strict, vanished=None)


def _list_view(store: Store, subdir: str, *, strict: bool, vanished: list[str] | None
               ) -> tuple[list[ShardInfo], Resolution | None]:
    paths = shard_paths(store, subdir, vanished=vanished)
    if vanished:
        return [], None  # listed again by list_view
    res = None
    if subdir.strip("/") == TRAJECTORIES_DIR:
        # records read AFTER the shards were listed (see trajstore.store.compaction_records)
        res = resolve([p.rsplit("/", 1)[-1] for p, _ in paths], read_records(store))
        keep = set(res.visible)
        paths = [(p, n) for p, n in paths if p.rsplit("/", 1)[-1] in keep]
    expected = expected_schema(subdir)
    fresh: set[str] = set()
    index_files: list[tuple[str, int]] = []
    if res is not None:
        fresh, index_files = _prime_from_index(store, paths, expected)
    infos = inspect_many(store, paths, expected, strict=strict, vanished=vanished)
    if vanished:
        return [], None  # listed again by list_view
    if fresh:
        shard_index.update(store, [i for i in infos if i.path in fresh], infos, index_files)
    out = []
    for info in infos:
        if res is not None and info.name in res.committed:
            info = dataclasses.replace(info, parts=res.parts(info.name))
        out.append(info)
    return out, res


def _prime_from_index(store: Store, paths: list[tuple[str, int]], expected: Callable[[int], pa.Schema | None]
                      ) -> tuple[set[str], list[tuple[str, int]]]:
    """Put the footer facts the store's index (:mod:`trajstore.store.index`) has for listed shards
    this process has not inspected yet into the process cache; return the paths it lacks (their
    footers are read, then added to the index) and the index files read."""
    skey = _schema_key(expected)
    with _SHARD_CACHE_LOCK:
        unknown = [(p, n) for p, n in paths if (store.url_of(p), n, skey) not in _SHARD_CACHE]
    if not unknown:
        return set(), []
    entries, files = shard_index.load(store)
    missing = set()
    with _SHARD_CACHE_LOCK:
        for p, n in unknown:
            e = entries.get((p.rsplit("/", 1)[-1], n))
            if e is None or e[2] > SCHEMA_VERSION:  # a newer version: inspect_shard raises its error
                missing.add(p)
                continue
            rows, groups, version, cols, rg_rows, id_index = e
            _cache_put((store.url_of(p), n, skey), ShardInfo(p, rows, n, groups, version, cols, rg_rows, id_index))
    return missing, files


def inspect_many(store: Store, paths: list[tuple[str, int]], expected: Callable[[int], pa.Schema | None], *,
                 strict: bool, vanished: list[str] | None = None) -> list[ShardInfo]:
    """:func:`inspect_shard` of each (path, size); unreadable ones warned about and skipped (or
    raised with `strict`); ones deleted since they were listed left out (added to `vanished`)."""
    out = []
    for path, size in paths:
        try:
            out.append(inspect_shard(store, path, size, expected))
        except FileNotFoundError:
            if vanished is not None:
                vanished.append(path)
        except CorruptShardError as e:
            if strict:
                raise
            warnings.warn(CorruptShardWarning(f"skipping {e}", e.path), stacklevel=5)
    return out


def expected_schema(subdir: str) -> Callable[[int], pa.Schema | None]:
    """Schema version -> the schema of the shards under a store subdirectory (None when unknown)."""
    parts = subdir.strip("/").split("/")

    def of_version(version: int) -> pa.Schema | None:
        if parts == [TRAJECTORIES_DIR]:
            return trajectory_schema(version) if version in READABLE_VERSIONS else None
        if len(parts) == 3 and parts[0] == RUNS_DIR:  # later columns are nullable (consumed.reuse): older shards fit
            return {RUN_STEPS_DIR: STEP_SCHEMA, RUN_CONSUMED_DIR: CONSUMED_SCHEMA,
                    RUN_TOKENS_DIR: TOKEN_ANNOTATION_SCHEMA}.get(parts[2])
        return None
    kind = TRAJECTORIES_DIR if parts == [TRAJECTORIES_DIR] else (
        parts[2] if len(parts) == 3 and parts[0] == RUNS_DIR else None)
    of_version.cache_key = ("expected", kind)  # type: ignore[attr-defined]
    return of_version


def _schema_mismatch(actual: pa.Schema, expected: pa.Schema) -> str | None:
    """Why a shard's columns do not fit `expected` (None when they do)."""
    for f in actual:
        i = expected.get_field_index(f.name)
        if i < 0:
            return f"unexpected column {f.name!r} (not in the trajstore schema)"
        if not f.type.equals(expected.field(i).type):
            return f"column {f.name!r} has type {f.type}, expected {expected.field(i).type}"
    for f in expected:
        if not f.nullable and actual.get_field_index(f.name) < 0:
            return f"required column {f.name!r} is missing"
    return None
