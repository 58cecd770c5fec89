"""Codex CLI rollout files (``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``) -> conversations.

Each line is ``{"timestamp", "type", "payload"}`` (``RolloutLine`` in ``codex-rs/protocol``):
``session_meta`` (the session's id, the CLI's version, its ``base_instructions`` in newer versions,
``forked_from_id``, and for a sub-agent its ``source``), ``response_item`` (the Responses API items
Codex sends the model: :mod:`~.codex_items`), ``turn_context`` (the turn's model and settings),
``compacted`` (a compaction: the summary, and in newer versions the ``replacement_history``) and
``event_msg`` (the CLI's events: ``token_count`` once per model call, ``task_complete``,
``turn_aborted``, errors; the rest repeat the items for the UI and are not read).

The conversation: ``base_instructions`` (when logged) as the system message, then the items in
order, each model call's output items one action. A compaction rewrote the model's context: the
first call after it was sent the replacement history (else the summary; flagged
``context_rewritten``), a new trajectory of the episode. A session forked from another
(``forked_from_id``) begins with the history it copied: the items it shares with the parent's
file beside it are the context of its first call, never its calls, and it is the ``fork`` of that
file; a sub-agent's session (``source.subagent.thread_spawn.parent_thread_id``) is a ``subagent``
of its parent's file when it is beside it (in the same day's folder; a parent elsewhere is named in
metadata only). Since any rollout may be such a parent, the rollouts of a folder are built together
once the folder is read.

Not in the file: the tool definitions Codex sent, the system prompt of versions that do not log
``base_instructions``, encrypted reasoning (flagged), a call's finish reason (the rollout keeps
none). Status: ``completed`` when the last turn completed (``task_complete``, or the session ends
on an answer), ``aborted`` when it was interrupted (``turn_aborted``) or ends mid-turn, ``failed``
on an error event. No reward.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

from trajstore.ingest.formats.codex_items import CALL_BOUNDARY, to_messages
from trajstore.ingest.formats.spec import Events, InputFormat
from trajstore.ingest.records import Context, Conversation, Message, Origin, ParsedLineage, RecordError
from trajstore.ingest.values import json_type, parse_time, text_or_none

SOURCE = "codex-cli"
LINE_TYPES = frozenset({"session_meta", "response_item", "compacted", "turn_context", "event_msg"})
END_EVENTS = {"task_complete": "completed", "turn_complete": "completed", "turn_aborted": "aborted", "error": "failed"}
"""``event_msg`` types that say how a turn ended, and the status a session ending there has."""


def is_line(d: dict[str, Any]) -> bool:
    """A rollout line: a known ``type`` and its ``payload``."""
    return d.get("type") in LINE_TYPES and "payload" in d and "timestamp" in d


def _entries(lines: list[dict[str, Any]]) -> tuple[list[tuple[int, Any]], list[tuple[int, dict[str, Any]]]]:
    """The response items (with call boundaries) by line, and the compactions by line."""
    entries: list[tuple[int, Any]] = []
    compactions = []
    for n, ln in enumerate(lines, 1):
        p = ln["payload"]
        if ln["type"] == "response_item":
            entries.append((n, p))
        elif ln["type"] == "event_msg" and isinstance(p, dict) and p.get("type") == "token_count":
            entries.append((n, CALL_BOUNDARY))
        elif ln["type"] == "compacted":
            if not isinstance(p, dict):
                raise RecordError(f"line {n}: compacted payload is {json_type(p)}, expected an object")
            compactions.append((n, p))
            entries.append((n, CALL_BOUNDARY))
    return entries, compactions


def _status(lines: list[dict[str, Any]], msgs: list[Message]) -> tuple[str, str]:
    last_item = max((n for n, ln in enumerate(lines) if ln["type"] == "response_item"), default=-1)
    ends = [(n, ln["payload"].get("type")) for n, ln in enumerate(lines) if ln["type"] == "event_msg"
            and isinstance(ln["payload"], dict) and ln["payload"].get("type") in END_EVENTS and n > last_item]
    if ends:
        return END_EVENTS[ends[-1][1]], f"the last turn ended with {ends[-1][1]}"
    end = msgs[-1] if msgs else None
    if end is not None and end.role == "assistant" and not end.tool_calls:
        return "completed", "the session ends on the model's answer"
    return "aborted", "the session ends mid-turn (a tool call or output the model never answered)"


def _sibling(path: str, thread_id: Any) -> str | None:
    """The rollout file of thread `thread_id` in the directory of `path`, when there is one."""
    tid = text_or_none(thread_id)
    if not tid:
        return None
    found = sorted(glob.glob(os.path.join(glob.escape(os.path.dirname(path)), f"rollout-*{glob.escape(tid)}.jsonl")))
    return os.path.abspath(found[0]) if found else None


def _parent_items(path: str) -> list[Any]:
    """The response item payloads of the rollout at `path` ([] when unreadable)."""
    try:
        with open(path, encoding="utf-8") as fh:
            rows = [json.loads(x) for x in fh if x.strip()]
    except (OSError, ValueError):
        return []
    return [r.get("payload") for r in rows if isinstance(r, dict) and r.get("type") == "response_item"]


def _shared(entries: list[tuple[int, Any]], parent: list[Any]) -> int:
    """How many of the fork's first items (the call boundaries aside) repeat the parent's first
    items: the history the fork copied."""
    k = 0
    items = [p for _, p in entries if p != CALL_BOUNDARY]
    while k < min(len(items), len(parent)) and items[k] == parent[k]:
        k += 1
    return k


def _context_after(msgs: list[Message], at: int, history: list[Message], change: str) -> None:
    """Give the first call from message `at` on the context it was sent: `history` (rewritten or
    copied) and the messages from `at` up to that call."""
    i = next((k for k in range(at, len(msgs)) if msgs[k].role == "assistant"), None)
    if i is not None and msgs[i].context is None:
        msgs[i].context = Context(history + msgs[at:i], None, change)


def parse_rollout(events: list[Any], origin: Origin) -> Conversation:
    """A Codex CLI rollout file (its lines, decoded): one conversation (see the module docstring).

    Raises:
        RecordError: a line that is not a rollout line, or an item that is malformed.
    """
    for n, e in enumerate(events, 1):
        if not isinstance(e, dict) or not is_line(e):
            raise RecordError(f"line {n} is not a Codex rollout line ({{timestamp, type, payload}})")
    meta_line = next((e["payload"] for e in events if e["type"] == "session_meta"), {})
    meta_line = meta_line if isinstance(meta_line, dict) else {}
    path = os.path.abspath(origin.path)
    entries, compactions = _entries(events)
    base = meta_line.get("base_instructions")
    system = text_or_none(base.get("text") if isinstance(base, dict) else base) or text_or_none(meta_line.get("instructions"))
    gaps: dict[str, str] = {}
    meta: dict[str, Any] = {"session_id": meta_line.get("id"), "cli_version": meta_line.get("cli_version"),
                            "originator": meta_line.get("originator")}
    if not system:
        gaps["system_prompt"] = ("the rollout logs no base_instructions: the system prompt the CLI sent (its built-in "
                                 "instructions) is not in the file")
    parent_file, link = None, None
    source = meta_line.get("source")
    spawn = ((source.get("subagent") or {}).get("thread_spawn") if isinstance(source, dict)
             and isinstance(source.get("subagent"), dict) else None)
    if meta_line.get("forked_from_id"):
        parent_file, link = _sibling(path, meta_line["forked_from_id"]), "fork"
        meta["forked_from_id"] = meta_line["forked_from_id"]
    elif isinstance(spawn, dict):
        parent_file, link = _sibling(path, spawn.get("parent_thread_id")), "subagent"
        meta["parent_thread_id"] = spawn.get("parent_thread_id")
    copied = _shared(entries, _parent_items(parent_file)) if link == "fork" and parent_file else 0
    if link == "fork" and not parent_file:
        gaps["forked_history"] = ("a fork whose parent rollout is not beside it: the history it copied cannot be told "
                                  "from its own calls, all stored as its calls")
    items = to_messages(entries)
    msgs = ([Message("system", system)] if system else []) + items.messages
    if copied:  # the copied history: context of the fork's first own call, never its calls
        head = to_messages([e for e in entries if e[1] != CALL_BOUNDARY][:copied]).messages
        start = (1 if system else 0) + len(head)
        _context_after(msgs, start, msgs[:start], "fork")
        msgs = msgs[:1 if system else 0] + [m for m in msgs[start:]]
        meta["copied_items"] = copied
    for n, comp in compactions:
        after = to_messages([e for e in entries if e[0] > n]).messages  # a call boundary stands at `n`
        start = len(msgs) - len(after)
        replaced = comp.get("replacement_history")
        if isinstance(replaced, list):
            ctx = to_messages([(n, p) for p in replaced]).messages
        else:
            ctx = [Message("user", str(comp.get("message") or ""))]
            gaps["context_rewritten"] = ("Codex compacted the history without logging the replacement history: the "
                                         "context after it is stored as the summary alone")
        head = [Message("system", system)] if system else []
        _context_after(msgs, start, head + ctx, "compaction")
    if items.encrypted_reasoning:
        gaps["reasoning"] = (f"{items.encrypted_reasoning} call(s) reasoned in encrypted form (encrypted_content): the "
                             "reasoning the model generated is not in the file (its summaries are in metadata)")
        meta["reasoning_summaries"] = items.reasoning_summaries
    if items.skipped:
        meta["skipped_items"] = items.skipped
    if compactions:
        meta["compactions"] = len(compactions)
    models = [e["payload"].get("model") for e in events if e["type"] == "turn_context" and isinstance(e["payload"], dict)]
    status, meta["status_evidence"] = _status(events, msgs)
    conv = Conversation(source=SOURCE, key=text_or_none(meta_line.get("id")), origin=origin, messages=msgs,
                        status=status, model=next((m for m in reversed(models) if text_or_none(m)), None),
                        created_at=parse_time(events[-1].get("timestamp")) if events else None,
                        metadata={k: v for k, v in meta.items() if v is not None}, fidelity_gaps=gaps)
    # every rollout may be a fork's or a sub-agent's parent (they name it, it names none of them)
    conv.lineage = ParsedLineage(path, parent=parent_file, link_kind=link if parent_file else None)
    return conv


CODEX_CLI = InputFormat(
    "codex-cli", "Codex CLI rollout JSONL (~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl)", SOURCE,
    events=Events(keys=("payload",), signature=is_line, parse=parse_rollout))
