"""trajstore/audit/coverage.py: the coverage report against values computed by hand from the known
store (tests/helpers/stores.py)."""

from __future__ import annotations

import json

import pytest

from tests.helpers.relations import pick, rows
from trajstore import audit
from trajstore.ingest import ingest_paths


def test_coverage(conn):
    rep = audit.coverage_report(conn)
    cov = {r["source"]: r for r in rows(rep.tokens)}
    # sdk: A 4 + B 2 + E 0 + F 5 = 11 action tokens, all with log-probs and versions.
    assert pick(cov["sdk"], "token_source", "trajectories", "action_tokens", "share_with_logprob", "share_with_policy_version",
                "share_with_both", "share_logprob_mode_unrecorded") == ("engine", 4, 11, 1.0, 1.0, 1.0, 1.0)
    # openhands: C 6 (log-probs, v4) + D 3 (no log-probs; 2 with v3, 1 without): lp 6/9, version 8/9, both 6/9.
    oh = cov["openhands"]
    assert (oh["trajectories"], oh["action_tokens"]) == (2, 9)
    assert (oh["share_with_logprob"], oh["share_with_policy_version"], oh["share_with_both"]) == pytest.approx((6 / 9, 8 / 9, 6 / 9))
    nt = [pick(r, "source", "reason", "trajectories", "example_id") for r in rows(rep.not_trained)]
    # an action without a policy version is no reason: it trains, its staleness undefined (new-user walkthrough
    # walkthrough: every ingested trajectory was listed as not trainable, traj train trained them). The reasons
    # are traj train's words; a text-only row is stored trainable, so its bucket says what it needs instead
    # of calling it not trainable
    assert nt == [("openhands", "text only: needs --behaviour-logprobs initial-policy", 1, "D"),
                  ("openhands", "without a reward", 1, "D"), ("sdk", "marked not trainable: no action tokens", 1, "E")]
    # each trajectory once, under its first reason in traj train's order: the totals reconcile with its data line
    train = [pick(r, "category", "trajectories", "trains") for r in rows(rep.train)]
    assert train == [("marked not trainable", 1, "no"), ("without a reward", 1, "no"), ("trainable", 4, "yes")]
    assert sum(n for _, n, _ in train) == conn.execute("SELECT count(*) FROM trajectories").fetchall()[0][0]


# fidelity flags of the reported cases counted by ingest and `traj stats --coverage`
def test_fidelity_flags_are_counted_and_shown_by_stats_coverage(reported, tmp_path):
    from typer.testing import CliRunner

    from trajstore.cli.main import app

    st = str(tmp_path / "s")
    rep = ingest_paths([str(reported / "nemo-gym-consecutive-assistant-messages"),
                        str(reported / "swe-agent-final-step-only-in-trajectory")], st)
    # 2 NeMo rows without logged observations; the SWE-agent file: final step rebuilt, tools not logged
    assert dict(rep.fidelity_gaps) == {"observations": 2, "final_step": 1, "tools": 1}
    r = CliRunner().invoke(app, ["stats", st, "--coverage", "--format", "json"])
    assert r.exit_code == 0, r.output
    got = [(x["source"], x["flag"], x["trajectories"]) for x in json.loads(r.stdout)["coverage.fidelity"]]
    assert got == [("nemo-gym", "observations", 2), ("swe-agent", "final_step", 1), ("swe-agent", "tools", 1)]


# episode trees: an engine-id discard has one name, in the ingest summary and in `traj stats --coverage`
def test_engine_id_discards_are_one_flag_in_the_summary_and_the_coverage(reported, tmp_path):
    from typer.testing import CliRunner

    from trajstore.cli.main import app

    st = str(tmp_path / "s")
    rep = ingest_paths([str(reported / "atif-summarization-context")], st)  # made-up ids that chain in no lineage
    assert rep.engine_ids_discarded == 2 == rep.fidelity_gaps["engine_ids_discarded"]
    r = CliRunner().invoke(app, ["stats", st, "--coverage", "--format", "json"])
    assert r.exit_code == 0, r.output
    got = [(x["source"], x["trajectories"]) for x in json.loads(r.stdout)["coverage.fidelity"]
           if x["flag"] == "engine_ids_discarded"]
    assert got == [("atif", 2)]


def test_stats_coverage_counts_unreproducible_log_probs_by_reason(tmp_path):
    """`traj stats --coverage` lists the engine rows `traj train` refuses for their log-probs, by
    the reason of their first such span, with the rule traj train applies (trajstore.sampling)."""
    from typer.testing import CliRunner

    from trajstore import StoreWriter, TrajectoryBuilder
    from trajstore.cli.main import app

    calls = {"ok": ({"temperature": 0.7, "top_p": 0.8}, "processed"), "raw-1": ({"temperature": 0.7}, "raw"),
             "raw-2": ({"top_p": 0.9}, "raw"), "old": ({"temperature": 0.7, "top_k": 20}, None),
             "pen": ({"temperature": 1.0, "extra": {"repetition_penalty": 1.2}}, "processed")}
    with StoreWriter(str(tmp_path)) as w:
        for tid, (sampling, mode) in calls.items():
            b = TrajectoryBuilder(trajectory_id=tid, tokenizer="t", source="sdk")
            b.add_prompt([1, 2])
            b.add_action([3], [-0.1], policy_version=0, sampling={"temperature": 1.0}, logprob_mode="processed")
            b.add_observation([4])
            b.add_action([5, 6], [-0.5, -0.5], policy_version=0, sampling=sampling, logprob_mode=mode)
            b.set_reward(1.0)
            w.write(b.finish())
    r = CliRunner().invoke(app, ["stats", str(tmp_path), "--coverage", "--format", "json"])
    assert r.exit_code == 0, r.output
    got = [(x["reason"], x["trajectories"], x["example_id"]) for x in json.loads(r.stdout)["coverage.not_trained"]]
    assert got == [("unreproducible logprobs: penalty", 1, "pen"), ("unreproducible logprobs: raw_logprobs", 2, "raw-1")]
    got = [(x["category"], x["trajectories"]) for x in json.loads(r.stdout)["coverage.train"]]
    assert got == [("with log-probs the trainer cannot reproduce", 3), ("trainable", 2)]
    # "old" records no mode on its second action (2 of the 15 action tokens with a log-prob): trained
    # as processed, counted
    (tokens,) = json.loads(r.stdout)["coverage.tokens"]
    assert tokens["share_logprob_mode_unrecorded"] == pytest.approx(2 / 15)
    # the same rule as a SQL function of every audit connection
    conn = audit.connect(str(tmp_path))
    why = conn.sql("SELECT trajectory_id, span_index, logprob_refusal(logprob_mode, temperature, top_k, top_p, "
                   "min_p, sampling_params) AS why FROM spans WHERE kind = 'action' AND why IS NOT NULL "
                   "ORDER BY trajectory_id").fetchall()
    assert why == [("pen", 3, "penalty"), ("raw-1", 3, "raw_logprobs"), ("raw-2", 3, "raw_logprobs")]
