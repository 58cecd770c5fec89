"""trajstore/cli/main.py: what every command shares: usage errors, warnings and errors in one line,
--storage-option, `traj info`."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

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
