"""trainer/loop/replay.py: a past step executed again from the checkpoint before it reproduces
what the run recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.helpers.stores import write_synthetic_store
from tests.helpers.training import disk_config
from trajstore.cli.main import app
from trajstore.trainer.loop.replay import ReplayError, replay_step
from trajstore.trainer.loop.train import train


def test_a_replayed_step_reproduces_the_recorded_losses(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 10, per_shard=2)
    s = train(disk_config(tmp_path, checkpoint_every=2, keep_checkpoints=5))
    assert s.steps == 5
    before = sorted(p.name for p in (tmp_path / "runs").rglob("*"))
    got = replay_step(str(tmp_path), "r", 3)
    # the newest checkpoint before step 3 is after iteration 2: step 2 is executed again first
    assert (got.checkpoint_iteration, got.iteration, got.iterations_before) == (2, 3, 1)
    assert len(got.trajectories) == 2
    rec, new = got.metrics["policy/loss"]
    assert rec != 0 and abs(new - rec) <= 1e-6 * abs(rec), got.metrics
    for name in ("policy/grad_norm", "ratio/mean", "value/loss"):
        assert got.relative_difference(name) <= 1e-5, (name, got.metrics[name])
    assert sorted(p.name for p in (tmp_path / "runs").rglob("*")) == before  # nothing written
    with pytest.raises(ReplayError, match="no records of step 9"):
        replay_step(str(tmp_path), "r", 9)
    # the command: no --model / --run needed, the metrics side by side
    r = CliRunner().invoke(app, ["train", str(tmp_path), "--replay-step", "3", "--run", "r", "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["metrics"]["policy/loss"]["recorded"] == rec and doc["metrics"]["policy/loss"]["relative_difference"] <= 1e-6
    r = CliRunner().invoke(app, ["train", str(tmp_path), "--replay-step", "3"])
    assert r.exit_code == 2 and "--replay-step N needs --run RUN" in r.output
    r = CliRunner().invoke(app, ["train", str(tmp_path)])
    assert r.exit_code == 2 and r.output.strip() == "error: missing option --model"


def test_a_replay_refuses_data_that_is_not_what_the_run_consumed(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 6, per_shard=2)
    train(disk_config(tmp_path, checkpoint_every=1, keep_checkpoints=5))
    second = sorted((tmp_path / "trajectories").glob("*.parquet"))[1]
    second.unlink()  # what step 1 trained is gone: the checkpoint's cursor reads step 2's data
    with pytest.raises(ReplayError, match="step 1 of run 'r' read from checkpoint it00000001's cursor is not what"):
        replay_step(str(tmp_path), "r", 1)
