"""Store locks: :func:`store_lock` serialises the commits of writers on one host (``traj ingest``),
:func:`exclusive_lock` makes maintenance (``traj compact``, ``traj gc``) one process at a time
per store, on any number of hosts, S3 included."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

from trajstore.errors import StoreError
from trajstore.store.fsutil import why
from trajstore.store.layout import HOST_TAG, LOCK_SUFFIX, lock_file

if TYPE_CHECKING:
    from trajstore.store.handle import Store

try:
    import fcntl
except ImportError:  # not POSIX: local locks are not taken (see store_lock)
    fcntl = None  # type: ignore[assignment]

LEASE_S = 300.0
"""How long an object-store lock (:func:`exclusive_lock`) stays valid without renewal; its holder
renews it every third of that, so only a holder that died (or hung that long) loses it."""
POLL_S = 1.0
"""How often a process waiting for an object-store lock looks again."""


@contextlib.contextmanager
def _flock(st: Store, path: str) -> Iterator[None]:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as e:  # the store's folder cannot be created or written: one line naming it
        raise st.write_refused(e) from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def store_lock(st: Store, name: str) -> Iterator[None]:
    """Hold an exclusive, blocking lock named `name` on the store `st`.

    Local stores: ``fcntl.flock`` on ``<root>/_locks/<name>.lock`` (every process and thread
    on this host, and on hosts sharing the folder over a filesystem with working ``flock``,
    such as NFSv4 on Linux). Object stores (S3): the lock file is in this host's temporary
    folder, named after the store's URL, so it serialises the holders of one host only. The
    lock is released when the block ends, or when the process dies.
    """
    if fcntl is None:  # no flock on this platform: commits are not serialised
        yield
        return
    if st.is_local:
        path = st.path(lock_file(name))
    else:
        path = os.path.join(tempfile.gettempdir(), "trajstore-locks",
                            f"{hashlib.sha256(st.url().encode()).hexdigest()[:24]}.{name}{LOCK_SUFFIX}")
    with _flock(st, path):
        yield


@contextlib.contextmanager
def exclusive_lock(st: Store, name: str, *, lease_s: float = LEASE_S, wait_s: float | None = None) -> Iterator[None]:
    """Hold the store-wide lock `name` (one holder on any host), waiting for it when held.

    Local stores: :func:`store_lock`. Object stores: the object ``_locks/<name>.lock`` created
    only if absent (a conditional PUT, ``If-None-Match: *``), holding the owner and an expiry
    that a thread renews every ``lease_s / 3``; a lock whose expiry passed (its holder died) is
    taken over. Released (deleted) when the block ends.

    Args:
        wait_s: give up after this long (None: wait as long as it takes).

    Raises:
        StoreError: not acquired within `wait_s`, or the lock object cannot be written.
    """
    if st.is_local:
        with store_lock(st, name):
            yield
        return
    path = st.path(lock_file(name))
    me = f"{HOST_TAG}-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def body() -> bytes:
        return json.dumps({"owner": me, "expires": time.time() + lease_s}).encode()

    start = time.monotonic()
    while True:
        try:
            st.fs.pipe_file(path, body(), mode="create")
            break
        except FileExistsError:
            pass
        except Exception as e:
            raise StoreError(f"cannot take the lock {st.url_of(path)}: {why(e)}") from e
        try:
            held = json.loads(st.fs.cat_file(path))
            if float(held["expires"]) < time.time():  # its holder died: take it over
                st.fs.rm_file(path)
                continue
        except FileNotFoundError:
            continue
        except (ValueError, KeyError, TypeError):  # unreadable: treat as expired
            with contextlib.suppress(FileNotFoundError):
                st.fs.rm_file(path)
            continue
        if wait_s is not None and time.monotonic() - start > wait_s:
            raise StoreError(f"the lock {st.url_of(path)} is held by {held.get('owner')} (another traj {name} is "
                             "running)")
        time.sleep(POLL_S)
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(lease_s / 3):
            with contextlib.suppress(Exception):
                st.fs.pipe_file(path, body())

    t = threading.Thread(target=renew, name=f"trajstore-lock-{name}", daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()
        with contextlib.suppress(Exception):
            st.fs.rm_file(path)
