"""trajstore/cli/runs.py: `traj runs` names damaged checkpoints and pointers on stderr."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.helpers.stores import write_synthetic_store
from tests.helpers.training import disk_config
from trajstore.cli.main import app
from trajstore.trainer.loop.train import train

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


# disk use of training runs (published versions and checkpoints pruned, leftovers removed)
def test_traj_runs_lists_versions_checkpoints_and_sizes(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 4, per_shard=2)
    train(disk_config(tmp_path, checkpoint_every=1))
    r = CliRunner().invoke(app, ["runs", str(tmp_path), "--format", "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    (run,) = out["runs"]
    assert run["run_id"] == "r" and run["model"] == "tiny-llama" and run["latest_version"] == 2
    assert [v["version"] for v in run["versions"]] == [0, 1, 2] and all(v["complete"] for v in run["versions"])
    assert [(c["iteration"], c["latest"]) for c in run["checkpoints"]] == [(1, False), (2, True)]
    # sizes are what is on disk
    ck = sum(f.stat().st_size for f in (tmp_path / "runs/r/checkpoints/it00000002").iterdir())
    assert run["checkpoints"][1]["bytes"] == ck
    assert run["total_bytes"] == run["versions_bytes"] + run["checkpoints_bytes"] + run["records_bytes"] > 0
    table = CliRunner().invoke(app, ["runs", str(tmp_path)], terminal_width=160)
    assert table.exit_code == 0 and "3: v0 .. v2" in table.output and "it2*" in table.output, table.output
    # binary units, as the memory plan, README and bench/RESULTS.md give sizes (it printed "3.6 MB")
    total = run["total_bytes"] / 1024 ** (2 if run["total_bytes"] >= 1024 ** 2 else 1)
    unit = "MiB" if run["total_bytes"] >= 1024 ** 2 else "KiB"
    assert f"{total:.1f} {unit}" in table.output, table.output
    assert not re.search(r"\d (KB|MB|GB)\b", table.output), table.output


# disk use of training runs (published versions and checkpoints pruned, leftovers removed)
def test_traj_runs_on_a_store_without_runs_says_so_once(tmp_path: Path) -> None:
    # "training runs in S: no rows (no training runs in S)" named the store twice
    write_synthetic_store(tmp_path, 1)
    r = CliRunner().invoke(app, ["runs", str(tmp_path)], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    assert r.output == f"training runs in {tmp_path}: no rows (no run has trained on this store yet)\n"
