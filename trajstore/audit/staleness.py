"""The staleness audit: policy lag (in versions) of the data a run trained on, per token and per
trajectory, and of the data still waiting (``traj stats --staleness``)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import duckdb

from trajstore.audit.percentiles import summary_columns, weighted_percentiles_sql
from trajstore.audit.predicate import run_filter, selected_cte
from trajstore.audit.report import NOT_CONSUMED, Report, consumed_but_unversioned

STALENESS_HISTOGRAM_NOTE = ("action_tokens: each token at its own staleness; trajectories: each once, at the "
                            "staleness of its oldest token")
"""Why ``staleness.histogram`` and ``clip.by_staleness`` give one staleness different token counts."""

_NO_STALENESS = ("the consumed trajectories' action tokens carry no policy version (text-only logs): their "
                 "staleness is undefined (by_run: unversioned_action_tokens)")


@dataclass(frozen=True)
class StalenessReport(Report):
    """Policy lag of trained and waiting data. Staleness is in policy versions.

    Attributes:
        by_run: one row per run over consumed trajectories: ``consumed`` (consumption records;
            the last column, ``consumed_episodes``, counts their distinct ``episode_id``: an
            episode stored as several linked trajectories counts once),
            ``versioned_action_tokens`` (action tokens with a policy version), per-token staleness (trainer_version - the action span's
            policy_version) ``token_p50/p90/p99/max/mean``, and per-trajectory staleness (trainer
            version - the oldest action span's version, i.e. the worst token)
            ``traj_p50/p90/p99/max``, and ``mixed_version_actions``: consumed action spans whose
            tokens came from several versions without a known boundary (span field
            ``policy_version_max`` set); their tokens count at their oldest version, so the
            staleness shown is an upper bound for them; ``unversioned_action_tokens``: consumed
            action tokens without a policy version (text-only logs trained with
            ``--behaviour-logprobs initial-policy``, engine rollouts whose logs had none), whose
            staleness is undefined, so they are in no other column (the staleness columns count
            versioned tokens only; a bare ``action_tokens 0`` beside them read as "nothing
            consumed"); ``reused``: the consumption records of reuses (trajectories drawn again from
            the replay buffer, ``consumed.reuse`` > 0), also counted in ``consumed``, each at the
            staleness of its own step.
        by_source: the same per (run_id, source).
        histogram: per (run_id, staleness): ``action_tokens`` and ``trajectories`` at that value.
        unconsumed: per source, trajectories with versioned actions not consumed (by the selected
            run, or by any run; the last column, ``episodes``, counts their episodes):
            ``newest_version`` (largest policy version of any action span in the store), version
            ``spread_*`` inside a trajectory (max - min version), ``lag_*`` per trajectory (newest - its oldest version) and ``token_lag_*`` per token
            (newest - its span's version).
    """

    by_run: duckdb.DuckDBPyRelation
    by_source: duckdb.DuckDBPyRelation
    histogram: duckdb.DuckDBPyRelation
    unconsumed: duckdb.DuckDBPyRelation

    KEYS = {"by_run": ("run_id",), "by_source": ("run_id", "source"), "histogram": ("run_id", "staleness"),
            "unconsumed": ("source",)}
    EMPTY = {"by_run": NOT_CONSUMED, "by_source": NOT_CONSUMED, "histogram": NOT_CONSUMED,
             "unconsumed": "no unconsumed trajectory has policy versions"}
    NOTES = {"histogram": f"{STALENESS_HISTOGRAM_NOTE}, the bucket clip.by_staleness uses"}

    def empty_note(self, table: str) -> str | None:
        if table == "histogram":
            return consumed_but_unversioned(self, table, "by_run", _NO_STALENESS)
        return super().empty_note(table)


def staleness_report(conn: duckdb.DuckDBPyConnection, *, where: str | None = None,
                     run: str | None = None) -> StalenessReport:
    """Staleness of consumed data (per token and per trajectory) and lag of unconsumed data.

    Reads only scalar trajectory columns, the ``spans`` column and ``consumed`` (never tokens
    or log-probs). Action spans without a policy version are left out.

    Args:
        where: SQL predicate over ``trajectories`` columns restricting the trajectories.
        run: only this run's consumption records (and "unconsumed" = not consumed by it).

    Raises:
        AuditError: the predicate is invalid.
    """
    # Scan spans, trajectories and consumed records once each, into small temporary tables
    # (per trajectory and policy version: the action tokens), which the four result tables
    # share; re-deriving them per table read the spans column four times.
    tag = uuid.uuid4().hex[:12]
    vh, sel_t, c_t = f"_staleness_versions_{tag}", f"_staleness_sel_{tag}", f"_staleness_consumed_{tag}"
    conn.execute(f"CREATE TEMP TABLE {vh} AS SELECT trajectory_id, policy_version, sum(num_tokens) AS n, "
                 f"count(policy_version_max) AS mixed FROM spans "
                 f"WHERE kind = 'action' AND policy_version IS NOT NULL GROUP BY trajectory_id, policy_version")
    conn.execute(f"CREATE TEMP TABLE {sel_t} AS WITH {selected_cte(conn, where)} SELECT trajectory_id, source, "
                 f"episode_id, min_policy_version, max_policy_version FROM sel")
    conn.execute(f"CREATE TEMP TABLE {c_t} AS SELECT c.run_id, c.step, c.trainer_version, c.trajectory_id, c.reuse, "
                 f"s.source, s.episode_id FROM consumed c JOIN {sel_t} s USING (trajectory_id) "
                 f"WHERE {run_filter(run, 'c.run_id')}")
    uv_t = f"_staleness_unversioned_{tag}"
    conn.execute(f"CREATE TEMP TABLE {uv_t} AS SELECT trajectory_id, sum(num_tokens) AS n FROM spans "
                 f"WHERE kind = 'action' AND policy_version IS NULL GROUP BY trajectory_id")
    tok_t, tr_t = f"_staleness_tok_{tag}", f"_staleness_tr_{tag}"
    conn.execute(f"CREATE TEMP TABLE {tok_t} AS SELECT c.run_id, c.step, c.trajectory_id, c.source, "
                 f"c.trainer_version - v.policy_version AS staleness, v.n AS n, v.mixed AS mixed "
                 f"FROM {c_t} c JOIN {vh} v "
                 f"USING (trajectory_id)")
    conn.execute(f"CREATE TEMP TABLE {tr_t} AS SELECT run_id, step, trajectory_id, any_value(source) AS source, "
                 f"max(staleness) AS staleness FROM {tok_t} GROUP BY run_id, step, trajectory_id")
    base = f"WITH c AS (SELECT * FROM {c_t}), tok AS (SELECT * FROM {tok_t}), tr AS (SELECT * FROM {tr_t})"

    def summary(groups: tuple[str, ...]) -> duckdb.DuckDBPyRelation:
        g = ", ".join(groups)
        return conn.sql(
            f"{base}, th AS (SELECT {g}, staleness, sum(n) AS n FROM tok GROUP BY {g}, staleness), "
            f"trh AS (SELECT {g}, staleness, count(*) AS n FROM tr GROUP BY {g}, staleness), "
            f"tp AS ({weighted_percentiles_sql('th', groups, 'staleness', 'n', 'token_')}), "
            f"rp AS ({weighted_percentiles_sql('trh', groups, 'staleness', 'n', 'traj_')}), "
            f"cnt AS (SELECT {g}, count(*) AS consumed, count(DISTINCT episode_id) AS consumed_episodes, "
            f"count(*) FILTER (WHERE reuse > 0) AS reused, "
            f"coalesce(sum(u.n), 0) AS unversioned_action_tokens "
            f"FROM c LEFT JOIN {uv_t} u USING (trajectory_id) GROUP BY {g}), "
            f"ntok AS (SELECT {g}, sum(n) AS action_tokens, sum(mixed) AS mixed_version_actions FROM tok "
            f"GROUP BY {g}) "
            f"SELECT {g}, consumed, coalesce(action_tokens, 0) AS versioned_action_tokens, "
            f"{summary_columns('token_', 'max', 'mean')}, {summary_columns('traj_', 'max')}, "
            f"coalesce(mixed_version_actions, 0) AS mixed_version_actions, unversioned_action_tokens, "
            f"consumed_episodes, reused "
            f"FROM cnt LEFT JOIN ntok USING ({g}) LEFT JOIN tp USING ({g}) LEFT JOIN rp USING ({g}) ORDER BY {g}")

    histogram = conn.sql(
        f"{base}, th AS (SELECT run_id, staleness, sum(n) AS action_tokens FROM tok GROUP BY ALL), "
        f"trh AS (SELECT run_id, staleness, count(*) AS trajectories FROM tr GROUP BY ALL) "
        f"SELECT run_id, staleness, coalesce(action_tokens, 0) AS action_tokens, "
        f"coalesce(trajectories, 0) AS trajectories FROM th FULL JOIN trh USING (run_id, staleness) "
        f"ORDER BY run_id, staleness")

    consumed_ids = f"SELECT trajectory_id FROM consumed WHERE {run_filter(run)}"
    newest = f"(SELECT max(policy_version) FROM {vh})"
    unconsumed = conn.sql(
        f"WITH u AS (SELECT trajectory_id, source, episode_id, min_policy_version, max_policy_version FROM {sel_t} "
        f"WHERE min_policy_version IS NOT NULL AND trajectory_id NOT IN ({consumed_ids})), "
        f"nw AS (SELECT {newest} AS newest), "
        f"ut AS (SELECT u.source, nw.newest - v.policy_version AS lag, sum(v.n) AS n FROM u "
        f"JOIN {vh} v USING (trajectory_id), nw GROUP BY ALL), "
        f"us AS (SELECT source, max_policy_version - min_policy_version AS spread, count(*) AS n FROM u GROUP BY ALL), "
        f"ul AS (SELECT u.source, nw.newest - min_policy_version AS lag, count(*) AS n FROM u, nw GROUP BY ALL), "
        f"cnt AS (SELECT source, count(*) AS trajectories, count(DISTINCT episode_id) AS episodes FROM u "
        f"GROUP BY source), "
        f"ntok AS (SELECT source, sum(n) AS action_tokens FROM ut GROUP BY source), "
        f"sp AS ({weighted_percentiles_sql('us', ('source',), 'spread', 'n', 'spread_')}), "
        f"lg AS ({weighted_percentiles_sql('ul', ('source',), 'lag', 'n', 'lag_')}), "
        f"tl AS ({weighted_percentiles_sql('ut', ('source',), 'lag', 'n', 'token_lag_')}) "
        f"SELECT source, trajectories, action_tokens, (SELECT newest FROM nw) AS newest_version, "
        f"{summary_columns('spread_', 'max')}, {summary_columns('lag_', 'max')}, "
        f"{summary_columns('token_lag_', 'max')}, episodes "
        f"FROM cnt LEFT JOIN ntok USING (source) LEFT JOIN sp USING (source) LEFT JOIN lg USING (source) "
        f"LEFT JOIN tl USING (source) ORDER BY source")
    return StalenessReport(by_run=summary(("run_id",)), by_source=summary(("run_id", "source")),
                           histogram=histogram, unconsumed=unconsumed)
