"""8 processes x 200 trajectories written at once into one store (local, and S3 via moto):
the reader sees exactly 1,600 distinct trajectories, no error, no partial file."""

from __future__ import annotations

import multiprocessing as mp
import os
import warnings
from typing import Any

import numpy as np
import pytest

from trajstore import StoreWriter, TrajectoryBuilder, count_duplicates, open_store, read_trajectories

NUM_PROCS = 8
PER_PROC = 200
FLUSH_ROWS = 16  # 13 shards per process, 104 in all: many overlapping flushes


def _tokens(proc: int, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Deterministic content of trajectory (proc, i): prompt ids, action ids, action log-probs."""
    rng = np.random.default_rng([proc, i])
    n_prompt, n_action = int(rng.integers(1, 40)), int(rng.integers(1, 200))
    return (rng.integers(0, 49152, n_prompt), rng.integers(0, 49152, n_action),
            -rng.exponential(1.0, n_action).astype(np.float32))


def write_worker(proc: int, uri: str, storage_options: dict[str, Any] | None, start: Any) -> None:
    """Child process body: wait for every sibling, then write PER_PROC trajectories."""
    start.wait()
    with StoreWriter(uri, storage_options=storage_options, flush_rows=FLUSH_ROWS, flush_seconds=None) as w:
        for i in range(PER_PROC):
            prompt, action, lps = _tokens(proc, i)
            b = TrajectoryBuilder(trajectory_id=f"p{proc}-t{i:03d}", prompt_id=f"q{i}")
            b.add_prompt(prompt)
            b.add_action(action, lps, policy_version=proc)
            b.set_reward(float(i))
            w.write(b.finish())


def _run_writers(uri: str, storage_options: dict[str, Any] | None) -> None:
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(NUM_PROCS)
    procs = [ctx.Process(target=write_worker, args=(p, uri, storage_options, start)) for p in range(NUM_PROCS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=240)
    codes = [p.exitcode for p in procs]
    for p in procs:
        if p.is_alive():
            p.kill()
    assert codes == [0] * NUM_PROCS, f"writer exit codes {codes}"


def _check_store(uri: str, storage_options: dict[str, Any] | None) -> None:
    store = open_store(uri, storage_options=storage_options)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any skipped (partial) shard would warn
        shards = store.list_shards(strict=True)
        table = read_trajectories(uri, storage_options=storage_options, strict=True, dedupe=False)
    # Every listed file is a complete shard, and there is nothing else under trajectories/.
    assert len(shards) == NUM_PROCS * -(-PER_PROC // FLUSH_ROWS)
    assert len(store.shard_paths()) == len(shards)
    assert sum(s.num_rows for s in shards) == NUM_PROCS * PER_PROC
    names = sorted(p.rsplit("/", 1)[-1] for p in store.fs.ls(store.path("trajectories")))
    names = [n for n in names if n != "_index"]  # the shard index the listing above wrote
    assert all(n.endswith(".parquet") for n in names), names
    ids = table.column("trajectory_id").to_pylist()
    assert len(ids) == len(set(ids)) == NUM_PROCS * PER_PROC
    assert set(ids) == {f"p{p}-t{i:03d}" for p in range(NUM_PROCS) for i in range(PER_PROC)}
    assert count_duplicates(uri, storage_options=storage_options) == 0
    # Content is intact, not just present.
    rows = dict(zip(ids, range(len(ids))))
    tok_col, lp_col, reward = table.column("tokens"), table.column("action_logprobs"), table.column("reward")
    for p in range(NUM_PROCS):
        for i in range(0, PER_PROC, 7):
            r = rows[f"p{p}-t{i:03d}"]
            prompt, action, lps = _tokens(p, i)
            assert np.array_equal(tok_col[r].values.to_numpy(), np.concatenate([prompt, action]))
            got_lp = lp_col[r].values.to_numpy()  # schema v2: one per action token, no nulls
            assert np.array_equal(got_lp, lps)
            assert reward[r].as_py() == float(i)
    if store.is_local:  # nothing left behind in the temp area
        assert os.listdir(store.path("_tmp")) == []


def test_eight_processes_local(tmp_store: str) -> None:
    _run_writers(tmp_store, None)
    _check_store(tmp_store, None)


@pytest.mark.slow  # a minute or more on 2 cores: CI's slow step
@pytest.mark.s3
def test_eight_processes_s3(s3_store_uri: tuple[str, dict[str, Any]]) -> None:
    uri, opts = s3_store_uri
    _run_writers(uri, opts)
    _check_store(uri, opts)
