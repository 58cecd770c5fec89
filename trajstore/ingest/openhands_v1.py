"""OpenHands V1 (software-agent-sdk) logs -> conversations: persisted events (``kind``
discriminator), V1 eval output (``output.jsonl``, ``traj_<task>.json`` + ``eval_<task>.json``),
``log_completions`` files and plain chat message lists.

Mapping: ActionEvents sharing an ``llm_response_id`` are one model call (one assistant
message with all its tool calls: parallel tool calls); ObservationEvent / AgentErrorEvent /
UserRejectObservation answer their ``tool_call_id``. State updates, pauses and condensation
events are not part of the conversation; unknown kinds are counted as degraded and skipped.
"""

from __future__ import annotations

import json
import os
from typing import Any

from trajstore.ingest.core import (
    Conversation,
    Message,
    Origin,
    RecordError,
    Reward,
    ToolCall,
    arguments_text,
    float_reward,
    parse_time,
    text_of,
    tool_calls_of,
)
from trajstore.ingest.openhands_v0 import chat_messages, status_from_error

_IGNORED_KINDS = frozenset({
    "ConversationStateUpdateEvent", "PauseEvent", "Condensation", "CondensationRequest",
    "CondensationSummaryEvent", "ConversationErrorEvent", "TokenEvent", "StreamingDeltaEvent",
    "HookExecutionEvent", "SystemPromptUpdateEvent",
})
_TOOL_RESULT_KINDS = ("ObservationEvent", "AgentErrorEvent", "UserRejectObservation")


def _observation_text(ev: dict[str, Any]) -> str:
    if ev["kind"] == "AgentErrorEvent":
        return str(ev.get("error", ""))
    if ev["kind"] == "UserRejectObservation":
        return "Action rejected by the user: " + str(ev.get("rejection_reason", ""))
    obs = ev.get("observation")
    if isinstance(obs, dict):
        return text_of(obs.get("content", obs.get("output", "")))
    return text_of(obs)


def v1_events_to_messages(events: list[Any]) -> tuple[list[Message], dict[str, Any]]:
    """Messages from V1 events; returns (messages, info) where info has ``degraded``,
    ``unknown_kinds``, ``ignored``, ``last_time`` and ``model``.

    Raises:
        RecordError: an event is not an object with a ``kind``.
    """
    msgs: list[Message] = []
    by_response: dict[str, Message] = {}
    info: dict[str, Any] = {"degraded": 0, "unknown_kinds": set(), "ignored": 0, "last_time": None, "model": None}
    for i, ev in enumerate(events):
        if not isinstance(ev, dict) or not isinstance(ev.get("kind"), str):
            raise RecordError(f"event {i} has no 'kind'")
        kind = ev["kind"]
        t = parse_time(ev.get("timestamp"))
        if t is not None:
            info["last_time"] = t
        if kind == "SystemPromptEvent":
            sp = ev.get("system_prompt")
            msgs.append(Message("system", text_of(sp.get("text") if isinstance(sp, dict) else sp), call_id=ev.get("id")))
        elif kind == "MessageEvent":
            lm = ev.get("llm_message") if isinstance(ev.get("llm_message"), dict) else {}
            role = lm.get("role") or ("user" if ev.get("source") == "user" else "assistant")
            if role not in ("system", "user", "assistant"):
                role = "user"
            reasoning = lm.get("reasoning_content") if isinstance(lm.get("reasoning_content"), str) else None
            msgs.append(Message(role, text_of(lm.get("content")), reasoning=reasoning, call_id=ev.get("id")))
        elif kind == "ActionEvent":
            tc = ev.get("tool_call") if isinstance(ev.get("tool_call"), dict) else {}
            call = ToolCall(str(tc.get("id") or ev.get("tool_call_id")), str(tc.get("name") or ev.get("tool_name")),
                            arguments_text(tc.get("arguments", json.dumps(ev.get("action") or {}))))
            rid = str(ev.get("llm_response_id") or ev.get("id") or f"event-{i}")
            if rid in by_response:
                by_response[rid].tool_calls.append(call)
            else:
                thought = text_of(ev.get("thought"))
                reasoning = ev.get("reasoning_content") if isinstance(ev.get("reasoning_content"), str) else None
                if reasoning and "</think>" in thought:
                    reasoning = None  # the literal <think> text is already in the thought
                m = Message("assistant", thought, reasoning=reasoning or None, tool_calls=[call], call_id=rid)
                by_response[rid] = m
                msgs.append(m)
        elif kind in _TOOL_RESULT_KINDS:
            msgs.append(Message("tool", _observation_text(ev), call_id=ev.get("id"),
                                cause_id=str(ev.get("tool_call_id") or ev.get("action_id") or "") or None))
        elif kind in _IGNORED_KINDS:
            info["ignored"] += 1
            if kind == "ConversationStateUpdateEvent" and ev.get("key") == "stats":
                try:
                    info["model"] = next(iter(ev["value"]["usage_to_metrics"].values()))["model_name"]
                except (KeyError, TypeError, StopIteration):
                    pass
        else:
            info["degraded"] += 1
            info["unknown_kinds"].add(kind)
    return msgs, info


