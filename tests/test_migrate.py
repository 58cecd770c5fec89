"""trajstore/migrate.py: ``traj migrate``: v1 shards rewritten as v3 under their own names, rows and
order unchanged; killed with SIGKILL mid-run it loses nothing and a rerun finishes the job."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from tests.helpers.pause_kill import kill_at_pause
from tests.helpers.stores import write_big_v1_store
from trajstore import audit, open_store, read_trajectories, read_trajectories_by_id
from trajstore.convert import table_to_trajectories, trajectories_to_table
from trajstore.migrate import migrate_store
from trajstore.reader import iter_shard_batches, read_shard
from trajstore.schema import SCHEMA_VERSION
from trajstore.store import TMP_DIR, Store

CHILD = Path(__file__).with_name("_migrate_child.py")


def _assert_same(got: pa.Table, want: pa.Table) -> None:
    assert got.column("trajectory_id").to_pylist() == want.column("trajectory_id").to_pylist()
    for name in want.column_names:
        a, b = got.column(name).combine_chunks(), want.column(name).combine_chunks()
        if name == "action_logprobs":
            assert a.offsets.to_pylist() == b.offsets.to_pylist()
            assert np.array_equal(a.values.to_numpy().view(np.uint32), b.values.to_numpy().view(np.uint32))
        elif name == "tokens":
            assert np.array_equal(a.values.to_numpy(), b.values.to_numpy())
        else:
            assert a.to_pylist() == b.to_pylist(), name


def test_migrate_rewrites_v1_as_v3_under_the_same_names(tmp_store: str) -> None:
    want = write_big_v1_store(tmp_store, 3, 500)
    store = open_store(tmp_store)
    names_before = [s.name for s in store.list_shards()]
    dry = migrate_store(tmp_store, dry_run=True)
    assert (len(dry.migrated), dry.rows, dry.already_current) == (3, 6, 0)
    assert [s.schema_version for s in store.list_shards()] == [1, 1, 1]  # dry run wrote nothing

    res = migrate_store(tmp_store)
    assert (len(res.migrated), res.rows, res.already_current) == (3, 6, 0)
    shards = open_store(tmp_store).list_shards(strict=True)
    assert [s.name for s in shards] == names_before
    assert [s.schema_version for s in shards] == [SCHEMA_VERSION] * 3
    _assert_same(read_trajectories(tmp_store, strict=True), want)
    again = migrate_store(tmp_store)
    assert (again.migrated, again.already_current) == ([], 3)


def _migrate_until_paused(store: str, stop_at: str, k: int) -> list[str]:
    """Run `traj migrate`'s code in a child that pauses at `stop_at` of its k-th rewrite
    (tests/_migrate_child.py), SIGKILL it there; return the shards it reported migrated."""
    migrated: list[str] = []

    def on_line(word: str, rest: list[str]) -> None:
        assert word == "migrated", (word, rest)
        migrated.extend(rest)

    paused = kill_at_pause([sys.executable, str(CHILD), store, stop_at, str(k)], on_line)
    assert paused == [stop_at], paused
    return migrated


def test_migrate_killed_mid_run_loses_nothing_and_reruns(tmp_store: str) -> None:
    want = write_big_v1_store(tmp_store, 6, 2000)
    names = [s.name for s in open_store(tmp_store).list_shards(strict=True)]
    tmp = Path(tmp_store) / TMP_DIR

    def check(versions: list[int]) -> None:  # nothing lost, nothing partial: every shard reads (strict)
        shards = open_store(tmp_store).list_shards(strict=True)
        assert [s.name for s in shards] == names and [s.schema_version for s in shards] == versions
        _assert_same(read_trajectories(tmp_store, strict=True), want)

    # killed while the 3rd shard's new file is half written to its temp file
    assert _migrate_until_paused(tmp_store, "mid-write", 3) == names[:2]
    V = SCHEMA_VERSION
    check([V, V, 1, 1, 1, 1])
    (left,) = [p for p in tmp.iterdir() if ".rewrite-" in p.name]  # the kill landed inside the rewrite
    assert left.name.startswith(names[2])
    # rerun, killed just after the 3rd shard's new file replaced the old one (before it was counted)
    assert _migrate_until_paused(tmp_store, "after-replace", 1) == []
    check([V, V, V, 1, 1, 1])
    assert not left.exists()  # the rerun removed what the killed rewrite left
    res = migrate_store(tmp_store)
    assert len(res.migrated) == 3
    check([V] * 6)
    assert not [p for p in tmp.iterdir() if ".rewrite-" in p.name]


def test_a_listing_from_before_a_migrate_still_reads_the_rewritten_shards(
        tmp_store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A trainer or viewer lists the shards (v1), `traj migrate` then rewrites them as v3 under the
    # same names, then the reader opens them: each file must be converted by its own footer's
    # version, not the listing's (reading v3 log-probs as v1 raised IndexError or shifted values).
    want = write_big_v1_store(tmp_store, 1, 40)  # 1 shard, 2 rows: m0-0, m0-1
    store = open_store(tmp_store)
    (old,) = store.list_shards(strict=True)
    # One row per row group in the v1 shard (the rewrite makes one row group of both rows), so a
    # stale row-group layout would also send the id lookup to the wrong rows.
    table = trajectories_to_table(table_to_trajectories(read_trajectories(tmp_store)), version=1)
    store.rewrite_shard(old.path, table, row_group_target_mb=1e-6)
    (stale,) = store.list_shards(strict=True)
    assert (stale.schema_version, stale.num_row_groups) == (1, 2)
    conn = audit.connect(tmp_store)  # its views were built for a v1 shard
    query = "SELECT trajectory_id, span_index, logprobs FROM span_logprobs ORDER BY 1, 2"
    before = conn.sql(query).fetchall()
    assert len(before) == 4  # 2 trajectories x 2 action spans
    migrate_store(tmp_store)
    (fresh,) = open_store(tmp_store).list_shards(strict=True)
    assert (fresh.schema_version, fresh.num_row_groups) == (SCHEMA_VERSION, 1)

    after = conn.sql(query).fetchall()
    assert [r[:2] for r in after] == [r[:2] for r in before]
    for (_, _, a), (_, _, b) in zip(after, before):
        assert np.array_equal(np.asarray(a, np.float32).view(np.uint32), np.asarray(b, np.float32).view(np.uint32))
    _assert_same(read_shard(store, stale), want)
    batches = list(iter_shard_batches(store, stale, strict=True))
    assert [t for b in batches for t in b.trajectory_ids] == ["m0-0", "m0-1"]
    want_lp = want.column("action_logprobs").combine_chunks().values.to_numpy()
    assert np.array_equal(np.concatenate([b.logprobs for b in batches]).view(np.uint32), want_lp.view(np.uint32))
    monkeypatch.setattr(Store, "list_shards", lambda self, *a, **k: [stale])
    _assert_same(read_trajectories(tmp_store, strict=True), want)
    got = read_trajectories_by_id(tmp_store, ["m0-1"], strict=True)
    _assert_same(got, want.slice(1, 1))


def test_v1_and_v2_shards_migrate_to_v3_bit_for_bit(tmp_store: str, make_trajectory: Any) -> None:
    """The files themselves after `traj migrate`: v3 columns, the v2 log-prob list under its new
    name with the same float32 bits, tokens unchanged, schema_version 3 in every row and the split
    episode's id from metadata (v2-0: "ep", as the proxy wrote it)."""
    import pyarrow.parquet as pq

    from trajstore.schema import TRAJECTORY_SCHEMA

    rng = np.random.default_rng(3)
    v1 = [make_trajectory(rng, trajectory_id=f"v1-{i}", with_logprobs=i != 1) for i in range(3)]
    v2 = [make_trajectory(rng, trajectory_id=f"v2-{i}", with_logprobs=i != 1) for i in range(3)]
    v2[0].metadata["episode"] = {"id": "ep", "part": 1, "parts": 2, "change": None}
    store = open_store(tmp_store)
    store.write_table(trajectories_to_table(v1, version=1))
    store.write_table(trajectories_to_table(v2, version=2))
    before = [pq.read_table(s.path) for s in store.list_shards(strict=True)]
    assert [b.schema.metadata[b"trajstore.schema_version"] for b in before] == [b"1", b"2"]
    migrate_store(tmp_store)
    after = [pq.read_table(s.path) for s in open_store(tmp_store).list_shards(strict=True)]
    for old, new, trajs in zip(before, after, (v1, v2)):
        assert new.schema.equals(TRAJECTORY_SCHEMA, check_metadata=False)
        assert new.schema.metadata[b"trajstore.schema_version"] == str(SCHEMA_VERSION).encode()
        assert new.column("tokens").to_pylist() == old.column("tokens").to_pylist()
        assert new.column("schema_version").to_pylist() == [SCHEMA_VERSION] * 3
        lp = new.column("action_logprobs").combine_chunks()
        # the SDK's values at the action tokens, in token order (NaN where none): bit for bit
        want = np.concatenate([t.action_logprobs[[i for s in t.spans if s.kind == "action"
                                                  for i in range(s.start, s.end)]] for t in trajs])
        assert np.array_equal(lp.values.to_numpy().view(np.uint32), want.astype(np.float32).view(np.uint32))
        assert (new.column("parent_trajectory_id").null_count, new.column("fork_point").null_count,
                new.column("link_kind").null_count) == (3, 3, 3)
    old_v2 = before[1].column("logprobs").combine_chunks()
    assert np.array_equal(after[1].column("action_logprobs").combine_chunks().values.to_numpy().view(np.uint32),
                          old_v2.values.to_numpy().view(np.uint32))
    assert after[0].column("episode_id").to_pylist() == ["v1-0", "v1-1", "v1-2"]
    assert after[1].column("episode_id").to_pylist() == ["ep", "v2-1", "v2-2"]


