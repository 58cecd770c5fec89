"""OpenHands V1 (software-agent-sdk) events -> the conversation the SDK sent the model (see
:func:`v1_events_to_messages` for each event kind), or an engine rollout when every model call
has a ``TokenEvent``. The files holding event lists are :mod:`~trajstore.ingest.formats.openhands_v1_events`'s
and :mod:`~trajstore.ingest.formats.openhands_v1_eval`'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from trajstore.adapters import token_ids_from
from trajstore.errors import AdapterError
from trajstore.ingest.formats.chat import (
    arguments_text,
    join_blocks,
    reasoning_of,
    text_of,
    tool_definitions,
    tools_without_parameters,
)
from trajstore.ingest.formats.engine_chain import EngineChain
from trajstore.ingest.formats.openhands import terminal_text
from trajstore.ingest.records import Context, Conversation, EngineRollout, Message, Origin, RecordError, ToolCall
from trajstore.ingest.values import parse_time

_IGNORED_KINDS = frozenset({
    "ConversationStateUpdateEvent", "PauseEvent", "CondensationRequest", "StreamingDeltaEvent",
    "HookExecutionEvent", "LLMCompletionLogEvent",
})
_TOOL_RESULT_KINDS = ("ObservationEvent", "AgentErrorEvent", "UserRejectObservation")
_TERMINAL_OBSERVATIONS = ("TerminalObservation", "ExecuteBashObservation")
TERMINAL_OUTPUT_CHARS = 30_000
"""The SDK truncates a terminal observation's text past this many characters (``MAX_CMD_OUTPUT_SIZE``)."""
ERROR_HEADER = "[An error occurred during execution.]\n"
"""What the SDK puts first in an observation whose ``is_error`` is true (``Observation.ERROR_MESSAGE_HEADER``)."""
OLD_TERMINAL_ERROR_HEADER = "[There was an error during command execution.]\n"
"""What ``ExecuteBashObservation`` (SDK 2025, before ``is_error``) put first when ``error`` was true."""


def _texts(content: Any) -> list[str]:
    """The text blocks of a V1 content list (one string per block; images become ``[image]``)."""
    if isinstance(content, list):
        return [text_of([b]) for b in content]
    return [text_of(content)] if content not in (None, "") else []


def observation_llm_text(ev: dict[str, Any], gaps: dict[str, str]) -> str:
    """The text the SDK sent for a tool result (``to_llm_message``), blocks joined as
    :func:`~trajstore.ingest.formats.chat.join_blocks` does.

    ObservationEvent: ``observation.to_llm_content`` (the error header when ``is_error``;
    terminal observations add ``prefix + output + suffix``, the working directory, the Python
    interpreter and the exit code) plus the event's ``extended_content``. AgentErrorEvent: the
    error. UserRejectObservation: ``Action rejected: <reason>``. Kinds whose SDK formatting is
    not reproduced (images, truncation of huge terminal output) are noted in `gaps`.
    """
    if ev["kind"] == "AgentErrorEvent":
        return str(ev.get("error", ""))
    if ev["kind"] == "UserRejectObservation":
        return "Action rejected: " + str(ev.get("rejection_reason", "User rejected the action"))
    obs = ev.get("observation")
    if not isinstance(obs, dict):
        return text_of(obs)
    blocks = [ERROR_HEADER] if obs.get("is_error") else []
    content = obs.get("content", obs.get("output", ""))
    if obs.get("kind") in _TERMINAL_OBSERVATIONS and isinstance(obs.get("metadata"), dict):
        ret = terminal_text("".join(_texts(content)), obs["metadata"])
        if "is_error" not in obs and obs.get("error") is True:  # SDK before the is_error field (2025)
            ret = OLD_TERMINAL_ERROR_HEADER + ret
        if len(ret) > TERMINAL_OUTPUT_CHARS:
            gaps.setdefault("observation_truncation", "terminal output longer than the SDK's limit: the SDK sent a "
                                                      "truncated version that is not reproduced")
        blocks.append(ret)
    else:
        blocks += _texts(content)
    if any(isinstance(b, dict) and b.get("type") in ("image", "image_url") for b in
           (content if isinstance(content, list) else [])) or obs.get("screenshot_data"):
        gaps.setdefault("images", "the model was sent images; stored as [image] placeholders")
    blocks += _texts(ev.get("extended_content"))
    return join_blocks(blocks)


