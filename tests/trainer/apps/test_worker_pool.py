"""trainer/apps/worker_pool.py: a benchmark's worker processes never outlive their parent, whether
it is stopped (SIGTERM: the pool is shut down, one line, exit 143) or killed (SIGKILL: each worker
sees its parent sentinel reach EOF and exits)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

DEADLINE_S = 120.0
"""Safety net only: every wait below ends at its event (a file, a process gone)."""

SCRIPT = '''
import os, sys, threading
from pathlib import Path
from trajstore.trainer.apps.worker_pool import Stopped, run_jobs

def job(pid_dir):
    # announce this worker (atomically), then run "forever" like a long training run
    tmp = Path(pid_dir, f".{os.getpid()}")
    tmp.write_text(str(os.getpid()))
    os.replace(tmp, Path(pid_dir, f"{os.getpid()}.pid"))
    threading.Event().wait()

if __name__ == "__main__":
    try:
        run_jobs([(f"j{i}", job, (sys.argv[1],)) for i in range(4)], 2, lambda n, r: None)
    except Stopped as e:
        print(f"stopped: {e.message}", file=sys.stderr, flush=True)
        sys.exit(e.exit_code)
'''


def _gone(pid: int) -> bool:
    """No such process, or a zombie (exited; only its parent's reaping is left)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def _wait_for(cond, what: str) -> None:  # noqa: ANN001
    end = time.monotonic() + DEADLINE_S
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what} after {DEADLINE_S:.0f} s")
        time.sleep(0.05)  # a poll interval, not synchronisation: the condition decides


def _start(tmp_path: Path) -> tuple[subprocess.Popen[str], list[int]]:
    script = tmp_path / "pool_job.py"
    script.write_text(SCRIPT)
    pids = tmp_path / "pids"
    pids.mkdir()
    parent = subprocess.Popen([sys.executable, str(script), str(pids)], stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: len(list(pids.glob("*.pid"))) == 2 or parent.poll() is not None, "two running workers")
    assert parent.poll() is None, parent.stderr.read() if parent.stderr else ""
    return parent, [int(p.stem) for p in pids.glob("*.pid")]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_workers_exit_when_the_parent_is_killed(tmp_path) -> None:
    """SIGKILL runs no clean-up in the parent: the workers must notice on their own."""
    parent, workers = _start(tmp_path)
    try:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        _wait_for(lambda: all(_gone(p) for p in workers), f"workers {workers} to exit after their parent's SIGKILL")
    finally:
        for p in workers:  # only if the test failed: leave nothing behind
            if not _gone(p):
                os.kill(p, signal.SIGKILL)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_sigterm_shuts_the_pool_down_and_exits_non_zero(tmp_path) -> None:
    """``pkill`` sends SIGTERM: the parent cancels, terminates and reaps its workers, says so in one
    line and exits 128 + 15."""
    parent, workers = _start(tmp_path)
    try:
        parent.send_signal(signal.SIGTERM)
        _, err = parent.communicate(timeout=DEADLINE_S)
        assert parent.returncode == 128 + signal.SIGTERM, err
        assert err.strip().splitlines() == ["stopped: SIGTERM: stopped 2 worker processes, 4 jobs not done"], err
        assert all(_gone(p) for p in workers)  # reaped before the parent exited
    finally:
        for p in workers:
            if not _gone(p):
                os.kill(p, signal.SIGKILL)