def test_migrate_holds_the_maintenance_lock(tmp_store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compaction started while migrate rewrites shards in place waits for it (wait_s=0: is
    refused) instead of merging (and deleting) shards migrate listed; dry runs take no lock."""
    import trajstore.migrate as mig
    from trajstore.errors import StoreError
    from trajstore.maintenance.compact import compact_store

    want = write_big_v1_store(tmp_store, 3, 500)
    assert len(migrate_store(tmp_store, dry_run=True).migrated) == 3
    assert not os.path.exists(os.path.join(tmp_store, "_locks"))  # a dry run writes nothing
    refused: list[str] = []
    real_read = mig.read_shard

    def read_then_compact(store: Store, shard: Any, **kw: Any) -> pa.Table:
        if not refused:
            try:
                compact_store(store, min_age_s=0, keep_replaced_s=0, wait_s=0)
                refused.append("")
            except StoreError as e:
                refused.append(str(e))
        return real_read(store, shard, **kw)

    monkeypatch.setattr(mig, "read_shard", read_then_compact)
    res = migrate_store(tmp_store)
    monkeypatch.undo()
    assert refused and "maintenance" in refused[0]
    assert len(res.migrated) == 3
    assert [s.schema_version for s in open_store(tmp_store).list_shards(strict=True)] == [SCHEMA_VERSION] * 3
    _assert_same(read_trajectories(tmp_store, strict=True), want)
