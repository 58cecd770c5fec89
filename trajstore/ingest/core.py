"""Format-neutral records the per-format parsers produce: a chat :class:`Conversation` (text
only, tokenized later with a chat template) or an :class:`EngineRollout` (token ids and
log-probs kept exactly as the engine returned them), plus :class:`Problem` reports that
name the file, line and reason for anything that could not be read.
"""

from __future__ import annotations

import json
import math
import re
import sys
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
        context: assistant: what the harness actually sent for this call, when it is not
            "everything logged before it" (a condenser or history processor rewrote the history,
            the tool list changed); None = the previous call's context plus everything logged
            since (see :class:`Context`).
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
    context: Context | None = None

    def canonical(self) -> dict[str, Any]:
        """The content-bearing fields, for hashing (ids of calls included, ingest flags not)."""
        return {"role": self.role, "content": self.content, "reasoning": self.reasoning,
                "tool_calls": [[t.id, t.name, t.arguments] for t in self.tool_calls],
                "cause_id": self.cause_id}


@dataclass
class Context:
    """The messages (and tools) a harness sent for one model call, when they differ from the
    calls before it: e.g. after an OpenHands ``Condensation`` or under a SWE-agent history
    processor. A stored trajectory never claims a context the model did not see, so a call
    whose context does not extend the previous call's is rendered as the start of a new
    trajectory (:mod:`trajstore.ingest.render`).

    Attributes:
        messages: the messages before the call, in the order sent.
        tools: the tool definitions sent with the call (OpenAI ``{"type": "function",
            "function": {...}}`` form); None = none.
        change: why this context differs, stored in the split trajectories' metadata
            (``condensation``, ``history-processor``, ``tools-changed``, ...).
    """

    messages: list[Message]
    tools: list[dict[str, Any]] | None
    change: str


@dataclass
class Reward:
    """A reward as logged: `value` (float or None = no reward), the `raw` JSON-able value,
    `error` when the evaluator crashed (then value is None: a crash is not a score) and the
    input `field` it was read from (``resolved``, ``score``, ...; for error messages)."""

    value: float | None = None
    raw: Any = None
    error: str | None = None
    field: str | None = None


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
        fidelity_gaps: what the stored trajectory cannot reproduce of what the model was sent
            or generated, as ``{flag: one-line reason}`` (e.g. ``"tool_parameters"``); stored
            under metadata ``fidelity_gaps``, counted in the ingest summary and by
            ``traj stats --coverage``. Empty = reconstructed as the harness sent it.
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
    fidelity_gaps: dict[str, str] = field(default_factory=dict)


@dataclass(kw_only=True)
class Conversation(ParsedTrajectory):
    """A text-only trajectory: messages to be rendered with a chat template.

    Attributes:
        messages: the chat in order (every model call is one assistant message).
        tools: the tool definitions the model was given, OpenAI form (``{"type": "function",
            "function": {"name", "description", "parameters"}}``); None = none logged. Rendered
            as ``tools=`` where the template reads them, else as plain text in the system
            message (:func:`trajstore.chat_template.tools_system_text`).
        degraded_events: events of unknown kind rendered generically (see parsers).
    """

    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    degraded_events: int = 0


@dataclass
class EngineSegment:
    """A piece of an engine rollout: `kind` prompt | action | observation, its token ids
    (int, shape (n,)) and, for actions, per-token log-probs (nats, shape (n,); None = the
    engine logged none). A prompt segment after an action starts a new context: the call's
    prompt did not extend what came before (see :class:`EngineRollout`)."""

    kind: Literal["prompt", "action", "observation"]
    token_ids: list[int]
    logprobs: list[float] | None = None
    role: str | None = None
    call_id: str | None = None
    cause_id: str | None = None
    finish_reason: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    tool_call_ids: list[str] | None = None


@dataclass(kw_only=True)
class EngineRollout(ParsedTrajectory):
    """A trajectory whose token ids (and log-probs, when logged) come from the rollout engine;
    stored exactly, never re-tokenized.

    Attributes:
        segments: the token pieces in order (see :class:`EngineSegment`); every prompt segment
            after the first starts a new trajectory of the same episode (the model's context
            was rewritten there).
        tokenizer: the tokenizer the ids belong to, when the log names it (None: the ingest's
            ``engine_tokenizer`` option, else stored as not trainable: ids of an unknown
            vocabulary would be trained as other text).
    """

    segments: list[EngineSegment]
    tokenizer: str | None = None


