"""The child processes of ``traj demo`` (``traj serve``, ``traj proxy``, the trainer): started with
their output in the run folder, waited for until ready, and stopped; :class:`DemoChildren` is
the one place that waits for them and stops them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajstore.errors import TrajstoreError
from trajstore.lifeline import child_lifeline
from trajstore.proxy.config import GRACEFUL_SHUTDOWN_S
from trajstore.trainer.apps.demo.proxy_shutdown import ProxyShutdown, parse_proxy_shutdown

if TYPE_CHECKING:
    from trajstore.trainer.config import TrainConfig


class DemoError(TrajstoreError):
    """A child process of the demo failed to start (the message names its log file)."""


PROXY_FLUSH_WAIT_S = 120.0
"""After SIGTERM, how long the demo waits for the proxy's "shutdown: flushed" line (s). The flush
writes the open episodes at once; on a loaded 2-core machine it came after the old 60 s SIGKILL."""
PROXY_EXIT_MARGIN_S = 30.0
"""After the flush line, the proxy gets its own grace (the G of "waiting up to G s") plus this
margin (s) to exit before SIGKILL."""
CHILD_STOP_S = 30.0
"""``traj serve`` gets this long to exit after SIGTERM before SIGKILL (s); it stops in at most 10 s."""


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
    lifeline, fds = child_lifeline()  # it ends when this process dies, however that happens
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               HF_HUB_DISABLE_PROGRESS_BARS="1", TQDM_DISABLE="1", **lifeline)
    cmd = [sys.executable, "-m", "trajstore.trainer.apps.demo", "train-child", str(config_path), str(threads)]
    with open(log_path, "wb") as log:
        return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env,
                                pass_fds=fds)


POLL_LINE_PREFIX = "waiting for new trajectories"
"""How the trainer's poll lines start (:meth:`trajstore.trainer.data.stream.TrajectoryStream.waiting_message`):
the demo shows them only with ``--verbose`` (its episode lines already show the progress)."""


def echo_new_lines(path: Path, pos: int, say: Any, *, polls: bool = False) -> int:
    """Print the trainer log's complete lines after byte `pos` (its poll lines only with `polls`);
    return the new position."""
    try:
        with open(path, "rb") as fh:
            fh.seek(pos)
            data = fh.read()
    except OSError:
        return pos
    from rich.markup import escape  # rich: not at every traj command's start-up

    end = data.rfind(b"\n") + 1
    for line in data[:end].decode(errors="replace").split("\n"):
        line = line.rsplit("\r", 1)[-1]  # a progress bar redraws with carriage returns
        if line.strip() and (polls or not line.startswith(POLL_LINE_PREFIX)):
            say(f"[dim]trainer |[/] {escape(line)}", highlight=False)
    return pos + end


LAST_LINE_CHARS = 200
"""Characters of a log's last line quoted in a message at most (the message names the file)."""


def last_line(path: Path) -> str:
    """The last non-blank line of a child's log, shortened to :data:`LAST_LINE_CHARS`, or "" (no log)."""
    try:
        lines = [ln.rsplit("\r", 1)[-1].strip() for ln in path.read_text(errors="replace").splitlines()]
    except OSError:
        return ""
    line = next((ln for ln in reversed(lines) if ln), "")
    return line if len(line) <= LAST_LINE_CHARS else line[:LAST_LINE_CHARS - 3] + "..."


def exit_message(what: str, code: int | None, log: Path) -> str:
    """``<what> exited with code N (log: PATH; last line: ...)``: the log is named, not pasted."""
    tail = last_line(log)
    return f"{what} exited with code {code} (log: {log}" + (f"; last line: {tail})" if tail else ")")


TRAJ_CHILD_CODE = ("from trajstore.lifeline import watch_lifeline; watch_lifeline(); "
                   "from trajstore.cli.main import app; app()")
"""What a ``traj`` child runs: the lifeline's watcher, then the command line."""


def start_traj_child(args: list[str], log_path: Path, threads: int | None = None) -> subprocess.Popen[bytes]:
    """A ``traj`` command of this interpreter as a child process, its output going to `log_path`;
    it stops (SIGTERM, as a user's) when this process dies (:mod:`trajstore.lifeline`)."""
    lifeline, fds = child_lifeline()
    env = dict(os.environ, HF_HUB_DISABLE_PROGRESS_BARS="1", TQDM_DISABLE="1", **lifeline)
    if threads is not None:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    cmd = [sys.executable, "-c", TRAJ_CHILD_CODE, *args]
    with open(log_path, "wb") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, pass_fds=fds)


