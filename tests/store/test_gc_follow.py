"""``traj gc`` beside a running ``traj train --follow``: trajectories the trainer consumed and read
past its checkpoint's cursor are deleted while it runs; it still trains on every trajectory once,
none it had not read is ever deleted, and after it stops the store holds only what it left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.helpers.stores import write_synthetic_store
from trajstore.maintenance.gc import GcRules, gc_store
from trajstore.maintenance.gc_rows import consumed_ids
from trajstore.reader import read_trajectories
from trajstore.store import open_store
from trajstore.store.layout import checkpoint_latest_file, run_consumed_dir


def _stored(store) -> set[str]:
    return set(read_trajectories(store, columns=["trajectory_id"]).column("trajectory_id").to_pylist())


def _wait(cond, what: str, timeout: float = 180.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.mark.slow
def test_gc_beside_a_following_trainer(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    written = set(write_synthetic_store(tmp_path, 8, per_shard=2, prefix="a"))
    cmd = [sys.executable, "-c", "from trajstore.cli.main import app; app()", "train", str(tmp_path), "--model",
           "tiny-llama", "--run", "f", "--batch-size", "2", "--max-seq-len", "512", "--critic-warmup-steps", "0",
           "--checkpoint-every", "1", "--follow", "--poll-interval", "0.2", "--format", "json"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         env={**os.environ, "TRAJ_TRACEBACK": "1"})
    deleted: set[str] = set()
    try:
        latest = tmp_path / checkpoint_latest_file("f")
        _wait(lambda: latest.exists() and json.loads(latest.read_text())["iteration"] >= 2, "two checkpoints")
        for k in range(3):
            before = _stored(store)
            eaten = consumed_ids(store, "f")
            gc_store(store, GcRules(consumed_by=("f",), keep_replaced_s=0), dry_run=False)
            gone = before - _stored(store)
            assert gone <= eaten, f"deleted trajectories the trainer had not consumed: {sorted(gone - eaten)}"
            deleted |= gone
            new = write_synthetic_store(tmp_path, 4, per_shard=2, prefix=f"b{k}-", seed=k + 1)
            written |= set(new)
            # the next gc runs once the trainer is consuming what was just written (not after a
            # second that a loaded machine may spend before it has looked at the store again)
            _wait(lambda new=new: consumed_ids(store, "f") & set(new), "the trainer to consume the new trajectories")
        _wait(lambda: consumed_ids(store, "f") >= written, "every trajectory consumed")
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=120)
    assert p.returncode == 0
    assert deleted, "gc deleted nothing: the test did not exercise deletion"
    # every trajectory trained once: the consumption records hold each id once
    ids = [t for s in store.list_shards(run_consumed_dir("f"))
           for t in pq.read_table(s.path, columns=["trajectory_id"]).column("trajectory_id").to_pylist()]
    assert len(ids) == len(set(ids)) and set(ids) == written