@dataclass
class TextSegment:
    """A piece of an already-rendered text rollout: `kind` prompt | action | observation and its
    exact text (special tokens of the chat template included when the log kept them)."""

    kind: Literal["prompt", "action", "observation"]
    text: str
    role: str | None = None


@dataclass(kw_only=True)
class TextRollout(ParsedTrajectory):
    """A trajectory logged as the very text the model was given and produced (an RL framework's
    rollout dump: prompt already formatted by the chat template, then the completion). Each
    segment is tokenized as it is, with no chat template (``token_source = retokenized``).

    Attributes:
        segments: the text pieces in order (see :class:`TextSegment`).
    """

    segments: list[TextSegment]


@dataclass(frozen=True)
class Problem:
    """Something in the input that was not ingested: where, what kind, and why."""

    origin: Origin
    kind: ProblemKind
    reason: str

    def __post_init__(self) -> None:  # one line, whatever produced the reason
        if "\n" in self.reason or "\r" in self.reason:
            object.__setattr__(self, "reason", " ".join(s.strip() for s in self.reason.splitlines() if s.strip()))

    def __str__(self) -> str:
        return f"{self.origin}: {self.kind}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.origin.path, "line": self.origin.line, "kind": self.kind, "reason": self.reason}


Parsed = Conversation | EngineRollout | TextRollout | Problem


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


def join_blocks(texts: list[str]) -> str:
    """Several text blocks of one message (e.g. a V1 system prompt and its dynamic context) as
    one string: joined by a newline, none added after a block that already ends with one
    (the harnesses' string serializers join blocks with ``"\n"``; an error header that ends
    in a newline is not followed by a blank line)."""
    out = ""
    for i, t in enumerate(texts):
        if i and not out.endswith("\n"):
            out += "\n"
        out += t
    return out


def reasoning_of(d: dict[str, Any]) -> tuple[str | None, bool]:
    """The reasoning text an assistant message carries, under any common field name.

    Looks at ``reasoning_content`` (OpenAI-compatible servers, LiteLLM), ``reasoning``
    (a string, or an object with ``content`` / ``text`` / ``summary``), ``thinking_blocks``
    (Anthropic: ``{"type": "thinking", "thinking": ...}`` blocks, joined by newlines) and
    ``thinking``, in that order; the first non-empty one wins.

    Returns:
        (text or None, redacted): `redacted` is True when there were ``redacted_thinking``
        blocks (encrypted reasoning the model saw but the log cannot show).
    """
    redacted = False
    rc = d.get("reasoning_content")
    if isinstance(rc, str) and rc:
        return rc, False
    r = d.get("reasoning")
    if isinstance(r, dict):
        r = r.get("content") or r.get("text") or r.get("summary")
    if isinstance(r, list):
        r = "\n".join(text_of(x.get("text") if isinstance(x, dict) else x) for x in r) or None
    if isinstance(r, str) and r:
        return r, False
    blocks = d.get("thinking_blocks")
    if isinstance(blocks, list) and blocks:
        texts = []
        for b in blocks:
            if isinstance(b, dict) and b.get("type") == "redacted_thinking":
                redacted = True
            elif isinstance(b, dict) and isinstance(b.get("thinking"), str) and b["thinking"]:
                texts.append(b["thinking"])
        if texts:
            return "\n".join(texts), redacted
    th = d.get("thinking")
    if isinstance(th, str) and th:
        return th, redacted
    return None, redacted


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])|(?<=[A-Z])([A-Z][a-z])", r"_\1\2", name).lower()


