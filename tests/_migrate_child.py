"""Child process for the ``traj migrate`` SIGKILL test.

Usage: python _migrate_child.py STORE_URI

Prints, unbuffered, ``migrated <shard name> <seconds>`` after each shard is rewritten, then
``done``.
"""

from __future__ import annotations

import sys
import time

from trajstore.migrate import migrate_store


def main() -> None:
    t0 = [time.perf_counter()]

    def step(shard, i, n):  # noqa: ANN001
        now = time.perf_counter()
        print(f"migrated {shard.name} {now - t0[0]:.4f}", flush=True)
        t0[0] = now

    migrate_store(sys.argv[1], on_shard=step)
    print("done", flush=True)


if __name__ == "__main__":
    main()
