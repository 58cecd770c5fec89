"""trajstore/audit/staleness.py: the staleness report against values computed by hand from the known
store (tests/helpers/stores.py)."""

from __future__ import annotations

import pytest

from tests.helpers.relations import pick, rows
from trajstore import audit

STAT = ("token_p50", "token_p90", "token_p99", "token_max", "traj_p50", "traj_p90", "traj_p99", "traj_max")


def test_staleness_consumed_by_run(conn):
    by_run = {r["run_id"]: r for r in rows(audit.staleness_report(conn).by_run)}
    # r1 tokens (trainer - span version, weight = span tokens): A@8: v5 x3 -> 3, v7 x1 -> 1;
    # B@8: v6 x2 -> 2; C@9: v4 x6 -> 5. Counts {1:1, 2:2, 3:3, 5:6}, N = 12, cum 1,3,6,12.
    # p50: cum >= ceil(6) -> 3; p90: cum >= ceil(10.8) = 11 -> 5; p99: 12 -> 5; mean 44/12.
    # Trajectories (worst span): A 3, B 2, C 5 -> sorted [2,3,5]: p50 rank 2 -> 3, p90 rank 3 -> 5.
    r1 = by_run["r1"]
    assert (r1["consumed"], r1["versioned_action_tokens"]) == (3, 12)
    assert pick(r1, *STAT) == (3, 5, 5, 5, 3, 5, 5, 5)
    assert r1["token_mean"] == pytest.approx(44 / 12)
    # r2: A@10: v5 x3 -> 5, v7 x1 -> 3: {3:1, 5:3}, N = 4: p50 rank 2 -> 5; mean (3 + 15) / 4.
    r2 = by_run["r2"]
    assert (r2["consumed"], r2["versioned_action_tokens"]) == (1, 4)
    assert pick(r2, *STAT) == (5, 5, 5, 5, 5, 5, 5, 5)
    assert r2["token_mean"] == pytest.approx(4.5)


def test_staleness_by_source_and_histogram(conn):
    rep = audit.staleness_report(conn, run="r1")
    by_src = {r["source"]: r for r in rows(rep.by_source)}
    # r1 sdk: A, B: {1:1, 2:2, 3:3}, N = 6, cum 1,3,6: p50 rank 3 -> 2; p90 rank ceil(5.4) = 6 -> 3.
    # Trajectories [2, 3]: p50 rank 1 -> 2, p90 rank 2 -> 3. Mean (1 + 4 + 9) / 6.
    assert pick(by_src["sdk"], "consumed", "versioned_action_tokens", *STAT) == (2, 6, 2, 3, 3, 3, 2, 3, 3, 3)
    assert by_src["sdk"]["token_mean"] == pytest.approx(14 / 6)
    assert pick(by_src["openhands"], "consumed", "versioned_action_tokens", *STAT) == (1, 6, 5, 5, 5, 5, 5, 5, 5, 5)
    hist = [pick(r, "run_id", "staleness", "action_tokens", "trajectories") for r in rows(rep.histogram)]
    assert hist == [("r1", 1, 1, 0), ("r1", 2, 2, 1), ("r1", 3, 3, 1), ("r1", 5, 6, 1)]


def test_staleness_unconsumed(conn):
    # Newest version in the store: max over kept action spans = 8 (F); B's stale copy (v1) is ignored.
    # Unconsumed by any run and versioned: D (v3, versioned tokens 2), F (v6 x2, v8 x3).
    un = {r["source"]: r for r in rows(audit.staleness_report(conn).unconsumed)}
    # F: spread 8-6 = 2, lag 8-6 = 2, token lags {2:2, 0:3}, N = 5: p50 rank 3 -> 0, p90 rank 5 -> 2.
    assert pick(un["sdk"], "trajectories", "action_tokens", "newest_version", "spread_p50", "spread_max",
                "lag_p50", "lag_max", "token_lag_p50", "token_lag_p90", "token_lag_max") == (1, 5, 8, 2, 2, 2, 2, 0, 2, 2)
    # D: spread 0, lag 8-3 = 5 on its 2 versioned tokens.
    assert pick(un["openhands"], "trajectories", "action_tokens", "spread_max", "lag_p50", "token_lag_p50") == (
        1, 2, 0, 5, 5)
    # Not consumed by r2: B, C, D, F. sdk: B (spread 0, lag 2, tokens {2:2}), F (spread 2, lag 2,
    # tokens {0:3, 2:2}): spreads [0, 2] -> p50 0, p90 2; lags [2, 2]; tokens {0:3, 2:4}, N = 7:
    # p50 rank 4 -> 2. openhands: C (lag 4, 6 tokens), D (lag 5, 2 tokens): lags [4,5] -> p50 4,
    # p90 5; tokens {4:6, 5:2}, N = 8: p50 rank 4 -> 4, p90 rank 8 -> 5.
    un2 = {r["source"]: r for r in rows(audit.staleness_report(conn, run="r2").unconsumed)}
    assert pick(un2["sdk"], "trajectories", "action_tokens", "spread_p50", "spread_p90", "lag_p50", "lag_max",
                "token_lag_p50") == (2, 7, 0, 2, 2, 2, 2)
    assert pick(un2["openhands"], "trajectories", "action_tokens", "lag_p50", "lag_p90", "token_lag_p50",
                "token_lag_p90") == (2, 8, 4, 5, 4, 5)
