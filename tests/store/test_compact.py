"""trajstore/maintenance/compact.py (``traj compact``): small shards merged in arrival order, later copies
dropped by the readers' rule, dry run, the grace for replaced shards, young and big shards left
alone, every state a killed run can leave, old schema versions rewritten, writers appending and
readers reading meanwhile, and S3. The SIGKILL test is test_compact_kill.py."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from tests.helpers.small_shards import trajectory_table, write_small_shards
from tests.helpers.trajectories import tiny_model_trajectory
from trajstore.convert import trajectories_to_table
from trajstore.maintenance.compact import compact_store, plan_compaction
from trajstore.reader import iter_batches, read_trajectories, read_trajectories_by_id
from trajstore.schema import ACTION_LOGPROBS_COLUMN, SCHEMA_VERSION
from trajstore.store import TRAJECTORIES_DIR, ShardInfo, open_store
from trajstore.store.compaction_records import CompactionRecord, compacted_name, read_records, write_record

NOW = dict(min_age_s=0, keep_replaced_s=0)


def _files(store) -> list[str]:
    return sorted(p.rsplit("/", 1)[-1] for p, _ in store.shard_paths(TRAJECTORIES_DIR))


def test_small_shards_become_one_and_read_the_same(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    table = trajectory_table(30)
    write_small_shards(store, table)
    before = read_trajectories(store)
    r = compact_store(store, **NOW)
    assert [g["sources"] for g in r.groups] == [30] and r.replaced_deleted == 30
    [shard] = store.list_shards()
    assert shard.num_rows == 30 and len(shard.parts) == 30
    assert _files(store) == [shard.name]  # the sources are deleted
    assert read_trajectories(store).equals(before)  # same rows, same order
    assert sum(len(b) for b in iter_batches(store)) == 30
    got = read_trajectories_by_id(store, ["t00007", "t00023"], columns=["reward"])
    assert got.column("trajectory_id").to_pylist() == ["t00007", "t00023"]


def test_later_copies_are_dropped_and_the_first_kept(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    # arrival order: [x y] [y' z] [x'']: y' (reward 9) and x'' (reward 7) are later copies
    first = trajectory_table(2, prefix="x", rewards=[1.0, 2.0]).to_pylist()
    x, y = first
    y2 = dict(y, reward=9.0)
    z = trajectory_table(1, prefix="z", rewards=[3.0]).to_pylist()[0]
    x3 = dict(x, reward=7.0)
    schema = trajectory_table(1).schema
    for rows in ([x, y], [y2, z], [x3]):
        store.write_table(pa.Table.from_pylist(rows, schema=schema))
    r = compact_store(store, **NOW)
    assert r.groups[0]["dropped"] == 2
    t = read_trajectories(store, dedupe=False)  # what is stored now, copies included
    assert t.column("trajectory_id").to_pylist() == ["x00000", "x00001", "z00000"]
    assert t.column("reward").to_pylist() == [1.0, 2.0, 3.0]
    [rec] = read_records(store).values()
    assert [d for _, _, d in rec.sources] == [(), (0,), (0,)]


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    write_small_shards(store, trajectory_table(6))
    files = _files(store)
    r = compact_store(store, dry_run=True, **NOW)
    assert r.dry_run and [g["sources"] for g in r.groups] == [6] and r.groups[0]["rows"] == 6
    assert _files(store) == files and not os.path.exists(tmp_path / "s" / TRAJECTORIES_DIR / "_compactions")


def test_replaced_shards_are_kept_hidden_for_the_grace_then_deleted(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    names = write_small_shards(store, trajectory_table(5))
    r = compact_store(store, min_age_s=0, keep_replaced_s=3600)
    assert r.replaced_kept == 5 and r.replaced_deleted == 0
    assert set(names) < set(_files(store))  # still on disk ...
    assert len(store.list_shards()) == 1 and read_trajectories(store).num_rows == 5  # ... but not read
    r = compact_store(store, min_age_s=0, keep_replaced_s=3600)
    assert r.replaced_kept == 5 and not r.groups  # nothing new to merge, grace not over
    r = compact_store(store, min_age_s=0, keep_replaced_s=0)
    assert r.replaced_deleted == 5 and len(_files(store)) == 1


def test_young_shards_are_left_alone(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    write_small_shards(store, trajectory_table(4))
    r = compact_store(store, min_age_s=3600, keep_replaced_s=0)  # every shard is seconds old
    assert not r.groups and len(store.list_shards()) == 4
    assert (r.left_young, r.left_big, r.left_alone) == (4, 0, 0)  # what a dry run explains


def _info(i: int, size: int, age_s: float = 1000.0) -> ShardInfo:
    name = f"{int((time.time() - age_s) * 1e9):020d}-h-1-{i:012d}.parquet"
    return ShardInfo(f"/s/trajectories/{name}", 1, size, 1, 2)


def test_groups_are_runs_of_small_shards_cut_at_the_target() -> None:
    # target 100: small means < 50. Sizes: 10 20 30 | 60 (big) | 40 40 40 | 5 (young)
    shards = [_info(0, 10), _info(1, 20), _info(2, 30), _info(3, 60), _info(4, 40), _info(5, 40), _info(6, 40),
              _info(7, 5, age_s=1)]
    plan = plan_compaction(shards, target_bytes=100, min_age_s=60)
    # 10+20+30 = 60 fits; 40+40 = 80, +40 would pass 100: [4 5], then [6] alone is not rewritten
    assert [[int(s.path[-20:-8]) for s in g] for g in plan.groups] == [[0, 1, 2], [4, 5]]
    # left out, each counted once by its reason: 3 (big), 7 (young), 6 (alone)
    assert (plan.big, plan.young, plan.alone) == (1, 1, 1)


def test_a_run_killed_before_its_commit_changes_nothing_and_is_cleaned(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    names = write_small_shards(store, trajectory_table(4))
    before = read_trajectories(store)
    out = compacted_name(names[0])
    # killed after writing the record, before the output
    write_record(store, CompactionRecord(out, 4, tuple((n, 1, ()) for n in names)))
    assert read_trajectories(store).equals(before) and len(store.list_shards()) == 4
    r = compact_store(store, **NOW)
    assert r.orphans_removed == 1 and out not in read_records(store)
    assert read_trajectories(store).equals(before) and len(store.list_shards()) == 1


def test_a_run_killed_after_its_commit_reads_once_and_is_finished(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    write_small_shards(store, trajectory_table(4))
    before = read_trajectories(store)
    compact_store(store, min_age_s=0, keep_replaced_s=3600)  # = killed before deleting the sources
    assert len(_files(store)) == 5
    assert read_trajectories(store).equals(before)
    r = compact_store(store, **NOW)
    assert r.replaced_deleted == 4 and len(_files(store)) == 1


def test_an_output_without_its_record_is_hidden_and_removed(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    names = write_small_shards(store, trajectory_table(3))
    before = read_trajectories(store)
    store.write_table(before, name=compacted_name(names[0]))  # its record lost
    assert read_trajectories(store).equals(before)
    r = compact_store(store, **NOW)
    assert r.orphans_removed == 1 and read_trajectories(store).equals(before)


def test_a_compaction_output_is_compacted_again_with_newer_shards(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    table = trajectory_table(10)
    write_small_shards(store, table.slice(0, 5))
    compact_store(store, **NOW)
    write_small_shards(store, table.slice(5, 5))
    compact_store(store, **NOW)
    [shard] = store.list_shards()
    assert [p.name for p in shard.parts][1:] and len(shard.parts[0].parts) == 5  # nested record
    assert read_trajectories(store).column("trajectory_id").to_pylist() == table.column("trajectory_id").to_pylist()


def test_old_schema_shards_are_rewritten_and_plain_duckdb_agrees(tmp_path: Path) -> None:
    """A mixed v1/v2 store: after compaction every file is the current version, one meaning per
    column, and DuckDB over the raw files gives trajstore's numbers."""
    store = open_store(tmp_path / "s")
    rng = np.random.default_rng(1)
    trajs = [tiny_model_trajectory(rng, trajectory_id=f"m{i}", reward=float(i)) for i in range(6)]
    for i, t in enumerate(trajs):
        store.write_table(trajectories_to_table([t], version=1 if i % 2 == 0 else 2))
    store.write_table(trajectories_to_table([trajs[0].model_copy(update={"reward": 100.0})]))  # a later copy
    compact_store(store, **NOW)
    assert {s.schema_version for s in store.list_shards()} == {SCHEMA_VERSION}
    ours = read_trajectories(store)
    files = [p for p, _ in store.shard_paths(TRAJECTORIES_DIR)]
    lp = ACTION_LOGPROBS_COLUMN
    [(n, total, same)] = duckdb.sql(
        f"SELECT count(*), sum(reward), bool_and(len({lp}) = num_action_tokens) FROM read_parquet({files!r})"
    ).fetchall()
    assert (n, total, same) == (6, 0 + 1 + 2 + 3 + 4 + 5, True)
    assert ours.num_rows == 6 and sum(ours.column("reward").to_pylist()) == 15


