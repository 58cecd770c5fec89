"""Child process for the SIGKILL test: writes big trajectories, one flush per trajectory, and stops,
for the test to kill it, at a chosen point inside its k-th flush (so the kill lands there on any
machine, loaded or not, instead of after a guessed time).

Usage: python _crash_writer.py STORE_URI TOKENS_PER_TRAJECTORY ID_PREFIX STOP_AT K [STORAGE_OPTIONS_JSON]

Prints, unbuffered, ``flushing <id>`` before each flush and ``flushed <id>`` after the flush has
returned (so the shard is durable and visible). In its K-th flush (1-based) it prints ``paused
<STOP_AT> <id>`` at STOP_AT and waits until its stdin closes (the test SIGKILLs it first):

* ``mid-write`` (local): half of the shard written (and fsynced) to its temp file in ``_tmp/``;
* ``before-rename`` (local): the temp file whole and fsynced, not yet renamed into place;
* ``after-rename`` (local): renamed into place, before the folder's fsync and the flush's return;
* ``before-put`` (object store): the shard encoded in memory, nothing sent;
* ``after-put`` (object store): the PUT answered, before the flush returns.
"""

from __future__ import annotations

import io
import json
import os
import sys
from typing import Any

import numpy as np

import trajstore.store.atomic as atomic
from trajstore import StoreWriter, TrajectoryBuilder


def _stop_in_flush(w: StoreWriter, stop_at: str, k: int, current: list[str], flushes: list[int]) -> None:
    """Wrap the shard write's steps so that the k-th flush pauses at `stop_at`."""
    real_write, real_fsync_dir, fs = atomic.write_parquet, atomic.fsync_dir, w.store.fs
    real_pipe = fs.pipe_file

    def pause() -> None:
        print(f"paused {stop_at} {current[0]}", flush=True)
        sys.stdin.read()  # until the test kills this process (or goes away: then end here, writing no more)
        os._exit(3)

    def write(fh: Any, *args: Any, **kw: Any) -> Any:
        if flushes[0] != k or stop_at not in ("mid-write", "before-rename", "before-put"):
            return real_write(fh, *args, **kw)
        if stop_at == "before-put":
            real_write(fh, *args, **kw)
            pause()
        whole = io.BytesIO()
        real_write(whole, *args, **kw)
        data = whole.getvalue()
        fh.write(data[:len(data) // 2] if stop_at == "mid-write" else data)
        fh.flush()
        os.fsync(fh.fileno())
        pause()

    def fsync_dir(path: str) -> None:
        if flushes[0] == k and stop_at == "after-rename":
            pause()
        real_fsync_dir(path)

    def pipe_file(*args: Any, **kw: Any) -> Any:
        out = real_pipe(*args, **kw)
        if flushes[0] == k and stop_at == "after-put":
            pause()
        return out

    atomic.write_parquet, atomic.fsync_dir, fs.pipe_file = write, fsync_dir, pipe_file


def main() -> None:
    uri, n_tokens, prefix, stop_at, k = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
    opts = json.loads(sys.argv[6]) if len(sys.argv) > 6 else None
    rng = np.random.default_rng(0)
    current, flushes = [""], [0]
    with StoreWriter(uri, storage_options=opts, flush_rows=10**9, flush_mb=10**6, flush_seconds=None) as w:
        _stop_in_flush(w, stop_at, k, current, flushes)
        for i in range(1000):
            tid = f"{prefix}-{i:04d}"
            b = TrajectoryBuilder(trajectory_id=tid)
            b.add_prompt(rng.integers(0, 49152, 100))
            b.add_action(rng.integers(0, 49152, n_tokens), -rng.exponential(1.0, n_tokens).astype(np.float32),
                         policy_version=i)
            w.write(b.finish())
            current[0] = tid
            flushes[0] += 1
            print(f"flushing {tid}", flush=True)
            w.flush()
            print(f"flushed {tid}", flush=True)


if __name__ == "__main__":
    main()