def tool_definitions(raw: Any) -> list[dict[str, Any]] | None:
    """Tool definitions as sent to the model, in OpenAI form ``{"type": "function", "function":
    {"name", "description", "parameters"}}``.

    Accepts OpenAI chat tools (``{"type": "function", "function": {...}}``), Responses-API /
    flat tools (``{"type": "function", "name", "description", "parameters"}``, Anthropic's
    ``input_schema``) and OpenHands V1 ``ToolDefinition`` dumps (no ``name``: the SDK names a
    tool after its class, ``TerminalTool`` -> ``terminal``; else ``title``). Keys a model never
    sees (``kind``, ``annotations``, ``action_type``, ...) are dropped; ``parameters`` is kept
    only when logged. None for an empty or missing list.
    """
    if not isinstance(raw, list) or not raw:
        return None
    out = []
    for t in raw:
        if not isinstance(t, dict):
            continue
        fn = t["function"] if isinstance(t.get("function"), dict) else t
        name = fn.get("name")
        if not name and isinstance(fn.get("kind"), str) and fn["kind"].endswith("Tool"):
            name = _snake(fn["kind"][:-len("Tool")])
        name = name or fn.get("title")
        d: dict[str, Any] = {"name": str(name)}
        if isinstance(fn.get("description"), str):
            d["description"] = fn["description"]
        params = fn.get("parameters", fn.get("input_schema"))
        if isinstance(params, dict):
            d["parameters"] = params
        out.append({"type": "function", "function": d})
    return out or None


def tools_without_parameters(tools: list[dict[str, Any]] | None) -> list[str]:
    """Names of the tools in `tools` whose parameter schema was not logged."""
    return [t["function"]["name"] for t in tools or [] if "parameters" not in t["function"]]


def terminal_text(output: str, md: dict[str, Any]) -> str:
    """A shell command's observation as OpenHands sends it (V0 ``CmdOutputObservation.
    to_agent_observation``, V1 ``TerminalObservation.to_llm_content``): ``prefix + output +
    suffix``, then the working directory, the Python interpreter and the exit code (unless it
    is -1) on lines of their own, each when logged in the observation's `md` metadata."""
    ret = f"{md.get('prefix') or ''}{output}{md.get('suffix') or ''}"
    if md.get("working_dir"):
        ret += f"\n[Current working directory: {md['working_dir']}]"
    if md.get("py_interpreter_path"):
        ret += f"\n[Python interpreter: {md['py_interpreter_path']}]"
    exit_code = md.get("exit_code", -1)
    if exit_code is not None and exit_code != -1:
        ret += f"\n[Command finished with exit code {exit_code}]"
    return ret


@dataclass(frozen=True)
class HugeInt:
    """Stands in for a JSON integer with more digits than Python converts
    (``sys.get_int_max_str_digits()``, 4300 by default), so the rest of a document can be read
    and the record holding it refused with the field's name."""

    digits: int


def _huge_int_limit() -> int:
    return sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 0


def _parse_int(s: str) -> int | HugeInt:
    limit = _huge_int_limit()
    n = len(s) - s.startswith("-")
    return HugeInt(n) if limit and n > limit else int(s)


def is_int_limit(e: ValueError) -> bool:
    return "integer string conversion" in str(e)


def find_huge_int(v: Any, where: str = "") -> tuple[str, int] | None:
    """(field path, digits) of the first :class:`HugeInt` in `v` (``messages[2].content``,
    ``reward``; ``""`` when `v` is one), or None."""
    if isinstance(v, HugeInt):
        return where, v.digits
    if isinstance(v, dict):
        for k, x in v.items():
            if isinstance(x, (dict, list, HugeInt)):
                hit = find_huge_int(x, f"{where}.{k}" if where else str(k))
                if hit:
                    return hit
    elif isinstance(v, list):
        for i, x in enumerate(v):
            if isinstance(x, (dict, list, HugeInt)):
                hit = find_huge_int(x, f"{where}[{i}]")
                if hit:
                    return hit
    return None


def huge_int_reason(hit: tuple[str, int]) -> str:
    """The one-line reason for a record refused because of :func:`find_huge_int`'s `hit`."""
    where, digits = hit
    return (f"field {where or '(the whole value)'} is an integer of {digits} digits: too large for any field "
            f"(numbers are read up to {_huge_int_limit()} digits)")


def loads_with_huge_ints(text: str) -> Any:
    """``json.loads`` with :class:`HugeInt` stand-ins for integers too long to convert (slower:
    used only once the fast parse has met one)."""
    try:
        return json.loads(text, parse_int=_parse_int)
    except RecursionError:
        raise ValueError("JSON nested too deeply to parse") from None


