"""trainer/apps/learning_bench/stats.py: AUC, bootstrap intervals and verdicts."""

from __future__ import annotations

import math

import pytest

from trajstore.trainer.apps.learning_bench.stats import CLAIMS, auc, bootstrap_interval, verdict


# issue 16: a new-user walkthrough finding (a slip in what a command prints)
def test_one_seed_interval_reads_n_a_not_nan() -> None:
    pytest.importorskip("torch")
    from trajstore.trainer.apps.learning_bench.stats import CLAIMS, bootstrap_interval, verdict

    iv = bootstrap_interval([-0.1])
    assert not iv.has_interval and iv.describe() == "difference -0.100, CI n/a (1 seed)"
    v, why = verdict(CLAIMS[0], iv)
    assert v == "undetermined" and "nan" not in why and "CI n/a (1 seed)" in why
    assert "95% CI [" in bootstrap_interval([-0.1, 0.2, 0.0]).describe()


def test_auc_bootstrap_and_verdicts_by_hand() -> None:
    # trapezoids: 10 * (.5 + .7) / 2 + 10 * (.7 + .6) / 2 = 12.5 over 20 steps = .625
    assert auc([{"step": 0, "reward": .5}, {"step": 10, "reward": .7}, {"step": 20, "reward": .6}]) == pytest.approx(.625)
    assert math.isnan(auc([{"step": 0, "reward": .5}]))
    iv = bootstrap_interval([-0.1] * 5)
    assert (iv.mean, iv.low, iv.high, iv.excludes_zero()) == (pytest.approx(-0.1), pytest.approx(-0.1),
                                                               pytest.approx(-0.1), -1)
    claim = next(c for c in CLAIMS if c.key == "k2-vs-k1")  # paper: sao beats sao-k1, expect arm - ref < 0
    assert verdict(claim, iv)[0] == "reproduced"
    assert verdict(claim, bootstrap_interval([0.1] * 5))[1].startswith("opposite direction")
    assert verdict(claim, bootstrap_interval([-0.1, 0.1, -0.2, 0.2, 0.0]))[0] == "not reproduced"
    dis = next(c for c in CLAIMS if c.key == "dis-vs-none")
    assert verdict(dis, iv, dis_masked=1e-4)[0] == "not testable at this scale"
    grpo = next(c for c in CLAIMS if c.key == "sao-vs-grpo")
    assert verdict(grpo, bootstrap_interval([0.0, 0.01, -0.01, 0.02, -0.02]))[0] == "not testable at this scale"
    # one seed (the smoke preset): a difference without an interval is no verdict either way
    one = verdict(claim, bootstrap_interval([-0.1]))
    assert one[0] == "undetermined" and one[1].startswith("fewer than 2 paired seeds, no interval")
    assert verdict(dis, bootstrap_interval([0.3]), dis_masked=1e-4)[0] == "undetermined"
