"""The benchmark's statistics, fixed before any run that uses them (bench/LEARNING.md, "Decision
rules"): the area under the evaluation-reward curve, paired differences ``arm - ref`` over seeds
with Student-t intervals and two-sided one-sample t-test p-values, Holm's step-down correction
across the claims, and the paper's claims with the comparison, direction and testability rules
that decide each verdict.

A claim counts as *reproduced* only if its Holm-adjusted p-value is below :data:`ALPHA` with the
mean difference in the paper's direction. The interval is not a percentile bootstrap
of the seeds: at 5 seeds it excluded 0 in about 16 % of simulated null experiments (nominal 5 %);
the t-interval's null rate at the preset's seed count is checked by simulation in the tests.
No torch (scipy for the t distribution).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Literal

CONFIDENCE = 0.95
ALPHA = 0.05
"""Family-wise error rate of the claims (Holm); the intervals are 1 - ALPHA = 95 % intervals."""
MIN_DIS_MASKED = 1e-3
"""DIS claims are testable only if DIS masks at least this fraction of the ``sao`` runs' action
tokens; below it DIS and no correction compute nearly the same update (fixed before running)."""


def auc(evals: Sequence[dict[str, Any]], *, first: int | None = None, last: int | None = None,
        key: str = "reward") -> float:
    """Area under the evaluation-reward curve divided by its step span (trapezoids over the
    evaluation points with ``first <= step <= last``): the mean evaluation reward over training,
    in reward units. NaN with fewer than two points."""
    pts = sorted((e["step"], e[key]) for e in evals if (first is None or e["step"] >= first)
                 and (last is None or e["step"] <= last))
    if len(pts) < 2:
        return math.nan
    area = sum((s1 - s0) * (r0 + r1) / 2 for (s0, r0), (s1, r1) in zip(pts, pts[1:]))
    return area / (pts[-1][0] - pts[0][0])


@dataclass(frozen=True)
class Interval:
    """A paired difference over seeds: its mean, the t-interval, the two-sided p-value of
    "mean = 0" (one-sample t-test on the paired differences), the Holm-adjusted p-value once the
    claim family is known (:func:`holm`; NaN before), and the differences used, in seed order."""

    mean: float
    low: float
    high: float
    n: int
    diffs: tuple[float, ...]
    p: float = math.nan
    p_holm: float = math.nan

    @property
    def has_interval(self) -> bool:
        """False with fewer than two seeds (or no finite bound): there is no interval to show."""
        return self.n >= 2 and not (math.isnan(self.low) or math.isnan(self.high))

    def describe(self) -> str:
        """``difference +0.012, 95% CI [-0.003, +0.027] over 10 seeds, p = 0.11 (Holm 0.88)``; with
        one seed ``difference +0.012, CI n/a (1 seed)`` (one value has no interval, and
        ``[+nan, +nan]`` read as a bug)."""
        if not self.has_interval:
            return f"difference {self.mean:+.3f}, CI n/a ({self.n} seed{'s' if self.n != 1 else ''})"
        out = f"difference {self.mean:+.3f}, 95% CI [{self.low:+.3f}, {self.high:+.3f}] over {self.n} seeds"
        if not math.isnan(self.p):
            out += f", p = {format_p(self.p)}"
            if not math.isnan(self.p_holm):
                out += f" (Holm {format_p(self.p_holm)})"
        return out

    def excludes_zero(self) -> int:
        """+1 if the interval lies above 0, -1 below, 0 if it contains 0 (or is undefined)."""
        if not self.has_interval:
            return 0
        return 1 if self.low > 0 else -1 if self.high < 0 else 0


def format_p(p: float) -> str:
    """``0.034``, ``<0.001``; ``n/a`` for NaN."""
    if math.isnan(p):
        return "n/a"
    return "<0.001" if p < 1e-3 else f"{p:.3f}"


@lru_cache(maxsize=256)
def _t_quantile(q: float, df: int) -> float:
    # scipy: the train extra, loaded only by the benchmark's statistics
    from scipy.special import stdtrit

    return float(stdtrit(df, q))


def t_interval(diffs: Sequence[float], *, confidence: float = CONFIDENCE) -> Interval:
    """Student-t interval of the mean of `diffs` (``mean +- t_{n-1} sd / sqrt(n)``) and the
    two-sided p-value of a one-sample t-test of mean 0. NaN values are dropped. With fewer than
    2 values: no interval (NaN bounds). All differences equal: a zero-width interval and p = 0
    (or 1 when they are all 0)."""
    xs = [float(d) for d in diffs if not math.isnan(d)]
    n = len(xs)
    if not xs:
        return Interval(math.nan, math.nan, math.nan, 0, ())
    mean = sum(xs) / n
    if n < 2:
        return Interval(mean, math.nan, math.nan, n, tuple(xs))
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    se = sd / math.sqrt(n)
    half = _t_quantile((1 + confidence) / 2, n - 1) * se
    if se == 0:
        p = 1.0 if mean == 0 else 0.0
    else:
        # scipy: the train extra, loaded only by the benchmark's statistics
        from scipy.special import stdtr

        p = float(2 * stdtr(n - 1, -abs(mean) / se))
    return Interval(mean, mean - half, mean + half, n, tuple(xs), p)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error control, any dependence): sorted
    ascending, ``p_(i) * (m - i)`` (i from 0), made non-decreasing, capped at 1; returned in the
    input order. A claim is significant at family-wise level alpha iff its adjusted p < alpha."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, pvalues[i] * (m - rank)))
        out[i] = running
    return out


def with_holm(iv: Interval, p_holm: float) -> Interval:
    """`iv` with its Holm-adjusted p-value."""
    return replace(iv, p_holm=p_holm)


def paired(values: dict[str, dict[int, float]], arm: str, ref: str = "sao") -> Interval:
    """t-interval of ``values[arm][seed] - values[ref][seed]`` over the seeds both have."""
    seeds = sorted(set(values.get(arm, {})) & set(values.get(ref, {})))
    return t_interval([values[arm][s] - values[ref][s] for s in seeds])


Direction = Literal["ref-better", "arm-better"]


@dataclass(frozen=True)
class Claim:
    """One of the paper's comparative claims (docs/sao.md) and how the benchmark decides it.

    Attributes:
        key: short id. paper: the claim in the paper's words / numbers.
        task: where it is measured. metric: ``auc`` (mean eval reward over the run),
            ``post-shift-auc`` (mean eval reward in the windows after each reward shift),
            ``corr`` / ``cos`` (advantage quality vs the oracle at the runs' critic warm-up size,
            higher is better; Pearson ``corr`` ignores a constant offset, so every running-mean
            window scores alike on it, while the gradient cosine ``cos`` sees the offset).
        arm, ref: the paired comparison ``arm - ref``.
        direction: ``ref-better`` = the paper says `ref` beats `arm` (expect a negative difference).
        scale_note: why the claim may not be testable here, decided before running ("" = testable),
            or the rule that decides it (``dis``: needs DIS to mask >= MIN_DIS_MASKED).
    """

    key: str
    paper: str
    task: str
    metric: str
    arm: str
    ref: str
    direction: Direction = "ref-better"
    scale_note: str = ""


CLAIMS: tuple[Claim, ...] = (
    Claim("dis-vs-none", "without DIS training collapses (VAPO w/o DIS 91.3 vs 97.3 AIME25; vanilla GRPO "
          "collapsed at ~160 steps)", "chain", "auc", "no-correction", "sao", scale_note="dis"),
    Claim("grpo-dis-vs-none", "GRPO needs DIS in the async setup (collapse at ~160 steps without)", "chain", "auc",
          "grpo-no-dis", "grpo-dis", scale_note="dis"),
    Claim("k2-vs-k1", "K = 2 critic updates beat K = 1 (97.3 vs 95.0 AIME25)", "chain", "auc", "sao-k1", "sao"),
    Claim("frozen-vs-full", "a critic with frozen attention beats a full-parameter critic (97.3 vs 90.6)", "chain",
          "auc", "full-critic", "sao"),
    Claim("critic-vs-mean-8", "a critic beats a running-mean baseline (97.3 vs 79.8)", "chain", "auc",
          "running-mean-8", "sao"),
    Claim("critic-vs-mean-128", "a critic beats a running-mean baseline (97.3 vs 79.8)", "chain", "auc",
          "running-mean-128", "sao"),
    Claim("critic-vs-mean-corr", "the critic's advantages are better than a running mean's (the mechanism behind "
          "97.3 vs 79.8)", "chain", "corr", "running-mean-128", "sao"),
    Claim("critic-vs-mean-cos", "the critic's advantages are better than a running mean's (the mechanism behind "
          "97.3 vs 79.8)", "chain", "cos", "running-mean-128", "sao"),
    Claim("shift-recovery-8", "after each reward-preference shift the critic recovers faster than a running mean",
          "pref-shift", "post-shift-auc", "running-mean-8", "sao"),
    Claim("shift-recovery-128", "after each reward-preference shift the critic recovers faster than a running mean",
          "pref-shift", "post-shift-auc", "running-mean-128", "sao"),
    Claim("token-vs-turn-last", "token-level GAE beats turn-level GAE (89.8 vs 85.8 / 87.3 AIME25 at 400 steps)",
          "chain", "auc", "gae-turn-last", "sao"),
    Claim("token-vs-turn-avg", "token-level GAE beats turn-level GAE (89.8 vs 85.8 / 87.3 AIME25 at 400 steps)",
          "chain", "auc", "gae-turn-avg", "sao"),
    Claim("token-vs-turn-last-corr", "token-level GAE's advantages are closer to the true ones than turn-level "
          "GAE's", "chain", "corr", "gae-turn-last", "sao"),
    Claim("token-vs-turn-avg-corr", "token-level GAE's advantages are closer to the true ones than turn-level "
          "GAE's", "chain", "corr", "gae-turn-avg", "sao"),
    Claim("skip-vs-no-skip", "GAE skips observation tokens (mechanism 4)", "chain", "auc", "gae-no-skip", "sao"),
    # comparators and controls
    Claim("critic-vs-mean-family", "a critic beats a running-mean baseline (97.3 vs 79.8), here one kept per "
          "difficulty family", "chain", "auc", "running-mean-family", "sao"),
    Claim("critic-vs-mean-family-corr", "the critic's advantages are better than a running mean's, here one kept "
          "per difficulty family", "chain", "corr", "running-mean-family", "sao"),
    Claim("dis-vs-none-small-step", "without DIS training collapses, at a step size matched to sao's (no-correction "
          "at 0.64x the lr)", "chain", "auc", "no-correction-small-step", "sao", scale_note="dis"),
    Claim("token-vs-turn-last-h", "token-level GAE beats turn-level GAE, at the same effective horizon", "chain",
          "auc", "gae-turn-last-h", "sao"),
    Claim("token-vs-turn-avg-h", "token-level GAE beats turn-level GAE, at the same effective horizon", "chain",
          "auc", "gae-turn-avg-h", "sao"),
    Claim("token-vs-turn-last-h-corr", "token-level GAE's advantages are closer to the true ones than turn-level "
          "GAE's, at the same effective horizon", "chain", "corr", "gae-turn-last-h", "sao"),
    Claim("token-vs-turn-avg-h-corr", "token-level GAE's advantages are closer to the true ones than turn-level "
          "GAE's, at the same effective horizon", "chain", "corr", "gae-turn-avg-h", "sao"),
    Claim("frozen-vs-full-moe", "a critic with frozen attention beats a full-parameter critic (97.3 vs 90.6), on a "
          "2-layer MoE critic", "chain", "auc", "moe-full-critic", "moe-critic"),
    Claim("sao-vs-grpo", "SAO beats GRPO+DIS (97.3 vs 84.2 AIME25); they track each other for ~400 steps, then SAO "
          "pulls ahead", "chain", "auc", "grpo-dis", "sao",
          scale_note="the paper's gap opens after ~400 policy steps; these runs are far shorter"),
)


NOT_TESTABLE_SCALE = "not testable at this scale"
NOT_TESTABLE_FLAT = "not testable (no arm discriminates)"


def discriminates(arm_signal: Interval, ref_signal: Interval) -> bool:
    """The rule that makes a claim testable at all: at least one of its two arms shows the change
    its metric is about, i.e. the t-interval over seeds of that arm's *signal* lies above 0.
    Signals (analysis.py): ``auc`` = evaluation reward at the last step - at step 0 (it learned);
    ``post-shift-auc`` = evaluation reward at the end of each post-shift stage - at its shift,
    mean over the shifts (it recovered); ``corr`` / ``cos`` = the score itself (its advantages
    agree with the oracle's). When neither arm moves, a difference between them measures nothing
    (as on the pref-shift task, where no arm recovered within a stage). With fewer than two
    seeds there is no interval and the rule does not apply (undetermined anyway)."""
    if arm_signal.n < 2 and ref_signal.n < 2:
        return True
    return arm_signal.excludes_zero() > 0 or ref_signal.excludes_zero() > 0


def verdict(claim: Claim, interval: Interval, *, dis_masked: float | None = None,
            testable: bool = True) -> tuple[str, str]:
    """(verdict, reason) for `claim` given the paired interval of ``arm - ref`` (with its
    Holm-adjusted p-value from :func:`decide`; without one, the unadjusted p decides, as for a
    family of one claim).

    Verdicts, in the order the rules apply:

    * ``undetermined``: fewer than 2 paired seeds (no interval; the smoke preset);
    * ``not testable at this scale``: a DIS claim where DIS masked < :data:`MIN_DIS_MASKED` of
      the ``sao`` runs' action tokens;
    * ``not testable (no arm discriminates)``: `testable` is False (:func:`discriminates`);
    * ``reproduced``: Holm-adjusted p < :data:`ALPHA`, mean in the paper's direction;
    * ``not testable at this scale``: a claim with a scale note (decided before running) that is
      not reproduced;
    * ``not reproduced``: otherwise; the reason says whether it is significantly opposite, or
      not significant after Holm (and whether the unadjusted interval excludes 0).
    """
    want = -1 if claim.direction == "ref-better" else 1
    ci = interval.describe()
    if interval.n < 2:  # one seed: a difference without an interval supports no verdict
        return "undetermined", f"fewer than 2 paired seeds, no interval: {ci}"
    if claim.scale_note == "dis" and dis_masked is not None and dis_masked < MIN_DIS_MASKED:
        return NOT_TESTABLE_SCALE, (f"DIS masked {dis_masked:.2%} of action tokens (< {MIN_DIS_MASKED:.1%}): "
                                    f"with and without DIS the updates are nearly the same; {ci}")
    if not testable:
        return NOT_TESTABLE_FLAT, f"neither arm shows the change its metric measures (see rules); {ci}"
    p = interval.p_holm if not math.isnan(interval.p_holm) else interval.p
    sign = 1 if interval.mean > 0 else -1 if interval.mean < 0 else 0
    significant = p < ALPHA
    if significant and sign == want:
        return "reproduced", ci
    if claim.scale_note and claim.scale_note != "dis":
        return NOT_TESTABLE_SCALE, f"{claim.scale_note}; {ci}"
    if significant:
        return "not reproduced", f"opposite direction, significant: {ci}"
    if interval.excludes_zero():
        return "not reproduced", f"the 95% interval excludes 0 but not significant after Holm: {ci}"
    return "not reproduced", f"interval includes 0: {ci}"


def decide(items: Sequence[tuple[Claim, Interval, bool]], *,
           dis_masked: float | None = None) -> list[tuple[Interval, str, str]]:
    """Verdicts of a whole set of claims: ``items`` = (claim, paired interval, testable by
    :func:`discriminates`). The claims that reach a test (2+ seeds, not ruled untestable first)
    form one Holm family; returns (interval with its Holm p, verdict, reason) per item, in order."""
    pre = [verdict(c, iv, dis_masked=dis_masked, testable=t) for c, iv, t in items]
    family = [i for i, (v, _) in enumerate(pre) if v not in ("undetermined", NOT_TESTABLE_FLAT)
              and not (v == NOT_TESTABLE_SCALE and items[i][0].scale_note == "dis")]
    adjusted = holm([items[i][1].p for i in family])
    ivs = [iv for _, iv, _ in items]
    for i, p in zip(family, adjusted):
        ivs[i] = with_holm(ivs[i], p)
    out = []
    for i, (c, _, t) in enumerate(items):
        v, why = verdict(c, ivs[i], dis_masked=dis_masked, testable=t) if i in family else pre[i]
        out.append((ivs[i], v, why))
    return out
