"""Nearest-rank percentiles in SQL, the rule every audit report uses.

The p-th percentile of N observations (tokens or trajectories, each counted with its weight) is
the smallest value v such that at least ceil(p * N / 100) observations are <= v. For unweighted
data this is DuckDB's ``quantile_disc``; integer arithmetic keeps it exact.
"""

from __future__ import annotations

PERCENTILES: tuple[int, ...] = (50, 90, 99)
"""Percentiles every distribution summary reports (nearest rank, see the module docstring)."""


def weighted_percentiles_sql(hist: str, groups: tuple[str, ...], value: str, weight: str, prefix: str) -> str:
    """SELECT computing nearest-rank percentiles of `value` weighted by `weight` from the
    relation `hist` (one row per group and value), per `groups`.

    Output columns: the groups, ``{prefix}p50/p90/p99`` (see :data:`PERCENTILES`),
    ``{prefix}max`` and ``{prefix}mean`` (weighted). ``cum * 100 >= p * total`` is, for integer
    cumulative weights, exactly ``cum >= ceil(p * total / 100)``.
    """
    g = ", ".join(groups)
    part = f"PARTITION BY {g}" if groups else ""
    pcts = "".join(f", min(v) FILTER (WHERE cum * 100 >= {p} * total) AS {prefix}p{p}" for p in PERCENTILES)
    return (f"SELECT {g + ', ' if g else ''}{pcts[2:]}, max(v) AS {prefix}max, "
            f"sum(v * w) / sum(w) AS {prefix}mean FROM (SELECT {g + ', ' if g else ''}{value} AS v, {weight} AS w, "
            f"sum({weight}) OVER ({part} ORDER BY {value} ROWS UNBOUNDED PRECEDING) AS cum, "
            f"sum({weight}) OVER ({part}) AS total FROM {hist}) {'GROUP BY ' + g if g else ''}")


def summary_columns(prefix: str, *extra: str) -> str:
    """Output columns of :func:`weighted_percentiles_sql`: ``{prefix}p50, {prefix}p90, {prefix}p99``
    then ``{prefix}<extra>`` for each extra statistic (``max``, ``mean``)."""
    return ", ".join([f"{prefix}p{p}" for p in PERCENTILES] + [f"{prefix}{e}" for e in extra])
