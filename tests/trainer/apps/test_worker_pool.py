"""trainer/apps/worker_pool.py: a benchmark's worker processes never outlive their parent, whether
it is stopped (SIGTERM: the pool is shut down, one line, exit 143) or killed (SIGKILL: each worker
sees its parent sentinel reach EOF and exits)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.processes import ANNOUNCE, DEADLINE_S, HAS_PROC, gone, sigkill_and_wait_gone, start_announcing

SCRIPT = ANNOUNCE + '''
import sys, threading
from trajstore.lifeline import Stopped
from trajstore.trainer.apps.worker_pool import run_jobs

def job(pid_dir):
    announce(pid_dir)
    threading.Event().wait()  # "forever", like a long training run

if __name__ == "__main__":
    try:
        run_jobs([(f"j{i}", job, (sys.argv[1],)) for i in range(4)], 2, lambda n, r: None)
    except Stopped as e:
        print(f"stopped: {e.message}", file=sys.stderr, flush=True)
        sys.exit(e.exit_code)
'''


def _start(tmp_path: Path) -> tuple[subprocess.Popen[str], list[int]]:
    script = tmp_path / "pool_job.py"
    script.write_text(SCRIPT)
    pids = tmp_path / "pids"
    return start_announcing([sys.executable, str(script), str(pids)], pids, 2, "two running workers")


@pytest.mark.skipif(not HAS_PROC, reason="reads process states from /proc")
def test_workers_exit_when_the_parent_is_killed(tmp_path) -> None:
    """SIGKILL runs no clean-up in the parent: the workers must notice on their own."""
    parent, workers = _start(tmp_path)
    sigkill_and_wait_gone(parent, workers, f"workers {workers} to exit after their parent's SIGKILL")


@pytest.mark.skipif(not HAS_PROC, reason="reads process states from /proc")
def test_sigterm_shuts_the_pool_down_and_exits_non_zero(tmp_path) -> None:
    """``pkill`` sends SIGTERM: the parent cancels, terminates and reaps its workers, says so in one
    line and exits 128 + 15."""
    parent, workers = _start(tmp_path)
    try:
        parent.send_signal(signal.SIGTERM)
        _, err = parent.communicate(timeout=DEADLINE_S)
        assert parent.returncode == 128 + signal.SIGTERM, err
        assert err.strip().splitlines() == ["stopped: SIGTERM: stopped 2 worker processes, 4 jobs not done"], err
        assert all(gone(p) for p in workers)  # reaped before the parent exited
    finally:
        for p in workers:
            if not gone(p):
                os.kill(p, signal.SIGKILL)
