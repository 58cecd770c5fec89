"""trajstore/ingest/atif.py: ATIF trajectory.json (Harbor / Terminal-Bench): engine tokens across
steps, the chat without token ids, a rewritten context, refusals naming the step."""

from __future__ import annotations

import json
import math

import pytest

from tests.helpers.ingest import GEN, action_logprobs, only_row, span_texts
from trajstore.ingest import ingest_paths


def _atif(steps, **extra):
    return {"schema_version": "ATIF-v1.4", "session_id": "sess", "agent": {"name": "terminus-2", "version": "1",
                                                                           "model_name": "m"},
            "steps": steps, **extra}


def _agent(step_id, prompt, completion, logprobs, observation=None, **kw):
    s = {"step_id": step_id, "source": "agent", "message": "x",
         "metrics": {"prompt_token_ids": prompt, "completion_token_ids": completion, "logprobs": logprobs}, **kw}
    if observation is not None:
        s["observation"] = {"results": [{"source_call_id": f"c{step_id}", "content": observation}]}
    return s


# issue 12: fidelity of a format added beyond the reported cases
def test_atif_engine_tokens_across_steps(tmp_path):
    # Step 2 sees prompt [1, 2] and samples [3, 4]; step 3's prompt [1, 2, 3, 4, 9, 9] adds the
    # observation tokens [9, 9] and samples [5]. Steps are written out of order: read by step_id.
    doc = _atif([_agent(3, [1, 2, 3, 4, 9, 9], [5], [-0.5], observation="late"),
                 {"step_id": 1, "source": "user", "message": "task"},
                 _agent(2, [1, 2], [3, 4], [-0.25, -9999.0], observation="out")])
    trial = tmp_path / "trial-1"
    (trial / "agent").mkdir(parents=True)
    (trial / "verifier").mkdir()
    (trial / "agent" / "trajectory.json").write_text(json.dumps(doc))
    (trial / "verifier" / "reward.txt").write_text("1\n")
    rep = ingest_paths([str(trial / "agent")], tmp_path / "s")
    assert rep.problems == []
    row = only_row(tmp_path / "s")
    assert row["tokens"] == [1, 2, 3, 4, 9, 9, 5]
    assert [(s["kind"], s["start"], s["end"]) for s in row["spans"]] == [
        ("prompt", 0, 2), ("action", 2, 4), ("observation", 4, 6), ("action", 6, 7)]
    assert row["spans"][2]["cause_id"] == "2"  # the observation answers step 2
    lps = action_logprobs(row)
    # -9999.0 (an engine's stand-in for -inf) is stored as missing, never as a value
    assert lps[0] == pytest.approx(-0.25) and math.isnan(lps[1]) and lps[2] == pytest.approx(-0.5)
    assert row["num_missing_logprobs"] == 1
    assert row["reward"] == 1.0 and row["model"] == "m" and row["token_source"] == "engine"


# issue 12: fidelity of a format added beyond the reported cases
def test_atif_without_token_ids_is_a_chat(tmp_path, tok):
    doc = _atif([{"step_id": 1, "source": "system", "message": "Be brief."},
                 {"step_id": 2, "source": "user", "message": "List files."},
                 {"step_id": 3, "source": "agent", "message": "Listing.", "reasoning_content": "ls is enough",
                  "tool_calls": [{"tool_call_id": "t1", "function_name": "bash", "arguments": {"cmd": "ls"}}],
                  "observation": {"results": [{"source_call_id": "t1", "content": "a.txt"}]}},
                 {"step_id": 4, "source": "agent", "message": "One file."}])
    p = tmp_path / "trajectory.json"
    p.write_text(json.dumps(doc))
    rep = ingest_paths([str(p)], tmp_path / "s")
    assert rep.problems == []
    row = only_row(tmp_path / "s")
    assert row["token_source"] == "retokenized" and row["source"] == "atif" and row["reward"] is None
    assert span_texts(row, tok) == [
        ("prompt", "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nList files.<|im_end|>\n" + GEN),
        ("action", '<think>\nls is enough\n</think>\n\nListing.\n<tool_call>\n'
                   '{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call><|im_end|>'),
        ("observation", "\n<|im_start|>tool\na.txt<|im_end|>\n" + GEN),
        ("action", "One file.<|im_end|>"),
    ]
    assert row["spans"][2]["cause_id"] == "t1"


# issue 12: fidelity of a format added beyond the reported cases
def test_atif_rewritten_context_falls_back_to_the_chat_with_the_reason(tmp_path):
    # step 3's prompt does not start with step 2's prompt + completion: the engine ids cannot be joined
    doc = _atif([{"step_id": 1, "source": "user", "message": "go"},
                 _agent(2, [1, 2], [3], [-0.1], observation="o"), _agent(3, [7, 8], [4], [-0.2])])
    p = tmp_path / "trajectory.json"
    p.write_text(json.dumps(doc))
    ingest_paths([str(p)], tmp_path / "s")
    row = only_row(tmp_path / "s")
    assert row["token_source"] == "retokenized"
    assert "do not extend the previous step" in json.loads(row["metadata"])["engine_token_ids"]


# issue 12: fidelity of a format added beyond the reported cases
def test_atif_steps_sharing_an_id_are_refused(tmp_path):
    doc = _atif([{"step_id": 1, "source": "user", "message": "a"}, {"step_id": 1, "source": "user", "message": "b"}])
    p = tmp_path / "trajectory.json"
    p.write_text(json.dumps(doc))
    rep = ingest_paths([str(p)], tmp_path / "s")
    assert rep.trajectories_written == 0 and "share step_id 1" in rep.problems[0].reason


# hostile tester: a fault found in `traj ingest` (failed before its fix)
def test_odd_tool_calls_in_an_atif_step(reported, tmp_path):
    doc = json.loads((reported / "other-formats" / "atif-trajectory.json").read_text())
    agent = next(i for i, s in enumerate(doc["steps"]) if s["source"] == "agent")
    doc["steps"][agent]["tool_calls"] = "bash ls"
    f = tmp_path / "trajectory.json"
    f.write_text(json.dumps(doc))
    (p,) = ingest_paths([str(f)], str(tmp_path / "s")).problems
    assert p.reason == (f"steps[{agent}].tool_calls is a string ('bash ls'), expected a list of tool calls "
                        "(objects with tool_call_id, function_name, arguments)")
