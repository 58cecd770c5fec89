"""trajstore/audit/clip.py: the clip report per step and staleness bucket against values computed by
hand from the known store (tests/helpers/stores.py)."""

from __future__ import annotations

import pytest

from tests.helpers.relations import pick, rows
from trajstore import audit
from trajstore.audit.clip import _bucket_sql


def test_clip_per_step_and_staleness_bucket(conn):
    rep = audit.clip_report(conn)
    steps = {(r["run_id"], r["step"]): r for r in rows(rep.by_step)}
    s0 = steps[("r1", 0)]
    # Step 0: A (4 tokens, below .25, above 0, ratio 1.1) and B (2 tokens, below 0, above .5, ratio .9):
    # below (.25*4 + 0*2)/6 = 1/6; above (0*4 + .5*2)/6 = 1/6; masked 2/6; ratio (4.4 + 1.8)/6.
    assert pick(s0, "trainer_version", "trajectories", "action_tokens") == (8, 2, 6)
    assert (s0["masked_below"], s0["masked_above"], s0["masked"], s0["ratio_mean"]) == pytest.approx(
        (1 / 6, 1 / 6, 1 / 3, 6.2 / 6))
    assert steps[("r1", 1)]["masked"] == pytest.approx(0.5 + 1 / 6)
    assert steps[("r2", 0)]["masked"] == pytest.approx(0.75)
    buckets = [pick(r, "run_id", "staleness_lo", "staleness_hi", "trajectories") for r in rows(rep.by_staleness)]
    # staleness_max: r1 A 3, B 2, C 5 (bucket [4, 7]); r2 A 5.
    assert buckets == [("r1", 2, 2, 1), ("r1", 3, 3, 1), ("r1", 4, 7, 1), ("r2", 4, 7, 1)]
    r1_47 = rows(rep.by_staleness)[2]
    assert r1_47["masked_below"] == pytest.approx(0.5)


def test_staleness_buckets(conn):
    lo, hi = _bucket_sql("x")
    got = conn.execute(f"SELECT x, {lo}, {hi} FROM range(0, 18) t(x) ORDER BY x").fetchall()
    # 0..3 exact; 4-7, 8-15, 16-31.
    assert [(x, a, b) for x, a, b in got] == [(0, 0, 0), (1, 1, 1), (2, 2, 2), (3, 3, 3)] + [
        (x, 4, 7) for x in range(4, 8)] + [(x, 8, 15) for x in range(8, 16)] + [(16, 16, 31), (17, 16, 31)]
