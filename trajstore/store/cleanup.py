"""Removing what crashed or killed writers left under ``_tmp/`` (local stores): entries whose
newest modification is older than an hour, unless a live process on this host still owns them."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from typing import TYPE_CHECKING

from trajstore.store.fsutil import pid_alive
from trajstore.store.layout import HOST_TAG, TMP_DIR

if TYPE_CHECKING:
    from trajstore.store.handle import Store

TMP_STALE_AFTER_S = 3600.0
"""Age (seconds since the last modification) after which a ``_tmp/`` entry is a leftover of a
crashed or killed writer, removed by the next writer or trainer that starts."""


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


def clean_stale_tmp(store: Store, *, older_than_s: float = TMP_STALE_AFTER_S) -> int:
    """Remove what crashed or killed writers left under ``_tmp/`` (local stores; object
    stores have no ``_tmp/``): every entry whose newest modification, of itself or of any
    file inside it, is older than `older_than_s`. An entry still being written is newer and
    stays; a shard temp file of a process still alive on this host stays at any age.

    Returns:
        Bytes freed.
    """
    base = store.path(TMP_DIR)
    if not store.is_local or not os.path.isdir(base):
        return 0
    cutoff = time.time() - older_than_s
    freed = 0
    for name in os.listdir(base):
        path = os.path.join(base, name)
        parts = name.split("-")
        if len(parts) >= 4 and parts[1] == HOST_TAG and parts[2].isdigit() and pid_alive(int(parts[2])):
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
