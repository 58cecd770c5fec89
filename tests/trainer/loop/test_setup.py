"""trainer/loop/setup.py: what a run checks and cleans before it loads a model."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.helpers.stores import write_synthetic_store
from tests.helpers.training import assert_nothing_written, disk_config, refusal_config
from trajstore.trainer.loop import setup as loop_setup
from trajstore.trainer.loop.setup import setup
from trajstore.trainer.loop.train import train


def _age(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.utime(p, (t, t))


# disk use of training runs (published versions and checkpoints pruned, leftovers removed)
def test_stale_tmp_leftovers_are_removed_when_a_trainer_starts(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 2)
    (tmp_path / "_tmp" / "ckpt-dead").mkdir(parents=True)
    (tmp_path / "_tmp" / "ckpt-dead" / "optim.pt").write_bytes(b"0" * 100)
    _age(tmp_path / "_tmp" / "ckpt-dead", 3700)
    train(disk_config(tmp_path))
    assert not (tmp_path / "_tmp" / "ckpt-dead").exists()


# adversarial input: `traj train` attacked with bad input (each case lost data or gave a traceback before)
def test_text_only_data_is_refused_before_the_model_is_loaded(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """New-user walkthrough: the refusal took 17 s because the model was loaded first."""
    write_synthetic_store(tmp_path, 2, with_logprobs=False)

    def no_load(*_a, **_k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the model was loaded before the data was checked")

    monkeypatch.setattr(loop_setup, "load_policy", no_load)
    with pytest.raises(Exception, match="no rollout log-probs"):
        setup(refusal_config(tmp_path))
    assert_nothing_written(tmp_path)
