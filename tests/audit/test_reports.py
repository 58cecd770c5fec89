"""Each report's numbers against values computed by hand from the store in conftest.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from trajstore import audit
from trajstore.audit.clip import _bucket_sql
from trajstore.audit.percentiles import weighted_percentiles_sql


def rows(rel: Any) -> list[dict[str, Any]]:
    return [dict(zip(rel.columns, r)) for r in rel.fetchall()]


def pick(r: dict[str, Any], *keys: str) -> tuple[Any, ...]:
    return tuple(r[k] for k in keys)


STAT = ("token_p50", "token_p90", "token_p99", "token_max", "traj_p50", "traj_p90", "traj_p99", "traj_max")


@pytest.fixture
def conn(known_store):
    return audit.connect(known_store)


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


def test_where_filter_restricts_every_report(conn):
    rep = audit.staleness_report(conn, where="source = 'sdk'", run="r1")
    (only,) = rows(rep.by_run)
    # Same as the r1 / sdk row above: A and B only.
    assert pick(only, "consumed", "versioned_action_tokens", "token_p50", "token_p90") == (2, 6, 2, 3)
    assert [r["source"] for r in rows(audit.status_report(conn, where="reward < 0").by_source)] == ["openhands"]
    with pytest.raises(audit.AuditError, match="no_such_column"):
        audit.reward_report(conn, where="no_such_column > 1")
    with pytest.raises(audit.AuditError, match="one boolean expression"):
        audit.reward_report(conn, where="TRUE); COPY (SELECT 1) TO 'x.csv'; SELECT (1")


@pytest.mark.parametrize("where, plain", [
    ("source = 'sdk' AND reward IS NOT NULL", True),
    ("reward IS NOT NULL -- trailing comment", True),
    ("no_such_column > 1", True),  # parses; binding is the caller's check
    ("TRUE); COPY (SELECT 1) TO 'x.csv'; SELECT (1", False),
    ("1=1) UNION SELECT 1 FROM (SELECT 1", False),
    ("1=1) GROUP BY source HAVING (1=1", False),
    ("1=1) ORDER BY 1 LIMIT (1", False),
])
def test_is_plain_predicate(where, plain):
    import duckdb

    assert audit.is_plain_predicate(duckdb.connect(), where) is plain


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


def test_coverage(conn):
    rep = audit.coverage_report(conn)
    cov = {r["source"]: r for r in rows(rep.tokens)}
    # sdk: A 4 + B 2 + E 0 + F 5 = 11 action tokens, all with log-probs and versions.
    assert pick(cov["sdk"], "token_source", "trajectories", "action_tokens", "share_with_logprob", "share_with_policy_version",
                "share_with_both") == ("engine", 4, 11, 1.0, 1.0, 1.0)
    # openhands: C 6 (log-probs, v4) + D 3 (no log-probs; 2 with v3, 1 without): lp 6/9, version 8/9, both 6/9.
    oh = cov["openhands"]
    assert (oh["trajectories"], oh["action_tokens"]) == (2, 9)
    assert (oh["share_with_logprob"], oh["share_with_policy_version"], oh["share_with_both"]) == pytest.approx((6 / 9, 8 / 9, 6 / 9))
    nt = [pick(r, "source", "reason", "trajectories", "example_id") for r in rows(rep.not_trainable)]
    # an action without a policy version is no reason: it trains, its staleness undefined (issue 16
    # walkthrough: every ingested trajectory was listed as not trainable, traj train trained them)
    assert nt == [("openhands", "no engine logprobs: trains only with --behaviour-logprobs initial-policy", 1, "D"),
                  ("openhands", "no reward", 1, "D"), ("sdk", "no action tokens", 1, "E")]


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


def test_duplicates_and_overview(conn, known_store):
    rep = audit.duplicate_report(conn)
    # 6 trajectories in shard 1 + B again in shard 2.
    assert rows(rep.summary) == [{"rows": 7, "trajectories": 6, "duplicate_rows": 1, "duplicated_ids": 1}]
    (b,) = rows(rep.ids)
    shards = [s.path for s in known_store.list_shards()]
    assert (b["trajectory_id"], b["copies"], b["kept_shard"], b["shards"]) == ("B", 2, shards[0], shards)
    # The predicate applies to every stored copy. sdk: A, B, E, F in shard 1 + B in shard 2 = 5 rows,
    # 4 ids, B twice. truncated: only shard 1's B (shard 2's copy is completed) = 1 row, no repeat.
    sdk = audit.duplicate_report(conn, where="source = 'sdk'")
    assert rows(sdk.summary) == [{"rows": 5, "trajectories": 4, "duplicate_rows": 1, "duplicated_ids": 1}]
    assert [r["trajectory_id"] for r in rows(sdk.ids)] == ["B"]
    trunc = audit.duplicate_report(conn, where="status = 'truncated'")
    assert rows(trunc.summary) == [{"rows": 1, "trajectories": 1, "duplicate_rows": 0, "duplicated_ids": 0}]
    assert rows(trunc.ids) == []
    (tot,) = rows(audit.overview_report(conn).totals)
    # tokens A 8 + B 3 + C 10 + D 5 + E 5 + F 6 = 37; action 4 + 2 + 6 + 3 + 0 + 5 = 20.
    assert tot == {"shards": 2, "trajectories": 6, "tokens": 37, "action_tokens": 20, "sources": 2, "runs": 2,
                   "steps": 2, "consumed": 4}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_weighted_percentiles_equal_quantile_disc_on_expanded_data(conn, seed):
    rng = np.random.default_rng(seed)
    vals = rng.integers(0, 30, size=200)
    weights = rng.integers(1, 5, size=200)
    conn.execute("CREATE OR REPLACE TEMP TABLE h AS SELECT * FROM (SELECT unnest(?) AS v, unnest(?) AS w)",
                 [vals.tolist(), weights.tolist()])
    hist = "(SELECT v, sum(w) AS w FROM h GROUP BY v)"
    got = conn.execute(weighted_percentiles_sql(hist, (), "v", "w", "")).fetchall()[0]
    expanded = np.repeat(vals, weights)
    ref = conn.execute("SELECT quantile_disc(x, [0.5, 0.9, 0.99]) FROM (SELECT unnest(?) AS x)",
                       [expanded.tolist()]).fetchall()[0][0]
    # Nearest rank by hand with numpy: sorted[ceil(p N / 100) - 1].
    s = np.sort(expanded)
    by_hand = [int(s[-(-p * len(s) // 100) - 1]) for p in (50, 90, 99)]
    assert list(got[:3]) == ref == by_hand
    assert got[3] == expanded.max() and got[4] == pytest.approx(expanded.mean())
