"""Column pruning of the staleness audit: at a fixed number of trajectories, 10x more tokens
per trajectory must leave `staleness_report` time within 1.5x (it reads scalars and spans,
never tokens or log-probs).

Builds two local stores in a temp dir with the same trajectories, span layout, versions and
consumed records; only span lengths (hence tokens/log-probs) differ by `--scale`. Times the
staleness report (all four tables fetched; best of `--repeat`) on both, and, as a sanity
baseline from the same run, a DuckDB query that does read `tokens` (to show the data really
grew). Prints one JSON object; exit code 1 if the target is missed.

    python bench/audit.py [--trajectories 2000] [--spans 16] [--tokens-per-span 64] [--scale 10]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa

import trajstore as ts
from trajstore import audit
from trajstore.schema import CONSUMED_SCHEMA
from trajstore.store import open_store

TARGET_RATIO = 1.5


def build(root: str, n: int, spans: int, span_tokens: int, seed: int = 0) -> int:
    """Write `n` trajectories (prompt + `spans` alternating action/observation spans of
    `span_tokens` tokens) and consume every other one in run `bench`; return total tokens."""
    rng = np.random.default_rng(seed)
    store = open_store(root)
    trajs, consumed, total = [], [], 0
    t0 = datetime(2026, 7, 1, tzinfo=timezone.utc)
    for i in range(n):
        b = ts.TrajectoryBuilder(trajectory_id=f"t{i:06d}", source=f"src{i % 3}")
        b.add_prompt(rng.integers(0, 49_152, span_tokens, dtype=np.int32))
        v0 = int(rng.integers(0, 100))
        for k in range(spans // 2):
            b.add_action(rng.integers(0, 49_152, span_tokens, dtype=np.int32),
                         -rng.exponential(1.0, span_tokens).astype(np.float32), policy_version=v0 + k // 3)
            b.add_observation(rng.integers(0, 49_152, span_tokens, dtype=np.int32))
        b.set_reward(float(rng.normal()))
        trajs.append(b.finish(created_at=t0))
        total += b.num_tokens
        if i % 2 == 0:
            tv = v0 + spans // 6 + int(rng.integers(0, 8))
            consumed.append(dict(run_id="bench", step=i // 64, trainer_version=tv, trajectory_id=f"t{i:06d}", rank=0,
                                 min_policy_version=v0, max_policy_version=v0 + (spans // 2 - 1) // 3,
                                 staleness_min=tv - v0 - (spans // 2 - 1) // 3, staleness_max=tv - v0,
                                 num_action_tokens=spans // 2 * span_tokens, masked_below=0.01, masked_above=0.0,
                                 ratio_mean=1.0, consumed_at=t0))
    ts.write_trajectories(store, trajs, flush_rows=256)
    store.write_table(pa.Table.from_pylist(consumed, schema=CONSUMED_SCHEMA), subdir="runs/bench/consumed")
    return total


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def staleness_seconds(root: str, repeat: int) -> float:
    def run() -> None:
        conn = audit.connect(root)
        for rel in audit.staleness_report(conn).tables().values():
            rel.fetchall()
        conn.close()
    return best_of(run, repeat)


def token_scan_seconds(root: str, repeat: int) -> float:
    def run() -> None:
        conn = audit.connect(root)
        conn.execute("SELECT sum(list_sum(tokens)) FROM _trajectory_rows").fetchall()
        conn.close()
    return best_of(run, repeat)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trajectories", type=int, default=2000)
    ap.add_argument("--spans", type=int, default=16, help="action + observation spans per trajectory")
    ap.add_argument("--tokens-per-span", type=int, default=64)
    ap.add_argument("--scale", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        small, large = os.path.join(tmp, "small"), os.path.join(tmp, "large")
        tok_small = build(small, args.trajectories, args.spans, args.tokens_per_span)
        tok_large = build(large, args.trajectories, args.spans, args.tokens_per_span * args.scale)
        staleness_seconds(small, 1)  # warm-up (imports, page cache)
        s_small, s_large = staleness_seconds(small, args.repeat), staleness_seconds(large, args.repeat)
        t_small, t_large = token_scan_seconds(small, args.repeat), token_scan_seconds(large, args.repeat)
    ratio = s_large / s_small
    out = {
        "trajectories": args.trajectories, "tokens_small": tok_small, "tokens_large": tok_large,
        "staleness_s_small": round(s_small, 4), "staleness_s_large": round(s_large, 4),
        "staleness_ratio": round(ratio, 3), "target_ratio_max": TARGET_RATIO,
        "token_scan_s_small": round(t_small, 4), "token_scan_s_large": round(t_large, 4),
        "token_scan_ratio": round(t_large / t_small, 3), "met": ratio <= TARGET_RATIO,
    }
    print(json.dumps(out, indent=2))
    raise SystemExit(0 if out["met"] else 1)


if __name__ == "__main__":
    main()
