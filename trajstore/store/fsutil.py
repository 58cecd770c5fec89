"""Small filesystem helpers the store's modules share: a filesystem's protocol names, why a
call failed in one phrase, fsync of a directory, and whether a local process is alive."""

from __future__ import annotations

import contextlib
import os

import fsspec

from trajstore.errors import os_reason


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
