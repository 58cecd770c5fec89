"""OpenHands V1 (software-agent-sdk) logs -> conversations or engine rollouts: persisted events
(``kind`` discriminator; ``events.jsonl`` or a conversation folder with ``base_state.json``),
V1 eval output (``output.jsonl``, ``traj_<task>.json`` + ``eval_<task>.json``),
``log_completions`` files and plain chat message lists.

Messages are what the SDK sent (:func:`v1_events_to_messages`): system prompt with its dynamic
context, tool definitions, user text with extended content, observations as ``to_llm_content``,
the condensed view after a ``Condensation``; ``TokenEvent`` ids, when every call has one, make
an engine rollout. State updates and pauses are not part of the conversation; unknown kinds are
counted as degraded and skipped.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from trajstore.ingest.core import (
    Context,
    Conversation,
    EngineRollout,
    EngineSegment,
    Message,
    Origin,
    RecordError,
    Reward,
    ToolCall,
    arguments_text,
    float_reward,
    join_blocks,
    parse_time,
    reasoning_of,
    terminal_text,
    text_of,
    tool_calls_of,
    tool_definitions,
    tools_without_parameters,
)
from trajstore.ingest.openhands_v0 import chat_messages, status_from_error

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
EXECUTION_STATUS = {"finished": "completed", "error": "failed", "stuck": "aborted", "paused": "aborted",
                    "waiting_for_confirmation": "aborted", "running": "aborted", "idle": "aborted",
                    "deleting": "aborted"}
"""``base_state.json`` ``execution_status`` -> stored status: only ``finished`` is completed; an error is
failed; a stuck or interrupted run is aborted."""


def _texts(content: Any) -> list[str]:
    """The text blocks of a V1 content list (one string per block; images become ``[image]``)."""
    if isinstance(content, list):
        return [text_of([b]) for b in content]
    return [text_of(content)] if content not in (None, "") else []


def observation_llm_text(ev: dict[str, Any], gaps: dict[str, str]) -> str:
    """The text the SDK sent for a tool result (``to_llm_message``), blocks joined as
    :func:`~trajstore.ingest.core.join_blocks` does.

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
            change carry the :class:`~trajstore.ingest.core.Context` the SDK sent.
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
      field name (:func:`~trajstore.ingest.core.reasoning_of`).
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
    return isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**31 for x in v)


def _engine_rollout(conv: Conversation, ev: V1Events) -> EngineRollout:
    """The conversation's engine token ids, from one TokenEvent per model call: the first
    prompt, each response as an action, and the tokens each later prompt adds after the previous
    prompt + response as an observation (a prompt that does not extend them starts a new part)."""
    segs: list[EngineSegment] = []
    seen: list[int] = []
    calls = [m for m in conv.messages if m.role == "assistant"]
    for n, m in enumerate(calls):
        p, r = ev.token_ids[id(m)]
        if n and p[:len(seen)] == seen:
            if len(p) > len(seen):
                cause = next((t.id for t in calls[n - 1].tool_calls if t.id), calls[n - 1].call_id)
                segs.append(EngineSegment("observation", p[len(seen):], role="tool", cause_id=cause))
        else:
            segs.append(EngineSegment("prompt", p, role="system"))
        segs.append(EngineSegment("action", r, None, role="assistant", call_id=m.call_id,
                                  tool_call_ids=[t.id for t in m.tool_calls if t.id] or None))
        seen = p + r
    return EngineRollout(source=conv.source, key=conv.key, origin=conv.origin, segments=segs, reward=conv.reward,
                         status=conv.status, model=conv.model, prompt_id=conv.prompt_id, created_at=conv.created_at,
                         metadata=dict(conv.metadata))  # the ids are what the model saw: no text gaps


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


def score_reward(test_result: Any) -> Reward:
    """Reward from a V1 eval ``test_result`` / ``eval_<task>.json``: ``final_score.result``
    (bool -> 1.0 / 0.0), raw = the ``final_score`` object. An evaluator crash (``error`` /
    ``traceback`` instead of a score) is no reward, with the error kept; so is a score with no
    graded checkpoints (``total = 0``)."""
    if not isinstance(test_result, dict):
        return Reward()
    if "final_score" not in test_result:
        if "error" in test_result:
            return Reward(None, None, error=str(test_result["error"]))
        return Reward()
    fs = test_result["final_score"]
    if isinstance(fs, dict) and fs.get("total") == 0 and not test_result.get("checkpoints"):
        # nothing was graded (no checkpoints, total 0): "0 of 0" is not a score of 0
        return Reward(None, fs, error="no checkpoints graded (final_score.total = 0)")
    r = float_reward(fs.get("result") if isinstance(fs, dict) else fs,
                     "final_score.result" if isinstance(fs, dict) else "final_score")
    return Reward(r.value, fs, error=r.error)


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


