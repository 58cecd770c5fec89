"""Trajectory schema v1: the single source of truth for what a stored trajectory is.

One row per trajectory. Token ids and rollout log-probs are flat per-trajectory lists, and
`spans` cut them into prompt / action / observation pieces (DESIGN.md, "Data model").
Everything else in the package (pydantic models, validation, readers, ``schemas/*.json``)
derives from or is tested against the Arrow schema defined here.
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal, get_args

import pyarrow as pa

SCHEMA_VERSION: Final[int] = 1
"""Bumped only by adding nullable columns; readers accept any version <= their own."""

METADATA_SCHEMA_VERSION_KEY: Final[bytes] = b"trajstore.schema_version"
METADATA_WRITER_KEY: Final[bytes] = b"trajstore.writer"

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

# Span struct: one entry per contiguous piece of `tokens`. Offsets are token indices into
# the trajectory's `tokens`, `end` exclusive. Action-only fields are null on other kinds.
SPAN_FIELDS: Final[list[tuple[pa.Field, str]]] = [
    (pa.field("kind", pa.string(), nullable=False), "prompt | action | observation"),
    (pa.field("start", pa.int64(), nullable=False), "first token index (inclusive)"),
    (pa.field("end", pa.int64(), nullable=False), "one past the last token index (exclusive)"),
    (pa.field("role", pa.string()), "chat role the span came from (system, user, assistant, tool, ...)"),
    (pa.field("policy_version", pa.int64()), "policy version that generated an action span; null elsewhere"),
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
]

SPAN_TYPE: Final[pa.StructType] = pa.struct([f for f, _ in SPAN_FIELDS])

# Trajectory row.
TRAJECTORY_FIELDS: Final[list[tuple[pa.Field, str]]] = [
    (pa.field("trajectory_id", pa.string(), nullable=False), "unique id; safe as a path component"),
    (pa.field("prompt_id", pa.string()), "id of the task / prompt the rollout answers"),
    (pa.field("group_id", pa.string()), "group for group baselines (GRPO); null for single rollouts"),
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
     "has at least one action token and no reason against training (see not_trainable_reason)"),
    (pa.field("not_trainable_reason", pa.string()), "why `trainable` is false"),
    (pa.field("min_policy_version", pa.int64()), "smallest policy version over action spans"),
    (pa.field("max_policy_version", pa.int64()), "largest policy version over action spans"),
    (pa.field("num_tokens", pa.int64(), nullable=False), "len(tokens)"),
    (pa.field("num_prompt_tokens", pa.int64(), nullable=False), "tokens in prompt spans"),
    (pa.field("num_action_tokens", pa.int64(), nullable=False), "tokens in action spans"),
    (pa.field("num_observation_tokens", pa.int64(), nullable=False), "tokens in observation spans"),
    (pa.field("num_actions", pa.int64(), nullable=False), "number of action spans (model calls)"),
    (pa.field("num_observations", pa.int64(), nullable=False), "number of observation spans"),
    (pa.field("tokens", pa.large_list(pa.field("item", pa.int32(), nullable=False)), nullable=False),
     "token ids of the whole trajectory in order"),
    (pa.field("logprobs", pa.large_list(pa.field("item", pa.float32()))),
     "rollout-engine log-prob per token (nats, <= 0); null outside action spans or when unknown"),
    (pa.field("spans", pa.list_(pa.field("item", SPAN_TYPE, nullable=False)), nullable=False),
     "ordered spans covering `tokens` exactly"),
    (pa.field("metadata", pa.string()), "free-form JSON object"),
]

FIELD_DOCS: Final[dict[str, str]] = {f.name: doc for f, doc in TRAJECTORY_FIELDS}
SPAN_FIELD_DOCS: Final[dict[str, str]] = {f.name: doc for f, doc in SPAN_FIELDS}

SCALAR_COLUMNS: Final[tuple[str, ...]] = tuple(
    f.name for f, _ in TRAJECTORY_FIELDS if f.name not in ("tokens", "logprobs", "spans")
)
"""Columns cheap to read: everything but the per-token lists and the spans."""


def _schema_of(fields: list[tuple[pa.Field, str]]) -> pa.Schema:
    """Arrow schema of `fields`, each field's doc in its metadata and the schema version in the schema's."""
    return pa.schema([f.with_metadata({b"doc": d.encode()}) for f, d in fields],
                     metadata={METADATA_SCHEMA_VERSION_KEY: str(SCHEMA_VERSION).encode()})


def trajectory_schema() -> pa.Schema:
    """The Arrow schema of one trajectory row, with the schema version in its metadata."""
    return _schema_of(TRAJECTORY_FIELDS)


TRAJECTORY_SCHEMA: Final[pa.Schema] = trajectory_schema()


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
    (pa.field("consumed_at", pa.timestamp("us", tz="UTC"), nullable=False), "when the step finished (UTC)"),
]


STEP_SCHEMA: Final[pa.Schema] = _schema_of(STEP_FIELDS)
CONSUMED_SCHEMA: Final[pa.Schema] = _schema_of(CONSUMED_FIELDS)


def _type_json(t: pa.DataType) -> Any:
    if pa.types.is_large_list(t) or pa.types.is_list(t):
        return {
            "type": "large_list" if pa.types.is_large_list(t) else "list",
            "item": _type_json(t.value_type),
            "item_nullable": t.value_field.nullable,
        }
    if pa.types.is_struct(t):
        return {
            "type": "struct",
            "fields": [
                {"name": t.field(i).name, "type": _type_json(t.field(i).type),
                 "nullable": t.field(i).nullable, "doc": SPAN_FIELD_DOCS.get(t.field(i).name, "")}
                for i in range(t.num_fields)
            ],
        }
    return str(t)


def schema_description() -> dict[str, Any]:
    """JSON-serialisable description of schema v1 (what ``schemas/trajectory.v1.json`` holds)."""
    return {
        "name": "trajstore.trajectory",
        "schema_version": SCHEMA_VERSION,
        "metadata_key": METADATA_SCHEMA_VERSION_KEY.decode(),
        "span_kinds": list(SPAN_KINDS),
        "statuses": list(STATUSES),
        "token_sources": list(TOKEN_SOURCES),
        "logprob_sources": list(LOGPROB_SOURCES),
        "fields": _fields_json(TRAJECTORY_FIELDS),
        "run_steps_fields": _fields_json(STEP_FIELDS),
        "run_consumed_fields": _fields_json(CONSUMED_FIELDS),
    }


def _fields_json(fields: list[tuple[pa.Field, str]]) -> list[dict[str, Any]]:
    return [{"name": f.name, "type": _type_json(f.type), "nullable": f.nullable, "doc": doc} for f, doc in fields]


def schema_json() -> str:
    """The description as the exact text stored in ``schemas/`` (sorted keys, 2-space indent)."""
    return json.dumps(schema_description(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":  # python -m trajstore.schema > schemas/trajectory.v1.json
    print(schema_json(), end="")
