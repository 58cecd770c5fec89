"""Tokenize a conversation with a chat template and cut it into spans, one trajectory per
context the model actually saw.

Every model call k (an assistant message) is rendered the way a rollout engine would have
served it: its prompt is the template's render of the call's context with the generation
prompt (``G_k``), and its action is what the model generated: the assistant turn after the
generation prompt, closed by its end-of-turn token, without the template's separator
(:mod:`trajstore.chat_template`). A call's context is everything logged
before it, or what the harness says it sent instead (:class:`~trajstore.ingest.records.Context`:
condensation, history processors, a changed tool list).

Consecutive calls share one trajectory while each call's prompt ``G_k`` starts with the text
stored so far (the previous prompt plus the previous generation); the text between is the
observation span(s): the separator, the environment's messages (one span per message) and
the next generation prompt. When a call's prompt does not extend it (the harness rewrote the
history, or the template drops earlier reasoning), a new trajectory starts at that call with
the whole rewritten context as its prompt: a stored trajectory never claims a context the
model did not see. Messages after the last call are kept as observations when the template
renders them after it unchanged.

Token ids are the tokenization of each trajectory's whole text; span boundaries are mapped
from characters to tokens through the tokenizer's offsets (a token straddling a boundary
stays with the left span).

How assistant messages and tool lists are written for the template (natively, or as text where
it does not read them) is :mod:`trajstore.ingest.builders.template`'s part.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from trajstore.chat_template import generated_text
from trajstore.ingest.builders.template import TemplateRenderer
from trajstore.ingest.records import Message
from trajstore.schema import SpanKind

RenderMethod = Literal["exact", "approximate"]
_PROBE = "\u2063probe-content\u2063"


@dataclass
class PartSpan:
    """One span of a rendered part: token range ``[start, end)`` and the index of the message
    it holds in the conversation (None: template text only, or a message of a rewritten context)."""

    kind: SpanKind
    start: int
    end: int
    message: int | None


@dataclass
class RenderedPart:
    """One trajectory's worth of a conversation: the calls that saw one growing context.

    Attributes:
        token_ids: int32, shape (T,): the tokenization of `text`.
        spans: ordered spans covering ``[0, T)`` exactly.
        text: the rendered text (prompt, actions and observations in order).
        method: ``exact``, or ``approximate`` when a boundary was not where the template puts it.
        change: why this part starts a new context (None for the first part): the context's
            ``change`` (``condensation``, ...) or ``template`` (the template rewrote earlier turns).
        notes: what was approximated, one line each.
    """

    token_ids: np.ndarray
    spans: list[PartSpan]
    text: str
    method: RenderMethod
    change: str | None
    notes: list[str] = field(default_factory=list)


@dataclass
class _Part:
    text: str
    bounds: list[tuple[SpanKind, int, int, int | None]]
    change: str | None
    method: RenderMethod = "exact"
    notes: list[str] = field(default_factory=list)


def _observations(part: _Part, start: int, end: int, idx: list[int], cuts: list[int] | None) -> None:
    """Observation spans over characters ``[start, end)``: one per message of `idx` when `cuts`
    (where messages 1.. start) are known; none logged (consecutive calls) = one span of template text."""
    if not idx:
        part.bounds.append(("observation", start, end, None))
        return
    if cuts is None:
        part.bounds.append(("observation", start, end, idx[0]))
        if len(idx) > 1:
            part.method = "approximate"
            part.notes.append(f"messages {idx[0]}-{idx[-1]} kept as one observation span (the template "
                              "does not render them one after the other)")
        return
    edges = [start, *cuts, end]
    for i, k in enumerate(idx):
        part.bounds.append(("observation", edges[i], edges[i + 1], k))


def render_conversation(tokenizer: Any, messages: list[Message], *,
                        tools: list[dict[str, Any]] | None = None) -> list[RenderedPart]:
    """Render `messages` with the tokenizer's chat template and cut them into spans, one part
    per context the model saw (see the module docstring).

    Args:
        tokenizer: a transformers fast tokenizer with a chat template (needs offset mapping).
        messages: the conversation (at least one message); assistant messages are model calls.
        tools: tool definitions sent with the calls that carry no :class:`Context` of their own.

    Returns:
        The parts in order; a conversation whose calls all extend one context gives one part.

    Raises:
        ValueError: the template cannot render the conversation, or the tokenizer gives no offsets.
    """
    if not messages:
        raise ValueError("empty conversation")
    r = TemplateRenderer(tokenizer)
    actions = [i for i, m in enumerate(messages) if m.role == "assistant"]
    parts: list[_Part] = []
    if not actions:
        text = r.render(messages, tools, gen=False)
        parts.append(_Part(text, [("prompt", 0, len(text), None)], None))
        return [_tokenize(tokenizer, p) for p in parts]

    cur: _Part | None = None
    ctx: list[Message] = []
    ctx_tools = tools
    prev: int | None = None
    for k in actions:
        m = messages[k]
        change = None
        between = list(range(prev + 1, k)) if prev is not None else []
        if m.context is not None:
            ctx, ctx_tools, change = list(m.context.messages), m.context.tools, m.context.change
        elif prev is None:
            ctx = messages[:k]
        else:
            ctx = ctx + [messages[prev]] + [messages[i] for i in between]
        turn = r.render(ctx + [m], ctx_tools, gen=False)
        # an empty context has no generation prompt of its own (templates refuse to render it)
        prompt = r.render(ctx, ctx_tools, gen=True) if ctx else ""
        gen = generated_text(prompt, turn, r.markers, stopped=m.finish_reason != "length") if ctx else None
        approx_note = None
        if gen is None:
            # the template renders this turn with another header than its generation prompt
            # (or a different preamble): take the prompt from the turn itself, up to its content
            probe = r.render(ctx, ctx_tools, gen=False, extra={"role": "assistant", "content": _PROBE})
            at = probe.rfind(_PROBE)
            head = probe[:at] if at >= 0 and turn.startswith(probe[:at]) else ""
            prompt = head
            gen = generated_text(head, turn, r.markers, stopped=m.finish_reason != "length") or turn[len(head):]
            if ctx:
                approx_note = (f"message {k}: the template's generation prompt is not how it renders the assistant "
                               "turn; the prompt was taken from the rendered turn")
        if cur is not None and prompt.startswith(cur.text):
            lo = len(cur.text)
            cuts = None
            if between and m.context is None:
                base = ctx[:len(ctx) - len(between)]
                cuts = r.cuts(base, [messages[i] for i in between], ctx_tools, prompt, lo, len(prompt))
            _observations(cur, lo, len(prompt), between, cuts)
        else:
            if cur is not None:
                parts.append(cur)
                change = change or "template"
            cur = _Part("", [("prompt", 0, len(prompt), None)], change)
        if approx_note:
            cur.method = "approximate"
            cur.notes.append(approx_note)
        cur.bounds.append(("action", len(prompt), len(prompt) + len(gen), k))
        cur.text = prompt + gen
        prev = k

    assert cur is not None and prev is not None
    tail = list(range(prev + 1, len(messages)))
    if tail:
        base = ctx + [messages[prev]]
        tail_msgs = [messages[i] for i in tail]
        full = r.render(base + tail_msgs, ctx_tools, gen=False)
        if full.startswith(cur.text) and len(full) > len(cur.text):
            lo = len(cur.text)
            _observations(cur, lo, len(full), tail, r.cuts(base, tail_msgs, ctx_tools, full, lo, len(full)))
            cur.text = full
        else:
            cur.method = "approximate"
            cur.notes.append(f"messages {tail[0]}-{tail[-1]} after the last model call are not stored (the template "
                             "renders the earlier turns differently once they follow)")
    parts.append(cur)
    return [_tokenize(tokenizer, p) for p in parts]


def _tokenize(tokenizer: Any, part: _Part) -> RenderedPart:
    enc = tokenizer(part.text, add_special_tokens=False, return_offsets_mapping=True)
    ids = enc["input_ids"]
    offsets = enc.get("offset_mapping")
    if offsets is None:
        raise ValueError("tokenizer gives no offset mapping (a fast tokenizer is needed)")
    starts = [o[0] for o in offsets]
    n = len(ids)
    spans: list[PartSpan] = []
    pos = 0
    for kind, _, end_c, msg in part.bounds:
        end = n if end_c >= len(part.text) else bisect.bisect_left(starts, end_c)
        if end > pos:
            spans.append(PartSpan(kind, pos, end, msg))
            pos = end
    if pos < n:  # cannot happen: the last bound ends at the end of the text
        spans[-1].end = n
    return RenderedPart(np.asarray(ids, dtype=np.int32), spans, part.text, part.method, part.change, part.notes)
