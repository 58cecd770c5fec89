"""Trajectory schema v4: the single source of truth for what a stored trajectory is.

One row per trajectory. ``tokens`` holds every token id of the trajectory; ``spans`` cut it
into prompt / action / observation pieces; ``action_logprobs`` (:data:`ACTION_LOGPROBS_COLUMN`)
holds one rollout log-prob per *action* token, in token order (docs/design.md, "Data model").
Everything else in the package (pydantic models, validation, readers, ``schemas/*.json``)
derives from or is tested against the Arrow schema defined here.

Log-prob layout (v2 to v4). Action span ``k`` of a trajectory owns the contiguous slice
``action_logprobs[a_k : a_k + (end_k - start_k)]``, where ``a_k`` is the number of action tokens in
the action spans before it (stored as the span's ``logprob_start``). The list never holds nulls (decoding nested lists with nulls costs
about 3x). A token whose engine log-prob is unknown holds NaN, the IEEE "no value" that poisons
any arithmetic, so it can never pass for a real log-prob; the span's ``num_missing_logprobs``
and the trajectory's ``num_missing_logprobs`` count such tokens, so audits and readers know
without scanning values. ``logprob_source = none`` means every action token is NaN.

Lineage (v3). Every trajectory belongs to an episode (``episode_id``, the logical rollout; a
plain trajectory is its own episode) and may be linked to a parent trajectory
(``parent_trajectory_id``) by a ``link_kind`` (:data:`LINK_KINDS`), sharing the parent's first
``fork_point`` tokens. A row without a parent has all three null. Every row also carries its
``schema_version`` (the layout of that row), so engines reading a mixed store need no footer.

What a log-prob means (v4). An action span's ``logprob_mode`` (:data:`LOGPROB_MODES`) says which
distribution the engine computed its log-probs over: ``processed`` (the distribution the token was
drawn from: temperature, min-p, top-k, top-p applied and renormalised), ``tempered`` (the logits
divided by the temperature, over the whole vocabulary: before top-k, top-p, min-p) or ``raw`` (the
model's own log-softmax, before temperature and truncation); null = not recorded. Whether the
trainer can reproduce it is :mod:`trajstore.sampling`'s rule. An action span may also time its model
call (:data:`CALL_TIMING_FIELDS`: request start, first token, end, UTC) and carry the engine's usage
counts (:data:`CALL_USAGE_FIELDS`), so a stored trajectory can be replayed in time and slow calls
found with SQL. A trajectory's ``abandoned`` says whether it is a branch the harness threw away (a
retry or resample replaced it): such a branch earns no episode reward (README, "Episodes stored as
several trajectories").

Older versions (still read; :func:`trajstore.convert.upgrade_table` converts on read and
``traj migrate`` rewrites):

- v3 had no span ``logprob_mode``, call timing or usage (:data:`SPAN_FIELDS_NEW_IN_V4`) and no
  ``abandoned`` column (:data:`COLUMNS_NEW_IN_V4`): read as null (not recorded).

- v2 named the action-aligned column ``logprobs`` and had no ``schema_version`` or lineage
  columns. Converted: ``logprobs`` -> ``action_logprobs``, ``episode_id`` = metadata
  ``episode.id`` of a split episode's part (what ``traj proxy`` and ``traj ingest`` wrote) else
  ``trajectory_id``, lineage columns null.
- v1 kept ``logprobs`` as long as ``tokens``, null outside action spans, and had no
  ``num_missing_logprobs`` columns (converted as v2, plus the log-prob re-layout).

A converted row's ``schema_version`` column says 4 (the layout it now has); the shard's footer
(:data:`METADATA_SCHEMA_VERSION_KEY`, ``ShardInfo.schema_version``) still says what the file holds.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Final, Literal, get_args

import pyarrow as pa

SCHEMA_VERSION: Final[int] = 4
"""Version written into every new shard. Readers accept every version <= their own and convert
older ones on read (:data:`READABLE_VERSIONS`)."""

READABLE_VERSIONS: Final[tuple[int, ...]] = (1, 2, 3, 4)
"""Schema versions this package reads (1 to 3 are converted to 4 on read)."""

METADATA_SCHEMA_VERSION_KEY: Final[bytes] = b"trajstore.schema_version"
METADATA_WRITER_KEY: Final[bytes] = b"trajstore.writer"

ACTION_LOGPROBS_COLUMN: Final[str] = "action_logprobs"
"""Name of the stored column holding one rollout log-prob per action token (schema v3; v1 and v2
shards name it ``logprobs``, :data:`LEGACY_LOGPROBS_COLUMN`). Code names the column through this constant."""

LEGACY_LOGPROBS_COLUMN: Final[str] = "logprobs"
"""The log-prob column's name in schema v1 (token-aligned) and v2 (action-aligned) shards."""

