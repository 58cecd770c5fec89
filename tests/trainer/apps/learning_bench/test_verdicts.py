"""trainer/apps/learning_bench/verdicts.py: the verdict rules v3 (sign-flip test with Holm,
minimum detectable effect, the test against the paper's effect), by hand."""

from __future__ import annotations

import math

import pytest

from trajstore.trainer.apps.learning_bench.claims import CLAIMS
from trajstore.trainer.apps.learning_bench.stats import t_interval
from trajstore.trainer.apps.learning_bench.verdicts import (
    INCONCLUSIVE,
    NOT_REPRODUCED,
    NOT_TESTABLE_FLAT,
    NOT_TESTABLE_SCALE,
    REPRODUCED,
    UNDETERMINED,
    decide,
    discriminates,
)


def _claim(key: str):  # noqa: ANN202
    return next(c for c in CLAIMS if c.key == key)


NEG = [-0.10, -0.12, -0.09, -0.11, -0.10, -0.12, -0.10, -0.09, -0.11, -0.10]
"""Ten negative differences: sign-flip p = 2 / 1024 (only all-same-sign vectors reach the sum)."""


def _one(key: str, diffs: list[float], **kw):  # noqa: ANN003, ANN202
    return decide([(_claim(key), t_interval(diffs), True)], **kw)[0]


def test_reproduced_opposite_and_the_rules_before_the_test() -> None:
    k2 = _one("k2-vs-k1", NEG)  # the paper: sao beats sao-k1, arm - ref < 0
    assert k2.verdict == REPRODUCED and k2.p_signflip == 2 / 1024 and k2.p_holm == 2 / 1024 and k2.level == 0.05
    opp = _one("k2-vs-k1", [-x for x in NEG])
    assert opp.verdict == NOT_REPRODUCED and opp.reason.startswith("opposite direction, significant")
    # five seeds can never be significant by the sign-flip test (2 / 32 > 0.05): its MDE is out of reach
    five = _one("critic-vs-mean-corr", NEG[:5])
    assert five.p_signflip == 2 / 32 and math.isinf(five.mde) and five.verdict == INCONCLUSIVE
    assert _one("dis-vs-none", NEG, dis_masked=1e-4).verdict == NOT_TESTABLE_SCALE
    assert _one("sao-vs-grpo", [0.01, -0.01] * 5).verdict == NOT_TESTABLE_SCALE
    flat = decide([(_claim("k2-vs-k1"), t_interval(NEG), False)])[0]
    assert flat.verdict == NOT_TESTABLE_FLAT and math.isnan(flat.p_signflip)
    one = _one("k2-vs-k1", [-0.1])
    assert one.verdict == UNDETERMINED and one.reason.startswith("fewer than 2 paired seeds") and "nan" not in one.reason


def test_not_reproduced_needs_the_papers_effect_ruled_out() -> None:
    """A difference near 0: "not reproduced" where the paper's effect lies far outside the data
    (a critic vs a running mean: the paper's 0.175 final gap, 0.0875 on the AUC), "inconclusive"
    where it does not (K = 2 vs K = 1: 0.023, 0.0115 on the AUC, inside the data's spread), and
    "inconclusive" on a metric the paper gives no figure for."""
    near0 = [0.01, -0.02, 0.015, -0.005, 0.0, 0.02, -0.01, 0.005, -0.015, 0.01]
    rm = _one("critic-vs-mean-8", near0)
    # centred on -0.0875 every difference is positive: one-sided p = 1 / 1024
    assert rm.verdict == NOT_REPRODUCED and rm.effect == pytest.approx(0.0875) and rm.p_effect == 1 / 1024
    assert rm.reason.startswith("the paper's effect is ruled out")
    wide = [0.04, -0.05, 0.03, -0.02, 0.0, 0.05, -0.04, 0.01, -0.03, 0.02]
    k2 = _one("k2-vs-k1", wide)
    assert k2.verdict == INCONCLUSIVE and k2.effect == pytest.approx(0.0115) and k2.p_effect > 0.025
    corr = _one("critic-vs-mean-corr", near0)
    assert corr.verdict == INCONCLUSIVE and corr.effect is None and "no effect size" in corr.reason
    assert rm.mde == pytest.approx(corr.mde) and 0 < rm.mde < k2.mde < math.inf  # the MDE scales with the sd


def test_holm_families_levels_and_the_mde_level() -> None:
    """Family A: the 3 claims that reach a test (the untestable one is left out). The clear one
    ranks first: compared at 0.05 / 3, Holm p = 3 x 2/1024 = 0.0059, reproduced. Levels by rank:
    0.05 / 3, 0.05 / 2, 0.05 / 1. A difference significant alone (sign-flip p 28/1024 = 0.027,
    reproduced in a family of one) is not after Holm: second, 2 x 0.027 = 0.055."""
    k2, full, rm8, rm128 = (_claim(k) for k in ("k2-vs-k1", "frozen-vs-full", "critic-vs-mean-8",
                                                   "critic-vs-mean-128"))
    clear = t_interval(NEG)
    borderline = t_interval([-0.03, -0.01, -0.02, -0.04, 0.012, -0.03, 0.01, -0.02, -0.015, -0.01])
    noise = t_interval([0.01, -0.01, 0.02, -0.02, 0.0, 0.01, -0.01, 0.0, 0.01, -0.01])
    alone = decide([(full, borderline, True)])[0]
    assert alone.p_signflip == 28 / 1024 and alone.p_holm == alone.p_signflip and alone.verdict == REPRODUCED
    out = decide([(k2, clear, True), (full, borderline, True), (rm8, noise, True), (rm128, noise, False)])
    assert out[0].p_holm == pytest.approx(3 * 2 / 1024) and out[0].verdict == REPRODUCED
    assert out[0].level == pytest.approx(0.05 / 3) and out[1].level == pytest.approx(0.05 / 2) and out[2].level == 0.05
    assert out[1].p_holm == pytest.approx(2 * 28 / 1024) and out[1].verdict != REPRODUCED
    assert out[3].verdict == NOT_TESTABLE_FLAT and math.isnan(out[3].p_holm)
    # the MDE is taken at the row's own Holm level: a stricter level, a larger MDE
    assert out[1].mde > alone.mde


def test_discrimination_rule() -> None:
    up, flat = t_interval([0.1, 0.12, 0.09, 0.11]), t_interval([0.01, -0.02, 0.0, 0.01])
    assert discriminates(up, flat) and discriminates(flat, up) and not discriminates(flat, flat)
    assert not discriminates(t_interval([-0.1, -0.12, -0.09, -0.11]), flat)  # only moving down: no recovery
    assert discriminates(t_interval([0.1]), t_interval([0.0]))  # one seed: no rule (undetermined anyway)
