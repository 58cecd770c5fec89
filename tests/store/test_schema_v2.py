"""Schema v2: action-aligned log-probs, missing engine log-probs as NaN counted per span, v1 shards
converted on read (a store holding both reads as one, local and S3), and every reader filling a
nullable column that an older shard lacks.

Expected values are written out by hand from the inputs (arithmetic in comments)."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from trajstore import (
    TrajectoryBuilder,
    audit,
    iter_batches,
    open_store,
    read_trajectories,
    read_trajectories_by_id,
    scan_trajectories,
)
from trajstore.convert import trajectories_to_table
from trajstore.migrate import migrate_store
from trajstore.reader import summarize_store
from trajstore.schema import TRAJECTORY_SCHEMA

NAN = math.nan


def _hand_built() -> list[Any]:
    """Two trajectories with known layouts.

    h1: prompt [1, 2], action [3, 4, 5] lps [-0.5, NaN, -0.25] (v2; one token without an engine
        log-prob), observation [6], action [7] lp [-1.0] (v3).
        Action tokens: 3 + 1 = 4; v2 logprobs = [-0.5, NaN, -0.25, -1.0]; missing = 1;
        span logprob_start: action 1 -> 0, action 2 -> 3.
    h2: prompt [9], action [10, 11] without log-probs (logprob_source none, no version).
        v2 logprobs = [NaN, NaN]; missing = 2.
    """
    b = TrajectoryBuilder(trajectory_id="h1", group_id="g")
    b.add_prompt([1, 2])
    b.add_action([3, 4, 5], [-0.5, None, -0.25], policy_version=2)
    b.add_observation([6])
    b.add_action([7], [-1.0], policy_version=3)
    b.set_reward(1.0)
    h1 = b.finish()
    b = TrajectoryBuilder(trajectory_id="h2")
    b.add_prompt([9])
    b.add_action([10, 11], None, policy_version=None)
    h2 = b.finish()
    return [h1, h2]


def test_v2_layout_by_hand(tmp_store: str) -> None:
    h1, h2 = _hand_built()
    open_store(tmp_store).write_table(trajectories_to_table([h1, h2]))
    t = read_trajectories(tmp_store, strict=True)
    assert t.schema.field("logprobs").type == pa.large_list(pa.field("item", pa.float32(), nullable=False))
    lp = t.column("logprobs").combine_chunks()
    assert lp.values.null_count == 0
    got = [np.asarray(x, np.float32) for x in lp.to_pylist()]
    np.testing.assert_array_equal(got[0], np.array([-0.5, NAN, -0.25, -1.0], np.float32))
    np.testing.assert_array_equal(got[1], np.array([NAN, NAN], np.float32))
    assert t.column("num_missing_logprobs").to_pylist() == [1, 2]
    assert t.column("logprob_source").to_pylist() == ["engine", "none"]
    spans = t.column("spans").to_pylist()
    assert [(s["kind"], s["logprob_start"], s["num_missing_logprobs"]) for s in spans[0]] == [
        ("prompt", None, None), ("action", 0, 1), ("observation", None, None), ("action", 3, 0)]
    assert [(s["kind"], s["logprob_start"], s["num_missing_logprobs"]) for s in spans[1]] == [
        ("prompt", None, None), ("action", 0, 2)]

    (batch,) = list(iter_batches(tmp_store, strict=True))
    assert batch.logprob_offsets.tolist() == [0, 4, 6]
    assert batch.logprob_valid.tolist() == [True, False, True, True, False, False]
    # flat token positions of action tokens: h1 tokens 0..6 -> actions at 2,3,4 and 6; h2 starts at 7 -> 8, 9
    assert batch.action_positions().tolist() == [2, 3, 4, 6, 8, 9]
    full = batch.logprobs_full()
    np.testing.assert_array_equal(
        full, np.array([NAN, NAN, -0.5, NAN, -0.25, NAN, -1.0, NAN, NAN, NAN], np.float32))


def test_engine_action_token_without_logprob_is_stored_as_missing_not_refused() -> None:
    # Item 5 of the ingest issue: a token whose engine gave no log-prob is kept, marked, counted.
    h1, _ = _hand_built()
    assert h1.logprob_source == "engine"
    assert np.isnan(h1.logprobs[3]) and h1.logprobs[2] == np.float32(-0.5)


def _v1_and_v2_store(uri: str, make_trajectory: Any, storage_options: dict[str, Any] | None = None
                     ) -> list[Any]:
    """Shards in arrival order: v1 (10 rows), v2 (10 rows), v1 (the first 3 ids again: duplicates)."""
    rng = np.random.default_rng(77)
    store = open_store(uri, storage_options=storage_options)
    first = [make_trajectory(rng, trajectory_id=f"v1-{i}", with_logprobs=i % 3 != 0, with_actions=i != 4)
             for i in range(10)]  # v1-4 has no action at all (empty log-prob list after conversion)
    second = [make_trajectory(rng, trajectory_id=f"v2-{i}", with_logprobs=i % 4 != 0) for i in range(10)]
    store.write_table(trajectories_to_table(first, version=1))
    store.write_table(trajectories_to_table(second))
    dupes = [make_trajectory(rng, trajectory_id=f"v1-{i}") for i in range(3)]
    store.write_table(trajectories_to_table(dupes, version=1))
    assert [s.schema_version for s in store.list_shards(strict=True)] == [1, 2, 1]
    return first + second


def _check_mixed(uri: str, expected: list[Any], storage_options: dict[str, Any] | None) -> None:
    want = trajectories_to_table(expected)  # the same rows written as v2 directly
    got = read_trajectories(uri, storage_options=storage_options, strict=True)
    assert got.schema.equals(TRAJECTORY_SCHEMA, check_metadata=False)
    assert got.column("trajectory_id").to_pylist() == [t.trajectory_id for t in expected]
    for name in TRAJECTORY_SCHEMA.names:
        if name == "logprobs":  # compare bits (NaN != NaN as floats)
            a = got.column(name).combine_chunks()
            b = want.column(name).combine_chunks()
            assert a.offsets.to_pylist() == b.offsets.to_pylist()
            assert np.array_equal(a.values.to_numpy().view(np.uint32), b.values.to_numpy().view(np.uint32))
        else:
            assert got.column(name).to_pylist() == want.column(name).to_pylist(), name

    lazy = scan_trajectories(uri, storage_options=storage_options, strict=True).collect()
    assert lazy["trajectory_id"].to_list() == [t.trajectory_id for t in expected]
    assert lazy["num_missing_logprobs"].to_list() == want.column("num_missing_logprobs").to_pylist()
    lz = lazy.to_arrow().column("logprobs").combine_chunks()
    assert np.array_equal(lz.values.to_numpy().view(np.uint32),
                          want.column("logprobs").combine_chunks().values.to_numpy().view(np.uint32))
    assert lazy["spans"].to_list() == want.column("spans").to_pylist()
    # Scalars only: never needs the per-token columns.
    assert scan_trajectories(uri, storage_options=storage_options).select("trajectory_id").collect().height == 20

    ids, lps = [], []
    for b in iter_batches(uri, storage_options=storage_options, strict=True):
        ids += list(b.trajectory_ids)
        lps.append(b.logprobs)
    assert ids == [t.trajectory_id for t in expected]
    assert np.array_equal(np.concatenate(lps).view(np.uint32),
                          want.column("logprobs").combine_chunks().values.to_numpy().view(np.uint32))

    # traj info: 23 rows in 3 shards, the 3 later copies of v1-0..v1-2 dropped
    summary = summarize_store(uri, storage_options=storage_options)
    assert (summary.trajectories, summary.duplicates_dropped, summary.shards) == (20, 3, 3)
    # a viewer's fetch: the first copy (shard 1, v1) of v1-2, then v2-5; absent ids are absent
    got = read_trajectories_by_id(uri, ["v2-5", "v1-2", "nope"], storage_options=storage_options, strict=True)
    assert got.column("trajectory_id").to_pylist() == ["v1-2", "v2-5"]
    pick = want.take(pa.array([2, 15]))  # rows of v1-2 and v2-5 in `expected` order
    for name in TRAJECTORY_SCHEMA.names:
        if name == "logprobs":
            assert np.array_equal(got.column(name).combine_chunks().values.to_numpy().view(np.uint32),
                                  pick.column(name).combine_chunks().values.to_numpy().view(np.uint32))
        else:
            assert got.column(name).to_pylist() == pick.column(name).to_pylist(), name

    conn = audit.connect(open_store(uri, storage_options=storage_options))
    ((n, miss),) = conn.sql("SELECT count(*), sum(num_missing_logprobs) FROM trajectories").fetchall()
    assert (n, miss) == (20, sum(want.column("num_missing_logprobs").to_pylist()))
    # span_logprobs: every action span's slice equals the SDK's values at its tokens.
    by_id = {t.trajectory_id: t for t in expected}
    rows = conn.sql("SELECT trajectory_id, span_index, start, \"end\", logprobs FROM span_logprobs").fetchall()
    assert len(rows) == sum(1 for t in expected for s in t.spans if s.kind == "action")
    for tid, k, start, end, vals in rows:
        t = by_id[tid]
        assert (t.spans[k].kind, t.spans[k].start, t.spans[k].end) == ("action", start, end)
        assert np.array_equal(np.asarray(vals, np.float32).view(np.uint32), t.logprobs[start:end].view(np.uint32))
    sp = conn.sql("SELECT trajectory_id, span_index, logprob_start, num_missing_logprobs FROM spans "
                  "WHERE kind = 'action' ORDER BY trajectory_id, span_index").fetchall()
    want_sp = sorted((r["trajectory_id"], i, s["logprob_start"], s["num_missing_logprobs"])
                     for r in want.select(["trajectory_id", "spans"]).to_pylist()
                     for i, s in enumerate(r["spans"]) if s["kind"] == "action")
    assert sorted(sp) == want_sp


def _migrate_and_check(uri: str, expected: list[Any], storage_options: dict[str, Any] | None) -> None:
    """After `traj migrate` every shard is v2, under its old name, and reads exactly as before."""
    store = open_store(uri, storage_options=storage_options)
    names = [s.name for s in store.list_shards(strict=True)]
    res = migrate_store(store)
    assert (len(res.migrated), res.already_current, res.rows) == (2, 1, 13)  # v1 shards: 10 + 3 rows
    shards = open_store(uri, storage_options=storage_options).list_shards(strict=True)
    assert [s.name for s in shards] == names and [s.schema_version for s in shards] == [2, 2, 2]
    _check_mixed(uri, expected, storage_options)


def test_store_with_v1_and_v2_shards_reads_as_one_local(tmp_store: str, make_trajectory: Any) -> None:
    expected = _v1_and_v2_store(tmp_store, make_trajectory)
    _check_mixed(tmp_store, expected, None)
    _migrate_and_check(tmp_store, expected, None)


@pytest.mark.s3
def test_store_with_v1_and_v2_shards_reads_as_one_s3(s3_store_uri: tuple[str, dict[str, Any]],
                                                     make_trajectory: Any) -> None:
    uri, opts = s3_store_uri
    expected = _v1_and_v2_store(uri, make_trajectory, opts)
    _check_mixed(uri, expected, opts)
    _migrate_and_check(uri, expected, opts)  # a rewrite on S3 is one PUT to the same key


def test_span_logprobs_view_by_hand(tmp_store: str) -> None:
    open_store(tmp_store).write_table(trajectories_to_table(_hand_built()))
    conn = audit.connect(tmp_store)
    got = conn.sql("SELECT trajectory_id, span_index, num_tokens, policy_version, num_missing_logprobs, logprobs "
                   "FROM span_logprobs ORDER BY trajectory_id, span_index").fetchall()
    assert [r[:5] for r in got] == [("h1", 1, 3, 2, 1), ("h1", 3, 1, 3, 0), ("h2", 1, 2, None, 2)]
    np.testing.assert_array_equal(np.asarray(got[0][5], np.float32), np.array([-0.5, NAN, -0.25], np.float32))
    assert got[1][5] == [-1.0]
    assert all(math.isnan(x) for x in got[2][5]) and len(got[2][5]) == 2


def _drop_columns_shard(uri: str, trajs: list[Any], drop: list[str]) -> None:
    """A shard as an older writer would have made it: the nullable columns `drop` absent."""
    t = trajectories_to_table(trajs)
    open_store(uri).write_table(t.drop_columns(drop))


def test_every_reader_fills_a_missing_nullable_column(tmp_store: str, make_trajectory: Any) -> None:
    rng = np.random.default_rng(8)
    old = [make_trajectory(rng, trajectory_id=f"old-{i}", group_id="gx") for i in range(3)]
    new = [make_trajectory(rng, trajectory_id=f"new-{i}", group_id="gy") for i in range(2)]
    _drop_columns_shard(tmp_store, old, ["group_id", "metadata"])
    open_store(tmp_store).write_table(trajectories_to_table(new))
    want_group = [None, None, None, "gy", "gy"]  # the old shard has no group_id column: null, not an error

    t = read_trajectories(tmp_store, strict=True)
    assert t.column("group_id").to_pylist() == want_group
    assert t.column("metadata").to_pylist()[:3] == [None, None, None]

    lazy = scan_trajectories(tmp_store, strict=True).collect()
    assert lazy["group_id"].to_list() == want_group
    assert lazy["metadata"].to_list()[:3] == [None, None, None]
    assert scan_trajectories(tmp_store).select("group_id").collect()["group_id"].to_list() == want_group

    groups = []
    for b in iter_batches(tmp_store, strict=True):
        groups += b.table.column("group_id").to_pylist()
    assert groups == want_group

    conn = audit.connect(tmp_store)
    assert [r[0] for r in conn.sql("SELECT group_id FROM trajectories ORDER BY shard, trajectory_id").fetchall()] \
        == [None, None, None, "gy", "gy"]


def test_every_reader_fills_a_column_missing_from_every_shard(tmp_store: str, make_trajectory: Any) -> None:
    rng = np.random.default_rng(9)
    _drop_columns_shard(tmp_store, [make_trajectory(rng, trajectory_id="o1")], ["group_id"])
    assert read_trajectories(tmp_store).column("group_id").to_pylist() == [None]
    assert scan_trajectories(tmp_store).collect()["group_id"].to_list() == [None]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        conn = audit.connect(tmp_store)
    assert conn.sql("SELECT group_id FROM trajectories").fetchall() == [(None,)]


def test_read_by_id_first_copy_arrival_order_and_only_the_row_groups_needed(
        tmp_store: str, make_trajectory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.parquet as pq

    from trajstore import read_trajectories_by_id

    rng = np.random.default_rng(21)
    store = open_store(tmp_store)
    a = [make_trajectory(rng, trajectory_id=f"a{i}", max_span_tokens=200) for i in range(40)]
    store.write_table(trajectories_to_table(a, version=1), row_group_target_mb=0.02)  # a v1 shard
    b = [make_trajectory(rng, trajectory_id=f"b{i}", max_span_tokens=200) for i in range(40)]
    b[5] = make_trajectory(rng, trajectory_id="a7")  # a later copy of a7: the first copy (shard 1) wins
    store.write_table(trajectories_to_table(b), row_group_target_mb=0.02)
    reads: list[int] = []
    real = pq.ParquetFile.read_row_group

    def counting(self: pq.ParquetFile, i: int, *args: Any, **kw: Any) -> pa.Table:
        reads.append(i)
        return real(self, i, *args, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", counting)
    got = read_trajectories_by_id(tmp_store, ["b30", "a7", "nope", "a3"], strict=True)
    # arrival order: shard 1 rows a3, a7, then shard 2 row b30; "nope" is absent
    assert got.column("trajectory_id").to_pylist() == ["a3", "a7", "b30"]
    want = trajectories_to_table([a[3], a[7], b[30]])
    for name in ("tokens", "spans", "num_missing_logprobs", "reward"):
        assert got.column(name).to_pylist() == want.column(name).to_pylist(), name
    assert np.array_equal(got.column("logprobs").combine_chunks().values.to_numpy().view(np.uint32),
                          want.column("logprobs").combine_chunks().values.to_numpy().view(np.uint32))
    n_rg = sum(pq.read_metadata(s.path).num_row_groups for s in store.list_shards())
    assert n_rg >= 10 and 1 <= len(reads) <= 3  # at most one row group per wanted row, not the store
    assert read_trajectories_by_id(tmp_store, ["b1"], columns=["reward"]).column_names == ["trajectory_id", "reward"]


def test_read_by_id_uses_the_footer_index_and_falls_back_without_it(
        tmp_store: str, make_trajectory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.parquet as pq

    from trajstore import read_trajectories_by_id
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


def test_scalar_read_of_a_v1_shard_does_not_decode_spans(tmp_store: str, make_trajectory: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.parquet as pq

    from trajstore.schema import SCALAR_COLUMNS

    rng = np.random.default_rng(31)
    trajs = [make_trajectory(rng, trajectory_id=f"s{i}", with_logprobs=i != 1) for i in range(3)]
    open_store(tmp_store).write_table(trajectories_to_table(trajs, version=1))
    asked: list[Any] = []
    real = pq.ParquetFile.read

    def recording(self: pq.ParquetFile, columns: Any = None, *a: Any, **k: Any) -> pa.Table:
        asked.append(columns)
        return real(self, columns, *a, **k)

    monkeypatch.setattr(pq.ParquetFile, "read", recording)
    got = read_trajectories(tmp_store, columns=list(SCALAR_COLUMNS), strict=True)
    assert asked and all(c is not None and "spans" not in c and "logprobs" not in c for c in asked), asked
    # s1 has no log-probs (logprob_source none): every action token missing; the others none missing
    want = trajectories_to_table(trajs)
    assert got.column("num_missing_logprobs").to_pylist() == want.column("num_missing_logprobs").to_pylist()
    assert got.column("num_missing_logprobs").to_pylist()[1] == want.column("num_action_tokens").to_pylist()[1]
