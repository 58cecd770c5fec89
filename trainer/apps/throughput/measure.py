"""What one arm's run measured, read back from its store with the store's own audits
(:mod:`trajstore.audit`) and set against what the trainer recorded and the rollout side saw.

Staleness comes from :func:`trajstore.audit.staleness_report`, and :func:`staleness_check` holds it
against the trainer's own metric exactly: per-token counts, sums and maxima from the audit's
histogram against ``staleness/mean`` x tokens and ``staleness/max`` of every step record (the mean
of a step times its integer token count gives back its integer sum), and per trajectory against
the trainer's consumed records (``staleness_max``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from trajstore import audit
from trajstore.audit.views import sql_literal
from trajstore.trainer.apps.throughput.agent import EpisodeRecord

_ROUNDING = 1e-6
"""A step's mean x its token count must be this close to an integer (it is the sum of integers)."""


class StalenessTotals(BaseModel):
    """Integer totals of one run's staleness (policy versions), one side of the check."""

    tokens: int
    token_sum: int
    token_max: int | None
    trajectories: int
    trajectory_sum: int
    trajectory_max: int | None


class StalenessCheck(BaseModel):
    """The store's audit against the trainer's records.

    Attributes:
        equal: every total is the same on both sides.
        audit: from ``staleness_report`` (histogram). trainer: from the step metrics and the
            consumed records.
        problems: what differs, in words (empty when equal).
    """

    equal: bool
    audit: StalenessTotals
    trainer: StalenessTotals
    problems: list[str]


class StalenessSummary(BaseModel):
    """Per-token and per-trajectory staleness of the consumed data (the audit's figures)."""

    token_mean: float | None
    token_p99: float | None
    token_max: float | None
    traj_mean: float | None
    traj_p99: float | None
    traj_max: float | None


def _rows(rel: object) -> list[dict]:
    cols = rel.columns  # type: ignore[attr-defined]
    return [dict(zip(cols, r)) for r in rel.fetchall()]  # type: ignore[attr-defined]


def staleness_check(conn: object, run_id: str) -> tuple[StalenessSummary, StalenessCheck]:
    """The audit's staleness of `run_id` and its check against the trainer's records.

    Args:
        conn: an audit connection (:func:`trajstore.audit.connect`) to the arm's store.

    Raises:
        ValueError: a step's mean x tokens is not an integer (the metric is not what it says).
    """

    rep = audit.staleness_report(conn, run=run_id)  # type: ignore[arg-type]
    hist = _rows(rep.histogram)
    by_run = _rows(rep.by_run)
    n = sum(int(h["action_tokens"]) for h in hist)
    nt = sum(int(h["trajectories"]) for h in hist)
    a = StalenessTotals(
        tokens=n, token_sum=sum(int(h["staleness"]) * int(h["action_tokens"]) for h in hist),
        token_max=max((int(h["staleness"]) for h in hist if h["action_tokens"]), default=None),
        trajectories=nt, trajectory_sum=sum(int(h["staleness"]) * int(h["trajectories"]) for h in hist),
        trajectory_max=max((int(h["staleness"]) for h in hist if h["trajectories"]), default=None))
    row = by_run[0] if by_run else {}
    summary = StalenessSummary(
        token_mean=a.token_sum / n if n else None, token_p99=row.get("token_p99"), token_max=a.token_max,
        traj_mean=a.trajectory_sum / nt if nt else None, traj_p99=row.get("traj_p99"), traj_max=a.trajectory_max)

    steps = _rows(audit.sql(conn, _step_query(run_id, {  # type: ignore[arg-type]
        "mean": "staleness/mean", "max": "staleness/max", "tokens": "data/action_tokens",
        "unversioned": "staleness/unversioned_action_tokens"})))
    t_tokens = t_sum = 0
    t_max: int | None = None
    for s in steps:
        k = int(round(s["tokens"])) - int(round(s["unversioned"] or 0))
        if s["mean"] is None or k == 0:
            continue
        total = s["mean"] * k
        if abs(total - round(total)) > _ROUNDING:
            raise ValueError(f"step {s['step']} of run {run_id}: staleness/mean x {k} tokens = {total}, not an "
                             "integer sum of integer staleness values")
        t_tokens, t_sum = t_tokens + k, t_sum + int(round(total))
        t_max = int(s["max"]) if t_max is None else max(t_max, int(s["max"]))
    traj = _rows(audit.sql(conn, (  # type: ignore[arg-type]
        "SELECT count(staleness_max) AS n, coalesce(sum(staleness_max), 0) AS s, max(staleness_max) AS m "
        f"FROM consumed WHERE run_id = {sql_literal(run_id)} AND step >= 0")))[0]
    t = StalenessTotals(tokens=t_tokens, token_sum=t_sum, token_max=t_max, trajectories=int(traj["n"]),
                        trajectory_sum=int(traj["s"]), trajectory_max=None if traj["m"] is None else int(traj["m"]))
    problems = [f"{f}: audit {getattr(a, f)} vs trainer {getattr(t, f)}"
                for f in StalenessTotals.model_fields if getattr(a, f) != getattr(t, f)]
    return summary, StalenessCheck(equal=not problems, audit=a, trainer=t, problems=problems)


