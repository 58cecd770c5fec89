"""The benchmark's descriptive statistics and shared constants, fixed before any run that uses
them (bench/LEARNING.md, "Decision rules"): the area under the evaluation-reward curve, paired
differences ``arm - ref`` over seeds with Student-t intervals and two-sided one-sample t-test
p-values (descriptive since rules v3: the verdicts come from the sign-flip test in
:mod:`.verdicts`), and Holm's step-down correction. No torch (scipy for the t distribution).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

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
    "mean = 0" (one-sample t-test on the paired differences) and the differences used, in seed
    order."""

    mean: float
    low: float
    high: float
    n: int
    diffs: tuple[float, ...]
    p: float = math.nan

    @property
    def has_interval(self) -> bool:
        """False with fewer than two seeds (or no finite bound): there is no interval to show."""
        return self.n >= 2 and not (math.isnan(self.low) or math.isnan(self.high))

    def describe(self) -> str:
        """``difference +0.012, 95% CI [-0.003, +0.027] over 10 seeds, t-test p = 0.11``; with
        one seed ``difference +0.012, CI n/a (1 seed)`` (one value has no interval, and
        ``[+nan, +nan]`` read as a bug)."""
        if not self.has_interval:
            return f"difference {self.mean:+.3f}, CI n/a ({self.n} seed{'s' if self.n != 1 else ''})"
        out = f"difference {self.mean:+.3f}, 95% CI [{self.low:+.3f}, {self.high:+.3f}] over {self.n} seeds"
        if not math.isnan(self.p):
            out += f", t-test p {'<' if self.p < 1e-3 else '='} {format_p(self.p).lstrip('<')}"
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


def paired(values: dict[str, dict[int, float]], arm: str, ref: str = "sao") -> Interval:
    """t-interval of ``values[arm][seed] - values[ref][seed]`` over the seeds both have."""
    seeds = sorted(set(values.get(arm, {})) & set(values.get(ref, {})))
    return t_interval([values[arm][s] - values[ref][s] for s in seeds])
