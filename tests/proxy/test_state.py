"""The episode lifecycle kept by ProxyState (trajstore/proxy/state.py): idle eviction that a later
call continues, and the shutdown (SIGTERM) that makes open episodes durable before it waits for
the calls in flight."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from trajstore.http.server import ServerThread
from trajstore.proxy.testing import fake_app, render
from trajstore.reader import read_trajectories
from trajstore.store import open_store

from .conftest import proxy_process, release_held_calls, wait_held

REPLY_IDS = [115, 111, 0]  # the fake's "ok" and its end-of-turn token


def _rows(store: str) -> list[dict]:
    if not os.path.isdir(os.path.join(store, "trajectories")):
        return []
    return sorted(read_trajectories(store).to_pylist(), key=lambda r: r["trajectory_id"])


def _chat(url: str, session: str, msgs: list[dict], **extra) -> httpx.Response:
    return httpx.post(f"{url}/s/{session}/v1/chat/completions", json={"model": "fake", "messages": msgs, **extra},
                      timeout=60)


def test_idle_eviction_is_linked_to_the_later_part_and_reported(fake_upstream, start_proxy, tmp_path, caplog):
    # A tool that ran longer than --session-timeout got the first part written aborted, the
    # harness's next call opened a new, unlinked episode under the same key, and /finish reported
    # `completed` for the later part only
    caplog.set_level(logging.INFO, logger="trajstore.proxy")
    store = str(tmp_path / "store")
    # --session-timeout is long while the harness calls (a loaded machine may take any time
    # between two calls) and 0.5 s for the long tool call (set on the running proxy's config)
    px = start_proxy(fake_upstream.url, session_timeout_s=600)
    msgs = [{"role": "user", "content": "hi"}]
    for turn in range(2):
        r = _chat(px.url, "ev", msgs)
        assert "x-trajstore-evicted" not in r.headers
        msgs += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": f"tool output {turn}"}]
    px.cfg.session_timeout_s = 0.5
    deadline = time.monotonic() + 120
    while not _rows(store):  # the long tool call: the episode idles past the timeout
        assert time.monotonic() < deadline, "never evicted"
        time.sleep(0.05)
    px.cfg.session_timeout_s = 600
    assert httpx.get(f"{px.url}/proxy/stats").json()["sessions_evicted"] == 1
    r = _chat(px.url, "ev", msgs)  # the harness goes on
    assert r.status_code == 200 and r.headers["x-trajstore-evicted"] == "1"  # 1 trajectory written as aborted
    msgs += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    assert "x-trajstore-evicted" not in _chat(px.url, "ev", msgs).headers  # said once
    done = httpx.post(f"{px.url}/s/ev/finish", json={"status": "completed", "reward": 1.0}).json()
    (first,) = [r for r in _rows(store) if r["trajectory_id"] not in done["trajectories"]]
    assert done["status"] == "completed" and done["evicted_parts"] == [first["trajectory_id"]]
    a, b = _rows(store)
    ma, mb = json.loads(a["metadata"]), json.loads(b["metadata"])
    assert a["status"] == "aborted" and ma["end_reason"].startswith("idle") and len(a["spans"]) == 4
    assert ma["episode"]["id"] == mb["episode"]["id"] and b["trajectory_id"].startswith(ma["episode"]["id"])
    assert (ma["episode"]["part"], ma["episode"]["change"]) == (1, None)
    assert (mb["episode"]["part"], mb["episode"]["parts"], mb["episode"]["change"]) == (2, 2, "after-idle-eviction")
    assert b["status"] == "completed" and b["reward"] == 1.0 and mb["calls"] == 4
    assert b["tokens"][:len(render(msgs[:-4]))] == render(msgs[:-4])  # the earlier context is its prompt
    # linked as the continuation of the evicted part, sharing its whole context
    assert (b["parent_trajectory_id"], b["fork_point"], b["link_kind"]) == (a["trajectory_id"], a["num_tokens"],
                                                                           "continuation")
    assert a["episode_id"] == b["episode_id"] == ma["episode"]["id"] and a["link_kind"] is None
    assert a["abandoned"] is False and b["abandoned"] is False  # one line of context: credited through the chain
    assert b["tokens"][:a["num_tokens"]] == a["tokens"]
    said = [r.getMessage() for r in caplog.records if "evicted" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("session ev: evicted"), said


# -- shutdown ------------------------------------------------------------------------------------

@pytest.fixture
def slow_upstream():
    """The fake upstream, whose held calls (``fake_hold``) are answered only when a test releases
    them; stopped without waiting for the answers a killed proxy abandoned."""
    srv = ServerThread(fake_app(reply="ok")).__enter__()
    yield srv
    release_held_calls(srv.url)
    srv.server.force_exit = True
    srv.__exit__()


def _wait_line(log: str, text: str, proc, timeout: float) -> str:
    """The first line of the proxy's log that contains `text` (fails after `timeout` s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(log, errors="replace") as fh:
            for line in fh:
                if text in line:
                    return line.strip()
        assert proc.poll() is None or time.monotonic() < deadline, "the proxy exited without the line"
        time.sleep(0.01)
    with open(log, errors="replace") as fh:
        raise AssertionError(f"no {text!r} line within {timeout:.0f} s; the log:\n{fh.read()[-3000:]}")