def test_writers_keep_appending_and_readers_keep_reading(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    table = trajectory_table(120)
    write_small_shards(store, table.slice(0, 60))
    written = list(table.column("trajectory_id").to_pylist()[:60])
    problems: list[str] = []
    stop = threading.Event()

    def writer() -> None:
        for i in range(60, 120):
            store.write_table(table.slice(i, 1))
            written.append(table.column("trajectory_id")[i].as_py())

    def reader() -> None:
        while not stop.is_set():
            must = set(written)  # stored before this read started
            for ids in (read_trajectories(store, columns=["trajectory_id"]).column("trajectory_id").to_pylist(),
                        [t for b in iter_batches(store, columns=["trajectory_id"]) for t in b.trajectory_ids]):
                if len(ids) != len(set(ids)) or not must <= set(ids):
                    problems.append(f"{len(ids)} ids, {len(set(ids))} distinct, {len(must - set(ids))} missing")

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for _ in range(4):
        compact_store(store, target_mb=0.05, **NOW)
        stored = len(written)  # the next compaction comes once the writer has stored more (or is done)
        deadline = time.monotonic() + 120  # bounds a hang
        while len(written) == stored and threads[0].is_alive():
            assert time.monotonic() < deadline, "the writer stopped storing"
            time.sleep(0.01)
    threads[0].join()
    stop.set()
    threads[1].join()
    compact_store(store, **NOW)
    assert problems == []
    assert sorted(read_trajectories(store).column("trajectory_id").to_pylist()) == sorted(written)


@pytest.mark.s3
def test_compaction_on_s3(s3_store_uri) -> None:
    uri, opts = s3_store_uri
    store = open_store(uri, storage_options=opts)
    write_small_shards(store, trajectory_table(8))
    before = read_trajectories(store)
    r = compact_store(store, min_age_s=0, keep_replaced_s=3600)
    assert r.replaced_kept == 8 and len(store.list_shards()) == 1
    assert read_trajectories(store).equals(before)
    r = compact_store(store, **NOW)
    assert r.replaced_deleted == 8 and len(store.shard_paths(TRAJECTORIES_DIR)) == 1
    assert read_trajectories(open_store(uri, storage_options=opts)).equals(before)
    assert not store.fs.exists(store.path("_locks/maintenance.lock"))  # the lease is released


@pytest.mark.s3
def test_compaction_on_s3_past_a_listing_another_thread_stored_after_its_write(s3_store_uri, monkeypatch) -> None:
    # The S3 SIGKILL test failed here: a reader thread's listing, taken before the compaction's PUT and
    # stored in the shared s3fs cache after it, made the output's size lookup raise FileNotFoundError.
    from tests.helpers.stores import listing_returns_after_invalidation

    uri, opts = s3_store_uri
    store = open_store(uri, storage_options=opts)
    write_small_shards(store, trajectory_table(4))
    listing_returns_after_invalidation(store, monkeypatch, TRAJECTORIES_DIR)
    r = compact_store(store, **NOW)
    [g] = r.groups
    assert (g["sources"], g["rows"]) == (4, 4)
    assert g["bytes_after"] == store.fs.info(g["output"], refresh=True)["size"] > 0


def test_validate_checks_what_readers_read_during_the_grace(tmp_path: Path) -> None:
    from trajstore.validation.sources import list_inputs

    store = open_store(tmp_path / "s")
    write_small_shards(store, trajectory_table(4))
    compact_store(store, min_age_s=0, keep_replaced_s=3600)  # sources kept on disk, hidden
    [f] = list_inputs([str(tmp_path / "s")])  # not the replaced ones: no duplicate ids to report
    assert f.path.rsplit("/", 1)[-1] == store.list_shards()[0].name
