"""Ingest's commits (the store writer with the ingest's dedupe lock): two ingests of the same input
into one store at once store each trajectory once (the store lock, local and S3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.ingest import smith_row, stored, write_jsonl
from trajstore.ingest import ingest_paths
from trajstore.ingest.pipeline import INGEST_LOCK
from trajstore.reader import read_trajectories
from trajstore.store import open_store
from trajstore.store.lock import store_lock


def two_ingests_at_once(f: Path, store: str, storage_options: dict | None = None) -> list:
    """Ingest `f` into `store` from two threads that both read the store's ids (empty) before
    either commits; their reports."""
    # Both runs read the store's ids (empty) before either commits: each waits for the other at
    # its first progress call, which comes after its first trajectory is built.
    barrier = threading.Barrier(2, timeout=60)
    reports: list = [None, None]

    def run(k: int) -> None:
        waited = []

        def progress(_):
            if not waited:
                waited.append(barrier.wait())
        reports[k] = ingest_paths([str(f)], store, progress=progress, storage_options=storage_options)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [r.problems for r in reports] == [[], []]
    return reports


def _waiters_on(path: Path) -> int:
    """Processes blocked on a flock of `path` (Linux /proc/locks lines marked ``->``)."""
    ino = os.stat(path).st_ino
    return sum(1 for ln in Path("/proc/locks").read_text().splitlines()
               if "->" in ln and ln.split()[-3].rsplit(":", 1)[-1] == str(ino))


# hostile tester: a fault found in `traj ingest` (failed before its fix)
def test_two_ingests_at_once_store_each_trajectory_once(tmp_path):
    # also the tokenizer's first load from two threads (transformers' lazy import raced: ImportError)
    f = write_jsonl(tmp_path / "rows.jsonl", [smith_row(n) for n in range(3)])
    store = tmp_path / "s"
    reports = two_ingests_at_once(f, str(store))
    rows = stored(store)
    assert sorted(r["trajectory_id"].split(":")[1] for r in rows) == ["t0", "t1", "t2"]  # 3 rows, no copy
    assert sorted(r.trajectories_written for r in reports) == [0, 3]
    assert sorted(r.skipped["already_in_store"] for r in reports) == [0, 3]


# hostile tester: a fault found in `traj ingest` (failed before its fix)
def test_two_ingests_at_once_on_one_host_into_s3_store_each_trajectory_once(tmp_path, s3_store_uri):
    # S3 has no lock: one host's ingests share a lock file in its temp folder (hosts apart are not serialised)
    uri, opts = s3_store_uri
    f = write_jsonl(tmp_path / "rows.jsonl", [smith_row(n) for n in range(3)])
    reports = two_ingests_at_once(f, uri, opts)
    assert sorted(r.trajectories_written for r in reports) == [0, 3]
    assert len(read_trajectories(uri, dedupe=False, storage_options=opts)) == 3


# hostile tester: a fault found in `traj ingest` (failed before its fix)
@pytest.mark.slow  # two CLI processes (~10 s on 2 cores); the two-thread test above covers the same logic fast
@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux /proc/locks to see the waiting runs")
def test_two_traj_ingest_processes_at_once_store_each_trajectory_once(tmp_path):
    f = write_jsonl(tmp_path / "rows.jsonl", [smith_row(n) for n in range(4)])
    store = open_store(str(tmp_path / "s"))
    cmd = [str(Path(sys.executable).with_name("traj")), "ingest", store.uri, str(f), "--format", "json"]
    with store_lock(store, INGEST_LOCK):  # both runs parse, then wait to commit: neither has stored anything yet
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        lock_file = Path(store.path("_locks", "ingest.lock"))
        deadline = time.monotonic() + 90
        while _waiters_on(lock_file) < 2 and time.monotonic() < deadline and all(p.poll() is None for p in procs):
            time.sleep(0.1)
        assert _waiters_on(lock_file) == 2, [p.communicate() for p in procs if p.poll() is not None]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    written = sorted(json.loads(o)["trajectories_written"] for o, _ in outs)
    assert written == [0, 4]  # the second run to commit found all 4 stored by the first
    assert len(stored(store.uri)) == 4
