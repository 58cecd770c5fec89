"""trajstore/audit/distributions.py: rewards, lengths and statuses against values computed by hand from
the known store (tests/helpers/stores.py)."""

from __future__ import annotations

import pytest

from tests.helpers.relations import pick, rows
from trajstore import audit


def test_rewards(conn):
    rep = audit.reward_report(conn)
    rw = {r["source"]: r for r in rows(rep.by_source)}
    # sdk rewards 1.0, 0.0, 0.5 (+ E null): mean .5, sample std sqrt((.25 + .25 + 0) / 2) = .5,
    # median rank ceil(1.5) = 2 of [0, .5, 1] -> .5; 2 of 3 positive.
    assert pick(rw["sdk"], "trajectories", "with_reward", "null_reward", "min", "p50", "max") == (4, 3, 1, 0.0, 0.5, 1.0)
    assert (rw["sdk"]["mean"], rw["sdk"]["std"], rw["sdk"]["share_positive"]) == pytest.approx((0.5, 0.5, 2 / 3))
    assert pick(rw["openhands"], "with_reward", "null_reward", "mean", "std", "share_positive") == (1, 1, -1.0, None, 0.0)
    # Range [-1, 1] in 20 bins of 0.1: -1 -> bin 0, 0 -> bin 10, .5 -> bin 15, 1 -> last bin 19.
    hist = [(r["source"], r["bin"], r["trajectories"]) for r in rows(rep.histogram)]
    assert hist == [("openhands", 0, 1), ("sdk", 10, 1), ("sdk", 15, 1), ("sdk", 19, 1)]
    assert rows(rep.histogram)[3]["bin_lo"] == pytest.approx(0.9) and rows(rep.histogram)[3]["bin_hi"] == 1.0


def test_lengths(conn):
    rep = audit.length_report(conn)
    sdk = {r["source"]: r for r in rows(rep.by_source)}["sdk"]
    # sdk A, B, E, F. turns [0,1,2,2]: mean 1.25, p50 rank 2 -> 1, p90 rank 4 -> 2.
    # action tokens [0,2,4,5]: mean 2.75, p50 2, p90 5. observation [0,0,2,2]: p50 0, p90 2.
    # all tokens A 8, B 3, E 5, F 6 -> [3,5,6,8]: mean 5.5, p50 5, p90 8.
    assert pick(sdk, "trajectories", "turns_p50", "turns_p90", "turns_max") == (4, 1, 2, 2)
    assert pick(sdk, "action_tokens_p50", "action_tokens_p90", "action_tokens_max") == (2, 5, 5)
    assert pick(sdk, "observation_tokens_p50", "observation_tokens_p90", "tokens_p50", "tokens_p90") == (0, 2, 5, 8)
    assert (sdk["turns_mean"], sdk["action_tokens_mean"], sdk["tokens_mean"]) == pytest.approx((1.25, 2.75, 5.5))
    hist = [pick(r, "action_tokens_lo", "action_tokens_hi", "trajectories") for r in rows(rep.histogram)
            if r["source"] == "sdk"]
    assert hist == [(0, 0, 1), (2, 3, 1), (4, 7, 2)]


def test_statuses(conn):
    got = [pick(r, "source", "status", "trajectories", "share") for r in rows(audit.status_report(conn).by_source)]
    assert got == [("openhands", "completed", 1, 0.5), ("openhands", "failed", 1, 0.5),
                   ("sdk", "aborted", 1, 0.25), ("sdk", "completed", 2, 0.5), ("sdk", "truncated", 1, 0.25)]
