"""Opening a store: :func:`open_store` for any location, :func:`open_existing_store` for
read-side commands (the location must be a store), :func:`open_store_for_writing` for commands
that create or write one (refusing a folder that is not a store)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import fsspec

from trajstore.errors import StoreError
from trajstore.store.fsutil import protocols
from trajstore.store.handle import Store


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
    if "file" in protocols(fs):
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
        raise StoreError(f"no store at {s.uri}: {what} (create one with `traj ingest {s.uri} LOGS` or the "
                         "writer SDK)")
    problem = s.layout_problem()
    if problem:
        raise StoreError(problem)
    return s


def open_store_for_writing(uri: str | os.PathLike[str] | Store, *, command: str,
                           storage_options: Mapping[str, Any] | None = None) -> Store:
    """Open a store that a command creates or writes (``traj ingest STORE``, ``traj demo
    STORE``, ``traj proxy STORE``), refusing before anything is written a local folder that
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
    if "memory" in protocols(s.fs):
        raise StoreError(f"{command} cannot write into {s.uri}: a memory:// store lives only inside one Python "
                         "process and would be gone when the command exits (use a folder or s3://...)")
    problem = s.write_problem(command)
    if problem:
        raise StoreError(problem)
    return s
