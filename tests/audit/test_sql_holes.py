"""Holes found by attacking `traj sql`, `traj info` and `traj stats` (issue 11, "Why"): each test
failed before its fix. DuckDB's temp directory readable from SQL, whole results held in memory,
multi-line DuckDB errors, corrupt-shard warnings printed twice with source lines, and `--plot`
naming a file it did not write."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from trajstore import audit
from trajstore.cli.main import app

runner = CliRunner()


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


def _no_fetchall(monkeypatch):
    """Make any whole-result fetch fail: streaming must go batch by batch."""
    def refuse(*a, **k):
        raise AssertionError("the whole result was fetched at once")
    for name in ("fetchall", "fetchdf", "fetchnumpy", "fetch_arrow_table", "arrow", "to_arrow_table"):
        monkeypatch.setattr(duckdb.DuckDBPyRelation, name, refuse, raising=False)


def test_sql_csv_streams_batches_and_limit(known_store, monkeypatch):
    monkeypatch.setattr("trajstore.cli.audit.SQL_BATCH_ROWS", 1000)
    _no_fetchall(monkeypatch)
    res = runner.invoke(app, ["sql", known_store.uri, "SELECT range AS i, range * 2 AS j FROM range(25000)",
                              "--format", "csv"])
    assert res.exit_code == 0, res.output
    rows = list(csv.reader(io.StringIO(res.stdout)))
    assert rows[0] == ["i", "j"] and len(rows) == 25001
    assert rows[1] == ["0", "0"] and rows[-1] == ["24999", "49998"]
    res = runner.invoke(app, ["sql", known_store.uri, "SELECT range AS i FROM range(25000)", "--format", "csv",
                              "--limit", "7"])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines() == ["i", "0", "1", "2", "3", "4", "5", "6"]


def test_sql_json_streams_and_stays_valid(known_store, monkeypatch):
    monkeypatch.setattr("trajstore.cli.audit.SQL_BATCH_ROWS", 100)
    _no_fetchall(monkeypatch)
    res = runner.invoke(app, ["sql", known_store.uri, "SELECT range AS i, 'x' || range AS s FROM range(2500)",
                              "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert list(doc) == ["result"] and len(doc["result"]) == 2500
    assert doc["result"][2499] == {"i": 2499, "s": "x2499"}
    res = runner.invoke(app, ["sql", known_store.uri, "SELECT trajectory_id FROM trajectories ORDER BY 1",
                              "--format", "json", "--limit", "2"])
    assert json.loads(res.stdout) == {"result": [{"trajectory_id": "A"}, {"trajectory_id": "B"}]}
    res = runner.invoke(app, ["sql", known_store.uri, "SELECT 1 AS a WHERE false", "--format", "json"])
    assert json.loads(res.stdout) == {"result": []}


def test_sql_table_shows_at_most_the_table_cap(known_store, monkeypatch):
    monkeypatch.setattr("trajstore.cli.audit.SQL_TABLE_MAX_ROWS", 50)
    _no_fetchall(monkeypatch)
    res = runner.invoke(app, ["sql", known_store.uri, "SELECT range AS i FROM range(100000)"])
    assert res.exit_code == 0, res.output
    assert "showing the first 50 rows" in res.output
    res = runner.invoke(app, ["sql", known_store.uri, "SELECT range AS i FROM range(10)"])
    assert "showing" not in res.output


def test_sql_limit_must_be_positive(known_store):
    res = runner.invoke(app, ["sql", known_store.uri, "SELECT 1", "--limit", "0"])
    assert res.exit_code != 0


@pytest.mark.slow
def test_sql_csv_memory_is_bounded_by_the_batch(known_store, tmp_path):
    # 3M rows held as Python tuples took 1.5 GB; streamed, the process stays near its baseline.
    # The peak is the child's VmHWM: ru_maxrss survives exec, so it would report the pytest
    # parent's own peak (748 MiB in a full-suite run) instead of the child's.
    if not os.path.exists("/proc/self/status"):
        pytest.skip("needs /proc/self/status (Linux) for the child's own peak RSS")
    code = (
        "import sys\n"
        "from trajstore.cli.main import app\n"
        "sys.argv = ['traj', 'sql', sys.argv[1], 'SELECT range AS i, range * 0.5 AS x FROM range(3000000)', "
        "'--format', 'csv']\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        "hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM:')][0]\n"
        "sys.stderr.write(hwm.split()[1])\n"
    )
    with open(os.devnull, "w") as devnull:
        out = subprocess.run([sys.executable, "-c", code, known_store.uri], stdout=devnull, stderr=subprocess.PIPE,
                             text=True, timeout=300)
    peak_mib = int(out.stderr.strip().splitlines()[-1]) / 1024
    assert peak_mib < 500, f"peak RSS {peak_mib:.0f} MiB"


def test_info_prints_each_corrupt_shard_once_without_source_lines(known_store):
    bad = Path(known_store.path("trajectories")) / "00000000000000000001-bad.parquet"
    bad.write_bytes(b"not parquet at all")
    res = runner.invoke(app, ["info", known_store.uri, "--format", "json"])
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.output.splitlines() if "bad.parquet" in ln]
    assert len(lines) == 1, res.output
    assert lines[0].startswith("warning: skipping")
    assert "warnings.warn" not in res.output and "Warning:" not in res.output
    doc = json.loads(res.stdout[res.stdout.index("{"):])
    assert doc["trajectories"] == 6 and doc["shards"] == 2 and doc["skipped_shards"] == 1


def test_plot_reports_the_file_it_wrote(known_store, tmp_path):
    target = tmp_path / "plots"  # no suffix: matplotlib writes plots.png
    res = runner.invoke(app, ["stats", known_store.uri, "--clip", "--plot", str(target)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "plots.png").read_bytes()[:4] == b"\x89PNG"
    assert f"wrote {target}.png" in res.output
    assert f"wrote {target} " not in res.output
    d = tmp_path / "outdir"
    d.mkdir()
    res = runner.invoke(app, ["stats", known_store.uri, "--clip", "--plot", str(d)])
    assert res.exit_code == 0, res.output
    (png,) = list(d.iterdir())
    assert png.suffix == ".png" and f"wrote {png}" in res.output


def test_plot_into_a_place_that_cannot_hold_it_is_one_line_before_any_report(known_store, tmp_path):
    # A file as folder, a missing folder: NotADirectoryError / FileNotFoundError tracebacks came
    # after every report had been computed and printed.
    afile = tmp_path / "afile"
    afile.write_text("x")
    for target, why in [(afile / "p.png", "is not a folder"), (tmp_path / "nodir" / "sub" / "p.png", "does not exist")]:
        res = runner.invoke(app, ["stats", known_store.uri, "--clip", "--plot", str(target)])
        assert res.exit_code == 1, res.output
        assert res.output.strip().splitlines() == [f"error: cannot write the plot {target}: {target.parent} {why}"]


def test_sql_table_prints_values_that_look_like_markup_as_they_are(known_store):
    # Cells and column names are data: "[/x]" raised rich's MarkupError and "[bold]" vanished.
    res = runner.invoke(app, ["sql", known_store.uri, "SELECT '[/x]' AS \"[b]c\", '[bold]y[/bold]' AS v"])
    assert res.exit_code == 0, res.output
    assert "[/x]" in res.stdout and "[b]c" in res.stdout and "[bold]y[/bold]" in res.stdout
