"""Child process for the ``traj migrate`` SIGKILL test: migrates a store and stops, for the test to
kill it, at a chosen point of one shard's rewrite (so the kill lands there on any machine, loaded
or not, instead of after a guessed time).

Usage: python _migrate_child.py STORE_URI [STOP_AT K]

Prints, unbuffered, ``migrated <shard name>`` after each shard is rewritten, then ``done``. With
STOP_AT, the K-th rewrite of this run (1-based) stops there, prints ``paused <STOP_AT>`` and waits
until its stdin closes (the test SIGKILLs it first):

* ``mid-write``: half of the new file is written (and fsynced) to its temp file in ``_tmp/``;
* ``after-replace``: the new file has replaced the old one, before the folder's fsync and before
  ``migrate`` counts the shard as migrated.
"""

from __future__ import annotations

import io
import os
import sys
from typing import Any

import trajstore.store.rewrite as rewrite
from trajstore.migrate import migrate_store


def _pause(stop_at: str) -> None:
    print(f"paused {stop_at}", flush=True)
    sys.stdin.read()  # until the test kills this process (or goes away: then end here, migrating no more)
    os._exit(3)


def _stop_at(stop_at: str, k: int) -> None:
    """Wrap the rewrite's steps so that the k-th rewrite pauses at `stop_at`."""
    count = [0]
    real_rewrite, real_write, real_fsync_dir = rewrite.rewrite_shard, rewrite.write_parquet, rewrite.fsync_dir

    def counted(*args: Any, **kw: Any) -> int:
        count[0] += 1
        return real_rewrite(*args, **kw)

    def half_written(fh: Any, *args: Any, **kw: Any) -> Any:
        if stop_at != "mid-write" or count[0] != k:
            return real_write(fh, *args, **kw)
        whole = io.BytesIO()
        real_write(whole, *args, **kw)
        fh.write(whole.getvalue()[:whole.tell() // 2])
        fh.flush()
        os.fsync(fh.fileno())
        _pause(stop_at)

    def replaced(path: str) -> None:
        if stop_at == "after-replace" and count[0] == k:
            _pause(stop_at)
        real_fsync_dir(path)

    rewrite.rewrite_shard, rewrite.write_parquet, rewrite.fsync_dir = counted, half_written, replaced


def main() -> None:
    if len(sys.argv) > 2:
        _stop_at(sys.argv[2], int(sys.argv[3]))
    migrate_store(sys.argv[1], on_shard=lambda shard, i, n: print(f"migrated {shard.name}", flush=True))
    print("done", flush=True)


if __name__ == "__main__":
    main()
