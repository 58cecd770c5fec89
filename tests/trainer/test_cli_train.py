"""`traj train` through typer's CliRunner: a JSON summary, and one-line errors for refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajstore.cli.main import app

from tests.helpers.stores import write_synthetic_store

BASE = ["--model", "tiny-llama", "--batch-size", "4", "--micro-batch-size", "2", "--max-seq-len", "512",
        "--critic-warmup-steps", "1"]


def _run(*args: str):  # noqa: ANN202
    return CliRunner().invoke(app, ["train", *args], env={"TRAJ_TRACEBACK": ""})


def test_train_prints_a_json_summary(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 12)
    r = _run(str(tmp_path), *BASE, "--run-id", "c1", "--max-steps", "2", "--format", "json",
             "--where", "num_actions = 3")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)  # notes (memory plan) go to stderr
    assert (out["iterations"], out["steps"], out["policy_version"]) == (3, 2, 2)
    assert out["last_metrics"]["data/trajectories"] == 4
    assert (tmp_path / "policies" / "c1" / "v2" / "meta.json").exists()


@pytest.mark.parametrize(("setup", "args", "message"), [
    ({"tokenizer": "other/tokenizer"}, [], "field tokenizer is 'other/tokenizer' but the model's tokenizer is 'tiny-llama'"),
    ({"with_logprobs": False}, [], "no rollout log-probs for its actions"),
    ({}, ["--where", "bogus_col > 1"], "is not a valid predicate"),
    ({}, ["--advantage", "magic"], "invalid option --advantage"),
])
def test_refusals_are_one_clear_line(tmp_path: Path, setup: dict, args: list[str], message: str) -> None:
    write_synthetic_store(tmp_path, 2, **setup)
    r = _run(str(tmp_path), *BASE, "--run-id", "bad", *args)
    assert r.exit_code == (2 if "invalid option" in message else 1), r.output  # 2: a bad option value
    errors = [line for line in r.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and message in errors[0]
    assert "Traceback" not in r.output


@pytest.mark.parametrize(("args", "message"), [
    # The --where connection could read any file and take predicates that reshape its query.
    (["--where", "(SELECT count(*) FROM read_csv('/etc/passwd')) > 0"], "file system operations are disabled"),
    (["--where", "1=1) ORDER BY (1"], "must be one boolean expression"),
    (["--where", "1=1) UNION SELECT 1 --"], "is not a valid predicate"),
    # Bad devices were raw RuntimeError / AttributeError tracebacks from torch.
    (["--device", "tpu"], "invalid option --device: expected auto, cpu, cuda or cuda:N"),
    (["--storage-option", "novalue"], "invalid option --storage-option: expected key=value"),
])
def test_more_refusals_are_one_clear_line(tmp_path: Path, args: list[str], message: str) -> None:
    write_synthetic_store(tmp_path, 2)
    r = _run(str(tmp_path), *BASE, "--run-id", "bad", *args)
    assert r.exit_code == (2 if "invalid option" in message else 1), r.output  # README: 2 = bad option value
    errors = [line for line in r.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and message in errors[0], r.output
    assert "Traceback" not in r.output


def test_cuda_device_without_cuda_is_one_line(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    write_synthetic_store(tmp_path, 2)
    r = _run(str(tmp_path), *BASE, "--run-id", "bad", "--device", "cuda")
    assert r.exit_code == 1 and "CUDA is not available" in r.output, r.output


def test_missing_store_without_follow_is_an_error(tmp_path: Path) -> None:
    # A mistyped path used to "train" 0 iterations, exit 0 and create a store with policies/ there.
    missing = tmp_path / "no-such-store"
    r = _run(str(missing), *BASE, "--run-id", "m1", "--max-steps", "1")
    assert r.exit_code == 1 and "no store at" in r.output, r.output
    assert not missing.exists()
