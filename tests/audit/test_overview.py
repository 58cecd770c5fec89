"""trajstore/audit/overview.py: the short overview of ``traj stats`` (issue 27): one row per source
and per run, numbers worked out by hand from the known store (tests/helpers/stores.py), and the
(N other sources) row that keeps it one screen however many sources a store has."""

from __future__ import annotations

import pytest

import trajstore as ts
from trajstore import audit
from trajstore.audit.overview import BRIEF_TOP_SOURCES


def test_by_source_and_runs_of_the_known_store(known_store):
    rep = audit.brief_report(audit.connect(known_store))
    rows = {r[0]: r[1:] for r in rep.by_source.fetchall()}
    # sdk: A, B (first copy: reward 0.0), E, F. completed: A, F. rewards 1.0, 0.0, 0.5 (E none) -> 0.5.
    # tokens 8, 3, 5, 6 -> nearest-rank p50 = 2nd of 4 = 5. every action token has a log-prob;
    # A, B, F carry policy versions, E has no action: 3 / 4.
    assert rows["sdk"] == (4, 2, 0.5, 5, 1.0, 0.75)
    # openhands: C (10 tokens, 6 action tokens with log-probs), D (5 tokens, 3 action tokens without):
    # 6 / 9 log-probs; both versioned (D's first action has v3).
    n, completed, reward, p50, lp, versioned = rows["openhands"]
    assert (n, completed, reward, p50, versioned) == (2, 1, -1.0, 5, 1.0) and lp == pytest.approx(6 / 9)
    runs = {r[0]: r[1:] for r in rep.runs.fetchall()}
    # r1: steps 0, 1; A, B at v8, C at v9; staleness_max 3, 2, 5 -> 10/3;
    # masked (0.25 * 4 + 0.5 * 2 + (0.5 + 1/6) * 6) / 12 = 6 / 12
    steps, consumed, version, staleness, masked = runs["r1"]
    assert (steps, consumed, version) == (2, 3, 9)
    assert staleness == pytest.approx(10 / 3) and masked == pytest.approx(0.5)
    assert runs["r2"] == (1, 1, 10, 5.0, 0.75)  # A at v10: 10 - 5; (0.5 + 0.25)


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
