"""Tokenize a conversation with a chat template and cut the tokens into spans.

The token ids are exactly the template's render of the whole conversation (the oracle:
``tokenizer.apply_chat_template(messages, tokenize=True)``). Span boundaries are found in the
rendered text and mapped to tokens through the tokenizer's offsets:

* append-only templates: message ``k`` starts where the render of ``messages[:k]`` ends
  (checked to be a prefix of the full render);
* templates that are not append-only (reasoning dropped from earlier turns, a different header
  on the last turn, ...): message ``k-1``'s content is located in the full render and its
  closing text (what the template writes after it when it is last) is appended; failing that,
  the longest common prefix of the two renders is used (method ``approximate``).

An assistant turn's role header and its closing tokens (``<|im_start|>assistant\\n`` ...
``<|im_end|>\\n`` in ChatML) belong to the action span, as the model generates the end-of-turn
token and the header is what a rollout engine would have appended as the generation prompt.

Templates that do not render ``tool_calls`` / ``reasoning_content`` (SmolLM2's ChatML) get
them written into the assistant content, in this documented form::

    <think>\\n{reasoning}\\n</think>\\n\\n{content}\\n<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>

(one ``<tool_call>`` block per call, arguments parsed from JSON when they are valid JSON).
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from trajstore.ingest.core import Message

RenderMethod = Literal["prefix", "anchored", "approximate"]


@dataclass
class RenderedConversation:
    """The tokens of a conversation and where each message starts.

    Attributes:
        token_ids: int32, shape (T,): the template's render of the whole conversation.
        message_starts: token index where each message's span starts, length = len(messages),
            non-decreasing; message k covers ``[message_starts[k], message_starts[k+1])`` (the
            last message runs to T). ``preamble`` tokens before ``message_starts[0]`` are text
            the template adds itself (a default system prompt).
        method: how the boundaries were found (worst over all messages).
    """

    token_ids: np.ndarray
    message_starts: list[int]
    method: RenderMethod
    text: str


def _tool_call_block(name: str, arguments: str) -> str:
    try:
        args: Any = json.loads(arguments) if arguments else {}
    except (json.JSONDecodeError, TypeError):
        args = arguments
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}, ensure_ascii=False) + "\n</tool_call>"


def template_features(tokenizer: Any) -> tuple[bool, bool]:
    """(renders tool_calls natively, renders reasoning_content natively) for the tokenizer's template."""
    tpl = tokenizer.chat_template or ""
    if isinstance(tpl, dict):
        tpl = " ".join(tpl.values())
    return "tool_calls" in tpl, "reasoning_content" in tpl


def to_template_messages(messages: list[Message], *, native_tool_calls: bool,
                         native_reasoning: bool) -> list[dict[str, Any]]:
    """Messages as dicts for ``apply_chat_template`` (OpenAI chat shape)."""
    out = []
    for m in messages:
        d: dict[str, Any] = {"role": m.role}
        content = m.content
        if m.role == "assistant":
            if m.reasoning:
                if native_reasoning:
                    d["reasoning_content"] = m.reasoning
                else:
                    content = f"<think>\n{m.reasoning}\n</think>\n\n{content}"
            if m.tool_calls and not m.tool_calls_in_content:
                if native_tool_calls:
                    d["tool_calls"] = [{"id": t.id, "type": "function",
                                        "function": {"name": t.name, "arguments": t.arguments}}
                                       for t in m.tool_calls]
                else:
                    for t in m.tool_calls:
                        content += ("\n" if content else "") + _tool_call_block(t.name, t.arguments)
        if m.role == "tool" and m.cause_id:
            d["tool_call_id"] = m.cause_id
        d["content"] = content
        out.append(d)
    return out


def _common_prefix_len(a: str, b: str) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n
    while lo < hi:  # binary search on prefix equality (C-speed slice compares)
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _render(tokenizer: Any, msgs: list[dict[str, Any]]) -> str:
    return tokenizer.apply_chat_template(msgs, tokenize=False) if msgs else ""


def _preamble_chars(tokenizer: Any, msgs: list[dict[str, Any]]) -> int:
    """Characters the template writes before the first message (e.g. a default system prompt)."""
    if not msgs:
        return 0
    one = _render(tokenizer, msgs[:1])
    two = _render(tokenizer, msgs[:1] * 2)
    if not two.startswith(one):
        return 0
    block = two[len(one):]
    return len(one) - len(block) if block and one.endswith(block) else 0


def render_conversation(tokenizer: Any, messages: list[Message]) -> RenderedConversation:
    """Render `messages` with the tokenizer's chat template and locate every message's tokens.

    Args:
        tokenizer: a transformers fast tokenizer with a chat template (needs offset mapping).
        messages: the conversation (at least one message).

    Returns:
        A :class:`RenderedConversation`; ``token_ids`` equal
        ``tokenizer.apply_chat_template(<template messages>, tokenize=True)``.

    Raises:
        ValueError: the template cannot render the conversation, or the tokenizer gives no offsets.
    """
    if not messages:
        raise ValueError("empty conversation")
    native_tools, native_reasoning = template_features(tokenizer)
    tmsgs = to_template_messages(messages, native_tool_calls=native_tools, native_reasoning=native_reasoning)
    try:
        full = _render(tokenizer, tmsgs)
    except Exception as e:  # jinja raises TemplateError / TypeError for shapes it rejects
        raise ValueError(f"chat template cannot render the conversation: {e}") from e
    enc = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    ids = enc["input_ids"]
    offsets = enc.get("offset_mapping")
    if offsets is None:
        raise ValueError("tokenizer gives no offset mapping (a fast tokenizer is needed)")
    starts = [o[0] for o in offsets]

    method: RenderMethod = "prefix"
    char_bounds = [_preamble_chars(tokenizer, tmsgs)]
    for k in range(1, len(tmsgs)):
        prev = char_bounds[-1]
        prefix = _render(tokenizer, tmsgs[:k])
        if len(prefix) >= prev and full.startswith(prefix):
            char_bounds.append(len(prefix))
            continue
        b = None
        anchor = tmsgs[k - 1]["content"]
        if anchor:
            pos = full.find(anchor, prev)
            j = prefix.rfind(anchor)
            if pos >= 0 and j >= 0:
                end = pos + len(anchor)
                closing = prefix[j + len(anchor):]
                b = end + _common_prefix_len(full[end:end + len(closing)], closing)
                if method == "prefix":
                    method = "anchored"
        if b is None:
            b = max(prev, _common_prefix_len(full, prefix))
            method = "approximate"
        char_bounds.append(max(prev, b))

    def to_token(c: int) -> int:
        # first token starting at or after char c (a token straddling c stays with the left span)
        return bisect.bisect_left(starts, c)

    msg_starts = [to_token(c) for c in char_bounds]
    for i in range(1, len(msg_starts)):
        msg_starts[i] = max(msg_starts[i], msg_starts[i - 1])
    return RenderedConversation(np.asarray(ids, dtype=np.int32), msg_starts, method, full)
