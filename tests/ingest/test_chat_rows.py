"""trajstore/ingest/formats/swe_smith.py, swe_rebench_openhands.py and chat_messages.py: SWE-smith
rows, nebius SWE-rebench-openhands rows, and plain OpenAI chat records (``chat-messages``): a whole
file holding one list of messages is one trajectory; in a JSONL file (or a JSON array of records)
every line is one, as a bare list or as ``{"messages": [...]}`` (the fine-tuning shape), detected
per line or named with --input-format.

Regression: ``--input-format chat-messages`` on a JSONL file refused every line with
``KeyError: 'chat-messages'`` (found by a new-user walkthrough).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.helpers.ingest import GEN, by_line, smith_row, span_texts, stored, write_jsonl
from trajstore.cli.main import app
from trajstore.ingest import IngestReport, ingest_paths, iter_trajectories
from trajstore.ingest.formats.chat_messages import parse_chat_record
from trajstore.ingest.formats.swe_rebench_openhands import parse_swe_rebench_openhands_row
from trajstore.ingest.records import Conversation, EngineRollout, Origin
from trajstore.reader import read_trajectories


def _chat(i: int) -> list[dict]:
    return [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": f"what is {i}+1?"},
            {"role": "assistant", "content": f"{i + 1}"}]


def _trajs(path, fmt="auto"):
    rep = IngestReport()
    out = list(iter_trajectories([str(path)], input_format=fmt, report=rep))
    return out, rep


@pytest.mark.parametrize("fmt", ["auto", "chat-messages"])
@pytest.mark.parametrize("shape", ["bare", "object"])
def test_jsonl_lines_are_one_trajectory_each(tmp_path, fmt, shape):
    p = tmp_path / "chats.jsonl"
    rows = [_chat(i) if shape == "bare" else {"messages": _chat(i), "reward": 0.5 * i, "id": f"c{i}"}
            for i in range(3)]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    trajs, rep = _trajs(p, fmt)
    assert rep.problems == []
    assert len(trajs) == 3
    assert sorted(t.metadata["ingest"]["line"] for t in trajs) == [1, 2, 3]
    assert {t.source for t in trajs} == {"chat-messages"}
    assert all(sum(1 for s in t.spans if s.kind == "action") == 1 for t in trajs)
    if shape == "object":
        assert sorted(t.reward for t in trajs) == [0.0, 0.5, 1.0]
        assert sorted(t.trajectory_id.split(":")[1] for t in trajs) == ["c0", "c1", "c2"]


def test_whole_file_list_of_messages_is_one_trajectory(tmp_path):
    p = tmp_path / "conv-llm-message.json"
    p.write_text(json.dumps(_chat(7)))
    for fmt in ("auto", "chat-messages"):
        trajs, rep = _trajs(p, fmt)
        assert rep.problems == [] and len(trajs) == 1
        assert trajs[0].metadata["ingest"]["line"] is None


def test_json_array_of_chat_records_is_one_trajectory_per_item(tmp_path):
    p = tmp_path / "chats.json"
    p.write_text(json.dumps([{"messages": _chat(i)} for i in range(4)]))
    trajs, rep = _trajs(p)
    assert rep.problems == [] and len(trajs) == 4


def test_a_bad_line_costs_only_itself_and_is_named(tmp_path):
    p = tmp_path / "chats.jsonl"
    p.write_text(json.dumps(_chat(1)) + "\n" + json.dumps({"messages": "not a chat"}) + "\n"
                 + json.dumps({"messages": _chat(2), "reward": "n/a"}) + "\n" + json.dumps(_chat(3)) + "\n")
    trajs, rep = _trajs(p, "chat-messages")
    assert sorted(t.metadata["ingest"]["line"] for t in trajs) == [1, 4]
    assert sorted(pr.origin.line for pr in rep.problems) == [2, 3]
    reasons = {pr.origin.line: pr.reason for pr in rep.problems}
    assert "KeyError" not in " ".join(reasons.values())
    assert "reward" in reasons[3]


def test_cli_input_format_chat_messages_on_jsonl_stores_every_line(tmp_path):
    p = tmp_path / "chats.jsonl"
    p.write_text("".join(json.dumps({"messages": _chat(i)}) + "\n" for i in range(3)))
    store = tmp_path / "store"
    res = CliRunner().invoke(app, ["ingest", str(store), str(p), "--input-format", "chat-messages"])
    assert res.exit_code == 0, res.output
    assert len(read_trajectories(str(store))) == 3
    again = ingest_paths([str(p)], str(store), input_format="chat-messages")
    assert again.trajectories_written == 0  # idempotent


@pytest.mark.parametrize("fmt", ["auto", "chat-messages"])
def test_a_file_of_one_message_list_with_a_bad_first_message_names_the_field(tmp_path, fmt):
    """A file holding one message list whose first message lacks a role was read as an array of
    records: each message refused as 'not a chat record' under a made-up line number (or, auto,
    'unrecognised content'), never naming the message at fault."""
    p = tmp_path / "one.jsonl"
    p.write_text(json.dumps([{"content": "x"}, {"role": "user", "content": "q"},
                             {"role": "assistant", "content": "a"}]) + "\n")
    trajs, rep = _trajs(p, fmt)
    assert trajs == []
    assert len(rep.problems) == 1, [pr.reason for pr in rep.problems]
    assert "messages[0]" in rep.problems[0].reason and "role" in rep.problems[0].reason



def test_a_message_that_is_not_an_object_or_has_a_non_string_role_says_so(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text(json.dumps([{"role": "user", "content": "q"}, "hello"]) + "\n"
                 + json.dumps([{"role": "user", "content": "q"}, {"role": 7, "content": "a"}]) + "\n")
    trajs, rep = _trajs(p, "chat-messages")
    reasons = {pr.origin.line: pr.reason for pr in rep.problems}
    assert "messages[1] is a string" in reasons[1] and "has no 'role'" not in reasons[1]
    assert "messages[1].role is" in reasons[2] and "has no 'role'" not in reasons[2]


def test_legacy_function_call_is_kept_as_the_assistant_tool_call(tmp_path):
    """OpenAI's legacy ``function_call`` (with a ``function`` role reply) was accepted and then
    dropped: the assistant's action was stored empty, the call lost."""
    p = tmp_path / "fc.jsonl"
    row = [{"role": "user", "content": "weather?"},
           {"role": "assistant", "content": None,
            "function_call": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}},
           {"role": "function", "name": "get_weather", "content": "sunny"},
           {"role": "assistant", "content": "It is sunny."}]
    p.write_text(json.dumps(row) + "\n" + json.dumps(row[:2]) + "\n")
    trajs, rep = _trajs(p, "chat-messages")
    assert rep.problems == [] and len(trajs) == 2
    actions = [s for s in trajs[0].spans if s.kind == "action"]
    assert len(actions) == 2
    conv = parse_chat_record(row, Origin(str(p), 1))
    calls = [c for m in conv.messages for c in m.tool_calls]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Oslo"})]


