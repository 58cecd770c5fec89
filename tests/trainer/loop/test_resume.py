"""trainer/loop/resume.py: where a resumed run starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajstore.cli.main import app

runner = CliRunner()

WIDTH_200 = {"COLUMNS": "200"}


# hostile tester: bad input answered by one clear line naming the file, row, field or flag
def test_resume_without_a_checkpoint_warns(tmp_path: Path) -> None:
    from trajstore.errors import TrajstoreWarning
    from trajstore.store import open_store
    from trajstore.trainer.config import ModelConfig, RunConfig, TrainConfig
    from trajstore.trainer.loop.resume import resume_point

    cfg = TrainConfig(store=str(tmp_path), model=ModelConfig(name="tiny-llama"), run=RunConfig(run_id="r1x"))
    with pytest.warns(TrajstoreWarning, match=r"--resume: run 'r1x' has no checkpoint .* starts fresh at iteration 0"):
        assert resume_point(open_store(str(tmp_path)), cfg, resume=True) is None
    res = runner.invoke(app, ["train", "--help"], env=WIDTH_200)
    assert "starts fresh with a warning" in " ".join(res.stdout.split())
