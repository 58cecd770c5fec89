"""The DIS clip audit: shares of action tokens the policy loss masked (below / above the band),
per training step and per staleness bucket, from the ``consumed`` records (``traj stats --clip``)."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from trajstore.audit.predicate import run_filter, selected_cte
from trajstore.audit.report import NOT_CONSUMED, Report, consumed_but_unversioned

CLIP_BY_STALENESS_NOTE = ("a trajectory's bucket is the staleness of its oldest token, and all its action tokens "
                          "count there; staleness.histogram counts each token at its own staleness")

_NO_CLIP_STALENESS = ("the consumed trajectories carry no policy version (text-only logs): their staleness is "
                      "undefined (by_step has them)")

EXACT_STALENESS_BUCKETS: int = 4
"""Staleness 0..3 versions get a bucket each; from 4 on, buckets double: [4, 7], [8, 15], ..."""


@dataclass(frozen=True)
class ClipReport(Report):
    """DIS masking (docs/sao.md, mechanism 1) from the ``consumed`` records. Fractions are of action
    tokens, averaged over trajectories weighted by their action tokens.

    Attributes:
        by_step: per (run_id, step): ``trainer_version``, ``trajectories``, ``action_tokens``,
            ``masked_below`` (ratio <= 1 - eps_low), ``masked_above`` (ratio >= 1 + eps_high),
            ``masked`` (their sum), ``ratio_mean``.
        by_staleness: per (run_id, staleness bucket ``[staleness_lo, staleness_hi]``) with the
            trajectory's staleness = ``consumed.staleness_max`` (trainer version - oldest span):
            the same fractions. Trajectories without a policy version (undefined staleness) are
            in ``by_step`` only.
    """

    by_step: duckdb.DuckDBPyRelation
    by_staleness: duckdb.DuckDBPyRelation

    KEYS = {"by_step": ("run_id", "step"), "by_staleness": ("run_id", "staleness_lo", "staleness_hi")}
    EMPTY = {"by_step": NOT_CONSUMED, "by_staleness": NOT_CONSUMED}
    NOTES = {"by_staleness": CLIP_BY_STALENESS_NOTE}

    def empty_note(self, table: str) -> str | None:
        if table == "by_staleness":
            return consumed_but_unversioned(self, table, "by_step", _NO_CLIP_STALENESS)
        return super().empty_note(table)


def _bucket_sql(x: str) -> tuple[str, str]:
    lo = (f"CASE WHEN {x} < {EXACT_STALENESS_BUCKETS} THEN {x} "
          f"ELSE CAST(pow(2, floor(log2({x}))) AS BIGINT) END")
    hi = f"CASE WHEN {x} < {EXACT_STALENESS_BUCKETS} THEN {x} ELSE 2 * ({lo}) - 1 END"
    return lo, hi


def _masked_cols() -> str:
    def wmean(col: str) -> str:
        return (f"sum(({col}) * num_action_tokens) / nullif(sum(num_action_tokens) FILTER "
                f"(WHERE {col} IS NOT NULL), 0)")
    return (f"{wmean('masked_below')} AS masked_below, {wmean('masked_above')} AS masked_above, "
            f"{wmean('masked_below + masked_above')} AS masked, {wmean('ratio_mean')} AS ratio_mean")


def clip_report(conn: duckdb.DuckDBPyConnection, *, where: str | None = None,
                run: str | None = None) -> ClipReport:
    """DIS masked fractions per step and per staleness bucket, from ``consumed`` joined with the
    selected trajectories (staleness buckets: :data:`EXACT_STALENESS_BUCKETS`).

    Raises:
        AuditError: the predicate is invalid.
    """
    base = (f"WITH {selected_cte(conn, where)}, c AS (SELECT c.*, "
            # a record without a policy version (null; -1 in records written before this was fixed)
            # has no staleness: never trainer_version + 1
            f"CASE WHEN c.min_policy_version IS NULL OR c.min_policy_version < 0 THEN NULL "
            f"ELSE coalesce(c.staleness_max, c.trainer_version - c.min_policy_version) END AS staleness "
            f"FROM consumed c "
            f"JOIN sel USING (trajectory_id) WHERE {run_filter(run, 'c.run_id')})")
    by_step = conn.sql(
        f"{base} SELECT run_id, step, max(trainer_version) AS trainer_version, count(*) AS trajectories, "
        f"sum(num_action_tokens) AS action_tokens, {_masked_cols()} FROM c GROUP BY run_id, step "
        f"ORDER BY run_id, step")
    lo, hi = _bucket_sql("staleness")
    by_staleness = conn.sql(
        f"{base} SELECT run_id, {lo} AS staleness_lo, {hi} AS staleness_hi, count(*) AS trajectories, "
        f"sum(num_action_tokens) AS action_tokens, {_masked_cols()} FROM c WHERE staleness IS NOT NULL "
        f"GROUP BY ALL ORDER BY run_id, staleness_lo")
    return ClipReport(by_step=by_step, by_staleness=by_staleness)
