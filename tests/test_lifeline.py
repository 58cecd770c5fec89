"""trajstore/lifeline.py: the demo's and the benchmarks' child processes (traj serve, traj proxy,
the trainer hosts) end when their parent dies, even by SIGKILL; SIGTERM unwinds through the
parent's ``finally`` (which stops them) and exits 128 + 15."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.processes import ANNOUNCE, DEADLINE_S, HAS_PROC, gone, sigkill_and_wait_gone, start_announcing

CHILD = ANNOUNCE + '''
import sys, threading
from trajstore.lifeline import watch_lifeline
assert watch_lifeline()
announce(sys.argv[1])
threading.Event().wait()  # a server that would run forever
'''

PARENT = ANNOUNCE + '''
import subprocess, sys, threading
from pathlib import Path
from trajstore.lifeline import Stopped, child_lifeline, signals_stop

env, fds = child_lifeline()
import os
child = subprocess.Popen([sys.executable, sys.argv[2], sys.argv[1]], env={**os.environ, **env}, pass_fds=fds)
try:
    with signals_stop():
        try:
            threading.Event().wait()
        finally:  # as run_demo / the throughput suite stop their children
            child.terminate()
            child.wait()
            Path(sys.argv[1], "cleaned").write_text("")
except Stopped as e:
    print(f"stopped: {e.message}", file=sys.stderr)
    sys.exit(e.exit_code)
'''


def _start(tmp_path: Path) -> tuple[subprocess.Popen[str], int]:
    (tmp_path / "child.py").write_text(CHILD)
    (tmp_path / "parent.py").write_text(PARENT)
    pids = tmp_path / "pids"
    parent, started = start_announcing([sys.executable, str(tmp_path / "parent.py"), str(pids),
                                        str(tmp_path / "child.py")], pids, 1, "the child to start")
    return parent, started[0]


@pytest.mark.skipif(not HAS_PROC, reason="reads process states from /proc")
def test_a_child_ends_when_its_parent_is_killed(tmp_path) -> None:
    parent, child = _start(tmp_path)
    sigkill_and_wait_gone(parent, [child], f"child {child} to end after its parent's SIGKILL")


@pytest.mark.skipif(not HAS_PROC, reason="reads process states from /proc")
def test_sigterm_runs_the_parents_clean_up_and_exits_143(tmp_path) -> None:
    parent, child = _start(tmp_path)
    try:
        parent.send_signal(signal.SIGTERM)
        _, err = parent.communicate(timeout=DEADLINE_S)
        assert parent.returncode == 143 and err.strip() == "stopped: SIGTERM", err
        assert (tmp_path / "pids" / "cleaned").exists() and gone(child)
    finally:
        if not gone(child):
            os.kill(child, signal.SIGKILL)
