"""The trainer's data stream reads through the store's readers: a store mixing schema-v1 and v2
shards, and shards that lack a nullable column, train as one (issue 11 and issue 14 item 5)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trajstore import open_store
from trajstore.convert import trajectories_to_table
from trajstore.trainer.loop.config import DataConfig
from trajstore.trainer.data import TrajectoryStream

from tests.helpers.trajectories import VOCAB, tiny_model_trajectory


def test_stream_reads_v1_v2_and_missing_columns_as_one(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    store = open_store(str(tmp_path / "s"))
    old = [tiny_model_trajectory(rng, trajectory_id=f"old{i}", group_id="g-old", reward=1.0) for i in range(3)]
    mid = [tiny_model_trajectory(rng, trajectory_id=f"mid{i}", group_id="g-mid", reward=0.5) for i in range(2)]
    new = [tiny_model_trajectory(rng, trajectory_id=f"new{i}", group_id="g-new", reward=0.0) for i in range(2)]
    store.write_table(trajectories_to_table(old, version=1))                       # a v1 shard
    store.write_table(trajectories_to_table(mid).drop_columns(["group_id", "metadata"]))  # no group_id column
    store.write_table(trajectories_to_table(new))
    s = TrajectoryStream(store, DataConfig(batch_size=100), tokenizer="tiny-llama", vocab_size=VOCAB)
    s.precheck()
    batch = s.next_batch()
    assert batch is not None and s.next_batch() is None
    by_id = {x.trajectory_id: x for x in batch.samples}
    assert list(by_id) == [t.trajectory_id for t in old + mid + new]
    assert [by_id[t.trajectory_id].group_id for t in old + mid + new] == ["g-old"] * 3 + [None] * 2 + ["g-new"] * 2
    for t in old + mid + new:
        sample = by_id[t.trajectory_id]
        act = np.zeros(len(t.tokens), bool)
        for sp in t.spans:
            if sp.kind == "action":
                act[sp.start:sp.end] = True
        assert np.array_equal(sample.tokens, t.tokens) and np.array_equal(sample.action_mask, act)
        # The full-length view the trainer packs: the engine's values at action tokens, NaN elsewhere.
        assert np.array_equal(sample.rollout_logprobs.view(np.uint32), t.logprobs.view(np.uint32))
        assert not sample.needs_behaviour


def test_every_reader_fills_missing_nullable_columns_with_nulls(tmp_path: Path) -> None:
    """Issue 14 Why: shards of an older schema that lack `group_id` and `metadata` crashed
    `scan_trajectories(...).collect()` (and `traj train`), while `read_trajectories` read them."""
    import warnings

    from trajstore import iter_batches, read_trajectories, scan_trajectories

    rng = np.random.default_rng(5)
    store = open_store(str(tmp_path / "s"))
    store.write_table(trajectories_to_table([tiny_model_trajectory(rng, trajectory_id="new", group_id="g")]))
    store.write_table(trajectories_to_table([tiny_model_trajectory(rng, trajectory_id="old")])
                      .drop_columns(["group_id", "metadata"]))
    root = str(tmp_path / "s")
    want = {"new": "g", "old": None}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # read as data, not skipped as a corrupt shard
        lazy = scan_trajectories(root).select("trajectory_id", "group_id", "metadata").collect()
        assert dict(zip(lazy["trajectory_id"].to_list(), lazy["group_id"].to_list())) == want
        assert lazy["metadata"].to_list() == [None, None]
        table = read_trajectories(root, columns=["trajectory_id", "group_id"])
        assert dict(zip(*table.to_pydict().values())) == want
        batches = list(iter_batches(root))
        got = {}
        for b in batches:
            got.update(zip(b.trajectory_ids, b.table.column("group_id").to_pylist()))
        assert got == want
