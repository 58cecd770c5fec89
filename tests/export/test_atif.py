"""trajstore/export/atif.py: the ATIF documents of the three-turn store, written by hand from the
table in tests/helpers/export.py, and `traj ingest` of the export giving back the same tokens,
spans, log-probs, policy versions, rewards, statuses and tokenizer."""

from __future__ import annotations

import json
from datetime import timedelta

import numpy as np
import pytest
from typer.testing import CliRunner

import trajstore as ts
from tests.helpers.export import CREATED, UNCHECKED, refused_trajectories, three_turn_trajectories, write_store
from trajstore import CallTiming, CallUsage, TrajectoryBuilder
from trajstore.cli.main import app
from trajstore.export import ExportError, ExportOptions, export_store
from trajstore.schema import ACTION_LOGPROBS_COLUMN

F = np.float32


def _lp(*xs):
    return [float(F(x)) for x in xs]  # the stored float32 values, as JSON numbers


def test_atif_documents(store, tmp_path):
    out = tmp_path / "atif"
    r = export_store(store, "atif", str(out), UNCHECKED)
    assert r.files == ["t1/agent/trajectory.json", "t1/verifier/reward.txt",
                       "t2/agent/trajectory.json", "t2/verifier/reward.txt"]  # Harbor trial layout
    doc = json.loads((out / "t1/agent/trajectory.json").read_text())
    assert doc["schema_version"] == "ATIF-v1.4" and doc["session_id"] == "t1"
    assert doc["agent"] == {"name": "sdk", "version": ts.__version__, "model_name": "m"}
    # each step's prompt is every token before its action: the observations between actions sit in
    # the next step's prompt ([31] in step 2, [51, 52] in step 3)
    assert doc["steps"][0] == {"step_id": 1, "source": "user", "message": ""}  # the prompt's role
    assert [(s["step_id"], s["source"], s["message"], s["metrics"]["prompt_token_ids"],
             s["metrics"]["completion_token_ids"], s["metrics"]["logprobs"], s["extra"]["trajstore"])
            for s in doc["steps"][1:]] == [
        (2, "agent", "", [11, 12, 13], [21, 22], _lp(-0.1, -0.2),
         {"policy_version": 3, "finish_reason": "tool_calls", "call_id": "c1"}),
        (3, "agent", "", [11, 12, 13, 21, 22, 31], [41, 42, 43], _lp(-0.3, -0.4, -0.5),
         {"policy_version": 4, "call_id": "c2"}),
        (4, "agent", "", [11, 12, 13, 21, 22, 31, 41, 42, 43, 51, 52], [61], _lp(-0.6),
         {"policy_version": 4, "finish_reason": "stop", "call_id": "c3"}),
    ]
    assert [(s["metrics"]["prompt_tokens"], s["metrics"]["completion_tokens"]) for s in doc["steps"][1:]] == [
        (3, 2), (6, 3), (11, 1)]
    assert doc["final_metrics"] == {"total_prompt_tokens": 20, "total_completion_tokens": 6, "total_steps": 4}
    extra = doc["extra"]["trajstore"]
    assert (extra["trajectory_id"], extra["tokenizer"], extra["status"], extra["reward"]) == ("t1", "tok",
                                                                                                "completed", 1.0)
    assert "trailing_observation_token_ids" not in extra
    t2 = json.loads((out / "t2/agent/trajectory.json").read_text())
    assert t2["extra"]["trajstore"]["trailing_observation_token_ids"] == [32]
    assert (out / "t2/verifier/reward.txt").read_text() == "0.5\n"


def _tree_store(path):
    """t1, t2 (the three-turn store), then:
    fork   child of t1 (link fork, fork_point 3 although it shares 5 tokens with t1), not trainable,
           a call of versions 6-7, a call without log-probs among calls with them, metadata with a
           fidelity flag, group g2, raw reward {"a": 1, "passed": true}
    no-lp  re-tokenized ids, no log-probs, no policy version (tests/helpers/export.py)"""
    t1, t2 = three_turn_trajectories()
    b = TrajectoryBuilder(trajectory_id="fork", prompt_id="p1", group_id="g2", model="m", tokenizer="tok",
                          metadata={"task": "x", "fidelity_gaps": {"action_text": "parsed from the log"}})
    b.add_prompt([11, 12, 13])
    b.add_action([21, 22], [-0.1, -0.2], policy_version=6, policy_version_max=7, call_id="f1")
    b.add_observation([32])
    b.add_action([44, 45], None, policy_version=7, finish_reason="length", call_id="f2")
    b.set_reward(0.0, raw={"a": 1, "passed": True})
    fork = b.finish("failed", created_at=CREATED).model_copy(update={
        "parent_trajectory_id": "t1", "fork_point": 3, "link_kind": "fork", "episode_id": "t1",
        "not_trainable_reason": "redacted: an action's context changed"})
    t1 = t1.model_copy(update={"abandoned": True})  # the fork replaced it: a retry the harness went on with
    return write_store(path, [t1, t2, fork, refused_trajectories()[0]])


KEPT = ("tokens", "trainable", "not_trainable_reason", "token_source", "logprob_source", "min_policy_version",
        "max_policy_version", "episode_id", "parent_trajectory_id", "fork_point", "link_kind", "abandoned", "group_id",
        "prompt_id", "reward", "status", "tokenizer", "model", "created_at", "num_missing_logprobs")