def events_conversation(events: Any, origin: Origin, *, source: str, key: str | None) -> Conversation:
    """A conversation from a list of V1 events.

    Raises:
        RecordError: not a list, an event without ``kind``, or no message at all.
    """
    if not isinstance(events, list):
        raise RecordError(f"expected a list of events, got {type(events).__name__}")
    msgs, info = v1_events_to_messages(events)
    if not msgs:
        raise RecordError(f"no conversation messages among {len(events)} events")
    meta: dict[str, Any] = {"ignored_events": info["ignored"]}
    if info["unknown_kinds"]:
        meta["unknown_event_kinds"] = sorted(info["unknown_kinds"])
    return Conversation(source=source, key=key, messages=msgs, origin=origin, created_at=info["last_time"],
                        model=info["model"], degraded_events=info["degraded"], metadata=meta)


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
    r = float_reward(fs.get("result") if isinstance(fs, dict) else fs)
    return Reward(r.value, fs, error=r.error)


def parse_eval_output(row: Any, origin: Origin) -> Conversation:
    """One line of a V1 eval ``output.jsonl``. The task ``instruction`` is the user prompt when
    the history holds no user message (these histories record no MessageEvent)."""
    if not isinstance(row, dict) or "history" not in row:
        raise RecordError("V1 eval row has no 'history'")
    key = str(row["instance_id"]) if row.get("instance_id") else None
    conv = events_conversation(row["history"], origin, source="openhands/v1-eval", key=key)
    if not any(m.role == "user" for m in conv.messages) and isinstance(row.get("instruction"), str):
        sys_n = sum(1 for m in conv.messages[:1] if m.role == "system")
        conv.messages.insert(sys_n, Message("user", row["instruction"]))
    conv.reward = score_reward(row.get("test_result"))
    conv.status = status_from_error(row.get("error"))
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


def parse_task_trajectory(events: Any, origin: Origin, eval_result: Any | None, eval_path: str | None) -> Conversation:
    """A per-task ``traj_<task>.json`` with its ``eval_<task>.json`` (None when absent: no reward)."""
    key = task_of(origin.path, "traj_")
    conv = events_conversation(events, origin, source="openhands/v1-eval", key=key)
    conv.prompt_id = key
    conv.reward = score_reward(eval_result) if eval_result is not None else Reward()
    conv.metadata.update({"instance_id": key, "eval_file": eval_path})
    if conv.reward.error:
        conv.metadata["reward_error"] = conv.reward.error
    return conv


def parse_persisted_events(events: list[Any], origin: Origin) -> Conversation:
    """A persisted V1 event log (``events.jsonl``: one event per line, already decoded)."""
    return events_conversation(events, origin, source="openhands/v1-events", key=None)


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
        out.tool_calls = tool_calls_of(calls_msg.get("tool_calls"))
    msgs.append(out)
    model = resp.get("model") if isinstance(resp.get("model"), str) else None
    return Conversation(source="openhands/v1-completions", key=None, messages=msgs, origin=origin, model=model,
                        created_at=parse_time(d.get("timestamp")),
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


def parse_chat_messages(data: Any, origin: Origin) -> Conversation:
    """A bare JSON list of OpenAI chat messages (e.g. the SDK's ``*-llm-message.json``)."""
    return Conversation(source="chat-messages", key=None, messages=chat_messages(data, "messages"), origin=origin)