SpanKind = Literal["prompt", "action", "observation"]
SPAN_KINDS: Final[tuple[str, ...]] = get_args(SpanKind)
SPAN_KIND_CODES: Final[dict[str, int]] = {k: i for i, k in enumerate(SPAN_KINDS)}
"""Integer codes used by the flat batch reader: prompt = 0, action = 1, observation = 2."""

Status = Literal["completed", "truncated", "aborted", "failed"]
STATUSES: Final[tuple[str, ...]] = get_args(Status)

TokenSource = Literal["engine", "retokenized"]
TOKEN_SOURCES: Final[tuple[str, ...]] = get_args(TokenSource)

LogprobSource = Literal["engine", "none"]
LOGPROB_SOURCES: Final[tuple[str, ...]] = get_args(LogprobSource)

LinkKind = Literal["subagent", "context_rewrite", "fork", "continuation"]
LINK_KINDS: Final[tuple[str, ...]] = get_args(LinkKind)
"""How a child trajectory relates to its parent (``link_kind``): ``subagent`` (a sub-agent run
inside the parent's session, its context starting from the parent's first ``fork_point``
tokens, often 0), ``context_rewrite`` (the harness rewrote the parent's context, e.g. a
condenser or summariser; the child continues the same agent), ``fork`` (a retry or branch that
resends the parent's first ``fork_point`` tokens and continues differently), ``continuation``
(the same lineage continued in another log file or after an interruption)."""

LogprobMode = Literal["processed", "tempered", "raw"]
LOGPROB_MODES: Final[tuple[str, ...]] = get_args(LogprobMode)
"""What an action span's log-probs are the log-probs of (span field ``logprob_mode``, v4):
``processed`` = the distribution the token was drawn from (temperature, min-p, top-k, top-p applied,
renormalised: vLLM ``--logprobs-mode processed_logprobs``, ``traj serve``); ``tempered`` = softmax of
the logits divided by the temperature over the whole vocabulary, before top-k / top-p / min-p
(SGLang's default); ``raw`` = the model's own log-softmax, before temperature and truncation (vLLM's
default ``raw_logprobs``, SGLang with ``SGLANG_RETURN_ORIGINAL_LOGPROB=1``)."""

