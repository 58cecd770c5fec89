"""trainer/loop/stop.py: SIGTERM finishes the publish under way and stops with a checkpoint; a
second SIGTERM rolls the publish back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.stores import write_synthetic_store
from tests.helpers.trajectories import VOCAB
from trajstore.policies import latest_policy_version, list_policy_versions
from trajstore.trainer.config import AlgoConfig, DataConfig, ModelConfig, RunConfig, TrainConfig
from trajstore.trainer.loop.stop import TrainingInterrupted
from trajstore.trainer.loop.train import train


def _cfg(store: Path, **data) -> TrainConfig:
    return TrainConfig(store=str(store), model=ModelConfig(name="tiny-llama", tiny_vocab_size=VOCAB),
                       data=DataConfig(batch_size=2, micro_batch_size=2, max_seq_len=512, **data),
                       algo=AlgoConfig(critic_warmup_steps=0),
                       run=RunConfig(run_id="r", progress=False, checkpoint_every=100))


def _tmp_entries(root: Path) -> list[str]:
    return sorted(os.listdir(root / "_tmp")) if (root / "_tmp").exists() else []


def _patch_save(monkeypatch: pytest.MonkeyPatch, signals: int, at_version: int) -> None:
    """Send `signals` SIGTERMs to this process while version `at_version`'s weights are written."""
    import safetensors.torch

    original = safetensors.torch.save_file

    def save(tensors, filename, metadata=None):  # noqa: ANN001, ANN202
        original(tensors, filename, metadata=metadata)
        if _count[0] == at_version:
            for _ in range(signals):
                os.kill(os.getpid(), signal.SIGTERM)
        _count[0] += 1

    _count = [0]
    monkeypatch.setattr(safetensors.torch, "save_file", save)


# what `traj train` tells its user while it runs and how it stops
def test_sigterm_during_a_publish_finishes_it_and_stops_cleanly(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    write_synthetic_store(tmp_path, 8)
    _patch_save(monkeypatch, signals=1, at_version=1)  # while v1 is written (v0 is the 0th publish)
    s = train(_cfg(tmp_path))
    assert s.iterations == 1 and s.version == 1  # v1's step finished, then the run ended
    assert s.warnings and s.warnings[0].startswith("stopped by SIGTERM after iteration 1: checkpointed and published v1")
    assert latest_policy_version(tmp_path, "r") == 1 and list_policy_versions(tmp_path, "r") == [0, 1]
    assert json.loads((tmp_path / "runs/r/checkpoints/LATEST").read_text())["iteration"] == 1
    assert _tmp_entries(tmp_path) == []
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored


# what `traj train` tells its user while it runs and how it stops
def test_a_second_sigterm_rolls_the_publish_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capfd: pytest.CaptureFixture[str]) -> None:
    write_synthetic_store(tmp_path, 8)
    _patch_save(monkeypatch, signals=2, at_version=1)
    with pytest.raises(TrainingInterrupted, match="second SIGTERM") as e:
        train(_cfg(tmp_path))
    # walkthrough: the first SIGTERM printed nothing, the second offered --resume of a run without
    # any checkpoint
    first = [ln for ln in capfd.readouterr().err.splitlines() if ln.startswith("SIGTERM received")]
    assert first == ["SIGTERM received: stopping after the current iteration (now: 1 iteration(s) done), then a final "
                     "checkpoint and publish (a long pass may take minutes); a second SIGTERM interrupts at once"]
    assert "--resume continues" not in str(e.value)
    assert "no checkpoint yet: its 1 recorded iteration(s) cannot be resumed without one: start a new --run" in str(
        e.value)  # iteration 1's records were written before its publish was interrupted
    assert str(tmp_path / "policies" / "r") in str(e.value) and "traj gc keeps" in str(e.value)
    assert latest_policy_version(tmp_path, "r") == 0 and list_policy_versions(tmp_path, "r") == [0]
    assert not (tmp_path / "policies/r/v1").exists()
    assert _tmp_entries(tmp_path) == []  # the half-written v1 is gone


# what `traj train` tells its user while it runs and how it stops
@pytest.mark.slow
def test_sigterm_to_a_following_traj_train_exits_0_with_a_checkpoint(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 4)
    cmd = [sys.executable, "-c", "from trajstore.cli.main import app; app()", "train", str(tmp_path), "--model",
           "tiny-llama", "--run", "f", "--batch-size", "2", "--max-seq-len", "512", "--critic-warmup-steps", "0",
           "--follow", "--poll-interval", "0.2", "--format", "json"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "TRAJ_TRACEBACK": "1"})
    seen: list[str] = []
    waiting = threading.Event()

    def read() -> None:
        for line in p.stderr:  # type: ignore[union-attr]
            seen.append(line)
            if line.startswith("waiting for new trajectories"):
                waiting.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert waiting.wait(120), "".join(seen)
    assert "4 seen so far, 0/2 for the next step" in "".join(seen)
    steps = tmp_path / "runs/f/steps"
    deadline = time.monotonic() + 120  # the reader thread reads ahead: wait until both batches trained
    while time.monotonic() < deadline and len(list(steps.glob("*.parquet")) if steps.exists() else []) < 2:
        time.sleep(0.1)
    p.send_signal(signal.SIGTERM)
    # stderr belongs to the reader thread alone: communicate() would race it for the last lines
    p.wait(timeout=60)  # the JSON summary on stdout is a few hundred bytes: it cannot fill the pipe
    out = p.stdout.read()  # type: ignore[union-attr]
    reader.join(timeout=30)
    assert p.returncode == 0, "".join(seen)
    assert any("warning: stopped by SIGTERM after iteration 2" in line for line in seen), "".join(seen)
    assert json.loads(out)["iterations"] == 2
    assert json.loads((tmp_path / "runs/f/checkpoints/LATEST").read_text())["iteration"] == 2
    assert _tmp_entries(tmp_path) == []


def test_a_second_sigterm_after_a_checkpoint_offers_resume_from_it(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    write_synthetic_store(tmp_path, 8)
    _patch_save(monkeypatch, signals=2, at_version=2)
    cfg = _cfg(tmp_path)
    cfg.run.checkpoint_every = 1
    with pytest.raises(TrainingInterrupted, match=r"--resume continues from the last checkpoint \(iteration 1\)"):
        train(cfg)


def test_no_checkpoint_and_nothing_recorded_says_rerun_the_same_command(tmp_path: Path) -> None:
    from trajstore import open_store
    from trajstore.trainer.loop.resume import interrupted_rerun_hint

    hint = interrupted_rerun_hint(open_store(str(tmp_path)), "r", iterations=0)
    assert hint.startswith("rerun the same command to start it again") and str(tmp_path / "policies" / "r") in hint
