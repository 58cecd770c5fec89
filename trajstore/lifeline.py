"""Child processes that never outlive the process that started them, and SIGTERM as an exception.

The demo, the benchmarks and their servers (``traj serve``, ``traj proxy``, the trainer hosts) run
as child processes. A parent that is stopped or killed must not leave them running:

* :func:`signals_stop`: while inside, SIGTERM and SIGINT raise :class:`Stopped` in the main thread,
  so the parent's ``finally`` blocks stop its children (Python's default SIGTERM action ends the
  process without running them). The first signal restores the previous handlers: a second one
  ends a clean-up that hangs.
* :func:`child_lifeline` / :func:`watch_lifeline`: for a death that runs no clean-up (SIGKILL,
  a crash). The parent keeps the write end of one pipe for its whole life and passes only the read
  end to its children (``pass_fds``; the write end is not inheritable, so no child holds it). When
  the parent dies, the kernel closes the write end and each child's read returns EOF at once; the
  child then sends itself SIGTERM (servers flush and stop as on any SIGTERM) and exits outright
  after :data:`GRACE_S` if that did not end it. A pipe reaching EOF needs no polling and no period,
  and (unlike Linux's ``PR_SET_PDEATHSIG``) does not fire when merely the starting thread ends.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

LIFELINE_ENV = "TRAJ_LIFELINE_FD"
"""Environment variable naming the inherited read end of the parent's lifeline pipe."""
GRACE_S = 30.0
"""Seconds a child whose parent died gets to stop on SIGTERM before it exits outright."""
PARENT_GONE_EXIT = 75
"""Exit status of a child ended because its parent died (EX_TEMPFAIL: nobody collects its work)."""

_pipe: tuple[int, int] | None = None
_lock = threading.Lock()


class Stopped(BaseException):
    """SIGTERM or SIGINT arrived inside :func:`signals_stop` (a BaseException, like
    KeyboardInterrupt, so that no ``except Exception`` on the way swallows it)."""

    def __init__(self, signum: int, message: str = "") -> None:
        super().__init__(message or signal.Signals(signum).name)
        self.signum = signum
        self.message = message or signal.Signals(signum).name

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, the shell's convention for a process ended by a signal."""
        return 128 + self.signum


@contextmanager
def signals_stop() -> Iterator[None]:
    """While inside: the first SIGTERM or SIGINT raises :class:`Stopped` in the main thread and
    restores the previous handlers. Outside the main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = (signal.SIGTERM, signal.SIGINT)
    old: dict[int, Any] = {}

    def handler(signum: int, _frame: Any) -> None:
        for s, h in old.items():
            signal.signal(s, h)
        raise Stopped(signum)

    old.update({s: signal.signal(s, handler) for s in sigs})
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def child_lifeline() -> tuple[dict[str, str], tuple[int, ...]]:
    """``(env additions, pass_fds)`` for a :class:`subprocess.Popen` child that must end when this
    process dies; the child calls :func:`watch_lifeline` at its start."""
    global _pipe
    with _lock:
        if _pipe is None:
            _pipe = os.pipe()  # both ends non-inheritable; the write end stays open until this process ends
    return {LIFELINE_ENV: str(_pipe[0])}, (_pipe[0],)


def watch_lifeline() -> bool:
    """In a child started with :func:`child_lifeline`: a daemon thread that ends this process when
    the parent dies (module docstring). Returns whether there was a lifeline to watch."""
    fd_text = os.environ.pop(LIFELINE_ENV, None)  # not for this process's own children
    if not fd_text:
        return False
    fd = int(fd_text)

    def watch() -> None:
        try:
            while os.read(fd, 1):
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)
        threading.Event().wait(GRACE_S)
        os._exit(PARENT_GONE_EXIT)

    threading.Thread(target=watch, name="lifeline", daemon=True).start()
    return True