@pytest.mark.parametrize("fmt", ["auto", "chat-messages"])
def test_an_empty_message_list_is_refused_by_name_not_as_a_python_error(tmp_path, fmt):
    p = tmp_path / "e.jsonl"
    p.write_text("[]\n" + json.dumps({"messages": []}) + "\n" + json.dumps(_chat(1)) + "\n")
    trajs, rep = _trajs(p, fmt)
    assert len(trajs) == 1
    reasons = {pr.origin.line: (pr.kind, pr.reason) for pr in rep.problems}
    assert set(reasons) == {1, 2}
    for kind, reason in reasons.values():
        assert kind == "malformed" and "messages is an empty list" in reason and "ValueError" not in reason


def test_a_one_line_jsonl_file_keeps_its_line_number(tmp_path):
    # a JSONL file of one line parses as one JSON document too; its record and its refusal
    # still name line 1 (they carried no line)
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_text(json.dumps({"messages": _chat(1)}) + "\n")
    bad.write_text(json.dumps({"messages": _chat(2), "reward": "n/a"}) + "\n")
    trajs, rep = _trajs(tmp_path)
    assert [t.metadata["ingest"]["line"] for t in trajs] == [1]
    assert [(pr.origin.path, pr.origin.line) for pr in rep.problems] == [(str(bad), 1)]


