"""Tokenize a conversation with a chat template and cut it into spans, one trajectory per
context the model actually saw.

Every model call k (an assistant message) is rendered the way a rollout engine would have
served it: its prompt is the template's render of the call's context with the generation
prompt (``G_k``), and its action is what the model generated: the assistant turn after the
generation prompt, closed by its end-of-turn token, without the template's separator
(:mod:`trajstore.chat_template`, issue 12 item 7). A call's context is everything logged
before it, or what the harness says it sent instead (:class:`~trajstore.ingest.core.Context`:
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

Templates that do not render ``tool_calls`` / ``reasoning_content`` (SmolLM2's ChatML) get
them written into the assistant content, in this documented form::

    <think>\\n{reasoning}\\n</think>\\n\\n{content}\\n<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>

(one ``<tool_call>`` block per call; the arguments verbatim as the model wrote them when they
are valid JSON, else as a JSON string).
Tool definitions go to ``tools=`` when the template reads ``tools``, else into the system
message as :func:`trajstore.chat_template.tools_system_text`.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

import numpy as np

from trajstore.chat_template import (
    ChatRenderer,
    generated_text,
    template_renders_tools,
    template_source,
    tools_system_text,
    turn_markers,
)
from trajstore.ingest.core import (
    DEFAULT_MAX_OBSERVATION_CHARS,
    Conversation,
    EngineRollout,
    EngineSegment,
    Message,
    ParsedTrajectory,
    cap_text,
    slug,
)
from trajstore.models import Span, Trajectory
from trajstore.validate import validate_trajectory

RenderMethod = Literal["exact", "approximate"]
SpanKind = Literal["prompt", "action", "observation"]

_PROBE = "\u2063probe-content\u2063"


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
    """One message as a dict for ``apply_chat_template`` (OpenAI chat shape)."""
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


class _Renderer:
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
    r = _Renderer(tokenizer)
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


# -- conversation -> trajectories ----------------------------------------------------------------

def content_hash(payload: Any) -> str:
    """Short stable digest of a JSON-able payload (20 hex characters)."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()[:20]


def trajectory_id(source: str, key: str | None, digest: str) -> str:
    """``<source>:<key>:<digest>`` (``<source>:<digest>`` without a key), safe as a path component."""
    return f"{slug(source)}:{slug(key)}:{digest}" if key else f"{slug(source)}:{digest}"


def status_part(t: ParsedTrajectory) -> dict[str, str]:
    """The status as part of a trajectory's identity (the same turns that ended submitted or cut
    by a limit are two outcomes); ``completed`` adds nothing, so earlier ids stay the same."""
    return {} if t.status == "completed" else {"status": t.status}


def _standard_json(v: Any) -> Any:
    """`v` with every NaN / infinite float replaced by its name as a string (``"NaN"``), so it
    serialises as standard JSON (a raw score object of an evaluator may hold NaN)."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v) if not math.isnan(v) else "NaN"
    if isinstance(v, dict):
        return {k: _standard_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_standard_json(x) for x in v]
    return v


def reward_raw(conv: ParsedTrajectory) -> str | None:
    """The raw reward as standard JSON (None when there is neither a raw value nor a reward;
    NaN / infinities inside a raw score object become strings, see :func:`_standard_json`)."""
    r = conv.reward
    if r.raw is None and r.value is None:
        return None
    raw = r.raw if r.raw is not None else r.value
    try:
        return json.dumps(raw, sort_keys=True, default=str, allow_nan=False)
    except ValueError:
        return json.dumps(_standard_json(raw), sort_keys=True, default=str, allow_nan=False)


def created_at(conv: ParsedTrajectory) -> datetime:
    """The trajectory's time: the last logged event's, else the file's modification time, else now."""
    if conv.created_at is not None:
        return conv.created_at
    try:
        return datetime.fromtimestamp(os.path.getmtime(conv.origin.path), tz=timezone.utc)
    except OSError:
        return datetime.now(timezone.utc)


def _check_call_count(item: ParsedTrajectory, calls: int, gaps: dict[str, str]) -> None:
    """Flag a log whose model calls differ from the harness's own count (metadata
    ``harness_model_calls``, e.g. SWE-agent's ``api_calls``)."""
    n = item.metadata.get("harness_model_calls")
    if isinstance(n, int) and n != calls:
        gaps.setdefault("model_calls", f"the harness counted {n} model calls, the log holds {calls}")


def _context_digest(conv: Conversation) -> list[Any]:
    pos = {id(m): i for i, m in enumerate(conv.messages)}
    out = []
    for i, m in enumerate(conv.messages):
        if m.context is not None:
            out.append([i, m.context.change, m.context.tools,
                        [pos[id(c)] if id(c) in pos else c.canonical() for c in m.context.messages]])
    return out