def _worse(a: str, b: str) -> str:
    order = ("completed", "truncated", "aborted", "failed")
    return a if order.index(a) >= order.index(b) else b


def parse_eval_output(row: Any, origin: Origin) -> Conversation | EngineRollout:
    """One line of a V1 eval ``output.jsonl``. The task ``instruction`` is the user prompt when
    the history holds no user message (these histories record no MessageEvent); flagged, as
    the SDK's exact user message (its template around the instruction) is not logged."""
    if not isinstance(row, dict) or "history" not in row:
        raise RecordError("V1 eval row has no 'history'")
    key = str(row["instance_id"]) if row.get("instance_id") else None
    conv = events_conversation(row["history"], origin, source="openhands/v1-eval", key=key)
    if isinstance(conv, Conversation) and not any(m.role == "user" for m in conv.messages) \
            and isinstance(row.get("instruction"), str):
        sys_n = sum(1 for m in conv.messages[:1] if m.role == "system")
        conv.messages.insert(sys_n, Message("user", row["instruction"]))
        conv.fidelity_gaps["prompt"] = ("no user MessageEvent in the history: the row's instruction stands in for "
                                        "the task message the model was sent")
    conv.reward = score_reward(row.get("test_result"))
    conv.status = _worse(conv.status, status_from_error(row.get("error")))
    conv.prompt_id = key
    md = row.get("metadata") if isinstance(row.get("metadata"), dict) else {}
    llm = md.get("llm") if isinstance(md.get("llm"), dict) else {}
    conv.model = llm.get("model") or conv.model
    conv.metadata.update({"instance_id": key, "error": row.get("error")})
    if conv.reward.error:
        conv.metadata["reward_error"] = conv.reward.error
    return conv


def task_of(path: str, prefix: str) -> str:
    """``traj_safety-x.json`` -> ``safety-x``."""
    return os.path.basename(path)[len(prefix):].rsplit(".", 1)[0]


def parse_task_trajectory(events: Any, origin: Origin, eval_result: Any | None,
                          eval_path: str | None) -> Conversation | EngineRollout:
    """A per-task ``traj_<task>.json`` with its ``eval_<task>.json`` (None when absent: no reward)."""
    key = task_of(origin.path, "traj_")
    conv = events_conversation(events, origin, source="openhands/v1-eval", key=key)
    conv.prompt_id = key
    conv.reward = score_reward(eval_result) if eval_result is not None else Reward()
    conv.metadata.update({"instance_id": key, "eval_file": eval_path})
    if conv.reward.error:
        conv.metadata["reward_error"] = conv.reward.error
    return conv


def parse_persisted_events(events: list[Any], origin: Origin) -> Conversation | EngineRollout:
    """A persisted V1 event log (``events.jsonl``: one event per line, already decoded)."""
    return events_conversation(events, origin, source="openhands/v1-events", key=None)


def apply_base_state(conv: Conversation | EngineRollout, state: Any) -> None:
    """Fold a conversation folder's ``base_state.json`` into its trajectory: model
    (``agent.llm.model``, else the usage metrics' ``model_name``), status from
    ``execution_status`` (:data:`EXECUTION_STATUS`; never better than what the events say) and
    the sampling settings in metadata ``llm``."""
    if not isinstance(state, dict):
        return
    agent = state.get("agent") if isinstance(state.get("agent"), dict) else {}
    llm = agent.get("llm") if isinstance(agent.get("llm"), dict) else {}
    model = llm.get("model") if isinstance(llm.get("model"), str) else None
    if model is None:
        usage = (state.get("stats") or {}).get("usage_to_metrics") if isinstance(state.get("stats"), dict) else None
        if isinstance(usage, dict):
            model = next((u.get("model_name") for u in usage.values() if isinstance(u, dict) and u.get("model_name")),
                         None)
    conv.model = model or conv.model
    es = state.get("execution_status")
    if isinstance(es, str):
        conv.status = _worse(conv.status, EXECUTION_STATUS.get(es, "aborted"))
        conv.metadata["execution_status"] = es
    conv.metadata["llm"] = {k: llm.get(k) for k in ("model", "temperature", "top_p", "max_output_tokens",
                                                    "native_tool_calling") if k in llm}
    if state.get("max_iterations") is not None:
        conv.metadata["max_iterations"] = state.get("max_iterations")
    usage = (state.get("stats") or {}).get("usage_to_metrics") if isinstance(state.get("stats"), dict) else None
    if isinstance(usage, dict) and usage:
        # the SDK records one token usage per LLM call, per LLM (the agent's and e.g. a condenser's)
        agent_usage = usage.get(llm.get("usage_id")) if llm.get("usage_id") in usage else None
        counted = [u.get("token_usages") for u in ([agent_usage] if agent_usage else usage.values())
                   if isinstance(u, dict) and isinstance(u.get("token_usages"), list)]
        if counted:
            conv.metadata["harness_model_calls"] = sum(len(c) for c in counted)


