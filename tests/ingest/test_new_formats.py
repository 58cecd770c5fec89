"""Fidelity of the formats added for issue 12 beyond the reported cases: every span decoded and
compared with text written by hand, plus the fields each format maps (status, reward, links,
engine tokens). Inputs are small hand-made documents in the shape of each harness's output."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trajstore.ingest import ingest_paths
from trajstore.ingest.chat_rows import parse_swe_rebench_openhands_row
from trajstore.ingest.records import Conversation, EngineRollout, Origin
from trajstore.ingest.mini_swe_agent import status_from_exit
from trajstore.reader import read_trajectories


GEN = "<|im_start|>assistant\n"
"""ChatML's generation prompt: it ends the span before each action (actions hold only generated tokens)."""


def span_texts(row, tok) -> list[tuple[str, str]]:
    return [(s["kind"], tok.decode(row["tokens"][s["start"]:s["end"]])) for s in row["spans"]]


def only_row(store) -> dict:
    (row,) = read_trajectories(str(store)).to_pylist()
    return row


def action_logprobs(row) -> list[float]:
    """Engine log-probs of the action tokens in order (schema v1 stores them full length)."""
    lps = row["logprobs"]
    if len(lps) == len(row["tokens"]):
        return [lps[i] for s in row["spans"] if s["kind"] == "action" for i in range(s["start"], s["end"])]
    return lps


# -- mini-swe-agent ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("exit_status", "status"), [
    ("Submitted", "completed"), ("LimitsExceeded", "truncated"), ("CostLimitExceeded", "truncated"),
    ("ExecutionTimeoutError", "truncated"), ("ContextWindowExceededError", "truncated"),
    ("RuntimeError", "failed"), (None, "aborted"), ("", "aborted"),
])
def test_mini_swe_agent_exit_status(exit_status, status):
    assert status_from_exit(exit_status) == status


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


# -- ATIF ----------------------------------------------------------------------------------------

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


def test_atif_steps_sharing_an_id_are_refused(tmp_path):
    doc = _atif([{"step_id": 1, "source": "user", "message": "a"}, {"step_id": 1, "source": "user", "message": "b"}])
    p = tmp_path / "trajectory.json"
    p.write_text(json.dumps(doc))
    rep = ingest_paths([str(p)], tmp_path / "s")
    assert rep.trajectories_written == 0 and "share step_id 1" in rep.problems[0].reason


# -- tau-bench -----------------------------------------------------------------------------------

def test_tau_bench_crash_after_some_turns_is_failed_without_a_reward(tmp_path):
    res = [{"task_id": 7, "reward": 0.0, "trial": 1, "info": {"error": "litellm.RateLimitError"},
            "traj": [{"role": "system", "content": "p"}, {"role": "user", "content": "hi"},
                     {"role": "assistant", "content": "hello"}]}]
    p = tmp_path / "results.json"
    p.write_text(json.dumps(res))
    rep = ingest_paths([str(p)], tmp_path / "s")
    assert rep.problems == []
    row = only_row(tmp_path / "s")
    assert (row["status"], row["reward"], row["prompt_id"]) == ("failed", None, "task-7")
    assert "RateLimitError" in json.loads(row["metadata"])["reward_error"]


# -- verl / SkyRL --------------------------------------------------------------------------------

def test_skyrl_field_names_and_empty_output(tmp_path, tok):
    rows = [{"input_prompt": "Q: 1+1?\nA:", "output_response": " 2", "score": 0.5, "global_step": 3},
            {"input_prompt": "Q: 2+2?\nA:", "output_response": "", "score": 0.0, "global_step": 3}]
    p = tmp_path / "3.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows))
    rep = ingest_paths([str(p)], tmp_path / "s")
    assert [(pr.origin.line, pr.kind) for pr in rep.problems] == [(2, "malformed")]
    assert "output is empty" in rep.problems[0].reason
    row = only_row(tmp_path / "s")
    assert span_texts(row, tok) == [("prompt", "Q: 1+1?\nA:"), ("action", " 2")]
    meta = json.loads(row["metadata"])
    assert row["reward"] == 0.5 and meta["special_tokens_in_text"] is False
    assert list(meta["fidelity_gaps"]) == ["special_tokens"]


# -- Parquet shards of published datasets ----------------------------------------------------------

def test_parquet_directory_of_dataset_shards(tmp_path, tok):
    # Two shards in a dataset layout (data/train-0000x-of-00002.parquet): SWE-smith rows with
    # the chat as a JSON string, and a file that only claims to be Parquet.
    chat = [{"role": "user", "content": "fix"}, {"role": "assistant", "content": "ok"}]
    d = tmp_path / "ds" / "data"
    d.mkdir(parents=True)
    for i in range(2):
        tbl = pa.table({"traj_id": [f"t{i}"], "instance_id": ["inst"], "model": ["m"], "resolved": [bool(i)],
                        "patch": [""], "messages": [json.dumps(chat)]})
        pq.write_table(tbl, d / f"train-0000{i}-of-00002.parquet")
    (d / "broken.parquet").write_bytes(b"not parquet at all")
    rep = ingest_paths([str(tmp_path / "ds")], tmp_path / "s")
    assert rep.trajectories_written == 2 and dict(rep.by_format) == {"swe-smith": 2}
    (bad,) = rep.problems
    assert bad.origin.path.endswith("broken.parquet") and bad.kind == "malformed"
    rows = sorted(read_trajectories(str(tmp_path / "s")).to_pylist(), key=lambda r: r["reward"])
    assert [r["reward"] for r in rows] == [0.0, 1.0]
    assert span_texts(rows[0], tok) == [("prompt", "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
                                                   "trained by Hugging Face<|im_end|>\n<|im_start|>user\nfix<|im_end|>\n"
                                                   + GEN),
                                        ("action", "ok<|im_end|>")]


def test_swe_gym_rows_with_messages_as_a_json_string(tmp_path):
    row = {"instance_id": "x-1", "resolved": True, "run_id": "r",
           "messages": json.dumps([{"role": "user", "content": "fix"}, {"role": "assistant", "content": "done"}])}
    p = tmp_path / "rows.jsonl"
    p.write_text(json.dumps(row) + "\n" + json.dumps({**row, "messages": "[{not json"}) + "\n")
    rep = ingest_paths([str(p)], tmp_path / "s")
    assert rep.trajectories_written == 1 and only_row(tmp_path / "s")["source"] == "openhands/swe-gym"
    assert [(pr.origin.line, pr.kind) for pr in rep.problems] == [(2, "malformed")]
    assert "messages is a string that is not JSON" in rep.problems[0].reason


def test_swe_rebench_openhands_tools_reach_the_conversation():
    tools = [{"type": "function", "function": {"name": "execute_bash", "description": "run",
                                               "parameters": {"type": "object", "properties": {}}}}]
    row = {"trajectory_id": "t", "instance_id": "i", "resolved": 1, "exit_status": "submit", "tools": tools,
           "trajectory": [{"role": "user", "content": "go"}, {"role": "assistant", "content": "ok"}]}
    conv = parse_swe_rebench_openhands_row(row, Origin("x.jsonl", 1))
    assert isinstance(conv, Conversation) and conv.tools == tools and conv.status == "completed"
    conv = parse_swe_rebench_openhands_row({**row, "tools": json.dumps(tools), "exit_status": "max_iterations"},
                                           Origin("x.jsonl", 2))
    assert conv.tools == tools and conv.status == "truncated"
    assert not isinstance(conv, EngineRollout) and np.isfinite(conv.reward.value)
