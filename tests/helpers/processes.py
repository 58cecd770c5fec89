"""Waiting for processes to appear and to go, by event (a file, a process state), with a generous
deadline only as a safety net."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

DEADLINE_S = 120.0
"""Safety net only: every wait ends at its event."""
HAS_PROC = Path("/proc/self/stat").exists()
"""Whether process states can be read from /proc (Linux)."""


def gone(pid: int) -> bool:
    """No such process, or a zombie (it exited; only its parent's reaping is left)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def wait_for(cond: Callable[[], bool], what: str, deadline_s: float = DEADLINE_S) -> None:
    """Return as soon as `cond()` holds; AssertionError naming `what` after `deadline_s`."""
    end = time.monotonic() + deadline_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what} after {deadline_s:.0f} s")
        time.sleep(0.05)  # a poll interval, not synchronisation: the condition decides


def pid_files(directory: Path) -> list[int]:
    """The pids announced as ``<pid>.pid`` files in `directory`."""
    return [int(p.stem) for p in directory.glob("*.pid")]


def start_announcing(cmd: Sequence[str], pid_dir: Path, count: int, what: str) -> tuple[subprocess.Popen[str], list[int]]:
    """Start `cmd` (whose processes write ``<pid>.pid`` files into `pid_dir`, see :data:`ANNOUNCE`)
    and return it with the announced pids once `count` have appeared; AssertionError with its
    stderr if it exits first."""
    pid_dir.mkdir(exist_ok=True)
    parent = subprocess.Popen(list(cmd), stderr=subprocess.PIPE, text=True)
    wait_for(lambda: len(pid_files(pid_dir)) == count or parent.poll() is not None, what)
    assert parent.poll() is None, parent.stderr.read() if parent.stderr else ""
    return parent, pid_files(pid_dir)


def sigkill_and_wait_gone(parent: subprocess.Popen[str], pids: Sequence[int], what: str) -> None:
    """SIGKILL `parent` (no clean-up runs in it) and wait until every one of `pids` has ended on
    its own; whatever is left when the wait fails is killed, so a failing test leaves nothing."""
    try:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        wait_for(lambda: all(gone(p) for p in pids), what)
    finally:
        for p in pids:
            if not gone(p):
                os.kill(p, signal.SIGKILL)


ANNOUNCE = '''
def announce(pid_dir):
    """Write <pid>.pid into pid_dir atomically: the event a test waits for."""
    import os
    from pathlib import Path
    tmp = Path(pid_dir, f".{os.getpid()}")
    tmp.write_text(str(os.getpid()))
    os.replace(tmp, Path(pid_dir, f"{os.getpid()}.pid"))
'''
"""Source of ``announce(pid_dir)`` for the scripts the tests start."""
