"""The exact paired sign-flip (permutation) test of the learning benchmark's verdicts.

Under the null hypothesis that an arm makes no difference, the two outcomes of a paired seed are
exchangeable, so each paired difference ``d_i = arm_i - ref_i`` is as likely to have been
``-d_i``: the differences are symmetric about 0 whatever the shape of each arm's outcomes
(skewed, a seed that collapses in one arm). The test statistic is the sum ``T = sum_i d_i``; its
null distribution is that of ``sum_i s_i d_i`` over the ``2^n`` sign vectors ``s``, enumerated
exactly for up to :data:`EXACT_MAX_SEEDS` seeds and sampled (:data:`MC_DRAWS` sign vectors from
a generator seeded with :data:`MC_SEED`) beyond. Source: Fisher (1935), *The Design of
Experiments*, section 21 (the paired randomisation test); Monte-Carlo p-values
``(1 + #{T_b >= T}) / (B + 1)`` as in Davison & Hinkley (1997), eq. 4.11.

Pure numpy, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

EXACT_MAX_SEEDS = 20
"""Up to this many paired seeds every one of the ``2^n`` sign vectors is enumerated."""
MC_DRAWS = 100_000
"""Sign vectors drawn beyond :data:`EXACT_MAX_SEEDS` seeds (smallest p-value ``1 / (MC_DRAWS + 1)``)."""
MC_SEED = 20261207
"""Seed of the Monte-Carlo sign vectors: the p-value is a pure function of the differences."""
_MC_CHUNK = 4096
_REL_TIE = 1e-9
"""Sums within this fraction of ``sum |d_i|`` of the observed one count as equal (floating-point ties,
e.g. differences that are all equal)."""

Alternative = Literal["two-sided", "greater", "less"]


def subset_sums(diffs: Sequence[float]) -> np.ndarray:
    """Sums of every subset of `diffs`, shape ``(2^n,)``: entry ``k`` sums the ``d_i`` whose bit
    ``i`` is set in ``k`` (built by doubling: ``[0]``, then ``[S, S + d_i]`` per value).

    Raises:
        ValueError: more than :data:`EXACT_MAX_SEEDS` values (``2^n`` sums would not fit)."""
    if len(diffs) > EXACT_MAX_SEEDS:
        raise ValueError(f"{len(diffs)} values: exact enumeration stops at {EXACT_MAX_SEEDS}")
    sums = np.zeros(1)
    for d in diffs:
        sums = np.concatenate([sums, sums + d])
    return sums


def _flipped_sums(x: np.ndarray) -> tuple[np.ndarray, bool]:
    """The statistic ``sum s_i x_i`` under every sign vector (exact) or under :data:`MC_DRAWS`
    random ones (Monte-Carlo); and whether the enumeration was exact."""
    n = len(x)
    if n <= EXACT_MAX_SEEDS:
        # flipping the subset N gives T - 2 S_N
        return float(x.sum()) - 2.0 * subset_sums(x), True
    rng = np.random.Generator(np.random.PCG64(MC_SEED))
    out = np.empty(MC_DRAWS)
    for lo in range(0, MC_DRAWS, _MC_CHUNK):
        k = min(_MC_CHUNK, MC_DRAWS - lo)
        signs = rng.integers(0, 2, size=(k, n), dtype=np.int8) * 2 - 1
        out[lo:lo + k] = signs @ x
    return out, False


def signflip_p(diffs: Sequence[float], *, alternative: Alternative = "two-sided", shift: float = 0.0) -> float:
    """p-value of the paired sign-flip test that the differences are symmetric about `shift`.

    Args:
        diffs: paired differences ``arm - ref``, one per seed, shape ``(n,)`` (NaN dropped).
        alternative: ``two-sided`` (``|sum s (d - shift)| >= |sum (d - shift)|``), ``greater``
            (the true centre lies above `shift`: ``sum s (d - shift) >= sum (d - shift)``) or
            ``less`` (below).
        shift: the centre under the null, in the differences' unit (0: no effect; a paper's effect
            size: is the data's centre compatible with it?).

    Returns:
        The fraction of the ``2^n`` sign vectors whose statistic is at least as extreme as the
        observed (exact, n <= :data:`EXACT_MAX_SEEDS`), or ``(1 + count) / (MC_DRAWS + 1)`` over
        random sign vectors (n larger). 1.0 with no value. E.g. 5 positive differences,
        two-sided: only the identity and the all-flipped vector reach ``|T|``: p = 2 / 32.

    Raises:
        ValueError: an unknown `alternative`.
    """
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"alternative must be two-sided, greater or less, got {alternative!r}")
    x = np.array([float(d) - shift for d in diffs if not math.isnan(d)])
    if len(x) == 0:
        return 1.0
    t = float(x.sum())
    tol = _REL_TIE * float(np.abs(x).sum())
    sums, exact = _flipped_sums(x)
    if alternative == "two-sided":
        hits = int(np.count_nonzero(np.abs(sums) >= abs(t) - tol))
    elif alternative == "greater":
        hits = int(np.count_nonzero(sums >= t - tol))
    else:
        hits = int(np.count_nonzero(sums <= t + tol))
    if exact:
        return hits / len(sums)
    return (1 + hits) / (len(sums) + 1)


def min_p(n: int) -> float:
    """The smallest two-sided p-value the test can give with `n` seeds: ``2 / 2^n`` (exact), or
    ``1 / (MC_DRAWS + 1)`` (Monte-Carlo). A level at or below it can never be reached."""
    return 2.0 / 2 ** n if n <= EXACT_MAX_SEEDS else 1.0 / (MC_DRAWS + 1)


__all__ = ["EXACT_MAX_SEEDS", "MC_DRAWS", "MC_SEED", "min_p", "signflip_p", "subset_sums"]
