"""The child processes of ``traj demo`` (``traj serve``, ``traj proxy``, the trainer): started with
their output in the run folder, waited for until ready, and stopped; :class:`DemoChildren` is
the one place that waits for them and stops them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajstore.errors import TrajstoreError
from trajstore.proxy.config import GRACEFUL_SHUTDOWN_S

if TYPE_CHECKING:
    from trajstore.trainer.loop.config import TrainConfig


class DemoError(TrajstoreError):
    """The demo could not run to the end (the trainer failed or timed out)."""


PROXY_STOP_S = GRACEFUL_SHUTDOWN_S + 30
"""How long the proxy gets to stop after SIGTERM before SIGKILL (s): past its own graceful
shutdown, or the SIGKILL loses the aborted episodes it was about to write."""


def cpu_count() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def start_trainer(config: TrainConfig, config_path: Path, log_path: Path, threads: int) -> subprocess.Popen[bytes]:
    """Start ``traj train``'s library entry (:func:`trajstore.trainer.loop.train.train`) in a child
    process with `threads` torch threads, its output going to `log_path`. The child waits for
    data while its stdin (a pipe from this process) is open; close it when no more episodes
    will come."""
    config_path.write_text(config.to_json())
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               HF_HUB_DISABLE_PROGRESS_BARS="1", TQDM_DISABLE="1")
    cmd = [sys.executable, "-m", "trajstore.trainer.apps.demo", "train-child", str(config_path), str(threads)]
    with open(log_path, "wb") as log:
        return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env)


def echo_new_lines(path: Path, pos: int, say: Any) -> int:
    """Print the trainer log's complete lines after byte `pos`; return the new position."""
    try:
        with open(path, "rb") as fh:
            fh.seek(pos)
            data = fh.read()
    except OSError:
        return pos
    from rich.markup import escape

    end = data.rfind(b"\n") + 1
    for line in data[:end].decode(errors="replace").split("\n"):
        line = line.rsplit("\r", 1)[-1]  # a progress bar redraws with carriage returns
        if line.strip():
            say(f"[dim]trainer |[/] {escape(line)}", highlight=False)
    return pos + end


def log_tail(path: Path, lines: int = 25) -> str:
    """The last `lines` lines of a child's log, for an error message."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no trainer log)"


def start_traj_child(args: list[str], log_path: Path, threads: int | None = None) -> subprocess.Popen[bytes]:
    """A ``traj`` command of this interpreter as a child process, its output going to `log_path`."""
    env = dict(os.environ, HF_HUB_DISABLE_PROGRESS_BARS="1", TQDM_DISABLE="1")
    if threads is not None:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    cmd = [sys.executable, "-c", "from trajstore.cli.main import app; app()", *args]
    with open(log_path, "wb") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)


def free_port() -> int:
    """A TCP port on the loopback interface that is free now."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path, what: str, deadline: float) -> None:
    """Wait until `url` answers 200; raise :class:`DemoError` with the log's tail if `proc` exits
    first or `deadline` (``time.monotonic()``) passes."""
    import httpx

    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DemoError(f"{what} exited with code {proc.returncode}; log: {log}\n{log_tail(log)}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise DemoError(f"{what} did not start in time; log: {log}\n{log_tail(log)}")


def stop_child(proc: subprocess.Popen[bytes] | None, timeout: float = 30.0) -> None:
    """SIGTERM (the proxy then writes its open episodes as aborted), SIGKILL after `timeout`."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@dataclass
class DemoChildren:
    """The demo's running child processes by name (``serve``, ``proxy``, ``trainer``): the one
    place that waits for them and stops them."""

    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def trainer(self) -> subprocess.Popen[bytes]:
        return self.procs["trainer"]

    def stop_proxy(self) -> None:
        """Stop the proxy: its held and in-flight episodes end (written as aborted)."""
        stop_child(self.procs.get("proxy"), timeout=PROXY_STOP_S)

    def finish_trainer(self, timeout_s: float) -> int:
        """Tell the trainer no more episodes will come (its stdin closes: it stops once the store
        has no more) and wait at most `timeout_s` for its exit code.

        Raises:
            subprocess.TimeoutExpired: the trainer is still running after `timeout_s`.
        """
        if self.trainer.stdin is not None:
            self.trainer.stdin.close()
        return self.trainer.wait(timeout=timeout_s)

    def stop_all(self) -> None:
        """Stop every child still running: the proxy first (gracefully), then the server, then the trainer."""
        for name in ("proxy", "serve", "trainer"):
            stop_child(self.procs.get(name), timeout=PROXY_STOP_S if name == "proxy" else 30.0)