def test_ingest_of_the_atif_export_gives_the_rows_back(tmp_path):
    # before: re-ingest gave new ids and no lineage, made the not-trainable fork trainable, dropped its
    # fidelity flags, its group and the log-probs of its other call, and stored re-tokenized ids as engine ids
    store = _tree_store(tmp_path / "s")
    out = tmp_path / "atif"
    export_store(store, "atif", str(out), UNCHECKED)
    res = CliRunner().invoke(app, ["ingest", str(tmp_path / "back"), str(out), "--format", "json"])
    assert res.exit_code == 0, res.output
    before = {r["trajectory_id"]: r for r in ts.read_trajectories(store).to_pylist()}
    after = {r["trajectory_id"]: r for r in ts.read_trajectories(str(tmp_path / "back")).to_pylist()}
    assert set(after) == set(before) == {"t1", "t2", "fork", "no-lp"}
    for tid, b in before.items():
        a = after[tid]
        assert {k: a[k] for k in KEPT} == {k: b[k] for k in KEPT}, tid
        assert np.array_equal(np.array(a[ACTION_LOGPROBS_COLUMN], np.float32),
                              np.array(b[ACTION_LOGPROBS_COLUMN], np.float32), equal_nan=True), tid
        assert [(s["kind"], s["start"], s["end"], s["policy_version"], s["policy_version_max"], s["finish_reason"])
                for s in a["spans"]] == [(s["kind"], s["start"], s["end"], s["policy_version"],
                                          s["policy_version_max"], s["finish_reason"]) for s in b["spans"]], tid
        meta_a, meta_b = json.loads(a["metadata"] or "{}"), json.loads(b["metadata"] or "{}")
        assert meta_a.get("fidelity_gaps") == meta_b.get("fidelity_gaps"), tid
        assert {k: meta_a[k] for k in meta_b} == meta_b, tid  # the stored metadata, under the ingest's own keys
        assert json.loads(a["reward_raw"]) == json.loads(b["reward_raw"]), tid
    # the values that matter spelled out, not only "equal to the store"
    fork = after["fork"]
    assert (fork["trainable"], fork["parent_trajectory_id"], fork["fork_point"], fork["link_kind"],
            fork["episode_id"]) == (False, "t1", 3, "fork", "t1")
    assert after["t1"]["abandoned"] is True and fork["abandoned"] is None  # the thrown-away branch stays marked
    # the calls' usage counts, times and log-prob modes are the stored ones (none here: the steps'
    # metrics are the export's token counts, not an engine's usage)
    timed = ("usage_prompt_tokens", "usage_completion_tokens", "usage_cached_tokens", "started_at",
             "first_token_at", "ended_at", "logprob_mode")
    for tid in after:
        assert [[s[f] for f in timed] for s in after[tid]["spans"]] == \
            [[s[f] for f in timed] for s in before[tid]["spans"]], tid
    assert fork["logprob_source"] == "engine" and fork["num_missing_logprobs"] == 2
    assert after["no-lp"]["token_source"] == "retokenized" and after["no-lp"]["logprob_source"] == "none"
    assert json.loads(fork["metadata"])["fidelity_gaps"] == {"action_text": "parsed from the log"}
    # ingesting the same export again writes nothing new: the ids are the stored ones
    res = CliRunner().invoke(app, ["ingest", str(tmp_path / "back"), str(out), "--format", "json"])
    assert res.exit_code == 0 and len(ts.read_trajectories(str(tmp_path / "back"))) == 4


def test_atif_keeps_unknown_logprobs_as_null_and_refuses_no_action(tmp_path):
    s = write_store(tmp_path / "s", refused_trajectories()[:2])
    out = tmp_path / "atif"
    export_store(s, "atif", str(out), UNCHECKED)  # nothing to refuse: what is unknown is written as unknown
    no_lp = json.loads((out / "no-lp/agent/trajectory.json").read_text())
    assert "logprobs" not in no_lp["steps"][1]["metrics"] and no_lp["steps"][1]["extra"]["trajstore"] == {}
    s2 = write_store(tmp_path / "s2", refused_trajectories()[2:])
    with pytest.raises(ExportError, match=r"^trajectory 'no-action': no action span \(no model call\), which the atif "
                                          r"export cannot hold"):
        export_store(s2, "atif", str(tmp_path / "atif2"), UNCHECKED)
    with pytest.raises(ExportError, match=r"^nothing to export: all 1 selected trajectories were left out \(1 no "
                                          r"action token; "):  # skipped, and then nothing is left
        export_store(s2, "atif", str(tmp_path / "atif3"), ExportOptions(allow_secrets=True, skip_refused=True))
    assert not (tmp_path / "atif3").exists()


def test_call_times_usage_and_log_prob_mode_survive_the_atif_round_trip(tmp_path):
    b = TrajectoryBuilder(trajectory_id="timed", model="m", tokenizer="tok")
    b.add_prompt([1, 2, 3])
    start = CREATED.replace(microsecond=123456)
    b.add_action([4, 5], [-0.1, -0.2], policy_version=0, logprob_mode="processed",
                 timing=CallTiming(started_at=start, first_token_at=start + timedelta(milliseconds=40),
                                   ended_at=start + timedelta(seconds=2)),
                 usage=CallUsage(prompt_tokens=3, completion_tokens=2, cached_tokens=1))
    b.add_observation([6])
    b.add_action([7], [-0.3], policy_version=0, logprob_mode="processed")
    b.set_reward(1.0)
    store = write_store(tmp_path / "s", [b.finish(created_at=CREATED)])
    export_store(store, "atif", str(tmp_path / "atif"), UNCHECKED)
    res = CliRunner().invoke(app, ["ingest", str(tmp_path / "back"), str(tmp_path / "atif")])
    assert res.exit_code == 0, res.output
    (before,) = ts.read_trajectories(store).to_pylist()
    (after,) = ts.read_trajectories(str(tmp_path / "back")).to_pylist()
    assert after["spans"] == before["spans"]
    assert after["spans"][1]["started_at"] == start and after["spans"][1]["usage_cached_tokens"] == 1
