"""Format-neutral records the parsers produce: a chat :class:`Conversation` (tokenized later with a
chat template), an :class:`EngineRollout` (the engine's ids and log-probs, kept exactly), a
:class:`TextRollout` (already-rendered text), a :class:`StoredRow` (a row of a trajectory Parquet
file written elsewhere, stored as it is) or a :class:`Problem` (file, line and reason).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from trajstore.models import CallTiming, CallUsage, Trajectory

Role = Literal["system", "user", "assistant", "tool"]
ProblemKind = Literal["malformed", "no_trajectory", "invalid", "unsupported"]


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
        truncated: set by :func:`~trajstore.ingest.builders.conversation.cap_text` when the content was capped at ingest.
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
    trajectory (:mod:`trajstore.ingest.builders.render`).

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


@dataclass
class ParsedLineage:
    """Where a parsed record sits in an episode whose lineages are logged as several records
    (files, or parts of one file): linked by the ingest once the records of one directory are
    read (:mod:`~trajstore.ingest.builders.trees`), parents built and stored before their children.

    Attributes:
        key: this record's name in the ingest (``<file path>`` for a file's first record,
            ``<file path>#<n>`` for its n-th, from 1).
        parent: key of the record this one continues or branches from (None: see `claims`).
        link_kind: how it relates to `parent` (:data:`trajstore.schema.LINK_KINDS`).
        claims: ``(key, link_kind)`` of records this one names as its children (a Harbor main
            trajectory names its sub-agents' files and its continuation file); a record that names
            its own `parent` keeps it.
    """

    key: str
    parent: str | None = None
    link_kind: str | None = None
    claims: list[tuple[str, str]] = field(default_factory=list)


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
        lineage: its place among linked records (None: a record on its own; its split parts
            are still linked to each other).
        read_files: files read for this record beside `origin` (Harbor's ``verifier/reward.txt``
            holding the reward); a directory walk does not count them as ignored.
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
    lineage: ParsedLineage | None = None
    read_files: tuple[str, ...] = ()


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
        tools_in_text: the tool definitions are written in the messages' text (prompt-based
            tool calling), so `tools` is None though the model was given them.
    """

    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    degraded_events: int = 0
    tools_in_text: bool = False


@dataclass
class EngineSegment:
    """A piece of an engine rollout: `kind` prompt | action | observation, its token ids
    (int, shape (n,)) and, for actions, per-token log-probs (nats, shape (n,); None = the
    engine logged none). A prompt segment after an action starts a new context: the call's
    prompt did not extend what came before (see :class:`EngineRollout`). An action's
    ``policy_version`` (and ``policy_version_max`` for a call of several versions) is set only
    by a log that records it (a trajstore ATIF export); None = unknown. The other sampling fields
(``top_k``, ``min_p``, ``max_tokens``, ``sampling_params`` as JSON) and an observation's
``truncated`` flag are those of :class:`~trajstore.models.Span`, set by a log that keeps them. ``usage``: the engine's
token counts of an action's call, when the log has them (ATIF step ``metrics``); ``timing`` and
``logprob_mode``: the call's times and what its log-probs are of, kept by a trajstore export."""

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
    policy_version: int | None = None
    policy_version_max: int | None = None
    top_k: int | None = None
    min_p: float | None = None
    max_tokens: int | None = None
    sampling_params: str | None = None
    truncated: bool | None = None
    usage: CallUsage | None = None
    timing: CallTiming | None = None
    logprob_mode: str | None = None


@dataclass
class ExportedFields:
    """What a trajstore export kept of a stored row beside its token ids (``traj export --to
    atif``: the root ``extra.trajstore``), put back as stored so that re-ingesting the export gives
    the same row (:func:`~trajstore.ingest.builders.engine.rollout_to_trajectories`).

    Attributes:
        trajectory_id: the stored id (kept instead of a derived one, so the lineage ids still point
            at the right rows).
        group_id: the stored group (None = none).
        episode_id, parent_trajectory_id, fork_point, link_kind: the stored lineage, as stored (a
            parent left out of the export is named all the same, as a trajectory Parquet file
            ingested as it is names it).
        abandoned: the stored flag of a branch the harness threw away (None = not recorded).
        trainable: the stored flag; None = the export did not say (decided as for any engine log).
        not_trainable_reason: why it is not trainable, as stored.
        token_source: ``engine`` or ``retokenized`` (ids re-tokenized before the export stay so).
        logprob_source: ``engine`` or ``none``; with ``engine``, a model call whose log-probs are
            all unknown keeps NaN instead of taking every log-prob of the rollout with it.
        source: the stored ``source`` (the harness the row came from, not the export format).
    """

    trajectory_id: str
    group_id: str | None = None
    episode_id: str | None = None
    parent_trajectory_id: str | None = None
    fork_point: int | None = None
    link_kind: str | None = None
    abandoned: bool | None = None
    trainable: bool | None = None
    not_trainable_reason: str | None = None
    token_source: str = "engine"
    logprob_source: str = "engine"
    source: str | None = None


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
        exported: the stored fields a trajstore export kept (see :class:`ExportedFields`); None
            for every other log.
    """

    segments: list[EngineSegment]
    tokenizer: str | None = None
    exported: ExportedFields | None = None


@dataclass
class TextSegment:
    """A piece of an already-rendered text rollout: `kind` prompt | action | observation and its
    exact text (special tokens of the chat template included when the log kept them); an
    action's ``finish_reason`` when logged (any API's spelling: the builder stores a length stop as
    ``length``)."""

    kind: Literal["prompt", "action", "observation"]
    text: str
    role: str | None = None
    finish_reason: str | None = None


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


@dataclass(frozen=True)
class StoredRow:
    """A row of a trajectory Parquet file written elsewhere (schema v1 or v2), already checked
    by ``traj validate``'s rules and converted to the current schema: stored as it is, never
    rebuilt or re-tokenized (:mod:`~trajstore.ingest.formats.trajstore_parquet`).

    Attributes:
        trajectory: the row as the SDK's trajectory (token ids, log-probs, spans, ids as given).
        origin: the file, and its row + 1 as `line` (the row counted from 1).
        source: the input format, for the ingest summary's per-format counts.
    """

    trajectory: Trajectory
    origin: Origin
    source: str = "trajstore-parquet"


Parsed = Conversation | EngineRollout | TextRollout | StoredRow | Problem


class RecordError(ValueError):
    """A record (row, event list) is malformed; the message says which field and why."""
