"""The training step reads device tensors on the host once (issue 22): its statistics stay typed
tensors until log_metrics, which reads them all with one ``.tolist()``, whatever the number of
micro-batches. Counted on CPU by wrapping every tensor-to-Python conversion (``item``,
``tolist``, ``float()``, ``int()``, ``bool()``) and attributing each call to the file that made
it: the loop's own files (trainer/loop/) must make exactly one per step. The math the loop calls
(estimators, losses) and torch itself have syncs of their own, which this test lists on failure
but does not count: they belong to those modules."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import pytest
import torch

from trajstore.trainer.loop.config import AlgoConfig, DataConfig, ModelConfig, RunConfig, TrainConfig
from trajstore.trainer.loop.setup import setup
from trajstore.trainer.loop.step import train_step

from tests.helpers.stores import write_synthetic_store
from tests.helpers.trajectories import VOCAB

LOOP_DIR = str(Path(__import__("trajstore.trainer.loop", fromlist=["x"]).__file__).parent)
CONVERSIONS = ("item", "tolist", "__float__", "__int__", "__bool__")


def _count_conversions(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """Wrap every tensor-to-Python conversion; count calls by the calling file (and line)."""
    seen: collections.Counter[str] = collections.Counter()
    for name in CONVERSIONS:
        original = getattr(torch.Tensor, name)

        def counted(self, *a, _original=original, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
            caller = sys._getframe(1)
            seen[f"{caller.f_code.co_filename}:{caller.f_lineno}"] += 1
            return _original(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return seen


def _loop_calls(seen: collections.Counter[str]) -> dict[str, int]:
    return {k: v for k, v in seen.items() if k.startswith(LOOP_DIR)}


@pytest.mark.parametrize("micro", [1, 4])
def test_one_host_sync_per_step_from_the_loop_whatever_the_micro_batches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, micro: int) -> None:
    write_synthetic_store(tmp_path, 8)
    cfg = TrainConfig(store=str(tmp_path), model=ModelConfig(name="tiny-llama", tiny_vocab_size=VOCAB),
                      data=DataConfig(batch_size=4, micro_batch_size=micro, max_seq_len=512),
                      algo=AlgoConfig(critic_warmup_steps=1, critic_updates=2),
                      run=RunConfig(run_id="r", progress=False))
    tr = setup(cfg)
    batches = [tr.stream.next_batch(), tr.stream.next_batch()]
    tr.stream.close()
    seen = _count_conversions(monkeypatch)
    for batch, warmup in zip(batches, (True, False)):  # one critic warm-up iteration, then a policy step
        seen.clear()
        metrics, consumed = train_step(tr, batch)
        assert ("policy/loss" in metrics) != warmup  # the kind of step the test meant
        calls = _loop_calls(seen)
        others = {k: v for k, v in seen.items() if k not in calls}
        # 4 trajectories: micro-batches of 1 run 4 passes per update, of 4 one pass; the loop's own
        # reads stay at one (log_metrics' single .tolist())
        assert sum(calls.values()) == 1, (calls, others)
        (where,) = calls
        assert where.startswith(str(Path(LOOP_DIR) / "step_stats.py")), where
    # the one read carried everything: the ratios of the consumed rows and the value-loss stats
    assert all(r["ratio_mean"] is not None for r in consumed) and "value/clip_frac" in metrics
