"""trajstore/cli/gc.py: `traj gc` dry run (the default) lists and deletes nothing, --delete deletes,
durations parse, trajectory rules without --consumed-by are bad usage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajstore.cli.errors import EXIT_USAGE, InvalidOptionError
from trajstore.cli.gc import parse_duration
from trajstore.cli.main import app
from trajstore.policies import list_policy_versions
from trajstore.store import open_store
from trajstore.store.layout import VERSION_META_FILE, VERSION_WEIGHTS_FILE, policy_latest_file, version_dir

runner = CliRunner()


def _publish(root: Path, versions: list[int], latest: int) -> None:
    store = open_store(root)
    for v in versions:
        store.write_bytes(f"{version_dir('r', v)}/{VERSION_WEIGHTS_FILE}", b"w" * 100)
        store.write_bytes(f"{version_dir('r', v)}/{VERSION_META_FILE}", b"{}")
    store.write_bytes(policy_latest_file("r"), json.dumps({"version": latest}).encode())


def test_dry_run_then_delete(tmp_path: Path) -> None:
    _publish(tmp_path, [0, 1, 2, 3], latest=3)
    res = runner.invoke(app, ["gc", str(tmp_path), "--keep-versions", "2", "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [i["what"].rsplit("/", 1)[-1] for i in doc["gc.would_delete"]] == ["v0", "v1"]
    assert doc["gc.summary"][0]["dry_run"] is True and doc["gc.summary"][0]["bytes"] == 2 * (100 + 2)
    assert list_policy_versions(tmp_path, "r") == [0, 1, 2, 3]
    res = runner.invoke(app, ["gc", str(tmp_path), "--keep-versions", "2", "--delete"])
    assert res.exit_code == 0, res.output
    assert list_policy_versions(tmp_path, "r") == [2, 3]


def test_trajectory_rules_need_consumed_by(tmp_path: Path) -> None:
    _publish(tmp_path, [0], latest=0)
    res = runner.invoke(app, ["gc", str(tmp_path), "--older-than", "7d"])
    assert res.exit_code == EXIT_USAGE and "--consumed-by" in res.output


def test_durations() -> None:
    assert [parse_duration(t, "--x") for t in ("90", "90s", "30m", "12h", "7d", "1.5h")] == [
        90, 90, 1800, 43200, 604800, 5400]
    with pytest.raises(InvalidOptionError, match="--x"):
        parse_duration("soon", "--x")


def test_an_unknown_status_is_refused_naming_it_and_the_allowed_ones(tmp_path: Path) -> None:
    # walkthrough: `--status weird` was accepted and matched nothing
    _publish(tmp_path, [0], latest=0)
    res = runner.invoke(app, ["gc", str(tmp_path), "--consumed-by", "r", "--status", "failed,weird"])
    assert res.exit_code == EXIT_USAGE, res.output
    assert "--status" in res.output and "'weird'" in res.output and "'failed'" not in res.output
    assert all(s in res.output for s in ("completed", "truncated", "aborted", "failed")), res.output
