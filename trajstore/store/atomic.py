"""Atomic writes into a store: a new shard, a small file, or a whole folder appears complete or
not at all (locally: temp under ``_tmp/``, fsync, rename, fsync of the folder; on object stores:
one PUT). Also the one-line error for a write the filesystem refused."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import pyarrow as pa

from trajstore.errors import StoreError, os_reason
from trajstore.store.encoding import ROW_GROUP_TARGET_MB, row_group_slices, stamped, write_parquet
from trajstore.store.fsutil import fsync_dir
from trajstore.store.layout import TMP_DIR, TRAJECTORIES_DIR, new_shard_name, tmp_path

if TYPE_CHECKING:
    from trajstore.store.handle import Store


def write_refused(store: Store, e: OSError, doing: str | None = None) -> StoreError:
    """A one-line :class:`StoreError` for an ``OSError`` raised while writing the store:
    ``cannot write the store /sys/nope: Operation not permitted`` (the path the system
    refused is named too when it is not the store's root), not Python's ``[Errno 1] ...``."""
    where = e.filename if e.filename not in (None, store.root, store.root + "/") else None
    head = doing or f"cannot write the store {store.uri}"
    reason = os_reason(e)
    missing = store.root if where is None else str(where)
    parent = os.path.dirname(os.path.abspath(missing)) if store.is_local else ""
    if e.errno == errno.ENOENT and parent and os.path.isdir(parent):  # /proc/nope: mkdir says ENOENT
        reason += f": {parent} does not let a folder be created in it"
    return StoreError(f"{head}: {reason}" + (f" ({where})" if where else ""))


def write_table(store: Store, table: pa.Table, *, subdir: str = TRAJECTORIES_DIR,
                row_group_target_mb: float = ROW_GROUP_TARGET_MB,
                extra_metadata: Mapping[bytes, bytes] | None = None, name: str | None = None) -> str:
    """Write `table` as one new immutable shard under `subdir`; return its path.

    `name` is the shard's file name (default :func:`~trajstore.store.layout.new_shard_name`; a
    compaction names its output after the first shard it replaces).

    The shard becomes visible atomically: locally it is written to ``_tmp/``, fsynced
    and renamed into place; on object stores it is one PUT (or one completed multipart
    upload). Row groups hold about `row_group_target_mb` MiB of uncompressed data each.
    The schema version is stamped into the file's key-value metadata (the table schema's
    own ``trajstore.schema_version`` when it has one, else :data:`SCHEMA_VERSION`).

    Raises:
        StoreError: if the filesystem refuses the write (the shard is then absent).
    """
    table = stamped(table, extra_metadata)
    name = name or new_shard_name()
    final = store.path(subdir, name)
    slices = row_group_slices(table, int(row_group_target_mb * 2**20))
    try:
        if store.is_local:
            os.makedirs(store.path(TMP_DIR), exist_ok=True)
            os.makedirs(store.path(subdir), exist_ok=True)
            tmp = store.path(tmp_path(f"{name}.tmp"))
            try:
                with open(tmp, "wb") as fh:
                    write_parquet(fh, table, slices)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.rename(tmp, final)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
            fsync_dir(store.path(subdir))
        else:
            buf = io.BytesIO()
            write_parquet(buf, table, slices)
            store.fs.pipe_file(final, buf.getvalue())
    except OSError as e:
        raise write_refused(store, e, f"could not write shard {store.url(subdir, name)}") from e
    return final


def write_bytes(store: Store, relpath: str, data: bytes) -> str:
    """Write a small file atomically (temp + rename locally, single PUT remotely)."""
    final = store.path(relpath)
    if store.is_local:
        d = os.path.dirname(final)
        os.makedirs(d, exist_ok=True)
        tmp = f"{final}.{uuid.uuid4().hex[:8]}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
        fsync_dir(d)
    else:
        store.fs.pipe_file(final, data)
    return final


@contextlib.contextmanager
def local_dir_commit(store: Store, relpath: str, *, prefix: str = "dir-") -> Iterator[str]:
    """Build a directory and make it appear at `relpath` atomically (local stores only).

    Yields a fresh temporary directory under ``_tmp/`` to fill. On a clean exit every file
    in it and the directory itself are fsynced, an existing directory at `relpath` is moved
    aside, the new one is renamed into place and the parent fsynced, then the old one is
    removed. On an error the temporary directory is removed and `relpath` is untouched.

    Raises:
        StoreError: the store is not local (object stores have no rename).
    """
    if not store.is_local:
        raise StoreError(f"local_dir_commit needs a local store, not {store.uri}")
    os.makedirs(store.path(TMP_DIR), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=prefix, dir=store.path(TMP_DIR))
    final = store.path(relpath)
    parent = os.path.dirname(final)
    try:
        yield tmp
        for name in os.listdir(tmp):
            with open(os.path.join(tmp, name), "rb") as fh:
                os.fsync(fh.fileno())
        fsync_dir(tmp)
        os.makedirs(parent, exist_ok=True)
        old = None
        if os.path.exists(final):
            old = store.path(tmp_path(f"old-{os.path.basename(final)}-{uuid.uuid4().hex[:8]}"))
            os.rename(final, old)
        os.rename(tmp, final)
        fsync_dir(parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
