"""trainer/loop/trainer.py: a critic that starts useful (issue 14, Build 7): the warm-up runs until the
critic's explained variance on a batch it has not trained on is above 0 (or the budget runs out),
and a policy step whose critic does not explain the returns is flagged in the records, on the
progress line and in the run's summary."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from tests.helpers.stores import write_synthetic_store
from tests.helpers.trajectories import VOCAB
from trajstore.trainer.config import AlgoConfig, DataConfig, ModelConfig, RunConfig, TrainConfig
from trajstore.trainer.loop import step_stats
from trajstore.trainer.loop import train as loop


def _scripted_ev(monkeypatch: pytest.MonkeyPatch, evs: list[float]) -> None:
    """Make the step's explained variance (values before the critic update, as log_metrics
    computes it from the step's summed moments) follow `evs`."""
    it = iter(evs)
    monkeypatch.setattr(step_stats, "explained_variance_of_sums", lambda *_sums: next(it))


def _cfg(store: Path, **algo) -> TrainConfig:
    return TrainConfig(store=str(store), model=ModelConfig(name="tiny-llama", tiny_vocab_size=VOCAB),
                       data=DataConfig(batch_size=2, micro_batch_size=2, max_seq_len=512),
                       algo=AlgoConfig(**algo), run=RunConfig(run_id="w", progress=False))


def _steps(store: Path) -> list[tuple[int, float, float | None]]:
    """(step, explained variance, warning flag) per iteration, from the records."""
    q = (f"SELECT step, max(value) FILTER (metric = 'value/explained_variance'), "
         f"max(value) FILTER (metric = 'warn/critic_ev_not_positive') "
         f"FROM '{store}/runs/w/steps/*.parquet' GROUP BY step ORDER BY step")
    return duckdb.sql(q).fetchall()


def test_warm_up_ends_once_the_critic_explains_an_unseen_batch(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    write_synthetic_store(tmp_path, 12)  # 6 iterations of 2
    # iteration 0: the zero head explains nothing (EV 0), 1: worse, 2: better than the mean -> ends
    _scripted_ev(monkeypatch, [0.0, -0.4, 0.25, 0.3, 0.5, 0.6])
    s = loop.train(_cfg(tmp_path, critic_warmup_steps=10))
    assert (s.iterations, s.steps) == (6, 3)  # 3 warm-up iterations (budget 10), then 3 policy steps
    # warm-up iterations are recorded as steps -10, -9, -8 (counted from the budget)
    assert _steps(tmp_path) == [(-10, 0.0, 1.0), (-9, -0.4, 1.0), (-8, 0.25, 0.0), (0, 0.3, 0.0), (1, 0.5, 0.0),
                                (2, 0.6, 0.0)]
    assert s.warnings == []


def test_warm_up_budget_runs_out_and_the_policy_steps_are_flagged(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    write_synthetic_store(tmp_path, 10)
    _scripted_ev(monkeypatch, [0.0, -0.2, -0.1, 0.4, -0.3])
    s = loop.train(_cfg(tmp_path, critic_warmup_steps=2))
    assert (s.iterations, s.steps) == (5, 3)  # the budget of 2 ran out with EV <= 0
    assert [r[2] for r in _steps(tmp_path)] == [1.0, 1.0, 1.0, 0.0, 1.0]
    assert s.warnings == ["the critic's explained variance was not above 0 on 2 of 3 policy steps (first policy "
                          "step: -0.1); its values added noise to those advantages (a longer warm-up, "
                          "--critic-warmup-steps, or a larger --critic-lr helps)"]


def test_a_fixed_warm_up_ignores_explained_variance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_synthetic_store(tmp_path, 8)
    _scripted_ev(monkeypatch, [0.9, 0.9, 0.9, 0.9])
    s = loop.train(_cfg(tmp_path, critic_warmup_steps=3, critic_warmup_until="budget"))
    assert (s.iterations, s.steps) == (4, 1)


def test_warm_up_state_survives_a_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_synthetic_store(tmp_path, 8)
    _scripted_ev(monkeypatch, [0.0, 0.5, 0.1, 0.1])
    cfg = _cfg(tmp_path, critic_warmup_steps=10)
    cfg.run.max_steps = 1
    assert loop.train(cfg).steps == 1  # warm-up ended at iteration 1, policy step at iteration 2
    cfg.run.max_steps = None
    s = loop.train(cfg, resume=True)  # iteration 3 continues with a policy step, not the warm-up
    assert (s.iterations, s.steps) == (4, 2)
