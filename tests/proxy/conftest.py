"""Helpers for the proxy tests: in-thread servers on free loopback ports, proxy subprocesses.

Every server binds 127.0.0.1 on a port the OS picks and is stopped by its fixture; every
request loop in these tests is bounded.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
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


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 120.0, proc: subprocess.Popen[Any] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f}s")


@pytest.fixture
def fake_upstream() -> Iterator[ServerThread]:
    with ServerThread(fake_app(reply="ok")) as srv:
        yield srv


@pytest.fixture
def start_proxy(tmp_path):
    """start_proxy(upstream_url, **ProxyConfig fields) -> running in-thread proxy (its .url)."""
    from trajstore.proxy.app import create_app

    running: list[ServerThread] = []

    def start(upstream: str, **kw: Any) -> ServerThread:
        kw.setdefault("store", str(tmp_path / "store"))
        kw.setdefault("finish_batch_s", 0.0)  # each /finish written at once (test_finish_batch.py tests the window)
        srv = ServerThread(create_app(ProxyConfig(upstream=upstream, **kw)))
        srv.__enter__()
        running.append(srv)
        return srv

    yield start
    for srv in reversed(running):
        srv.__exit__()


@contextlib.contextmanager
def serve_process(*args: str, timeout: float = 300.0) -> Iterator[str]:
    """`traj serve ARGS` as a child process on a free port (one torch thread); yields its base URL
    once /health answers, and stops it."""
    port = free_port()
    proc = subprocess.Popen([*TRAJ, "serve", "--port", str(port), "--threads", "1", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/health", timeout, proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def proxy_process(upstream: str, store: str, *extra: str, env: dict[str, str] | None = None,
                  log_path: str | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """`traj proxy` as a child process on a free port; returns (process, base URL)."""
    port = free_port()
    cmd = [*TRAJ, "proxy", "--upstream", upstream, "--store", store,
           "--port", str(port), *extra]
    out = open(log_path, "wb") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/health", 60, proc)
    except Exception:
        proc.kill()
        raise
    return proc, url