# Span struct: one entry per contiguous piece of `tokens`. Offsets are token indices into
# the trajectory's `tokens`, `end` exclusive. Action-only fields are null on other kinds.
SPAN_FIELDS: Final[list[tuple[pa.Field, str]]] = [
    (pa.field("kind", pa.string(), nullable=False), "prompt | action | observation"),
    (pa.field("start", pa.int64(), nullable=False), "first token index (inclusive)"),
    (pa.field("end", pa.int64(), nullable=False), "one past the last token index (exclusive)"),
    (pa.field("role", pa.string()), "chat role the span came from (system, user, assistant, tool, ...)"),
    (pa.field("policy_version", pa.int64()),
     "policy version that generated an action span (the oldest of them when `policy_version_max` is set); "
     "null elsewhere, and on action spans of logs that never recorded it (text-only logs; engine rollouts with "
     "metadata `policy_version_known: false`), whose staleness is undefined"),
    (pa.field("call_id", pa.string()), "id of the model call (action) or of the event (observation)"),
    (pa.field("cause_id", pa.string()), "observation: id of the action / tool call it answers"),
    (pa.field("tool_call_ids", pa.list_(pa.string())), "action: ids of the tool calls it issued"),
    (pa.field("finish_reason", pa.string()), "action: engine finish reason (stop, length, tool_calls, ...)"),
    (pa.field("temperature", pa.float64()), "action: sampling temperature, when known"),
    (pa.field("top_p", pa.float64()), "action: nucleus sampling p, when known"),
    (pa.field("top_k", pa.int64()), "action: top-k, when known (-1 or null = disabled)"),
    (pa.field("min_p", pa.float64()), "action: min-p, when known"),
    (pa.field("max_tokens", pa.int64()), "action: max new tokens of the call, when known"),
    (pa.field("sampling_params", pa.string()), "action: all sampling parameters of the call as JSON, when known"),
    (pa.field("truncated", pa.bool_()), "observation text was capped at ingest (see metadata for sizes)"),
    (pa.field("logprob_start", pa.int64()),
     "action: index in `action_logprobs` of this span's first log-prob (= action tokens before it), so its "
     "log-probs are action_logprobs[logprob_start : logprob_start + end - start]; null on other kinds (derived)"),
    (pa.field("num_missing_logprobs", pa.int64()),
     "action: tokens of this span without an engine log-prob (NaN in `action_logprobs`); 0 = complete; "
     "null on other kinds (derived)"),
    (pa.field("policy_version_max", pa.int64()),
     "action: the newest policy version that produced tokens of this span when more than one did and the "
     "engine did not report where the version changed (a mixed-version call, e.g. weights reloaded "
     "mid-generation); `policy_version` is then the oldest, and staleness is counted from it. Null = every "
     "token of the span comes from `policy_version`"),
    (pa.field("logprob_mode", pa.string()),
     "action: the distribution its log-probs are the log-probs of: processed (the one the token was drawn "
     "from: temperature, min-p, top-k, top-p applied, renormalised) | tempered (logits / temperature over the "
     "whole vocabulary, before top-k / top-p / min-p) | raw (the model's log-softmax, before temperature and "
     "truncation); null = not recorded (trained as processed)"),
    (pa.field("started_at", pa.timestamp("us", tz="UTC")),
     "action: when the model call's request reached the engine (or the recording proxy), UTC, microseconds; "
     "null = not recorded"),
    (pa.field("first_token_at", pa.timestamp("us", tz="UTC")),
     "action: when the call's first generated token arrived (streamed calls; a non-streamed call's whole answer "
     "arrives at `ended_at`, and this is null), UTC, microseconds; null = not recorded"),
    (pa.field("ended_at", pa.timestamp("us", tz="UTC")),
     "action: when the call's answer was complete, UTC, microseconds; the call took ended_at - started_at; "
     "null = not recorded"),
    (pa.field("usage_prompt_tokens", pa.int64()),
     "action: the engine's own count of the call's prompt tokens (OpenAI usage.prompt_tokens), when reported"),
    (pa.field("usage_completion_tokens", pa.int64()),
     "action: the engine's own count of the call's generated tokens (usage.completion_tokens), when reported"),
    (pa.field("usage_cached_tokens", pa.int64()),
     "action: prompt tokens the engine served from its prefix cache (usage.prompt_tokens_details.cached_tokens), "
     "when reported"),
]

CALL_TIMING_FIELDS: Final[tuple[str, ...]] = ("started_at", "first_token_at", "ended_at")
"""Span fields timing an action's model call (UTC timestamps, microseconds; v4)."""
CALL_USAGE_FIELDS: Final[tuple[str, ...]] = ("usage_prompt_tokens", "usage_completion_tokens", "usage_cached_tokens")
"""Span fields holding the engine's usage counts of an action's model call (v4)."""

