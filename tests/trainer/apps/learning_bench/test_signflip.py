"""trainer/apps/learning_bench/signflip.py: the paired sign-flip test by hand, exact and
Monte-Carlo."""

from __future__ import annotations

import numpy as np
import pytest

from trajstore.trainer.apps.learning_bench.signflip import EXACT_MAX_SEEDS, MC_DRAWS, min_p, signflip_p, subset_sums


def test_signflip_p_by_hand() -> None:
    # 5 positive differences: of the 2^5 = 32 sign vectors only the identity and the all-flipped
    # one reach |sum| >= the observed sum: p = 2 / 32; equal values (float ties) alike
    assert signflip_p([1, 2, 3, 4, 5]) == 2 / 32
    assert signflip_p([0.1] * 5) == 2 / 32
    assert signflip_p([0.01 * (i + 1) for i in range(10)]) == 2 / 1024 == min_p(10)
    # [1, -2, 3]: T = 2; flipping subset N gives T - 2 S_N with S_N over the 8 subsets
    # 0, 1, -2, -1, 3, 4, 1, 2 -> 2, 0, 6, 4, -4, -6, 0, -2
    # two-sided |.| >= 2: 2, 6, 4, -4, -6, -2 = 6 of 8; >= 2: 2, 6, 4 = 3 of 8; <= 2: 6 of 8
    assert signflip_p([1, -2, 3]) == 6 / 8
    assert signflip_p([1, -2, 3], alternative="greater") == 3 / 8
    assert signflip_p([1, -2, 3], alternative="less") == 6 / 8
    # shifted to the centre: [1, 2, 3] - 2 = [-1, 0, 1], T = 0: every vector is as extreme
    assert signflip_p([1, 2, 3], shift=2) == 1.0
    # centred on 3: [-2, -1, 0], T = -3; the flipped sums are -3, -1, 1, 3, each twice (the 0):
    # all 8 are >= -3, 2 are <= -3
    assert signflip_p([1, 2, 3], shift=3, alternative="greater") == 1.0
    assert signflip_p([1, 2, 3], shift=3, alternative="less") == 2 / 8
    assert signflip_p([float("nan"), 1.0, 2.0]) == 2 / 4 and signflip_p([]) == 1.0
    with pytest.raises(ValueError, match="alternative"):
        signflip_p([1.0], alternative="bigger")  # type: ignore[arg-type]


def test_subset_sums_enumerates_every_subset() -> None:
    assert sorted(subset_sums([1.0, 10.0, 100.0])) == [0, 1, 10, 11, 100, 101, 110, 111]
    with pytest.raises(ValueError, match="exact enumeration stops"):
        subset_sums([0.0] * (EXACT_MAX_SEEDS + 1))


def test_monte_carlo_p_agrees_with_exact_enumeration_beyond_the_exact_limit() -> None:
    """Above EXACT_MAX_SEEDS the p-value is (1 + hits) / (MC_DRAWS + 1) over seeded random sign
    vectors: deterministic, and within Monte-Carlo error of the exact p (enumerated here by
    doubling, 2^21 sums)."""
    rng = np.random.default_rng(3)
    d = rng.normal(0.4, 1.0, EXACT_MAX_SEEDS + 1)
    sums = np.zeros(1)
    for x in d:
        sums = np.concatenate([sums, sums + x])
    t = d.sum()
    exact = float(np.mean(np.abs(t - 2 * sums) >= abs(t) - 1e-9))
    mc = signflip_p(d.tolist())
    assert mc == signflip_p(d.tolist())  # a pure function of the differences
    se = (exact * (1 - exact) / MC_DRAWS) ** 0.5
    assert abs(mc - exact) < 4 * se + 1 / MC_DRAWS, (mc, exact)
    # all positive: no random vector reaches it, the smallest Monte-Carlo p
    assert signflip_p([0.01 * (i + 1) for i in range(25)]) == 1 / (MC_DRAWS + 1) == min_p(25)
