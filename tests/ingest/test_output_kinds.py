"""Rules every chat-like format shares (trajstore/ingest/builders/conversation.py): a stored context
holds no text the log does not; a length stop ends the action where the model was cut; one
output logged as two assistant messages is one action; tool calls with no tool list are flagged."""

from __future__ import annotations

import json

import pytest

from tests.helpers.ingest import END, GEN, USER, call, decoded, ingest, write_jsonl
from trajstore.ingest import conversation_to_trajectories
from trajstore.ingest.builders import template
from trajstore.ingest.builders.default_system import DefaultSystem
from trajstore.ingest.records import Conversation, Message, Origin, ToolCall

ARGS = '{"command": "ls"}'


def _conv(*msgs, tools=None) -> Conversation:
    return Conversation(source="test", key=None, messages=list(msgs), origin=Origin("mem"), tools=tools)


def test_qwen_agent_legacy_function_call_is_one_action(tmp_path, tok):
    # Qwen-Agent logs one output as its text, then {"content": "", "function_call": ...}
    row = {"messages": [
        {"role": "user", "content": "List the files."},
        {"role": "assistant", "content": "I will list them."},
        {"role": "assistant", "content": "", "function_call": {"name": "bash", "arguments": ARGS}},
        {"role": "function", "name": "bash", "content": "a.txt"},
        {"role": "assistant", "content": "One file: a.txt."}]}
    (t,), _ = ingest(write_jsonl(tmp_path / "qwen_agent.jsonl", [row]))
    assert decoded(tok, t) == [
        ("prompt", USER.format("List the files.") + GEN),
        ("action", "I will list them.\n" + call("bash", ARGS) + END),  # one output: no end of turn inside
        ("observation", "\n<|im_start|>tool\na.txt" + END + "\n" + GEN),
        ("action", "One file: a.txt." + END)]
    assert t.metadata["ingest"]["joined_outputs"] == 1
    assert "observations" not in t.metadata.get("fidelity_gaps", {})


@pytest.mark.parametrize("first, second", [
    (Message("assistant", "Step one.", finish_reason="stop"), Message("assistant", "", tool_calls=[
        ToolCall("c", "bash", ARGS)])),  # the first call was logged as stopped: two calls
    (Message("assistant", "Step one."), Message("assistant", "Step two.")),  # text then text
    (Message("assistant", "", tool_calls=[ToolCall("c", "bash", ARGS)]), Message("assistant", "Done.")),
])
def test_adjacent_calls_that_are_not_one_output_stay_apart_and_are_flagged(tok, first, second):
    (t,) = conversation_to_trajectories(_conv(Message("user", "Go."), first, second), tok, tokenizer_name="t",
                                        input_format="test")
    assert [s.kind for s in t.spans] == ["prompt", "action", "observation", "action"]
    assert "not one output" in t.metadata["fidelity_gaps"]["observations"]


@pytest.mark.parametrize("spelling", ["length", "max_tokens", "max_output_tokens", "MAX_TOKENS"])
def test_every_length_stop_is_length_and_keeps_only_what_was_generated(tok, spelling):
    cut = Message("assistant", "", reasoning="Let me think about", finish_reason=spelling)
    (t,) = conversation_to_trajectories(_conv(Message("user", "Go."), cut), tok, tokenizer_name="t",
                                        input_format="test")
    (action,) = [s for s in t.spans if s.kind == "action"]
    assert action.finish_reason == "length"
    # no closing tag and no end of turn: the model generated neither
    assert decoded(tok, t)[-1] == ("action", "<think>\nLet me think about")


def test_nemo_gym_max_output_tokens_cuts_the_last_call(tmp_path, tok):
    row = {"responses_create_params": {"input": [{"role": "user", "content": "Go."}]},
           "response": {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
                        "created_at": 0.0, "model": "m",
                        "output": [{"type": "reasoning", "id": "rs_1",
                                    "summary": [{"type": "summary_text", "text": "Let me think about"}]}]},
           "reward": 0.0}
    (t,), _ = ingest(write_jsonl(tmp_path / "rollouts.jsonl", [row]))
    assert t.status == "truncated"
    assert [s.finish_reason for s in t.spans if s.kind == "action"] == ["length"]
    assert decoded(tok, t)[-1] == ("action", "<think>\nLet me think about")
    assert t.created_at.year > 1970  # created_at 0.0 is no time: not 1970 (the file's time instead)