def free_port() -> int:
    """A TCP port on the loopback interface that is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path, what: str, deadline: float | None) -> bool:
    """Wait until `url` answers 200 (True) or `deadline` (``time.monotonic()``; None = none) passes (False).

    Raises:
        DemoError: `proc` exited first (the message names its log).
    """
    import httpx  # the proxy extra, needed once a child runs

    while deadline is None or time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DemoError(exit_message(what, proc.returncode, log) + " before it was ready")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


def stop_child(proc: subprocess.Popen[bytes] | None, timeout: float = CHILD_STOP_S) -> None:
    """SIGTERM, SIGKILL after `timeout` (s)."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _read_from(path: Path, pos: int) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(pos)
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def stop_proxy_process(proc: subprocess.Popen[bytes], log: Path, *, flush_wait_s: float = PROXY_FLUSH_WAIT_S,
                       margin_s: float = PROXY_EXIT_MARGIN_S, default_grace_s: float = GRACEFUL_SHUTDOWN_S,
                       poll_s: float = 0.1) -> ProxyShutdown:
    """Stop ``traj proxy`` so that its flush can finish, and read back what it reported.

    SIGTERM; wait up to `flush_wait_s` for its "shutdown: flushed" line in `log` (or its exit);
    then wait for its exit up to its own grace (read from that line; `default_grace_s` when the
    line never came) plus `margin_s`; only then SIGKILL. All times in seconds.

    Returns:
        The :class:`ProxyShutdown` parsed from the log written after the SIGTERM.
    """
    if proc.poll() is not None:
        return ProxyShutdown(exit_code=proc.returncode, stopped_by_demo=False, log=str(log))
    try:
        start = log.stat().st_size
    except OSError:
        start = 0
    proc.terminate()
    give_up = time.monotonic() + flush_wait_s
    report = parse_proxy_shutdown(_read_from(log, start))
    while not report.flush_seen and proc.poll() is None and time.monotonic() < give_up:
        time.sleep(poll_s)
        report = parse_proxy_shutdown(_read_from(log, start))
    killed = False
    try:
        proc.wait(timeout=(report.grace_s if report.grace_s is not None else default_grace_s) + margin_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        killed = True
    return replace(parse_proxy_shutdown(_read_from(log, start)), exit_code=proc.returncode, killed=killed,
                   log=str(log))


@dataclass
class DemoChildren:
    """The demo's running child processes by name (``serve``, ``proxy``, ``trainer``) and their
    log files: the one place that waits for them and stops them.

    Attributes:
        procs: the processes by name.
        logs: their log files by name.
        proxy_shutdown: what the proxy reported when it was stopped (None until then).
    """

    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)
    proxy_shutdown: ProxyShutdown | None = None
    _trainer_stop_sent: bool = field(default=False, init=False, repr=False)

    @property
    def trainer(self) -> subprocess.Popen[bytes]:
        return self.procs["trainer"]

    def start(self, name: str, proc: subprocess.Popen[bytes], log: Path) -> subprocess.Popen[bytes]:
        """Keep `proc` (its output going to `log`) as child `name`."""
        self.procs[name], self.logs[name] = proc, log
        return proc

    def exited(self, *names: str) -> str | None:
        """The first of `names` whose process has exited, if any."""
        return next((n for n in names if n in self.procs and self.procs[n].poll() is not None), None)

    def stop_proxy(self, **kw: Any) -> ProxyShutdown | None:
        """Stop the proxy and let its flush finish (:func:`stop_proxy_process`; keyword arguments go
        there); the report is kept, and a second call returns it. None when no proxy was started."""
        if self.proxy_shutdown is None and "proxy" in self.procs:
            self.proxy_shutdown = stop_proxy_process(self.procs["proxy"], self.logs["proxy"], **kw)
        return self.proxy_shutdown

    def finish_trainer(self, timeout_s: float | None = None) -> int | None:
        """Tell the trainer no more episodes will come (its stdin closes: it trains on what is
        stored, stops once nothing new comes for its grace period) and wait for its exit code,
        at most `timeout_s` (s; None = as long as it trains). None when it is still running then."""
        if self.trainer.stdin is not None:
            self.trainer.stdin.close()
        try:
            return self.trainer.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def request_trainer_stop(self) -> None:
        """Ask the trainer to stop after its step in progress (one SIGTERM; a second one would
        interrupt the step: :meth:`stop_trainer` sends it only past its timeout)."""
        if not self._trainer_stop_sent and self.trainer.poll() is None:
            self.trainer.send_signal(signal.SIGTERM)
            self._trainer_stop_sent = True

    def stop_trainer(self, timeout_s: float) -> int:
        """Stop the trainer gracefully: SIGTERM (it finishes its step in progress, checkpoints and
        publishes), a second SIGTERM after `timeout_s` (s; the write in progress is rolled back),
        SIGKILL 30 s later. Returns its exit code."""
        proc = self.trainer
        if proc.stdin is not None:
            proc.stdin.close()
        self.request_trainer_stop()
        for sig, wait_s in ((None, timeout_s), (signal.SIGTERM, CHILD_STOP_S), (signal.SIGKILL, 10.0)):
            if proc.poll() is not None:
                break
            if sig is not None:
                proc.send_signal(sig)
            try:
                proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                pass
        return proc.wait()

    def stop_all(self) -> None:
        """Stop every child still running: the proxy first (its flush finishes), then the server,
        then the trainer."""
        self.stop_proxy()
        stop_child(self.procs.get("serve"))
        if "trainer" in self.procs:
            self.stop_trainer(CHILD_STOP_S)
