"""Idle eviction under races: sessions whose next call or ``/finish`` lands around the moment
the proxy evicts them (before, during the eviction's write, after), many at once.

    python bench/eviction_races.py                       # 40 sessions, 5 rounds of /finish races
    python bench/eviction_races.py --sessions 80 --rounds 10 --timeout 0.4

An in-process ``traj proxy`` (``--session-timeout`` = ``--timeout``, ``--finish-batch``
``--batch`` so each write sits in the group-commit window) in front of the fake upstream of
:mod:`trajstore.proxy.testing`, recording into a temporary store.

1. Continuations: each of ``--sessions`` sessions makes a call, idles for a time drawn around
   the timeout (seeded), makes a second call, and finishes with a reward. Every session the
   proxy evicted must have been continued: its second call answered ``X-Trajstore-Evicted``, its
   ``/finish`` lists the evicted part, and the later part is stored as the ``continuation`` of
   it in the same episode. Counted: evicted and continued, not evicted, unlinked (a failure).
2. ``/finish`` during eviction writes: in each of ``--rounds`` rounds, ``--sessions`` sessions
   make one call and idle; each finishes after a time drawn around the timeout, so many land
   while the eviction task is writing other sessions. Every outcome must be stored (status
   ``completed`` and the reward, on the part itself or set on the evicted part), and after the
   rounds the eviction task must be alive: running, no failed pass, and a new idle session
   evicted.

Prints the counts as JSON; exit status 1 when a check failed (a race lost), else 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from typing import Any

import httpx

from trajstore.http.server import ServerThread
from trajstore.proxy.app import create_app
from trajstore.proxy.config import ProxyConfig
from trajstore.proxy.testing import fake_app
from trajstore.reader import read_trajectories


def _client() -> httpx.AsyncClient:
    """A client that never reuses a connection the server may be closing (its keep-alive is 5 s)."""
    return httpx.AsyncClient(timeout=60, limits=httpx.Limits(keepalive_expiry=1.0))


def _stored(store: str) -> dict[str, list[dict[str, Any]]]:
    by: dict[str, list[dict[str, Any]]] = {}
    for r in read_trajectories(store).to_pylist():
        r["meta"] = json.loads(r["metadata"])
        by.setdefault(r["meta"]["session"], []).append(r)
    return by


async def _continuations(url: str, n: int, timeout: float, rng: random.Random) -> dict[str, dict[str, Any]]:
    async with _client() as c:
        async def one(k: int) -> tuple[str, dict[str, Any]]:
            key = f"cont-{k}"
            msgs = [{"role": "user", "content": f"task {k}"}]
            await c.post(f"{url}/s/{key}/v1/chat/completions", json={"model": "fake", "messages": msgs})
            await asyncio.sleep(timeout * rng.uniform(0.5, 4.0))
            msgs += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "tool output"}]
            r = await c.post(f"{url}/s/{key}/v1/chat/completions", json={"model": "fake", "messages": msgs})
            done = (await c.post(f"{url}/s/{key}/finish", json={"reward": 1.0})).json()
            return key, {"header": r.headers.get("x-trajstore-evicted"), "finish": done}

        return dict(await asyncio.gather(*(one(k) for k in range(n))))


def _check_continuations(store: str, seen: dict[str, dict[str, Any]]) -> dict[str, Any]:
    by = _stored(store)
    out = {"sessions": len(seen), "evicted_and_continued": 0, "not_evicted": 0, "unlinked": 0, "failures": []}
    for key, got in seen.items():
        rows = sorted(by.get(key, []), key=lambda r: r["trajectory_id"])
        evicted = [r for r in rows if str(r["meta"].get("end_reason", "")).startswith("idle")]
        if not evicted:
            ok = len(rows) == 1 and rows[0]["status"] == "completed" and got["header"] is None
            out["not_evicted"] += ok
        else:
            later = [r for r in rows if r not in evicted]
            ok = (len(evicted) == 1 and len(later) == 1 and got["header"] == "1"
                  and got["finish"].get("evicted_parts") == [evicted[0]["trajectory_id"]]
                  and later[0]["parent_trajectory_id"] == evicted[0]["trajectory_id"]
                  and later[0]["link_kind"] == "continuation" and later[0]["episode_id"] == evicted[0]["episode_id"]
                  and later[0]["status"] == "completed")
            out["evicted_and_continued"] += ok
        if not ok:
            out["unlinked"] += 1
            out["failures"].append({"session": key, "header": got["header"], "finish": got["finish"],
                                    "rows": [(r["trajectory_id"], r["status"], r["parent_trajectory_id"])
                                             for r in rows]})
    return out


async def _finish_races(url: str, n: int, rounds: int, timeout: float, rng: random.Random) -> dict[str, Any]:
    answers: dict[str, dict[str, Any]] = {}
    async with _client() as c:
        async def one(key: str) -> None:
            await c.post(f"{url}/s/{key}/v1/chat/completions",
                         json={"model": "fake", "messages": [{"role": "user", "content": key}]})
            await asyncio.sleep(timeout * rng.uniform(0.8, 2.0))
            r = await c.post(f"{url}/s/{key}/finish", json={"reward": 0.5})
            answers[key] = {"status_code": r.status_code, **r.json()}

        for rnd in range(rounds):
            await asyncio.gather(*(one(f"fin-{rnd}-{k}") for k in range(n)))
    return answers


def _check_finishes(store: str, answers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    by = _stored(store)
    out = {"finishes": len(answers), "written_at_finish": 0, "set_after_eviction": 0, "lost_outcome": 0,
           "failures": []}
    for key, a in answers.items():
        rows = by.get(key, [])
        ok = a["status_code"] == 200 and len(rows) == 1 and rows[0]["status"] == "completed" \
            and rows[0]["reward"] == 0.5
        if ok and a.get("updated"):
            out["set_after_eviction"] += 1
        elif ok:
            out["written_at_finish"] += 1
        else:
            out["lost_outcome"] += 1
            out["failures"].append({"session": key, "answer": a,
                                    "rows": [(r["trajectory_id"], r["status"], r["reward"]) for r in rows]})
    return out


def _eviction_alive(px: ServerThread, store: str, timeout: float) -> dict[str, Any]:
    st = px.server.config.app.state.proxy
    httpx.post(f"{px.url}/s/canary/v1/chat/completions",
               json={"model": "fake", "messages": [{"role": "user", "content": "still evicting?"}]}, timeout=60)
    deadline = time.monotonic() + max(30.0, 20 * timeout)
    while time.monotonic() < deadline and "canary" not in _stored(store):
        time.sleep(0.05)
    stats = httpx.get(f"{px.url}/proxy/stats", timeout=60).json()
    reaper_running = all(not t.done() for t in st.tasks)
    return {"canary_evicted": "canary" in _stored(store), "task_running": reaper_running,
            "eviction_errors": stats["eviction"]["errors"], "last_run_s_ago": stats["eviction"]["last_run_s_ago"],
            "sessions_evicted": stats["sessions_evicted"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=0.4, help="--session-timeout (s)")
    ap.add_argument("--batch", type=float, default=0.2, help="--finish-batch (s): the group-commit window")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="eviction-races-") as tmp, \
            ServerThread(fake_app(reply="ok")) as up:
        store = f"{tmp}/store"
        cfg = ProxyConfig(upstream=up.url, store=store, session_timeout_s=args.timeout, finish_batch_s=args.batch)
        with ServerThread(create_app(cfg)) as px:
            t0 = time.monotonic()
            seen = asyncio.run(_continuations(px.url, args.sessions, args.timeout, rng))
            cont = _check_continuations(store, seen)
            answers = asyncio.run(_finish_races(px.url, args.sessions, args.rounds, args.timeout, rng))
            fin = _check_finishes(store, answers)
            alive = _eviction_alive(px, store, args.timeout)
            wall = time.monotonic() - t0
    report = {"continuations": cont, "finish_races": fin, "eviction_task": alive, "seconds": round(wall, 1),
              "args": vars(args)}
    print(json.dumps(report, indent=2))
    ok = (cont["unlinked"] == 0 and fin["lost_outcome"] == 0 and alive["canary_evicted"] and alive["task_running"]
          and alive["eviction_errors"] == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