def _system_text(ev: dict[str, Any]) -> str:
    sp = ev.get("system_prompt")
    blocks = _texts([sp] if isinstance(sp, dict) else sp)
    dyn = ev.get("dynamic_context")
    if isinstance(dyn, dict) and dyn.get("text"):
        blocks.append(str(dyn["text"]))
    return join_blocks(blocks)


@dataclass
class V1Events:
    """What :func:`v1_events_to_messages` read from a V1 event list.

    Attributes:
        messages: every message logged, in order (system first); calls made after a context
            change carry the :class:`~trajstore.ingest.records.Context` the SDK sent.
        tools: the tool definitions of the first system prompt (OpenAI form).
        token_ids: per model call (assistant message, by identity), the ``TokenEvent``'s
            (prompt ids, response ids); calls without one are absent.
        token_problems: why the TokenEvents cannot replace the conversation (empty = they can).
        errors: ``ConversationErrorEvent`` s as ``{"code", "detail"}``.
        gaps: fidelity gaps found (see :attr:`ParsedTrajectory.fidelity_gaps`).
        degraded, unknown_kinds, ignored, last_time, model, context_changes: bookkeeping.
    """

    messages: list[Message] = field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    token_ids: dict[int, tuple[list[int], list[int]]] = field(default_factory=dict)
    token_problems: list[str] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    gaps: dict[str, str] = field(default_factory=dict)
    degraded: int = 0
    unknown_kinds: set[str] = field(default_factory=set)
    ignored: int = 0
    last_time: Any = None
    model: str | None = None
    context_changes: list[str] = field(default_factory=list)


