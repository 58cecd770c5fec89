"""Proxy benchmark: what ``traj proxy`` adds to each model call, against a fast upstream.

    python bench/proxy.py                                # concurrency 1 4 16 64, JSON and SSE
    python bench/proxy.py --concurrency 1 8 --sessions 40

Three processes on loopback: the fake upstream of :mod:`trajstore.proxy.testing` (no model:
answers at once in vLLM's shape, token ids and log-probs included, ``--reply-tokens`` tokens
per answer, one SSE chunk per token when streaming), ``traj proxy`` in front of it recording
into a temporary local store, and this load generator (asyncio + httpx). For each mode
(plain JSON, SSE stream) and concurrency level C, C workers each play sessions of ``--turns``
chat calls whose prompt grows by the last answer plus an observation; the same calls go once
straight to the upstream (the baseline) and once through the proxy (session URL
``/s/<key>/v1``, then ``POST /s/<key>/finish``), in alternating rounds so drift hits both.

A third path, ``--hop`` (on by default), goes through a bare pass-through forwarder built
from the proxy's own stack (FastAPI on uvicorn, one httpx client, the same listening socket)
that records nothing: proxy - hop is what recording costs, hop - direct what any Python HTTP
hop costs on this machine.

Per call: latency from sending the request to the last byte (and, streaming, to the first
chunk). A call that fails (connection error, HTTP error) is counted in ``errors`` for its
configuration and its session is dropped (through the proxy it is finished as ``failed``),
instead of ending the run. Printed per mode and level: p50 and p99 direct and through the proxy, the added
latency (proxy - direct, per percentile), calls/s both ways (the proxy's wall time includes
the ``/finish`` calls, which write the episode to the store before returning) and their ratio.
The target: p50 added latency <= 5 ms on loopback.

Then the integrity check of everything sent through the proxy, the highest load included:
every session whose ``/finish`` answered is in the store exactly once, ``completed``, with one
action span per call; nothing is lost or duplicated.

Exit status 0 even when the target is missed: this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from trajstore.lifeline import Stopped, child_lifeline, signals_stop
from trajstore.reader import read_trajectories

TARGET_P50_MS = 5.0
OBSERVATION = "tool output: " + "x" * 180  # ~190 tokens of the fake's byte-level tokenizer per turn


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


WATCH = "from trajstore.lifeline import watch_lifeline; watch_lifeline()\n"
"""First line of every child's code: it ends when this benchmark dies (trajstore.lifeline)."""


def _popen(cmd: list[str], **kw: Any) -> subprocess.Popen[bytes]:
    """A server child (``python -c WATCH + code``) handed the lifeline's read end."""
    env, fds = child_lifeline()
    return subprocess.Popen(cmd, env={**os.environ, **env}, pass_fds=fds, **kw)


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: process exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1.0).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f}s")


