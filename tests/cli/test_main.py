"""trajstore/cli/main.py: what every command shares: usage errors, warnings and errors in one line,
--storage-option, `traj info`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import trajstore as ts
from tests.helpers.cli import WIDTH_120, nonblank_lines
from trajstore.cli.errors import EXIT_USAGE
from trajstore.cli.main import app

runner = CliRunner()


# a damaged store audits as damaged: exit status 1 naming the shard, unless --skip-unreadable
def test_info_refuses_a_damaged_store_and_counts_the_rest_with_skip_unreadable(known_store):
    bad = Path(known_store.path("trajectories")) / "00000000000000000001-bad.parquet"
    bad.write_bytes(b"not parquet at all")
    res = runner.invoke(app, ["info", known_store.uri, "--format", "json"])
    assert res.exit_code == 1 and res.stdout == "", res.output
    errors = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: 1 shard(s) cannot be read: corrupt shard ")
    assert "bad.parquet" in errors[0] and "--skip-unreadable" in errors[0]
    res = runner.invoke(app, ["info", known_store.uri, "--format", "json", "--skip-unreadable"])
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.output.splitlines() if "bad.parquet" in ln]
    assert len(lines) == 1, res.output
    assert lines[0].startswith("warning: skipping")
    assert "warnings.warn" not in res.output and "Warning:" not in res.output
    doc = json.loads(res.stdout[res.stdout.index("{"):])
    assert doc["trajectories"] == 6 and doc["shards"] == 2 and doc["skipped_shards"] == 1


# new-user walkthrough: a finding (a slip in what a command prints)
@pytest.mark.parametrize("args, line", [
    (["sql", "{store}", "SELECT 1", "--limit", "-1"], "error: invalid option --limit: "),
    (["sql", "{store}", "  "], "error: invalid argument QUERY: the query is empty"),  # was exit 1
    (["ingest", "{store}/s", "{store}/nonexistent"], "error: no such input path: {store}/nonexistent"),
    (["ingest", "{store}/nonexistent"], "error: missing argument PATH"),
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


# new-user walkthrough: a finding (a slip in what a command prints)
@pytest.mark.parametrize("cmd", [["info", "{store}"], ["stats", "{store}", "--statuses"], ["runs", "{store}"],
                                 ["sql", "{store}", "SELECT 1 AS one"]])
def test_storage_option_on_a_local_store_warns_once(three_trajectories: str, cmd: list[str]) -> None:
    args = [a.replace("{store}", three_trajectories) for a in cmd]
    res = runner.invoke(app, [*args, "--storage-option", "anon=true", "--storage-option", "endpoint_url=http://x"],
                        env=WIDTH_120)
    assert res.exit_code == 0, res.output
    assert nonblank_lines(res.stderr) == [f"warning: --storage-option applies only to remote stores (s3://...); ignored for "
                                  f"the local store {three_trajectories} (anon, endpoint_url)"]


# new-user walkthrough: a finding (a slip in what a command prints)
def test_storage_option_is_kept_for_a_remote_store() -> None:
    from trajstore.cli.options import parse_storage_options

    assert parse_storage_options(["anon=true"], "s3://bucket/p") == {"anon": True}
    assert parse_storage_options(["anon=true"], "file:///tmp/x") == {}


WIDTH_200 = {"COLUMNS": "200"}


# hostile tester: bad input answered by one clear line naming the file, row, field or flag
@pytest.mark.parametrize("args", [
    ["serve", "--port", "-1"],  # was pydantic's multi-line dump, exit 1
    ["train", "{store}", "--model", "tiny-llama", "--run", "t", "--policy-lr", "nan"],
    ["train", "{store}", "--model", "tiny-llama", "--run", "t", "--batch-size", "-3"],
    ["train", "{store}", "--model", "tiny-llama", "--run", "t", "--overlong", "maybe"],
    ["train", "{store}", "--model", "tiny-llama", "--run", "../evil"],
    ["train", "{store}", "--model", "tiny-llama", "--run", "t", "--device", "tpu"],  # was exit 1 at run time
    ["info", "{store}", "--storage-option", "badformat"],
    ["proxy", "{store}", "--upstream", "notaurl"],
    ["proxy", "{store}", "--upstream", "http://127.0.0.1:9", "--hold-timeout", "-1"],
    ["demo", "{store}/d", "--run", "../evil"],
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
@pytest.mark.parametrize("cmd", [["sql", "{s}", "SELECT count(*) AS n FROM trajectories"], ["stats", "{s}"],
                                 ["stats", "{s}", "--all"], ["info", "{s}"]])
def test_an_audit_of_a_damaged_store_exits_1_naming_the_shard(small_store: str, cmd: list[str]) -> None:
    bad = Path(small_store) / "trajectories" / "00000000000000000001-x-1-abc.parquet"
    bad.write_bytes(b"not parquet at all")
    res = runner.invoke(app, [a.replace("{s}", small_store) for a in cmd], env=WIDTH_200)
    assert res.exit_code == 1 and res.stdout == "", res.output  # no totals that leave the shard out
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(bad) in lines[0], res.stderr
    assert "--skip-unreadable" in lines[0]
    res = runner.invoke(app, [a.replace("{s}", small_store) for a in cmd] + ["--skip-unreadable"], env=WIDTH_200)
    assert res.exit_code == 0, res.output
    lines = res.stderr.splitlines()
    assert lines == [f"warning: skipping corrupt shard {bad}: {lines[0].split(': ', 2)[2]}"], res.stderr
    assert "CorruptShardWarning" not in res.output and ".py:" not in res.output


def test_a_store_whose_only_shard_is_damaged_is_not_an_empty_store(tmp_path: Path) -> None:
    ts.write_trajectories(str(tmp_path / "s"), [_one_trajectory()])
    (shard,) = (tmp_path / "s" / "trajectories").glob("*.parquet")
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])  # truncated
    for cmd in (["stats"], ["sql", "SELECT count(*) FROM trajectories"], ["info"]):
        res = runner.invoke(app, [cmd[0], str(tmp_path / "s"), *cmd[1:]])
        assert res.exit_code == 1 and shard.name in res.stderr, (cmd, res.output)


def _one_trajectory() -> ts.Trajectory:
    b = ts.TrajectoryBuilder(trajectory_id="only", source="sdk")
    b.add_prompt([1, 2])
    b.add_action([3, 4], [-0.1, -0.2], policy_version=0)
    b.set_reward(1.0)
    return b.finish()