def json_field(value: Any, field: str) -> Any:
    """A field that datasets store either as JSON or as a JSON-encoded string (Hugging Face rows
    often keep the chat as a string): a string is decoded, anything else returned as is.

    Raises:
        RecordError: the string is not valid JSON.
    """
    if isinstance(value, str):
        try:
            return json.loads(value)
        except RecursionError:
            raise RecordError(f"{field} is a string of JSON nested too deeply to parse") from None
        except ValueError as e:
            if is_int_limit(e) and not isinstance(e, json.JSONDecodeError):
                hit = find_huge_int(loads_with_huge_ints(value))
                if hit:
                    sep = "" if hit[0].startswith("[") or not hit[0] else "."
                    raise RecordError(huge_int_reason((f"{field}{sep}{hit[0]}", hit[1]))) from None
            raise RecordError(f"{field} is a string that is not JSON ({e})") from None
    return value


def arguments_text(args: Any) -> str:
    """Tool-call arguments as JSON text (strings are kept verbatim, as the model wrote them)."""
    if isinstance(args, str):
        return args
    return json.dumps(args, ensure_ascii=False, default=str)


def json_type(v: Any) -> str:
    """What `v` is, in JSON words with a short excerpt, for error messages: ``a string ('ls -la')``,
    ``an object (keys: name, arguments)``, ``a number (3)``, ``null``."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"a boolean ({str(v).lower()})"
    if isinstance(v, str):
        return f"a string ({_clip_value(v)})"
    if isinstance(v, dict):
        keys = ", ".join(map(str, list(v)[:5])) + (", ..." if len(v) > 5 else "")
        return f"an object (keys: {keys})" if v else "an empty object"
    if isinstance(v, (int, float)):
        return f"a number ({_clip_value(v)})"
    if isinstance(v, (list, tuple)):
        return f"a list of {len(v)}"
    return f"a {type(v).__name__}"


def tool_calls_of(raw: Any, where: str = "tool_calls") -> list[ToolCall]:
    """The ``tool_calls`` list of an OpenAI chat message (``{"id", "function": {"name",
    "arguments"}}`` items) as :class:`ToolCall` s; a missing id is None, an empty object (some
    prompt-based logs write ``[{}]``) holds no call.

    Raises:
        RecordError: `raw` is not a list, an item is not an object, or its ``function`` is not an
            object with a ``name`` (naming the item: ``tool_calls[0].function is a str``).
    """
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise RecordError(f"{where} is {json_type(raw)}, expected a list of tool calls "
                          '({"id", "function": {"name", "arguments"}} objects)')
    out = []
    for i, c in enumerate(raw):
        if not isinstance(c, dict):
            raise RecordError(f"{where}[{i}] is {json_type(c)}, expected a tool call object "
                              '({"id", "function": {"name", "arguments"}})')
        if not c:
            continue
        fn = c.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            what = json_type(fn) if not isinstance(fn, dict) else "an object without a string 'name'"
            raise RecordError(f"{where}[{i}].function is {what}, expected an object with a name and arguments")
        out.append(ToolCall(str(c["id"]) if c.get("id") else None, fn["name"],
                            arguments_text(fn.get("arguments", ""))))
    return out


def order_by_id(items: list[Any], *, key: str = "id", what: str = "event") -> tuple[list[Any], int]:
    """`items` in the order of their integer `key` when every object item carries one (OpenHands
    V0 event ids, ATIF ``step_id``): a log written or merged out of order is read in the order
    it happened. Items of other shapes (id-less events, ``[action, observation]`` pairs) are
    returned unchanged. An exact repeat of an item is dropped.

    Returns:
        (ordered items, number of items that were out of order or repeated).

    Raises:
        RecordError: two different items share an id (the order cannot be known).
    """
    ids = [it.get(key) if isinstance(it, dict) else None for it in items]
    if not items or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return items, 0
    first: dict[int, int] = {}
    keep: list[int] = []
    for n, i in enumerate(ids):
        if i in first:
            if items[first[i]] != items[n]:
                raise RecordError(f"{what}s {first[i]} and {n} share {key} {i} with different content: "
                                  "their order cannot be known")
            continue
        first[i] = n
        keep.append(n)
    ordered = sorted(keep, key=lambda n: ids[n])
    moved = len(items) - len(keep) + sum(1 for a, b in zip(ordered, keep) if a != b)
    return [items[n] for n in ordered], moved


def cap_text(msg: Message, max_chars: int | None) -> Message:
    """Cap an observation's content at `max_chars` characters, keeping its head and tail around
    a visible :data:`TRUNCATION_MARKER`; sets ``truncated`` and ``original_chars``."""
    if max_chars is None or len(msg.content) <= max_chars or msg.truncated:  # capped once only
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


TRUE_SPELLINGS: frozenset[str] = frozenset({"true", "1", "yes"})
FALSE_SPELLINGS: frozenset[str] = frozenset({"false", "0", "no"})
"""String spellings of an outcome (compared lower-cased, stripped): SWE-smith / SWE-agent rows and
CSV-derived datasets write ``resolved: "true"``."""


def _clip_value(v: Any, n: int = 40) -> str:
    """`v` as a short repr for an error line (a huge integer is described, never converted)."""
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 200:
        try:
            return f"an integer of {len(str(abs(v)))} digits"
        except ValueError:  # more digits than Python converts
            return f"an integer of more than {sys.get_int_max_str_digits()} digits"
    r = repr(v)
    return r if len(r) <= n else r[:n] + "..."


def bool_reward(v: Any, field: str = "resolved") -> Reward:
    """A boolean-ish outcome as reward 1.0 / 0.0: True/False, 1/0, or the strings of
    :data:`TRUE_SPELLINGS` / :data:`FALSE_SPELLINGS` (the raw value is kept as logged);
    None or an empty string is no reward.

    Args:
        v: the logged value.
        field: its name in the input (``resolved``, ``target``, ...), for the error.

    Raises:
        RecordError: any other value (``resolved is 'maybe': expected true/false or 1/0``):
            never stored as a silent null reward.
    """
    if isinstance(v, bool):
        return Reward(1.0 if v else 0.0, v, field=field)
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v in (0, 1):
        return Reward(float(v), v, field=field)
    if v is None or (isinstance(v, str) and not v.strip()):
        return Reward(None, v or None, field=field)
    if isinstance(v, str) and v.strip().lower() in TRUE_SPELLINGS | FALSE_SPELLINGS:
        return Reward(1.0 if v.strip().lower() in TRUE_SPELLINGS else 0.0, v, field=field)
    raise RecordError(f"{field} is {_clip_value(v)}: expected true/false or 1/0")


def float_reward(v: Any, field: str = "reward") -> Reward:
    """A numeric reward: a finite number, a bool (1.0 / 0.0), or a string holding either
    (``"0.5"``, ``"true"``; the raw value is kept as logged); None or an empty string is no
    reward.

    Args:
        v: the logged value.
        field: its name in the input (``reward``, ``score``, ...), for the error.

    Raises:
        RecordError: NaN, an infinity, a number too large for a float, or a value that is not
            a number (``score is 'n/a': expected a finite number``): never a silent null.
    """
    if isinstance(v, bool):
        return Reward(1.0 if v else 0.0, v, field=field)
    if v is None or (isinstance(v, str) and not v.strip()):
        return Reward(None, v or None, field=field)
    x: float | None = None
    if isinstance(v, (int, float)):
        try:
            x = float(v)
        except OverflowError:
            raise RecordError(f"{field} is {_clip_value(v)}: too large for a reward (a finite number)") from None
    elif isinstance(v, str):
        s = v.strip().lower()
        if s in ("true", "false"):
            return Reward(1.0 if s == "true" else 0.0, v, field=field)
        try:
            x = float(s)
        except ValueError:
            raise RecordError(f"{field} is {_clip_value(v)}: expected a finite number") from None
    else:
        raise RecordError(f"{field} is a {type(v).__name__} ({_clip_value(v)}): expected a finite number")
    if not math.isfinite(x):
        raise RecordError(f"{field} is {_clip_value(v)}: expected a finite number")
    return Reward(x, v, field=field)


_SLUG = re.compile(r"[^A-Za-z0-9._=+-]+")


def slug(s: str, max_chars: int = 80) -> str:
    """`s` reduced to characters safe in a trajectory id (others become ``-``)."""
    out = _SLUG.sub("-", s).strip("-.")
    return out[:max_chars] or "x"
