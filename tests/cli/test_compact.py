"""trajstore/cli/compact.py: ``traj compact --dry-run`` says how many shards it leaves out, why,
and which option changes that."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tests.helpers.small_shards import trajectory_table, write_small_shards
from trajstore.cli.main import app
from trajstore.store import open_store

runner = CliRunner()


def test_dry_run_explains_shards_left_out_for_their_age(tmp_path: Path) -> None:
    # walkthrough: a dry run on freshly written shards planned nothing and did not say why
    write_small_shards(open_store(tmp_path), trajectory_table(4))  # four shards, seconds old
    res = runner.invoke(app, ["compact", str(tmp_path), "--dry-run", "--min-age", "3600"])
    assert res.exit_code == 0, res.output
    assert "4 shards younger than --min-age 3600 s" in res.stderr and "--min-age, e.g. 0" in res.stderr, res.stderr
    res = runner.invoke(app, ["compact", str(tmp_path), "--dry-run", "--min-age", "3600", "--format", "json"])
    doc = json.loads(res.stdout)
    assert (doc["shards_to_merge"], doc["shards_left_young"], doc["shards_left_big"]) == (0, 4, 0)
    res = runner.invoke(app, ["compact", str(tmp_path), "--dry-run", "--min-age", "0"])
    assert res.exit_code == 0 and "left as they are" not in res.stderr, res.stderr  # all four would merge


def test_dry_run_explains_shards_left_out_for_their_size(tmp_path: Path) -> None:
    write_small_shards(open_store(tmp_path), trajectory_table(3))
    # a target of 1 KiB: every shard (several KiB) is half the target or more
    res = runner.invoke(app, ["compact", str(tmp_path), "--dry-run", "--min-age", "0", "--target-mb", "0.001"])
    assert res.exit_code == 0, res.output
    assert "3 shards of 0.0005 MiB or more" in res.stderr and "a larger --target-mb" in res.stderr, res.stderr