@pytest.mark.parametrize("fmt", ["auto", "chat-messages", "swe-smith"])
def test_an_empty_json_array_is_a_skip_under_every_format(tmp_path, fmt):
    # auto refused it as 'unrecognised content' (exit 1); a named format stored nothing, silently
    p = tmp_path / "empty.json"
    p.write_text("[]")
    trajs, rep = _trajs(p, fmt)
    assert trajs == []
    assert [(pr.kind, pr.reason) for pr in rep.problems] == [("no_trajectory", "an empty JSON array (no records)")]


def test_a_chat_row_with_a_text_response_field_is_a_chat_row(tmp_path):
    # {"messages": [...], "response": "<text>"} (a common SFT/eval export) was detected as an
    # OpenHands V1 completion log, whose "response" is a LiteLLM response object, and refused as
    # "response has no choices[0].message (string indices must be integers, not 'str')"
    p = tmp_path / "chats.jsonl"
    rows = [{"messages": _chat(i), "response": f"{i + 1}", "reward": 1.0} for i in range(2)]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    trajs, rep = _trajs(p)
    assert rep.problems == [] and len(trajs) == 2
    assert {t.source for t in trajs} == {"chat-messages"}


# fidelity of a format added beyond the reported cases
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


SMITH_PROMPT = ("<|im_start|>system\nYou are a coding agent.<|im_end|>\n<|im_start|>user\n<uploaded_files>/testbed"
                "</uploaded_files> Fix the off-by-one.<|im_end|>\n" + GEN)


# reported: ../shared/fixtures/reported/swe-smith-hf-row
def test_swe_smith_hf_row(reported, tmp_path, tok):
    # rows.jsonl: 'messages' is a JSON-encoded string; resolved true / false.
    rep = ingest_paths([str(reported / "swe-smith-hf-row")], str(tmp_path / "s"))
    assert (rep.trajectories_written, rep.refused, dict(rep.by_format)) == (2, 0, {"swe-smith": 2})
    rows = sorted(read_trajectories(str(tmp_path / "s")).to_pylist(), key=lambda r: -r["reward"])
    assert [r["reward"] for r in rows] == [1.0, 0.0]
    for r in rows:
        assert r["source"] == "swe-smith" and r["model"] == "demo-model"
        assert r["prompt_id"] == "demo__lib.abc123.func_pm__x1"
        assert span_texts(r, tok) == [
            ("prompt", SMITH_PROMPT),
            ("action", "Let me look.\n\n<function=bash>\n<parameter=command>ls /testbed</parameter>\n</function>"
                       "<|im_end|>"),
            ("observation", "\n<|im_start|>user\nOBSERVATION:\nsrc tests<|im_end|>\n" + GEN),
            ("action", "Done.\n\n<function=submit>\n</function><|im_end|>"),
        ]
        assert r["spans"][2]["cause_id"] == r["spans"][1]["call_id"] == "step-0"
    meta = json.loads(rows[0]["metadata"])
    assert meta["traj_id"] == "demo__lib.abc123.func_pm__x1.t1" and meta["instance_id"] == "demo__lib.abc123.func_pm__x1"


# hostile tester: a fault found in `traj ingest` (failed before its fix)
def test_resolved_as_a_string_in_a_swe_smith_file(tmp_path):
    f = write_jsonl(tmp_path / "rows.jsonl", [smith_row(1, resolved="true"), smith_row(2, resolved="False"),
                                              smith_row(3, resolved="maybe")])
    rep = ingest_paths([str(f)], str(tmp_path / "s"))
    got = {r["trajectory_id"].split(":")[1]: (r["reward"], r["reward_raw"]) for r in stored(tmp_path / "s")}
    assert got == {"t1": (1.0, '"true"'), "t2": (0.0, '"False"')}
    assert str(by_line(rep)[("rows.jsonl", 3)]) == (f"{f}:3: malformed: resolved is 'maybe': expected true/false "
                                                    "or 1/0")