def conversation_to_trajectories(conv: Conversation, tokenizer: Any, *, tokenizer_name: str, input_format: str,
                                 max_observation_chars: int | None = DEFAULT_MAX_OBSERVATION_CHARS) -> list[Trajectory]:
    """Tokenize a conversation with the tokenizer's chat template: one trajectory per context
    the model saw (usually one).

    Spans: the first call's context is one prompt span; each assistant message is an action
    span (what the model generated, end-of-turn token included); every other message is an
    observation span, linked by ``cause_id``. When the conversation splits (see
    :func:`render_conversation`), every part carries metadata ``episode`` =
    ``{"id", "part", "parts", "change"}`` and the same reward, prompt id and group id
    (``group_id`` keeps its meaning, a GRPO group of rollouts of one prompt: parts of one
    episode in one group would cancel each other's advantage).

    Returns:
        Validated :class:`Trajectory` s with ``token_source = retokenized``, ``logprob_source
        = none`` and no policy versions; metadata ``fidelity_gaps`` names what could not be
        reproduced (the conversation's own gaps plus the render's approximations).

    Raises:
        ValueError: the conversation cannot be rendered.
        TrajectoryValidationError: a result breaks a schema rule.
    """
    first_action = next((i for i, m in enumerate(conv.messages) if m.role == "assistant"), len(conv.messages))
    truncated = []
    for i, m in enumerate(conv.messages):
        if i >= first_action and m.role != "assistant":
            cap_text(m, max_observation_chars)
            if m.truncated:
                truncated.append({"message": i, "original_chars": m.original_chars})
    # The id hashes what is stored (messages after capping), not the cap option: a cap that cuts
    # nothing leaves the id unchanged, so re-ingesting with another cap stays idempotent.
    digest = content_hash({"source": conv.source, "key": conv.key, "reward": reward_raw(conv), **status_part(conv),
                           "messages": [m.canonical() for m in conv.messages], "tokenizer": tokenizer_name,
                           "tools": conv.tools, "contexts": _context_digest(conv)})
    parts = render_conversation(tokenizer, conv.messages, tools=conv.tools)
    features = template_features(tokenizer)
    base_id = trajectory_id(conv.source, conv.key, digest)
    gaps = dict(conv.fidelity_gaps)
    if first_action < len(conv.messages) and conv.messages[first_action].context is None and not any(
            m.role in ("system", "user") for m in conv.messages[:first_action]):
        gaps.setdefault("prompt", "no system or user message before the first model call: the task the model was "
                                  "given is not in the log (the prompt is the template's default)")
    notes = [n for p in parts for n in p.notes]
    if notes:
        gaps.setdefault("render", "; ".join(notes))
    _check_call_count(conv, sum(m.role == "assistant" for m in conv.messages), gaps)
    out = []
    for n, part in enumerate(parts):
        spans: list[Span] = []
        for s in part.spans:
            m = conv.messages[s.message] if s.message is not None else None
            if s.kind == "prompt":
                ctx = conv.messages[:first_action] if n == 0 else []
                roles = [x.role for x in ctx]
                spans.append(Span(kind="prompt", start=s.start, end=s.end,
                                  role="system" if "system" in roles or not roles else roles[0]))
            elif s.kind == "action":
                assert m is not None
                spans.append(Span(kind="action", start=s.start, end=s.end, role="assistant", call_id=m.call_id,
                                  tool_call_ids=[t.id for t in m.tool_calls if t.id] or None,
                                  finish_reason=m.finish_reason))
            else:
                spans.append(Span(kind="observation", start=s.start, end=s.end, role=m.role if m else None,
                                  call_id=m.call_id if m else None, cause_id=m.cause_id if m else None,
                                  truncated=True if m is not None and m.truncated else None))
        meta = dict(conv.metadata)
        meta["ingest"] = {"format": input_format, "path": conv.origin.path, "line": conv.origin.line,
                          "render_method": part.method,
                          "tool_calls": "template" if features.tool_calls else "flattened-json",
                          "reasoning": "template" if features.reasoning else "flattened-think",
                          "tools": None if not conv.tools else "template" if features.tools else "system-text"}
        if len(parts) > 1:
            meta["episode"] = {"id": base_id, "part": n + 1, "parts": len(parts), "change": part.change}
        if gaps:
            meta["fidelity_gaps"] = gaps
        if truncated:
            meta["truncated_observations"] = truncated
        if conv.degraded_events:
            meta["degraded_events"] = conv.degraded_events
        if conv.reward.error:
            meta["reward_error"] = conv.reward.error
        n_tok = len(part.token_ids)
        traj = Trajectory(
            trajectory_id=base_id if len(parts) == 1 else f"{base_id}:part{n + 1}", prompt_id=conv.prompt_id,
            group_id=None, source=conv.source, model=conv.model, tokenizer=tokenizer_name, created_at=created_at(conv),
            status=conv.status, reward=conv.reward.value,
            reward_raw=reward_raw(conv), token_source="retokenized", logprob_source="none", tokens=part.token_ids,
            logprobs=np.full(n_tok, np.nan, dtype=np.float32), spans=spans, metadata=meta)
        out.append(validate_trajectory(traj))
    return out


