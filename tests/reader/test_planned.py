"""trajstore/reader/planned.py and the readers built on it: a read that meets shards a compaction
replaced and deleted after its listing goes on inside the compaction's output, never repeating
or skipping a row (iter_batches, read_trajectories, summarize_store)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.small_shards import trajectory_table, write_small_shards
from trajstore.maintenance.compact import compact_store
from trajstore.reader import iter_batches, read_trajectories, summarize_store
from trajstore.reader.planned import iter_planned_tables
from trajstore.store import Store, open_store

NOW = dict(min_age_s=0, keep_replaced_s=0)


def test_a_read_interrupted_by_a_compaction_goes_on_inside_its_output(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    table = trajectory_table(12)
    write_small_shards(store, table, per_shard=2)
    it = iter_planned_tables(store, columns=["trajectory_id"], strict=True, dedupe=False)
    got = [t for _ in range(2) for t in next(it)[2].column("trajectory_id").to_pylist()]
    compact_store(store, **NOW)  # the listing `it` holds names deleted shards now
    got += [t for _, _, tab in it for t in tab.column("trajectory_id").to_pylist()]
    assert got == table.column("trajectory_id").to_pylist()


def test_iter_batches_during_compactions(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    table = trajectory_table(12)
    write_small_shards(store, table, per_shard=3)
    it = iter_batches(store, dedupe=False)
    got = list(next(it).trajectory_ids)
    compact_store(store, target_mb=0.04, **NOW)
    got += list(next(it).trajectory_ids)
    compact_store(store, **NOW)
    got += [t for b in it for t in b.trajectory_ids]
    assert got == table.column("trajectory_id").to_pylist()


def test_eager_readers_listing_deleted_shards_read_everything_once(tmp_path: Path, monkeypatch) -> None:
    store = open_store(tmp_path)
    table = trajectory_table(8)
    write_small_shards(store, table)
    stale = store.list_shards()
    compact_store(store, **NOW)
    real = Store.list_shards
    calls = {"n": 0}

    def first_stale(self, *a, **kw):  # noqa: ANN001, ANN202 - the listing a reader got just before the commit
        calls["n"] += 1
        return stale if calls["n"] == 1 else real(self, *a, **kw)

    monkeypatch.setattr(Store, "list_shards", first_stale)
    assert read_trajectories(store).column("trajectory_id").to_pylist() == table.column("trajectory_id").to_pylist()
    calls["n"] = 0
    summary = summarize_store(store)
    assert summary.trajectories == 8 and summary.shards == 1 and summary.skipped == []
