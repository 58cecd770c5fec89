"""Per-call timing and usage on action spans (schema v4 ``started_at``, ``first_token_at``,
``ended_at``, ``usage_*``): written through the SDK, read back, and queried with `traj sql` to find
slow calls; a v3 shard's spans read them as null."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from typer.testing import CliRunner

from trajstore.builder import TrajectoryBuilder
from trajstore.cli.main import app
from trajstore.convert import trajectories_to_table
from trajstore.models import CallTiming, CallUsage
from trajstore.reader import read_trajectories
from trajstore.store import open_store

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
SLOW_CALLS = """
SELECT trajectory_id, call_id, date_diff('millisecond', started_at, ended_at) AS ms,
       date_diff('millisecond', started_at, first_token_at) AS ttft_ms, usage_cached_tokens
FROM spans WHERE kind = 'action' AND ended_at - started_at > INTERVAL 5 SECOND ORDER BY ms DESC
"""


def _trajectory(tid: str, durations_s: list[float]) -> TrajectoryBuilder:
    b = TrajectoryBuilder(trajectory_id=tid)
    b.add_prompt([1, 2, 3])
    at = T0
    for k, d in enumerate(durations_s):
        timing = CallTiming(started_at=at, first_token_at=at + timedelta(seconds=0.25), ended_at=at + timedelta(seconds=d))
        b.add_action([10 + k, 11 + k], [-0.1, -0.2], policy_version=0, call_id=f"{tid}-c{k}", timing=timing,
                     usage=CallUsage(prompt_tokens=3 + 3 * k, completion_tokens=2, cached_tokens=3 * k))
        b.add_observation([5])
        at += timedelta(seconds=d + 1)
    return b


def test_traj_sql_finds_the_slow_calls(tmp_path):
    store = str(tmp_path / "s")
    w = open_store(store)
    w.write_table(trajectories_to_table([_trajectory("a", [1.5, 7.25, 0.5]).finish(),
                                         _trajectory("b", [12.0, 2.0]).finish()]))
    res = CliRunner().invoke(app, ["sql", store, SLOW_CALLS, "--format", "json"])
    assert res.exit_code == 0, res.output
    assert [(r["call_id"], r["ms"], r["ttft_ms"], r["usage_cached_tokens"]) for r in json.loads(res.stdout)["result"]] == [
        ("b-c0", 12000, 250, 0), ("a-c1", 7250, 250, 3)]
    # the SDK's values come back as written (UTC, microseconds)
    spans = [s for s in read_trajectories(store).to_pylist()[0]["spans"] if s["kind"] == "action"]
    assert spans[1]["started_at"] == T0 + timedelta(seconds=2.5) and spans[1]["usage_prompt_tokens"] == 6


def test_a_v3_shard_reads_no_timing(tmp_path):
    store = str(tmp_path / "s")
    open_store(store).write_table(trajectories_to_table([_trajectory("old", [9.0]).finish()], version=3))
    res = CliRunner().invoke(app, ["sql", store, SLOW_CALLS, "--format", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["result"] == []  # not recorded: nothing is slow, nothing fails
    (act,) = [s for s in read_trajectories(store).to_pylist()[0]["spans"] if s["kind"] == "action"]
    assert act["started_at"] is None and act["usage_completion_tokens"] is None
