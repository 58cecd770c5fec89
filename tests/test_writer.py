"""trajstore/writer.py: StoreWriter flushes by rows, bytes (metadata counted), seconds and on
close; it is thread-safe; a failed flush keeps the buffer; bad flush limits are refused.
Duplicate trajectory ids resolve to the first copy in arrival order."""

from __future__ import annotations

import math
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import trajstore as ts
from tests.helpers.trajectories import fat_trajectory
from trajstore import (
    StoreError,
    StoreWriter,
    TrajectoryBuilder,
    TrajectoryValidationError,
    count_duplicates,
    iter_batches,
    open_store,
    read_trajectories,
    scan_trajectories,
    write_trajectories,
)
from trajstore.models import Trajectory


def _traj(tid: str, n_tokens: int = 10, reward: float | None = 1.0) -> Trajectory:
    b = TrajectoryBuilder(trajectory_id=tid)
    b.add_prompt(np.arange(2))
    b.add_action(np.arange(n_tokens - 2) % 100, np.full(n_tokens - 2, -0.5, np.float32), policy_version=1)
    b.set_reward(reward)
    return b.finish()


def _rows_per_shard(uri: str) -> list[int]:
    return [s.num_rows for s in open_store(uri).list_shards(strict=True)]


def test_flush_by_rows(tmp_store: str) -> None:
    w = StoreWriter(tmp_store, flush_rows=5, flush_seconds=None)
    for i in range(12):
        w.write(_traj(f"t{i}"))
    assert _rows_per_shard(tmp_store) == [5, 5]  # 12 = 5 + 5 + 2 still buffered
    w.close()
    assert _rows_per_shard(tmp_store) == [5, 5, 2]
    assert w.rows_written == 12 and len(w.shards_written) == 3


def test_flush_by_bytes(tmp_store: str) -> None:
    # One 1,000-token trajectory with 2 spans is budgeted at 1000*8 + 2*64 + 512 = 8,640 bytes
    # (int32 token + float32 log-prob per token, plus span and row overhead). A 20,000-byte
    # budget (flush_mb = 20000 / 2**20) is crossed by the 3rd trajectory: 3 * 8,640 = 25,920.
    w = StoreWriter(tmp_store, flush_rows=10**6, flush_mb=20_000 / 2**20, flush_seconds=None)
    for i in range(7):
        w.write(_traj(f"t{i}", n_tokens=1000))
    assert _rows_per_shard(tmp_store) == [3, 3]
    w.close()
    assert _rows_per_shard(tmp_store) == [3, 3, 1]


def test_flush_by_age_without_further_writes(tmp_store: str) -> None:
    w = StoreWriter(tmp_store, flush_rows=10**6, flush_seconds=0.3)
    try:
        t0 = time.monotonic()
        w.write(_traj("lonely"))
        before = _rows_per_shard(tmp_store)
        # not written by the write itself: empty when looked at before its age (a loaded machine may
        # only get to look later, when the flusher may have written it)
        assert before == [] or time.monotonic() - t0 >= 0.3, before
        deadline = time.monotonic() + 120
        while not _rows_per_shard(tmp_store) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _rows_per_shard(tmp_store) == [1]
    finally:
        w.close()
    assert _rows_per_shard(tmp_store) == [1]  # close had nothing left to write


def test_close_flushes_and_is_final(tmp_store: str) -> None:
    with StoreWriter(tmp_store, flush_seconds=None) as w:
        w.write(_traj("a"))
        w.write(_traj("b"))
        assert _rows_per_shard(tmp_store) == []
    assert read_trajectories(tmp_store).column("trajectory_id").to_pylist() == ["a", "b"]
    w.close()  # idempotent: no new shard
    assert _rows_per_shard(tmp_store) == [2]
    with pytest.raises(RuntimeError, match="closed"):
        w.write(_traj("c"))


def test_thread_safe(tmp_store: str) -> None:
    threads, per_thread = 8, 100
    errors: list[BaseException] = []
    with StoreWriter(tmp_store, flush_rows=7, flush_seconds=0.05) as w:
        def work(k: int) -> None:
            try:
                for i in range(per_thread):
                    w.write(_traj(f"th{k}-{i}", n_tokens=int(5 + (i * 7919 + k) % 300)))
                    if i % 25 == 0:
                        w.flush()
            except BaseException as e:  # surfaced below
                errors.append(e)
        ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert errors == []
    table = read_trajectories(tmp_store, dedupe=False, strict=True)
    ids = table.column("trajectory_id").to_pylist()
    assert len(ids) == len(set(ids)) == threads * per_thread
    assert w.rows_written == threads * per_thread
    assert all(0 < n <= 7 for n in _rows_per_shard(tmp_store))
    # Every trajectory kept its own tokens (no interleaving between threads).
    lengths = dict(zip(ids, table.column("num_tokens").to_pylist()))
    assert all(lengths[f"th{k}-{i}"] == 5 + (i * 7919 + k) % 300 for k in range(threads) for i in range(per_thread))


def test_failed_flush_keeps_buffer(tmp_store: str) -> None:
    os.makedirs(tmp_store)
    blocker = os.path.join(tmp_store, "trajectories")
    with open(blocker, "w") as fh:  # a file where the shard directory must go
        fh.write("in the way")
    w = StoreWriter(tmp_store, flush_rows=2, flush_seconds=None)
    w.write(_traj("x1"))
    with pytest.raises(StoreError, match="could not write shard"):
        w.write(_traj("x2"))
    os.unlink(blocker)
    assert w.flush() is not None
    w.close()
    assert read_trajectories(tmp_store).column("trajectory_id").to_pylist() == ["x1", "x2"]
    assert os.listdir(os.path.join(tmp_store, "_tmp")) == []


