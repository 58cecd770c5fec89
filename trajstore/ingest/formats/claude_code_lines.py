"""The lines of a Claude Code session file as chat messages: what one ``user`` or ``assistant``
line holds, and the one model response Claude Code writes as several lines.

Claude Code writes each content block of a streamed response as its own ``assistant`` line (a
text block, then a ``tool_use`` block, ... all under the response's ``message.id``; only the last
carries the ``stop_reason``, and earlier versions wrote none): the lines of one ``message.id``
are one model call, whatever tool results were written between them (parallel tool calls), and
become one assistant message. A ``user`` line holds the user's text, or ``tool_result`` blocks
(each its own tool message, answering its ``tool_use_id``), or both.

Assistant lines that are Claude Code's own (``model: "<synthetic>"``: an API error, "No response
requested.") are no model output and are not sent back to the model: left out, counted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from trajstore.ingest.formats.chat import join_blocks, text_of
from trajstore.ingest.formats.finish_reasons import anthropic_finish_reason
from trajstore.ingest.records import Message, RecordError, ToolCall
from trajstore.ingest.values import json_type, text_or_none

SYNTHETIC_MODEL = "<synthetic>"
"""``message.model`` of the assistant lines Claude Code writes itself (never a model's output)."""
INTERRUPTED = "[Request interrupted by user"
"""How Claude Code words the user's interruption of a call or a tool use (a user text line)."""


@dataclass
class Converted:
    """Messages made of a session's lines, with what the conversion left out or could not show.

    Attributes:
        messages: the chat, in order.
        models: the model of each call (``message.model``), in order.
        synthetic: assistant lines Claude Code wrote itself (left out).
        redacted_thinking: calls with ``redacted_thinking`` blocks (reasoning the log cannot show).
        other_blocks: content blocks of kinds not rendered (server tool results, documents), by type.
        line_of: for each message, the index (in the lines converted) of the line that made it.
    """

    messages: list[Message] = field(default_factory=list)
    line_of: list[int] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    synthetic: int = 0
    redacted_thinking: int = 0
    other_blocks: dict[str, int] = field(default_factory=dict)


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise RecordError(f"{where}.message.content is {json_type(content)}, expected a string or content blocks")
    return [b if isinstance(b, dict) else {"type": "text", "text": text_of(b)} for b in content]


def _assistant(line: dict[str, Any], msg: Message | None, out: Converted, where: str) -> Message | None:
    """The assistant message `line` makes, or None when it continues `msg` (the previous call,
    same ``message.id``; its blocks are added to it) or is Claude Code's own."""
    m = line["message"]
    if m.get("model") == SYNTHETIC_MODEL or line.get("isApiErrorMessage"):
        out.synthetic += 1
        return None
    mid = text_or_none(m.get("id"))
    new = msg is None or mid is None or msg.call_id != mid
    if new:
        msg = Message("assistant", "", call_id=mid or text_or_none(line.get("uuid")))
        out.models.append(str(m.get("model") or ""))
    texts = [msg.content] if msg.content else []
    thinking = [msg.reasoning] if msg.reasoning else []
    for b in _blocks(m.get("content"), where):
        kind = b.get("type")
        if kind == "text":
            texts.append(text_of(b.get("text")))
        elif kind == "thinking":
            thinking.append(text_of(b.get("thinking")))
        elif kind == "redacted_thinking":
            out.redacted_thinking += 1
        elif kind in ("tool_use", "server_tool_use"):
            if not isinstance(b.get("name"), str):
                raise RecordError(f"{where}: a tool_use block has no name")
            args = b.get("input", {})
            msg.tool_calls.append(ToolCall(text_or_none(b.get("id")), b["name"],
                                           args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)))
        else:
            out.other_blocks[str(kind)] = out.other_blocks.get(str(kind), 0) + 1
    msg.content = join_blocks([t for t in texts if t])
    msg.reasoning = "\n".join(t for t in thinking if t) or None
    reason = anthropic_finish_reason(m.get("stop_reason"))
    msg.finish_reason = reason or msg.finish_reason
    return msg if new else None


def _user(line: dict[str, Any], out: Converted, where: str) -> list[Message]:
    """The messages of a user line: each ``tool_result`` a tool message, consecutive text (and
    image) blocks one user message."""
    msgs: list[Message] = []
    texts: list[str] = []
    for b in _blocks(line["message"].get("content"), where):
        if b.get("type") == "tool_result":
            if texts:
                msgs.append(Message("user", join_blocks(texts)))
                texts = []
            msgs.append(Message("tool", text_of(b.get("content")), cause_id=text_or_none(b.get("tool_use_id"))))
        elif b.get("type") in ("text", "image"):
            texts.append(text_of([b]))
        else:
            out.other_blocks[str(b.get("type"))] = out.other_blocks.get(str(b.get("type")), 0) + 1
    if texts:
        msgs.append(Message("user", join_blocks(texts)))
    return msgs


def convert(lines: list[dict[str, Any]]) -> Converted:
    """The chat of a session's message lines (``user`` / ``assistant``, in the order the model
    saw them; other lines are skipped by the caller).

    Raises:
        RecordError: a line without a ``message`` object, or content that is no string or blocks.
    """
    out = Converted()
    last: Message | None = None  # the current call, while its lines may continue
    for n, line in enumerate(lines):
        where = f"line {line.get('uuid') or '?'}"
        if not isinstance(line.get("message"), dict):
            raise RecordError(f"{where} ({line.get('type')}) has no message object")
        if line["type"] == "assistant":
            msg = _assistant(line, last, out, where)
            if msg is not None:
                out.messages.append(msg)
                out.line_of.append(n)
                last = msg
            continue
        msgs = _user(line, out, where)
        if any(m.role == "user" for m in msgs):
            last = None  # the user spoke: a later line of the same id would be a new call
        out.messages.extend(msgs)
        out.line_of += [n] * len(msgs)
    return out


def interrupted(m: Message) -> bool:
    """Whether `m` is Claude Code's note that the user interrupted the call or a tool use."""
    return m.role == "user" and m.content.startswith(INTERRUPTED)
