"""The :class:`Store` handle: a root URI on an fsspec filesystem, with the store-relative path
and URL helpers. Its other methods are thin entry points to the module that owns each concept
(listing shards, atomic writes, rewrites, ``_tmp/`` cleanup, recognising a store)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.fs as pafs

from trajstore.errors import StoreError
from trajstore.store import atomic, cleanup, detect, rewrite, shards
from trajstore.store.encoding import ROW_GROUP_TARGET_MB
from trajstore.store.fsutil import protocols, why
from trajstore.store.layout import TRAJECTORIES_DIR


class Store:
    """A trajectory store rooted at a URI. Create with :func:`~trajstore.store.open_store`.

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
        self._is_local = "file" in protocols(fs)

    def __repr__(self) -> str:
        return f"Store({self.uri!r})"

    @property
    def is_local(self) -> bool:
        """Whether the store is a local folder (its filesystem is ``file``)."""
        return self._is_local

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
            raise StoreError(f"cannot check {self.uri}: {why(e)}") from e

    def arrow_filesystem(self) -> pafs.FileSystem:
        """A pyarrow filesystem for the same location (native for local paths)."""
        if self.is_local:
            return pafs.LocalFileSystem()
        return pafs.PyFileSystem(pafs.FSSpecHandler(self.fs))

    def iter_dirs(self, subdir: str) -> Iterator[str]:
        """Names of the directories directly under `subdir` (e.g. run ids under ``runs``)."""
        try:
            entries = self.fs.ls(self.path(subdir), detail=True)
        except FileNotFoundError:
            return
        except Exception as e:
            raise StoreError(f"cannot list {self.url(subdir)}: {why(e)}") from e
        for e in entries:
            if e.get("type") == "directory":
                yield e["name"].rstrip("/").rsplit("/", 1)[-1]

    # -- is this a store (trajstore.store.detect) ------------------------------------------

    def layout_problem(self) -> str | None:
        """Why an existing location is not a trajstore store (None when it is one); see
        :func:`trajstore.store.detect.layout_problem`."""
        return detect.layout_problem(self)

    def write_problem(self, command: str) -> str | None:
        """Why `command` must not create or write a store here (None when it may); see
        :func:`trajstore.store.detect.write_problem`."""
        return detect.write_problem(self, command)

    # -- listing (trajstore.store.shards) --------------------------------------------------

    def shard_paths(self, subdir: str = TRAJECTORIES_DIR) -> list[tuple[str, int]]:
        """(path, size) of every ``*.parquet`` directly under `subdir`, in arrival order; see
        :func:`trajstore.store.shards.shard_paths`."""
        return shards.shard_paths(self, subdir)

    def inspect_shard(self, path: str, size: int,
                      expected: pa.Schema | Callable[[int], pa.Schema | None] | None = None) -> shards.ShardInfo:
        """Read a shard's footer and check it is ours; see :func:`trajstore.store.shards.inspect_shard`."""
        return shards.inspect_shard(self, path, size, expected)

    def list_shards(self, subdir: str = TRAJECTORIES_DIR, *, strict: bool = False) -> list[shards.ShardInfo]:
        """Readable shards under `subdir` in arrival order (unreadable ones skipped with a
        warning, or raised with ``strict``); see :func:`trajstore.store.shards.list_shards`."""
        return shards.list_shards(self, subdir, strict=strict)

    # -- writing (trajstore.store.atomic, .rewrite, .cleanup) ------------------------------

    def write_refused(self, e: OSError, doing: str | None = None) -> StoreError:
        """A one-line :class:`StoreError` for an ``OSError`` raised while writing the store; see
        :func:`trajstore.store.atomic.write_refused`."""
        return atomic.write_refused(self, e, doing)

    def write_table(self, table: pa.Table, *, subdir: str = TRAJECTORIES_DIR,
                    row_group_target_mb: float = ROW_GROUP_TARGET_MB,
                    extra_metadata: Mapping[bytes, bytes] | None = None, name: str | None = None) -> str:
        """Write `table` as one new immutable shard under `subdir` (named `name`, default a new
        shard name), atomically; return its path. See :func:`trajstore.store.atomic.write_table`."""
        return atomic.write_table(self, table, subdir=subdir, row_group_target_mb=row_group_target_mb,
                                  extra_metadata=extra_metadata, name=name)

    def write_bytes(self, relpath: str, data: bytes) -> str:
        """Write a small file atomically (temp + rename locally, single PUT remotely)."""
        return atomic.write_bytes(self, relpath, data)

    def local_dir_commit(self, relpath: str, *, prefix: str = "dir-") -> contextlib.AbstractContextManager[str]:
        """Build a directory and make it appear at `relpath` atomically (local stores only); see
        :func:`trajstore.store.atomic.local_dir_commit`."""
        return atomic.local_dir_commit(self, relpath, prefix=prefix)

    def rewrite_shard(self, path: str, table: pa.Table, *,
                      row_group_target_mb: float = ROW_GROUP_TARGET_MB) -> int:
        """Replace a shard's content atomically under its own name; return the new size in
        bytes. See :func:`trajstore.store.rewrite.rewrite_shard`."""
        return rewrite.rewrite_shard(self, path, table, row_group_target_mb=row_group_target_mb)

    def remove_stale_rewrites(self) -> list[str]:
        """Delete ``_tmp/`` files of rewrites whose process is gone; see
        :func:`trajstore.store.rewrite.remove_stale_rewrites`."""
        return rewrite.remove_stale_rewrites(self)

    def clean_stale_tmp(self, *, older_than_s: float = cleanup.TMP_STALE_AFTER_S) -> int:
        """Remove what crashed or killed writers left under ``_tmp/``; return the bytes freed.
        See :func:`trajstore.store.cleanup.clean_stale_tmp`."""
        return cleanup.clean_stale_tmp(self, older_than_s=older_than_s)
