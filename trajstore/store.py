"""The store: a root URI (local directory or any fsspec URL such as ``s3://bucket/prefix``)
holding immutable Parquet shards that appear atomically, so any number of writers on any
number of hosts can append at once. Layout (all names are constants below)::

    <root>/trajectories/<shard>.parquet       trajectory rows (schema v2; v1 still read)
    <root>/runs/<run_id>/{steps,consumed}/    training records, also Parquet shards
    <root>/runs/<run_id>/config.json          the resolved training config
    <root>/policies/<run_id>/v<N>/            published policy weights
    <root>/_tmp/                              local only: shards being written (never read)

Shard names start with the UTC write time in nanoseconds, so sorting names gives arrival order.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import io
import os
import shutil
import tempfile
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from trajstore.errors import CorruptShardError, StoreError, TrajstoreWarning
from trajstore.schema import (
    CONSUMED_SCHEMA,
    METADATA_SCHEMA_VERSION_KEY,
    METADATA_WRITER_KEY,
    READABLE_VERSIONS,
    SCHEMA_VERSION,
    STEP_SCHEMA,
    trajectory_schema,
)

TRAJECTORIES_DIR = "trajectories"
RUNS_DIR = "runs"
POLICIES_DIR = "policies"
TMP_DIR = "_tmp"
LOCKS_DIR = "_locks"
"""Lock files of writers that serialise their commits (``traj ingest``: ``_locks/ingest.lock``)."""
STORE_FIRST_ENTRIES = frozenset({TRAJECTORIES_DIR, TMP_DIR, LOCKS_DIR})
"""What a writer creates before its first shard: a folder holding only these (``trajectories/``
empty) is a store being created. ``runs/`` and ``policies/`` count only with their own marks."""
TMP_STALE_AFTER_S = 3600.0
"""Age (seconds since the last modification) after which a ``_tmp/`` entry is a leftover of a
crashed or killed writer, removed by the next writer or trainer that starts."""
LAYOUT_RUNS_CHECKED = 16
"""At most this many ``runs/`` / ``policies/`` folders are looked into when deciding whether a
location is a store (:meth:`Store.layout_problem`): one of ours is enough."""
RUN_STEPS_DIR = "steps"
RUN_CONSUMED_DIR = "consumed"
RUN_CONFIG_FILE = "config.json"
SHARD_SUFFIX = ".parquet"
ROW_GROUP_TARGET_MB = 32
"""Uncompressed bytes per Parquet row group; bounds the memory of one streamed batch."""
PARQUET_COMPRESSION = "zstd"
BROKEN_LINK_SIZE = -1
"""Size :meth:`Store.shard_paths` gives a symlink that points to no regular file."""

_HOST_TAG = "".join(c for c in socket.gethostname() if c.isalnum())[:16] or "host"


_SHARD_CACHE: dict[tuple[str, int, object], ShardInfo | str] = {}
"""Footer facts (or why a shard is unreadable) by (URL, size, expected schema): shards are
immutable, a rewrite (``traj migrate``) changes the size, so every Store of the process shares
it and a store opened per call does not re-read every footer."""
_SHARD_CACHE_LOCK = threading.Lock()
_SCHEMA_NAMES: dict[tuple[object, int, object], tuple[str, ...]] = {}
"""Column names of each distinct serialised Arrow schema that passed the schema check."""
SHARD_CACHE_MAX_ENTRIES = 1_000_000


def _cache_put(key: tuple[str, int, object], value: ShardInfo | str) -> None:
    if len(_SHARD_CACHE) >= SHARD_CACHE_MAX_ENTRIES:
        _SHARD_CACHE.clear()
    _SHARD_CACHE[key] = value


METADATA_ID_INDEX_KEY = b"trajstore.id_index"
"""Footer key of a shard's id index: base64 of ``uint64[n]`` sorted id hashes then ``uint32[n]``
row numbers in the same order (:func:`id_hashes`), so a reader finds the rows of given ids from
the footer it already read, without reading the ``trajectory_id`` column."""


def id_hashes(ids: pa.Array | pa.ChunkedArray | list[str]) -> np.ndarray:
    """uint64 (n,): the first 8 bytes of BLAKE2b of each id's UTF-8 (stable across processes)."""
    values = ids.to_pylist() if not isinstance(ids, list) else ids
    raw = b"".join(hashlib.blake2b(v.encode(), digest_size=8).digest() for v in values)
    return np.frombuffer(raw, dtype="<u8").copy()


