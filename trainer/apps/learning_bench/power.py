"""Power of the learning benchmark's verdict test (the paired sign-flip test, :mod:`.signflip`):
the minimum detectable effect of a claim at its seed count and level, and the seeds a claim
needs to detect a given effect.

The model: paired differences normal with mean ``delta`` and the observed sd ``sigma``; the
test two-sided at level ``alpha`` (the Holm level the row's p-value was compared with). The
*minimum detectable effect* (MDE) is the smallest ``delta`` the test detects (rejects, in
``delta``'s direction) with probability :data:`POWER`. By scale invariance ``MDE = sigma * c(n,
alpha)``; :func:`mde_factor` computes ``c``:

* up to :data:`EXACT_POWER_MAX_SEEDS` seeds, from the test's exact rejection region: with
  ``M(y)`` the number of non-empty subsets of the differences ``y`` whose mean is <= 0, the
  sign-flip p-value of ``y`` (sum > 0) is ``2 (1 + M) / 2^n``; so the test rejects at ``alpha``
  iff ``M <= M_max`` (the largest M with ``2 (1 + M) / 2^n < alpha``), i.e. iff the
  ``(M_max + 1)``-th smallest subset mean of ``y`` is above 0 (Hartigan 1969, "Using subsample
  values as typical values", JASA 64: the subset means are the typical values of the sign-flip
  test). With ``y = z + delta``, ``z`` standard normal, the test rejects iff ``delta >
  -m_(M_max+1)(z)`` (and the sum is positive), so ``c`` is the :data:`POWER` quantile of
  ``max(-m_(M_max+1)(z), -mean(z))`` over :data:`POWER_DRAWS` draws of ``z`` from a generator
  seeded with :data:`POWER_SEED` (a pure function of ``n`` and ``alpha``);
* beyond, from the paired t-test's exact power (noncentral t, Cohen 1988, ch. 2), which the
  sign-flip test's approaches as its granularity ``2 / 2^n`` vanishes.

``c`` is infinite when the test cannot reach ``alpha`` with ``n`` seeds (``2 / 2^n >= alpha``,
:func:`~trajstore.trainer.apps.learning_bench.signflip.min_p`). Pure numpy / scipy, no torch.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy.special import nctdtr, ndtri, stdtrit

from trajstore.trainer.apps.learning_bench.signflip import min_p

POWER = 0.8
"""Detection probability of the minimum detectable effect."""
EXACT_POWER_MAX_SEEDS = 16
"""Up to this many seeds the MDE comes from the sign-flip test's own rejection region; beyond,
the t-test's MDE is within 2 % of it (at 16 seeds: 1.7 % below at alpha 0.0025, 0.9 % at 0.05,
measured with the rejection region below)."""
POWER_DRAWS = 20_000
"""Standard-normal draws behind each exact MDE factor up to 10 seeds (the 0.8 quantile's
relative standard error is about 0.3 %); half as many per seed above 10, at least 2,000
(``2^n`` subset means each)."""
POWER_SEED = 44
"""Seed of those draws."""
_CHUNK = 500


def _subset_means(z: np.ndarray) -> np.ndarray:
    """Means of the non-empty subsets of each row of `z`, shape ``(draws, 2^n - 1)`` for `z` of
    shape ``(draws, n)``."""
    draws, n = z.shape
    sums = np.zeros((draws, 1))
    sizes = np.zeros(1)
    for i in range(n):
        sums = np.concatenate([sums, sums + z[:, i:i + 1]], axis=1)
        sizes = np.concatenate([sizes, sizes + 1])
    return sums[:, 1:] / sizes[1:]


def _t_power(delta: float, n: int, alpha: float) -> float:
    """Power of the two-sided paired t-test at standardised mean `delta` (Cohen 1988, ch. 2):
    ``P(|T| > t_{1-alpha/2, n-1})``, T noncentral t with ``n - 1`` df and noncentrality
    ``delta sqrt(n)``."""
    df = n - 1
    crit = float(stdtrit(df, 1 - alpha / 2))
    nc = delta * math.sqrt(n)
    up = float(nctdtr(df, nc, crit))
    if math.isnan(up):  # far in a tail of the noncentral t: the mass is on one side of crit
        up = 0.0 if nc > crit else 1.0
    low = float(nctdtr(df, nc, -crit))
    return 1.0 - up + (0.0 if math.isnan(low) else low)


@lru_cache(maxsize=8)
def _smallest_subset_means(n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """For the :data:`POWER_SEED` draws of `n` standard normals: the `k` smallest subset means of
    each draw in ascending order, shape ``(draws, k)``, and each draw's mean, shape ``(draws,)``
    (one pass over the ``2^n`` subsets serves every level that needs at most `k`)."""
    draws = max(2000, POWER_DRAWS >> max(0, n - 10))
    z = np.random.Generator(np.random.PCG64(POWER_SEED)).standard_normal((draws, n))
    k = min(k, 2 ** n - 1)
    out = np.empty((draws, k))
    chunk = max(1, _CHUNK >> max(0, n - 10))
    for lo in range(0, draws, chunk):  # (chunk, 2^n) subset means at a time
        m = _subset_means(z[lo:lo + chunk])
        out[lo:lo + chunk] = np.sort(np.partition(m, k - 1, axis=1)[:, :k], axis=1)
    return out, z.mean(axis=1)


@lru_cache(maxsize=512)
def mde_factor(n: int, alpha: float, power: float = POWER) -> float:
    """``c(n, alpha)``: the minimum detectable effect in units of the paired differences' sd
    (see the module docstring); ``inf`` when the test cannot reach `alpha` with `n` seeds, or
    with fewer than 2 seeds.

    Args:
        n: paired seeds. alpha: the two-sided level (Holm's level for the row). power: the
            detection probability.
    """
    if n < 2 or min_p(n) >= alpha:
        return math.inf
    if n <= EXACT_POWER_MAX_SEEDS:
        m_max = math.ceil(alpha * 2 ** (n - 1)) - 2  # largest M with 2 (1 + M) / 2^n < alpha
        if m_max == 0:  # only "all n differences positive" rejects: power Phi(delta)^n, exactly
            return float(ndtri(power ** (1 / n)))
        # one pass serves every level up to 0.05 (Holm's levels for a 5 % family-wise rate)
        k = max(m_max + 1, math.ceil(0.05 * 2 ** (n - 1)))
        smallest, means = _smallest_subset_means(n, 1 << (k - 1).bit_length())
        need = np.maximum(-smallest[:, m_max], -means)
        return float(np.quantile(need, power))
    lo, hi = 0.0, 1.0
    while _t_power(hi, n, alpha) < power:
        hi *= 2
    for _ in range(60):  # bisection to far below the printed precision
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_power(mid, n, alpha) < power else (lo, mid)
    return hi


def mde(sd: float, n: int, alpha: float, power: float = POWER) -> float:
    """Minimum detectable effect (the differences' unit) of the sign-flip test with `n` paired
    seeds whose differences have standard deviation `sd`, two-sided at `alpha`: ``sd *
    mde_factor(n, alpha)``. ``inf`` when the level is out of reach; NaN for a NaN sd."""
    if math.isnan(sd):
        return math.nan
    c = mde_factor(n, alpha, power)
    return math.inf if math.isinf(c) else sd * c


def seeds_needed(effect: float, sd: float, alpha: float, *, power: float = POWER, most: int = 2000) -> int | None:
    """The fewest paired seeds whose minimum detectable effect at `alpha` is at most `effect`
    (same unit as `sd`), or None when more than `most` would be needed. The MDE falls with the
    seed count, so this bisects: first the t-test region (beyond :data:`EXACT_POWER_MAX_SEEDS`,
    cheap), then the exact one."""
    if effect <= 0 or math.isnan(sd):
        return None

    def enough(n: int) -> bool:
        return mde(sd, n, alpha, power) <= effect

    def first(lo: int, hi: int) -> int:  # smallest n in (lo, hi] with enough(n); enough(hi) holds
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if enough(mid) else (mid, hi)
        return hi

    edge = EXACT_POWER_MAX_SEEDS
    if most <= edge:
        return first(1, most) if enough(most) else None
    if enough(edge + 1):  # the exact region, or edge + 1 itself
        return first(1, edge) if enough(edge) else edge + 1
    hi = edge + 1
    while not enough(hi):
        if hi >= most:
            return None
        hi = min(most, hi * 2)
    return first(hi // 2 if hi // 2 > edge else edge, hi)


__all__ = ["EXACT_POWER_MAX_SEEDS", "POWER", "POWER_DRAWS", "POWER_SEED", "mde", "mde_factor", "seeds_needed"]
