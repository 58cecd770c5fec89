"""Claude Code session files (``~/.claude/projects/<project>/<session>.jsonl``) -> conversations.

Each line is one record (``type``): ``user`` and ``assistant`` lines hold the chat (see
:mod:`~.claude_code_lines`), linked into a tree by ``uuid`` / ``parentUuid``; ``system`` lines are
Claude Code's own (a ``compact_boundary`` marks a compaction); ``summary`` lines are session
titles (``leafUuid``: the leaf they name), kept in metadata; ``file-history-snapshot``,
``queue-operation``, ``progress`` and the like hold no message. Lines are read as the tree says:

* **the session** is the path from the root to the leaf written last (the conversation Claude Code
  resumes), through compactions (a ``compact_boundary`` has no ``parentUuid``; its
  ``logicalParentUuid`` names the line before it). Lines off that path that hold no model call
  (a tool result parented beside its call) stay in it, in file order.
* **a compaction** rewrote the model's context: the first call after the boundary was sent the
  messages after it (the compact summary Claude Code wrote as a user message, then what followed)
  instead of the history: given as that call's context (change ``compaction``), so it starts a new
  trajectory of the episode, linked ``context_rewrite``.
* **a branch** the user made by rewinding (another leaf whose branch holds a model call) is its
  own record, the ``fork`` of the session at the last line they share: the lines before that are
  its context, its own calls its actions.
* **sub-agents** (the Task tool): lines with ``isSidechain`` in the session file are one record
  per sidechain, a ``subagent`` of the session; newer Claude Code writes each sub-agent to its own
  file (``agent-<id>.jsonl`` beside the session, or ``<session>/subagents/agent-<id>.jsonl``): such
  a file is the ``subagent`` of its session's file, which names it by the ``agentId`` of the Task
  call's result.

Not in the file: the system prompt and the tool definitions Claude Code sent (flagged
``system_prompt``; the tools are None), and how it rendered ``attachment`` lines (reminders,
skill listings) into the context (counted, flagged). Finish reasons from Anthropic's
``stop_reason`` (``max_tokens`` is ``length``). Status: ``completed`` when the session ends on a
model's final answer, ``aborted`` when the user interrupted it or it ends mid-turn, ``failed`` when
it ends on an API error. No reward.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from trajstore.ingest.formats.claude_code_lines import SYNTHETIC_MODEL, convert, interrupted
from trajstore.ingest.formats.spec import Events, InputFormat
from trajstore.ingest.records import Context, Conversation, Message, Origin, ParsedLineage, RecordError
from trajstore.ingest.values import parse_time, text_or_none

SOURCE = "claude-code"
LINE_TYPES = frozenset({"user", "assistant", "system", "summary", "file-history-snapshot", "queue-operation",
                        "progress", "attachment", "custom-title", "agent-name", "tag", "last-prompt", "pr-link"})
"""The ``type`` s of Claude Code session lines."""
MESSAGE_TYPES = ("user", "assistant")


def is_line(d: dict[str, Any]) -> bool:
    """A Claude Code session line: a known ``type``, no Codex-style ``payload``, and the session's
    ids (``sessionId`` / ``uuid``; a title's ``leafUuid``; a snapshot's ``messageId``)."""
    return (d.get("type") in LINE_TYPES and "payload" not in d
            and any(k in d for k in ("sessionId", "uuid", "leafUuid", "messageId")))


def _parent(line: dict[str, Any]) -> str | None:
    """The line before `line` in its conversation (a compaction's boundary: the line it compacted after)."""
    return text_or_none(line.get("parentUuid")) or text_or_none(line.get("logicalParentUuid"))


def _is_boundary(line: dict[str, Any]) -> bool:
    return line.get("type") == "system" and line.get("subtype") == "compact_boundary"


class _Tree:
    """The lines of one conversation (the session's, or one sidechain's) by uuid."""

    def __init__(self, lines: list[dict[str, Any]]):
        self.lines = lines
        self.order = {ln["uuid"]: n for n, ln in enumerate(lines)}
        self.by_id = {ln["uuid"]: ln for ln in lines}
        self.children: dict[str | None, list[str]] = {}
        for ln in lines:
            p = _parent(ln)
            self.children.setdefault(p if p in self.by_id else None, []).append(ln["uuid"])

    def path(self, leaf: str) -> list[str]:
        """The uuids from the root to `leaf`."""
        out, seen, at = [], set(), leaf
        while at is not None and at in self.by_id and at not in seen:
            seen.add(at)
            out.append(at)
            at = _parent(self.by_id[at])
        return out[::-1]

    def subtree(self, root: str) -> list[str]:
        out, todo = [], [root]
        while todo:
            n = todo.pop()
            out.append(n)
            todo += self.children.get(n, [])
        return out


def _split(tree: _Tree) -> tuple[list[str], list[tuple[str, str]]]:
    """The session's lines (uuids in file order) and its branches: (leaf, the last line the
    branch shares with the session) for each other leaf whose branch holds a model call."""
    msgs = [u for u in tree.order if tree.by_id[u]["type"] in MESSAGE_TYPES]
    if not msgs:
        return [], []
    main = tree.path(msgs[-1])
    on_main = set(main)
    keep, branches = set(main), []
    for u in main:
        for c in tree.children.get(u, []):
            if c in on_main:
                continue
            side = tree.subtree(c)
            if any(tree.by_id[x]["type"] == "assistant" for x in side):
                leaves = [x for x in side if not tree.children.get(x) and tree.by_id[x]["type"] in MESSAGE_TYPES]
                branches += [(leaf, u) for leaf in sorted(leaves, key=tree.order.get)]
            else:
                keep.update(side)  # a tool result or note written beside its call: part of the session
    return sorted(keep, key=tree.order.get), branches


def _chat(tree: _Tree, ids: list[str], shared: int | None = None) -> tuple[list[Message], dict[str, Any]]:
    """The chat of the lines `ids` (in order): a compaction's later lines are the context of the
    first call after its boundary; with `shared` (a branch), the lines up to that index are the
    context of the branch's first call and only its later messages are its own. Returns the
    messages and what the conversion left out (metadata)."""
    body = [i for i, u in enumerate(ids) if tree.by_id[u]["type"] in MESSAGE_TYPES]
    conv = convert([tree.by_id[ids[i]] for i in body])
    at = [body[j] for j in conv.line_of]  # each message's line, as an index in `ids`
    cuts = [i for i, u in enumerate(ids) if _is_boundary(tree.by_id[u])]
    starts = [(c, "compaction") for c in cuts] + ([(shared, "fork")] if shared is not None else [])
    for start, change in sorted(starts):
        i = next((j for j, m in enumerate(conv.messages) if at[j] > start and m.role == "assistant"), None)
        if i is None or conv.messages[i].context is not None:
            continue
        base = start if change == "compaction" else max((c for c in cuts if c < start), default=-1)
        conv.messages[i].context = Context([m for m, a in zip(conv.messages[:i], at[:i]) if a > base], None, change)
    msgs = [m for m, a in zip(conv.messages, at) if shared is None or a > shared]
    left = {"synthetic_messages": conv.synthetic, "redacted_thinking": conv.redacted_thinking,
            "unrendered_blocks": conv.other_blocks or None, "compactions": len(cuts),
            "models": sorted({m for m in conv.models if m and m != SYNTHETIC_MODEL})}
    calls = Counter(m for m in conv.models if m and m != SYNTHETIC_MODEL).most_common(1)
    left["model"] = calls[0][0] if calls else None
    return msgs, {k: v for k, v in left.items() if v}


def _status(msgs: list[Message], lines: list[dict[str, Any]]) -> tuple[str, str]:
    """(status, evidence) of a conversation from how it ends."""
    last = next((ln for ln in reversed(lines) if ln.get("type") in MESSAGE_TYPES), {})
    if last.get("type") == "assistant" and (last.get("isApiErrorMessage") or
                                            (last.get("message") or {}).get("model") == SYNTHETIC_MODEL):
        return "failed", "the session ends on an API error Claude Code logged"
    end = msgs[-1] if msgs else None
    if end is not None and interrupted(end):
        return "aborted", "the user interrupted the last call"
    if end is not None and end.role == "assistant" and not end.tool_calls:
        return "completed", "the session ends on the model's final answer"
    return "aborted", "the session ends mid-turn (a tool call or result the model never answered)"


def _sibling_session(path: str, session: str | None) -> str | None:
    """The session file a sub-agent file at `path` belongs to (``<dir>/<session>.jsonl`` beside it,
    or above its ``<session>/subagents/`` folder), when it exists."""
    if not session:
        return None
    d = os.path.dirname(path)
    for cand in (os.path.join(d, f"{session}.jsonl"),
                 os.path.join(os.path.dirname(os.path.dirname(d)), f"{session}.jsonl")):
        if os.path.isfile(cand) and os.path.abspath(cand) != path:
            return cand
    return None


def _agent_files(path: str, session: str | None, lines: list[dict[str, Any]]) -> list[str]:
    """The sub-agent files the session at `path` names (the ``agentId`` of its Task calls'
    results), those that exist: ``agent-<id>.jsonl`` beside it or in ``<session>/subagents/``."""
    d = os.path.dirname(path)
    out = []
    for ln in lines:
        result = ln.get("toolUseResult") if isinstance(ln.get("toolUseResult"), dict) else {}
        aid = text_or_none(result.get("agentId")) or (text_or_none(ln.get("agentId")) if not ln.get("isSidechain") else None)
        if not aid:
            continue
        for cand in (os.path.join(d, f"agent-{aid}.jsonl"), os.path.join(d, session or "", "subagents", f"agent-{aid}.jsonl")):
            if os.path.isfile(cand) and cand not in out:
                out.append(os.path.abspath(cand))
    return out


def _record(msgs: list[Message], left: dict[str, Any], lines: list[dict[str, Any]], origin: Origin,
            key: str | None, meta: dict[str, Any]) -> Conversation:
    status, evidence = _status(msgs, lines)
    meta = {**meta, **left, "status_evidence": evidence}
    gaps = {"system_prompt": "Claude Code sessions do not log the system prompt (nor the tool definitions) the CLI sent"}
    attachments = sum(1 for ln in lines if ln.get("type") == "attachment")
    if attachments:
        meta["attachments"] = attachments
        gaps["attachments"] = (f"{attachments} attachment line(s) (reminders, skill listings, file states) were rendered "
                               "by Claude Code into the model's context in a form the session does not log: not stored")
    if left.get("redacted_thinking"):
        gaps["reasoning"] = f"{left['redacted_thinking']} call(s) with redacted thinking: reasoning the log cannot show"
    times = [parse_time(ln.get("timestamp")) for ln in lines if ln.get("timestamp")]
    model = meta.pop("model", None)
    return Conversation(source=SOURCE, key=key, origin=origin, messages=msgs, status=status,
                        model=model, created_at=max((t for t in times if t), default=None),
                        metadata=meta, fidelity_gaps=gaps)


def _sessions(events: list[Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """(main-chain lines, sidechain lines, metadata: titles, skipped line kinds) of a session file."""
    main, side, skipped = [], [], {}
    titles = []
    for n, e in enumerate(events, 1):
        if not isinstance(e, dict):
            raise RecordError(f"line {n} is not an object")
        kind = e.get("type")
        if kind == "summary":
            titles.append({"summary": e.get("summary"), "leafUuid": e.get("leafUuid")})
        elif text_or_none(e.get("uuid")) and kind in ("user", "assistant", "system", "attachment", "progress"):
            (side if e.get("isSidechain") else main).append(e)
        else:
            skipped[str(kind)] = skipped.get(str(kind), 0) + 1
    return main, side, {"titles": titles, "skipped_lines": skipped}


def parse_session(events: list[Any], origin: Origin) -> list[Conversation]:
    """A Claude Code session file (its lines, decoded): the session, its branches and its
    in-file sidechains, each a conversation; a sub-agent's own file is the sub-agent's
    conversation (see the module docstring).

    Raises:
        RecordError: a line that is not an object, a message line without its message, or a file
            with no user or assistant line.
    """
    main, side, extra = _sessions(events)
    path = os.path.abspath(origin.path)
    is_agent_file = not main and bool(side)
    lines = side if is_agent_file else main
    session = next((text_or_none(ln.get("sessionId")) for ln in lines if ln.get("sessionId")), None)
    if not any(ln["type"] in MESSAGE_TYPES for ln in lines):
        raise RecordError("no user or assistant line: no conversation in the session file")
    own_ids = {ln["uuid"] for ln in lines}
    titles = [t for t in extra.pop("titles") if t["leafUuid"] in own_ids]
    meta: dict[str, Any] = {"session_id": session, **({"titles": titles} if titles else {}),
                            **({k: v for k, v in extra.items() if v})}
    versions = sorted({str(ln["version"]) for ln in lines if ln.get("version")})
    if versions:
        meta["claude_code_version"] = versions
    agent = next((text_or_none(ln.get("agentId")) for ln in lines if ln.get("agentId")), None) if is_agent_file else None
    tree = _Tree(lines)
    ids, branches = _split(tree)
    key = f"{session}/agent-{agent}" if agent else session
    msgs, left = _chat(tree, ids)
    records = [_record(msgs, left, [tree.by_id[u] for u in ids], origin, key, meta)]
    lineage_claims: list[tuple[str, str]] = [(f, "subagent") for f in _agent_files(path, session, main)]
    for leaf, point in branches:
        b_ids = tree.path(leaf)
        b_msgs, b_left = _chat(tree, b_ids, shared=b_ids.index(point))
        rec = _record(b_msgs, b_left, [tree.by_id[u] for u in b_ids], origin, f"{key}/fork-{leaf}",
                      {**meta, "branch_leaf": leaf})
        rec.lineage = ParsedLineage(f"{path}#fork:{leaf}", parent=path, link_kind="fork")
        records.append(rec)
    if not is_agent_file and side:
        for root in _Tree(side).children.get(None, []):
            s_tree = _Tree(side)
            s_ids = sorted(s_tree.subtree(root), key=s_tree.order.get)
            s_msgs, s_left = _chat(s_tree, s_ids)
            if not s_msgs:
                continue
            rec = _record(s_msgs, s_left, [s_tree.by_id[u] for u in s_ids], origin, f"{key}/sidechain-{root}",
                          {**meta, "sidechain_root": root})
            rec.lineage = ParsedLineage(f"{path}#sidechain:{root}", parent=path, link_kind="subagent")
            records.append(rec)
    parent = _sibling_session(path, session) if is_agent_file else None
    if len(records) > 1 or lineage_claims or is_agent_file:
        records[0].lineage = ParsedLineage(path, parent=parent, link_kind="subagent" if parent else None,
                                           claims=lineage_claims)
    if is_agent_file:
        records[0].metadata["agent_id"] = agent
    return records


CLAUDE_CODE = InputFormat(
    "claude-code", "Claude Code session JSONL (~/.claude/projects/<project>/<session>.jsonl, sub-agent files)",
    SOURCE, events=Events(keys=("sessionId", "uuid", "leafUuid", "messageId"), signature=is_line,
                          parse=parse_session))