def encode_id_index(ids: pa.Array | pa.ChunkedArray) -> bytes:
    """The footer value of :data:`METADATA_ID_INDEX_KEY` for a shard whose rows have `ids`."""
    h = id_hashes(ids)
    order = np.argsort(h, kind="stable")
    return base64.b64encode(h[order].astype("<u8").tobytes() + order.astype("<u4").tobytes())


def decode_id_index(value: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(sorted uint64 hashes, uint32 row numbers) from :func:`encode_id_index`'s bytes."""
    raw = base64.b64decode(value)
    n = len(raw) // 12
    return np.frombuffer(raw[:8 * n], dtype="<u8"), np.frombuffer(raw[8 * n:], dtype="<u4")


def _stamped(table: pa.Table, extra_metadata: Mapping[bytes, bytes] | None) -> pa.Table:
    """`table` with the shard metadata: schema version (the table schema's own
    ``trajstore.schema_version`` when it has one, e.g. ``trajectories_to_table(version=1)`` for
    tests and benchmarks of the v1 read path, else the current one) and the writer."""
    meta = dict(table.schema.metadata or {})
    meta.setdefault(METADATA_SCHEMA_VERSION_KEY, str(SCHEMA_VERSION).encode())
    meta[METADATA_WRITER_KEY] = b"trajstore"
    meta.update(extra_metadata or {})
    return table.replace_schema_metadata(meta)


def _footer_only(table: pa.Table) -> dict[bytes, bytes]:
    """Footer entries kept out of the Arrow schema (which every shard repeats in its footer):
    the id index of a trajectory table."""
    if "trajectory_id" in table.column_names and "spans" in table.column_names:
        return {METADATA_ID_INDEX_KEY: encode_id_index(table.column("trajectory_id"))}
    return {}


def _schema_key(expected: object) -> object:
    """Hashable identity of what a shard was checked against (a schema, a per-version function, None)."""
    if expected is None:
        return None
    if isinstance(expected, pa.Schema):
        return expected.to_string()
    return getattr(expected, "cache_key", id(expected))


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

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


def new_shard_name() -> str:
    """``<utc ns, 20 digits>-<host>-<pid>-<random>.parquet``: unique across hosts and
    processes, and sorting names sorts by write time."""
    return f"{time.time_ns():020d}-{_HOST_TAG}-{os.getpid()}-{uuid.uuid4().hex[:12]}{SHARD_SUFFIX}"


SPAN_BYTES_ESTIMATE = 96
"""Uncompressed bytes assumed per span when sizing row groups (a dozen small fields)."""


def row_bytes(table: pa.Table) -> np.ndarray:
    """Approximate uncompressed bytes of each row, int64 (n,): list columns by their element
    count times the element width (``spans`` at :data:`SPAN_BYTES_ESTIMATE` each), strings by
    their length (``metadata`` can be megabytes), fixed-width columns by their width."""
    n = table.num_rows
    out = np.zeros(n, dtype=np.int64)
    for name, col in zip(table.column_names, table.columns):
        t = col.type
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            counts = pc.list_value_length(col).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            vt = t.value_type
            width = vt.byte_width if pa.types.is_integer(vt) or pa.types.is_floating(vt) else SPAN_BYTES_ESTIMATE
            out += counts * width
        elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t):
            out += pc.binary_length(col).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        else:
            try:
                out += t.byte_width
            except ValueError:  # bool and other bit-packed or nested types
                out += 1
    return out


def _row_group_slices(table: pa.Table, target_bytes: int) -> list[tuple[int, int]]:
    """Split rows into consecutive slices of about `target_bytes` uncompressed bytes each
    (:func:`row_bytes`; a single row larger than the target gets a row group of its own)."""
    n = table.num_rows
    if n == 0:
        return []
    per_row = row_bytes(table)
    out, start, acc = [], 0, 0
    for i, b in enumerate(per_row.tolist()):
        acc += b
        if acc >= target_bytes:
            out.append((start, i + 1))
            start, acc = i + 1, 0
    if start < n:
        out.append((start, n))
    return out


def _why(e: BaseException) -> str:
    """Why a filesystem call failed, in one phrase: the system's reason for an ``OSError``
    (``Not a directory``, not ``NotADirectoryError: [Errno 20] ...: '<path>'``; the caller names
    the path), else the exception's class and text (remote errors)."""
    from trajstore.errors import os_reason

    if isinstance(e, OSError) and e.strerror:
        return os_reason(e)
    return f"{type(e).__name__}: {e}"


