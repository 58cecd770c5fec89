"""trainer/apps/throughput/forkjoin.py: the fork-join model against values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trajstore.trainer.apps.throughput.forkjoin import (
    StepInputs,
    episode_mean_s,
    expected_max_s,
    lognormal_mean,
    predicted_step_s,
    turn_pmf,
)
from trajstore.trainer.apps.throughput.trace import EnvSpec, LatencyTrace

ONE_TURN = EnvSpec(median_s=0.2, sigma=1.0, mean_turns=1.0, max_turns=1)


def test_lognormal_mean_by_hand() -> None:
    assert lognormal_mean(0.2, 1.0) == pytest.approx(0.2 * math.e ** 0.5)  # 0.329744
    assert lognormal_mean(0.2, 1.0) == pytest.approx(0.329744, abs=1e-6)


def test_turn_pmf_of_a_cut_geometric_by_hand() -> None:
    # mean 2 (p = 1/2) cut at 3: P(1) = 1/2, P(2) = 1/4, P(3) = P(G >= 3) = 1/4; mean 1.75
    pmf = turn_pmf(EnvSpec(mean_turns=2.0, max_turns=3))
    assert pmf.tolist() == [0.5, 0.25, 0.25]
    assert episode_mean_s(EnvSpec(median_s=0.2, sigma=1.0, mean_turns=2.0, max_turns=3), 0.1) == pytest.approx(
        1.75 * (0.1 + 0.329744), abs=1e-6)


def test_expected_max_of_one_episode_is_its_mean() -> None:
    assert expected_max_s(1, ONE_TURN, 0.0) == pytest.approx(0.329744, abs=1e-6)
    spec = EnvSpec(median_s=0.2, sigma=1.0, mean_turns=3.0, max_turns=12)
    assert expected_max_s(1, spec, 0.05) == pytest.approx(episode_mean_s(spec, 0.05), rel=1e-6)


def test_expected_max_of_two_lognormals_by_hand() -> None:
    # E[max(X1, X2)] = 2 E[X] Phi(sigma / sqrt 2): 2 x 0.329744 x Phi(0.707107) = 0.659488 x 0.760250 = 0.501376;
    # a model call of 0.1 s adds 0.1 to each episode, so to the maximum
    assert expected_max_s(2, ONE_TURN, 0.0) == pytest.approx(0.501376, abs=1e-6)
    assert expected_max_s(2, ONE_TURN, 0.1) == pytest.approx(0.601376, abs=1e-6)


def test_expected_max_grows_with_the_batch_and_sigma_and_matches_simulation() -> None:
    spec = EnvSpec(median_s=0.2, sigma=1.0, mean_turns=3.0, max_turns=12)
    values = [expected_max_s(b, spec, 0.03) for b in (1, 2, 4, 8, 16)]
    assert values == sorted(values) and values[-1] > 3 * values[0]
    assert expected_max_s(8, EnvSpec(sigma=1.5), 0.03) > expected_max_s(8, EnvSpec(sigma=0.5), 0.03)
    # against the maxima of 3,000 simulated batches of 8 from the trace's own distribution (sd ~1.7%)
    t = LatencyTrace(11, 24000, spec)
    d = (t.env_seconds(range(24000)) + 0.03 * t.turns).reshape(-1, 8).max(axis=1)
    assert expected_max_s(8, spec, 0.03) == pytest.approx(float(np.mean(d)), rel=0.06)


def _inputs(train_s: float) -> StepInputs:
    # one turn of exactly median 1 s would need sigma 0: take the sync/one-step tail from one turn
    return StepInputs(ONE_TURN, batch_size=2, workers=4, call_s=0.0, train_s=train_s)


def test_sync_and_one_step_by_hand() -> None:
    # B = 2 one-turn episodes: the fork-join tail is 0.501376 s
    assert predicted_step_s("sync", _inputs(0.3)) == pytest.approx(0.501376 + 0.3, abs=1e-6)
    assert predicted_step_s("one-step", _inputs(0.3)) == pytest.approx(0.501376, abs=1e-6)
    assert predicted_step_s("one-step", _inputs(0.9)) == pytest.approx(0.9)  # the trainer is the bound


def test_async_is_bounded_by_slots_the_gate_and_the_trainer_by_hand() -> None:
    spec = EnvSpec(median_s=0.2, sigma=1.0, mean_turns=1.0, max_turns=1)  # E[D] = 0.329744 + g
    g = 1.0 - lognormal_mean(0.2, 1.0)  # so that E[D] = 1.0 s exactly
    inp = StepInputs(spec, batch_size=8, workers=16, call_s=g, train_s=0.5)
    # X = min(W / E[D], (eta + 1/2) B / (E[D] + T), B / T) = min(16, (eta + .5) 8 / 1.5, 16); step = 8 / X
    assert predicted_step_s("async", inp, 1) == pytest.approx(8 / (1.5 * 8 / 1.5))  # gate: 1.0 s
    assert predicted_step_s("async", inp, 2) == pytest.approx(8 / (2.5 * 8 / 1.5))  # gate: 0.6 s
    assert predicted_step_s("async", inp, 8) == pytest.approx(0.5)  # slots and trainer: 16 / s
    slow = StepInputs(spec, batch_size=8, workers=16, call_s=g, train_s=2.0)
    assert predicted_step_s("async", slow, 8) == pytest.approx(2.0)  # the trainer: B / T = 4 / s
    few = StepInputs(spec, batch_size=8, workers=4, call_s=g, train_s=0.1)
    assert predicted_step_s("async", few, 8) == pytest.approx(2.0)  # the slots: W / E[D] = 4 / s


def test_unknown_arm_kinds_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown arm kind"):
        predicted_step_s("async", _inputs(0.1))
    with pytest.raises(ValueError, match="unknown arm kind"):
        predicted_step_s("batch", _inputs(0.1))
