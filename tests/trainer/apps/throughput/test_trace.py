"""trainer/apps/throughput/trace.py: the latency trace is a function of its seed (every arm replays
the same draws), indexed by (episode, turn), paired across sigmas, and a longer trace starts with
the shorter one."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trajstore.trainer.apps.throughput.trace import EnvSpec, LatencyTrace


def test_the_same_seed_gives_the_same_trace_and_another_seed_another() -> None:
    spec = EnvSpec()
    a, b, c = LatencyTrace(7, 50, spec), LatencyTrace(7, 50, spec), LatencyTrace(8, 50, spec)
    assert np.array_equal(a.turns, b.turns) and np.array_equal(a.latencies_s, b.latencies_s)
    assert np.array_equal(a.rewards, b.rewards)
    assert not np.array_equal(a.latencies_s, c.latencies_s)
    assert [a.episode(i) for i in range(50)] == [b.episode(i) for i in range(50)]


def test_an_episode_is_its_turns_latencies_indexed_by_episode_and_turn() -> None:
    t = LatencyTrace(3, 20, EnvSpec(max_turns=5))
    for i in range(20):
        e = t.episode(i)
        assert e.index == i and 1 <= e.turns <= 5 and e.turns == t.turns[i]
        assert e.latencies_s == tuple(t.latency(i, k) for k in range(e.turns))
        assert e.reward in (0.0, 1.0)
    with pytest.raises(IndexError, match="holds 20 episodes; episode 20"):
        t.episode(20)
    with pytest.raises(IndexError, match="turns, not turn"):
        t.latency(0, int(t.turns[0]))


def test_a_longer_trace_starts_with_the_shorter_one() -> None:
    spec = EnvSpec()
    short, long = LatencyTrace(1, 10, spec), LatencyTrace(1, 40, spec)
    assert np.array_equal(short.latencies_s, long.latencies_s[:10]) and np.array_equal(short.turns, long.turns[:10])


def test_sigmas_are_paired_same_turns_and_normals_scaled() -> None:
    # one Z per (episode, turn): log(latency / median) = sigma * Z, so across sigmas the ratio is fixed
    lo, hi = LatencyTrace(5, 30, EnvSpec(sigma=0.5)), LatencyTrace(5, 30, EnvSpec(sigma=1.5))
    assert np.array_equal(lo.turns, hi.turns) and np.array_equal(lo.rewards, hi.rewards)
    np.testing.assert_allclose(np.log(hi.latencies_s / 0.2), 3 * np.log(lo.latencies_s / 0.2), rtol=1e-12)


def test_draws_follow_the_distribution() -> None:
    # median 0.2 s, sigma 1: the sample median of 4,000 draws is within 5% of 0.2; the turn count is
    # geometric with mean 3 cut at 12: its mean is sum_{k<12} P(K > k) = (1 - (2/3)^12) / (1/3) = 2.977
    t = LatencyTrace(0, 4000, EnvSpec(median_s=0.2, sigma=1.0, mean_turns=3.0, max_turns=12))
    assert abs(np.median(t.latencies_s) / 0.2 - 1) < 0.05
    assert abs(t.turns.mean() - 3 * (1 - (2 / 3) ** 12)) < 0.1
    assert t.turns.max() <= 12 and t.turns.min() == 1
    assert abs(t.rewards.mean() - 0.5) < 0.05


def test_env_seconds_sums_each_episodes_own_turns() -> None:
    t = LatencyTrace(2, 6, EnvSpec(max_turns=4))
    want = [sum(t.latency(i, k) for k in range(t.turns[i])) for i in (1, 3, 4)]
    assert t.env_seconds([1, 3, 4]).tolist() == pytest.approx(want, rel=1e-12)
    assert all(math.isfinite(x) for x in want)
