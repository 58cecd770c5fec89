"""The verdict rules of ``traj bench learning`` (bench/LEARNING.md, "Decision rules", v3): which
claims reach a test, the paired sign-flip test with Holm's correction that decides them, the
minimum detectable effect of each, and the test against the paper's own effect that separates
*not reproduced* from *inconclusive*.

Verdicts, in the order the rules apply to a claim:

1. ``undetermined``: fewer than 2 paired seeds;
2. ``not testable at this scale``: a DIS claim where DIS masked < :data:`MIN_DIS_MASKED` of the
   ``sao`` runs' action tokens;
3. ``not testable (no arm discriminates)``: neither arm shows the change its metric measures
   (:func:`discriminates`);
4. the others form family A: the two-sided exact paired sign-flip test of "no effect"
   (:func:`~.signflip.signflip_p`), Holm-adjusted over the family. ``reproduced``: Holm p <
   :data:`ALPHA` with the mean difference in the paper's direction;
5. ``not testable at this scale``: a claim with a scale note fixed beforehand, not reproduced;
6. ``not reproduced`` (significantly opposite): Holm p < :data:`ALPHA`, the other direction;
7. the claims still open with a paper effect form family B: the one-sided sign-flip test that
   the differences are centred on the paper's effect (:meth:`~.claims.Claim.metric_effect`, in
   the paper's direction) against a centre nearer 0, Holm-adjusted over family B. ``not
   reproduced`` (the paper's effect is ruled out): Holm p < :data:`ALPHA_EFFECT`; otherwise
   ``inconclusive``: the data are compatible both with no effect and with the paper's;
8. ``inconclusive``: still open and the paper gives no effect size for the metric.

Every claim in family A also gets its minimum detectable effect (:mod:`.power`) at Holm's level
for its rank (``ALPHA / (m - rank)``, ranks by ascending sign-flip p, ties in claim order) and
the observed sd of its paired differences.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trajstore.trainer.apps.learning_bench.claims import AUC_EFFECT_FACTOR, Claim
from trajstore.trainer.apps.learning_bench.power import mde
from trajstore.trainer.apps.learning_bench.signflip import signflip_p
from trajstore.trainer.apps.learning_bench.stats import ALPHA, MIN_DIS_MASKED, Interval, format_p, holm

ALPHA_EFFECT = ALPHA / 2
"""Family-wise level of the one-sided tests against the paper's effect (family B): as strict, per
side, as the two-sided test of no effect."""
NOT_TESTABLE_SCALE = "not testable at this scale"
NOT_TESTABLE_FLAT = "not testable (no arm discriminates)"
REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive"
UNDETERMINED = "undetermined"


@dataclass(frozen=True)
class Decision:
    """The verdict of one claim and every number behind it (NaN where a rule stopped first).

    Attributes:
        interval: the paired differences' mean, 95 % Student-t interval and t-test p (descriptive).
        p_signflip: two-sided exact sign-flip p of "no effect" (family A).
        p_holm: `p_signflip` Holm-adjusted over family A.
        level: the level Holm compared `p_signflip` with at the claim's rank, ``ALPHA / (m - rank)``.
        sd: sample sd of the paired differences (the metric's unit).
        mde: minimum detectable effect at `level` and 80 % power (the metric's unit; inf: the
            test cannot reach `level` with this many seeds).
        effect: the paper's effect on the metric (a magnitude; None: no figure).
        p_effect: one-sided sign-flip p of "centred on the paper's effect" (family B).
        p_effect_holm: `p_effect` Holm-adjusted over family B.
        verdict: one of the module docstring's verdicts. reason: why, with the numbers.
    """

    interval: Interval
    verdict: str
    reason: str
    p_signflip: float = math.nan
    p_holm: float = math.nan
    level: float = math.nan
    sd: float = math.nan
    mde: float = math.nan
    effect: float | None = None
    p_effect: float = math.nan
    p_effect_holm: float = math.nan


def discriminates(arm_signal: Interval, ref_signal: Interval) -> bool:
    """The rule that makes a claim testable at all: at least one of its two arms shows the change
    its metric is about, i.e. the t-interval over seeds of that arm's *signal* lies above 0.
    Signals (analysis.py): ``auc`` = evaluation reward at the last step - at step 0 (it learned);
    ``post-shift-auc`` = evaluation reward at the end of each post-shift stage - at its shift,
    mean over the shifts (it recovered); ``corr`` / ``cos`` = the score itself (its advantages
    agree with the oracle's). When neither arm moves, a difference between them measures nothing
    (on the pref-shift task no arm recovered within a stage). With fewer than two seeds there is
    no interval and the rule does not apply (undetermined anyway)."""
    if arm_signal.n < 2 and ref_signal.n < 2:
        return True
    return arm_signal.excludes_zero() > 0 or ref_signal.excludes_zero() > 0


def _want(claim: Claim) -> int:
    """The sign of ``arm - ref`` the paper expects."""
    return -1 if claim.direction == "ref-better" else 1


def _pretest(claim: Claim, iv: Interval, *, dis_masked: float | None, testable: bool) -> Decision | None:
    """Rules 1-3: the decision when the claim does not reach a test, else None."""
    ci = iv.describe()
    if iv.n < 2:  # one seed: a difference without an interval supports no verdict
        return Decision(iv, UNDETERMINED, f"fewer than 2 paired seeds, no interval: {ci}")
    if claim.scale_note == "dis" and dis_masked is not None and dis_masked < MIN_DIS_MASKED:
        return Decision(iv, NOT_TESTABLE_SCALE, f"DIS masked {dis_masked:.2%} of action tokens (< {MIN_DIS_MASKED:.1%}): "
                                                f"with and without DIS the updates are nearly the same; {ci}")
    if not testable:
        return Decision(iv, NOT_TESTABLE_FLAT, f"neither arm shows the change its metric measures (see rules); {ci}")
    return None


def _ranked_levels(ps: Sequence[float]) -> list[float]:
    """Holm's level for each p-value at its rank (ascending p, ties in input order): ``ALPHA / (m - rank)``."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out = [0.0] * len(ps)
    for rank, i in enumerate(order):
        out[i] = ALPHA / (len(ps) - rank)
    return out


def _fmt_effect(x: float) -> str:
    return "out of reach" if math.isinf(x) else f"{x:.3f}"


def decide(items: Sequence[tuple[Claim, Interval, bool]], *, dis_masked: float | None = None) -> list[Decision]:
    """Verdicts of a whole set of claims by the module's rules: ``items`` = (claim, paired t-interval
    of ``arm - ref`` with its differences in seed order, testable by :func:`discriminates`);
    returns one :class:`Decision` per item, in order. A pure function of the differences."""
    out: list[Decision | None] = [_pretest(c, iv, dis_masked=dis_masked, testable=t) for c, iv, t in items]
    fam_a = [i for i, d in enumerate(out) if d is None]
    p_a = [signflip_p(items[i][1].diffs) for i in fam_a]
    holm_a = holm(p_a)
    levels = _ranked_levels(p_a)
    open_: list[int] = []
    tested: dict[int, dict[str, Any]] = {}
    for k, i in enumerate(fam_a):
        c, iv, _ = items[i]
        sd = statistics.stdev(iv.diffs) if iv.n >= 2 else math.nan
        nums = {"p_signflip": p_a[k], "p_holm": holm_a[k], "level": levels[k], "sd": sd,
                "mde": mde(sd, iv.n, levels[k]), "effect": c.metric_effect()}
        tested[i] = nums
        sign = 1 if iv.mean > 0 else -1 if iv.mean < 0 else 0
        test = (f"{iv.describe()}; sign-flip p = {format_p(p_a[k])} (Holm {format_p(holm_a[k])}); minimum "
                f"detectable effect {_fmt_effect(nums['mde'])} at level {levels[k]:.4f}")
        if holm_a[k] < ALPHA and sign == _want(c):
            out[i] = Decision(iv, REPRODUCED, test, **nums)
        elif c.scale_note and c.scale_note != "dis":
            out[i] = Decision(iv, NOT_TESTABLE_SCALE, f"{c.scale_note}; {test}", **nums)
        elif holm_a[k] < ALPHA:
            out[i] = Decision(iv, NOT_REPRODUCED, f"opposite direction, significant: {test}", **nums)
        elif c.metric_effect() is None:
            out[i] = Decision(iv, INCONCLUSIVE, f"not significant and the paper gives no effect size on this metric "
                                                f"to rule out: {test}", **nums)
        else:
            open_.append(i)
    p_b = []
    for i in open_:
        c, iv, _ = items[i]
        e = c.metric_effect()
        assert e is not None  # open_ holds only claims with an effect
        p_b.append(signflip_p(iv.diffs, shift=_want(c) * e, alternative="greater" if _want(c) < 0 else "less"))
    for i, p, ph in zip(open_, p_b, holm(p_b)):
        c, iv, _ = items[i]
        nums = tested[i]
        e = nums["effect"]
        gap = e / AUC_EFFECT_FACTOR
        why = (f"the paper's effect {_want(c) * e:+.4f} (its final gap {gap:.3f} x {AUC_EFFECT_FACTOR:g} on the AUC): "
               f"one-sided sign-flip p = {format_p(p)} (Holm {format_p(ph)}); not significant against 0: sign-flip p = "
               f"{format_p(nums['p_signflip'])} (Holm {format_p(nums['p_holm'])}), {iv.describe()}; minimum "
               f"detectable effect {_fmt_effect(nums['mde'])}")
        v = NOT_REPRODUCED if ph < ALPHA_EFFECT else INCONCLUSIVE
        lead = "the paper's effect is ruled out" if v == NOT_REPRODUCED else "compatible with no effect and with the paper's"
        out[i] = Decision(iv, v, f"{lead}: {why}", p_effect=p, p_effect_holm=ph, **nums)
    return [d for d in out if d is not None]


__all__ = ["ALPHA_EFFECT", "INCONCLUSIVE", "NOT_REPRODUCED", "NOT_TESTABLE_FLAT", "NOT_TESTABLE_SCALE", "REPRODUCED",
           "UNDETERMINED", "Decision", "decide", "discriminates"]
