"""trajstore/export/atif.py: the ATIF documents of the three-turn store, written by hand from the
table in tests/helpers/export.py, and `traj ingest` of the export giving back the same tokens,
spans, log-probs, policy versions, rewards, statuses and tokenizer."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import trajstore as ts
from tests.helpers.export import refused_trajectories, write_store
from trajstore.cli.main import app
from trajstore.export import ExportError, ExportOptions, export_store
from trajstore.schema import ACTION_LOGPROBS_COLUMN

F = np.float32


def _lp(*xs):
    return [float(F(x)) for x in xs]  # the stored float32 values, as JSON numbers


def test_atif_documents(store, tmp_path):
    out = tmp_path / "atif"
    r = export_store(store, "atif", str(out))
    assert r.files == ["t1/agent/trajectory.json", "t1/verifier/reward.txt",
                       "t2/agent/trajectory.json", "t2/verifier/reward.txt"]  # Harbor trial layout
    doc = json.loads((out / "t1/agent/trajectory.json").read_text())
    assert doc["schema_version"] == "ATIF-v1.4" and doc["session_id"] == "t1"
    assert doc["agent"] == {"name": "sdk", "version": ts.__version__, "model_name": "m"}
    # each step's prompt is every token before its action: the observations between actions sit in
    # the next step's prompt ([31] in step 2, [51, 52] in step 3)
    assert [(s["step_id"], s["source"], s["message"], s["metrics"]["prompt_token_ids"],
             s["metrics"]["completion_token_ids"], s["metrics"]["logprobs"], s["extra"]["trajstore"])
            for s in doc["steps"]] == [
        (1, "agent", "", [11, 12, 13], [21, 22], _lp(-0.1, -0.2),
         {"policy_version": 3, "finish_reason": "tool_calls", "call_id": "c1"}),
        (2, "agent", "", [11, 12, 13, 21, 22, 31], [41, 42, 43], _lp(-0.3, -0.4, -0.5),
         {"policy_version": 4, "call_id": "c2"}),
        (3, "agent", "", [11, 12, 13, 21, 22, 31, 41, 42, 43, 51, 52], [61], _lp(-0.6),
         {"policy_version": 4, "finish_reason": "stop", "call_id": "c3"}),
    ]
    assert [(s["metrics"]["prompt_tokens"], s["metrics"]["completion_tokens"]) for s in doc["steps"]] == [
        (3, 2), (6, 3), (11, 1)]
    assert doc["final_metrics"] == {"total_prompt_tokens": 20, "total_completion_tokens": 6, "total_steps": 3}
    extra = doc["extra"]["trajstore"]
    assert (extra["trajectory_id"], extra["tokenizer"], extra["status"], extra["reward"]) == ("t1", "tok",
                                                                                                "completed", 1.0)
    assert "trailing_observation_token_ids" not in extra
    t2 = json.loads((out / "t2/agent/trajectory.json").read_text())
    assert t2["extra"]["trajstore"]["trailing_observation_token_ids"] == [32]
    assert (out / "t2/verifier/reward.txt").read_text() == "0.5\n"


def test_ingest_of_the_atif_export_gives_the_trajectories_back(store, tmp_path):
    out = tmp_path / "atif"
    export_store(store, "atif", str(out))
    res = CliRunner().invoke(app, ["ingest", str(out), "--store", str(tmp_path / "back"), "--format", "json"])
    assert res.exit_code == 0, res.output
    before = {r["trajectory_id"]: r for r in ts.read_trajectories(store).to_pylist()}
    after = {json.loads(r["metadata"])["session_id"]: r for r in ts.read_trajectories(str(tmp_path / "back"))
             .to_pylist()}
    assert set(after) == {"t1", "t2"}
    for tid, b in before.items():
        a = after[tid]
        assert a["tokens"] == b["tokens"]
        assert a[ACTION_LOGPROBS_COLUMN] == b[ACTION_LOGPROBS_COLUMN]
        assert [(s["kind"], s["start"], s["end"], s["policy_version"]) for s in a["spans"]] == \
               [(s["kind"], s["start"], s["end"], s["policy_version"]) for s in b["spans"]]
        assert (a["reward"], a["status"], a["tokenizer"], a["trainable"]) == (b["reward"], b["status"], "tok", True)
        assert (a["min_policy_version"], a["max_policy_version"]) == (b["min_policy_version"], b["max_policy_version"])
        assert "policy_version_known" not in json.loads(a["metadata"])


def test_atif_keeps_unknown_logprobs_as_null_and_refuses_no_action(tmp_path):
    s = write_store(tmp_path / "s", refused_trajectories()[:2])
    out = tmp_path / "atif"
    export_store(s, "atif", str(out))  # nothing to refuse: what is unknown is written as unknown
    no_lp = json.loads((out / "no-lp/agent/trajectory.json").read_text())
    assert "logprobs" not in no_lp["steps"][0]["metrics"] and no_lp["steps"][0]["extra"]["trajstore"] == {}
    s2 = write_store(tmp_path / "s2", refused_trajectories()[2:])
    with pytest.raises(ExportError, match=r"^trajectory 'no-action': no action span \(no model call\), which the atif "
                                          r"export cannot hold"):
        export_store(s2, "atif", str(tmp_path / "atif2"))
    with pytest.raises(ExportError, match=r"^nothing to export: all 1 selected trajectories were left out \(1 no "
                                          r"action token; "):  # skipped, and then nothing is left
        export_store(s2, "atif", str(tmp_path / "atif3"), ExportOptions(skip_refused=True))
    assert not (tmp_path / "atif3").exists()


def test_reingested_retokenized_ids_are_flagged(tmp_path):
    # no-lp was stored with token_source retokenized: ATIF holds ids only, so ingest stores them as engine
    # ids and names the gap, which `traj stats --coverage` lists
    s = write_store(tmp_path / "s", refused_trajectories()[:1])
    export_store(s, "atif", str(tmp_path / "atif"))
    res = CliRunner().invoke(app, ["ingest", str(tmp_path / "atif"), "--store", str(tmp_path / "back")])
    assert res.exit_code == 0, res.output
    (row,) = ts.read_trajectories(str(tmp_path / "back")).to_pylist()
    assert row["tokens"] == [1, 2, 3] and row["logprob_source"] == "none"
    assert json.loads(row["metadata"])["fidelity_gaps"] == {
        "token_ids": "re-tokenized from logged text before a trajstore export, not the rollout engine's own ids"}
