"""trajstore/cli/main.py: what every command shares: usage errors, warnings and errors in one line,
--storage-option, `traj info`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import trajstore as ts
from tests.helpers.cli import WIDTH_120, nonblank_lines
from trajstore.cli.errors import EXIT_USAGE
from trajstore.cli.main import app

runner = CliRunner()


# issue 11: a hole found attacking `traj sql`, `traj info` and `traj stats` (failed before its fix)
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


# issue 16: a new-user walkthrough finding (a slip in what a command prints)
@pytest.mark.parametrize("args, line", [
    (["sql", "{store}", "SELECT 1", "--limit", "-1"], "error: invalid option --limit: "),
    (["sql", "{store}", "  "], "error: invalid argument QUERY: the query is empty"),  # was exit 1
    (["ingest", "{store}/nonexistent", "--store", "{store}/s"], "error: no such input path: {store}/nonexistent"),
    (["ingest", "{store}/nonexistent"], "error: missing option --store"),
    (["stats", "{store}", "--no-such-flag"], "error: no such option: --no-such-flag"),
    (["stats"], "error: missing argument STORE"),
    (["stats", "{store}", "--format", "xml"], "error: invalid option --format: 'xml' is not one of"),
    (["no-such-command"], "error: no such command 'no-such-command'"),
    (["bench", "learning", "--no-such-flag"], "error: no such option: --no-such-flag"),
], ids=lambda a: " ".join(a) if isinstance(a, list) else None)
def test_click_usage_errors_are_one_line_exit_2(tmp_path: Path, args: list[str], line: str) -> None:
    args = [a.replace("{store}", str(tmp_path)) for a in args]
    res = runner.invoke(app, args, env=WIDTH_120)
    assert res.exit_code == EXIT_USAGE, res.output
    assert nonblank_lines(res.stderr) == [ln for ln in nonblank_lines(res.stderr) if ln.startswith("error: ")]
    [got] = nonblank_lines(res.stderr)
    assert got.startswith(line.replace("{store}", str(tmp_path))), got
    assert "╭" not in res.output and "Usage:" not in res.output


# issue 16: a new-user walkthrough finding (a slip in what a command prints)
@pytest.mark.parametrize("cmd", [["info", "{store}"], ["stats", "{store}", "--statuses"], ["runs", "{store}"],
                                 ["sql", "{store}", "SELECT 1 AS one"]])
def test_storage_option_on_a_local_store_warns_once(three_trajectories: str, cmd: list[str]) -> None:
    args = [a.replace("{store}", three_trajectories) for a in cmd]
    res = runner.invoke(app, [*args, "--storage-option", "anon=true", "--storage-option", "endpoint_url=http://x"],
                        env=WIDTH_120)
    assert res.exit_code == 0, res.output
    assert nonblank_lines(res.stderr) == [f"warning: --storage-option applies only to remote stores (s3://...); ignored for "
                                  f"the local store {three_trajectories} (anon, endpoint_url)"]


# issue 16: a new-user walkthrough finding (a slip in what a command prints)
def test_storage_option_is_kept_for_a_remote_store() -> None:
    from trajstore.cli.options import parse_storage_options

    assert parse_storage_options(["anon=true"], "s3://bucket/p") == {"anon": True}
    assert parse_storage_options(["anon=true"], "file:///tmp/x") == {}


WIDTH_200 = {"COLUMNS": "200"}


@pytest.fixture
def small_store(tmp_path: Path, make_trajectory: Any) -> str:
    rng = np.random.default_rng(0)
    uri = str(tmp_path / "s")
    ts.write_trajectories(uri, [make_trajectory(rng, trajectory_id=f"t{i}") for i in range(3)])
    return uri


# hostile tester: bad input answered by one clear line naming the file, row, field or flag
@pytest.mark.parametrize("args", [
    ["serve", "--port", "-1"],  # was pydantic's multi-line dump, exit 1
    ["train", "{store}", "--model", "tiny-llama", "--run-id", "t", "--policy-lr", "nan"],
    ["train", "{store}", "--model", "tiny-llama", "--run-id", "t", "--batch-size", "-3"],
    ["train", "{store}", "--model", "tiny-llama", "--run-id", "t", "--overlong", "maybe"],
    ["train", "{store}", "--model", "tiny-llama", "--run-id", "../evil"],
    ["train", "{store}", "--model", "tiny-llama", "--run-id", "t", "--device", "tpu"],  # was exit 1 at run time
    ["info", "{store}", "--storage-option", "badformat"],
    ["proxy", "--store", "{store}", "--upstream", "notaurl"],
    ["proxy", "--upstream", "http://127.0.0.1:9", "--store", "{store}", "--hold-timeout", "-1"],
    ["demo", "--store", "{store}/d", "--run-id", "../evil"],
    ["bench", "learning", "--scratch", "{store}", "--preset", "full"],
], ids=lambda a: " ".join(a[:1] + a[-2:]))
def test_a_bad_option_value_is_bad_usage_one_line_naming_the_option(tmp_path: Path, args: list[str]) -> None:
    pytest.importorskip("torch") if args[0] in ("serve", "train", "demo", "bench") else None
    pytest.importorskip("fastapi") if args[0] == "proxy" else None
    args = [a.replace("{store}", str(tmp_path)) for a in args]
    flag = next(a for a in reversed(args) if a.startswith("--"))
    res = runner.invoke(app, args)
    assert res.exit_code == EXIT_USAGE, res.output
    errors = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and errors[0].startswith(f"error: invalid option {flag}"), res.stderr
    assert "pydantic" not in res.stderr and "validation error" not in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written


# hostile tester: bad input answered by one clear line naming the file, row, field or flag
@pytest.mark.parametrize("cmd", [["sql", "{s}", "SELECT count(*) AS n FROM trajectories"], ["stats", "{s}"]])
def test_a_corrupt_shard_is_one_warning_line_naming_it(small_store: str, cmd: list[str]) -> None:
    bad = Path(small_store) / "trajectories" / "00000000000000000001-x-1-abc.parquet"
    bad.write_bytes(b"not parquet at all")
    res = runner.invoke(app, [a.replace("{s}", small_store) for a in cmd], env=WIDTH_200)
    assert res.exit_code == 0, res.output
    lines = res.stderr.splitlines()
    assert lines == [f"warning: skipping corrupt shard {bad}: {lines[0].split(': ', 2)[2]}"], res.stderr
    assert "CorruptShardWarning" not in res.output and ".py:" not in res.output