DERIVED_SPAN_FIELDS: Final[tuple[str, ...]] = ("logprob_start", "num_missing_logprobs")
"""Span fields the writer computes (from the spans and `action_logprobs`); they are not SDK inputs."""

SPAN_FIELDS_NEW_IN_V2: Final[tuple[str, ...]] = (*DERIVED_SPAN_FIELDS, "policy_version_max")
"""Span fields schema v1 did not have (null or derived when a v1 shard is read)."""

SPAN_FIELDS_NEW_IN_V4: Final[tuple[str, ...]] = ("logprob_mode", *CALL_TIMING_FIELDS, *CALL_USAGE_FIELDS)
"""Span fields schema v3 did not have (null when an older shard is read)."""

SPAN_TYPE: Final[pa.StructType] = pa.struct([f for f, _ in SPAN_FIELDS])

# Schema v3's spans, frozen: v4's without the fields new in v4.
SPAN_FIELDS_V3: Final[list[tuple[pa.Field, str]]] = [(f, d) for f, d in SPAN_FIELDS
                                                     if f.name not in SPAN_FIELDS_NEW_IN_V4]
SPAN_TYPE_V3: Final[pa.StructType] = pa.struct([f for f, _ in SPAN_FIELDS_V3])

# Span docs of schema v2 (same fields and types as v3; only the log-prob column's name differs).
_SPAN_DOCS_V2: Final[dict[str, str]] = {
    "logprob_start":
        "action: index in `logprobs` of this span's first log-prob (= action tokens before it), so its "
        "log-probs are logprobs[logprob_start : logprob_start + end - start]; null on other kinds (derived)",
    "num_missing_logprobs":
        "action: tokens of this span without an engine log-prob (NaN in `logprobs`); 0 = complete; "
        "null on other kinds (derived)",
}
SPAN_FIELDS_V2: Final[list[tuple[pa.Field, str]]] = [(f, _SPAN_DOCS_V2.get(f.name, d)) for f, d in SPAN_FIELDS_V3]