class Store:
    """A trajectory store rooted at a URI. Create with :func:`open_store`.

    Attributes:
        uri: the URI as given (local paths are made absolute).
        fs: the fsspec filesystem.
        root: the root path inside `fs` (no protocol).
        storage_options: options passed to fsspec (credentials, endpoint_url, ...).
    """

    def __init__(self, uri: str, fs: fsspec.AbstractFileSystem, root: str, storage_options: Mapping[str, Any]):
        self.uri = uri
        self.fs = fs
        self.root = root.rstrip("/")
        self.storage_options = dict(storage_options)
        self._shard_cache = _SHARD_CACHE  # shared by every Store of the process: shards are immutable
        self._cache_lock = _SHARD_CACHE_LOCK

    def __repr__(self) -> str:
        return f"Store({self.uri!r})"

    @property
    def is_local(self) -> bool:
        return "file" in _protocols(self.fs)

    def path(self, *parts: str) -> str:
        """Path inside `fs` for a store-relative location."""
        return "/".join([self.root, *[p.strip("/") for p in parts if p]])

    def url(self, *parts: str) -> str:
        """Full URL (with protocol) for a store-relative location."""
        return self.url_of(self.path(*parts))

    def url_of(self, path: str) -> str:
        """Full URL (with protocol) of a path inside `fs`, e.g. a :attr:`ShardInfo.path`; local
        paths are returned as they are. What errors, warnings and DuckDB show and read."""
        return path if self.is_local else self.fs.unstrip_protocol(path)

    def exists(self) -> bool:
        """Whether anything is stored at the root: a local directory, or at least one object
        under the prefix (object stores have no empty directories, so a mistyped prefix or
        bucket gives False).

        Raises:
            StoreError: the location cannot be checked (unreachable endpoint, bad credentials).
        """
        if self.is_local:
            return os.path.isdir(self.root)
        try:
            self.fs.invalidate_cache(self.root)
            return bool(self.fs.exists(self.root)) and bool(self.fs.ls(self.root, detail=False))
        except FileNotFoundError:
            return False
        except Exception as e:  # unreachable endpoint, bad credentials or options
            raise StoreError(f"cannot check {self.uri}: {_why(e)}") from e

    def layout_problem(self) -> str | None:
        """Why an existing location is not a trajstore store (None when it is one).

        A store is what this package writes: an empty local directory (a store nothing was
        written to yet), or a root holding at least one of ``trajectories/`` with ``*.parquet``
        shards (or nothing) directly inside, ``runs/<run_id>/`` with ``steps/``, ``consumed/``,
        ``config.json`` or ``checkpoints/``, ``policies/<run_id>/`` with ``LATEST`` or
        ``v<N>/``. Anything else (a folder of logs, a home directory, a Parquet dataset) would
        read as an empty store without a word, so read-side commands refuse it. Hidden entries
        (``.DS_Store``, ``.git``) are ignored. Call on a location that :meth:`exists`.

        Raises:
            StoreError: the location cannot be listed.
        """
        top = self._foreign_entries()
        if top is None:
            return None
        return (f"{self.uri} is not a trajstore store: it holds {_entries(top)} but no trajectories/*.parquet, "
                f"runs/<id>/ or policies/<id>/{_parquet_hint(top)} (create a store with "
                "`traj ingest LOGS --store DIR`, the writer SDK `StoreWriter(DIR)` or `traj proxy --store DIR`; "
                "an empty directory is an empty store)")

    def write_problem(self, command: str) -> str | None:
        """Why `command` (``traj ingest``, ``traj demo``, ``traj proxy``) must not create or write
        a store here (None when it may): a local folder that exists, holds visible entries and is
        not a store (the check of :meth:`layout_problem`), such as a source tree or a folder of
        notes, would get ``trajectories/``, ``runs/``, ``policies/`` and ``_tmp/`` written into
        it. A missing folder, an empty one and an existing store are fine; remote locations are
        not checked (a prefix has no folder to mistake, and listing it costs a round trip).

        Raises:
            StoreError: the location cannot be listed.
        """
        if not self.is_local or not self.exists():
            return None
        top = self._foreign_entries()
        if top is None:
            return None
        return (f"{command} would write into {self.uri}, which is not a trajstore store: it holds {_entries(top)} "
                f"but no trajectories/*.parquet, runs/<id>/ or policies/<id>/{_parquet_hint(top)}; nothing was "
                "written (give a new or empty folder, or an existing store)")

    def _names(self, *parts: str) -> dict[str, str] | None:
        """Visible entries of a store-relative folder: name -> "file" / "directory" (None when
        it does not exist)."""
        try:
            entries = self.fs.ls(self.path(*parts), detail=True, **({} if self.is_local else {"refresh": True}))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except Exception as e:  # unreachable endpoint, bad credentials or options
            raise StoreError(f"cannot list {self.url(*parts)}: {_why(e)}") from e
        out = {}
        for e in entries:
            name = e["name"].rstrip("/").rsplit("/", 1)[-1]
            if name and not name.startswith(".") and e["name"].rstrip("/") != self.path(*parts).rstrip("/"):
                out[name] = e.get("type") or "file"
        return out

    def _foreign_entries(self) -> dict[str, str] | None:
        """The visible top-level entries of a location that is not a store; None when it is one
        (an empty directory included). The one layout check behind :meth:`layout_problem` (read
        side) and :meth:`write_problem` (commands that create a store)."""
        names = self._names
        top = names()
        if not top:
            return None  # an empty directory: an empty store
        if set(top) <= STORE_FIRST_ENTRIES and not (top.get(TRAJECTORIES_DIR) == "directory"
                                              and names(TRAJECTORIES_DIR)):
            # only what a writer creates first (_locks/, _tmp/, an empty trajectories/): a store
            # another process is creating right now (two ingests into a new store at once)
            return None
        if top.get(TRAJECTORIES_DIR) == "directory":
            shards = names(TRAJECTORIES_DIR) or {}
            if not shards or any(n.endswith(SHARD_SUFFIX) for n in shards):
                return None
        for sub, marks in ((RUNS_DIR, (RUN_STEPS_DIR, RUN_CONSUMED_DIR, RUN_CONFIG_FILE, "checkpoints")),
                           (POLICIES_DIR, ("LATEST",))):
            if top.get(sub) != "directory":
                continue
            for run in sorted(n for n, kind in (names(sub) or {}).items() if kind == "directory")[:LAYOUT_RUNS_CHECKED]:
                inside = names(sub, run) or {}
                if any(m in inside for m in marks) or (sub == POLICIES_DIR and any(
                        n[:1] == "v" and n[1:].isdigit() for n in inside)):
                    return None
        return top

    def arrow_filesystem(self) -> pafs.FileSystem:
        """A pyarrow filesystem for the same location (native for local paths)."""
        if self.is_local:
            return pafs.LocalFileSystem()
        return pafs.PyFileSystem(pafs.FSSpecHandler(self.fs))

    # -- writing ---------------------------------------------------------------------------

    def write_refused(self, e: OSError, doing: str | None = None) -> StoreError:
        """A one-line :class:`StoreError` for an ``OSError`` raised while writing the store:
        ``cannot write the store /sys/nope: Operation not permitted`` (the path the system
        refused is named too when it is not the store's root), not Python's ``[Errno 1] ...``."""
        from trajstore.errors import os_reason

        where = e.filename if e.filename not in (None, self.root, self.root + "/") else None
        head = doing or f"cannot write the store {self.uri}"
        reason = os_reason(e)
        missing = self.root if where is None else str(where)
        parent = os.path.dirname(os.path.abspath(missing)) if self.is_local else ""
        if e.errno == errno.ENOENT and parent and os.path.isdir(parent):  # /proc/nope: mkdir says ENOENT
            reason += f": {parent} does not let a folder be created in it"
        return StoreError(f"{head}: {reason}" + (f" ({where})" if where else ""))

    def write_table(self, table: pa.Table, *, subdir: str = TRAJECTORIES_DIR,
                    row_group_target_mb: float = ROW_GROUP_TARGET_MB,
                    extra_metadata: Mapping[bytes, bytes] | None = None) -> str:
        """Write `table` as one new immutable shard under `subdir`; return its path.

        The shard becomes visible atomically: locally it is written to ``_tmp/``, fsynced
        and renamed into place; on object stores it is one PUT (or one completed multipart
        upload). Row groups hold about `row_group_target_mb` MiB of uncompressed data each.
        The schema version is stamped into the file's key-value metadata (the table schema's
        own ``trajstore.schema_version`` when it has one, else :data:`SCHEMA_VERSION`).

        Raises:
            StoreError: if the filesystem refuses the write (the shard is then absent).
        """
        table = _stamped(table, extra_metadata)
        name = new_shard_name()
        final = self.path(subdir, name)
        slices = _row_group_slices(table, int(row_group_target_mb * 2**20))
        try:
            if self.is_local:
                tmp_dir = self.path(TMP_DIR)
                os.makedirs(tmp_dir, exist_ok=True)
                os.makedirs(self.path(subdir), exist_ok=True)
                tmp = f"{tmp_dir}/{name}.tmp"
                try:
                    with open(tmp, "wb") as fh:
                        self._write_parquet(fh, table, slices)
                        fh.flush()
                        os.fsync(fh.fileno())
                    os.rename(tmp, final)
                except BaseException:
                    if os.path.exists(tmp):
                        os.unlink(tmp)
                    raise
                _fsync_dir(self.path(subdir))
            else:
                buf = io.BytesIO()
                self._write_parquet(buf, table, slices)
                self.fs.pipe_file(final, buf.getvalue())
        except OSError as e:
            raise self.write_refused(e, f"could not write shard {self.url(subdir, name)}") from e
        return final

    @staticmethod
    def _write_parquet(sink: Any, table: pa.Table, slices: list[tuple[int, int]]) -> None:
        opts: dict[str, Any] = {}
        per_token = [f"{c}.list.element" for c in PER_TOKEN_COLUMNS if c in table.column_names]
        if per_token:
            # Per-token columns: no dictionary (a 49k+ vocabulary overflows the dictionary page
            # and falls back anyway) and no min/max statistics (useless for pruning token ids);
            # log-probs byte-stream-split, which zstd compresses better than plain floats.
            others = [c for c in _leaf_paths(table.schema) if c not in per_token]
            # ... except min/max of token ids: the trainer checks them against the model's
            # vocabulary from the footer alone, before it writes anything (a few bytes per row group)
            stats = others + [c for c in per_token if c.startswith("tokens.")]
            opts = dict(use_dictionary=others, write_statistics=stats,
                        column_encoding={c: "BYTE_STREAM_SPLIT" for c in per_token if c.startswith("logprobs.")})
        with pq.ParquetWriter(sink, table.schema, compression=PARQUET_COMPRESSION, **opts) as w:
            for a, b in slices or [(0, 0)]:
                part = table.slice(a, b - a)
                w.write_table(part, row_group_size=max(1, part.num_rows))
            footer = _footer_only(table)
            if footer:
                w.add_key_value_metadata(footer)

    def rewrite_shard(self, path: str, table: pa.Table, *,
                      row_group_target_mb: float = ROW_GROUP_TARGET_MB) -> int:
        """Replace an existing shard's content with `table`, keeping its name (hence its place in
        arrival order, and any training cursor that names it). Atomic: a reader sees either the
        old file or the new one, never a mix or a partial file (locally: temp file in ``_tmp/``,
        fsync, ``os.replace`` over the old one, fsync of the directory; on object stores: one
        PUT or one completed multipart upload to the same key). Returns the new size in bytes.

        A process killed part-way leaves the old shard in place and, locally, a
        ``_tmp/<name>.rewrite-<pid>.tmp`` file that :meth:`remove_stale_rewrites` deletes.

        Raises:
            StoreError: the write failed (the old shard is untouched).
        """
        table = _stamped(table, None)
        slices = _row_group_slices(table, int(row_group_target_mb * 2**20))
        name = path.rsplit("/", 1)[-1]
        try:
            if self.is_local:
                os.makedirs(self.path(TMP_DIR), exist_ok=True)
                tmp = self.path(TMP_DIR, f"{name}{_REWRITE_MARK}{os.getpid()}.tmp")
                try:
                    with open(tmp, "wb") as fh:
                        self._write_parquet(fh, table, slices)
                        fh.flush()
                        os.fsync(fh.fileno())
                    size = os.path.getsize(tmp)
                    os.replace(tmp, path)
                except BaseException:
                    if os.path.exists(tmp):
                        os.unlink(tmp)
                    raise
                _fsync_dir(os.path.dirname(path))
            else:
                buf = io.BytesIO()
                self._write_parquet(buf, table, slices)
                size = buf.tell()
                self.fs.pipe_file(path, buf.getvalue())
        except OSError as e:
            raise self.write_refused(e, f"could not rewrite shard {self.url_of(path)}") from e
        return size

    def remove_stale_rewrites(self) -> list[str]:
        """Delete ``_tmp/`` files left by a :meth:`rewrite_shard` whose process is gone (local
        stores; a no-op elsewhere). Returns the paths removed."""
        if not self.is_local or not os.path.isdir(self.path(TMP_DIR)):
            return []
        removed = []
        for name in os.listdir(self.path(TMP_DIR)):
            head, mark, tail = name.rpartition(_REWRITE_MARK)
            if not mark or not tail.endswith(".tmp") or not tail[:-4].isdigit():
                continue
            pid = int(tail[:-4])
            if pid != os.getpid() and _pid_alive(pid):
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path(TMP_DIR, name))
                removed.append(self.path(TMP_DIR, name))
        return removed

    @contextlib.contextmanager
    def local_dir_commit(self, relpath: str, *, prefix: str = "dir-") -> Iterator[str]:
        """Build a directory and make it appear at `relpath` atomically (local stores only).

        Yields a fresh temporary directory under ``_tmp/`` to fill. On a clean exit every file
        in it and the directory itself are fsynced, an existing directory at `relpath` is moved
        aside, the new one is renamed into place and the parent fsynced, then the old one is
        removed. On an error the temporary directory is removed and `relpath` is untouched.

        Raises:
            StoreError: the store is not local (object stores have no rename).
        """
        if not self.is_local:
            raise StoreError(f"local_dir_commit needs a local store, not {self.uri}")
        os.makedirs(self.path(TMP_DIR), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=prefix, dir=self.path(TMP_DIR))
        final = self.path(relpath)
        parent = os.path.dirname(final)
        try:
            yield tmp
            for name in os.listdir(tmp):
                with open(os.path.join(tmp, name), "rb") as fh:
                    os.fsync(fh.fileno())
            _fsync_dir(tmp)
            os.makedirs(parent, exist_ok=True)
            old = None
            if os.path.exists(final):
                old = self.path(TMP_DIR, f"old-{os.path.basename(final)}-{uuid.uuid4().hex[:8]}")
                os.rename(final, old)
            os.rename(tmp, final)
            _fsync_dir(parent)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def clean_stale_tmp(self, *, older_than_s: float = TMP_STALE_AFTER_S) -> int:
        """Remove what crashed or killed writers left under ``_tmp/`` (local stores; object
        stores have no ``_tmp/``): every entry whose newest modification, of itself or of any
        file inside it, is older than `older_than_s`. An entry still being written is newer and
        stays; a shard temp file of a process still alive on this host stays at any age.

        Returns:
            Bytes freed.
        """
        base = self.path(TMP_DIR)
        if not self.is_local or not os.path.isdir(base):
            return 0
        cutoff = time.time() - older_than_s
        freed = 0
        for name in os.listdir(base):
            path = os.path.join(base, name)
            parts = name.split("-")
            if len(parts) >= 4 and parts[1] == _HOST_TAG and parts[2].isdigit() and _pid_alive(int(parts[2])):
                continue
            try:
                newest, size = _newest_mtime_and_size(path)
            except FileNotFoundError:  # removed meanwhile (committed or cleaned by another process)
                continue
            if newest < cutoff:
                if os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                freed += size
        return freed

    def write_bytes(self, relpath: str, data: bytes) -> str:
        """Write a small file atomically (temp + rename locally, single PUT remotely)."""
        final = self.path(relpath)
        if self.is_local:
            d = os.path.dirname(final)
            os.makedirs(d, exist_ok=True)
            tmp = f"{final}.{uuid.uuid4().hex[:8]}.tmp"
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
            _fsync_dir(d)
        else:
            self.fs.pipe_file(final, data)
        return final

    # -- listing ---------------------------------------------------------------------------

    def shard_paths(self, subdir: str = TRAJECTORIES_DIR) -> list[tuple[str, int]]:
        """(path, size) of every ``*.parquet`` directly under `subdir`, sorted by name
        (= arrival order). Hidden and temporary files are never listed. A symbolic link (local
        stores) is listed with the size of the file it points to, or :data:`BROKEN_LINK_SIZE`
        when it points to no regular file (:meth:`inspect_shard` then reports it)."""
        base = self.path(subdir)
        try:
            entries = self.fs.ls(base, detail=True, refresh=True) if not self.is_local else self.fs.ls(base, detail=True)
        except FileNotFoundError:
            return []
        except Exception as e:  # unreachable endpoint, bad credentials or options, a file in the way
            raise StoreError(f"cannot list {self.url(subdir)}: {_why(e)}") from e
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

    def inspect_shard(self, path: str, size: int,
                      expected: pa.Schema | Callable[[int], pa.Schema | None] | None = None) -> ShardInfo:
        """Read a shard's footer and check it is ours.

        With `expected` (a schema, or a function from the shard's schema version to the schema
        of that version), the file's columns must also fit that schema: no unknown columns,
        every known column with its type, every required column present (a nullable column
        may be missing: older schema versions lack it).

        Raises:
            CorruptShardError: truncated or not Parquet, a schema version newer than ours, or
                (with `expected`) columns that do not fit.
        """
        if size == BROKEN_LINK_SIZE:
            dest = os.readlink(path) if os.path.islink(path) else "?"
            raise CorruptShardError(self.url_of(path), f"broken symlink to {dest} (not a readable file)")
        key = (self.url_of(path), size, _schema_key(expected))
        with self._cache_lock:
            cached = self._shard_cache.get(key)
        if isinstance(cached, ShardInfo):
            return cached
        if isinstance(cached, str):
            raise CorruptShardError(self.url_of(path), cached)
        try:
            if self.is_local:
                md = pq.read_metadata(path)
            else:
                with self.fs.open(path, "rb") as fh:
                    md = pq.read_metadata(fh)
            kv = md.metadata or {}
            version = int(kv.get(METADATA_SCHEMA_VERSION_KEY, b"-1"))
            if version < 0:
                raise ValueError("no trajstore schema version in the file metadata")
            if version > SCHEMA_VERSION:
                raise ValueError(f"schema version {version} is newer than this reader ({SCHEMA_VERSION})")
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
        except (OSError, ValueError, pa.ArrowException) as e:
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            with self._cache_lock:
                _cache_put(key, reason)
            raise CorruptShardError(self.url_of(path), reason) from e
        with self._cache_lock:
            _cache_put(key, info)
        return info

    def list_shards(self, subdir: str = TRAJECTORIES_DIR, *, strict: bool = False) -> list[ShardInfo]:
        """Readable shards under `subdir` in arrival order.

        A shard that cannot be read is skipped with a warning naming it; with ``strict=True``
        it raises :class:`~trajstore.errors.CorruptShardError` instead.
        """
        out = []
        for path, size in self.shard_paths(subdir):
            try:
                out.append(self.inspect_shard(path, size, _expected_schema(subdir)))
            except CorruptShardError as e:
                if strict:
                    raise
                warnings.warn(f"skipping {e}", CorruptShardWarning, stacklevel=2)
        return out

    def iter_dirs(self, subdir: str) -> Iterator[str]:
        """Names of the directories directly under `subdir` (e.g. run ids under ``runs``)."""
        try:
            entries = self.fs.ls(self.path(subdir), detail=True)
        except FileNotFoundError:
            return
        except Exception as e:
            raise StoreError(f"cannot list {self.url(subdir)}: {_why(e)}") from e
        for e in entries:
            if e.get("type") == "directory":
                yield e["name"].rstrip("/").rsplit("/", 1)[-1]


