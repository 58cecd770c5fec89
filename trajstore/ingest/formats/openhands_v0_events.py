"""OpenHands V0 (``openhands/`` package, 2024-2025) event lists -> conversations.

Shapes handled: ``event_to_dict`` event lists (saved trajectories, GUI exports, the
``sessions/<id>/events/<n>.json`` store with its ``metadata.json``, flat eval histories), the
older ``[action, observation]`` pair history, resolver output (``dataclasses.asdict`` events
without ids) and the 2024 feedback rows (websocket messages mixed in); the rows around those
histories are :mod:`~trajstore.ingest.formats.openhands_v0_eval`'s and
:mod:`~trajstore.ingest.formats.openhands_v0_feedback`'s.

Mapping: agent actions with ``tool_call_metadata`` become one assistant message per model
response (``model_response.id``), with that response's text and all its tool calls; their
observations become ``tool`` messages answering the ``tool_call_id``. Actions without it
(prompt-based CodeAct) become assistant text in CodeAct's own tags (``<execute_bash>`` ...),
their observations ``user`` messages linked by the event's ``cause``. Unknown action kinds
are rendered as their JSON arguments and counted as degraded; websocket status/error
messages, agent-state changes and null observations are not part of the conversation. The
``system`` action's ``tools`` are the tool definitions; ``run`` results get CodeAct's command
metadata; what the log cannot reproduce is named in ``fidelity_gaps``. A response's reasoning
(``reasoning_content`` ...) is stored with its action but not in later calls' contexts: V0's
``ConversationMemory`` sends an earlier response back as its content and tool calls only.
A ``condensation`` action (a condenser's ``CondensationAction``) rewrites what later calls are
sent (V0 ``View.from_events``: forgotten events left out, the latest summary inserted at its
``summary_offset`` as a user message): the next call is given that view as its context, so it
starts a linked lineage of the episode (``context_rewrite``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

from trajstore.ingest.formats.chat import (
    drop_sent_back_reasoning,
    reasoning_of,
    text_of,
    tool_calls_of,
    tool_definitions,
)
from trajstore.ingest.formats.openhands import metadata_file, read_conversation_folder, terminal_text
from trajstore.ingest.formats.spec import Events, InputFormat, NoTrajectory
from trajstore.ingest.records import Context, Conversation, Message, Origin, Parsed, RecordError, ToolCall
from trajstore.ingest.values import json_type, order_by_id, parse_time

EVENTS_SOURCE = "openhands/v0-events"
SESSION_SOURCE = "openhands/v0-session"

KNOWN_ACTIONS = frozenset({
    "message", "system", "run", "run_ipython", "read", "write", "edit", "browse", "browse_interactive",
    "think", "finish", "reject", "delegate", "recall", "mcp", "condensation", "change_agent_state",
    "initialize", "null", "start", "add_task", "modify_task", "summarize", "push", "send_pr",
})
_IGNORED_ACTIONS = frozenset({"change_agent_state", "initialize", "recall", "null", "start", "condensation"})
_IGNORED_OBSERVATIONS = frozenset({"agent_state_changed", "null", "user_rejected"})
_STATE_EVENTS = frozenset({"agent_state_changed", "change_agent_state", "null"})
"""Event kinds the V0 controller keeps out of the agent's history (they take no place in a condenser's view)."""
_CODEACT_TAGS = {"run": ("execute_bash", "command"), "run_ipython": ("execute_ipython", "code"),
                 "browse_interactive": ("execute_browse", "browser_actions")}
_VERBATIM_OBSERVATIONS = frozenset({"run_ipython", "read", "message", "error", "think", "finish", "browse",
                                    "mcp", "chat"})
"""Observation kinds CodeAct sends as their logged content. ``run`` observations add the command
metadata (reproduced from ``extras.metadata`` when logged, else flagged); others (file edits'
diffs, ...) are flagged ``observation_format``."""


class _Builder:
    """Turns V0 events (in order) into messages, linking observations by ids."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.by_response: dict[str, Message] = {}
        self.action_ids: list[str] = []  # assistant call ids not yet answered (for id-less formats)
        self.degraded = 0
        self.unknown_kinds: set[str] = set()
        self.ignored = 0
        self.last_time = None
        self.model: str | None = None
        self.tools: list[dict[str, Any]] | None = None
        self.gaps: dict[str, str] = {}
        # the condenser's view (V0 ``View.from_events``): per event of the agent's history, its id
        # and the message it became (None: no message); ids forgotten; the latest summary
        self.view: list[tuple[str, Message | None]] = []
        self.forgotten: set[str] = set()
        self.summary: tuple[str, int | None] | None = None
        self.condensed = False  # a condensation since the last model call: the next call gets the view
        self.condensations = 0

    def add(self, ev: Any, idx: int) -> None:
        if not isinstance(ev, dict):
            raise RecordError(f"event {idx} is a {type(ev).__name__}, not an object")
        t = parse_time(ev.get("timestamp"))
        if t is not None:
            self.last_time = t
        for k in ("action", "observation"):
            if ev.get(k) is not None and not isinstance(ev[k], str):
                raise RecordError(f"event {idx}: {k} is {json_type(ev[k])}, expected the {k}'s kind (a string)")
        before = len(self.messages)
        if "action" in ev and ev["action"] is not None:
            self._action(ev, idx)
        elif "observation" in ev and ev["observation"] is not None:
            self._observation(ev, idx)
        else:  # websocket status / error messages of the 2024 GUI
            self.ignored += 1
            return
        if ev.get("action") in _STATE_EVENTS or ev.get("observation") in _STATE_EVENTS:
            return  # the controller keeps these out of the agent's history
        new = self.messages[before] if len(self.messages) > before else None
        if new is None and isinstance(ev.get("tool_call_metadata"), dict) and ev.get("action"):
            resp = ev["tool_call_metadata"].get("model_response")
            new = self.by_response.get(str(resp.get("id"))) if isinstance(resp, dict) else None
        self.view.append((self._event_id(ev, idx), new))

    def _condensation(self, args: dict[str, Any]) -> None:
        """A ``CondensationAction``: its forgotten events leave the view, and the latest summary
        goes in at ``summary_offset`` (an index into the kept events) as a user message
        (``AgentCondensationObservation``); the next model call is sent that view."""
        ids = args.get("forgotten_event_ids")
        lo, hi = args.get("forgotten_events_start_id"), args.get("forgotten_events_end_id")
        if isinstance(ids, list):
            self.forgotten.update(str(x) for x in ids)
        elif isinstance(lo, int) and isinstance(hi, int):
            self.forgotten.update(str(x) for x in range(lo, hi + 1))
        if isinstance(args.get("summary"), str):
            off = args.get("summary_offset")
            self.summary = (args["summary"], off if isinstance(off, int) else None)
        self.condensed = True
        self.condensations += 1

    def _view_messages(self) -> list[Message]:
        kept: list[Message | None] = [m for eid, m in self.view if eid not in self.forgotten]
        if self.summary is not None:
            text, off = self.summary
            kept.insert(len(kept) if off is None else min(off, len(kept)), Message("user", text))
        out: list[Message] = []
        for m in kept:
            if m is not None and not any(x is m for x in out):
                out.append(m)
        # ConversationMemory sends an earlier response back without its reasoning
        return [dataclasses.replace(m, reasoning=None) if m.role == "assistant" and m.reasoning else m for m in out]

    def _call(self, m: Message) -> None:
        """Append a model call: given the condensed view as its context after a condensation."""
        if self.condensed:
            m.context = Context(self._view_messages(), self.tools, "condensation")
            self.condensed = False
        self.messages.append(m)

    def _event_id(self, ev: dict[str, Any], idx: int) -> str:
        return str(ev["id"]) if ev.get("id") is not None else f"event-{idx}"

    def _action(self, ev: dict[str, Any], idx: int) -> None:
        kind = ev["action"]
        if not isinstance(kind, str):
            raise RecordError(f"event {idx}: 'action' is {type(kind).__name__}, not a string")
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {
            k: v for k, v in ev.items() if k not in ("action", "id", "timestamp", "source", "message", "cause")}
        source = ev.get("source")
        if source is None:  # resolver dumps carry no source: the first message is the task
            source = "user" if kind == "message" and not any(m.role == "assistant" for m in self.messages) else "agent"
        if kind in _IGNORED_ACTIONS:
            self.ignored += 1
            if kind == "condensation":
                self._condensation(args)
            return
        if kind == "system":
            self.messages.append(Message("system", text_of(args.get("content", ev.get("message"))),
                                         call_id=self._event_id(ev, idx)))
            self.tools = tool_definitions(args.get("tools")) or self.tools
            return
        if kind == "message" and source == "user":
            self.messages.append(Message("user", text_of(args.get("content", ev.get("message"))),
                                         call_id=self._event_id(ev, idx)))
            return
        if source not in ("agent", None):  # environment-issued actions are not model calls
            self.ignored += 1
            return
        if kind not in KNOWN_ACTIONS:
            self.degraded += 1
            self.unknown_kinds.add(kind)
        tcm = ev.get("tool_call_metadata")
        if isinstance(tcm, dict) and tcm.get("tool_call_id"):
            self._tool_call_action(ev, idx, tcm, args)
            return
        eid = self._event_id(ev, idx)
        if kind not in ("message", "finish", "think", "reject"):
            self.gaps.setdefault("action_text", "prompt-based CodeAct actions are logged as parsed arguments: their "
                                                "text is rebuilt in CodeAct's tags, not the model's literal output")
        self._call(Message("assistant", self._codeact_text(kind, args, ev), call_id=eid))
        self.action_ids.append(eid)
        llm = ev.get("llm_metrics")
        if isinstance(llm, dict) and isinstance(llm.get("model_name"), str):
            self.model = self.model or llm["model_name"]

    def _tool_call_action(self, ev: dict[str, Any], idx: int, tcm: dict[str, Any], args: dict[str, Any]) -> None:
        resp = tcm.get("model_response") if isinstance(tcm.get("model_response"), dict) else {}
        rid = str(resp.get("id") or f"response-of-{self._event_id(ev, idx)}")
        if rid in self.by_response:
            return  # a later tool call of a response already turned into one assistant message
        choice = (resp.get("choices") or [{}])[0] if isinstance(resp.get("choices"), list) else {}
        msg = choice.get("message") if isinstance(choice, dict) and isinstance(choice.get("message"), dict) else {}
        calls = tool_calls_of(msg.get("tool_calls"), f"event {self._event_id(ev, idx)}: "
                              "tool_call_metadata.model_response.choices[0].message.tool_calls")
        if not calls:  # response not logged: rebuild the call from the action itself
            calls = [ToolCall(str(tcm["tool_call_id"]), str(tcm.get("function_name") or ev["action"]),
                              json.dumps({k: v for k, v in args.items() if k != "thought"}, ensure_ascii=False))]
        content = text_of(msg.get("content")) if msg else str(args.get("thought") or "")
        reasoning, redacted = reasoning_of(msg) if msg else (None, False)
        if redacted:
            self.gaps.setdefault("reasoning", "redacted (encrypted) reasoning blocks sent back to the model")
        m = Message("assistant", content, reasoning=reasoning, tool_calls=calls, call_id=rid,
                    finish_reason=choice.get("finish_reason") if isinstance(choice, dict) else None)
        self.by_response[rid] = m
        self._call(m)
        if isinstance(resp.get("model"), str):
            self.model = self.model or resp["model"]

    @staticmethod
    def _codeact_text(kind: str, args: dict[str, Any], ev: dict[str, Any]) -> str:
        thought = str(args.get("thought") or "")
        if kind in ("message", "finish", "think", "reject"):
            body = str(args.get("content") or args.get("final_thought") or ev.get("message") or "")
            return "\n\n".join(dict.fromkeys(p for p in (thought, body) if p))
        if kind in _CODEACT_TAGS:
            tag, field = _CODEACT_TAGS[kind]
            code = str(args.get(field, ""))
            return (thought + "\n" if thought else "") + f"<{tag}>\n{code}\n</{tag}>"
        rest = {k: v for k, v in args.items() if k != "thought"}
        return (thought + "\n" if thought else "") + json.dumps({"action": kind, "args": rest}, ensure_ascii=False,
                                                                 default=str)

    def _observation(self, ev: dict[str, Any], idx: int) -> None:
        kind = ev["observation"]
        if kind in _IGNORED_OBSERVATIONS:
            self.ignored += 1
            return
        content = ev.get("content")
        text = text_of(content if content is not None else ev.get("message"))
        extras = ev.get("extras") if isinstance(ev.get("extras"), dict) else {}
        if kind == "run" and isinstance(extras.get("metadata"), dict):
            text = terminal_text(text, extras["metadata"])  # CmdOutputObservation.to_agent_observation
        elif kind == "run" or kind not in _VERBATIM_OBSERVATIONS:
            self.gaps.setdefault("observation_format", f"{kind!r} observations are stored as logged; CodeAct's "
                                 "formatting of them for the model is version-specific and not reproduced")
        tcm = ev.get("tool_call_metadata")
        if isinstance(tcm, dict) and tcm.get("tool_call_id"):
            self.messages.append(Message("tool", text, call_id=self._event_id(ev, idx),
                                         cause_id=str(tcm["tool_call_id"])))
            return
        cause = ev.get("cause")
        if cause is not None:
            cause_id = str(cause)
            if cause_id in self.action_ids:
                self.action_ids.remove(cause_id)
        elif self.action_ids:  # id-less formats (resolver): answers the oldest unanswered action
            cause_id = self.action_ids.pop(0)
        else:
            cause_id = None
        self.messages.append(Message("user", text, call_id=self._event_id(ev, idx), cause_id=cause_id))


