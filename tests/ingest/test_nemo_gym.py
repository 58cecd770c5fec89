"""trajstore/ingest/formats/nemo_gym.py: NeMo Gym rollouts: engine token ids kept exactly, text-only rows
re-tokenized, placeholder or mixed ids never trusted; every span decoded on the real fixtures."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers.ingest import END, GEN, SYS, TOOL_OBS, USER, assert_linked, build, call, decoded, ingest, kinds
from trajstore.ingest import ingest_paths, iter_trajectories
from trajstore.reader import read_trajectories


def _rows_and_trajectories(path, **kw):
    """(row, trajectory) of each line of a NeMo Gym rollouts file, ingested with `kw`."""
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    ts, _ = ingest(path, **kw)
    assert len(ts) == len(rows)
    return zip(rows, ts)


# per-format fidelity on a real fixture, every span decoded against what the harness sent
def test_nemo_gym_engine_single_turn(fix):
    for row, t in _rows_and_trajectories(fix / "nemo-gym/competitive_coding_challenges_example_rollouts.jsonl"):
        msg = next(o for o in row["response"]["output"] if o.get("generation_token_ids"))
        assert t.tokens.tolist() == msg["prompt_token_ids"] + msg["generation_token_ids"]
        assert kinds(t) == "pa" and t.token_source == "engine" and t.logprob_source == "engine"
        assert t.action_logprobs[t.spans[1].start:].tolist() == pytest.approx(msg["generation_log_probs"])
        assert t.not_trainable_reason is not None  # no tokenizer named by the log


# per-format fidelity on a real fixture, every span decoded against what the harness sent
def test_nemo_gym_engine_multi_turn(fix):
    path = fix / "nemo-gym-multiturn/tictactoe_env_example_rollouts.jsonl"
    for row, t in _rows_and_trajectories(path, engine_tokenizer="model"):
        out = row["response"]["output"]
        # 9 calls, each prompt = previous prompt + generation + the environment's 43 tokens
        assert kinds(t) == "pa" + "oa" * 8
        acts = [t.tokens[s.start:s.end].tolist() for s in t.spans if s.kind == "action"]
        assert acts == [o["generation_token_ids"] for o in out]
        assert t.tokens.tolist() == out[-1]["prompt_token_ids"] + out[-1]["generation_token_ids"]
        assert all(a[-1] == 151645 for a in acts)  # each call closed by its own end of turn (Qwen <|im_end|>)
        assert t.status == "truncated" and t.tokenizer == "Qwen/Qwen3-4B-Instruct-2507"


# per-format fidelity on a real fixture, every span decoded against what the harness sent
def test_nemo_gym_text_rows(tok, fix):
    for row, t in _rows_and_trajectories(fix / "nemo-gym/hermes_agent_example_math_rollouts.jsonl"):
        out = row["response"]["output"]
        msgs = [o for o in out if o["type"] == "message"]
        assert sum(s.kind == "action" for s in t.spans) == len(msgs) == row["turns_used"] \
            == t.metadata["harness_model_calls"]
        assert [s.cause_id for s in t.spans if s.kind == "observation" and s.role == "tool"] == [
            o["call_id"] for o in out if o["type"] == "function_call_output"]
        assert_linked(t)
        assert t.reward == float(row["reward"])


# per-format fidelity on a real fixture, every span decoded against what the harness sent
def test_nemo_gym_one_message_per_step(tok, fix):
    for row, t in _rows_and_trajectories(fix / "nemo-gym-multiturn/osworld_example_rollouts.jsonl"):
        steps = row["verifier_metadata"]["osworld_steps"]
        acts = [x for k, x in decoded(tok, t) if k == "action"]
        assert acts == [s["model_text"] + END for s in steps]  # one action per agent step, in order
        assert "observations" in t.metadata["fidelity_gaps"]  # the screenshots are not logged


def test_nemo_gym_engine_ids_kept_exactly(fix):
    path = fix / "nemo-gym/competitive_coding_challenges_example_rollouts.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    ts = list(iter_trajectories([str(path)]))
    assert len(ts) == len(rows)
    for row, t in zip(rows, ts):
        msg = [o for o in row["response"]["output"] if o.get("generation_token_ids")][0]
        assert t.token_source == "engine" and t.logprob_source == "engine"
        assert t.tokens.tolist() == msg["prompt_token_ids"] + msg["generation_token_ids"]
        a = t.spans[1]
        # the logs never say which version sampled: no made-up version 0 (the audits showed its
        # staleness and full version coverage), so staleness is undefined
        assert kinds(t) == "pa" and a.policy_version is None and t.metadata["policy_version_known"] is False
        np.testing.assert_array_equal(t.action_logprobs[a.start:a.end], np.asarray(msg["generation_log_probs"], np.float32))
        assert np.isnan(t.action_logprobs[:a.start]).all()
        assert t.reward == row["reward"] == 0.0 and t.reward_raw == "0.0"


def test_nemo_gym_text_only_rows_are_retokenized(tok, fix):
    path = fix / "nemo-gym/hermes_agent_example_math_rollouts.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    got = build(tok, path)
    assert len(got) == len(rows)
    for row, (_, t) in zip(rows, got):
        out = row["response"]["output"]
        assert sum(s.kind == "observation" for s in t.spans) == sum(o["type"] == "function_call_output" for o in out)
        assert t.reward == float(row["reward"])


# reported: ../shared/fixtures/reported/v1-tool-definitions-dropped (the same fault in NeMo Gym)
def test_tool_definitions_reach_the_prompt_nemo_gym(tok, reported, tmp_path):
    """The same family in NeMo Gym: ``responses_create_params.tools`` (Responses-API shape, flat,
    with ``strict``) reaches the prompt as the documented <tools> block (V0, SWE-Gym rows and
    completion logs: their fidelity tests in test_openhands_v0.py and test_openhands_v1_completions.py)."""
    row = json.loads((reported / "nemo-gym-placeholder-token-ids/rollouts.jsonl").read_text().splitlines()[0])
    row["responses_create_params"]["tools"] = [{"type": "function", "name": "search", "description": "Look up a fact.",
                                                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
                                                "strict": True}]
    (tmp_path / "r.jsonl").write_text(json.dumps(row) + "\n")
    (t,), _ = ingest(tmp_path / "r.jsonl")
    tool = '{"description": "Look up a fact.", "name": "search", "parameters": {"properties": {"q": {"type": "string"}}, ' \
           '"type": "object"}}'  # the function object, keys sorted, `strict` is no part of it
    assert decoded(tok, t)[0] == ("prompt", SYS.format(f"You are a test agent.\n\n# Tools\n\n<tools>\n{tool}\n</tools>")
                                + USER.format("look up two facts") + GEN)
    assert t.metadata["ingest"]["tools"] == "system-text"


# reported: ../shared/fixtures/reported/nemo-gym-placeholder-token-ids
def test_nemo_gym_placeholder_token_ids_never_replace_the_conversation(tok, reported):
    ts, _ = ingest(reported / "nemo-gym-placeholder-token-ids")
    assert [t.reward for t in ts] == [1.0, 0.0]
    for t in ts:
        assert t.token_source == "retokenized"
        assert decoded(tok, t) == [
            ("prompt", SYS.format("You are a test agent.") + USER.format("look up two facts") + GEN),
            ("action", "I will search.\n" + call("search", '{"q": "fact one"}') + "<|im_end|>"),
            ("observation", TOOL_OBS.format("fact one is blue") + GEN),
            ("action", "Fact one is blue.<|im_end|>")]  # the empty placeholder call adds nothing
        assert t.spans[2].cause_id == "call_a"
        assert "1 placeholder" in t.metadata["engine_token_ids_discarded"]


# reported: ../shared/fixtures/reported/nemo-gym-consecutive-assistant-messages
def test_nemo_gym_consecutive_assistant_messages_are_separate_calls(tok, reported):
    ts, r = ingest(reported / "nemo-gym-consecutive-assistant-messages")
    assert len(ts) == 2
    for t in ts:
        kinds = decoded(tok, t)
        assert [k for k, _ in kinds] == ["prompt", "action", "observation", "action", "observation", "action"]
        assert [x for k, x in kinds if k == "action"] == ["I will click the menu.\nclick(10, 20)<|im_end|>",
                                                          "click(30, 40)<|im_end|>", "The page is open. DONE<|im_end|>"]
        # between two calls: the separator and the next generation prompt (nothing was logged)
        assert [x for k, x in kinds if k == "observation"] == ["\n" + GEN, "\n" + GEN]
        assert "observations" in t.metadata["fidelity_gaps"]
    assert r.fidelity_gaps["observations"] == 2


# engine ids of an unnamed tokenizer are stored, not trainable
def test_engine_ids_of_an_unnamed_tokenizer_are_not_trainable(fix, tmp_path):
    """Issue 12 item 8 on the real NeMo Gym multi-turn rows (Qwen3-4B ids, no tokenizer named)."""
    path = fix / "nemo-gym-multiturn/tictactoe_env_example_rollouts.jsonl"
    st = str(tmp_path / "s")
    ingest_paths([str(path)], st)
    tab = read_trajectories(st, columns=["tokenizer", "trainable", "not_trainable_reason"]).to_pylist()
    assert len(tab) == 5 and all(not r["trainable"] and r["tokenizer"] is None for r in tab)
    assert all("unnamed tokenizer" in r["not_trainable_reason"] for r in tab)
    st2 = str(tmp_path / "s2")
    ingest_paths([str(path)], st2, engine_tokenizer="model")  # the model name is the HF repo id here
    tab = read_trajectories(st2, columns=["tokenizer", "trainable"]).to_pylist()
    assert all(r["trainable"] and r["tokenizer"] == "Qwen/Qwen3-4B-Instruct-2507" for r in tab)


# reported: ../shared/fixtures/reported/nemo-gym-consecutive-assistant-messages
@pytest.mark.parametrize("ids", [[[1, 2, 3], [4, 5]], None])
def test_nemo_gym_mixed_engine_ids_fall_back_to_text(reported, tmp_path, ids):
    row = json.loads((reported / "nemo-gym-consecutive-assistant-messages/rollouts.jsonl").read_text().splitlines()[0])
    first = row["response"]["output"][0]
    if ids:  # only the first of three calls carries real ids
        first.update(prompt_token_ids=ids[0], generation_token_ids=ids[1], generation_log_probs=[-0.1, -0.2])
    (tmp_path / "r.jsonl").write_text(json.dumps(row) + "\n")
    (t,), _ = ingest(tmp_path / "r.jsonl")
    assert t.token_source == "retokenized" and sum(s.kind == "action" for s in t.spans) == 3
    if ids:
        assert t.metadata["engine_token_ids_discarded"].startswith("1 of 3 model calls carry token ids")
    else:
        assert "engine_token_ids_discarded" not in t.metadata


# per-format fidelity of the reasoning-after-call layout, the expected decoding written by hand
def test_nemo_gym_reasoning_logged_after_its_function_call(tok, reported):
    """``conversational_tool_use_simulation`` logs each call's reasoning *after* its function call
    (output: function_call, reasoning, function_call_output, reasoning, message). Two model
    calls, so two actions: each holds its reasoning, then its text or call, closed by its own end
    of turn; between them only the tool's output (no observation of template tokens alone)."""
    path = reported / "nemo-gym-reasoning-after-function-call" / "rollouts.jsonl"
    row = json.loads(path.read_text().splitlines()[0])
    system, user = (i["content"] for i in row["responses_create_params"]["input"])
    fc, r1, out, r2, msg = row["response"]["output"]
    assert [o["type"] for o in (fc, r1, out, r2, msg)] == ["function_call", "reasoning", "function_call_output",
                                                           "reasoning", "message"]
    (t,), rep = ingest(path)
    got = decoded(tok, t)
    assert [k for k, _ in got] == ["prompt", "action", "observation", "action"]
    prompt = got[0][1]
    assert prompt.startswith(f"<|im_start|>system\n{system}\n\n# Tools\n\n<tools>\n")
    assert prompt.endswith("</tools><|im_end|>\n" + USER.format(user) + GEN)
    tools = row["responses_create_params"]["tools"]
    assert len(tools) == 18 and all(f'"name": "{tool["name"]}"' in prompt for tool in tools)
    assert got[1:] == [
        ("action", "<think>\n" + r1["summary"][0]["text"] + "\n</think>\n\n\n"
         + call("request_accessibility",
                '{"reservation_id":"ACC123","event_date":"2025-12-12","accessibility_type":"asl_interpreter"}')
         + END),
        ("observation", TOOL_OBS.format(out["output"]) + GEN),
        ("action", "<think>\n" + r2["summary"][0]["text"] + "\n</think>\n\n" + msg["content"][0]["text"] + END),
    ]
    assert t.spans[1].tool_call_ids == [fc["call_id"]] and t.spans[2].cause_id == fc["call_id"]
    assert t.spans[1].call_id == fc["id"] and t.spans[3].call_id == r2["id"]
    gaps = t.metadata["fidelity_gaps"]
    assert list(gaps) == ["item_order"] and "after the function call" in gaps["item_order"]
    assert t.model == "nvidia/nvidia/nemotron-3-ultra-nvfp4" and t.reward == 1.0 and t.status == "completed"