PER_TOKEN_COLUMNS = ("tokens", "logprobs")


def _expected_schema(subdir: str) -> Callable[[int], pa.Schema | None]:
    """Schema version -> the schema of the shards under a store subdirectory (None when unknown)."""
    parts = subdir.strip("/").split("/")

    def of_version(version: int) -> pa.Schema | None:
        if parts == [TRAJECTORIES_DIR]:
            return trajectory_schema(version) if version in READABLE_VERSIONS else None
        if len(parts) == 3 and parts[0] == RUNS_DIR:  # unchanged since v1
            return {RUN_STEPS_DIR: STEP_SCHEMA, RUN_CONSUMED_DIR: CONSUMED_SCHEMA}.get(parts[2])
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


def _leaf_paths(schema: pa.Schema) -> list[str]:
    """Parquet column paths (``a.list.element.b``) of every leaf of an Arrow schema."""
    def walk(prefix: str, t: pa.DataType) -> list[str]:
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return walk(f"{prefix}.list.element", t.value_type)
        if pa.types.is_struct(t):
            return [p for i in range(t.num_fields) for p in walk(f"{prefix}.{t.field(i).name}", t.field(i).type)]
        return [prefix]
    return [p for f in schema for p in walk(f.name, f.type)]


class CorruptShardWarning(TrajstoreWarning):
    """A shard was skipped because it cannot be read."""


