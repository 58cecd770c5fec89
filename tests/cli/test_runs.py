"""trajstore/cli/runs.py: `traj runs` names damaged checkpoints and pointers on stderr."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from trajstore.cli.main import app

runner = CliRunner()

WIDTH_200 = {"COLUMNS": "200"}


def _run_layout(root: Path) -> Path:
    """A run with one committed checkpoint (iteration 2) and a published v0, as the trainer lays
    them out (trainer/loop/checkpoint.py, trainer/loop/publish.py), with tiny files."""
    import torch

    ck = root / "runs" / "r" / "checkpoints" / "it00000002"
    ck.mkdir(parents=True)
    for name in ("policy.pt", "critic.pt", "optim.pt", "rng.pt"):
        torch.save({"w": torch.zeros(2)}, ck / name)
    (ck / "state.json").write_text(json.dumps({"iteration": 2, "step": 1, "version": 1}))
    (ck / "config.json").write_text("{}")
    (root / "runs" / "r" / "checkpoints" / "LATEST").write_text(json.dumps({"iteration": 2, "dir": "it00000002"}))
    v0 = root / "policies" / "r" / "v0"
    v0.mkdir(parents=True)
    (v0 / "meta.json").write_text("{}")
    (root / "policies" / "r" / "LATEST").write_text(json.dumps({"version": 0}))
    return ck


def _runs(root: Path) -> tuple[Any, list[str]]:
    res = runner.invoke(app, ["runs", str(root), "--format", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout), res.stderr.splitlines()


# hostile tester: bad input answered by one clear line naming the file, row, field or flag
def test_runs_names_damaged_checkpoints_and_pointers(tmp_path: Path) -> None:
    ck = _run_layout(tmp_path)
    out, lines = _runs(tmp_path)
    assert out["runs"][0]["problems"] == [] and lines == []
    # a truncated policy.pt, an empty optim.pt, a missing rng.pt
    data = (ck / "policy.pt").read_bytes()
    (ck / "policy.pt").write_bytes(data[: len(data) // 2])
    (ck / "optim.pt").write_bytes(b"")
    (ck / "rng.pt").unlink()
    out, lines = _runs(tmp_path)
    assert lines == [f"warning: run r: checkpoint {ck} has no rng.pt",
                     f"warning: run r: checkpoint file {ck / 'policy.pt'} is damaged (not a whole torch.save archive)",
                     f"warning: run r: checkpoint file {ck / 'optim.pt'} is empty"], lines
    assert len(out["runs"][0]["problems"]) == 3


# hostile tester: bad input answered by one clear line naming the file, row, field or flag
@pytest.mark.parametrize("latest, says", [
    ("{not json", "is not valid JSON"),
    ('{"iteration": 2}', "is not a checkpoint pointer"),
    ('{"iteration": 9, "dir": "it00000009"}', "names it00000009, which does not exist"),
])
def test_runs_names_a_bad_checkpoint_latest(tmp_path: Path, latest: str, says: str) -> None:
    _run_layout(tmp_path)
    pointer = tmp_path / "runs" / "r" / "checkpoints" / "LATEST"
    pointer.write_text(latest)
    out, lines = _runs(tmp_path)
    assert len(lines) == 1 and lines[0].startswith(f"warning: run r: {pointer} {says}"), lines
    assert lines[0].endswith("--resume refuses this run")
    res = runner.invoke(app, ["runs", str(tmp_path)], env=WIDTH_200)  # the table says how many, stderr what
    assert res.exit_code == 0 and "1 (on stderr)" in res.stdout, res.output


# hostile tester: bad input answered by one clear line naming the file, row, field or flag
def test_runs_names_a_bad_policies_latest(tmp_path: Path) -> None:
    _run_layout(tmp_path)
    (tmp_path / "policies" / "r" / "LATEST").write_text('"v0"')
    _, lines = _runs(tmp_path)
    assert lines == [f"warning: run r: {tmp_path / 'policies' / 'r' / 'LATEST'} is not a JSON object (str) (a "
                     "rollout server following this run cannot load the latest version)"], lines
    (tmp_path / "policies" / "r" / "LATEST").write_text('{"version": 4}')
    _, lines = _runs(tmp_path)
    assert lines == [f"warning: run r: {tmp_path / 'policies' / 'r' / 'LATEST'} names v4, which is missing or "
                     "incomplete"], lines
