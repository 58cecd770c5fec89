"""trajstore/ingest/formats/mini_swe_agent.py: mini-swe-agent trajectories, the text (v1) and the tool-call
format: every span decoded and compared with text written by hand, status from the exit status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.ingest import GEN, only_row, span_texts
from trajstore.ingest import ingest_paths
from trajstore.ingest.formats.mini_swe_agent import mini_swe_agent_status
from trajstore.reader import read_trajectories


# fidelity of a format added beyond the reported cases
@pytest.mark.parametrize(("exit_status", "status"), [
    ("Submitted", "completed"), ("LimitsExceeded", "truncated"), ("CostLimitExceeded", "truncated"),
    ("ExecutionTimeoutError", "truncated"), ("ContextWindowExceededError", "truncated"),
    ("RuntimeError", "failed"), (None, "aborted"), ("", "aborted"),
])
def test_mini_swe_agent_exit_status(exit_status, status):
    assert mini_swe_agent_status(exit_status) == status


# fidelity of a format added beyond the reported cases
def test_mini_swe_agent_v1_text_actions_link_observations(tmp_path, tok):
    # model_stats.api_calls = 3 but the log holds 2 assistant turns: flagged, never silent
    d = {"info": {"exit_status": "LimitsExceeded", "submission": "", "model_stats": {"api_calls": 3}},
         "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "T"},
                      {"role": "assistant", "content": "```bash\nls\n```"},
                      {"role": "user", "content": "<output>a</output>"},
                      {"role": "assistant", "content": "```bash\ncat a\n```"},
                      {"role": "user", "content": "<output>1</output>"},
                      {"role": "user", "content": ""}],  # LimitsExceeded: str(e) == "" appended, seen by no call
         "trajectory_format": "mini-swe-agent-1"}
    p = tmp_path / "run.traj.json"
    p.write_text(json.dumps(d))
    rep = ingest_paths([str(p)], tmp_path / "s")
    assert rep.problems == []
    row = only_row(tmp_path / "s")
    assert row["status"] == "truncated" and row["prompt_id"] == "run"
    assert span_texts(row, tok) == [
        ("prompt", "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nT<|im_end|>\n" + GEN),
        ("action", "```bash\nls\n```<|im_end|>"),
        ("observation", "\n<|im_start|>user\n<output>a</output><|im_end|>\n" + GEN),
        ("action", "```bash\ncat a\n```<|im_end|>"),
        ("observation", "\n<|im_start|>user\n<output>1</output><|im_end|>\n"),
    ]
    acts = [s for s in row["spans"] if s["kind"] == "action"]
    obs = [s for s in row["spans"] if s["kind"] == "observation"]
    assert [a["call_id"] for a in acts] == ["step-0", "step-1"] and [o["cause_id"] for o in obs] == ["step-0", "step-1"]
    assert json.loads(row["metadata"])["fidelity_gaps"]["model_calls"] == \
        "the harness counted 3 model calls, the log holds 2"


MINI_PROMPT = ("<|im_start|>system\nYou run shell commands.<|im_end|>\n<|im_start|>user\nFix the bug in x.<|im_end|>\n"
               + GEN)

MINI_ACTION_1 = 'Look first.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call><|im_end|>'

MINI_OBS = "\n<|im_start|>tool\n<returncode>0</returncode>\n<output>\nx\n</output><|im_end|>\n" + GEN

MINI_ACTION_2 = ('Submit.\n<tool_call>\n{"name": "bash", "arguments": {"command": '
                 '"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}\n</tool_call><|im_end|>')


# reported: ../shared/fixtures/reported/mini-swe-agent-v2
def test_mini_swe_agent_v2(reported, tmp_path, tok):
    # task-1.traj.json (exit_status Submitted) and noexit.json (LimitsExceeded): the same turns,
    # the 'exit' message of task-1 is not a model turn.
    rep = ingest_paths([str(reported / "mini-swe-agent-v2")], str(tmp_path / "s"))
    assert (rep.trajectories_written, rep.refused, dict(rep.by_format)) == (2, 0, {"mini-swe-agent": 2})
    rows = {Path(json.loads(r["metadata"])["ingest"]["path"]).name: r
            for r in read_trajectories(str(tmp_path / "s")).to_pylist()}
    task, noexit = rows["task-1.traj.json"], rows["noexit.json"]
    for row in (task, noexit):
        assert row["source"] == "mini-swe-agent" and row["model"] == "demo/model" and row["reward"] is None
        assert row["prompt_id"] == "demo__repo-1"
        assert span_texts(row, tok) == [("prompt", MINI_PROMPT), ("action", MINI_ACTION_1),
                                        ("observation", MINI_OBS), ("action", MINI_ACTION_2)]
        # 2 actions, 1 tool observation linked to call_a
        acts = [s for s in row["spans"] if s["kind"] == "action"]
        (obs,) = [s for s in row["spans"] if s["kind"] == "observation"]
        assert [a["tool_call_ids"] for a in acts] == [["call_a"], ["call_b"]] and obs["cause_id"] == "call_a"
        assert acts[0]["call_id"] == "r1" and acts[0]["finish_reason"] == "tool_calls"
        # one action per model call: the agent's own count, info.model_stats.api_calls = 2
        assert len(acts) == json.loads(row["metadata"])["harness_model_calls"] == 2
    assert task["status"] == "completed" and noexit["status"] == "truncated"
    assert list(json.loads(task["metadata"])["fidelity_gaps"]) == ["tools"]  # the bash tool's schema is not logged
    assert json.loads(task["metadata"])["exit_messages"] == 1
    assert json.loads(noexit["metadata"])["exit_status"] == "LimitsExceeded"


# reported: ../shared/fixtures/reported/mini-swe-agent-v2 (its README's task-v1)
def test_mini_swe_agent_v1_text_format(tmp_path, tok):
    # The README's task-v1: a v1 text-format run that submits in its only action. v1 appends the
    # submission as a user message after a terminating exit: no model call saw it.
    d = {"info": {"exit_status": "Submitted", "submission": "diff --git a/x b/x", "mini_version": "1.17.3",
                  "config": {"model": {"model_name": "demo/model"}}},
         "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "T"},
                      {"role": "assistant", "content": "THOUGHT: done\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"},
                      {"role": "user", "content": "diff --git a/x b/x"}],
         "trajectory_format": "mini-swe-agent-1"}
    p = tmp_path / "task-v1.traj.json"
    p.write_text(json.dumps(d))
    rep = ingest_paths([str(p)], str(tmp_path / "s"))
    assert rep.trajectories_written == 1 and rep.problems == []
    (row,) = read_trajectories(str(tmp_path / "s")).to_pylist()
    assert (row["source"], row["status"], row["prompt_id"]) == ("mini-swe-agent", "completed", "task-v1")
    assert span_texts(row, tok) == [
        ("prompt", "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nT<|im_end|>\n" + GEN),
        ("action", "THOUGHT: done\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```<|im_end|>"),
    ]
