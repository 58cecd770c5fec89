"""The ``response_item`` s of a Codex CLI rollout as chat messages: the Responses API items Codex
sends as the model's input (``message`` of role user / developer / assistant, ``function_call``
and its ``function_call_output``, ``custom_tool_call``, ``local_shell_call``, ``reasoning``, ...).

One model call returns several output items (reasoning, a message, tool calls): they are one
assistant message. Which items one call returned is told by the ``token_count`` event Codex
writes once per call (before the call's items in older versions, after them in newer ones:
either way between two calls); without those events, by the input items between them (a tool
output, a user message). Tool outputs written between the items of one call (parallel calls,
each recorded with its output) follow that call.

Reasoning is kept in encrypted form (``encrypted_content``) with a summary the model did not
generate as its reasoning: such a call's reasoning is not in the file (counted; the summaries
are kept in metadata). A ``reasoning`` item with ``content`` (raw reasoning text, open models)
is the call's reasoning.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from trajstore.ingest.formats.chat import join_blocks, text_of
from trajstore.ingest.records import Message, RecordError, ToolCall
from trajstore.ingest.values import json_type, text_or_none

OUTPUT_ITEMS = frozenset({"reasoning", "function_call", "custom_tool_call", "local_shell_call", "web_search_call",
                          "tool_search_call", "image_generation_call"})
"""Item types only a model call returns (besides assistant messages)."""
TOOL_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output", "local_shell_call_output",
                          "tool_search_output"})
SKIPPED_ITEMS = frozenset({"ghost_snapshot"})
"""Items Codex records for itself (an undo snapshot), never sent to the model."""
CALL_BOUNDARY = "call-boundary"
"""A marker between two calls' items (from a ``token_count`` event)."""


@dataclass
class Items:
    """Messages made of a rollout's items, and what the file cannot show of them.

    Attributes:
        messages: the chat in order.
        encrypted_reasoning: calls whose reasoning is only in encrypted form.
        reasoning_summaries: those calls' reasoning summaries (text), in order.
        skipped: items not sent to the model or not rendered, by type.
    """

    messages: list[Message] = field(default_factory=list)
    encrypted_reasoning: int = 0
    reasoning_summaries: list[str] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)


def is_output(item: dict[str, Any]) -> bool:
    """Whether a response item is a model call's output."""
    t = item.get("type")
    return t in OUTPUT_ITEMS or (t == "message" and item.get("role") == "assistant")


def _content(content: Any) -> str:
    """The text of a message's ``content`` (``input_text`` / ``output_text`` items; images as ``[image]``)."""
    if isinstance(content, list):
        return join_blocks([text_of([c]) if isinstance(c, dict) else text_of(c) for c in content])
    return text_of(content)


def output_text(output: Any) -> str:
    """A tool output as the model was sent it: the string Codex sent (older versions: a JSON
    string of ``output`` and ``metadata``), or its content items / ``content`` text."""
    if isinstance(output, str):
        return output
    if isinstance(output, dict):
        return text_of(output.get("content")) if "content" in output else json.dumps(output, ensure_ascii=False)
    return text_of(output)


def _call(item: dict[str, Any], where: str) -> ToolCall:
    t = item["type"]
    cid = text_or_none(item.get("call_id")) or text_or_none(item.get("id"))
    if t == "function_call":
        if not isinstance(item.get("name"), str):
            raise RecordError(f"{where}: function_call has no name")
        args = item.get("arguments", "")
        return ToolCall(cid, item["name"], args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))
    if t == "custom_tool_call":
        return ToolCall(cid, str(item.get("name") or "custom_tool"), text_of(item.get("input")))
    # local_shell_call, web_search_call, ...: the call's action as its arguments
    action = item.get("action", item.get("arguments", {}))
    return ToolCall(cid, t.removesuffix("_call"), action if isinstance(action, str) else json.dumps(action, ensure_ascii=False))


def _add_output(msg: Message, item: dict[str, Any], out: Items, where: str) -> None:
    """Add one output item of a call to its assistant message."""
    t = item["type"]
    if t == "message":
        msg.content = join_blocks([x for x in (msg.content, _content(item.get("content"))) if x])
    elif t == "reasoning":
        raw = item.get("content")
        text = join_blocks([text_of(c.get("text")) for c in raw if isinstance(c, dict)]) if isinstance(raw, list) else ""
        if text:
            msg.reasoning = join_blocks([x for x in (msg.reasoning, text) if x])
        elif item.get("encrypted_content"):
            out.encrypted_reasoning += 1
            summary = item.get("summary")
            out.reasoning_summaries.append(join_blocks([text_of(s.get("text")) for s in summary if isinstance(s, dict)])
                                           if isinstance(summary, list) else "")
    else:
        msg.tool_calls.append(_call(item, where))


def to_messages(entries: list[tuple[int, Any]]) -> Items:
    """The chat of a rollout's entries: ``(line, response item payload)`` in order, or ``(line,
    CALL_BOUNDARY)`` between two calls (see the module docstring).

    Raises:
        RecordError: an item that is not an object, or a call or message without what it needs.
    """
    out = Items()
    bounded = any(p == CALL_BOUNDARY for _, p in entries)
    call: Message | None = None
    pending: list[Message] = []  # tool outputs recorded among the current call's items
    for line, item in entries:
        if item == CALL_BOUNDARY:
            call = None
            out.messages += pending
            pending = []
            continue
        where = f"line {line}"
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            raise RecordError(f"{where}: response_item payload is {json_type(item)} without a type")
        t = item["type"]
        if t in SKIPPED_ITEMS:
            out.skipped[t] = out.skipped.get(t, 0) + 1
            continue
        if is_output(item):
            if call is None:
                out.messages += pending
                pending = []
                call = Message("assistant", "", call_id=text_or_none(item.get("id")) or f"line-{line}")
                out.messages.append(call)
            _add_output(call, item, out, where)
            continue
        if t in TOOL_OUTPUTS:
            msg = Message("tool", output_text(item.get("output")), cause_id=text_or_none(item.get("call_id")))
        elif t == "message":
            role = {"developer": "system"}.get(str(item.get("role")), str(item.get("role")))
            if role not in ("system", "user"):
                raise RecordError(f"{where}: message of unknown role {item.get('role')!r}")
            msg = Message(role, _content(item.get("content")))
        else:  # compaction summaries (encrypted) and items of kinds not known: no text to render
            out.skipped[t] = out.skipped.get(t, 0) + 1
            continue
        if bounded and call is not None and msg.role == "tool":
            pending.append(msg)  # an output of this call's tools, recorded among its items
            continue
        out.messages += pending
        pending = []
        out.messages.append(msg)
        if not bounded or msg.role != "tool":
            call = None
    out.messages += pending
    return out
