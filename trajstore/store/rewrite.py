"""Rewriting an existing shard in place under its own name (``traj migrate``), atomically, and
removing the temp files of a rewrite whose process died part-way."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa

from trajstore.store.atomic import write_refused
from trajstore.store.encoding import ROW_GROUP_TARGET_MB, row_group_slices, stamped, write_parquet
from trajstore.store.fsutil import fsync_dir, pid_alive
from trajstore.store.layout import TMP_DIR, tmp_path

if TYPE_CHECKING:
    from trajstore.store.handle import Store

REWRITE_MARK = ".rewrite-"
"""In a rewrite's temp file name: ``_tmp/<shard name>.rewrite-<pid>.tmp``."""


def rewrite_shard(store: Store, path: str, table: pa.Table, *,
                  row_group_target_mb: float = ROW_GROUP_TARGET_MB) -> int:
    """Replace an existing shard's content with `table`, keeping its name (hence its place in
    arrival order, and any training cursor that names it). Atomic: a reader sees either the
    old file or the new one, never a mix or a partial file (locally: temp file in ``_tmp/``,
    fsync, ``os.replace`` over the old one, fsync of the directory; on object stores: one
    PUT or one completed multipart upload to the same key). Returns the new size in bytes.

    The new file is always larger than the old one (a rewrite that comes out no larger is written
    again with a :data:`~trajstore.store.encoding.FOOTER_PAD_KEY` entry in its footer that makes
    it one byte larger), so a shard never returns to a size it had: the shard index, the scalar
    cache and every process's footer cache know a shard by its name and size, and an entry of any
    earlier content never matches the current one (a rewrite that shrank and another that grew
    back could otherwise meet the first size again).

    A process killed part-way leaves the old shard in place and, locally, a
    ``_tmp/<name>.rewrite-<pid>.tmp`` file that :func:`remove_stale_rewrites` deletes.

    Raises:
        StoreError: the write failed (the old shard is untouched).
    """
    table = stamped(table, None)
    slices = row_group_slices(table, int(row_group_target_mb * 2**20))
    name = path.rsplit("/", 1)[-1]
    try:
        try:
            old_size = store.fs.size(path)
        except FileNotFoundError:
            old_size = -1
        if store.is_local:
            os.makedirs(store.path(TMP_DIR), exist_ok=True)
            tmp = store.path(tmp_path(f"{name}{REWRITE_MARK}{os.getpid()}.tmp"))

            def to_tmp(pad: int) -> int:
                with open(tmp, "wb") as fh:
                    write_parquet(fh, table, slices, footer_pad=pad)
                    fh.flush()
                    os.fsync(fh.fileno())
                return os.path.getsize(tmp)
            try:
                size = _larger_than(old_size, to_tmp)
                os.replace(tmp, path)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
            fsync_dir(os.path.dirname(path))
        else:
            buf = io.BytesIO()

            def to_buf(pad: int) -> int:
                buf.seek(0)
                buf.truncate()
                write_parquet(buf, table, slices, footer_pad=pad)
                return buf.tell()
            size = _larger_than(old_size, to_buf)
            store.fs.pipe_file(path, buf.getvalue())
    except OSError as e:
        raise write_refused(store, e, f"could not rewrite shard {store.url_of(path)}") from e
    return size


def _larger_than(old_size: int, write: Callable[[int], int]) -> int:
    """Call ``write(pad)`` (write the file with a footer pad of `pad` bytes, return its size) until
    the file is larger than `old_size`: once unpadded, at most once more padded by the shortfall
    (the pad entry adds at least its value's bytes). Returns the final size."""
    pad = 0
    while (size := write(pad)) <= old_size:
        pad += old_size - size + 1
    return size


def remove_stale_rewrites(store: Store) -> list[str]:
    """Delete ``_tmp/`` files left by a :func:`rewrite_shard` whose process is gone (local
    stores; a no-op elsewhere). Returns the paths removed."""
    if not store.is_local or not os.path.isdir(store.path(TMP_DIR)):
        return []
    removed = []
    for name in os.listdir(store.path(TMP_DIR)):
        head, mark, tail = name.rpartition(REWRITE_MARK)
        if not mark or not tail.endswith(".tmp") or not tail[:-4].isdigit():
            continue
        pid = int(tail[:-4])
        if pid != os.getpid() and pid_alive(pid):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(store.path(tmp_path(name)))
            removed.append(store.path(tmp_path(name)))
    return removed
