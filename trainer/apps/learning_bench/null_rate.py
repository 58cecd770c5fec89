"""The false-positive rate of the verdict test (the paired sign-flip test) and of the t-interval
beside it, by simulation: paired differences with no effect, in symmetric, skewed and
one-outlier shapes, and mean-zero asymmetric shapes (bench/LEARNING.md, "Decision rules", rule 2).

    python -m trajstore.trainer.apps.learning_bench.null_rate                  # the shapes, 20,000 experiments each
    python -m trajstore.trainer.apps.learning_bench.null_rate bench/learning_results/default
        # also each claim's centred paired differences, resampled with replacement

Pure Python and numpy, no torch; every draw comes from a generator seeded by the shape's name.
"""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Callable, Sequence

from trajstore.trainer.apps.learning_bench.signflip import signflip_p
from trajstore.trainer.apps.learning_bench.stats import ALPHA, t_interval
from trajstore.trainer.apps.learning_bench.suite import reanalyse

Shape = Callable[[random.Random, int], list[float]]
"""Draws `n` paired differences ``arm - ref`` (reward units)."""


def _iid(one: Callable[[random.Random], float]) -> Shape:
    return lambda rng, n: [one(rng) for _ in range(n)]


def _student_t3(rng: random.Random) -> float:
    return 0.02 * rng.gauss(0, 1) / math.sqrt(sum(rng.gauss(0, 1) ** 2 for _ in range(3)) / 3)


def _skewed_outcomes(rng: random.Random) -> float:
    """Each arm's outcome skewed (a shared seed effect plus exponential noise): arm - ref."""
    u = rng.gauss(0, 0.05)
    return (u + 0.03 * (rng.expovariate(1) - 1)) - (u + 0.03 * (rng.expovariate(1) - 1))


def _collapsing_arms(rng: random.Random) -> float:
    """Either arm collapses (0.2 lower) on 10 % of seeds, independently: arm - ref."""
    a = rng.gauss(0, 0.02) - (0.2 if rng.random() < 0.1 else 0.0)
    return a - (rng.gauss(0, 0.02) - (0.2 if rng.random() < 0.1 else 0.0))


def _one_outlier(rng: random.Random, n: int) -> list[float]:
    """Exactly one seed collapses (0.2 lower), in one of the two arms at random."""
    d = [rng.gauss(0, 0.02) for _ in range(n)]
    d[rng.randrange(n)] += rng.choice((-0.2, 0.2))
    return d


NO_EFFECT: dict[str, Shape] = {
    "normal": _iid(lambda r: r.gauss(0, 0.02)),
    "student-t 3 df": _iid(_student_t3),
    "contaminated normal": _iid(lambda r: r.gauss(0, 0.1 if r.random() < 0.1 else 0.02)),
    "skewed outcomes": _iid(_skewed_outcomes),
    "collapsing arms": _iid(_collapsing_arms),
    "one outlier seed": _one_outlier,
}
"""No effect: the two arms of a seed are exchangeable, so each difference is symmetric about 0
whatever the shape of the arms' outcomes; the sign-flip test is exact under this null."""
MEAN_ZERO_ASYMMETRIC: dict[str, Shape] = {
    "centred exponential": _iid(lambda r: 0.03 * (r.expovariate(1) - 1)),
    "rare one-sided collapse": _iid(lambda r: -0.2 if r.random() < 0.1 else r.gauss(0.2 / 9, 0.02)),
}
"""Mean 0 but asymmetric: the arms differ (one collapses on 1 seed in 10 and is slightly better on
the others), the mean difference is 0. No test of the mean holds its level here at 10 seeds."""


def resampled(diffs: Sequence[float]) -> Shape:
    """The observed differences centred on 0 and drawn with replacement (their skew kept)."""
    m = sum(diffs) / len(diffs)
    centred = [d - m for d in diffs]
    return lambda rng, n: [rng.choice(centred) for _ in range(n)]


def false_positive_rates(shape: Shape, *, n: int, trials: int, seed: str) -> tuple[float, float]:
    """(sign-flip test, t-interval) false-positive rates: the share of `trials` experiments of `n`
    differences from `shape` where the two-sided sign-flip p is below :data:`ALPHA` (the verdict
    test in a family of one claim), and where the 95 % t-interval excludes 0."""
    rng = random.Random(seed)
    sf = t = 0
    for _ in range(trials):
        d = shape(rng, n)
        sf += signflip_p(d) < ALPHA
        t += t_interval(d).excludes_zero() != 0
    return sf / trials, t / trials


def main(argv: Sequence[str]) -> None:
    """Print the rates of every shape (and of each claim's resampled differences of a run directory)."""
    n, trials = 10, 20_000
    print(f"false-positive rate at {n} seeds, {trials:,} experiments each: sign-flip test | t-interval")
    for group, shapes in (("no effect", NO_EFFECT), ("mean 0, asymmetric", MEAN_ZERO_ASYMMETRIC)):
        for name, shape in shapes.items():
            sf, t = false_positive_rates(shape, n=n, trials=trials, seed=f"null-{name}")
            print(f"  {group:20s} {name:25s} {sf:6.1%} | {t:6.1%}")
    for run_dir in argv:
        summary = reanalyse(run_dir, figures=False)
        for c in summary["claims"]:
            d = c["interval"]["diffs"]
            if len(d) < 2:
                continue
            sf, t = false_positive_rates(resampled(d), n=len(d), trials=trials, seed=f"resampled-{c['key']}")
            print(f"  resampled {c['key']:30s} {c['metric']:15s} {sf:6.1%} | {t:6.1%}")


if __name__ == "__main__":
    main(sys.argv[1:])