def _protocols(fs: fsspec.AbstractFileSystem) -> tuple[str, ...]:
    p = fs.protocol
    return (p,) if isinstance(p, str) else tuple(p)


_REWRITE_MARK = ".rewrite-"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _newest_mtime_and_size(path: str) -> tuple[float, int]:
    """(newest mtime of `path` and everything under it, total bytes of its files)."""
    st = os.stat(path)
    newest, size = st.st_mtime, 0 if os.path.isdir(path) else st.st_size
    for d, dirs, files in os.walk(path):
        for n in dirs + files:
            with contextlib.suppress(FileNotFoundError):
                s = os.stat(os.path.join(d, n))
                newest = max(newest, s.st_mtime)
                size += s.st_size if n in files else 0
    return newest, size


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _entries(top: Mapping[str, str]) -> str:
    return f"{len(top)} entr{'y' if len(top) == 1 else 'ies'}"


def _parquet_hint(top: Mapping[str, str]) -> str:
    """A hint for a folder of .parquet files: likely a store's trajectories/ folder given as its root."""
    parquet = sorted(n for n in top if n.endswith(SHARD_SUFFIX))
    if not parquet:
        return ""
    return (f"; it holds .parquet files ({parquet[0]}{', ...' if len(parquet) > 1 else ''}): give the store's "
            "root, not its trajectories/ folder, or import a Parquet dataset with `traj ingest`")


