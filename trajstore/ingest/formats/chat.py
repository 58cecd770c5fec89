"""OpenAI-style chat messages and their parts as :class:`~trajstore.ingest.records.Message` s:
content text, reasoning under any field name, tool calls, tool definitions, and the call ids
that link observations to the model call they answer; the shapes several formats share (a chat
message) and the provenance of dataset rows. Shared by every
parser of chat logs.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from trajstore.ingest.records import Context, Message, RecordError, ToolCall
from trajstore.ingest.values import json_field, json_type

PROVENANCE_KEYS = ("instance_id", "traj_id", "trajectory_id", "run_id", "repo", "model", "model_name",
                   "exit_status", "split", "source")
"""Columns of a dataset row copied into metadata when present (scalars only)."""


def is_message(m: dict[str, Any]) -> bool:
    """An object shaped like an OpenAI chat message: a ``role`` and a ``content`` or ``tool_calls``."""
    return "role" in m and ("content" in m or "tool_calls" in m)


def is_chat(v: Any) -> bool:
    """A non-empty list whose first item looks like an OpenAI chat message."""
    return isinstance(v, list) and bool(v) and isinstance(v[0], dict) and is_message(v[0])


def provenance(row: dict[str, Any]) -> dict[str, Any]:
    """The :data:`PROVENANCE_KEYS` a dataset row holds as scalars, for metadata."""
    return {k: row[k] for k in PROVENANCE_KEYS if isinstance(row.get(k), (str, int, float, bool))}


def tool_list(raw: Any) -> list[dict[str, Any]] | None:
    """Tool definitions of a row (a list, or a JSON-encoded list) as given; None when absent or empty.

    Raises:
        RecordError: not a list of objects.
    """
    raw = json_field(raw, "tools")
    if raw is None or raw == []:
        return None
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        raise RecordError("tools is not a list of tool definitions")
    return raw


def text_of(content: Any) -> str:
    """Plain text of a chat ``content``: a string, or a list of parts (``{"type": "text",
    "text": ...}``); non-text parts (images) become ``[image]``; None is ``""``."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for p in content:
            if isinstance(p, str):
                out.append(p)
            elif isinstance(p, dict):
                if isinstance(p.get("text"), str):
                    out.append(p["text"])
                elif p.get("type") in ("image_url", "image", "input_image"):
                    out.append("[image]")
        return "".join(out)
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        return content["text"]
    return json.dumps(content, ensure_ascii=False, default=str)


def join_blocks(texts: list[str]) -> str:
    """Several text blocks of one message (e.g. a V1 system prompt and its dynamic context) as
    one string: joined by a newline, none added after a block that already ends with one
    (the harnesses' string serializers join blocks with ``"\n"``; an error header that ends
    in a newline is not followed by a blank line)."""
    out = ""
    for i, t in enumerate(texts):
        if i and not out.endswith("\n"):
            out += "\n"
        out += t
    return out


def reasoning_of(d: dict[str, Any]) -> tuple[str | None, bool]:
    """The reasoning text an assistant message carries, under any common field name.

    Looks at ``reasoning_content`` (OpenAI-compatible servers, LiteLLM), ``reasoning``
    (a string, or an object with ``content`` / ``text`` / ``summary``), ``thinking_blocks``
    (Anthropic: ``{"type": "thinking", "thinking": ...}`` blocks, joined by newlines) and
    ``thinking``, in that order; the first non-empty one wins.

    Returns:
        (text or None, redacted): `redacted` is True when there were ``redacted_thinking``
        blocks (encrypted reasoning the model saw but the log cannot show).
    """
    redacted = False
    rc = d.get("reasoning_content")
    if isinstance(rc, str) and rc:
        return rc, False
    r = d.get("reasoning")
    if isinstance(r, dict):
        r = r.get("content") or r.get("text") or r.get("summary")
    if isinstance(r, list):
        r = "\n".join(text_of(x.get("text") if isinstance(x, dict) else x) for x in r) or None
    if isinstance(r, str) and r:
        return r, False
    blocks = d.get("thinking_blocks")
    if isinstance(blocks, list) and blocks:
        texts = []
        for b in blocks:
            if isinstance(b, dict) and b.get("type") == "redacted_thinking":
                redacted = True
            elif isinstance(b, dict) and isinstance(b.get("thinking"), str) and b["thinking"]:
                texts.append(b["thinking"])
        if texts:
            return "\n".join(texts), redacted
    th = d.get("thinking")
    if isinstance(th, str) and th:
        return th, redacted
    return None, redacted


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])|(?<=[A-Z])([A-Z][a-z])", r"_\1\2", name).lower()


def tool_definitions(raw: Any) -> list[dict[str, Any]] | None:
    """Tool definitions as sent to the model, in OpenAI form ``{"type": "function", "function":
    {"name", "description", "parameters"}}``.

    Accepts OpenAI chat tools (``{"type": "function", "function": {...}}``), Responses-API /
    flat tools (``{"type": "function", "name", "description", "parameters"}``, Anthropic's
    ``input_schema``) and OpenHands V1 ``ToolDefinition`` dumps (no ``name``: the SDK names a
    tool after its class, ``TerminalTool`` -> ``terminal``; else ``title``). Keys a model never
    sees (``kind``, ``annotations``, ``action_type``, ...) are dropped; ``parameters`` is kept
    only when logged. None for an empty or missing list.
    """
    if not isinstance(raw, list) or not raw:
        return None
    out = []
    for t in raw:
        if not isinstance(t, dict):
            continue
        fn = t["function"] if isinstance(t.get("function"), dict) else t
        name = fn.get("name")
        if not name and isinstance(fn.get("kind"), str) and fn["kind"].endswith("Tool"):
            name = _snake(fn["kind"][:-len("Tool")])
        name = name or fn.get("title")
        d: dict[str, Any] = {"name": str(name)}
        if isinstance(fn.get("description"), str):
            d["description"] = fn["description"]
        params = fn.get("parameters", fn.get("input_schema"))
        if isinstance(params, dict):
            d["parameters"] = params
        out.append({"type": "function", "function": d})
    return out or None


