"""Distributions of the selected trajectories per source: rewards (with a histogram), lengths
(turns and tokens, with a histogram) and statuses."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from trajstore.audit.predicate import selected_cte
from trajstore.audit.report import Report


@dataclass(frozen=True)
class RewardReport(Report):
    """Rewards of the selected trajectories.

    Attributes:
        by_source: ``trajectories``, ``with_reward``, ``null_reward``, ``mean``, ``std``
            (sample), ``min``, ``p50``, ``max`` and ``share_positive`` (share of rewards > 0),
            over trajectories, then ``episodes`` (distinct ``episode_id``: an episode stored as
            several linked trajectories counts once).
        histogram: per (source, bin): ``bin_lo``, ``bin_hi``, ``trajectories``; REWARD_BINS
            equal-width bins between the smallest and largest reward (all sources), the last
            bin closed; one bin when every reward is equal.
    """

    by_source: duckdb.DuckDBPyRelation
    histogram: duckdb.DuckDBPyRelation

    KEYS = {"by_source": ("source",), "histogram": ("source", "bin")}
    EMPTY = {"by_source": "no trajectories selected", "histogram": "no selected trajectory has a reward"}


@dataclass(frozen=True)
class LengthReport(Report):
    """Lengths of the selected trajectories.

    Attributes:
        by_source: ``trajectories``, then for turns (action spans), action tokens, observation
            tokens and all tokens: ``*_mean``, ``*_p50``, ``*_p90``, ``*_max``.
        histogram: per (source, bin) of action tokens per trajectory, power-of-two bins
            ``[action_tokens_lo, action_tokens_hi]`` (0, 1, 2-3, 4-7, ...): ``trajectories``.
    """

    by_source: duckdb.DuckDBPyRelation
    histogram: duckdb.DuckDBPyRelation

    KEYS = {"by_source": ("source",), "histogram": ("source", "action_tokens_lo", "action_tokens_hi")}
    EMPTY = {"by_source": "no trajectories selected", "histogram": "no trajectories selected"}


@dataclass(frozen=True)
class StatusReport(Report):
    """Per (source, status): ``trajectories``, ``share`` (0..1) of the source's trajectories, and
    ``episodes``: distinct ``episode_id`` with a trajectory of that status (an episode stored as
    several trajectories counts once per status its trajectories have)."""

    by_source: duckdb.DuckDBPyRelation

    KEYS = {"by_source": ("source", "status")}
    EMPTY = {"by_source": "no trajectories selected"}


REWARD_BINS: int = 20
"""Equal-width bins of the reward histogram."""


def reward_report(conn: duckdb.DuckDBPyConnection, *, where: str | None = None) -> RewardReport:
    """Reward distribution per source (nearest-rank median) and histogram.

    Raises:
        AuditError: the predicate is invalid.
    """
    sel = selected_cte(conn, where)
    nb = REWARD_BINS
    histogram = conn.sql(
        f"WITH {sel}, r AS (SELECT source, reward FROM sel WHERE reward IS NOT NULL), "
        f"b AS (SELECT min(reward) AS lo, max(reward) AS hi FROM r), "
        f"x AS (SELECT source, b.lo, b.hi, CASE WHEN b.hi = b.lo THEN 0 "
        f"ELSE least(CAST(floor((reward - b.lo) / (b.hi - b.lo) * {nb}) AS BIGINT), {nb - 1}) END AS bin FROM r, b) "
        f"SELECT source, bin, CASE WHEN hi = lo THEN lo ELSE lo + bin * (hi - lo) / {nb} END AS bin_lo, "
        f"CASE WHEN hi = lo THEN hi ELSE lo + (bin + 1) * (hi - lo) / {nb} END AS bin_hi, "
        f"count(*) AS trajectories FROM x GROUP BY ALL ORDER BY source, bin")
    return RewardReport(histogram=histogram, by_source=conn.sql(
        f"WITH {sel} SELECT source, count(*) AS trajectories, count(reward) AS with_reward, "
        f"count(*) - count(reward) AS null_reward, avg(reward) AS mean, stddev_samp(reward) AS std, "
        f"min(reward) AS min, quantile_disc(reward, 0.5) AS p50, max(reward) AS max, "
        f"avg(CASE WHEN reward > 0 THEN 1.0 ELSE 0.0 END) FILTER (WHERE reward IS NOT NULL) AS share_positive, "
        f"count(DISTINCT episode_id) AS episodes "
        f"FROM sel GROUP BY source ORDER BY source"))


LENGTH_COLUMNS: dict[str, str] = {
    "turns": "num_actions", "action_tokens": "num_action_tokens",
    "observation_tokens": "num_observation_tokens", "tokens": "num_tokens",
}
"""Length report name -> ``trajectories`` column."""


def length_report(conn: duckdb.DuckDBPyConnection, *, where: str | None = None) -> LengthReport:
    """Lengths (turns, action / observation / all tokens) per source. Raises AuditError on a bad predicate."""
    cols = ", ".join(
        f"avg({c}) AS {n}_mean, quantile_disc({c}, 0.5) AS {n}_p50, quantile_disc({c}, 0.9) AS {n}_p90, "
        f"max({c}) AS {n}_max" for n, c in LENGTH_COLUMNS.items())
    sel = selected_cte(conn, where)
    lo = "CASE WHEN num_action_tokens = 0 THEN 0 ELSE CAST(pow(2, floor(log2(num_action_tokens))) AS BIGINT) END"
    histogram = conn.sql(
        f"WITH {sel} SELECT source, {lo} AS action_tokens_lo, greatest(2 * ({lo}) - 1, 0) AS action_tokens_hi, "
        f"count(*) AS trajectories FROM sel GROUP BY ALL ORDER BY source, action_tokens_lo")
    return LengthReport(histogram=histogram, by_source=conn.sql(
        f"WITH {sel} SELECT source, count(*) AS trajectories, {cols} FROM sel "
        f"GROUP BY source ORDER BY source"))


def status_report(conn: duckdb.DuckDBPyConnection, *, where: str | None = None) -> StatusReport:
    """Trajectories per (source, status). Raises AuditError on a bad predicate."""
    return StatusReport(by_source=conn.sql(
        f"WITH {selected_cte(conn, where)} SELECT source, status, count(*) AS trajectories, "
        f"count(*) / sum(count(*)) OVER (PARTITION BY source) AS share, count(DISTINCT episode_id) AS episodes "
        f"FROM sel GROUP BY source, status "
        f"ORDER BY source, status"))