class _Throttle:
    """Slows a process to a fraction of one core: SIGSTOP / SIGCONT in turns (a proxy under load)."""

    def __init__(self, pid: int, run_s: float = 0.01, stop_s: float = 0.04):
        import signal

        self.pid, self.run_s, self.stop_s, self.signal = pid, run_s, stop_s, signal
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.done.is_set():
            try:
                os.kill(self.pid, self.signal.SIGSTOP)
                time.sleep(self.stop_s)
                os.kill(self.pid, self.signal.SIGCONT)
                time.sleep(self.run_s)
            except ProcessLookupError:
                return

    def __enter__(self) -> _Throttle:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(5)
        try:
            os.kill(self.pid, self.signal.SIGCONT)
        except ProcessLookupError:
            pass


def _delta_text(event: str) -> str:
    """The answer text an SSE ``data:`` line of a chat stream carries ("" for none, or not a chunk)."""
    try:
        choices = json.loads(event[5:]).get("choices") or []
    except ValueError:  # data: [DONE]
        return ""
    return "".join((c.get("delta") or {}).get("content") or "" for c in choices)


def _in_flight(url: str, session: str, msgs: list[dict], out: dict, *, got_token: threading.Event | None = None,
               **extra) -> threading.Thread:
    """A call of `session` started in a thread; its outcome (response, or exception) lands in
    out[session]; a stream sets `got_token` once the client has received a token of the answer."""

    def run() -> None:
        try:
            if extra.get("stream"):
                body = {"model": "fake", "messages": msgs, **extra}
                lines = out.setdefault(f"{session}:lines", [])
                with httpx.stream("POST", f"{url}/s/{session}/v1/chat/completions", json=body, timeout=120) as r:
                    lines = []
                    for ln in r.iter_lines():
                        if ln.startswith("data:"):
                            lines.append(ln)
                            if got_token is not None and _delta_text(ln):
                                got_token.set()
                    out[session] = (r.status_code, lines)
            else:
                r = _chat(url, session, msgs, **extra)
                out[session] = (r.status_code, r.json())
        except Exception as e:  # noqa: BLE001 - checked by the test
            out[session] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _wait_stats(url: str, what: str, ok, timeout: float = 120) -> dict:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not ok(stats := httpx.get(f"{url}/proxy/stats").json()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {stats}"
        time.sleep(0.02)
    return stats


def _wait_in_flight(url: str, n: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while httpx.get(f"{url}/proxy/stats").json()["calls_in_flight"] < n:
        assert time.monotonic() < deadline, httpx.get(f"{url}/proxy/stats").json()
        time.sleep(0.05)


@contextlib.contextmanager
def _proxy_with_grace(upstream: str, tmp_path, grace: str) -> Iterator[tuple[subprocess.Popen, str, str, str]]:  # noqa: ANN001
    """`traj proxy` with ``--shutdown-grace`` `grace` seconds, its store and log under `tmp_path`:
    yields (process, URL, store, log path); the process is killed on the way out if still running."""
    store, log = str(tmp_path / "store"), str(tmp_path / "proxy.log")
    proc, url = proxy_process(upstream, store, "--shutdown-grace", grace, log_path=log)
    try:
        yield proc, url, store, log
    finally:
        if proc.poll() is None:
            proc.kill()


def _exits_cleanly(proc: subprocess.Popen, clients: list[threading.Thread]) -> None:
    """The proxy exits with status 0 and every client thread ends (deadlines as a safety net)."""
    assert proc.wait(120) == 0
    for t in clients:
        t.join(120)


def test_sigterm_makes_recorded_calls_durable_before_it_waits_for_calls_in_flight(slow_upstream, tmp_path):
    # On SIGTERM uvicorn waited for the calls in flight (30 s), cancelled them, and only then
    # were open episodes written; a supervisor's SIGKILL came first and episodes with recorded
    # calls were lost. Now the flush comes first: a SIGKILL right after its log line (the proxy
    # slowed by SIGSTOP / SIGCONT, 4 calls held at the upstream) loses no recorded call.
    with _proxy_with_grace(slow_upstream.url, tmp_path, "60") as (proc, url, store, log):
        msgs = {}
        for i in range(4):
            m = [{"role": "user", "content": f"task {i}"}]
            assert _chat(url, f"busy{i}", m).status_code == 200
            msgs[f"busy{i}"] = m + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "tool"}]
        quiet = [{"role": "user", "content": "quiet"}]
        for _ in range(2):
            assert _chat(url, "quiet", quiet).status_code == 200
            quiet += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
        out: dict = {}
        for k, m in msgs.items():
            _in_flight(url, k, m, out, fake_hold="never")  # the upstream never answers them
        _wait_in_flight(url, 4)
        with _Throttle(proc.pid):
            proc.send_signal(signal.SIGTERM)
            line = _wait_line(log, "shutdown: flushed", proc, timeout=120)
            proc.kill()  # the supervisor's SIGKILL, right after the line
        proc.wait(30)
    assert "flushed 5 open episode(s) (6 recorded call(s)) as aborted; waiting up to 60 s for 4 call(s) in flight" \
        in line, line
    assert open_store(store).list_shards(strict=True)  # every shard whole
    got = {json.loads(r["metadata"])["session"]: r for r in _rows(store)}
    assert sorted(got) == ["busy0", "busy1", "busy2", "busy3", "quiet"]
    for k, r in got.items():
        meta = json.loads(r["metadata"])
        assert r["status"] == "aborted" and meta["end_reason"] == "proxy shutting down"
        assert meta["calls_in_flight"] == (0 if k == "quiet" else 1)
        assert r["num_actions"] == (2 if k == "quiet" else 1)
        if k != "quiet":  # may be continued by the call in flight: linked as part 1
            assert (meta["episode"]["part"], meta["episode"]["change"]) == (1, None)


