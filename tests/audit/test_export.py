"""trajstore/audit/export.py: query results written as CSV, JSON lines, JSON and Parquet by
DuckDB's and Arrow's writers, batch by batch (expected text by hand); and `traj sql --output`."""

from __future__ import annotations

import io
import json
import math

import duckdb
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from trajstore.audit.export import write_result
from trajstore.cli.errors import EXIT_USAGE
from trajstore.cli.main import app

ROW = ("SELECT 1 AS i, 0.5::DOUBLE AS x, 'NaN'::DOUBLE AS n, [1.5, 'inf'::FLOAT] AS l, {'a': 2} AS s, "
       "'q\"uote, comma' AS t, NULL::INT AS z, true AS b, '\\xAB'::BLOB AS bl")


def _out(query: str, fmt: str, batch_rows: int = 10_000) -> bytes:
    sink = io.BytesIO()
    write_result(duckdb.connect().sql(query), fmt, sink, batch_rows=batch_rows)
    return sink.getvalue()


def test_csv() -> None:
    assert _out(ROW, "csv").decode() == (
        'i,x,n,l,s,t,z,b,bl\n'
        '1,0.5,,"[1.5,null]","{""a"":2}","q""uote, comma",,true,"AB"\n')


def test_jsonl_and_json_hold_the_same_objects() -> None:
    want = {"i": 1, "x": 0.5, "n": None, "l": [1.5, None], "s": {"a": 2}, "t": 'q"uote, comma', "z": None, "b": True,
            "bl": "AB"}
    lines = _out(f"{ROW} UNION ALL {ROW}", "jsonl", batch_rows=1).decode().splitlines()
    assert [json.loads(x) for x in lines] == [want, want]
    assert json.loads(_out(f"{ROW} UNION ALL {ROW}", "json", batch_rows=1)) == {"result": [want, want]}
    assert json.loads(_out("SELECT 1 AS a WHERE false", "json")) == {"result": []}
    assert _out("SELECT 1 AS a WHERE false", "jsonl") == b""
    assert _out("SELECT 1 AS a WHERE false", "csv") == b"a\n"


def test_parquet_keeps_types_and_nan() -> None:
    t = pq.read_table(io.BytesIO(_out("SELECT range AS i, 'NaN'::DOUBLE AS n, [range] AS l FROM range(5)", "parquet",
                                      batch_rows=2)))
    assert t.column("i").to_pylist() == [0, 1, 2, 3, 4] and math.isnan(t.column("n")[0].as_py())
    assert t.column("l").to_pylist()[4] == [4]


def test_a_failing_row_is_one_audit_error() -> None:
    from trajstore.audit import AuditError

    with pytest.raises(AuditError, match="query failed"):
        _out("SELECT CAST('x' || range AS INT) AS v FROM range(3)", "csv")


def test_traj_sql_output_file_formats(known_store, tmp_path) -> None:
    runner = CliRunner()
    q = "SELECT trajectory_id, reward FROM trajectories ORDER BY 1"
    for fmt in ("csv", "jsonl", "json", "parquet"):
        out = tmp_path / f"r.{fmt}"
        res = runner.invoke(app, ["sql", known_store.uri, q, "--format", fmt, "--output", str(out)])
        assert res.exit_code == 0, res.output
        assert "wrote 6 rows" in res.output
        if fmt == "parquet":
            assert pq.read_table(out).column("trajectory_id").to_pylist() == ["A", "B", "C", "D", "E", "F"]
        elif fmt == "csv":
            assert out.read_text().splitlines()[:2] == ["trajectory_id,reward", '"A",1']
        elif fmt == "jsonl":
            assert json.loads(out.read_text().splitlines()[3]) == {"trajectory_id": "D", "reward": None}
        else:
            assert len(json.loads(out.read_text())["result"]) == 6
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temp file left
    res = runner.invoke(app, ["sql", known_store.uri, q, "--output", str(tmp_path / "t.txt")])
    assert res.exit_code == EXIT_USAGE and "--output" in res.output
    # a failing query leaves no file behind
    res = runner.invoke(app, ["sql", known_store.uri, "SELECT CAST(trajectory_id AS INT) FROM trajectories",
                              "--format", "csv", "--output", str(tmp_path / "bad.csv")])
    assert res.exit_code == 1 and not (tmp_path / "bad.csv").exists()
