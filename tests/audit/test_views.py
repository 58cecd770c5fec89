"""The DuckDB views: dedupe as the reader does, scalar-only trajectories, one row per span,
run records, pivoted step metrics, corrupt shards skipped, empty stores."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pytest

from trajstore import audit, read_trajectories
from trajstore.convert import trajectories_to_table
from trajstore.schema import SCALAR_COLUMNS
from trajstore.store import CorruptShardWarning, open_store

from tests.helpers.trajectories import hand_built_pair


def rows(rel: Any) -> list[dict[str, Any]]:
    return [dict(zip(rel.columns, r)) for r in rel.fetchall()]


def test_trajectories_view_dedupes_first_copy_and_has_only_scalars(known_store):
    conn = audit.connect(known_store)
    rel = conn.sql("SELECT * FROM trajectories ORDER BY trajectory_id")
    assert "tokens" not in rel.columns and "logprobs" not in rel.columns and "spans" not in rel.columns
    assert set(SCALAR_COLUMNS) <= set(rel.columns)
    got = rows(rel)
    assert [r["trajectory_id"] for r in got] == list("ABCDEF")
    b = got[1]
    # The first copy of B (shard 1) has version 6 and reward 0.0; the later copy (v1, 9.0) is dropped.
    assert (b["max_policy_version"], b["reward"], b["status"]) == (6, 0.0, "truncated")
    # Same answer as the reader.
    ref = read_trajectories(known_store, columns=["reward"]).to_pydict()
    assert dict(zip(ref["trajectory_id"], ref["reward"])) == {r["trajectory_id"]: r["reward"] for r in got}


def test_spans_view_one_row_per_span(known_store):
    conn = audit.connect(known_store)
    a = rows(conn.sql("SELECT span_index, kind, start, \"end\", num_tokens, policy_version, source "
                      "FROM spans WHERE trajectory_id = 'A' ORDER BY span_index"))
    # A: prompt 2, action 3 (v5), observation 2, action 1 (v7): offsets 0-2, 2-5, 5-7, 7-8.
    assert [(r["span_index"], r["kind"], r["start"], r["end"], r["num_tokens"], r["policy_version"]) for r in a] == [
        (0, "prompt", 0, 2, 2, None), (1, "action", 2, 5, 3, 5), (2, "observation", 5, 7, 2, None),
        (3, "action", 7, 8, 1, 7)]
    assert {r["source"] for r in a} == {"sdk"}
    # 4 + 2 + 4 + 3 + 2 + 3 spans over the six kept trajectories (B's copy not counted).
    assert conn.execute("SELECT count(*) FROM spans").fetchall()[0][0] == 18


def test_run_views_and_step_metrics(known_store):
    conn = audit.connect(known_store)
    assert rows(conn.sql("SELECT run_id, count(*) AS n FROM consumed GROUP BY run_id ORDER BY run_id")) == [
        {"run_id": "r1", "n": 3}, {"run_id": "r2", "n": 1}]
    sm = rows(conn.sql('SELECT run_id, step, trainer_version, "policy/loss", "ratio/masked_below" '
                       "FROM step_metrics ORDER BY step"))
    assert sm == [
        {"run_id": "r1", "step": 0, "trainer_version": 8, "policy/loss": 0.5, "ratio/masked_below": 0.1},
        {"run_id": "r1", "step": 1, "trainer_version": 9, "policy/loss": 0.4, "ratio/masked_below": None},
    ]


def test_corrupt_shard_is_skipped_with_a_warning(known_store):
    bad = known_store.path("trajectories", "00000000000000000001-bad.parquet")
    with open(bad, "wb") as fh:
        fh.write(b"not parquet at all")
    with pytest.warns(CorruptShardWarning, match="00000000000000000001-bad.parquet"):
        conn = audit.connect(known_store)
    assert conn.execute("SELECT count(*) FROM trajectories").fetchall()[0][0] == 6


def test_empty_store_has_typed_empty_views(tmp_store):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        conn = audit.connect(open_store(tmp_store))
    for view in audit.VIEW_NAMES:
        assert conn.execute(f"SELECT count(*) FROM {view}").fetchall()[0][0] == 0
    assert "policy_version" in conn.sql("SELECT * FROM spans").columns
    rep = audit.staleness_report(conn)
    assert rows(rep.by_run) == [] and rows(rep.unconsumed) == []


NAN = math.nan


def test_span_logprobs_view_by_hand(tmp_store: str) -> None:
    open_store(tmp_store).write_table(trajectories_to_table(hand_built_pair()))
    conn = audit.connect(tmp_store)
    got = conn.sql("SELECT trajectory_id, span_index, num_tokens, policy_version, num_missing_logprobs, logprobs "
                   "FROM span_logprobs ORDER BY trajectory_id, span_index").fetchall()
    assert [r[:5] for r in got] == [("h1", 1, 3, 2, 1), ("h1", 3, 1, 3, 0), ("h2", 1, 2, None, 2)]
    np.testing.assert_array_equal(np.asarray(got[0][5], np.float32), np.array([-0.5, NAN, -0.25], np.float32))
    assert got[1][5] == [-1.0]
    assert all(math.isnan(x) for x in got[2][5]) and len(got[2][5]) == 2