def parse_completion_log(d: Any, origin: Origin) -> Conversation:
    """One V1 ``log_completions`` file: the request ``messages`` and the ``response``.

    Prompt-based tool calling (``raw_response`` present): ``messages`` are what the model saw
    and ``raw_response`` is its literal text, so both are used verbatim; tool-call ids come
    from the index-aligned ``raw_messages`` / ``response``.
    """
    if not isinstance(d, dict) or "messages" not in d or "response" not in d:
        raise RecordError("completion log needs 'messages' and 'response'")
    msgs = chat_messages(d["messages"], "messages")
    prompt_based = isinstance(d.get("raw_response"), dict)
    resp = d["raw_response"] if prompt_based else d["response"]
    try:
        choice = resp["choices"][0]
        rmsg = choice["message"]
        calls_msg = d["response"]["choices"][0]["message"]  # holds the parsed tool calls (see below)
        if not isinstance(rmsg, dict) or not isinstance(calls_msg, dict):
            raise TypeError("the message is not an object")
    except (KeyError, IndexError, TypeError) as e:
        raise RecordError(f"response has no choices[0].message ({e})") from None
    out = chat_messages([{**rmsg, "role": "assistant"}], "response.choices[0].message")[0]
    out.finish_reason = choice.get("finish_reason")
    out.call_id = resp.get("id")
    if prompt_based:
        raw = d.get("raw_messages")
        if isinstance(raw, list) and len(raw) == len(msgs):
            linked = chat_messages(raw, "raw_messages")
            for m, r in zip(msgs, linked):
                if m.role == "assistant" and r.tool_calls:
                    m.tool_calls, m.tool_calls_in_content = r.tool_calls, True
                elif r.role == "tool":
                    m.cause_id = r.cause_id
        # raw_response stops before the tool-call text (stop word ``</function``): the parsed
        # calls of ``response`` are rendered after it
        out.tool_calls = tool_calls_of(calls_msg.get("tool_calls"), "response.choices[0].message.tool_calls")
    msgs.append(out)
    model = resp.get("model") if isinstance(resp.get("model"), str) else None
    # prompt-based tool calling: the SDK already wrote the tools into the system message of `messages`
    tools = None if prompt_based else tool_definitions(d.get("tools"))
    return Conversation(source="openhands/v1-completions", key=None, messages=msgs, origin=origin, model=model,
                        created_at=parse_time(d.get("timestamp")), tools=tools,
                        metadata={"tool_calling": "prompt-based" if prompt_based else "native",
                                  "latency_sec": d.get("latency_sec"), "cost": d.get("cost")})


def drop_superseded(convs: list[Conversation]) -> tuple[list[Conversation], list[Conversation]]:
    """Completion logs of one conversation repeat it call after call; keep only the logs whose
    conversation is not the start of another log's conversation in the same directory.

    Returns:
        (kept, superseded).
    """
    def sig(c: Conversation) -> list[tuple[str, str]]:
        return [(m.role, m.content) for m in c.messages]

    def extends(longer: list[tuple[str, str]], s: list[tuple[str, str]]) -> bool:
        # the last (logged) response may lack the tool-call text the next request carries
        if len(longer) <= len(s) or longer[:len(s) - 1] != s[:-1]:
            return False
        (role, text), (role2, text2) = s[-1], longer[len(s) - 1]
        return role == role2 and text2.startswith(text)

    by_dir: dict[str, list[Conversation]] = {}
    for c in convs:
        by_dir.setdefault(os.path.dirname(c.origin.path), []).append(c)
    kept, gone = [], []
    for group in by_dir.values():
        sigs = [sig(c) for c in group]
        for i, c in enumerate(group):
            if any(j != i and extends(o, sigs[i]) for j, o in enumerate(sigs)):
                gone.append(c)
            else:
                kept.append(c)
    return kept, gone