def open_store(uri: str | os.PathLike[str], *, storage_options: Mapping[str, Any] | None = None) -> Store:
    """Open (or start) a store at a local path or any fsspec URI.

    Args:
        uri: a local directory (created on first write) or e.g. ``s3://bucket/prefix``.
        storage_options: passed to the fsspec filesystem (for s3fs: ``key``, ``secret``,
            ``endpoint_url``, ``client_kwargs``, ...).

    Raises:
        StoreError: if the URI is empty, its protocol is unknown or its filesystem cannot be
            created, or a local path is a file.
    """
    if isinstance(uri, Store):
        return uri
    uri = os.fspath(uri)
    if not uri.strip():  # an unset $STORE in a script: never the current directory by accident
        raise StoreError("the store URI is empty (give a directory or e.g. s3://bucket/prefix; '.' for the "
                         "current directory)")
    try:
        fs, root = fsspec.core.url_to_fs(uri, **(storage_options or {}))
    except (ValueError, ImportError) as e:
        raise StoreError(f"cannot open store {uri!r}: {e}") from e
    if "file" in _protocols(fs):
        root = os.path.abspath(root)
        uri = root
        if os.path.exists(root) and not os.path.isdir(root):
            raise StoreError(f"cannot open store {uri!r}: it is a file, not a directory")
    return Store(uri, fs, root, storage_options or {})