# Trajectory row.
TRAJECTORY_FIELDS: Final[list[tuple[pa.Field, str]]] = [
    (pa.field("trajectory_id", pa.string(), nullable=False), "unique id; safe as a path component"),
    (pa.field("schema_version", pa.int64(), nullable=False),
     "schema version of this row's layout (4); a row converted on read from an older shard says 4, the shard's "
     "footer says what the file holds"),
    (pa.field("prompt_id", pa.string()), "id of the task / prompt the rollout answers"),
    (pa.field("group_id", pa.string()), "group for group baselines (GRPO); null for single rollouts"),
    (pa.field("episode_id", pa.string(), nullable=False),
     "the logical rollout this trajectory is part of (its lineages: sub-agents, context rewrites, forks, "
     "continuations share it); a plain trajectory is its own episode (= trajectory_id). Rows converted from "
     "v1/v2 take metadata `episode.id` of a split episode's part, else trajectory_id"),
    (pa.field("parent_trajectory_id", pa.string()),
     "trajectory this one branches from (stored in the same write or already in the store); null = a root"),
    (pa.field("fork_point", pa.int64()),
     "number of leading tokens this trajectory shares with its parent (tokens[:fork_point] equal the parent's, "
     "0 <= fork_point <= the parent's num_tokens); null when there is no parent"),
    (pa.field("link_kind", pa.string()),
     "how it relates to its parent: subagent | context_rewrite | fork | continuation; null when there is no parent"),
    (pa.field("abandoned", pa.bool_()),
     "true = a branch the harness did not continue: a retry or a resample of a call replaced it (its child "
     "with link_kind fork), so it earns no episode reward; false = a branch the recorder knows was kept; null = "
     "not recorded (credited as kept)"),
    (pa.field("source", pa.string(), nullable=False), "harness and format, e.g. 'sdk', 'openhands/v0-eval'"),
    (pa.field("model", pa.string()), "model name of the rollout engine"),
    (pa.field("tokenizer", pa.string()), "tokenizer name or path the token ids belong to"),
    (pa.field("created_at", pa.timestamp("us", tz="UTC"), nullable=False), "when the trajectory finished (UTC)"),
    (pa.field("status", pa.string(), nullable=False), "completed | truncated | aborted | failed"),
    (pa.field("reward", pa.float64()), "scalar reward credited at the last action token; null = no reward"),
    (pa.field("reward_raw", pa.string()), "the raw reward value as JSON (e.g. 'true', '\"positive\"')"),
    (pa.field("token_source", pa.string(), nullable=False), "engine (ids from the rollout engine) | retokenized"),
    (pa.field("logprob_source", pa.string(), nullable=False), "engine (per-token rollout log-probs) | none"),
    (pa.field("trainable", pa.bool_(), nullable=False),
     "no stored reason against training (see not_trainable_reason: e.g. no action token, an unnamed engine "
     "tokenizer); a missing reward or missing engine log-probs are checked by `traj train` itself and listed "
     "by `traj stats --coverage`, not here"),
    (pa.field("not_trainable_reason", pa.string()), "why `trainable` is false"),
    (pa.field("min_policy_version", pa.int64()), "smallest policy version over action spans"),
    (pa.field("max_policy_version", pa.int64()), "largest policy version over action spans"),
    (pa.field("num_tokens", pa.int64(), nullable=False), "len(tokens)"),
    (pa.field("num_prompt_tokens", pa.int64(), nullable=False), "tokens in prompt spans"),
    (pa.field("num_action_tokens", pa.int64(), nullable=False), "tokens in action spans"),
    (pa.field("num_observation_tokens", pa.int64(), nullable=False), "tokens in observation spans"),
    (pa.field("num_actions", pa.int64(), nullable=False), "number of action spans (model calls)"),
    (pa.field("num_observations", pa.int64(), nullable=False), "number of observation spans"),
    (pa.field("num_missing_logprobs", pa.int64(), nullable=False),
     "action tokens without an engine log-prob (NaN in `action_logprobs`); = num_action_tokens when "
     "logprob_source is none"),
    (pa.field("tokens", pa.large_list(pa.field("item", pa.int32(), nullable=False)), nullable=False),
     "token ids of the whole trajectory in order"),
    (pa.field(ACTION_LOGPROBS_COLUMN, pa.large_list(pa.field("item", pa.float32(), nullable=False)), nullable=False),
     "rollout-engine log-prob of each action token in token order (nats, <= 0), num_action_tokens long; "
     "action span k's values start after the action tokens of the spans before it; NaN = unknown"),
    (pa.field("spans", pa.list_(pa.field("item", SPAN_TYPE, nullable=False)), nullable=False),
     "ordered spans covering `tokens` exactly"),
    (pa.field("metadata", pa.string()), "free-form JSON object"),
]

LINEAGE_COLUMNS: Final[tuple[str, ...]] = ("episode_id", "parent_trajectory_id", "fork_point", "link_kind")
"""The lineage columns (new in v3)."""

COLUMNS_NEW_IN_V3: Final[tuple[str, ...]] = ("schema_version", *LINEAGE_COLUMNS)
"""Columns schema v2 did not have (derived when a v1 / v2 shard is read)."""

COLUMNS_NEW_IN_V4: Final[tuple[str, ...]] = ("abandoned",)
"""Columns schema v3 did not have (null when an older shard is read: not recorded)."""

# Schema v3, frozen: what shards stamped version 3 hold (read, then converted to v4).
TRAJECTORY_FIELDS_V3: Final[list[tuple[pa.Field, str]]] = [
    (pa.field("spans", pa.list_(pa.field("item", SPAN_TYPE_V3, nullable=False)), nullable=False), d)
    if f.name == "spans"
    else (f, "schema version of this row's layout (3); a row converted on read from an older shard says 3, the "
             "shard's footer says what the file holds") if f.name == "schema_version"
    else (f, d)
    for f, d in TRAJECTORY_FIELDS if f.name not in COLUMNS_NEW_IN_V4
]

