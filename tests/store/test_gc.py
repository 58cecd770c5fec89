"""trajstore/maintenance/gc.py and gc_rows.py (``traj gc``): retention by rule, dry run and real run, and
never what a resumable or running run needs. Runs, checkpoints and policies are laid out by hand
(the layout functions name every path); a real ``traj train --follow`` is in test_gc_follow.py."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest

from tests.helpers.small_shards import trajectory_table, write_small_shards
from trajstore.maintenance.gc import GcRules, gc_store
from trajstore.policies import list_policy_versions
from trajstore.reader import read_trajectories
from trajstore.schema import CONSUMED_SCHEMA
from trajstore.store import TRAJECTORIES_DIR, open_store
from trajstore.store.layout import (
    CHECKPOINT_STATE_FILE,
    VERSION_META_FILE,
    VERSION_WEIGHTS_FILE,
    checkpoint_dir,
    checkpoint_dir_name,
    checkpoint_latest_file,
    policy_latest_file,
    run_config_file,
    run_consumed_dir,
    scalar_cache_dir,
    version_dir,
)

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _publish(store, run: str, versions: list[int], latest: int) -> None:
    for v in versions:
        store.write_bytes(f"{version_dir(run, v)}/{VERSION_WEIGHTS_FILE}", b"w" * 1000)
        store.write_bytes(f"{version_dir(run, v)}/{VERSION_META_FILE}", b"{}")
    store.write_bytes(policy_latest_file(run), json.dumps({"version": latest}).encode())


def _checkpoint(store, run: str, iteration: int, version: int, cursor: dict | None = None, latest: bool = True) -> None:
    state = {"iteration": iteration, "step": iteration, "version": version, "baseline": None,
             "cursor": cursor or {"done_shards": [], "shard": None, "next_row": 0}}
    store.write_bytes(f"{checkpoint_dir(run, iteration)}/{CHECKPOINT_STATE_FILE}", json.dumps(state).encode())
    if latest:
        store.write_bytes(checkpoint_latest_file(run),
                          json.dumps({"iteration": iteration, "dir": checkpoint_dir_name(iteration)}).encode())


def _consume(store, run: str, ids: list[str]) -> None:
    n = len(ids)
    store.write_table(pa.table({
        "run_id": [run] * n, "step": list(range(n)), "trainer_version": [1] * n, "trajectory_id": ids, "rank": [0] * n,
        "min_policy_version": pa.nulls(n, pa.int64()), "max_policy_version": pa.nulls(n, pa.int64()),
        "staleness_min": pa.nulls(n, pa.int64()), "staleness_max": pa.nulls(n, pa.int64()),
        "num_action_tokens": [1] * n, "masked_below": pa.nulls(n, pa.float64()),
        "masked_above": pa.nulls(n, pa.float64()), "ratio_mean": pa.nulls(n, pa.float64()), "reuse": [0] * n,
        "consumed_at": pa.array([T0] * n, pa.timestamp("us", tz="UTC")),
    }).select(CONSUMED_SCHEMA.names).cast(CONSUMED_SCHEMA), subdir=run_consumed_dir(run))


def _ids(store) -> list[str]:
    return read_trajectories(store, columns=["trajectory_id"]).column("trajectory_id").to_pylist()


def test_policy_versions_beyond_n_go_but_latest_its_predecessor_and_checkpointed_ones_stay(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    _publish(store, "r", list(range(8)), latest=5)  # LATEST at v5 (v6, v7 published, pointer not moved yet)
    _checkpoint(store, "r", 3, version=1)
    dry = gc_store(store, GcRules(keep_versions=2))
    # newest 2: v6 v7; LATEST v5 and v4 before it; v1 a checkpoint was taken at -> v0 v2 v3 go
    assert sorted(i["what"].rsplit("/", 1)[-1] for i in dry.items) == ["v0", "v2", "v3"]
    assert dry.dry_run and all(i["bytes"] >= 1000 for i in dry.items)
    assert list_policy_versions(store, "r") == list(range(8))  # a dry run deletes nothing
    real = gc_store(store, GcRules(keep_versions=2), dry_run=False)
    assert real.bytes == dry.bytes
    assert list_policy_versions(store, "r") == [1, 4, 5, 6, 7]


def test_checkpoints_beyond_n_go_but_latest_and_newer_stay(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    for it in (1, 2, 3, 4):
        _checkpoint(store, "r", it, version=it, latest=it == 2)  # it3, it4: being committed after LATEST=it2
    r = gc_store(store, GcRules(keep_checkpoints=1), dry_run=False)
    assert [i["what"].rsplit("/", 1)[-1] for i in r.items] == ["it00000001"]
    assert sorted(store.iter_dirs("runs/r/checkpoints")) == ["it00000002", "it00000003", "it00000004"]


def test_trajectories_consumed_by_the_named_runs_and_behind_every_cursor(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    table = trajectory_table(8)
    names = write_small_shards(store, table, per_shard=2)  # [t0 t1] [t2 t3] [t4 t5] [t6 t7]
    ids = table.column("trajectory_id").to_pylist()
    _consume(store, "a", ids[:7])
    _consume(store, "b", ids[1:8])
    # run b resumes from a cursor inside the third shard: rows after t4 are not behind it
    _checkpoint(store, "b", 3, version=1, cursor={"done_shards": names[:2], "shard": names[2], "next_row": 1})
    store.write_bytes(run_config_file("a"), b"{}")  # a: finished, no checkpoint, named -> fine
    r = gc_store(store, GcRules(consumed_by=("a", "b")))
    # consumed by both: t1..t6; behind b's cursor: t0..t4 -> t1..t4
    assert [i["what"] for i in r.items] == [f"1 of 2 rows of {names[0]}", f"2 of 2 rows of {names[1]}",
                                            f"1 of 2 rows of {names[2]}"]
    read_trajectories(store, columns=["reward"])  # fills the scalar cache with every row
    assert os.listdir(store.path(scalar_cache_dir()))
    gc_store(store, GcRules(consumed_by=("a", "b"), keep_replaced_s=0), dry_run=False)
    assert os.listdir(store.path(scalar_cache_dir())) == []  # no copy of the deleted rows' scalars
    assert _ids(store) == [ids[0], ids[5], ids[6], ids[7]]
    # b's cursor still means the same rows: resumed, it reads t5 t6 t7 (t5: rest of the third shard)
    from trajstore.reader import read_shard
    from trajstore.reader.progress import Progress, plan

    cur = Progress(names[:2], names[2], 1)
    rest = []
    for s in store.list_shards():
        units, _ = plan(s, cur)
        shard_ids = read_shard(store, s, columns=["trajectory_id"]).column("trajectory_id").to_pylist()
        rest += [shard_ids[p] for u in units for p in u.phys.tolist()]
    assert rest == ids[5:]


def test_age_and_status_narrow_the_rule_and_unconsumed_data_is_never_taken(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    rows = trajectory_table(4).to_pylist()
    rows[0]["created_at"] = T0 - timedelta(days=30)
    rows[1]["created_at"] = T0 - timedelta(days=30)
    rows[1]["status"] = "failed"
    store.write_table(pa.Table.from_pylist(rows, schema=trajectory_table(1).schema))
    ids = [r["trajectory_id"] for r in rows]
    _consume(store, "a", ids[:3])  # t3 never consumed
    now = T0.timestamp()
    from trajstore.maintenance.gc_rows import plan_rows

    assert plan_rows(store, consumed_by=("a",), older_than_s=7 * 86400, statuses=None, now=now).rows == 2
    assert plan_rows(store, consumed_by=("a",), older_than_s=7 * 86400, statuses=("failed",), now=now).rows == 1
    assert plan_rows(store, consumed_by=("a",), older_than_s=None, statuses=None, now=now).rows == 3
    with pytest.raises(ValueError, match="consumed"):
        GcRules(older_than_s=10)
    with pytest.raises(ValueError, match="'weird' is not a trajectory status.*completed, truncated, aborted, failed"):
        GcRules(consumed_by=("a",), statuses=("failed", "weird"))


def test_a_run_without_a_checkpoint_keeps_every_trajectory(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    table = trajectory_table(4)
    write_small_shards(store, table)
    _consume(store, "a", table.column("trajectory_id").to_pylist())
    store.write_bytes(run_config_file("running"), b"{}")  # a trainer that has not checkpointed yet
    r = gc_store(store, GcRules(consumed_by=("a",)), dry_run=False)
    assert r.items == [] and "running" in r.kept[0]
    assert len(_ids(store)) == 4
    r = gc_store(store, GcRules(consumed_by=("a",), ignore_runs=("running",), keep_replaced_s=0), dry_run=False)
    assert len(r.items) == 4 and _ids(store) == []
    assert [p for p, _ in store.shard_paths(TRAJECTORIES_DIR)] == []