ENGINE_TOKENIZER_FROM_MODEL = "model"
"""``engine_tokenizer`` value meaning: each rollout's engine ids belong to the tokenizer named
like its model (true when the engine served a Hugging Face repo id under its own name)."""


def _engine_parts(segments: list[EngineSegment]) -> list[list[EngineSegment]]:
    parts: list[list[EngineSegment]] = []
    for s in segments:
        if not parts or (s.kind == "prompt" and any(x.kind == "action" for x in parts[-1])):
            parts.append([])
        parts[-1].append(s)
    return parts


def rollout_to_trajectories(r: EngineRollout, *, input_format: str,
                            engine_tokenizer: str | None = None) -> list[Trajectory]:
    """Keep an engine rollout's token ids (and log-probs) exactly (``token_source = engine``):
    one trajectory per context (a prompt segment after an action starts the next part, with
    metadata ``episode`` as in :func:`conversation_to_trajectories`).

    Log-probs are all-or-nothing per rollout: when some action lacks them none is stored
    (``logprob_source = none``, metadata ``engine_logprobs_discarded``). With log-probs, action
    spans carry no policy version (null: the logs never say which version generated them) and
    metadata says ``policy_version_known: false``, so their staleness is undefined in the audits
    and the trainer, as for text-only logs; they train on their engine log-probs. The tokenizer
    is the rollout's own, else `engine_tokenizer` (:data:`ENGINE_TOKENIZER_FROM_MODEL` = the
    rollout's model name); with neither, the trajectory is stored with ``trainable = false`` and
    the reason.

    Raises:
        TrajectoryValidationError: a result breaks a schema rule (e.g. a positive log-prob).
    """
    acts = [s for s in r.segments if s.kind == "action"]
    with_lp = bool(acts) and all(s.logprobs is not None for s in acts)
    meta0 = dict(r.metadata)
    if with_lp:  # version 0 was stored before: audits showed a made-up staleness and full version coverage
        meta0["policy_version_known"] = False
    if not with_lp and any(s.logprobs is not None for s in acts):
        meta0["engine_logprobs_discarded"] = (f"{sum(s.logprobs is None for s in acts)} of {len(acts)} model calls "
                                              "have no log-probs")
    tokenizer = r.tokenizer or (r.model if engine_tokenizer == ENGINE_TOKENIZER_FROM_MODEL else engine_tokenizer)
    reason = None if tokenizer else (
        f"engine token ids of an unnamed tokenizer (model {r.model!r}): name it with the ingest's engine_tokenizer "
        "option (--engine-tokenizer), else ids of another vocabulary would be trained as other text")
    all_ids = np.concatenate([np.asarray(s.token_ids, dtype=np.int64) for s in r.segments]).astype(np.int32)
    digest = content_hash({"source": r.source, "key": r.key, "reward": reward_raw(r), **status_part(r),
                           "tokenizer": tokenizer,
                           "tokens": hashlib.sha256(all_ids.tobytes()).hexdigest(),
                           "cuts": [len(s.token_ids) for s in r.segments]})
    base_id = trajectory_id(r.source, r.key, digest)
    parts = _engine_parts(r.segments)
    gaps = dict(r.fidelity_gaps)
    _check_call_count(r, len(acts), gaps)
    out = []
    for n, segs in enumerate(parts):
        tokens = np.concatenate([np.asarray(s.token_ids, dtype=np.int64) for s in segs]).astype(np.int32)
        lps = np.concatenate([np.asarray(s.logprobs, dtype=np.float32) if with_lp and s.logprobs is not None
                              else np.full(len(s.token_ids), np.nan, dtype=np.float32) for s in segs])
        spans, pos = [], 0
        for s in segs:
            k = len(s.token_ids)
            act = s.kind == "action"
            spans.append(Span(kind=s.kind, start=pos, end=pos + k, role=s.role, call_id=s.call_id,
                              cause_id=s.cause_id, tool_call_ids=s.tool_call_ids if act else None,
                              policy_version=None,
                              finish_reason=s.finish_reason if act else None,
                              temperature=s.temperature if act else None, top_p=s.top_p if act else None))
            pos += k
        meta = dict(meta0)
        meta["ingest"] = {"format": input_format, "path": r.origin.path, "line": r.origin.line}
        if len(parts) > 1:
            meta["episode"] = {"id": base_id, "part": n + 1, "parts": len(parts), "change": "engine-prompt"}
        if gaps:
            meta["fidelity_gaps"] = gaps
        traj = Trajectory(
            trajectory_id=base_id if len(parts) == 1 else f"{base_id}:part{n + 1}", prompt_id=r.prompt_id,
            source=r.source, model=r.model, tokenizer=tokenizer, created_at=created_at(r), status=r.status,
            reward=r.reward.value, reward_raw=reward_raw(r), token_source="engine",
            logprob_source="engine" if with_lp else "none", tokens=tokens, logprobs=lps, spans=spans, metadata=meta,
            not_trainable_reason=reason)
        out.append(validate_trajectory(traj))
    return out