# Schema v2, frozen: what shards stamped version 2 hold (read, then converted to v4).
_FIELD_DOCS_V2: Final[dict[str, str]] = {
    "num_missing_logprobs": "action tokens without an engine log-prob (NaN in `logprobs`); = num_action_tokens when "
                            "logprob_source is none"}
TRAJECTORY_FIELDS_V2: Final[list[tuple[pa.Field, str]]] = [
    (f.with_name(LEGACY_LOGPROBS_COLUMN), d) if f.name == ACTION_LOGPROBS_COLUMN
    else (f, _FIELD_DOCS_V2.get(f.name, d))
    for f, d in TRAJECTORY_FIELDS_V3 if f.name not in COLUMNS_NEW_IN_V3
]

# Schema v1, frozen: what shards stamped version 1 hold (read, then converted to v4).
_SPAN_DOCS_V1: Final[dict[str, str]] = {
    "policy_version": "policy version that generated an action span; null elsewhere"}  # v1 had no mixed spans
SPAN_FIELDS_V1: Final[list[tuple[pa.Field, str]]] = [
    (f, _SPAN_DOCS_V1.get(f.name, d)) for f, d in SPAN_FIELDS_V2 if f.name not in SPAN_FIELDS_NEW_IN_V2]
TRAJECTORY_FIELDS_V1: Final[list[tuple[pa.Field, str]]] = [
    (pa.field("spans", pa.list_(pa.field("item", pa.struct([f for f, _ in SPAN_FIELDS_V1]), nullable=False)),
              nullable=False), d) if f.name == "spans"
    else (pa.field(LEGACY_LOGPROBS_COLUMN, pa.large_list(pa.field("item", pa.float32()))),
          "rollout-engine log-prob per token (nats, <= 0); null outside action spans or when unknown")
    if f.name == LEGACY_LOGPROBS_COLUMN else (f, d)
    for f, d in TRAJECTORY_FIELDS_V2 if f.name != "num_missing_logprobs"
]

_FIELDS_BY_VERSION: Final[dict[int, list[tuple[pa.Field, str]]]] = {
    1: TRAJECTORY_FIELDS_V1, 2: TRAJECTORY_FIELDS_V2, 3: TRAJECTORY_FIELDS_V3, 4: TRAJECTORY_FIELDS}
_SPAN_FIELDS_BY_VERSION: Final[dict[int, list[tuple[pa.Field, str]]]] = {
    1: SPAN_FIELDS_V1, 2: SPAN_FIELDS_V2, 3: SPAN_FIELDS_V3, 4: SPAN_FIELDS}

FIELD_DOCS: Final[dict[str, str]] = {f.name: doc for f, doc in TRAJECTORY_FIELDS}
SPAN_FIELD_DOCS: Final[dict[str, str]] = {f.name: doc for f, doc in SPAN_FIELDS}

SCALAR_COLUMNS: Final[tuple[str, ...]] = tuple(
    f.name for f, _ in TRAJECTORY_FIELDS if f.name not in ("tokens", ACTION_LOGPROBS_COLUMN, "spans")
)
"""Columns cheap to read: everything but the per-token lists and the spans."""


def _schema_of(fields: list[tuple[pa.Field, str]], version: int = SCHEMA_VERSION) -> pa.Schema:
    """Arrow schema of `fields`, each field's doc in its metadata and the schema version in the schema's."""
    return pa.schema([f.with_metadata({b"doc": d.encode()}) for f, d in fields],
                     metadata={METADATA_SCHEMA_VERSION_KEY: str(version).encode()})


@functools.cache
def trajectory_schema(version: int = SCHEMA_VERSION) -> pa.Schema:
    """The Arrow schema of one trajectory row of schema `version` (default: the current one),
    with the version in its metadata.

    Raises:
        ValueError: `version` is not in :data:`READABLE_VERSIONS`.
    """
    if version in _FIELDS_BY_VERSION:
        return _schema_of(_FIELDS_BY_VERSION[version], version)
    raise ValueError(f"unknown trajectory schema version {version} (this package reads {list(READABLE_VERSIONS)})")


