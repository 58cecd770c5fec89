"""Chat rendering for ``traj serve``: OpenAI messages (and tool signatures) into prompt token ids
with the tokenizer's chat template, and Hermes-style ``<tool_call>`` blocks out of generated text."""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_TOOLS_SYSTEM = ("You may call one or more functions to assist with the user query. Function signatures "
                 "are within <tools></tools>:\n<tools>\n{tools}\n</tools>\nFor each function call, return a "
                 "JSON object with the function name and arguments within <tool_call></tool_call> tags:\n"
                 "<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n</tool_call>")


def _text_of(content: Any) -> str:
    """An OpenAI message content (string, None, or a list of parts) as text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type", "text") == "text")
    raise ValueError(f"message content must be a string or a list of parts, got {type(content).__name__}")


@dataclass
class PromptRenderer:
    """Renders a chat request's OpenAI messages into the served model's prompt token ids with the
    tokenizer's chat template (not :class:`trajstore.chat_template.ChatRenderer`, which renders
    stored conversations for ingest).

    Tools follow the Hermes convention whatever the template: the tool signatures in the system
    prompt, tool calls as ``<tool_call>{json}</tool_call>`` text. An assistant turn that
    this server generated is rendered with the exact text it generated (looked up by its tool-call
    ids), so the next prompt extends the previous one whenever the tokenizer round-trips.
    """

    tokenizer: Any
    raw_by_call_id: OrderedDict[str, str] = field(default_factory=OrderedDict)
    max_remembered: int = 100_000
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def remember(self, call_ids: list[str], raw: str) -> None:
        with self._lock:
            for cid in call_ids:
                self.raw_by_call_id[cid] = raw
            while len(self.raw_by_call_id) > self.max_remembered:
                self.raw_by_call_id.popitem(last=False)

    def _assistant_text(self, m: dict[str, Any]) -> str:
        calls = m.get("tool_calls") or []
        ids = [c.get("id") for c in calls if isinstance(c, dict)]
        with self._lock:
            raws = {self.raw_by_call_id.get(i) for i in ids if i}
        if calls and len(raws) == 1 and None not in raws:
            return raws.pop() or ""
        text = _text_of(m.get("content"))
        for c in calls:
            fn = c.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                args = fn.get("arguments")
            text += "<tool_call>\n" + json.dumps({"name": fn.get("name"), "arguments": args}) + "\n</tool_call>"
        return text

    def messages_for_template(self, messages: list[dict[str, Any]], tools: list[Any] | None) -> list[dict[str, str]]:
        """Plain ``{"role", "content"}`` messages (what a tool-less template can render)."""
        out: list[dict[str, str]] = []
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or "role" not in m:
                raise ValueError(f"messages[{i}] must be an object with a role")
            role = m["role"]
            if role == "developer":
                role = "system"
            text = self._assistant_text(m) if role == "assistant" else _text_of(m.get("content"))
            out.append({"role": role, "content": text})
        if tools:
            sig = "\n".join(json.dumps(t.get("function", t)) for t in tools)
            block = _TOOLS_SYSTEM.format(tools=sig)
            if out and out[0]["role"] == "system":
                out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + block}
            else:
                out.insert(0, {"role": "system", "content": block})
        return out

    def prompt_ids(self, messages: list[dict[str, Any]], tools: list[Any] | None) -> list[int]:
        """Token ids of the conversation with the generation prompt (the assistant header)."""
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError("the served tokenizer has no chat template; use /v1/completions")
        text = self.tokenizer.apply_chat_template(self.messages_for_template(messages, tools), tokenize=False,
                                                  add_generation_prompt=True)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """Split generated text into content and Hermes-style tool calls.

    Returns:
        (content without the tool-call blocks, or None when empty; tool calls in OpenAI's shape
        with fresh ``call_<hex>`` ids). A block whose JSON lacks a name is left in the content.
    """
    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    pos = 0
    for m in _TOOL_CALL.finditer(text):
        try:
            obj = json.loads(m.group(1))
            name = obj["name"]
            if not isinstance(name, str):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            continue
        kept.append(text[pos:m.start()])
        pos = m.end()
        args = obj.get("arguments", obj.get("parameters", {}))
        calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                      "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}})
    kept.append(text[pos:])
    content = "".join(kept).strip() if calls else text
    return (content or None), calls
