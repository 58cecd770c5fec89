"""Small filesystem helpers the store's modules share: a filesystem's protocol names, why a
call failed in one phrase, a file's details past fsspec's listing cache, fsync of a directory,
whether a local process is alive, and listing, parsing once and removing the files of an
append-only cache."""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import fsspec

from trajstore.errors import os_reason

if TYPE_CHECKING:
    from trajstore.store.handle import Store

T = TypeVar("T")


def protocols(fs: fsspec.AbstractFileSystem) -> tuple[str, ...]:
    """The protocol names of `fs` (``("file", "local")``, ``("s3", "s3a")``, ...)."""
    p = fs.protocol
    return (p,) if isinstance(p, str) else tuple(p)


def why(e: BaseException) -> str:
    """Why a filesystem call failed, in one phrase: the system's reason for an ``OSError``
    (``Not a directory``, not ``NotADirectoryError: [Errno 20] ...: '<path>'``; the caller names
    the path), else the exception's class and text (remote errors)."""
    if isinstance(e, OSError) and e.strerror:
        return os_reason(e)
    return f"{type(e).__name__}: {e}"


def fresh_info(fs: fsspec.AbstractFileSystem, path: str) -> dict[str, Any]:
    """`path`'s details (``size``, ``type``, ...) from the storage itself, never from the filesystem's
    listing cache (s3fs, gcsfs and adlfs answer ``info``, ``size`` and ``exists`` from the last listing
    of the parent folder). Invalidating the cache first is not enough: one fsspec instance serves every
    thread of a process, and a listing another thread started before a write and stores after it puts
    the stale entry back (``traj compact`` on S3 then failed with FileNotFoundError on the shard it had
    just written). On S3 this is one HEAD request.

    Raises:
        FileNotFoundError: nothing is stored at `path`.
    """
    fs.invalidate_cache(path)
    return fs.info(path, refresh=True)


def fsync_dir(path: str) -> None:
    """fsync a local directory (so a rename inside it survives a crash); errors are ignored."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    with contextlib.suppress(OSError):
        os.fsync(fd)
    os.close(fd)


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this host (another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def list_cache_files(fs: fsspec.AbstractFileSystem, base: str, suffix: str, *, refresh: bool
                     ) -> list[tuple[str, int]]:
    """(path, size) of the files directly in `base` whose names end in `suffix`, sorted by path;
    [] when the folder is missing or cannot be listed (for caches, where that means empty).
    `refresh`: bypass fsspec's listing cache (object stores)."""
    try:
        entries = fs.ls(base, detail=True, refresh=True) if refresh else fs.ls(base, detail=True)
    except Exception:  # noqa: BLE001 - unreachable endpoint, no permission: an empty cache
        return []
    return sorted((e["name"], int(e.get("size") or 0)) for e in entries
                  if e.get("type") == "file" and e["name"].endswith(suffix))


class ParsedFiles(Generic[T]):
    """The files of an append-only cache (the shard index, the scalar cache), each parsed once per
    process and remembered by (URL, size): such a file is never changed in place (a merge writes a
    new one), so what was parsed stays true.

    Args:
        parse: ``parse(store, path)``, the file's content as the cache uses it.
        unreadable: the exceptions of a file that cannot be read now (deleted by a merge
            meanwhile, damaged, another layout): :meth:`get` returns None and remembers nothing.
    """

    def __init__(self, parse: Callable[[Store, str], T], unreadable: tuple[type[BaseException], ...]) -> None:
        self._parse = parse
        self._unreadable = unreadable
        self._parsed: dict[tuple[str, int], T] = {}
        self._lock = threading.Lock()

    def get(self, store: Store, path: str, size: int) -> T | None:
        """The parsed content of the file at `path` (of `size` bytes as listed), or None when it
        cannot be read now."""
        key = (store.url_of(path), size)
        with self._lock:
            got = self._parsed.get(key)
        if got is None:
            try:
                got = self._parse(store, path)
            except self._unreadable:
                return None
            with self._lock:
                self._parsed[key] = got
        return got

    def clear(self) -> None:
        """Forget every file parsed (as a new process would know nothing)."""
        with self._lock:
            self._parsed.clear()


def remove_merged(fs: fsspec.AbstractFileSystem, merged: list[str], written: str | None, what: str) -> bool:
    """After an append-only cache (the shard index, the scalar cache) wrote `written`, one file
    holding what the files `merged` held: delete those. When one cannot be deleted (a store that
    takes writes but refuses deletes), warn, delete `written` too (best effort: it would only add
    to what cannot be removed) and stop. Returns whether every merged file is gone."""
    for path in merged:
        try:
            fs.rm_file(path)
        except FileNotFoundError:
            pass
        except Exception as e:  # noqa: BLE001
            warnings.warn(f"could not remove merged {what} file {path}: {e}", stacklevel=3)
            if written is not None:
                with contextlib.suppress(Exception):
                    fs.rm_file(written)
            return False
    return True
