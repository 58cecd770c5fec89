"""`traj validate`: problems named by file, row group, row and field; --format json; exit 1 on
any problem, 0 on a conformant shard, 2 on a missing path (CliRunner and a real subprocess)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from tests.helpers.plain_shards import row, write  # noqa: E402
from trajstore.cli.main import app


def test_json_names_row_and_field_and_exits_1(tmp_path: Path) -> None:
    rows = [row("a"), copy.deepcopy(row("b")), row("c")]
    rows[1]["max_policy_version"] = 9
    path = write(tmp_path / "bad.parquet", rows)
    result = CliRunner().invoke(app, ["validate", path, "--format", "json"])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert [(p["row_group"], p["row"], p["trajectory_id"], p["field"]) for p in doc["validate.problems"]] == [
        (0, 1, "b", "max_policy_version")]
    assert doc["validate.files"][0]["rows_with_problems"] == 1
    assert doc["validate.by_field"] == [{"rule": "derived", "field": "max_policy_version", "problems": 1}]
    assert "error: 1 problem in 1 of 3 rows" in result.stderr


def test_conformant_shard_exits_0_as_a_subprocess(tmp_path: Path) -> None:
    path = write(tmp_path / "ok.parquet", [row("a"), row("b")])
    p = subprocess.run([str(Path(sys.executable).parent / "traj"), "validate", path], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "no problems" in p.stdout


def test_missing_path_is_bad_usage(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert result.stderr.strip().endswith(f"error: no such input path: {tmp_path / 'nope'}")


def test_a_folder_without_parquet_files_fails(tmp_path: Path) -> None:
    # walkthrough of `traj validate`: an empty (or mistyped) folder passed with exit 0, so a CI check on it
    # could never fail
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "empty")])
    assert result.exit_code == 1 and "no Parquet files under" in result.output, result.output
    # walkthrough: it also printed the tables, "no problems" among them, above the error: only the error now
    assert result.stdout == "" and result.stderr.strip() == f"error: no Parquet files under {tmp_path / 'empty'}"
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "empty"), "--format", "json"])
    assert result.exit_code == 1 and result.stdout == "", result.stdout


def test_a_damaged_page_names_the_file_and_says_its_rows_were_not_checked(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    path = Path(write(tmp_path / "d.parquet", [row("a"), row("b")]))
    rg = pq.ParquetFile(path).metadata.row_group(0)
    [col] = [rg.column(j) for j in range(rg.num_columns) if rg.column(j).path_in_schema == "tokens.list.element"]
    data = bytearray(path.read_bytes())
    data[col.data_page_offset + col.total_compressed_size - 2] ^= 0x10  # inside the page data, past its header
    path.write_bytes(bytes(data))
    result = CliRunner().invoke(app, ["validate", str(path), "--format", "json"])
    assert result.exit_code == 1, result.output
    [problem] = json.loads(result.stdout)["validate.problems"]
    assert problem["file"].endswith("d.parquet") and problem["problem"].startswith("row group not readable")
    assert "error: 1 problem in 0 of 2 rows (1 file; 1 not readable, named above; 2 rows not checked" in result.stderr


def test_the_table_gives_an_unreadable_files_reason_whole(tmp_path: Path) -> None:
    """Walkthrough: on a truncated shard the table shortened the file and split the reason over
    cells; only --format csv showed "not readable Parquet: ..." in full."""
    path = Path(write(tmp_path / "a-long-shard-name-of-a-store-0123456789.parquet", [row("a")]))
    path.write_bytes(path.read_bytes()[:100])
    result = CliRunner().invoke(app, ["validate", str(path)], env={"COLUMNS": "60"})
    assert result.exit_code == 1, result.output
    [line] = [ln for ln in result.stderr.splitlines() if ln.startswith("unreadable: ")]
    assert line.startswith(f"unreadable: {path}: not readable Parquet: ") and line.endswith("parquet file."), line
    assert "error: 1 problem in 0 of 0 rows (1 file; 1 not readable, named above)" in result.stderr