def events_to_conversation(events: list[Any], *, source: str, key: str | None, origin: Origin) -> Conversation:
    """Build a conversation from a list of V0 events (flat dicts or ``[action, observation]`` pairs).

    Raises:
        RecordError: the list is not a list of events, or holds no conversation message.
    """
    if not isinstance(events, list):
        raise RecordError(f"history is a {type(events).__name__}, not a list of events")
    events, reordered = order_by_id(events)
    b = _Builder()
    for i, ev in enumerate(events):
        if isinstance(ev, list) and len(ev) == 2:  # older eval outputs: [action, observation] pairs
            for part in ev:
                if isinstance(part, dict) and part:
                    b.add(part, i)
        else:
            b.add(ev, i)
    if not any(m.role in ("assistant", "user") for m in b.messages):
        raise RecordError(f"no conversation messages among {len(events)} events")
    meta: dict[str, Any] = {"ignored_events": b.ignored}
    if b.condensations:
        meta["condensations"] = b.condensations
    if reordered:
        meta["reordered_events"] = reordered
    if b.unknown_kinds:
        meta["unknown_event_kinds"] = sorted(b.unknown_kinds)
    gaps = dict(b.gaps)
    if not any(m.role == "system" for m in b.messages):
        gaps["system_prompt"] = ("no system action in the log: the system prompt (and tool definitions) CodeAct "
                                 "sent is not logged")
    elif b.tools is None and any(m.tool_calls for m in b.messages):
        gaps["tools"] = "the model called tools but no tool definitions are logged (the system action has no tools)"
    if drop_sent_back_reasoning(b.messages, b.tools):
        meta["reasoning_sent_back"] = False  # each later call's context lacks the earlier responses' reasoning
    return Conversation(source=source, key=key, messages=b.messages, origin=origin, model=b.model,
                        created_at=b.last_time, metadata=meta, degraded_events=b.degraded,
                        status="completed", tools=b.tools, fidelity_gaps=gaps)