def test_sigterm_stores_calls_answered_within_the_grace_and_cuts_the_rest(slow_upstream, tmp_path):
    # Calls that finish within --shutdown-grace are stored (a continuation part
    # of their episode, whose first part the flush wrote); a call still running when the grace
    # ends is cut by the proxy with an error the client sees (503, or an SSE error event),
    # counted. The upstream holds every call until the test lets it answer: the two fast ones
    # right after the flush (answered after it on any machine), the others never. The grace ends
    # at a second SIGTERM, once the fast ones are stored (its own deadline is the next test's).
    out: dict = {}
    got_token = threading.Event()
    with _proxy_with_grace(slow_upstream.url, tmp_path, "600") as (proc, url, store, log):
        ctx = {}
        for k in ("fast", "fast_stream", "slow", "slow_stream"):
            m = [{"role": "user", "content": k}]
            assert _chat(url, k, m).status_code == 200
            ctx[k] = m + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "go on"}]
        threads = [_in_flight(url, "fast", ctx["fast"], out, fake_hold="fast"),
                   _in_flight(url, "fast_stream", ctx["fast_stream"], out, fake_hold="fast", stream=True),
                   _in_flight(url, "slow", ctx["slow"], out, fake_hold="never"),
                   _in_flight(url, "slow_stream", ctx["slow_stream"], out, fake_hold="never", fake_hold_after=1,
                              stream=True, got_token=got_token)]
        wait_held(slow_upstream.url, "fast", 2)
        wait_held(slow_upstream.url, "never", 2)
        assert got_token.wait(120), out  # the slow stream's client has its first token
        _wait_in_flight(url, 4)
        proc.send_signal(signal.SIGTERM)
        flushed = _wait_line(log, "shutdown: flushed", proc, timeout=120)
        assert "waiting up to 600 s for 4 call(s) in flight" in flushed, flushed
        refused = _chat(url, "fast", [{"role": "user", "content": "new"}])  # during the grace: no new calls
        assert refused.status_code == 503 and "shutting down" in refused.json()["error"]["message"]
        assert _chat(url, "newcomer", [{"role": "user", "content": "x"}]).status_code == 503
        assert httpx.post(f"{url}/s/slow/finish", json={}).status_code == 503
        assert httpx.get(f"{url}/proxy/stats").json()["shutting_down"] is True
        httpx.post(f"{slow_upstream.url}/_fake/release", json={"name": "fast"}).raise_for_status()
        _wait_stats(url, "the fast calls stored after the flush", lambda st: st["calls_after_shutdown_flush"] == 2)
        proc.send_signal(signal.SIGTERM)  # a second signal: the grace ends now
        _exits_cleanly(proc, threads)
    done = _wait_line(log, "shutdown complete", proc, timeout=1)
    assert "2 call(s) answered after the flush were stored, 2 call(s) cut at the deadline" in done, done
    assert out["fast"][0] == 200 and out["fast"][1]["choices"][0]["message"]["content"] == "ok"
    assert out["fast_stream"][0] == 200 and out["fast_stream"][1][-1] == "data: [DONE]"
    status, err = out["slow"]
    assert status == 503 and err["error"]["type"] == "proxy_shutting_down", out["slow"]
    assert "nothing of it is stored" in err["error"]["message"]
    status, events = out["slow_stream"]
    last = json.loads(events[-1][5:])
    assert status == 200 and last["error"]["type"] == "proxy_shutting_down", events  # never a silent cut
    received = "".join(_delta_text(e) for e in events[:-1])
    assert received == "o", events  # the one token the upstream sent before it stalled
    by: dict[str, list[dict]] = {}
    for r in _rows(store):
        by.setdefault(json.loads(r["metadata"])["session"], []).append(r)
    assert sorted(by) == ["fast", "fast_stream", "slow", "slow_stream"]
    for k in ("fast", "fast_stream", "slow_stream"):
        first, cont = by[k]
        m1, m2 = json.loads(first["metadata"]), json.loads(cont["metadata"])
        assert m1["calls_in_flight"] == 1 and m1["episode"]["id"] == m2["episode"]["id"]
        assert (m2["episode"]["part"], m2["episode"]["change"]) == (2, "after-shutdown-flush")
        assert cont["status"] == "aborted" and m2["end_reason"] == "proxy shutting down"
        assert cont["tokens"][:len(render(ctx[k]))] == render(ctx[k])  # the earlier context is its prompt
        action = [cont["tokens"][s["start"]:s["end"]] for s in cont["spans"] if s["kind"] == "action"]
        if k == "slow_stream":  # cut mid-stream: what the client got is stored, finish_reason abort
            assert received and action == [[b + 4 for b in received.encode()]], (received, action)
            assert [s["finish_reason"] for s in cont["spans"] if s["kind"] == "action"] == ["abort"]
            assert m2["calls_cut_at_shutdown"] == 1
        else:
            assert action == [REPLY_IDS]
    (slow,) = by["slow"]  # its call was cut before any token: nothing more to store
    assert json.loads(slow["metadata"])["calls_in_flight"] == 1 and slow["num_actions"] == 1


