"""trajstore/store/atomic.py: a writer killed with SIGKILL in the middle of a flush leaves nothing partial visible, and
every trajectory whose flush returned before the kill is readable."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trajstore import open_store, read_trajectories

CHILD = Path(__file__).with_name("_crash_writer.py")
TOKENS = 400_000  # ~3 MB per shard: a flush takes long enough to be hit in the middle


def _kill_mid_flush(uri: str, prefix: str, opts: dict[str, Any] | None, rng: random.Random) -> tuple[set[str], bool]:
    """Run the child until its k-th flush starts, SIGKILL it part-way through that flush.

    Returns (ids whose flush returned before the kill, whether the kill landed inside a flush).
    """
    cmd = [sys.executable, str(CHILD), uri, str(TOKENS), prefix] + ([json.dumps(opts)] if opts else [])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    flushed: set[str] = set()
    durations: list[float] = []
    k = rng.randint(2, 4)
    assert proc.stdout is not None
    try:
        while True:
            line = proc.stdout.readline()
            assert line, f"child exited early: {proc.wait()} {proc.stderr.read() if proc.stderr else ''}"
            word, tid, *rest = line.split()
            if word == "flushed":
                flushed.add(tid)
                durations.append(float(rest[0]))
            elif word == "flushing" and len(flushed) >= k:
                time.sleep(rng.uniform(0.05, 0.7) * float(np.median(durations)))
                os.kill(proc.pid, signal.SIGKILL)
                break
    finally:
        tail = proc.stdout.read()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    last = None
    for line in tail.splitlines():
        word, tid, *_ = line.split()
        if word == "flushed":
            flushed.add(tid)
        last = word
    in_flush = last is None or last == "flushing"  # no "flushed" line after the one we killed in
    return flushed, in_flush


@pytest.mark.parametrize("backend", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_sigkill_mid_flush(backend: str, tmp_store: str, request: pytest.FixtureRequest) -> None:
    if backend == "s3":
        uri, opts = request.getfixturevalue("s3_store_uri")
    else:
        uri, opts = tmp_store, None
    rng = random.Random(os.getpid())
    all_flushed: set[str] = set()
    landed = 0
    for round_ in range(3):
        flushed, in_flush = _kill_mid_flush(uri, f"r{round_}", opts, rng)
        all_flushed |= flushed
        landed += in_flush
        store = open_store(uri, storage_options=opts)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a partial shard would be skipped with a warning
            shards = store.list_shards(strict=True)
            table = read_trajectories(uri, storage_options=opts, strict=True, columns=["num_tokens"])
        ids = set(table.column("trajectory_id").to_pylist())
        # Every flush that returned is readable; at most the one being killed may also be
        # there (its rename/PUT may have completed before the kill), and then complete.
        assert all_flushed <= ids
        assert len(ids - all_flushed) <= round_ + 1
        assert table.num_rows == len(ids)
        assert set(table.column("num_tokens").to_pylist()) == {TOKENS + 100}
        assert sum(s.num_rows for s in shards) == len(ids)
        if store.is_local:  # leftovers of the killed write, if any, sit only in _tmp/
            tmp = Path(store.path("_tmp"))
            assert all(n.endswith(".tmp") for n in os.listdir(tmp))
    assert landed >= 1, "no kill landed inside a flush; the test did not exercise what it claims"
