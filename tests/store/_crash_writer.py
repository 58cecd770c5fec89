"""Child process for the SIGKILL test: writes big trajectories, one flush per trajectory.

Usage: python _crash_writer.py STORE_URI TOKENS_PER_TRAJECTORY ID_PREFIX [STORAGE_OPTIONS_JSON]

Prints, unbuffered, ``flushing <id>`` before each flush and ``flushed <id> <seconds>`` after
the flush has returned (so the shard is durable and visible). Runs until killed (at most
1,000 trajectories).
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from trajstore import StoreWriter, TrajectoryBuilder


def main() -> None:
    uri, n_tokens, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    opts = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None
    rng = np.random.default_rng()
    with StoreWriter(uri, storage_options=opts, flush_rows=10**9, flush_mb=10**6, flush_seconds=None) as w:
        for i in range(1000):
            tid = f"{prefix}-{i:04d}"
            b = TrajectoryBuilder(trajectory_id=tid)
            b.add_prompt(rng.integers(0, 49152, 100))
            b.add_action(rng.integers(0, 49152, n_tokens), -rng.exponential(1.0, n_tokens).astype(np.float32),
                         policy_version=i)
            w.write(b.finish())
            print(f"flushing {tid}", flush=True)
            t0 = time.perf_counter()
            w.flush()
            print(f"flushed {tid} {time.perf_counter() - t0:.4f}", flush=True)


if __name__ == "__main__":
    main()
