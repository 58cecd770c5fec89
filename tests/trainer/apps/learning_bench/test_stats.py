"""trainer/apps/learning_bench/stats.py: AUC, Student-t intervals and Holm's correction (the
verdict rules are tested in test_verdicts.py, their null false-positive rate in test_null_rate.py)."""

from __future__ import annotations

import math

import pytest

from trajstore.trainer.apps.learning_bench.stats import auc, holm, t_interval


# issue 16: a new-user walkthrough finding (a slip in what a command prints)
def test_one_seed_interval_reads_n_a_not_nan() -> None:
    iv = t_interval([-0.1])
    assert not iv.has_interval and iv.describe() == "difference -0.100, CI n/a (1 seed)"
    assert "95% CI [" in t_interval([-0.1, 0.2, 0.0]).describe()


def test_auc_and_t_interval_by_hand() -> None:
    # trapezoids: 10 * (.5 + .7) / 2 + 10 * (.7 + .6) / 2 = 12.5 over 20 steps = .625
    assert auc([{"step": 0, "reward": .5}, {"step": 10, "reward": .7}, {"step": 20, "reward": .6}]) == pytest.approx(.625)
    assert math.isnan(auc([{"step": 0, "reward": .5}]))
    # 1..5: mean 3, sd sqrt(2.5), se 0.7071; t(0.975, 4 df) = 2.7764 -> half-width 1.9632;
    # t = 4.243 on 4 df: two-sided p = 0.0132
    iv = t_interval([1, 2, 3, 4, 5])
    assert (iv.mean, iv.low, iv.high, iv.n) == (3, pytest.approx(1.0368, abs=1e-4), pytest.approx(4.9632, abs=1e-4), 5)
    assert iv.p == pytest.approx(0.0132, abs=2e-4)
    # 10 seeds: t(0.975, 9 df) = 2.2622
    iv10 = t_interval([0.0, 1.0] * 5)  # mean .5, sd .5270, se .1667
    assert iv10.high - iv10.mean == pytest.approx(2.2622 * 0.5270 / math.sqrt(10), abs=1e-3)
    assert t_interval([-0.1] * 5).p == 0.0 and t_interval([0.0] * 5).p == 1.0
    assert "t-test p = 0.013" in iv.describe()
    assert "t-test p < 0.001" in t_interval([1.0, 1.1, 0.9, 1.0, 1.05]).describe()


def test_holm_by_hand() -> None:
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> monotone 0.02, 0.03, 0.06, 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0]) and holm([]) == []
    # ties: 0.002 x 3 = 0.006, 0.002 x 2 = 0.004 -> 0.006 (monotone), 0.5 x 1
    assert holm([0.002, 0.5, 0.002]) == pytest.approx([0.006, 0.5, 0.006])
