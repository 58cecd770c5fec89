"""trainer/apps/learning_bench/null_rate.py: the verdict rule's false-positive rate under no
effect, by simulation at the default preset's seed count (bench/LEARNING.md, "Decision rules",
rule 2): symmetric, skewed and one-outlier shapes, and the mean-zero asymmetric shapes where no
test of the mean holds its level."""

from __future__ import annotations

import random

import pytest

from trajstore.trainer.apps.learning_bench.claims import CLAIMS
from trajstore.trainer.apps.learning_bench.null_rate import MEAN_ZERO_ASYMMETRIC, NO_EFFECT, false_positive_rates
from trajstore.trainer.apps.learning_bench.presets import SuiteConfig
from trajstore.trainer.apps.learning_bench.signflip import signflip_p
from trajstore.trainer.apps.learning_bench.stats import t_interval
from trajstore.trainer.apps.learning_bench.verdicts import NOT_REPRODUCED, REPRODUCED, decide

TRIALS = 4000
"""Null experiments per shape (binomial sd of a 5 % rate: 0.34 %)."""


def test_the_rate_is_the_verdict_rules() -> None:
    """For one claim in a family of one, the rule gives a significant verdict either way
    (reproduced, or significantly opposite) exactly when the sign-flip p is below 0.05: the
    simulated rate below is the rule's."""
    claim = next(c for c in CLAIMS if c.key == "k2-vs-k1")
    rng = random.Random("rule")
    for _ in range(200):
        d = [rng.gauss(0.01, 0.02) for _ in range(10)]
        dec = decide([(claim, t_interval(d), True)])[0]
        significant = dec.verdict == REPRODUCED or (dec.verdict == NOT_REPRODUCED and dec.p_holm < 0.05)
        assert significant == (signflip_p(d) < 0.05)


@pytest.mark.parametrize("shape", list(NO_EFFECT))
def test_the_rule_holds_its_level_under_no_effect_whatever_the_shape(shape: str) -> None:
    """No effect: the two arms of a seed are exchangeable, so each paired difference is as likely
    to have the other sign, whatever the shape of each arm's outcomes (skewed; collapsing seeds;
    exactly one outlier seed). The sign-flip test is exact under that null: a significant verdict
    in at most 5 % of experiments (<= 6 % of 4,000 allows for simulation error). The t-interval,
    shown beside it, also stays at or below its level here. Rules v1's percentile bootstrap of 5
    seeds gave ~16 %."""
    n = len(SuiteConfig.preset_config("default").seeds)
    assert n >= 10
    sf, t = false_positive_rates(NO_EFFECT[shape], n=n, trials=TRIALS, seed=f"test-{shape}")
    assert sf <= 0.06 and t <= 0.06, (shape, sf, t)
    if shape == "normal":  # not trivially conservative either
        assert sf >= 0.03, sf


@pytest.mark.parametrize("shape", list(MEAN_ZERO_ASYMMETRIC))
def test_no_test_of_the_mean_holds_its_level_on_asymmetric_mean_zero_differences(shape: str) -> None:
    """The documented limit (bench/LEARNING.md, rule 2): differences with mean 0 but a skewed
    distribution (an arm slightly better on most seeds that collapses on 1 in 10) are not "no
    effect" (the arms differ), yet their mean is 0. Ten seeds often hold no collapse and then
    look like a real improvement: every test of the mean errs (Bahadur and Savage 1956), the
    sign-flip test as much as the t-test. Pinned so that the page stays true."""
    sf, t = false_positive_rates(MEAN_ZERO_ASYMMETRIC[shape], n=10, trials=TRIALS, seed=f"test-{shape}")
    assert sf > 0.07 and t > 0.07, (shape, sf, t)