def v1_events_to_messages(events: list[Any]) -> V1Events:
    """Messages from V1 events as the SDK sends them to the model (``events_to_messages`` over
    the condensed ``View``).

    * SystemPromptEvent: one system message, the static prompt and ``dynamic_context`` joined;
      its ``tools`` are the tool definitions. A later SystemPromptEvent / SystemPromptUpdateEvent
      replaces both ("latest system prompt wins"): a context change for the next call.
    * MessageEvent: ``llm_message`` content plus ``extended_content``; reasoning under any
      field name (:func:`~trajstore.ingest.formats.chat.reasoning_of`).
    * ActionEvents sharing an ``llm_response_id``: one assistant message (parallel tool calls).
    * ObservationEvent / AgentErrorEvent / UserRejectObservation: a tool message answering its
      ``tool_call_id``, with the text the SDK sent (:func:`observation_llm_text`).
    * Condensation: the forgotten events leave the view and the summary is inserted at
      ``summary_offset`` as a user message: the next call gets that view as its context.
    * TokenEvent: the engine's prompt / response ids of the latest model call.
    * ConversationErrorEvent: recorded as an error (the run failed).

    Raises:
        RecordError: an event is not an object with a ``kind``.
    """
    out = V1Events()
    system: Message | None = None
    view: list[tuple[str | None, Message]] = []  # LLM-convertible items after condensation, system apart
    by_response: dict[str, Message] = {}
    pending: str | None = None
    tools: list[dict[str, Any]] | None = None
    last_call: Message | None = None

    def context() -> list[Message]:
        msgs = [system] if system is not None else []
        for _, m in view:
            if not msgs or msgs[-1] is not m:
                msgs.append(m)
        return msgs

    def add(m: Message, eid: Any) -> None:
        nonlocal pending, last_call
        if m.role == "assistant":
            if pending is not None:
                m.context = Context(context(), tools, pending)
                out.context_changes.append(pending)
                pending = None
            last_call = m
        out.messages.append(m)
        view.append((str(eid) if eid is not None else None, m))

    for i, ev in enumerate(events):
        if not isinstance(ev, dict) or not isinstance(ev.get("kind"), str):
            raise RecordError(f"event {i} has no 'kind'")
        kind = ev["kind"]
        t = parse_time(ev.get("timestamp"))
        if t is not None:
            out.last_time = t
        if kind in ("SystemPromptEvent", "SystemPromptUpdateEvent"):
            new_tools = tool_definitions(ev.get("tools"))
            text = _system_text(ev) if ev.get("system_prompt") is not None else (system.content if system else "")
            if system is None:
                system, tools, out.tools = Message("system", text, call_id=ev.get("id")), new_tools, new_tools
                out.messages.insert(0, system)
            elif text != system.content or new_tools != tools:
                system, tools = Message("system", text, call_id=ev.get("id")), new_tools
                pending = str(ev.get("reason") or "system-prompt-changed").replace("_", "-")
            missing = tools_without_parameters(new_tools)
            if missing:
                out.gaps.setdefault("tool_parameters", "tool definitions logged without their parameter schemas: "
                                    + ", ".join(missing))
        elif kind == "MessageEvent":
            lm = ev.get("llm_message") if isinstance(ev.get("llm_message"), dict) else {}
            role = lm.get("role") or ("user" if ev.get("source") == "user" else "assistant")
            if role not in ("system", "user", "assistant"):
                role = "user"
            reasoning, redacted = reasoning_of(lm) if role == "assistant" else (None, False)
            if redacted:
                out.gaps.setdefault("reasoning", "redacted (encrypted) reasoning blocks sent back to the model")
            text = join_blocks(_texts(lm.get("content")) + _texts(ev.get("extended_content")))
            cid = ev.get("llm_response_id") or ev.get("id") if role == "assistant" else ev.get("id")
            add(Message(role, text, reasoning=reasoning, call_id=cid), ev.get("id"))
        elif kind == "ActionEvent":
            tc = ev.get("tool_call") if isinstance(ev.get("tool_call"), dict) else {}
            call = ToolCall(str(tc.get("id") or ev.get("tool_call_id")), str(tc.get("name") or ev.get("tool_name")),
                            arguments_text(tc.get("arguments", json.dumps(ev.get("action") or {}))))
            rid = str(ev.get("llm_response_id") or ev.get("id") or f"event-{i}")
            if rid in by_response:
                by_response[rid].tool_calls.append(call)
                view.append((str(ev.get("id")), by_response[rid]))
            else:
                thought = join_blocks(_texts(ev.get("thought")))
                reasoning, redacted = reasoning_of(ev)
                if redacted:
                    out.gaps.setdefault("reasoning", "redacted (encrypted) reasoning blocks sent back to the model")
                if reasoning and "</think>" in thought:
                    reasoning = None  # the literal <think> text is already in the thought
                m = Message("assistant", thought, reasoning=reasoning or None, tool_calls=[call], call_id=rid)
                by_response[rid] = m
                add(m, ev.get("id"))
        elif kind in _TOOL_RESULT_KINDS:
            add(Message("tool", observation_llm_text(ev, out.gaps), call_id=ev.get("id"),
                        cause_id=str(ev.get("tool_call_id") or ev.get("action_id") or "") or None), ev.get("id"))
        elif kind == "Condensation":
            forgotten = {str(x) for x in ev.get("forgotten_event_ids") or []}
            view = [(eid, m) for eid, m in view if eid not in forgotten]
            if isinstance(ev.get("summary"), str) and isinstance(ev.get("summary_offset"), int):
                # the offset counts LLM-convertible events of the view, whose first is the system prompt
                at = max(0, ev["summary_offset"] - (1 if system is not None else 0))
                view.insert(min(at, len(view)), (f"{ev.get('id')}-summary", Message("user", ev["summary"])))
            pending = "condensation"
        elif kind == "CondensationSummaryEvent":
            view.append((str(ev.get("id")), Message("user", str(ev.get("summary", "")))))
            pending = pending or "condensation"
        elif kind == "TokenEvent":
            if last_call is None:
                out.token_problems.append(f"event {i}: a TokenEvent before any model call")
            elif id(last_call) in out.token_ids:
                out.token_problems.append(f"event {i}: a second TokenEvent for model call {last_call.call_id}")
            else:
                p, r = ev.get("prompt_token_ids"), ev.get("response_token_ids")
                if not _ids_ok(p) or not _ids_ok(r) or not p or not r:
                    out.token_problems.append(f"event {i}: TokenEvent ids are not non-empty lists of token ids")
                else:
                    out.token_ids[id(last_call)] = (list(p), list(r))
        elif kind == "ConversationErrorEvent":
            out.errors.append({"code": ev.get("code"), "detail": ev.get("detail")})
        elif kind in _IGNORED_KINDS:
            out.ignored += 1
            if kind == "ConversationStateUpdateEvent" and ev.get("key") == "stats":
                try:
                    out.model = next(iter(ev["value"]["usage_to_metrics"].values()))["model_name"]
                except (KeyError, TypeError, StopIteration):
                    pass
        else:
            out.degraded += 1
            out.unknown_kinds.add(kind)
    return out


