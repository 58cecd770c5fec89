"""A call whose tokens came from two policy versions without a reported boundary (weights
reloaded mid-generation) is one action span flagged with both versions: ``policy_version`` the
oldest, ``policy_version_max`` the newest. It is never labelled with a single version; audits
count it and measure its staleness from the oldest version."""

from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pytest

import trajstore as ts
from trajstore import audit
from trajstore.errors import TrajectoryValidationError
from trajstore.reader import read_trajectories
from trajstore.schema import CONSUMED_SCHEMA, SPAN_FIELDS_V1, TRAJECTORY_SCHEMA
from trajstore.store import open_store
from trajstore.validate import validate_trajectory

T0 = datetime(2026, 7, 1, tzinfo=timezone.utc)


def _mixed(tid: str = "m", *, pv: int = 3, pv_max: int | None = 4) -> ts.Trajectory:
    b = ts.TrajectoryBuilder(trajectory_id=tid, source="trajstore/proxy")
    b.add_prompt([1, 2, 3])
    b.add_action([4, 5], [-0.1, -0.2], policy_version=2)  # one version
    b.add_observation([6])
    b.add_action([7, 8, 9], [-0.3, -0.4, -0.5], policy_version=pv, policy_version_max=pv_max)  # reload inside
    b.set_reward(1.0)
    return b.finish(created_at=T0)


def test_the_mixed_span_is_stored_with_both_versions(tmp_path):
    store = str(tmp_path / "s")
    ts.write_trajectories(store, [_mixed()])
    (row,) = read_trajectories(store).to_pylist()
    actions = [s for s in row["spans"] if s["kind"] == "action"]
    assert [(s["policy_version"], s["policy_version_max"]) for s in actions] == [(2, None), (3, 4)]
    # the trajectory's range covers the newest version that produced any of its tokens
    assert (row["min_policy_version"], row["max_policy_version"]) == (2, 4)
    from trajstore.convert import table_to_trajectories

    (back,) = table_to_trajectories(read_trajectories(store))
    assert [(s.policy_version, s.policy_version_max) for s in back.spans if s.kind == "action"] == [(2, None), (3, 4)]


@pytest.mark.parametrize("pv_max, kind, message", [
    (3, "action", "must be > policy_version 3"),  # equal: not mixed, say it with policy_version alone
    (2, "action", "must be > policy_version 3"),
    (5, "observation", "only an action span with a policy_version"),
])
def test_bad_flags_are_refused_naming_the_field(pv_max, kind, message):
    t = _mixed(pv_max=None)
    spans = [s.model_copy() for s in t.spans]
    target = 3 if kind == "action" else 2
    spans[target] = spans[target].model_copy(update={"policy_version_max": pv_max})
    bad = t.model_copy(update={"spans": spans})
    with pytest.raises(TrajectoryValidationError, match=rf"spans\[{target}\]\.policy_version_max.*{message}"):
        validate_trajectory(bad)


def test_v1_shards_read_with_no_mixed_spans(tmp_path):
    """Schema v1 had no such field: its spans read as not mixed (null)."""
    from trajstore.convert import trajectories_to_table

    store = open_store(str(tmp_path / "s"))
    t = _mixed(pv_max=None)
    table = trajectories_to_table([t], version=1)
    assert "policy_version_max" not in {f.name for f, _ in SPAN_FIELDS_V1}
    store.write_table(table, subdir="trajectories")
    (row,) = read_trajectories(store).to_pylist()
    assert all(s["policy_version_max"] is None for s in row["spans"])
    assert read_trajectories(store).schema.field("spans").type == TRAJECTORY_SCHEMA.field("spans").type


def test_staleness_audit_counts_mixed_spans_from_their_oldest_version(tmp_path):
    store = open_store(str(tmp_path / "s"))
    ts.write_trajectories(store, [_mixed("m"), _mixed("plain", pv_max=None)])
    rows = [dict(run_id="r", step=0, trainer_version=5, trajectory_id=tid, rank=0, min_policy_version=2,
                 max_policy_version=vmax, staleness_min=5 - vmax, staleness_max=3, num_action_tokens=5,
                 masked_below=None, masked_above=None, ratio_mean=None, consumed_at=T0)
            for tid, vmax in (("m", 4), ("plain", 3))]
    store.write_table(pa.Table.from_pylist(rows, schema=CONSUMED_SCHEMA), subdir="runs/r/consumed")
    conn = audit.connect(store)
    (r,) = audit.staleness_report(conn, run="r").by_run.fetchall()
    by_run = dict(zip(audit.staleness_report(conn, run="r").by_run.columns, r))
    assert by_run["mixed_version_actions"] == 1  # only trajectory m's second action
    # tokens: per trajectory 2 at v2 (staleness 5 - 2 = 3) and 3 at v3 (5 - 3 = 2; for m: its
    # oldest version 3, although some of those tokens came from v4): max 3, mean (2*3 + 3*2) / 5 = 2.4
    assert by_run["token_max"] == 3 and by_run["token_mean"] == pytest.approx(2.4)
    spans = conn.sql("SELECT trajectory_id, policy_version, policy_version_max FROM spans WHERE kind = 'action' "
                     "ORDER BY trajectory_id, span_index").fetchall()
    assert spans == [("m", 2, None), ("m", 3, 4), ("plain", 2, None), ("plain", 3, None)]
