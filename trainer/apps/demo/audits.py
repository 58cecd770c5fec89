"""The audits of a finished ``traj demo`` run, read back from the store with DuckDB: staleness,
clip, reward and model calls per policy version, and the critic's explained variance."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trajstore import audit
from trajstore.proxy.recorder import PROXY_SOURCE

if TYPE_CHECKING:
    from trajstore.trainer.apps.demo.result import DemoResult


def demo_filter(run_id: str) -> str:
    """DuckDB predicate selecting this demo's trajectories (the store may hold earlier demos)."""
    return f"json_extract_string(metadata, '$.demo_run') = '{run_id}'"


def proxy_run_filter(run_id: str) -> str:
    """DuckDB predicate selecting every trajectory the demo's proxy wrote, aborted ones included:
    the proxy tags them with its --follow-run (metadata ``run_id``), while ``demo_run`` comes with
    an agent's /finish, which an episode cut short never sent."""
    return f"source = '{PROXY_SOURCE}' AND json_extract_string(metadata, '$.run_id') = '{run_id}'"


def _rows(rel: Any) -> list[dict[str, Any]]:
    cols = rel.columns
    return [dict(zip(cols, r)) for r in rel.fetchall()]


def read_audits(result: DemoResult) -> None:
    """Fill `result`'s audits and ``steps_done`` from its store (the run's proxy has stopped)."""
    conn = audit.connect(result.store)
    where = demo_filter(result.run_id)
    st = audit.staleness_report(conn, where=where, run=result.run_id)
    result.staleness = _rows(st.by_run)
    result.staleness_histogram = _rows(st.histogram)
    result.clip = _rows(audit.clip_report(conn, where=where, run=result.run_id).by_step)
    result.reward_by_version = _rows(audit.sql(conn, reward_by_version_sql(result.run_id)))
    # One row per iteration the run recorded, from the long `steps` view: the `step_metrics` pivot has a
    # column per metric name only once some run in the store logged it, so a run stopped before its
    # first iteration (a time limit under load) had no "value/explained_variance" column to select.
    result.explained_variance = _rows(audit.sql(conn, (
        "SELECT step, avg(value) FILTER (WHERE metric = 'value/explained_variance') AS explained_variance "
        f"FROM steps WHERE run_id = '{result.run_id}' GROUP BY step ORDER BY step")))
    result.calls_by_version = {int(r["policy_version"]): int(r["calls"]) for r in _rows(audit.sql(conn, (
        "SELECT policy_version, count(*) AS calls FROM spans WHERE kind = 'action' AND policy_version IS NOT NULL "
        f"AND trajectory_id IN (SELECT trajectory_id FROM trajectories WHERE {proxy_run_filter(result.run_id)}) "
        "GROUP BY 1 ORDER BY 1")))}
    # critic warm-up iterations are recorded as step -1; policy steps count from 0
    result.steps_done = len({r["step"] for r in result.explained_variance if r["step"] is not None and r["step"] >= 0})


def reward_by_version_sql(run_id: str) -> str:
    """Per policy version that generated a completed demo trajectory (its newest action span): trajectories,
    mean reward, share solved (reward = 1) and how many the run consumed."""
    return (
        "SELECT t.max_policy_version AS policy_version, count(*) AS trajectories, "
        "round(avg(t.reward), 3) AS mean_reward, round(avg(CAST(t.reward = 1 AS DOUBLE)), 3) AS solved, "
        f"count(c.trajectory_id) AS consumed FROM trajectories t LEFT JOIN (SELECT DISTINCT trajectory_id FROM "
        f"consumed WHERE run_id = '{run_id}') c USING (trajectory_id) WHERE {demo_filter(run_id)} "
        "AND t.status = 'completed' "
        "GROUP BY ALL ORDER BY policy_version")