def _ids_ok(v: Any) -> bool:
    """A list of token ids as the adapters accept them (integers in [0, 2**31): see
    :func:`trajstore.adapters.token_ids_from`)."""
    if not isinstance(v, list):
        return False
    try:
        token_ids_from(v, "TokenEvent ids")
    except AdapterError:
        return False
    return True


def _engine_rollout(conv: Conversation, ev: V1Events) -> EngineRollout:
    """The conversation's engine token ids, from one TokenEvent per model call: the first
    prompt, each response as an action, and the tokens each later prompt adds after the previous
    prompt + response as an observation (a prompt that does not extend them starts a new part)."""
    chain = EngineChain(prompt_role="system")
    for m in (m for m in conv.messages if m.role == "assistant"):
        p, r = ev.token_ids[id(m)]
        chain.add(p, r, call_id=m.call_id, tool_call_ids=[t.id for t in m.tool_calls if t.id])
    # the ids are what the model saw: no text gaps
    return EngineRollout(source=conv.source, key=conv.key, origin=conv.origin, segments=chain.segments,
                         reward=conv.reward, status=conv.status, model=conv.model, prompt_id=conv.prompt_id,
                         created_at=conv.created_at, metadata=dict(conv.metadata))


def events_conversation(events: Any, origin: Origin, *, source: str,
                        key: str | None) -> Conversation | EngineRollout:
    """A conversation from a list of V1 events; an engine rollout when every model call has a
    ``TokenEvent`` (engine ids are all-or-nothing: with any call missing or malformed, the
    conversation is re-tokenized and metadata ``engine_token_ids_discarded`` says why).

    Raises:
        RecordError: not a list, an event without ``kind``, or no message at all.
    """
    if not isinstance(events, list):
        raise RecordError(f"expected a list of events, got {type(events).__name__}")
    ev = v1_events_to_messages(events)
    if not ev.messages:
        raise RecordError(f"no conversation messages among {len(events)} events")
    meta: dict[str, Any] = {"ignored_events": ev.ignored}
    if ev.unknown_kinds:
        meta["unknown_event_kinds"] = sorted(ev.unknown_kinds)
    if ev.context_changes:
        meta["context_changes"] = ev.context_changes
    conv = Conversation(source=source, key=key, messages=ev.messages, origin=origin, created_at=ev.last_time,
                        model=ev.model, degraded_events=ev.degraded, metadata=meta, tools=ev.tools,
                        fidelity_gaps=dict(ev.gaps))
    _flag_missing_prompt(conv)
    if ev.errors:
        conv.status = "failed"
        conv.metadata["conversation_errors"] = ev.errors
    calls = [m for m in ev.messages if m.role == "assistant"]
    if ev.token_ids or ev.token_problems:
        missing = [m.call_id for m in calls if id(m) not in ev.token_ids]
        problems = ev.token_problems + ([f"{len(missing)} of {len(calls)} model calls have no TokenEvent"]
                                        if missing else [])
        if not problems:
            return _engine_rollout(conv, ev)
        conv.metadata["engine_token_ids_discarded"] = "; ".join(problems)
    return conv


def _flag_missing_prompt(conv: Conversation | EngineRollout) -> None:
    """Flag a history that holds no system prompt or no user message (eval histories filter
    them out: the model was sent them, the log does not have them)."""
    if isinstance(conv, EngineRollout):
        return  # the engine's prompt ids are what the model saw
    if not any(m.role == "system" for m in conv.messages):
        conv.fidelity_gaps.setdefault("system_prompt", "no SystemPromptEvent in the history: the system prompt "
                                                       "and tool definitions the model was sent are not logged")
    if not any(m.role == "user" for m in conv.messages):
        conv.fidelity_gaps.setdefault("prompt", "no user MessageEvent in the history: the task message the model "
                                                "was sent is not logged")