@dataclass(frozen=True)
class StepTime:
    """One policy step as the trainer recorded it (epoch seconds; durations in s)."""

    step: int
    end: float
    step_s: float
    wait_s: float
    trajectories: int
    action_tokens: int

    @property
    def got_batch(self) -> float:
        """When the trainer had the step's batch (its wait ended)."""
        return self.end - self.step_s + self.wait_s


def _step_query(run_id: str, metrics: dict[str, str], extra: str = "") -> str:
    """The run's policy steps (step >= 0) in order, one column per metric (``alias: metric``),
    pivoted from the long ``steps`` view: the ``step_metrics`` view has a column per metric only
    once some run logged it, so a run that recorded no step would be a binder error there."""
    cols = "".join(f", avg(value) FILTER (WHERE metric = {sql_literal(m)}) AS {a}" for a, m in metrics.items())
    return (f"SELECT step, {extra}count(*) AS n{cols} FROM steps WHERE run_id = {sql_literal(run_id)} "
            "AND step >= 0 GROUP BY step ORDER BY step")


def step_times(conn: object, run_id: str) -> list[StepTime]:
    """The run's policy steps in order, from its step records."""

    rows = _rows(audit.sql(conn, _step_query(run_id, {  # type: ignore[arg-type]
        "step_s": "perf/step_s", "wait_frac": "perf/data_wait_frac", "trajectories": "data/trajectories",
        "tokens": "data/action_tokens"}, "epoch_us(max(wall_time)) AS end_us, ")))
    return [StepTime(int(r["step"]), r["end_us"] / 1e6, float(r["step_s"]), float(r["wait_frac"] * r["step_s"]),
                     int(round(r["trajectories"])), int(round(r["tokens"]))) for r in rows]


def dis_masked(conn: object, run_id: str) -> float | None:
    """Share of the consumed action tokens DIS masked (both sides of the band), from the clip audit."""

    rows = _rows(audit.clip_report(conn, run=run_id).by_step)  # type: ignore[arg-type]
    rows = [r for r in rows if r["step"] >= 0 and r["masked"] is not None]
    tokens = sum(r["action_tokens"] for r in rows)
    return sum(r["masked"] * r["action_tokens"] for r in rows) / tokens if tokens else None


def overlap(a: float, b: float, lo: float, hi: float) -> float:
    """Length of [a, b] inside [lo, hi] (s)."""
    return max(0.0, min(b, hi) - max(a, lo))


def trainer_idle(steps: Sequence[StepTime], lo: float, hi: float) -> float:
    """Seconds of [lo, hi] the trainer waited for data (each step's wait, clipped to the window)."""
    return sum(overlap(s.end - s.step_s, s.got_batch, lo, hi) for s in steps)


def rollout_busy(episodes: Sequence[EpisodeRecord], lo: float, hi: float) -> float:
    """Slot-seconds of [lo, hi] spent in episodes (after the gate let them in)."""
    return sum(overlap(*e.busy, lo, hi) for e in episodes if e.end > 0)


def process_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) process `pid` has used so far, its threads included (Linux
    ``/proc/<pid>/stat``); None where that cannot be read."""

    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def cpu_snapshot(pids: dict[str, int | None]) -> dict[str, float | None]:
    """:func:`process_cpu_s` of each named process (None for a pid of None)."""
    return {name: None if pid is None else process_cpu_s(pid) for name, pid in pids.items()}
