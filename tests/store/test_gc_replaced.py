"""``traj gc --delete --keep-replaced 0``: a shard that keeps some rows is replaced by a shard of
those rows, and the old one is deleted in the same run (as ``traj compact --keep-replaced 0``
does), so engines reading the plain files see the kept rows only; a dry run writes nothing, not
even the maintenance lock file."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq

from tests.helpers.small_shards import trajectory_table, write_small_shards
from tests.store.test_gc import _consume
from trajstore.maintenance.compact import compact_store
from trajstore.maintenance.gc import GcRules, gc_store
from trajstore.store import TRAJECTORIES_DIR, open_store


def _files(root: Path) -> list[str]:
    return sorted(n for n in os.listdir(root / TRAJECTORIES_DIR) if n.endswith(".parquet"))


def _all_files(root: Path) -> list[str]:
    """Every file of the store but the shard index (a listing cache any reader adds to, see
    :mod:`trajstore.store.index`)."""
    return sorted(p for d, _, fs in os.walk(root) for f in fs
                  if not (p := os.path.relpath(os.path.join(d, f), root)).startswith(f"{TRAJECTORIES_DIR}/_index/"))


def test_one_gc_run_deletes_the_shard_it_replaced(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    table = trajectory_table(4)
    names = write_small_shards(store, table, per_shard=2)  # [t0 t1] [t2 t3]
    ids = table.column("trajectory_id").to_pylist()
    _consume(store, "a", [ids[1], ids[2], ids[3]])  # a: finished, no checkpoint, named
    gc_store(store, GcRules(consumed_by=("a",), keep_replaced_s=0), dry_run=False)
    files = _files(tmp_path)
    assert names[0] not in files and names[1] not in files  # replaced and emptied, both gone at once
    assert len(files) == 1
    # a plain read of the files (no trajstore listing rule): the kept rows only
    paths = [str(tmp_path / TRAJECTORIES_DIR / n) for n in files]
    assert pq.ParquetDataset(paths).read(columns=["trajectory_id"]).column("trajectory_id").to_pylist() == [ids[0]]
    import duckdb

    got = duckdb.sql(f"SELECT trajectory_id FROM read_parquet('{tmp_path / TRAJECTORIES_DIR}/*.parquet')").fetchall()
    assert got == [(ids[0],)]


def test_gc_with_a_grace_keeps_the_replaced_shard_for_a_later_run(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    table = trajectory_table(2)
    names = write_small_shards(store, table, per_shard=2)
    _consume(store, "a", table.column("trajectory_id").to_pylist()[1:])
    gc_store(store, GcRules(consumed_by=("a",), keep_replaced_s=600), dry_run=False)
    assert names[0] in _files(tmp_path) and len(_files(tmp_path)) == 2  # readers that listed it still read it
    gc_store(store, GcRules(keep_replaced_s=0), dry_run=False)
    assert names[0] not in _files(tmp_path) and len(_files(tmp_path)) == 1


def test_dry_runs_write_nothing(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    table = trajectory_table(4)
    write_small_shards(store, table, per_shard=1)
    _consume(store, "a", table.column("trajectory_id").to_pylist())
    before = _all_files(tmp_path)
    assert compact_store(store, min_age_s=0, dry_run=True).groups
    assert gc_store(store, GcRules(consumed_by=("a",)), dry_run=True).items
    assert _all_files(tmp_path) == before  # no _locks/maintenance.lock either
