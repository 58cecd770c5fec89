"""trainer/apps/learning_bench/power.py: the minimum detectable effect of the sign-flip test and
the seeds a claim needs, by hand and against a direct simulation of the test."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import ndtri

from trajstore.trainer.apps.learning_bench.power import mde, mde_factor, seeds_needed
from trajstore.trainer.apps.learning_bench.signflip import signflip_p


def test_mde_by_hand_where_only_all_positive_rejects() -> None:
    """10 seeds at Holm's first level for 20 claims, 0.05 / 20 = 0.0025: the sign-flip p-values
    below it are 2 / 1024 only (all 10 signs agree), so the power at mean delta, sd 1 is
    Phi(delta)^10 and 80 % power needs Phi(delta) = 0.8^(1/10) = 0.977933: delta = 2.0128 sd."""
    assert mde_factor(10, 0.0025) == pytest.approx(float(ndtri(0.8 ** 0.1)), rel=1e-12)
    assert mde_factor(10, 0.0025) == pytest.approx(2.0128, abs=1e-4)
    assert mde(0.05, 10, 0.0025) == pytest.approx(0.05 * 2.0128, abs=1e-5)
    # out of reach: 5 seeds give p >= 2 / 32 = 0.0625, never below 0.05; 9 seeds at 0.0025
    # (2 / 512 = 0.0039)
    assert math.isinf(mde(0.05, 5, 0.05)) and math.isinf(mde(0.05, 9, 0.0025))
    assert math.isnan(mde(math.nan, 10, 0.05)) and math.isinf(mde_factor(1, 0.05))


def test_mde_detects_with_80_percent_power_in_a_direct_simulation() -> None:
    """At the MDE the test itself (signflip_p, exact) rejects in about 80 % of 3,000 normal
    samples (binomial sd 0.7 %), at the default preset's seed count and two Holm levels."""
    rng = np.random.default_rng(11)
    for n, alpha in ((10, 0.05), (10, 0.01)):
        c = mde_factor(n, alpha)
        hits = sum(signflip_p(list(rng.normal(c, 1.0, n))) < alpha for _ in range(3000))
        assert hits / 3000 == pytest.approx(0.8, abs=0.03), (n, alpha, hits)


def test_mde_beyond_the_exact_limit_is_the_t_tests() -> None:
    """Beyond 16 seeds: the paired t-test's MDE (noncentral t). Textbook approximation at 30
    seeds, alpha 0.05: (t_0.975,29 + t_0.8,29) / sqrt 30 = (2.045 + 0.854) / 5.477 = 0.529."""
    assert mde_factor(30, 0.05) == pytest.approx(0.529, rel=0.01)
    assert mde_factor(40, 0.05) < mde_factor(30, 0.05) < mde_factor(17, 0.05) < mde_factor(10, 0.05)


def test_seeds_needed() -> None:
    # the 10-seed MDE at 0.0025 (2.0128 sd, above) is the smallest count that reaches it:
    # 9 seeds cannot reach 0.0025 at all
    assert seeds_needed(0.05 * 2.013, 0.05, 0.0025) == 10
    assert seeds_needed(0.05 * 2.0, 0.05, 0.0025) > 10
    assert seeds_needed(0.0, 0.05, 0.05) is None and seeds_needed(1e-6, 1.0, 0.05, most=50) is None
    n = seeds_needed(0.5 * 0.1, 0.1, 0.05)  # half an sd: about 34 by the t-test
    assert n is not None and mde(0.1, n, 0.05) <= 0.05 < mde(0.1, n - 1, 0.05)
