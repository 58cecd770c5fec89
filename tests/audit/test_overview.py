"""trajstore/audit/overview.py: the short overview of ``traj stats``: one row per source
and per run, numbers worked out by hand from the known store (tests/helpers/stores.py), and the
(N other sources) and (N other runs) rows that keep it one 80x24 screen however many sources and
runs a store has."""

from __future__ import annotations

import pytest

import trajstore as ts
from trajstore import audit
from trajstore.audit.overview import BRIEF_TOP_RUNS, BRIEF_TOP_SOURCES


def test_by_source_and_runs_of_the_known_store(known_store):
    rep = audit.brief_report(audit.connect(known_store))
    rows = {r[0]: r[1:] for r in rep.by_source.fetchall()}
    # sdk: A, B (first copy: reward 0.0), E, F. completed: A, F. rewards 1.0, 0.0, 0.5 (E none) -> 0.5.
    # every action token has a log-prob.
    assert rows["sdk"] == (4, 2, 0.5, 1.0)
    # openhands: C (6 action tokens with log-probs), D (3 action tokens without): 6 / 9 log-probs.
    n, completed, reward, lp = rows["openhands"]
    assert (n, completed, reward) == (2, 1, -1.0) and lp == pytest.approx(6 / 9)
    runs = {r[0]: r[1:] for r in rep.runs.fetchall()}
    # r1: steps 0, 1; A, B at v8, C at v9; staleness_max 3, 2, 5 -> 10/3;
    # masked (0.25 * 4 + 0.5 * 2 + (0.5 + 1/6) * 6) / 12 = 6 / 12
    steps, consumed, staleness, masked = runs["r1"]
    assert (steps, consumed) == (2, 3)
    assert staleness == pytest.approx(10 / 3) and masked == pytest.approx(0.5)
    assert runs["r2"] == (1, 1, 5.0, 0.75)  # A at v10: 10 - 5; (0.5 + 0.25)


def test_where_and_run_restrict_it(known_store):
    rep = audit.brief_report(audit.connect(known_store), where="source = 'openhands'", run="r1")
    assert [r[0] for r in rep.by_source.fetchall()] == ["openhands"]
    assert [r[:3] for r in rep.runs.fetchall()] == [("r1", 1, 1)]  # only C, trained at step 1


def test_many_sources_fold_into_one_row(tmp_store, make_trajectory):
    import numpy as np

    rng = np.random.default_rng(0)
    n = BRIEF_TOP_SOURCES + 5
    trajs = []
    for i in range(n):  # source s<i> holds i + 1 trajectories
        for j in range(i + 1):
            t = make_trajectory(rng, trajectory_id=f"s{i}-{j}")
            trajs.append(t.model_copy(update={"source": f"s{i:02d}"}))
    ts.write_trajectories(tmp_store, trajs)
    rows = audit.brief_report(audit.connect(tmp_store)).by_source.fetchall()
    assert len(rows) == BRIEF_TOP_SOURCES + 1
    assert rows[0][:2] == (f"s{n - 1:02d}", n)  # largest first
    assert rows[-1][:2] == ("(5 other sources)", 1 + 2 + 3 + 4 + 5)  # the five smallest


def test_the_runs_that_consumed_last_come_first_and_the_rest_fold_into_one_row(known_store):
    import datetime as dt

    import pyarrow as pa

    from tests.helpers.stores import T0, consumed_row
    from trajstore.schema import CONSUMED_SCHEMA
    from trajstore.store.layout import run_consumed_dir

    assert BRIEF_TOP_RUNS == 3  # the hand-worked rows below assume it
    # the known store's r1 (A, B, C) and r2 (A) consumed at T0; q1..q3 consume F later, q3 last.
    # F: actions at v6 and v8 (4 of 5 tokens masked in q<k>), trainer v9 -> staleness_max 3
    for k in (1, 2, 3):
        row = dict(consumed_row(f"q{k}", 0, 9, "F", 6, 8, 5, 0.8, 0.0, 1.0), consumed_at=T0 + dt.timedelta(hours=k))
        known_store.write_table(pa.Table.from_pylist([row], schema=CONSUMED_SCHEMA), subdir=run_consumed_dir(f"q{k}"))
    rows = audit.brief_report(audit.connect(known_store)).runs.fetchall()
    assert [r[:3] for r in rows] == [("q3", 1, 1), ("q2", 1, 1), ("q1", 1, 1), ("(2 other runs)", 3, 4)]
    # r1 + r2: staleness_max 3, 2, 5 (r1) and 5 (r2) -> 15 / 4; masked (6 + 0.75 * 4) / (12 + 4) = 9 / 16
    assert rows[-1][3] == pytest.approx(15 / 4) and rows[-1][4] == pytest.approx(9 / 16)
