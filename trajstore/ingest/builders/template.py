"""How a message reaches the tokenizer's chat template: what the template renders natively, the
message as an ``apply_chat_template`` dict with the documented plain-text form of what it does
not (:func:`template_message`), and a renderer that prepares each message once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from trajstore.chat_template import (
    ChatRenderer,
    template_renders_tools,
    template_source,
    tools_system_text,
    turn_markers,
)
from trajstore.ingest.records import Message


@dataclass(frozen=True)
class TemplateFeatures:
    """What the tokenizer's chat template renders natively (else ingest writes it as text)."""

    tool_calls: bool
    reasoning: bool
    tools: bool


def template_features(tokenizer: Any) -> TemplateFeatures:
    """Which of ``tool_calls``, ``reasoning_content`` and ``tools`` the template reads."""
    tpl = template_source(tokenizer)
    return TemplateFeatures("tool_calls" in tpl, "reasoning_content" in tpl, template_renders_tools(tokenizer))


def _tool_call_block(name: str, arguments: str) -> str:
    """A tool call as text: the arguments verbatim as the model wrote them when they are valid
    JSON (re-serializing would change the generated text), else as a JSON string."""
    try:
        json.loads(arguments) if arguments else None
        args_text = arguments if arguments else "{}"
    except (json.JSONDecodeError, TypeError):
        args_text = json.dumps(arguments, ensure_ascii=False)
    return "<tool_call>\n{\"name\": " + json.dumps(name, ensure_ascii=False) + ", \"arguments\": " + args_text \
        + "}\n</tool_call>"


def template_message(m: Message, features: TemplateFeatures) -> dict[str, Any]:
    """One message as a dict for ``apply_chat_template`` (OpenAI chat shape).

    Templates that do not render ``tool_calls`` / ``reasoning_content`` (SmolLM2's ChatML) get
    them written into the assistant content, in this documented form::

        <think>\\n{reasoning}\\n</think>\\n\\n{content}\\n<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>

    (one ``<tool_call>`` block per call; the arguments verbatim as the model wrote them when they
    are valid JSON, else as a JSON string). Tool definitions go to ``tools=`` when the template
    reads ``tools``, else into the system message (:func:`with_tools_text`).
    """
    d: dict[str, Any] = {"role": m.role}
    content = m.content
    if m.role == "assistant":
        if m.reasoning:
            if features.reasoning:
                d["reasoning_content"] = m.reasoning
            else:
                content = f"<think>\n{m.reasoning}\n</think>\n\n{content}"
        if m.tool_calls and not m.tool_calls_in_content:
            if features.tool_calls:
                d["tool_calls"] = [{"id": t.id, "type": "function",
                                    "function": {"name": t.name, "arguments": t.arguments}} for t in m.tool_calls]
            else:
                for t in m.tool_calls:
                    content += ("\n" if content else "") + _tool_call_block(t.name, t.arguments)
    if m.role == "tool" and m.cause_id:
        d["tool_call_id"] = m.cause_id
    d["content"] = content
    return d


def with_tools_text(msgs: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """`msgs` with the plain-text tool list appended to the system message (a system message
    of its own first when there is none)."""
    if not tools:
        return msgs
    text = tools_system_text(tools)
    if msgs and msgs[0]["role"] == "system":
        first = dict(msgs[0])
        first["content"] = (first["content"] + "\n\n" if first["content"] else "") + text
        return [first, *msgs[1:]]
    return [{"role": "system", "content": text}, *msgs]


class TemplateRenderer:
    """Renders lists of :class:`~trajstore.ingest.records.Message` with a tokenizer's chat
    template, preparing each message (and the plain-text tool list) once per conversation."""

    def __init__(self, tokenizer: Any):
        self.tok = tokenizer
        self.chat = ChatRenderer(tokenizer)
        self.features = template_features(tokenizer)
        self.markers = turn_markers(tokenizer)
        self._dicts: dict[int, dict[str, Any]] = {}
        self._heads: dict[tuple[int, int], tuple[Any, Any, list[dict[str, Any]]]] = {}

    def dicts(self, msgs: list[Message], tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        """The messages as the template sees them, each prepared once per conversation; the
        plain-text tool list (templates without ``tools``) joins the first message once per tool list."""
        out = []
        for m in msgs:
            d = self._dicts.get(id(m))
            if d is None:
                d = self._dicts[id(m)] = self.chat.prepare(template_message(m, self.features))
            out.append(d)
        if self.features.tools or not tools:
            return out
        first = msgs[0] if msgs else None
        key = (id(first), id(tools))
        got = self._heads.get(key)
        if got is None:  # the cache entry keeps `first` and `tools` alive, so their ids stay theirs
            head = with_tools_text([template_message(first, self.features)] if first is not None else [], tools)
            got = self._heads[key] = (first, tools, [self.chat.prepare(h) for h in head])
        if first is not None and first.role == "system":
            return got[2] + out[1:]  # the system message with the tool list appended
        return got[2][:1] + out  # a system message of its own first

    def render(self, msgs: list[Message], tools: list[dict[str, Any]] | None, *, gen: bool,
               extra: dict[str, Any] | None = None) -> str:
        d = self.dicts(msgs, tools)
        if extra is not None:
            d = [*d, self.chat.prepare(extra)]
        try:
            return self.chat.render(d, add_generation_prompt=gen,
                                    tools=tools if self.features.tools and tools else None)
        except Exception as e:  # jinja raises TemplateError / TypeError for shapes it rejects
            raise ValueError(f"chat template cannot render the conversation: {e}") from e

    def cuts(self, base: list[Message], msgs: list[Message], tools: list[dict[str, Any]] | None, within: str,
             lo: int, hi: int) -> list[int] | None:
        """Where messages 1.. of `msgs` start when rendered after `base`, as character offsets
        in ``[lo, hi]`` of `within`; None when the template does not render them as a prefix."""
        out = []
        for j in range(1, len(msgs)):
            r = self.render(base + msgs[:j], tools, gen=False)
            if not within.startswith(r) or not (lo <= len(r) <= hi) or (out and len(r) < out[-1]):
                return None
            out.append(len(r))
        return out
