"""trajstore/ingest/formats/chat.py: format-neutral helpers of the parsers: reasoning under every common
field name, tool definitions in their common shapes, joining a message's text blocks, odd
``tool_calls`` named with what was expected."""

from __future__ import annotations

import json

import pytest

from tests.helpers.ingest import CHAT, by_line, smith_row, write_jsonl
from trajstore.ingest import ingest_paths
from trajstore.ingest.formats.chat import drop_sent_back_reasoning, join_blocks, reasoning_of, tool_definitions
from trajstore.ingest.records import Context, Message


@pytest.mark.parametrize("msg, expected", [
    ({"reasoning_content": "A"}, ("A", False)),
    ({"reasoning": "B"}, ("B", False)),
    ({"reasoning": {"content": "C"}}, ("C", False)),
    ({"thinking_blocks": [{"type": "thinking", "thinking": "D1", "signature": "s"},
                          {"type": "thinking", "thinking": "D2"}]}, ("D1\nD2", False)),
    ({"thinking_blocks": [{"type": "redacted_thinking", "data": "xx"}]}, (None, True)),
    ({"thinking": "E"}, ("E", False)),
    ({"reasoning_content": "", "thinking": "F"}, ("F", False)),  # the first non-empty field wins
    ({"content": "no reasoning"}, (None, False)),
])
def test_reasoning_under_any_field_name(msg, expected):
    assert reasoning_of(msg) == expected


def test_tool_definitions_in_every_shape():
    params = {"type": "object", "properties": {"q": {"type": "string"}}}
    openai_chat = [{"type": "function", "function": {"name": "search", "description": "Look up.", "parameters": params}}]
    responses = [{"type": "function", "name": "search", "description": "Look up.", "parameters": params,
                  "strict": True}]
    anthropic = [{"name": "search", "description": "Look up.", "input_schema": params}]
    want = [{"type": "function", "function": {"name": "search", "description": "Look up.", "parameters": params}}]
    assert tool_definitions(openai_chat) == tool_definitions(responses) == tool_definitions(anthropic) == want
    # OpenHands V1 ToolDefinition dump: named after its class (FileEditorTool -> file_editor), no parameters
    v1 = [{"description": "Edit files.", "action_type": "FileEditorAction", "kind": "FileEditorTool",
           "title": "file_editor", "annotations": {"readOnlyHint": False}}]
    assert tool_definitions(v1) == [{"type": "function", "function": {"name": "file_editor",
                                                                      "description": "Edit files."}}]
    assert tool_definitions([]) is None and tool_definitions(None) is None


def test_join_blocks():
    assert join_blocks(["a", "b"]) == "a\nb"
    assert join_blocks(["[An error occurred during execution.]\n", "out"]) == "[An error occurred during execution.]\nout"
    assert join_blocks([]) == "" and join_blocks(["", "x"]) == "\nx"  # as "\n".join does


# hostile tester: a fault found in `traj ingest` (failed before its fix)
@pytest.mark.parametrize("calls, reason", [
    ("ls -la", "messages[2].tool_calls is a string ('ls -la'), expected a list of tool calls "
               '({"id", "function": {"name", "arguments"}} objects)'),
    ({"name": "bash", "arguments": "{}"}, "messages[2].tool_calls is an object (keys: name, arguments), expected a "
                                          'list of tool calls ({"id", "function": {"name", "arguments"}} objects)'),
    ([7], 'messages[2].tool_calls[0] is a number (7), expected a tool call object ({"id", "function": '
          '{"name", "arguments"}})'),
])
def test_odd_tool_calls_name_the_field_and_what_was_expected(tmp_path, calls, reason):
    chat = [dict(m) for m in CHAT]
    chat[2]["tool_calls"] = calls
    f = write_jsonl(tmp_path / "rows.jsonl", [smith_row(1, messages=json.dumps(chat)), smith_row(2)])
    rep = ingest_paths([str(f)], str(tmp_path / "s"))
    assert rep.trajectories_written == 1
    assert by_line(rep)[("rows.jsonl", 1)].reason == reason


# reasoning dropped after a rewritten context extends that context, not the history before it
def test_reasoning_dropped_after_a_rewritten_context_extends_it():
    old = [Message("user", "task"), Message("assistant", "a1", reasoning="r1"), Message("user", "o1")]
    summary = Message("user", "SUMMARY")
    a2 = Message("assistant", "a2", reasoning="r2", context=Context([old[0], summary], None, "condensation"))
    o2, a3 = Message("user", "o2"), Message("assistant", "a3")
    msgs = [*old, a2, o2, a3]
    assert drop_sent_back_reasoning(msgs, None) == 1  # a2 keeps its own context
    assert a2.context.change == "condensation"
    assert [(m.role, m.content, m.reasoning) for m in a3.context.messages] == [
        ("user", "task", None), ("user", "SUMMARY", None), ("assistant", "a2", None), ("user", "o2", None)]
