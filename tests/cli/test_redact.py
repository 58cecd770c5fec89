"""``traj redact``: --dry-run lists each finding (never the secret) and exits 1; the rewrite exits
0 and leaves a store that --dry-run passes; bad options are usage errors naming the option."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import trajstore as ts
from tests.helpers.cli import WIDTH_120
from tests.helpers.secrets import SECRETS, clean_trajectory, secret_trajectory
from trajstore.cli.main import app

runner = CliRunner()


@pytest.fixture
def store(tmp_path, smol_tokenizer) -> str:
    uri = str(tmp_path / "store")
    ts.write_trajectories(uri, [clean_trajectory(smol_tokenizer, "c1"), secret_trajectory(smol_tokenizer, "s1")])
    return uri


def test_check_lists_findings_without_the_secrets_and_exits_1(store):
    res = runner.invoke(app, ["redact", store, "--dry-run", "--format", "json"], env=WIDTH_120)
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)
    kinds = sorted({r["kind"] for r in doc["redact.findings"]})
    assert kinds == sorted(SECRETS)
    assert {r["trajectory_id"] for r in doc["redact.findings"]} == {"s1"}
    assert doc["redact.unscanned"] == []
    assert not any(v in res.output for v in SECRETS.values())
    assert "error: 14 secret(s) in 1 of 2 trajectories" in res.stderr and f"traj redact {store}" in res.stderr
    table = runner.invoke(app, ["redact", store, "--dry-run"], env=WIDTH_120)
    assert table.exit_code == 1 and "span 2 (observation)" in table.stdout and "AKIA…(20 chars)" in table.stdout


def test_rewrite_then_check_passes(store):
    res = runner.invoke(app, ["redact", store, "--format", "json"], env=WIDTH_120)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["redact.summary"][0]["trajectories_redacted"] == 1
    assert doc["redact.summary"][0]["made_not_trainable"] == 1
    assert len(doc["redact.changes"]) == 14
    res = runner.invoke(app, ["redact", store, "--dry-run"], env=WIDTH_120)
    assert res.exit_code == 0, res.output
    assert "no secret found" in res.stdout


def test_user_patterns_and_allow_lists(store, tmp_path):
    allow = tmp_path / "allow.txt"
    allow.write_text("# our own test domain\n[^@]+@acme-robotics\\.io\n")
    res = runner.invoke(app, ["redact", store, "--dry-run", "--format", "json", "--allow-file", str(allow),
                              "--pattern", "task_name=Sort the (list)"], env=WIDTH_120)
    kinds = {r["kind"] for r in json.loads(res.stdout)["redact.findings"]}
    assert "email" not in kinds and "task_name" in kinds


@pytest.mark.parametrize("args, message", [
    (["--pattern", "noequals"], "invalid option --pattern: expected NAME=REGEX"),
    (["--pattern", "x=(unclosed"], "invalid option --pattern"),
    (["--allow", "[z-a]"], "invalid option --allow"),
    (["--allow-file", "/nonexistent/allow.txt"], "invalid option --allow-file: cannot read"),
])
def test_bad_options_are_usage_errors(store, args, message):
    res = runner.invoke(app, ["redact", store, "--dry-run", *args])
    assert res.exit_code == 2, res.output
    assert message in res.stderr


def test_no_store_is_an_error(tmp_path):
    res = runner.invoke(app, ["redact", str(tmp_path / "nope"), "--dry-run"])
    assert res.exit_code == 1 and "no store at" in res.stderr


def test_as_a_subprocess(store):
    out = subprocess.run([str(Path(sys.executable).with_name("traj")), "redact", store, "--dry-run"],
                         capture_output=True, text=True, timeout=300, env={**os.environ, **WIDTH_120})
    assert out.returncode == 1, out.stderr
    assert "email" in out.stdout and SECRETS["email"] not in out.stdout + out.stderr
