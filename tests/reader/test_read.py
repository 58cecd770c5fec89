"""trajstore/reader/read.py and the readers beside it: a store mixing schema-v1, v2 and v3 shards
reads as one (local and S3); every reader fills a nullable column an older shard lacks; a
scalar read of a v1 shard never decodes its spans."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from tests.helpers.trajectories import tiny_model_trajectory
from trajstore import audit, iter_batches, open_store, read_trajectories, read_trajectories_by_id, scan_trajectories
from trajstore.convert import trajectories_to_table
from trajstore.migrate import migrate_store
from trajstore.reader import summarize_store
from trajstore.schema import SCALAR_COLUMNS, SCHEMA_VERSION, TRAJECTORY_SCHEMA


def _v1_and_v2_store(uri: str, make_trajectory: Any, storage_options: dict[str, Any] | None = None
                     ) -> list[Any]:
    """Shards in arrival order: v1 (10 rows), v2 (10 rows), v3 (5 rows), v1 (the first 3 ids again:
    duplicates). v2-1 and v2-2 are parts of a split episode (metadata ``episode.id`` "ep-x", as
    the proxy wrote them), v2-3 names its episode as a plain string: episode_id "ep-x", "ep-x",
    "ep-s" after conversion, every other row its own id."""
    rng = np.random.default_rng(77)
    store = open_store(uri, storage_options=storage_options)
    first = [make_trajectory(rng, trajectory_id=f"v1-{i}", with_logprobs=i % 3 != 0, with_actions=i != 4)
             for i in range(10)]  # v1-4 has no action at all (empty log-prob list after conversion)
    second = [make_trajectory(rng, trajectory_id=f"v2-{i}", with_logprobs=i % 4 != 0) for i in range(10)]
    for i, ep in ((1, {"id": "ep-x", "part": 1, "parts": 2}), (2, {"id": "ep-x", "part": 2, "parts": 2}),
                  (3, "ep-s")):
        second[i].metadata["episode"] = ep
    third = [make_trajectory(rng, trajectory_id=f"v3-{i}") for i in range(5)]
    store.write_table(trajectories_to_table(first, version=1))
    store.write_table(trajectories_to_table(second, version=2))
    store.write_table(trajectories_to_table(third, version=3))  # spans without v4's logprob_mode
    dupes = [make_trajectory(rng, trajectory_id=f"v1-{i}") for i in range(3)]
    store.write_table(trajectories_to_table(dupes, version=1))
    assert [s.schema_version for s in store.list_shards(strict=True)] == [1, 2, 3, 1]
    return first + second + third


def _check_mixed(uri: str, expected: list[Any], storage_options: dict[str, Any] | None) -> None:
    want = trajectories_to_table(expected)  # the same rows written as the current version directly
    episodes = want.column("episode_id").to_pylist()
    assert episodes[11:14] == ["ep-x", "ep-x", "ep-s"] and episodes[:11] == [t.trajectory_id for t in expected[:11]]
    got = read_trajectories(uri, storage_options=storage_options, strict=True)
    assert got.schema.equals(TRAJECTORY_SCHEMA, check_metadata=False)
    assert got.column("trajectory_id").to_pylist() == [t.trajectory_id for t in expected]
    for name in TRAJECTORY_SCHEMA.names:
        if name == "action_logprobs":  # compare bits (NaN != NaN as floats)
            a = got.column(name).combine_chunks()
            b = want.column(name).combine_chunks()
            assert a.offsets.to_pylist() == b.offsets.to_pylist()
            assert np.array_equal(a.values.to_numpy().view(np.uint32), b.values.to_numpy().view(np.uint32))
        else:
            assert got.column(name).to_pylist() == want.column(name).to_pylist(), name

    lazy = scan_trajectories(uri, storage_options=storage_options, strict=True).collect()
    assert lazy["trajectory_id"].to_list() == [t.trajectory_id for t in expected]
    assert lazy["num_missing_logprobs"].to_list() == want.column("num_missing_logprobs").to_pylist()
    lz = lazy.to_arrow().column("action_logprobs").combine_chunks()
    assert np.array_equal(lz.values.to_numpy().view(np.uint32),
                          want.column("action_logprobs").combine_chunks().values.to_numpy().view(np.uint32))
    assert lazy["spans"].to_list() == want.column("spans").to_pylist()
    for name in ("schema_version", "episode_id", "parent_trajectory_id", "fork_point", "link_kind"):
        assert lazy[name].to_list() == want.column(name).to_pylist(), name
    # Scalars only: never needs the per-token columns.
    assert scan_trajectories(uri, storage_options=storage_options).select("trajectory_id").collect().height == 25

    ids, lps = [], []
    for b in iter_batches(uri, storage_options=storage_options, strict=True):
        ids += list(b.trajectory_ids)
        lps.append(b.logprobs)
    assert ids == [t.trajectory_id for t in expected]
    assert np.array_equal(np.concatenate(lps).view(np.uint32),
                          want.column("action_logprobs").combine_chunks().values.to_numpy().view(np.uint32))

    # traj info: 28 rows in 4 shards, the 3 later copies of v1-0..v1-2 dropped
    summary = summarize_store(uri, storage_options=storage_options)
    assert (summary.trajectories, summary.duplicates_dropped, summary.shards) == (25, 3, 4)
    # a viewer's fetch: the first copy (shard 1, v1) of v1-2, then v2-5; absent ids are absent
    got = read_trajectories_by_id(uri, ["v2-5", "v1-2", "nope"], storage_options=storage_options, strict=True)
    assert got.column("trajectory_id").to_pylist() == ["v1-2", "v2-5"]
    pick = want.take(pa.array([2, 15]))  # rows of v1-2 and v2-5 in `expected` order
    for name in TRAJECTORY_SCHEMA.names:
        if name == "action_logprobs":
            assert np.array_equal(got.column(name).combine_chunks().values.to_numpy().view(np.uint32),
                                  pick.column(name).combine_chunks().values.to_numpy().view(np.uint32))
        else:
            assert got.column(name).to_pylist() == pick.column(name).to_pylist(), name

    conn = audit.connect(open_store(uri, storage_options=storage_options))
    ((n, miss),) = conn.sql("SELECT count(*), sum(num_missing_logprobs) FROM trajectories").fetchall()
    assert (n, miss) == (25, sum(want.column("num_missing_logprobs").to_pylist()))
    # spans of v1 to v3 shards have v4's logprob_mode, null (not recorded)
    assert conn.sql("SELECT count(*), count(logprob_mode) FROM spans").fetchall() == [
        (sum(len(t.spans) for t in expected), 0)]
    lineage = ["trajectory_id", "schema_version", "episode_id", "parent_trajectory_id", "fork_point", "link_kind"]
    assert conn.sql(f"SELECT {', '.join(lineage)} FROM trajectories ORDER BY trajectory_id").fetchall() == sorted(
        tuple(r.values()) for r in want.select(lineage).to_pylist())
    # span_logprobs: every action span's slice equals the SDK's values at its tokens.
    by_id = {t.trajectory_id: t for t in expected}
    rows = conn.sql("SELECT trajectory_id, span_index, start, \"end\", logprobs FROM span_logprobs").fetchall()
    assert len(rows) == sum(1 for t in expected for s in t.spans if s.kind == "action")
    for tid, k, start, end, vals in rows:
        t = by_id[tid]
        assert (t.spans[k].kind, t.spans[k].start, t.spans[k].end) == ("action", start, end)
        assert np.array_equal(np.asarray(vals, np.float32).view(np.uint32), t.action_logprobs[start:end].view(np.uint32))
    sp = conn.sql("SELECT trajectory_id, span_index, logprob_start, num_missing_logprobs FROM spans "
                  "WHERE kind = 'action' ORDER BY trajectory_id, span_index").fetchall()
    want_sp = sorted((r["trajectory_id"], i, s["logprob_start"], s["num_missing_logprobs"])
                     for r in want.select(["trajectory_id", "spans"]).to_pylist()
                     for i, s in enumerate(r["spans"]) if s["kind"] == "action")
    assert sorted(sp) == want_sp


def _migrate_and_check(uri: str, expected: list[Any], storage_options: dict[str, Any] | None) -> None:
    """After `traj migrate` every shard is of the current version, under its old name, and reads exactly as before."""
    store = open_store(uri, storage_options=storage_options)
    names = [s.name for s in store.list_shards(strict=True)]
    res = migrate_store(store)
    assert (len(res.migrated), res.already_current, res.rows) == (4, 0, 28)  # v1, v2, v3, v1: 10 + 10 + 5 + 3 rows
    shards = open_store(uri, storage_options=storage_options).list_shards(strict=True)
    assert [s.name for s in shards] == names and [s.schema_version for s in shards] == [SCHEMA_VERSION] * 4
    _check_mixed(uri, expected, storage_options)


def _drop_columns_shard(uri: str, trajs: list[Any], drop: list[str]) -> None:
    """A shard as an older writer would have made it: the nullable columns `drop` absent."""
    t = trajectories_to_table(trajs)
    open_store(uri).write_table(t.drop_columns(drop))


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


def test_scalar_read_of_a_v1_shard_does_not_decode_spans(tmp_store: str, make_trajectory: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.parquet as pq


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
    assert asked and all(c is not None and "spans" not in c and "logprobs" not in c and "action_logprobs" not in c for c in asked), asked
    # s1 has no log-probs (logprob_source none): every action token missing; the others none missing
    want = trajectories_to_table(trajs)
    assert got.column("num_missing_logprobs").to_pylist() == want.column("num_missing_logprobs").to_pylist()
    assert got.column("num_missing_logprobs").to_pylist()[1] == want.column("num_action_tokens").to_pylist()[1]


def test_every_reader_fills_missing_nullable_columns_with_nulls(tmp_path: Path) -> None:
    """Older schema versions: shards of an older schema that lack `group_id` and `metadata` crashed
    `scan_trajectories(...).collect()` (and `traj train`), while `read_trajectories` read them."""


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
