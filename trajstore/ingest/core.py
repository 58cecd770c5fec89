"""Format-neutral records the per-format parsers produce: a chat :class:`Conversation` (text
only, tokenized later with a chat template) or an :class:`EngineRollout` (token ids and
log-probs kept exactly as the engine returned them), plus :class:`Problem` reports that
name the file, line and reason for anything that could not be read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

import numpy as np

Role = Literal["system", "user", "assistant", "tool"]
ProblemKind = Literal["malformed", "no_trajectory", "invalid", "unsupported"]

DEFAULT_MAX_OBSERVATION_CHARS = 200_000
"""Observation text longer than this (characters) is capped at ingest (multi-MB browser trees)."""

TRUNCATION_MARKER = "\n[... trajstore ingest: {dropped} of {total} characters truncated ...]\n"
"""Inserted where an observation was cut; ``{dropped}`` and ``{total}`` are character counts."""


@dataclass
class ToolCall:
    """One tool call of a model response: `id` (the harness's tool_call_id), function `name`
    and `arguments` as the JSON text the model produced."""

    id: str | None
    name: str
    arguments: str


@dataclass
class Message:
    """One chat message of a conversation in harness-neutral form.

    Attributes:
        role: system | user | assistant | tool.
        content: visible text (tool calls and reasoning are separate).
        reasoning: the model's reasoning text (``reasoning_content`` / ``<think>``), if logged apart.
        tool_calls: calls issued by an assistant message (one response may hold several).
        call_id: assistant: id of the model call (response id or event id); others: event id.
        cause_id: observation: id of the tool call / action event it answers (None = unknown).
        finish_reason: assistant: the engine finish reason, when logged.
        truncated: set by :func:`cap_text` when the content was capped at ingest.
        original_chars: length of the content before capping (characters).
        tool_calls_in_content: the calls are already in `content` (prompt-based tool calling):
            they are recorded for linking but not rendered again.
    """

    role: Role
    content: str
    reasoning: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    call_id: str | None = None
    cause_id: str | None = None
    finish_reason: str | None = None
    truncated: bool = False
    original_chars: int | None = None
    tool_calls_in_content: bool = False
    """True when the tool calls are already written in `content` (prompt-based tool calling)."""

    def canonical(self) -> dict[str, Any]:
        """The content-bearing fields, for hashing (ids of calls included, ingest flags not)."""
        return {"role": self.role, "content": self.content, "reasoning": self.reasoning,
                "tool_calls": [[t.id, t.name, t.arguments] for t in self.tool_calls],
                "cause_id": self.cause_id}


@dataclass
class Reward:
    """A reward as logged: `value` (float or None = no reward), the `raw` JSON-able value, and
    `error` when the evaluator crashed (then value is None: a crash is not a score)."""

    value: float | None = None
    raw: Any = None
    error: str | None = None


@dataclass
class Origin:
    """Where a record came from: `path` and 1-based `line` (JSONL line or array index + 1)."""

    path: str
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}" if self.line is not None else self.path


@dataclass(kw_only=True)
class ParsedTrajectory:
    """What every parsed trajectory carries, whatever its token source.

    Attributes:
        source: harness and format, e.g. ``openhands/v0-eval`` (stored in ``source``).
        key: instance / conversation id used in the trajectory id (None = use the origin).
        origin: the file (and line) it was read from.
        reward: see :class:`Reward`.
        status: completed | truncated | aborted | failed.
        model: model name from the log, when known.
        prompt_id: stored in ``prompt_id`` (None = unknown).
        created_at: time of the last logged event (UTC), when known.
        metadata: stored in the trajectory's free-form metadata.
    """

    source: str
    key: str | None
    origin: Origin
    reward: Reward = field(default_factory=Reward)
    status: str = "completed"
    model: str | None = None
    prompt_id: str | None = None
    created_at: datetime | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True)
class Conversation(ParsedTrajectory):
    """A text-only trajectory: messages to be rendered with a chat template.

    Attributes:
        messages: the chat in order.
        degraded_events: events of unknown kind rendered generically (see parsers).
    """

    messages: list[Message]
    degraded_events: int = 0


@dataclass
class EngineSegment:
    """A piece of an engine rollout: `kind` prompt | action | observation, its token ids
    (int, shape (n,)) and, for actions, per-token log-probs (nats, shape (n,))."""

    kind: Literal["prompt", "action", "observation"]
    token_ids: list[int]
    logprobs: list[float] | None = None
    role: str | None = None
    call_id: str | None = None
    cause_id: str | None = None
    finish_reason: str | None = None
    temperature: float | None = None
    top_p: float | None = None


@dataclass(kw_only=True)
class EngineRollout(ParsedTrajectory):
    """A trajectory whose token ids and log-probs come from the rollout engine; stored exactly,
    never re-tokenized.

    Attributes:
        segments: the token pieces in order (see :class:`EngineSegment`).
    """

    segments: list[EngineSegment]


@dataclass(frozen=True)
class Problem:
    """Something in the input that was not ingested: where, what kind, and why."""

    origin: Origin
    kind: ProblemKind
    reason: str

    def __str__(self) -> str:
        return f"{self.origin}: {self.kind}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.origin.path, "line": self.origin.line, "kind": self.kind, "reason": self.reason}


Parsed = Conversation | EngineRollout | Problem


class RecordError(ValueError):
    """A record (row, event list) is malformed; the message says which field and why."""


# -- helpers shared by the parsers ---------------------------------------------------------

def text_of(content: Any) -> str:
    """Plain text of a chat ``content``: a string, or a list of parts (``{"type": "text",
    "text": ...}``); non-text parts (images) become ``[image]``; None is ``""``."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for p in content:
            if isinstance(p, str):
                out.append(p)
            elif isinstance(p, dict):
                if isinstance(p.get("text"), str):
                    out.append(p["text"])
                elif p.get("type") in ("image_url", "image", "input_image"):
                    out.append("[image]")
        return "".join(out)
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        return content["text"]
    return json.dumps(content, ensure_ascii=False, default=str)


def arguments_text(args: Any) -> str:
    """Tool-call arguments as JSON text (strings are kept verbatim, as the model wrote them)."""
    if isinstance(args, str):
        return args
    return json.dumps(args, ensure_ascii=False, default=str)


def tool_calls_of(raw: Any) -> list[ToolCall]:
    """The ``tool_calls`` list of an OpenAI chat message (``{"id", "function": {"name",
    "arguments"}}`` items) as :class:`ToolCall` s; non-object items are skipped, a missing id is None."""
    out = []
    for c in raw or []:
        if isinstance(c, dict):
            fn = c.get("function") or {}
            out.append(ToolCall(str(c["id"]) if c.get("id") else None, str(fn.get("name")),
                                arguments_text(fn.get("arguments", ""))))
    return out


def cap_text(msg: Message, max_chars: int | None) -> Message:
    """Cap an observation's content at `max_chars` characters, keeping its head and tail around
    a visible :data:`TRUNCATION_MARKER`; sets ``truncated`` and ``original_chars``."""
    if max_chars is None or len(msg.content) <= max_chars:
        return msg
    total = len(msg.content)
    head = max_chars * 3 // 4
    tail = max_chars - head
    dropped = total - head - tail
    msg.content = (msg.content[:head] + TRUNCATION_MARKER.format(dropped=dropped, total=total)
                   + (msg.content[-tail:] if tail else ""))
    msg.truncated = True
    msg.original_chars = total
    return msg


def parse_time(v: Any) -> datetime | None:
    """A UTC datetime from an ISO string or a POSIX time in seconds; None when absent or unparsable."""
    try:
        if isinstance(v, bool) or v is None:
            return None
        if isinstance(v, (int, float)):
            return datetime.fromtimestamp(float(v), tz=timezone.utc)
        if isinstance(v, str) and v:
            d = datetime.fromisoformat(v.replace("Z", "+00:00"))
            return d.replace(tzinfo=timezone.utc) if d.tzinfo is None else d.astimezone(timezone.utc)
    except (ValueError, OverflowError, OSError):
        return None
    return None


def bool_reward(v: Any) -> Reward:
    """A boolean-ish outcome (True/False, 1/0) as reward 1.0 / 0.0; other types are no reward."""
    if isinstance(v, bool):
        return Reward(1.0 if v else 0.0, v)
    if isinstance(v, (int, float)) and v in (0, 1):
        return Reward(float(v), v)
    if v is None:
        return Reward()
    return Reward(None, v, error=f"unrecognised outcome value {v!r}")


def float_reward(v: Any) -> Reward:
    """A numeric reward (bool counts as 1.0 / 0.0); None or a non-number is no reward."""
    if isinstance(v, bool):
        return Reward(1.0 if v else 0.0, v)
    if isinstance(v, (int, float)) and np.isfinite(v):
        return Reward(float(v), v)
    if v is None:
        return Reward()
    return Reward(None, v, error=f"reward {v!r} is not a finite number")


_SLUG = re.compile(r"[^A-Za-z0-9._=+-]+")


def slug(s: str, max_chars: int = 80) -> str:
    """`s` reduced to characters safe in a trajectory id (others become ``-``)."""
    out = _SLUG.sub("-", s).strip("-.")
    return out[:max_chars] or "x"
