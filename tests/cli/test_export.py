"""`traj export`: a JSON summary, a refused trajectory as one `error:` line (exit 1, nothing
written), bad usage exit 2, --skip-refused's note on stderr; once as a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.helpers.export import refused_trajectories, three_turn_trajectories, write_store
from trajstore.cli.main import app


@pytest.fixture
def mixed(tmp_path):
    return write_store(tmp_path / "mixed", three_turn_trajectories() + refused_trajectories())


def test_summary_as_json(mixed, tmp_path):
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["export", mixed, "--allow-secrets", "--to", "verl", "--output", str(out), "--where",
                                   "trajectory_id IN ('t1', 't2')", "--format", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == {
        "target": "verl", "out": str(out), "selected": 2, "exported": 2, "skipped": {}, "not_trainable_left_out": {},
        "left_out": [], "files": 2,
        "approximations": {"trailing observation tokens dropped": 1}}


def test_refusals_are_one_error_line_naming_every_blocker_and_exit_1(mixed, tmp_path):
    res = CliRunner().invoke(app, ["export", mixed, "--allow-secrets", "--to", "slime", "--output", str(tmp_path / "out")])
    assert res.exit_code == 1
    assert res.stderr.count("\n") == 1 and res.stderr.startswith(
        "error: cannot export to slime: 3 blocker(s), all listed (traj export --dry-run shows them); nothing was "
        "written: (1) missing logprobs: 1 trajectory (lifted by --without logprobs or --skip-refused); e.g. "
        "trajectory 'no-lp': 2 of 2 action tokens have no engine log-prob, which slime's rollout_log_probs would need")
    assert "(2) unknown policy version: 1 trajectory" in res.stderr and "(3) no reward: 1 trajectory" in res.stderr
    assert not (tmp_path / "out").exists()


def test_dry_run_lists_the_blockers_writes_nothing_and_exits_1(mixed, tmp_path):
    res = CliRunner().invoke(app, ["export", mixed, "--to", "slime", "--output", str(tmp_path / "out"), "--dry-run"])
    assert res.exit_code == 1 and not (tmp_path / "out").exists()
    assert "dry run: nothing written" in res.stdout and "blockers.missing logprobs" in res.stdout
    assert "missing logprobs: trajectory 'no-lp': 2 of 2 action tokens have no engine log-prob" in res.stderr
    # the tokenizer "tok" cannot be loaded, so the spans cannot be scanned for secrets: a fourth blocker
    assert res.stderr.splitlines()[-1] == ("blocked: 4 blocker(s); run again with any option of each, e.g. "
                                           "--allow-secrets --without logprobs --without rewards --without versions")


def test_skip_refused_and_without(mixed, tmp_path):
    res = CliRunner().invoke(app, ["export", mixed, "--to", "trl", "--output", str(tmp_path / "out"), "--skip-refused",
                                   "--without", "rewards", "--format", "json", "--allow-secrets"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert (doc["exported"], doc["skipped"], doc["not_trainable_left_out"], doc["left_out"]) == (
        3, {"missing logprobs": 1}, {"no action tokens": 1}, ["rewards"])
    assert res.stderr == ("note: left out 1 of 5 trajectories stored as not trainable (1 no action tokens); "
                          "--include-not-trainable writes them\n"
                          "note: left out 1 of 5 trajectories (1 missing logprobs)\n")


@pytest.mark.parametrize("args", [["--to", "nemo"], ["--to", "verl", "--without", "tokens"],
                                  ["--to", "verl", "--limit", "0"]])
def test_bad_usage_exits_2(mixed, tmp_path, args):
    res = CliRunner().invoke(app, ["export", mixed, "--allow-secrets", "--output", str(tmp_path / "out"), *args])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: ") and not (tmp_path / "out").exists()


def test_export_as_a_subprocess(tmp_path):
    store = write_store(tmp_path / "s", three_turn_trajectories())
    p = subprocess.run([str(Path(sys.executable).parent / "traj"), "export", store, "--to", "atif", "--output",
                        str(tmp_path / "atif"), "--allow-secrets"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "exported" in p.stdout and (tmp_path / "atif" / "t1" / "agent" / "trajectory.json").is_file()


def test_unreadable_shard_is_exit_1_naming_it_and_skip_unreadable_records_it(tmp_path):
    """Walkthrough: a junk ``*.parquet`` in trajectories/ was silently left out (exit 0, "skipped": {})."""
    store = write_store(tmp_path / "s", three_turn_trajectories())
    (tmp_path / "s" / "trajectories" / "zzz-junk.parquet").write_text("not parquet")
    res = CliRunner().invoke(app, ["export", store, "--to", "hf", "--output", str(tmp_path / "o"), "--allow-secrets"])
    assert res.exit_code == 1, res.output
    assert "zzz-junk.parquet" in res.stderr and "traj validate" in res.stderr and "--skip-unreadable" in res.stderr
    assert not (tmp_path / "o").exists()
    res = CliRunner().invoke(app, ["export", store, "--to", "hf", "--output", str(tmp_path / "o"), "--allow-secrets",
                                   "--skip-unreadable", "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["exported"] == 2
    assert [u.rsplit("/", 1)[-1] for u in doc["unreadable_shards_skipped"]] == ["zzz-junk.parquet"]
    assert "unreadable shard" in res.stderr
    manifest = json.loads((tmp_path / "o" / ".trajstore" / "export.json").read_text())
    assert manifest["trajectories"]["unreadable_shards_skipped"][0]["shard"].endswith("zzz-junk.parquet")