def parse_event_list(data: Any, origin: Origin, *, source: str = EVENTS_SOURCE,
                     key: str | None = None) -> Conversation:
    """A saved trajectory / GUI export / session store: a JSON array of V0 events."""
    return events_to_conversation(data, source=source, key=key, origin=origin)


def _is_event(d: dict[str, Any]) -> bool:
    """A V0 event: an ``action`` or ``observation`` name and no V1 ``kind``."""
    return ("action" in d or "observation" in d) and not isinstance(d.get("kind"), str)


def _session_conversation(events: list[Any], origin: Origin, key: str) -> Conversation:
    return events_to_conversation(events, source=SESSION_SOURCE, key=key, origin=origin)


def read_session_folder(events: list[Any], events_dir: str) -> Iterator[Parsed]:
    """A session store's ``sessions/<id>/events/`` folder: one conversation, with ``metadata.json``."""
    return read_conversation_folder(events, events_dir, _session_conversation)


V0_EVENTS = InputFormat(
    "openhands-v0-events", "OpenHands V0 event list: saved trajectory, GUI export, events/ store", EVENTS_SOURCE,
    events=Events(keys=("action", "observation"), signature=_is_event, parse=parse_event_list, folder=read_session_folder))
V0_SESSION = InputFormat(
    "openhands-v0-session", "OpenHands V0 sessions/<id>/events/<n>.json", SESSION_SOURCE,
    events=Events(folder=read_session_folder, reads_any_folder=True), no_trajectory=NoTrajectory(("conversation_id",), metadata_file))