def tools_without_parameters(tools: list[dict[str, Any]] | None) -> list[str]:
    """Names of the tools in `tools` whose parameter schema was not logged."""
    return [t["function"]["name"] for t in tools or [] if "parameters" not in t["function"]]


def arguments_text(args: Any) -> str:
    """Tool-call arguments as JSON text (strings are kept verbatim, as the model wrote them)."""
    if isinstance(args, str):
        return args
    return json.dumps(args, ensure_ascii=False, default=str)


def tool_calls_of(raw: Any, where: str = "tool_calls") -> list[ToolCall]:
    """The ``tool_calls`` list of an OpenAI chat message (``{"id", "function": {"name",
    "arguments"}}`` items) as :class:`ToolCall` s; a missing id is None, an empty object (some
    prompt-based logs write ``[{}]``) holds no call.

    Raises:
        RecordError: `raw` is not a list, an item is not an object, or its ``function`` is not an
            object with a ``name`` (naming the item: ``tool_calls[0].function is a str``).
    """
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise RecordError(f"{where} is {json_type(raw)}, expected a list of tool calls "
                          '({"id", "function": {"name", "arguments"}} objects)')
    out = []
    for i, c in enumerate(raw):
        if not isinstance(c, dict):
            raise RecordError(f"{where}[{i}] is {json_type(c)}, expected a tool call object "
                              '({"id", "function": {"name", "arguments"}})')
        if not c:
            continue
        fn = c.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            what = json_type(fn) if not isinstance(fn, dict) else "an object without a string 'name'"
            raise RecordError(f"{where}[{i}].function is {what}, expected an object with a name and arguments")
        out.append(ToolCall(str(c["id"]) if c.get("id") else None, fn["name"],
                            arguments_text(fn.get("arguments", ""))))
    return out


def chat_messages(raw: Any, origin_desc: str) -> list[Message]:
    """OpenAI chat messages (system / user / assistant with tool_calls / tool) as :class:`Message` s.

    Raises:
        RecordError: a message is not an object or has an unknown role.
    """
    if not isinstance(raw, list):
        raise RecordError(f"{origin_desc} is {json_type(raw)}, expected a list of chat messages")
    if not raw:  # refused here, by name, not later as 'invalid: ValueError: empty conversation'
        raise RecordError(f"{origin_desc} is an empty list: no conversation to store")
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise RecordError(f"{origin_desc}[{i}] is {json_type(m)}, expected a chat message object")
        if m.get("role") is None:
            raise RecordError(f"{origin_desc}[{i}] has no 'role'")
        if not isinstance(m["role"], str):
            raise RecordError(f"{origin_desc}[{i}].role is {json_type(m['role'])}, expected a string")
        role = m["role"]
        if role not in ("system", "user", "assistant", "tool", "developer", "function"):
            raise RecordError(f"{origin_desc}[{i}]: unknown role {role!r}")
        role = {"developer": "system", "function": "tool"}.get(role, role)
        calls = tool_calls_of(m.get("tool_calls"), f"{origin_desc}[{i}].tool_calls")
        if not calls and m.get("function_call") is not None:  # OpenAI's legacy single call
            calls = tool_calls_of([{"function": m["function_call"]}], f"{origin_desc}[{i}].function_call")
        reasoning = reasoning_of(m)[0] if role == "assistant" else None
        out.append(Message(role, text_of(m.get("content")), reasoning=reasoning or None, tool_calls=calls,
                           cause_id=str(m["tool_call_id"]) if m.get("tool_call_id") else None))
    return out


def link_observations(msgs: list[Message]) -> list[Message]:
    """Give each assistant message without one a call id (``step-<n>``) and link every later
    user / tool message that names no tool call to the assistant message just before it (the
    harness answers each action before the next model call)."""
    step = 0
    pending: str | None = None
    for m in msgs:
        if m.role == "assistant":
            m.call_id = m.call_id or f"step-{step}"
            step += 1
            pending = m.call_id
        elif m.role in ("user", "tool") and m.cause_id is None and pending is not None:
            m.cause_id = pending
    return msgs


def drop_sent_back_reasoning(msgs: list[Message], tools: list[dict[str, Any]] | None,
                             change: str = "reasoning-dropped") -> int:
    """For a harness that does not send a call's reasoning back to the model: give every model
    call after one with reasoning the context it was really sent, the messages before it with
    the earlier calls' reasoning removed (a :class:`~trajstore.ingest.records.Context`, so it
    is rendered as a new trajectory of the episode wherever that context no longer extends the
    previous call's prompt + generation). Calls that already carry a context are left as they are,
    and the calls after one extend that context (not the messages logged before it).

    Returns:
        The number of calls given such a context (0: no earlier reasoning to drop).
    """
    n, seen = 0, False
    base: tuple[int, list[Message]] = (0, [])  # a call with its own context: later calls extend that context
    for i, m in enumerate(msgs):
        if m.role != "assistant":
            continue
        if m.context is not None:
            base = (i, list(m.context.messages))
        elif seen:
            ctx = [dataclasses.replace(x, reasoning=None) if x.role == "assistant" and x.reasoning else x
                   for x in base[1] + msgs[base[0]:i]]
            m.context = Context(ctx, tools, change)
            n += 1
        seen = seen or bool(m.reasoning)
    return n