def test_write_trajectories_helper(tmp_store: str) -> None:
    paths = write_trajectories(tmp_store, [_traj(f"w{i}") for i in range(5)], flush_rows=2)
    assert len(paths) == 3 and all(os.path.exists(p) for p in paths)


def test_duplicates_resolve_to_first_copy_in_arrival_order(tmp_store: str) -> None:
    # Shard 1: a (r=1), b (r=1), a (r=2, in-shard duplicate).  Shard 2: b (r=3), c (r=3).
    # Shard 3: a (r=4).  Readers keep a->1, b->1, c->3; 3 copies are dropped.
    write_trajectories(tmp_store, [_traj("a", reward=1), _traj("b", reward=1), _traj("a", reward=2)])
    write_trajectories(tmp_store, [_traj("b", reward=3), _traj("c", reward=3)])
    write_trajectories(tmp_store, [_traj("a", reward=4)])
    expected = {"a": 1.0, "b": 1.0, "c": 3.0}
    t = read_trajectories(tmp_store)
    assert dict(zip(t.column("trajectory_id").to_pylist(), t.column("reward").to_pylist())) == expected
    assert t.num_rows == 3
    lf = scan_trajectories(tmp_store).select("trajectory_id", "reward").collect()
    assert dict(zip(lf["trajectory_id"].to_list(), lf["reward"].to_list())) == expected
    streamed = {tid: r for b in iter_batches(tmp_store) for tid, r in zip(b.trajectory_ids, b.reward)}
    assert streamed == expected
    assert count_duplicates(tmp_store) == 3
    assert read_trajectories(tmp_store, dedupe=False).num_rows == 6


def test_bad_flush_options() -> None:
    with pytest.raises(ValueError, match="flush_rows"):
        StoreWriter("/nonexistent/never-written", flush_rows=0)


# adversarial input: a hole found attacking the store and the SDK (failed before its fix)
def test_writer_counts_metadata_when_sizing_flushes(tmp_store: str) -> None:
    # 40 trajectories with 2 MiB of metadata each and flush_mb=1: every trajectory alone
    # exceeds the flush size, so each flush holds one (40 shards), not one 80 MB shard.
    with StoreWriter(tmp_store, flush_mb=1, flush_seconds=None) as w:
        for i in range(40):
            w.write(fat_trajectory(i, 2 * 2**20))
    assert len(w.shards_written) == 40
    assert read_trajectories(tmp_store, columns=["trajectory_id"]).num_rows == 40


# hostile tester: bad input answered by one clear line naming the file, row, field or flag
@pytest.mark.parametrize("kwargs, field", [
    ({"flush_seconds": math.nan}, "flush_seconds"), ({"flush_seconds": math.inf}, "flush_seconds"),
    ({"flush_seconds": -1}, "flush_seconds"), ({"flush_seconds": 0}, "flush_seconds"),
    ({"flush_seconds": "5"}, "flush_seconds"), ({"flush_mb": math.nan}, "flush_mb"), ({"flush_mb": 0}, "flush_mb"),
])
def test_writer_refuses_non_finite_or_non_positive_flush_limits(tmp_path: Path, kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field} must be a finite number > 0"):
        ts.StoreWriter(str(tmp_path / "s"), **kwargs)


# -- dedupe mode (what traj ingest writes with) and caller-checked trajectories ----------------------

def test_dedupe_writers_store_each_id_once_and_count_what_they_dropped(tmp_store: str) -> None:
    # Both writers looked at the (empty) store before either flushed: the second to flush finds
    # b and c stored under the lock and writes a only.
    first = StoreWriter(tmp_store, flush_seconds=None, dedupe_lock="test")
    second = StoreWriter(tmp_store, flush_seconds=None, dedupe_lock="test")
    first.write_many([_traj("b"), _traj("c")])
    second.write_many([_traj("a"), _traj("b"), _traj("c")])
    first.close()
    second.close()
    assert sorted(read_trajectories(tmp_store, dedupe=False).column("trajectory_id").to_pylist()) == ["a", "b", "c"]
    assert (first.dedupe.written, first.dedupe.dropped) == (["b", "c"], 0)
    assert (second.dedupe.written, second.dedupe.dropped) == (["a"], 2)
    assert second.dedupe.stored == {"a", "b", "c"}
    third = StoreWriter(tmp_store, flush_seconds=None, dedupe_lock="test")  # looks at the store when made
    assert third.dedupe.stored == {"a", "b", "c"}
    third.write(_traj("a"))
    assert third.flush() is None and third.dedupe.dropped == 1  # everything stored already: no shard
    assert _rows_per_shard(tmp_store) == [2, 1]


def test_a_dedupe_writer_that_stores_nothing_leaves_no_store(tmp_path: Path) -> None:
    store = tmp_path / "s"
    StoreWriter(str(store), flush_seconds=None, dedupe_lock="test").close()
    assert not store.exists()
    StoreWriter(str(store), flush_seconds=None).close()  # the plain writer makes the store at once
    assert (store / "trajectories").is_dir()


def test_without_validation_a_lineage_is_stored_as_given(tmp_store: str) -> None:
    orphan = _traj("child")
    orphan.parent_trajectory_id, orphan.fork_point, orphan.link_kind = "not-stored", 2, "fork"
    with StoreWriter(tmp_store, flush_seconds=None) as w, pytest.raises(TrajectoryValidationError,
                                                                        match="neither in the same write"):
        w.write(orphan)
    with StoreWriter(tmp_store, flush_seconds=None, validate=False) as w:
        w.write(orphan)
    assert read_trajectories(tmp_store).column("parent_trajectory_id").to_pylist() == ["not-stored"]
