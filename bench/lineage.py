"""Lineage benchmark: what ``traj proxy`` stores for a parent agent and a sub-agent that
alternate in one session, and what a trainer then prefills per trained action token.

    python bench/lineage.py                     # 3, 6 and 12 turns per agent
    python bench/lineage.py --turns 3

The fake upstream of :mod:`trajstore.proxy.testing` (byte-level ids, every reply "ok" + end of
turn) and ``traj proxy`` (this checkout, in-process, a temporary local store) on loopback. One
session plays A1 B1 A2 B2 ... : agent A (the lead) and agent B (a sub-agent) each extend their
own history by the reply and a tool output, then ``/finish``. Per number of turns:

* stored by this checkout: trajectories, all their tokens (what a trainer prefills: every
  stored token goes through the model once), action tokens (what it trains on);
* the one-line-per-session rule that lineage links replaced (a prompt that does not extend the previous
  call's prompt + reply closes the trajectory and opens a new one holding the whole prompt),
  applied to the same engine prompt ids. Checked once against main's own proxy (see
  bench/RESULTS.md): same trajectory and token counts.

Printed: tokens prefilled per trained action token, both ways, and their ratio. Exit 0: a
measurement, not a test.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from trajstore.http.server import ServerThread
from trajstore.proxy.app import create_app
from trajstore.proxy.config import ProxyConfig
from trajstore.proxy.testing import EOS, fake_app, render
from trajstore.reader import read_trajectories

LEAD = [{"role": "system", "content": "You are the lead engineer. Fix the failing test."},
        {"role": "user", "content": "tests/test_io.py::test_roundtrip fails"}]
HELPER = [{"role": "system", "content": "You are a helper. Read files and report."},
          {"role": "user", "content": "Find where roundtrip is defined."}]


def play(proxy: str, session: str, turns: int) -> list[list[int]]:
    """A1 B1 A2 B2 ... through the proxy; return every call's engine prompt ids, in order."""
    a, b = list(LEAD), list(HELPER)
    prompts = []
    for t in range(turns):
        for msgs in (a, b):
            r = httpx.post(f"{proxy}/s/{session}/v1/chat/completions", json={"model": "fake", "messages": msgs},
                           timeout=60)
            r.raise_for_status()
            prompts.append(render(msgs))
        a += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": f"$ pytest -x: {t} failed"}]
        b += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": f"grep: io.py:{40 + t}"}]
    httpx.post(f"{proxy}/s/{session}/finish", json={"status": "completed", "reward": 1.0}).raise_for_status()
    return prompts


def one_line_per_session(prompts: list[list[int]], reply: list[int]) -> dict[str, int]:
    """The one-line-per-session rule on these calls: trajectories, tokens, action tokens."""
    parts: list[list[int]] = []
    tokens: list[int] = []
    for p in prompts:
        if not parts or p[:len(tokens)] != tokens:
            parts.append([])
        tokens = p + reply
        parts[-1] = tokens
    return {"trajectories": len(parts), "tokens": sum(map(len, parts)), "action_tokens": len(reply) * len(prompts)}


def stored(store: str, session: str) -> dict[str, int]:
    rows = [r for r in read_trajectories(store, columns=["trajectory_id", "num_tokens", "num_action_tokens",
                                                         "episode_id"]).to_pylist()
            if r["episode_id"].startswith(session + ".")]
    return {"trajectories": len(rows), "tokens": sum(r["num_tokens"] for r in rows),
            "action_tokens": sum(r["num_action_tokens"] for r in rows)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, nargs="+", default=[3, 6, 12], help="turns per agent")
    args = ap.parse_args(argv)
    reply = [b + 4 for b in b"ok"] + [EOS]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, ServerThread(fake_app(reply="ok")) as up:
        store = str(Path(tmp) / "store")
        with ServerThread(create_app(ProxyConfig(upstream=up.url, store=store))) as px:
            for n in args.turns:
                prompts = play(px.url, f"t{n}", n)
                rows.append({"turns": n, "before": one_line_per_session(prompts, reply), "calls": len(prompts),
                             "session": f"t{n}"})
        for r in rows:  # the proxy has stopped: its store is closed
            r["after"] = stored(store, r["session"])
    print(f"{'turns/agent':>11} {'calls':>5} | {'before: traj':>12} {'tokens':>7} {'per action tok':>14} | "
          f"{'after: traj':>11} {'tokens':>7} {'per action tok':>14} | {'ratio':>5}")
    for r in rows:
        b, a = r["before"], r["after"]
        pb, pa = b["tokens"] / b["action_tokens"], a["tokens"] / a["action_tokens"]
        print(f"{r['turns']:>11} {r['calls']:>5} | {b['trajectories']:>12} {b['tokens']:>7} {pb:>14.2f} | "
              f"{a['trajectories']:>11} {a['tokens']:>7} {pa:>14.2f} | {pb / pa:>5.2f}")
        if a["action_tokens"] != b["action_tokens"]:
            print(f"  !! action tokens differ: {a['action_tokens']} stored vs {b['action_tokens']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