TRAJECTORY_SCHEMA: Final[pa.Schema] = trajectory_schema()
TRAJECTORY_SCHEMA_V1: Final[pa.Schema] = trajectory_schema(1)
TRAJECTORY_SCHEMA_V2: Final[pa.Schema] = trajectory_schema(2)
TRAJECTORY_SCHEMA_V3: Final[pa.Schema] = trajectory_schema(3)


# Training records, written by `traj train` under runs/<run_id>/ (RUN_STEPS_DIR, RUN_CONSUMED_DIR),
# as Parquet shards with the same atomic-write rules as trajectories.
STEP_FIELDS: Final[list[tuple[pa.Field, str]]] = [
    (pa.field("run_id", pa.string(), nullable=False), "training run id"),
    (pa.field("step", pa.int64(), nullable=False), "policy update index, 0-based (negative = critic warm-up)"),
    (pa.field("trainer_version", pa.int64(), nullable=False), "policy version being trained at this step"),
    (pa.field("wall_time", pa.timestamp("us", tz="UTC"), nullable=False), "when the step finished (UTC)"),
    (pa.field("metric", pa.string(), nullable=False), "namespaced metric name: policy/*, value/*, ratio/*, staleness/*, perf/*"),
    (pa.field("value", pa.float64()), "metric value (units in the metric's documentation)"),
]

CONSUMED_FIELDS: Final[list[tuple[pa.Field, str]]] = [
    (pa.field("run_id", pa.string(), nullable=False), "training run id"),
    (pa.field("step", pa.int64(), nullable=False), "policy update that used the trajectory"),
    (pa.field("trainer_version", pa.int64(), nullable=False), "policy version being trained at that step"),
    (pa.field("trajectory_id", pa.string(), nullable=False), "the consumed trajectory"),
    (pa.field("rank", pa.int64(), nullable=False), "data-parallel rank that read it"),
    (pa.field("min_policy_version", pa.int64()), "oldest action-span policy version in the trajectory"),
    (pa.field("max_policy_version", pa.int64()), "newest action-span policy version in the trajectory"),
    (pa.field("staleness_min", pa.int64()), "trainer_version - max_policy_version (versions)"),
    (pa.field("staleness_max", pa.int64()), "trainer_version - min_policy_version (versions)"),
    (pa.field("num_action_tokens", pa.int64(), nullable=False), "action tokens trained on"),
    (pa.field("masked_below", pa.float64()), "fraction of action tokens with ratio <= 1 - eps_low (DIS-masked)"),
    (pa.field("masked_above", pa.float64()), "fraction of action tokens with ratio >= 1 + eps_high (DIS-masked)"),
    (pa.field("ratio_mean", pa.float64()), "mean importance ratio over action tokens (before masking)"),
    (pa.field("reuse", pa.int64()), "0 = the trajectory's first use in the run; n = its n-th reuse, drawn from the "
                                    "replay buffer (null in records written before the replay buffer: read as 0)"),
    (pa.field("consumed_at", pa.timestamp("us", tz="UTC"), nullable=False), "when the step finished (UTC)"),
]


STEP_SCHEMA: Final[pa.Schema] = _schema_of(STEP_FIELDS)
CONSUMED_SCHEMA: Final[pa.Schema] = _schema_of(CONSUMED_FIELDS)


def _type_json(t: pa.DataType, span_docs: dict[str, str] | None = None) -> Any:
    span_docs = SPAN_FIELD_DOCS if span_docs is None else span_docs
    if pa.types.is_large_list(t) or pa.types.is_list(t):
        return {
            "type": "large_list" if pa.types.is_large_list(t) else "list",
            "item": _type_json(t.value_type, span_docs),
            "item_nullable": t.value_field.nullable,
        }
    if pa.types.is_struct(t):
        return {
            "type": "struct",
            "fields": [
                {"name": t.field(i).name, "type": _type_json(t.field(i).type, span_docs),
                 "nullable": t.field(i).nullable, "doc": span_docs.get(t.field(i).name, "")}
                for i in range(t.num_fields)
            ],
        }
    return str(t)


