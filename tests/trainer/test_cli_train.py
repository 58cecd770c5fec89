"""`traj train` through typer's CliRunner: a JSON summary, and one-line errors for refusals."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajstore.cli.main import app

sys.path.insert(0, str(Path(__file__).resolve().parent))  # --import-mode=importlib: helpers by path
from _train_synth import write_synthetic_store  # noqa: E402

BASE = ["--model", "tiny-llama", "--batch-size", "4", "--micro-batch-size", "2", "--max-seq-len", "512",
        "--critic-warmup-steps", "1"]


def _run(*args: str):  # noqa: ANN202
    return CliRunner().invoke(app, ["train", *args], env={"TRAJ_TRACEBACK": ""})


def test_train_prints_a_json_summary(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 12)
    r = _run(str(tmp_path), *BASE, "--run-id", "c1", "--max-steps", "2", "--format", "json",
             "--where", "num_actions = 3")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert (out["iterations"], out["steps"], out["policy_version"]) == (3, 2, 2)
    assert out["last_metrics"]["data/trajectories"] == 4
    assert (tmp_path / "policies" / "c1" / "v2" / "meta.json").exists()


@pytest.mark.parametrize(("setup", "args", "message"), [
    ({"tokenizer": "other/tokenizer"}, [], "field tokenizer is 'other/tokenizer' but the model's tokenizer is 'tiny-llama'"),
    ({"with_logprobs": False}, [], "no rollout log-probs for its actions"),
    ({}, ["--where", "bogus_col > 1"], "is not a valid predicate"),
    ({}, ["--advantage", "magic"], "advantage"),
])
def test_refusals_are_one_clear_line(tmp_path: Path, setup: dict, args: list[str], message: str) -> None:
    write_synthetic_store(tmp_path, 2, **setup)
    r = _run(str(tmp_path), *BASE, "--run-id", "bad", *args)
    assert r.exit_code == 1
    errors = [line for line in r.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and message in errors[0]
    assert "Traceback" not in r.output