def test_nemo_gym_row_with_no_model_output_is_not_completed(tmp_path):
    row = {"responses_create_params": {"input": [{"role": "user", "content": "Go."}]},
           "response": {"status": "completed", "output": [], "model": "m"}, "reward": 0.0}
    (t,), _ = ingest(write_jsonl(tmp_path / "rollouts.jsonl", [row]))
    assert t.status == "aborted" and "status" in t.metadata["fidelity_gaps"]


def test_tool_calls_without_tool_definitions_are_flagged_in_any_format(tmp_path):
    row = {"messages": [{"role": "user", "content": "Go."},
                        {"role": "assistant", "content": "", "tool_calls": [
                            {"id": "c", "type": "function", "function": {"name": "bash", "arguments": ARGS}}]},
                        {"role": "tool", "tool_call_id": "c", "content": "ok"}]}
    (t,), _ = ingest(write_jsonl(tmp_path / "chat.jsonl", [row]))
    assert "tools" in t.metadata["fidelity_gaps"]
    row["tools"] = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    (t,), _ = ingest(write_jsonl(tmp_path / "chat.jsonl", [row]))
    assert "tools" not in t.metadata.get("fidelity_gaps", {})


def test_no_system_message_means_no_default_system_prompt_in_any_format(tmp_path, tok):
    row = {"messages": [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}]}
    (t,), _ = ingest(write_jsonl(tmp_path / "chat.jsonl", [row]))
    text = tok.decode(t.tokens.tolist())
    assert "SmolLM" not in text and text.startswith(USER.format("Hi."))
    assert "SmolLM" in t.metadata["ingest"]["default_system_omitted"]


def test_mini_swe_agent_created_at_is_its_last_message_time(reported, tmp_path):
    doc = json.loads((reported / "mini-swe-agent-v2" / "task-1.traj.json").read_text())
    for n, m in enumerate(doc["messages"]):
        m.setdefault("extra", {})["timestamp"] = 1_760_000_000 + n
    (tmp_path / "task-1.traj.json").write_text(json.dumps(doc))
    (t,), _ = ingest(tmp_path / "task-1.traj.json")
    assert t.created_at.timestamp() == 1_760_000_000 + len(doc["messages"]) - 1


def test_swe_agent_file_without_info_is_a_demonstration(reported, tmp_path):
    doc = json.loads((reported / "swe-agent-demonstration-replayed" / "networking_1.traj").read_text())
    del doc["info"]
    (tmp_path / "demo.traj").write_text(json.dumps(doc))
    (t,), _ = ingest(tmp_path / "demo.traj")
    assert t.metadata["replayed"] is True


def test_rollout_dump_stop_reason_length_is_the_actions_finish_reason(tmp_path):
    rows = [{"input": "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n", "output": "a b c", "score": 0.0,
             "step": 1, "stop_reason": "length"}]
    (t,), _ = ingest(write_jsonl(tmp_path / "1.jsonl", rows))
    assert [s.finish_reason for s in t.spans] == [None, "length"]


def test_a_default_the_template_writes_where_it_cannot_be_left_out_is_flagged_and_not_trained(tok, monkeypatch):
    # a default found by the probe, but not as the prefix of this render: the text stays, flagged
    found = DefaultSystem("the template's default", "<not the start of any render>", "")
    monkeypatch.setattr(template, "find_default_system", lambda *a, **k: found)
    (t,) = conversation_to_trajectories(_conv(Message("user", "Go."), Message("assistant", "ok")), tok,
                                        tokenizer_name="t", input_format="test")
    assert "the template's default" in t.metadata["fidelity_gaps"]["template_default_system"]
    assert "context holds text the log does not" in t.not_trainable_reason