def open_existing_store(uri: str | os.PathLike[str] | Store, *, storage_options: Mapping[str, Any] | None = None,
                        missing_ok: bool = False) -> Store:
    """Open a store that must already exist: what read-side commands (``traj stats``, ``sql``,
    ``info``, ``runs``, ``migrate``, ``train``) inspect. A mistyped path, prefix or bucket, or a
    folder that is not a store (:meth:`Store.layout_problem`), would otherwise read as an empty
    store without a word.

    Args:
        missing_ok: a location where nothing exists yet is fine (``traj train --follow`` waits
            for the first shard); a location that exists must still be a store.

    Raises:
        StoreError: nothing at `uri` (a local directory that does not exist, an object-store
            prefix with no object under it), or something that is not a store; the location
            cannot be checked.
    """
    s = open_store(uri, storage_options=storage_options)
    if not s.exists():
        if missing_ok:
            return s
        what = "the directory does not exist" if s.is_local else "nothing is stored under that prefix"
        raise StoreError(f"no store at {s.uri}: {what} (create one with `traj ingest LOGS --store {s.uri}` or the "
                         "writer SDK)")
    problem = s.layout_problem()
    if problem:
        raise StoreError(problem)
    return s


def open_store_for_writing(uri: str | os.PathLike[str] | Store, *, command: str,
                           storage_options: Mapping[str, Any] | None = None) -> Store:
    """Open a store that a command creates or writes (``traj ingest --store``, ``traj demo
    --store``, ``traj proxy --store``), refusing before anything is written a local folder that
    exists, is not empty and is not a store (:meth:`Store.write_problem`): a mistyped path to a
    source tree would otherwise get ``trajectories/``, ``runs/``, ``policies/`` and ``_tmp/``
    written into it. A missing folder (created on first write), an empty folder and an existing
    store are fine; remote URLs are not checked. The writer SDK (:class:`StoreWriter`) does not
    call this: a program choosing its folder is trusted.

    Args:
        command: what writes, for the message (``"traj ingest"``).

    Raises:
        StoreError: the folder is not a store, or cannot be listed; a ``memory://`` URL (gone
            with the process); :func:`open_store`'s errors.
    """
    s = open_store(uri, storage_options=storage_options)
    if "memory" in ((s.fs.protocol,) if isinstance(s.fs.protocol, str) else tuple(s.fs.protocol)):
        raise StoreError(f"{command} cannot write into {s.uri}: a memory:// store lives only inside one Python "
                         "process and would be gone when the command exits (use a folder or s3://...)")
    problem = s.write_problem(command)
    if problem:
        raise StoreError(problem)
    return s
