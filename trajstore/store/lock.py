"""Store locks: :func:`store_lock` serialises the commits of writers on one host (``traj ingest``),
:func:`exclusive_lock` makes maintenance one process at a time per store, on any number of hosts,
S3 included; :func:`maintenance_lock` is the one every command that rewrites, replaces or deletes
trajectory shards holds (``traj compact``, ``traj gc --delete``, ``traj redact``, ``traj migrate``).
Dry runs take no lock: they write nothing, not even a lock file."""

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
from trajstore.store.encoding import token_encoding
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
MAINTENANCE_LOCK = "maintenance"
"""The store lock the commands that rewrite, replace or delete trajectory shards hold (one of them
at a time per store): ``traj compact``, ``traj gc --delete``, ``traj redact``, ``traj migrate``."""
LOCAL_POLL_S = 0.05
"""How often a process waiting for a local lock with a time limit (``wait_s``) tries again."""


@contextlib.contextmanager
def _flock(st: Store, path: str, name: str, wait_s: float | None = None) -> Iterator[None]:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as e:  # the store's folder cannot be created or written: one line naming it
        raise st.write_refused(e) from e
    try:
        if wait_s is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise StoreError(f"the lock {path} is held (another traj {name} is running)") from None
                    time.sleep(LOCAL_POLL_S)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def store_lock(st: Store, name: str, *, wait_s: float | None = None) -> Iterator[None]:
    """Hold an exclusive, blocking lock named `name` on the store `st` (waiting at most `wait_s`
    seconds when given: then :class:`StoreError`).

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
    with _flock(st, path, name, wait_s):
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
        with store_lock(st, name, wait_s=wait_s):
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


def maintenance_lock(st: Store, *, wait_s: float | None = None, dry_run: bool = False
                     ) -> contextlib.AbstractContextManager[None]:
    """The store's maintenance lock (:data:`MAINTENANCE_LOCK`, :func:`exclusive_lock`), to hold
    for the whole of a command that rewrites, replaces or deletes trajectory shards; list the
    shards only once it is held (what another command did meanwhile is then seen). A dry run
    (``dry_run=True``) takes no lock and writes nothing.

    Raises:
        StoreError: not acquired within `wait_s`, or the lock cannot be written.
    """
    if dry_run:
        return contextlib.nullcontext()
    # every command that takes it writes shards: a bad TRAJSTORE_TOKEN_ENCODING is refused
    # before anything is merged or recorded, not at the first shard
    token_encoding()
    return exclusive_lock(st, MAINTENANCE_LOCK, wait_s=wait_s)