def start_upstream(reply_tokens: int) -> tuple[subprocess.Popen[bytes], str]:
    """The fake upstream in its own process (so it does not share a GIL with the others)."""
    port = _free_port()
    reply = ("abcdefghij" * (reply_tokens // 10 + 1))[:max(1, reply_tokens - 1)]  # + EOS = reply_tokens
    code = ("import uvicorn; from trajstore.proxy.testing import fake_app; "
            f"uvicorn.run(fake_app(reply={reply!r}), host='127.0.0.1', port={port}, log_level='warning', "
            "access_log=False)")
    proc = _popen([sys.executable, "-c", WATCH + code], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    _wait_http(url + "/v1/models", proc)
    return proc, url


def start_proxy(upstream: str, store: str, log: str) -> tuple[subprocess.Popen[bytes], str]:
    """``traj proxy`` as users start it."""
    port = _free_port()
    cmd = [sys.executable, "-c", WATCH + "from trajstore.cli.main import app; app()", "proxy", store, "--upstream", upstream,
           "--port", str(port), "--tokenizer", "fake-bytes", "--session-timeout", "3600"]
    with open(log, "wb") as fh:
        proc = _popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    _wait_http(url + "/health", proc)
    return proc, url


HOP_APP = '''
import sys, httpx, uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse
from trajstore.http.sockets import listening_socket
up, port = sys.argv[1], int(sys.argv[2])
app = FastAPI(docs_url=None, redoc_url=None)
client = httpx.AsyncClient(base_url=up, timeout=120, limits=httpx.Limits(max_connections=1024,
                           max_keepalive_connections=256))

async def fwd(request: Request):
    raw = await request.body()
    req = client.build_request("POST", "/v1/chat/completions", content=raw,
                               headers={"content-type": "application/json"})
    r = await client.send(req, stream=True)
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        async def relay():
            try:
                async for part in r.aiter_raw():
                    yield part
            finally:
                await r.aclose()
        return StreamingResponse(relay(), media_type="text/event-stream")
    body = await r.aread()
    await r.aclose()
    return Response(body, status_code=r.status_code, media_type="application/json")

app.add_api_route("/v1/chat/completions", fwd, methods=["POST"])
app.add_api_route("/s/{key}/v1/chat/completions", fwd, methods=["POST"])

@app.post("/s/{key}/finish")
async def finish(key: str):
    return {"status": "completed"}

uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False)).run(
    sockets=[listening_socket("127.0.0.1", port)])
'''


def start_hop(upstream: str) -> tuple[subprocess.Popen[bytes], str]:
    """The pass-through forwarder (see the module docstring) in its own process."""
    port = _free_port()
    proc = _popen([sys.executable, "-c", WATCH + HOP_APP, upstream, str(port)], stdout=subprocess.DEVNULL,
                  stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    _wait_http(url + "/docs-not-here", proc)
    return proc, url


@dataclass
class LoadResult:
    """Latencies (s) of one configuration's calls and its wall time."""

    total: list[float] = field(default_factory=list)
    first: list[float] = field(default_factory=list)
    calls: int = 0
    wall: float = 0.0
    finished: list[str] = field(default_factory=list)  # sessions whose /finish answered "completed"
    errors: int = 0  # calls that failed (their sessions are dropped)
    failed: list[str] = field(default_factory=list)  # through the proxy: sessions finished as failed


async def _call(client: httpx.AsyncClient, url: str, body: dict[str, Any], stream: bool, out: LoadResult) -> str:
    """One chat call; returns the answer's text."""
    t0 = time.perf_counter()
    if not stream:
        r = await client.post(url, json=body)
        r.raise_for_status()
        text = r.json()["choices"][0]["message"]["content"]
        out.total.append(time.perf_counter() - t0)
        return text
    parts: list[str] = []
    first = None
    async with client.stream("POST", url, json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            if first is None:
                first = time.perf_counter() - t0
            payload = line[5:].strip()
            if payload == "[DONE]":
                break
            ch = json.loads(payload)["choices"]
            if ch:
                parts.append(ch[0]["delta"].get("content") or "")
    out.total.append(time.perf_counter() - t0)
    out.first.append(first if first is not None else out.total[-1])
    return "".join(parts)


async def run_load(base: str, *, proxy: bool, stream: bool, concurrency: int, sessions: int, turns: int,
                   tag: str) -> LoadResult:
    """`sessions` sessions of `turns` calls, `concurrency` at a time."""
    out = LoadResult()
    limits = httpx.Limits(max_connections=concurrency + 8, max_keepalive_connections=concurrency + 8)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(sessions):
        queue.put_nowait(i)

    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        async def worker() -> None:
            while True:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                key = f"{tag}-{i}"
                url = f"{base}/s/{key}/v1/chat/completions" if proxy else f"{base}/v1/chat/completions"
                msgs = [{"role": "system", "content": "You are a careful agent."},
                        {"role": "user", "content": f"task {key}: " + OBSERVATION}]
                ok = True
                for _ in range(turns):
                    body: dict[str, Any] = {"model": "fake", "messages": msgs, "temperature": 1.0}
                    if stream:
                        body["stream"] = True
                    try:
                        text = await _call(client, url, body, stream, out)
                    except httpx.HTTPError as e:
                        out.errors += 1
                        print(f"{tag}: call failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                        ok = False
                        break
                    out.calls += 1
                    msgs = [*msgs, {"role": "assistant", "content": text}, {"role": "user", "content": OBSERVATION}]
                if proxy:
                    try:
                        r = await client.post(f"{base}/s/{key}/finish",
                                              json={"reward": 1.0} if ok else {"status": "failed"})
                        r.raise_for_status()
                    except httpx.HTTPError as e:
                        out.errors += 1
                        print(f"{tag}: finish failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                        continue
                    if ok and r.json()["status"] == "completed":
                        out.finished.append(key)
                    elif not ok:
                        out.failed.append(key)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        out.wall = time.perf_counter() - t0
    return out


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs) * 1e3, q)) if xs else float("nan")


def check_store(store: str, expected: dict[str, int], failed: set[str] | None = None) -> dict[str, Any]:
    """Every session of `expected` (session key -> calls) stored once, completed, with one
    action span per call; and nothing else stored but the `failed` sessions (a call of theirs
    failed), which must not be ``completed``."""
    failed = failed or set()
    t = read_trajectories(store, columns=["trajectory_id", "status", "num_actions", "metadata"]).to_pylist()
    by_session: dict[str, list[dict[str, Any]]] = {}
    for r in t:
        by_session.setdefault(json.loads(r["metadata"])["session"], []).append(r)
    lost = sorted(set(expected) - set(by_session))
    dup = sorted(k for k, rs in by_session.items() if len(rs) > 1)
    bad = sorted(k for k, rs in by_session.items() if k in expected and any(
        r["status"] != "completed" or r["num_actions"] != expected[k] for r in rs))
    bad += sorted(k for k, rs in by_session.items() if k in failed and any(r["status"] == "completed" for r in rs))
    extra = sorted(set(by_session) - set(expected) - failed)
    return {"sessions_sent": len(expected), "sessions_stored": len(by_session), "rows": len(t), "lost": len(lost),
            "duplicated": len(dup), "wrong": len(bad), "unexpected": len(extra),
            "failed_sessions": len(failed),
            "ok": not (lost or dup or bad or extra), "examples": (lost + dup + bad + extra)[:5]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64], help="concurrent sessions")
    ap.add_argument("--sessions", type=int, default=None,
                    help="sessions per round and level (default: max(24, 4 x concurrency))")
    ap.add_argument("--turns", type=int, default=4, help="calls per session")
    ap.add_argument("--reply-tokens", type=int, default=64, help="tokens per answer (SSE: one chunk each)")
    ap.add_argument("--rounds", type=int, default=2, help="alternating direct/proxy rounds per configuration")
    ap.add_argument("--modes", nargs="+", default=["json", "sse"], choices=["json", "sse"])
    ap.add_argument("--no-hop", action="store_true", help="skip the pass-through forwarder baseline")
    ap.add_argument("--keep", action="store_true", help="keep the temporary store and the proxy log")
    ap.add_argument("--json", action="store_true", help="print the results as one JSON object")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="trajstore-bench-proxy-")
    store, log = os.path.join(tmp, "store"), os.path.join(tmp, "proxy.log")
    procs: list[subprocess.Popen[bytes]] = []
    results: list[dict[str, Any]] = []
    expected: dict[str, int] = {}  # session finished through the proxy -> its calls
    failed: set[str] = set()  # sessions through the proxy with a failed call
    stats: dict[str, Any] = {}
    try:
        up, up_url = start_upstream(args.reply_tokens)
        procs.append(up)
        px, px_url = start_proxy(up_url, store, log)
        procs.append(px)
        hop_url = None
        if not args.no_hop:
            hop, hop_url = start_hop(up_url)
            procs.append(hop)
            asyncio.run(run_load(hop_url, proxy=True, stream=False, concurrency=2, sessions=4, turns=2, tag="warm"))
        # warm both paths (connections, first-call imports)
        asyncio.run(run_load(up_url, proxy=False, stream=False, concurrency=2, sessions=4, turns=2, tag="warm"))
        w = asyncio.run(run_load(px_url, proxy=True, stream=True, concurrency=2, sessions=4, turns=2, tag="warm"))
        expected.update(dict.fromkeys(w.finished, 2))
        for mode in args.modes:
            stream = mode == "sse"
            for c in args.concurrency:
                n = args.sessions or max(24, 4 * c)
                got = {"direct": LoadResult(), "hop": LoadResult(), "proxy": LoadResult()}
                paths = [("direct", up_url), *([("hop", hop_url)] if hop_url else []), ("proxy", px_url)]
                for rnd in range(args.rounds):
                    for path, base in (paths if rnd % 2 == 0 else paths[::-1]):
                        s = asyncio.run(run_load(base, proxy=path != "direct", stream=stream, concurrency=c,
                                                 sessions=n, turns=args.turns, tag=f"{mode}-c{c}-r{rnd}-{path}"))
                        agg = got[path]
                        agg.total += s.total
                        agg.first += s.first
                        agg.calls += s.calls
                        agg.wall += s.wall
                        agg.finished += s.finished
                        agg.errors += s.errors
                        agg.failed += s.failed
                direct, hop, via = got["direct"], got["hop"], got["proxy"]
                expected.update(dict.fromkeys(via.finished, args.turns))
                failed.update(via.failed)
                row = {"mode": mode, "concurrency": c, "calls": via.calls,
                       "direct_p50_ms": _pct(direct.total, 50), "direct_p99_ms": _pct(direct.total, 99),
                       "proxy_p50_ms": _pct(via.total, 50), "proxy_p99_ms": _pct(via.total, 99),
                       "direct_calls_per_s": direct.calls / direct.wall, "proxy_calls_per_s": via.calls / via.wall,
                       "errors": {"direct": direct.errors, "hop": hop.errors, "proxy": via.errors}}
                if hop_url:
                    row.update({"hop_p50_ms": _pct(hop.total, 50), "hop_p99_ms": _pct(hop.total, 99),
                                "hop_calls_per_s": hop.calls / hop.wall})
                    row["recording_p50_ms"] = row["proxy_p50_ms"] - row["hop_p50_ms"]
                row["added_p50_ms"] = row["proxy_p50_ms"] - row["direct_p50_ms"]
                row["added_p99_ms"] = row["proxy_p99_ms"] - row["direct_p99_ms"]
                row["throughput_ratio"] = row["proxy_calls_per_s"] / row["direct_calls_per_s"]
                if stream:
                    row["direct_first_p50_ms"] = _pct(direct.first, 50)
                    row["proxy_first_p50_ms"] = _pct(via.first, 50)
                results.append(row)
                if not args.json:
                    print(f"{mode:4} c={c:<3} direct p50 {row['direct_p50_ms']:7.2f} p99 {row['direct_p99_ms']:7.2f} | "
                          f"proxy p50 {row['proxy_p50_ms']:7.2f} p99 {row['proxy_p99_ms']:7.2f} | added p50 "
                          f"{row['added_p50_ms']:6.2f} p99 {row['added_p99_ms']:7.2f} ms | calls/s "
                          f"{row['direct_calls_per_s']:6.0f} -> {row['proxy_calls_per_s']:6.0f} "
                          f"({row['throughput_ratio']:.2f}x)"
                          + (f" | bare hop p50 {row['hop_p50_ms']:7.2f} p99 {row['hop_p99_ms']:7.2f} "
                             f"({row['hop_calls_per_s']:.0f}/s): recording adds p50 {row['recording_p50_ms']:.2f}"
                             if hop_url else "")
                          + (f" | ERRORS {row['errors']}" if any(row["errors"].values()) else ""), flush=True)
        stats = httpx.get(px_url + "/proxy/stats", timeout=30).json()
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
    # the proxy was stopped cleanly: nothing is open, everything it answered is durable
    integrity = check_store(store, expected, failed)
    summary = {
        "results": results,
        "target_p50_added_ms": TARGET_P50_MS,
        "met": all(r["added_p50_ms"] <= TARGET_P50_MS for r in results),
        "integrity": integrity,
        "proxy_errors": stats.get("errors", {}),
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        worst = max(results, key=lambda r: r["added_p50_ms"])
        print(f"target: p50 added latency <= {TARGET_P50_MS:g} ms: "
              f"{'met' if summary['met'] else 'MISSED'} (worst: {worst['mode']} c={worst['concurrency']} "
              f"{worst['added_p50_ms']:.2f} ms)")
        print(f"integrity: {integrity['sessions_sent']} sessions finished through the proxy, "
              f"{integrity['sessions_stored']} stored, lost {integrity['lost']}, duplicated "
              f"{integrity['duplicated']}, wrong {integrity['wrong']}, unexpected {integrity['unexpected']}"
              f"{'' if integrity['ok'] else ' ' + str(integrity['examples'])}; proxy errors: "
              f"{summary['proxy_errors'] or 'none'}")
    if args.keep:
        print(f"kept: {tmp}", file=sys.stderr)
    else:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    try:
        with signals_stop():  # SIGTERM too runs main's finally, which stops the servers
            main()
    except Stopped as e:
        print(f"stopped: {e.message}", file=sys.stderr)
        sys.exit(e.exit_code)
