"""trajstore/reader/by_id.py: reading trajectories by id: the first copy, in arrival order, from
only the row groups that hold them (the footer id index, or the id column without one)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.helpers.reads import count_row_group_reads
from trajstore import open_store, read_trajectories_by_id
from trajstore.convert import trajectories_to_table


def test_read_by_id_first_copy_arrival_order_and_only_the_row_groups_needed(
        tmp_store: str, make_trajectory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.parquet as pq


    rng = np.random.default_rng(21)
    store = open_store(tmp_store)
    a = [make_trajectory(rng, trajectory_id=f"a{i}", max_span_tokens=200) for i in range(40)]
    store.write_table(trajectories_to_table(a, version=1), row_group_target_mb=0.02)  # a v1 shard
    b = [make_trajectory(rng, trajectory_id=f"b{i}", max_span_tokens=200) for i in range(40)]
    b[5] = make_trajectory(rng, trajectory_id="a7")  # a later copy of a7: the first copy (shard 1) wins
    store.write_table(trajectories_to_table(b), row_group_target_mb=0.02)
    reads = count_row_group_reads(monkeypatch)
    got = read_trajectories_by_id(tmp_store, ["b30", "a7", "nope", "a3"], strict=True)
    # arrival order: shard 1 rows a3, a7, then shard 2 row b30; "nope" is absent
    assert got.column("trajectory_id").to_pylist() == ["a3", "a7", "b30"]
    want = trajectories_to_table([a[3], a[7], b[30]])
    for name in ("tokens", "spans", "num_missing_logprobs", "reward"):
        assert got.column(name).to_pylist() == want.column(name).to_pylist(), name
    assert np.array_equal(got.column("action_logprobs").combine_chunks().values.to_numpy().view(np.uint32),
                          want.column("action_logprobs").combine_chunks().values.to_numpy().view(np.uint32))
    n_rg = sum(pq.read_metadata(s.path).num_row_groups for s in store.list_shards())
    assert n_rg >= 10 and 1 <= len(reads) <= 3  # at most one row group per wanted row, not the store
    assert read_trajectories_by_id(tmp_store, ["b1"], columns=["reward"]).column_names == ["trajectory_id", "reward"]


def test_read_by_id_uses_the_footer_index_and_falls_back_without_it(
        tmp_store: str, make_trajectory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.parquet as pq

    from trajstore.store import METADATA_ID_INDEX_KEY

    rng = np.random.default_rng(22)
    store = open_store(tmp_store)
    store.write_table(trajectories_to_table([make_trajectory(rng, trajectory_id=f"x{i}") for i in range(5)]))
    store.write_table(trajectories_to_table([make_trajectory(rng, trajectory_id=f"y{i}") for i in range(5)]))
    # a shard written without the index (as by another Parquet writer): found by its id column
    bare = trajectories_to_table([make_trajectory(rng, trajectory_id=f"z{i}") for i in range(5)])
    pq.write_table(bare, f"{store.path('trajectories')}/99999999999999999999-bare.parquet")
    shards = store.list_shards(strict=True)
    assert [s.id_index is not None for s in shards] == [True, True, False]
    assert METADATA_ID_INDEX_KEY not in (pq.read_schema(shards[0].path).metadata or {})  # footer only
    opened: list[str] = []
    real = pq.ParquetFile.__init__

    def counting(self: pq.ParquetFile, source: Any, *a: Any, **k: Any) -> None:
        opened.append(str(source))
        real(self, source, *a, **k)

    monkeypatch.setattr(pq.ParquetFile, "__init__", counting)
    got = read_trajectories_by_id(tmp_store, ["y3", "z1"], columns=["num_tokens"])
    assert got.column("trajectory_id").to_pylist() == ["y3", "z1"]
    # the x shard holds neither id: its index says so and it is never opened
    assert not any(shards[0].path in o for o in opened) and any(shards[1].path in o for o in opened)
