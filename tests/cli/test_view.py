"""trajstore/cli/view.py: ``traj view`` as a real process (binds, prints its URL, serves the list,
asks for the token when one is set, stops on SIGTERM), and its refusals as one line."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from typer.testing import CliRunner

from trajstore.cli.main import app

runner = CliRunner()


def _start(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", "from trajstore.cli.main import app; app()", "view", *args],
                            stderr=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, **env})
    deadline = time.monotonic() + 120
    lines = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        lines.append(line)
        m = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
        if m:
            return proc, m.group(1)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError("".join(lines))


def test_serves_until_sigterm(known_store):
    proc, url = _start([known_store.uri, "--port", "0"], {})
    try:
        with urllib.request.urlopen(url + "?source=openhands", timeout=120) as r:
            body = r.read().decode()
        assert r.status == 200 and 'data-id="C"' in body and 'data-id="A"' not in body
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0


def test_token_from_the_environment(known_store):
    proc, url = _start([known_store.uri, "--port", "0", "--client-token-env", "MY_VIEW_TOKEN"], {"MY_VIEW_TOKEN": "abc"})
    try:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url, timeout=120)
        assert e.value.code == 401
        req = urllib.request.Request(url, headers={"Authorization": "Bearer abc"})
        with urllib.request.urlopen(req, timeout=120) as r:
            assert r.status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=120)


@pytest.mark.parametrize(("args", "message"), [
    (["{missing}"], "error: "),
    (["{store}", "--where", "bogus = 1"], "error: invalid --where predicate"),
])
def test_refusals_are_one_line(known_store, tmp_path, args, message):
    args = [a.replace("{missing}", str(tmp_path / "nope")).replace("{store}", known_store.uri) for a in args]
    res = runner.invoke(app, ["view", *args, "--port", "0"])
    assert res.exit_code == 1, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip() and not ln.startswith("traj view: indexing")]
    assert len(lines) == 1 and lines[0].startswith(message), res.stderr


def test_a_port_in_use_is_one_line_naming_it_and_the_option(known_store):
    # walkthrough: `traj view` on a taken port said only "error: Address already in use"
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = runner.invoke(app, ["view", known_store.uri, "--port", str(port)])
    assert res.exit_code == 1, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip() and not ln.startswith("traj view: indexing")]
    assert len(lines) == 1 and f"port {port} on 127.0.0.1 is already in use" in lines[0], res.stderr
    assert "--port" in lines[0] and "Traceback" not in res.output