_ACTION_LOGPROBS_LAYOUT = (
    "action_logprobs holds one float32 per action token, in token order (num_action_tokens long, never null); "
    "action span k owns action_logprobs[a_k : a_k + end_k - start_k], a_k = action tokens of the spans before "
    "it (spans[k].logprob_start); NaN = the engine gave no log-prob for that token, counted in "
    "spans[].num_missing_logprobs and num_missing_logprobs (v2's layout; the column was named logprobs)")

LOGPROB_LAYOUT: Final[dict[int, str]] = {
    1: "logprobs is as long as tokens; null outside action spans and where the engine gave none",
    2: ("logprobs holds one float32 per action token, in token order (num_action_tokens long, never null); "
        "action span k owns logprobs[a_k : a_k + end_k - start_k], a_k = action tokens of the spans before it "
        "(spans[k].logprob_start); "
        "NaN = the engine gave no log-prob for that token, counted in spans[].num_missing_logprobs and "
        "num_missing_logprobs"),
    3: _ACTION_LOGPROBS_LAYOUT,
    4: _ACTION_LOGPROBS_LAYOUT,  # v4 changed the spans, not the layout
}
"""How the log-prob column (``logprobs`` in v1/v2, ``action_logprobs`` in v3 and v4) lines up with
``tokens`` in each schema version (also in ``schemas/``)."""


def schema_description(version: int = SCHEMA_VERSION) -> dict[str, Any]:
    """JSON-serialisable description of schema `version` (what ``schemas/trajectory.v<N>.json`` holds).

    Raises:
        ValueError: `version` is not in :data:`READABLE_VERSIONS`.
    """
    fields = _FIELDS_BY_VERSION.get(version)
    if fields is None:
        raise ValueError(f"unknown trajectory schema version {version} (this package reads {list(READABLE_VERSIONS)})")
    span_docs = {f.name: d for f, d in _SPAN_FIELDS_BY_VERSION[version]}
    lineage = {"link_kinds": list(LINK_KINDS)} if version >= 3 else {}
    modes = {"logprob_modes": list(LOGPROB_MODES)} if version >= 4 else {}
    return {
        "name": "trajstore.trajectory",
        "schema_version": version,
        "metadata_key": METADATA_SCHEMA_VERSION_KEY.decode(),
        "span_kinds": list(SPAN_KINDS),
        "statuses": list(STATUSES),
        "token_sources": list(TOKEN_SOURCES),
        "logprob_sources": list(LOGPROB_SOURCES),
        "logprob_layout": LOGPROB_LAYOUT[version],
        **lineage,
        **modes,
        "fields": _fields_json(fields, span_docs),
        "run_steps_fields": _fields_json(STEP_FIELDS, span_docs),
        "run_consumed_fields": _fields_json(CONSUMED_FIELDS, span_docs),
    }


def _fields_json(fields: list[tuple[pa.Field, str]], span_docs: dict[str, str]) -> list[dict[str, Any]]:
    return [{"name": f.name, "type": _type_json(f.type, span_docs), "nullable": f.nullable, "doc": doc}
            for f, doc in fields]


def schema_json(version: int = SCHEMA_VERSION) -> str:
    """The description as the exact text stored in ``schemas/trajectory.v<version>.json``
    (sorted keys, 2-space indent)."""
    return json.dumps(schema_description(version), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":  # python -m trajstore.schema [VERSION] > schemas/trajectory.v<VERSION>.json
    import sys

    print(schema_json(int(sys.argv[1]) if len(sys.argv) > 1 else SCHEMA_VERSION), end="")