def test_sigterm_cuts_a_call_still_running_at_the_end_of_the_grace(slow_upstream, tmp_path):
    # the grace's own deadline: a call the upstream never answers is cut when --shutdown-grace
    # (1 s) has passed after the flush, with a 503 the client sees, and the proxy exits
    out: dict = {}
    with _proxy_with_grace(slow_upstream.url, tmp_path, "1") as (proc, url, store, log):
        m = [{"role": "user", "content": "stuck"}]
        assert _chat(url, "stuck", m).status_code == 200
        t = _in_flight(url, "stuck", m + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "go"}],
                       out, fake_hold="never")
        wait_held(slow_upstream.url, "never", 1)
        proc.send_signal(signal.SIGTERM)
        _exits_cleanly(proc, [t])
    flushed = _wait_line(log, "shutdown: flushed", proc, timeout=1)
    assert "(1 recorded call(s)) as aborted; waiting up to 1 s for 1 call(s) in flight" in flushed, flushed
    done = _wait_line(log, "shutdown complete", proc, timeout=1)
    assert "0 call(s) answered after the flush were stored, 1 call(s) cut at the deadline" in done, done
    status, err = out["stuck"]
    assert status == 503 and err["error"]["type"] == "proxy_shutting_down", out["stuck"]
    assert "at the end of its 1 s grace" in err["error"]["message"]
    (row,) = _rows(store)
    assert row["status"] == "aborted" and row["num_actions"] == 1
