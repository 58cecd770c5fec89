"""trajstore/cli/store.py: `traj migrate` prints the shards it would rewrite, one per line, whole."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tests.helpers.stores import write_big_v1_store
from trajstore import open_store
from trajstore.cli.main import app
from trajstore.schema import SCHEMA_VERSION


def test_migrate_cli(tmp_store: str) -> None:
    write_big_v1_store(tmp_store, 2, 10)
    # The table lists the shard paths as "[path, ...]": rendered as rich markup this raised
    # MarkupError (after migrating) instead of printing the table.
    r = CliRunner().invoke(app, ["migrate", tmp_store, "--dry-run"], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    first, second = open_store(tmp_store).list_shards()
    lines = r.stdout.splitlines()
    # a dry run migrates nothing (it said "shards_migrated 2"); the shards are listed one per line,
    # whole (a Python list broken mid-name before)
    assert any("shards_to_migrate" in line and "2" in line for line in lines) and "shards_migrated" not in r.stdout
    assert any(first.path in line for line in lines) and any(second.path in line for line in lines), r.stdout
    assert f"[{first.path}" not in r.stdout
    r = CliRunner().invoke(app, ["migrate", tmp_store, "--format", "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert (out["shards_migrated"], out["rows"], out["shards_already_current"]) == (2, 4, 0)
    assert [s.schema_version for s in open_store(tmp_store).list_shards()] == [SCHEMA_VERSION] * 2
    r = CliRunner().invoke(app, ["migrate", str(Path(tmp_store) / "typo")])
    assert r.exit_code == 1 and "does not exist" in r.output


def test_show_prints_one_trajectory_by_id(tmp_store: str, make_trajectory) -> None:  # noqa: ANN001 - fixture
    import numpy as np

    from trajstore.convert import trajectories_to_table

    rng = np.random.default_rng(5)
    trajs = [make_trajectory(rng, trajectory_id=f"s{i}") for i in range(6)]
    open_store(tmp_store).write_table(trajectories_to_table(trajs))
    want = trajs[4]
    r = CliRunner().invoke(app, ["show", tmp_store, "s4", "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["trajectory_id"] == "s4" and doc["reward"] == want.reward and "tokens" not in doc
    assert [s["kind"] for s in doc["spans"]] == [s.kind for s in want.spans]
    assert [s["policy_version"] for s in doc["spans"]] == [s.policy_version for s in want.spans]
    assert all(s["text"] for s in doc["spans"]) and isinstance(doc["flags"], dict)
    r = CliRunner().invoke(app, ["show", tmp_store, "s4"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "trajectory s4" in r.stdout and all(f"] {s.kind}" in r.stdout for s in want.spans)
    r = CliRunner().invoke(app, ["show", tmp_store, "nope"])
    assert r.exit_code == 1 and r.output.strip() == f"error: no trajectory 'nope' in {open_store(tmp_store).url()}"


def test_show_names_the_unreadable_shard_that_may_hold_the_trajectory(tmp_store: str, make_trajectory) -> None:  # noqa: ANN001 - fixture
    """Walkthrough: the shard holding the id truncated, `traj show` said only "no trajectory"."""
    import numpy as np

    from trajstore.convert import trajectories_to_table

    rng = np.random.default_rng(5)
    open_store(tmp_store).write_table(trajectories_to_table([make_trajectory(rng, trajectory_id="s0")]))
    (shard,) = (Path(tmp_store) / "trajectories").glob("*.parquet")
    shard.write_bytes(shard.read_bytes()[:200])
    r = CliRunner().invoke(app, ["show", tmp_store, "s0"])
    assert r.exit_code == 1 and r.output.count("\n") == 1, r.output
    assert "could not be read and may hold it" in r.output and shard.name in r.output and "traj validate" in r.output
