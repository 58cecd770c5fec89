"""Helpers for the proxy tests: in-thread servers on free loopback ports, proxy subprocesses.

Every server binds 127.0.0.1 on a port the OS picks (a child process is started with ``--port 0``
and says which one it bound: no port is chosen first and bound later, when another process on a
busy machine may have taken it) and is stopped by its fixture; every request loop in these tests
is bounded, by deadlines generous enough for a loaded machine (they only bound a hang).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from trajstore.http.server import ServerThread  # noqa: E402
from trajstore.proxy.config import ProxyConfig  # noqa: E402
from trajstore.proxy.testing import fake_app  # noqa: E402

TRAJ = [sys.executable, "-c", "from trajstore.cli.main import app; app()"]
"""The ``traj`` command of this interpreter."""


REQUEST_TIMEOUT_S = 120.0
"""How long a request of these tests may take before it counts as hung (s)."""


@pytest.fixture(scope="package", autouse=True)
def _requests_outlast_a_loaded_machine() -> Iterator[None]:
    """httpx's ``get``/``post``/``stream`` give up after 5 s by default, which a ``/finish``
    writing a shard on a loaded machine can take: a request that names no timeout gets
    :data:`REQUEST_TIMEOUT_S` (a bound on a hang, not a wait)."""
    with pytest.MonkeyPatch.context() as mp:
        for name in ("get", "post", "stream"):
            mp.setattr(httpx, name, functools.partial(getattr(httpx, name), timeout=REQUEST_TIMEOUT_S))
        yield


def wait_http(url: str, timeout: float = 120.0, proc: subprocess.Popen[Any] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:  # a refused connection fails at once; an answer may be slow on a loaded machine
            if httpx.get(url, timeout=max(1.0, min(30.0, deadline - time.monotonic()))).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f}s")


def wait_bound_url(log_path: str, proc: subprocess.Popen[Any], timeout: float = 300.0) -> str:
    """The ``http://127.0.0.1:<port>`` a ``traj proxy`` / ``traj serve`` started with ``--port 0``
    printed into `log_path` (its stderr) once it had bound the port."""
    deadline = time.monotonic() + timeout
    while True:
        with open(log_path, errors="replace") as fh:
            text = fh.read()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", text)
        if m:
            return f"http://127.0.0.1:{m.group(1)}"
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode} before saying which port it bound:\n{text[-3000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no bound port printed within {timeout:.0f} s:\n{text[-3000:]}")
        time.sleep(0.05)


def release_held_calls(upstream_url: str) -> None:
    """Open every gate of the fake upstream (``fake_hold``): its shutdown waits for held calls."""
    with contextlib.suppress(httpx.HTTPError):
        httpx.post(f"{upstream_url}/_fake/release", json={}, timeout=REQUEST_TIMEOUT_S)


def wait_held(upstream_url: str, gate: str, n: int, timeout: float = REQUEST_TIMEOUT_S) -> None:
    """Wait until `n` calls wait at the fake upstream's gate `gate` (they reached the upstream)."""
    deadline = time.monotonic() + timeout
    while (held := httpx.get(f"{upstream_url}/_fake/held").json()).get(gate, 0) < n:
        assert time.monotonic() < deadline, f"{n} call(s) never reached gate {gate!r}: {held}"
        time.sleep(0.02)


@pytest.fixture
def fake_upstream() -> Iterator[ServerThread]:
    with ServerThread(fake_app(reply="ok")) as srv:
        yield srv
        release_held_calls(srv.url)


@pytest.fixture
def start_proxy(tmp_path):
    """start_proxy(upstream_url, **ProxyConfig fields) -> running in-thread proxy (its .url; its
    .cfg is the ProxyConfig the running proxy reads, so a test can shorten a timeout when the
    moment it stands for begins instead of racing a short one from the start)."""
    from trajstore.proxy.app import create_app

    running: list[ServerThread] = []

    def start(upstream: str, **kw: Any) -> ServerThread:
        kw.setdefault("store", str(tmp_path / "store"))
        kw.setdefault("finish_batch_s", 0.0)  # each /finish written at once (test_finish_batch.py tests the window)
        cfg = ProxyConfig(upstream=upstream, **kw)
        srv = ServerThread(create_app(cfg))
        srv.cfg = cfg  # type: ignore[attr-defined]
        srv.__enter__()
        running.append(srv)
        return srv

    yield start
    for srv in reversed(running):
        srv.__exit__()


@contextlib.contextmanager
def serve_process(*args: str, timeout: float = 300.0) -> Iterator[str]:
    """`traj serve ARGS` as a child process on a port it picks (``--port 0``, one torch thread);
    yields its base URL once /health answers, and stops it."""
    fd, log_path = tempfile.mkstemp(prefix="serve-", suffix=".log")
    os.close(fd)
    with open(log_path, "wb") as fh:
        proc = subprocess.Popen([*TRAJ, "serve", "--port", "0", "--threads", "1", *args],
                                stdout=subprocess.DEVNULL, stderr=fh)
    try:
        url = wait_bound_url(log_path, proc, timeout)
        wait_http(url + "/health", timeout, proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        os.unlink(log_path)


def proxy_process(upstream: str, store: str, *extra: str, env: dict[str, str] | None = None,
                  log_path: str | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """`traj proxy` as a child process on a port it picks (``--port 0``); returns (process, base URL).
    Its output goes to `log_path` (default: a new ``proxy-*.log`` beside the store)."""
    if log_path is None:
        fd, log_path = tempfile.mkstemp(prefix="proxy-", suffix=".log", dir=os.path.dirname(os.path.abspath(store)))
        os.close(fd)
    cmd = [*TRAJ, "proxy", store, "--upstream", upstream, "--port", "0", *extra]
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    try:
        url = wait_bound_url(log_path, proc)
        wait_http(url + "/health", 120, proc)
    except Exception:
        proc.kill()
        raise
    return proc, url
