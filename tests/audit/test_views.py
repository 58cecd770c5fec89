"""trajstore/audit/views.py: the DuckDB views: dedupe as the reader does, scalar-only
trajectories, one row per span, run records, pivoted step metrics, corrupt shards skipped, empty
stores; the connection (``traj sql``) cannot write to the store or read outside it."""

from __future__ import annotations

import math
import os
import warnings

import duckdb
import numpy as np
import pytest
from typer.testing import CliRunner

from tests.helpers.relations import rows
from tests.helpers.trajectories import hand_built_pair
from trajstore import audit, read_trajectories
from trajstore.cli.main import app
from trajstore.convert import trajectories_to_table
from trajstore.schema import SCALAR_COLUMNS
from trajstore.store import CorruptShardWarning, open_store


def test_trajectories_view_dedupes_first_copy_and_has_only_scalars(known_store):
    conn = audit.connect(known_store)
    rel = conn.sql("SELECT * FROM trajectories ORDER BY trajectory_id")
    assert "tokens" not in rel.columns and "action_logprobs" not in rel.columns and "spans" not in rel.columns
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


def _listing(root: str) -> list[tuple[str, int, float]]:
    out = []
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            st = os.stat(p)
            out.append((p, st.st_size, st.st_mtime))
    return sorted(out)


@pytest.mark.parametrize("statement", [
    "COPY (SELECT * FROM trajectories) TO '{root}/trajectories/evil.parquet' (FORMAT parquet)",
    "COPY (SELECT 1 AS a) TO '{shard}' (FORMAT parquet, USE_TMP_FILE false)",
    "CREATE TABLE t AS SELECT * FROM trajectories",
    "INSERT INTO consumed SELECT * FROM consumed",
    "ATTACH '{root}/x.duckdb' AS x",
    "SET enable_external_access = true",
    "PRAGMA enable_profiling",
    "EXPLAIN ANALYZE COPY (SELECT 1) TO '{root}/y.csv'",
])
def test_sql_refuses_writes_and_leaves_store_untouched(known_store, statement):
    conn = audit.connect(known_store)
    shard = known_store.list_shards()[0].path
    before = _listing(known_store.root)  # after the listing (which may add the shard index): the SQL writes nothing
    with pytest.raises(audit.AuditError, match="read-only: refusing"):
        audit.sql(conn, statement.format(root=known_store.root, shard=shard))
    assert _listing(known_store.root) == before
    assert conn.execute("SELECT count(*) FROM trajectories").fetchall()[0][0] == 6


def test_sql_runs_selects_and_names_errors(known_store):
    conn = audit.connect(known_store)
    got = audit.sql(conn, "WITH k AS (SELECT kind, sum(num_tokens) AS n FROM spans GROUP BY kind) "
                          "SELECT * FROM k ORDER BY kind").fetchall()
    # prompt 2+1+1+2+3+1 = 10; action 20; observation 2+3+2 = 7.
    assert got == [("action", 20), ("observation", 7), ("prompt", 10)]
    with pytest.raises(audit.AuditError, match="exactly one"):
        audit.sql(conn, "SELECT 1; SELECT 2")
    with pytest.raises(audit.AuditError, match="nope"):
        audit.sql(conn, "SELECT nope FROM trajectories")


def test_connection_file_access_is_limited_to_the_shards(known_store, tmp_path):
    conn = audit.connect(known_store)
    outside = tmp_path / "outside.csv"
    outside.write_text("a\n1\n")
    with pytest.raises(audit.AuditError, match="disabled by configuration"):
        audit.sql(conn, f"SELECT * FROM read_csv('{outside}')")
    # Even bypassing `sql`, DuckDB refuses to create files and to unlock its configuration.
    with pytest.raises(duckdb.Error, match="disabled by configuration"):
        conn.execute(f"COPY (SELECT 1) TO '{known_store.root}/new.csv'")
    with pytest.raises(duckdb.Error, match="locked"):
        conn.execute("SET enable_external_access = true")
    assert not os.path.exists(f"{known_store.root}/new.csv")


runner = CliRunner()


# adversarial input: a hole found attacking `traj sql`, `traj info` and `traj stats` (failed before its fix)
@pytest.mark.parametrize("query", [
    "SELECT * FROM read_text('.tmp/notes.txt')",
    "SELECT * FROM glob('.tmp/*')",
    "SELECT * FROM read_csv('.tmp/notes.txt')",
])
def test_sql_cannot_read_the_working_directory_tmp(known_store, tmp_path, monkeypatch, query):
    # DuckDB's default temp directory is `.tmp` under the working directory, and it is on the
    # allowed list even with external access disabled.
    work = tmp_path / "cwd"
    (work / ".tmp").mkdir(parents=True)
    (work / ".tmp" / "notes.txt").write_text("secret\n")
    monkeypatch.chdir(work)
    conn = audit.connect(known_store)
    try:
        rows = audit.sql(conn, query).fetchall()
    except audit.AuditError as e:
        assert "secret" not in str(e)
    else:
        assert not any("secret" in str(r) or "notes" in str(r) for r in rows), rows


# adversarial input: a hole found attacking `traj sql`, `traj info` and `traj stats` (failed before its fix)
def test_duckdb_errors_are_one_line(known_store):
    conn = audit.connect(known_store)
    for query in ("SELECT nope FROM trajectories", "SELECT * FROM trajectories WHERE", "SELEC 1"):
        with pytest.raises(audit.AuditError) as ei:
            audit.sql(conn, query)
        assert "\n" not in str(ei.value), str(ei.value)
    # An error raised while rows are fetched (a failed cast), through the CLI.
    res = runner.invoke(app, ["sql", known_store.uri, "SELECT CAST(source AS INTEGER) FROM trajectories"])
    assert res.exit_code == 1
    assert res.output.startswith("error: ") and res.output.count("\n") == 1, res.output


def test_no_progress_bar_in_the_output(known_store):
    # fleet scale: at a million trajectories DuckDB drew its progress bar on stdout, inside
    # `traj stats --format json`, for queries past 2 s
    conn = audit.connect(known_store)
    assert conn.execute("SELECT current_setting('enable_progress_bar')").fetchall() == [(False,)]
