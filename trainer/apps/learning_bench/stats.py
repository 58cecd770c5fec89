"""The benchmark's statistics, fixed before any run: the area under the evaluation-reward curve,
paired differences to ``sao`` with percentile-bootstrap confidence intervals over seeds, and the
paper's claims with the comparison, direction and testability rule that decide each verdict.

A claim counts as *reproduced* only if the 95 % interval of its paired difference excludes 0 in
the paper's direction. Pure Python (no torch).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

BOOTSTRAP_RESAMPLES = 10_000
CONFIDENCE = 0.95
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
    """A paired difference over seeds: its mean, the bootstrap interval and the seeds used."""

    mean: float
    low: float
    high: float
    n: int
    diffs: tuple[float, ...]

    @property
    def has_interval(self) -> bool:
        """False with fewer than two seeds (or no finite bound): there is no interval to show."""
        return self.n >= 2 and not (math.isnan(self.low) or math.isnan(self.high))

    def describe(self) -> str:
        """``difference +0.012, 95% CI [-0.003, +0.027] over 3 seeds``; with one seed
        ``difference +0.012, CI n/a (1 seed)`` (a bootstrap of one value has no interval, and
        ``[+nan, +nan]`` read as a bug)."""
        if not self.has_interval:
            return f"difference {self.mean:+.3f}, CI n/a ({self.n} seed{'s' if self.n != 1 else ''})"
        return f"difference {self.mean:+.3f}, 95% CI [{self.low:+.3f}, {self.high:+.3f}] over {self.n} seeds"

    def excludes_zero(self) -> int:
        """+1 if the interval lies above 0, -1 below, 0 if it contains 0 (or is undefined)."""
        if self.n < 2 or math.isnan(self.low):
            return 0
        return 1 if self.low > 0 else -1 if self.high < 0 else 0


def bootstrap_interval(diffs: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES,
                       confidence: float = CONFIDENCE, seed: int = 0) -> Interval:
    """Percentile bootstrap interval of the mean of `diffs` (resampling seeds with replacement).
    With few seeds this interval is too narrow rather than too wide; it is what the benchmark
    pre-registered."""
    xs = [d for d in diffs if not math.isnan(d)]
    if not xs:
        return Interval(math.nan, math.nan, math.nan, 0, ())
    mean = sum(xs) / len(xs)
    if len(xs) < 2:
        return Interval(mean, math.nan, math.nan, len(xs), tuple(xs))
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(xs, k=len(xs))) / len(xs) for _ in range(resamples))
    lo = means[int(math.floor((1 - confidence) / 2 * resamples))]
    hi = means[min(resamples - 1, int(math.ceil((1 + confidence) / 2 * resamples)) - 1)]
    return Interval(mean, lo, hi, len(xs), tuple(xs))


def paired(values: dict[str, dict[int, float]], arm: str, ref: str = "sao") -> Interval:
    """Interval of ``values[arm][seed] - values[ref][seed]`` over the seeds both have."""
    seeds = sorted(set(values.get(arm, {})) & set(values.get(ref, {})))
    return bootstrap_interval([values[arm][s] - values[ref][s] for s in seeds])


Direction = Literal["ref-better", "arm-better"]


@dataclass(frozen=True)
class Claim:
    """One of the paper's comparative claims (SAO.md) and how the benchmark decides it.

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
    Claim("sao-vs-grpo", "SAO beats GRPO+DIS (97.3 vs 84.2 AIME25); they track each other for ~400 steps, then SAO "
          "pulls ahead", "chain", "auc", "grpo-dis", "sao",
          scale_note="the paper's gap opens after ~400 policy steps; these runs are far shorter"),
)


def verdict(claim: Claim, interval: Interval, *, dis_masked: float | None = None) -> tuple[str, str]:
    """(verdict, reason) for `claim` given the paired interval of ``arm - ref``.

    Verdicts: ``reproduced`` (interval excludes 0 in the paper's direction), ``not reproduced``
    (it contains 0, or excludes it the other way: the reason says which), ``not testable at this
    scale`` (a scale note decided before running; for DIS claims: DIS masked less than
    :data:`MIN_DIS_MASKED` of the tokens), ``undetermined`` (fewer than 2 paired seeds: no
    interval, so no verdict either way; the smoke preset).
    """
    want = -1 if claim.direction == "ref-better" else 1
    side = interval.excludes_zero()
    ci = interval.describe()
    if interval.n < 2:  # one seed: a difference without an interval supports no verdict
        return "undetermined", f"fewer than 2 paired seeds, no interval: {ci}"
    if claim.scale_note == "dis" and dis_masked is not None and dis_masked < MIN_DIS_MASKED:
        return "not testable at this scale", (f"DIS masked {dis_masked:.2%} of action tokens (< {MIN_DIS_MASKED:.1%}): "
                                              f"with and without DIS the updates are nearly the same; {ci}")
    if side == want:
        return "reproduced", ci
    if claim.scale_note and claim.scale_note != "dis":
        return "not testable at this scale", f"{claim.scale_note}; {ci}"
    if side == -want:
        return "not reproduced", f"opposite direction: {ci}"
    return "not reproduced", f"interval includes 0: {ci}"
