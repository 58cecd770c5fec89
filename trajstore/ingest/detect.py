"""Telling input formats apart by shape (a record, a row, an event, a whole document, a Parquet
file's columns), and naming known files that hold no trajectory. Keys only, never file names: pairing V1 eval
``traj_<task>.json`` with ``eval_<task>.json`` is :mod:`~trajstore.ingest.dispatch`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from trajstore.ingest.rollout_dumps import INPUT_KEYS, OUTPUT_KEYS
from trajstore.schema import METADATA_SCHEMA_VERSION_KEY, READABLE_VERSIONS, trajectory_schema

TRAJECTORY_COLUMNS: Final[frozenset[str]] = frozenset.intersection(*(
    frozenset(f.name for f in trajectory_schema(v) if not f.nullable) for v in READABLE_VERSIONS))
"""Columns every readable trajectory schema version requires: a Parquet file holding all of them
is a trajstore trajectory file, whatever its footer says."""


def detect_parquet_schema(columns: Iterable[str], footer: Mapping[bytes, bytes] | None) -> str | None:
    """``trajstore-parquet`` for a Parquet file of trajstore trajectories (its footer carries the
    schema-version stamp, or its columns include :data:`TRAJECTORY_COLUMNS`), else None (its
    rows are detected one by one, as other harnesses' rows). A newer stamp is still ours: the
    reader refuses it as a newer version, never as another harness's rows."""
    if METADATA_SCHEMA_VERSION_KEY in (footer or {}) or TRAJECTORY_COLUMNS <= set(columns):
        return "trajstore-parquet"
    return None


def is_chat(v: Any) -> bool:
    """A non-empty list whose first item looks like an OpenAI chat message."""
    return (isinstance(v, list) and bool(v) and isinstance(v[0], dict) and "role" in v[0]
            and ("content" in v[0] or "tool_calls" in v[0]))


def is_message_list(v: Any) -> bool:
    """A list that reads as ONE conversation rather than an array of records: every item an
    object that is no record of a known format, and some item a chat message (a role and a
    content or tool calls). Its first message may be the broken one (no role), which
    :func:`is_chat` alone misread as an array of records, each refused as not a chat record."""
    return (isinstance(v, list) and bool(v) and all(isinstance(m, dict) and detect_record(m) is None for m in v)
            and any("role" in m and ("content" in m or "tool_calls" in m) for m in v))


def detect_record(d: Any) -> str | None:
    """Format of one record (a dict that is a whole trajectory / row), or None.

    Keys only, most specific first: a harness's own marker (``trajectory_format``,
    ``schema_version``) before shapes that several harnesses share (``messages`` + ``resolved``).
    """
    if not isinstance(d, dict):
        return None
    if isinstance(d.get("trajectory_format"), str) and d["trajectory_format"].startswith("mini-swe-agent"):
        return "mini-swe-agent"
    if isinstance(d.get("schema_version"), str) and d["schema_version"].startswith("ATIF") and "steps" in d:
        return "atif"
    if "responses_create_params" in d and "response" in d:
        return "nemo-gym"
    if "trajectory" in d and "history" in d and "info" in d:
        return "swe-agent"
    if "messages" in d and isinstance(d.get("response"), dict):
        return "openhands-v1-completions"  # a LiteLLM response object; a chat row may carry a text "response"
    if "traj" in d and "reward" in d and ("task_id" in d or "info" in d):
        return "tau-bench"
    if any(k in d for k in INPUT_KEYS) and any(k in d for k in OUTPUT_KEYS) \
            and ("score" in d or "step" in d):
        return "verl-rollouts"
    if "history" in d and isinstance(d["history"], list):
        if ("issue" in d or "success" in d) and "instance_id" not in d:
            return "openhands-v0-resolver"
        if any(isinstance(e, dict) and "kind" in e for e in d["history"][:5]):
            return "openhands-v1-eval"
        return "openhands-v0-eval"
    if "feedback" in d and "trajectory" in d:
        return "openhands-v0-feedback"
    if "messages" in d and isinstance(d["messages"], list) and isinstance(d.get("info"), dict) \
            and "mini_version" in d["info"]:
        return "mini-swe-agent"
    if "messages" in d and ("traj_id" in d or ("patch" in d and "model" in d)):
        return "swe-smith"
    if "messages" in d and ("resolved" in d or "instance_id" in d):
        return "openhands-swe-gym"
    if "trajectory" in d and (is_chat(d["trajectory"]) or (isinstance(d["trajectory"], str) and "resolved" in d)) \
            and ("resolved" in d or "tools" in d):
        return "nebius-swe-rebench-openhands"
    if "trajectory" in d and isinstance(d["trajectory"], list) and ("target" in d or "model_name" in d):
        return "nebius-swe-agent"
    if "messages" in d and is_chat(d["messages"]):  # last: the shape every chat format shares
        return "chat-messages"
    return None


def detect_row(v: Any) -> str | None:
    """Format of one row of a JSONL file or JSON array: :func:`detect_record`, or
    ``chat-messages`` for a row that is itself a list of chat messages."""
    return detect_record(v) or ("chat-messages" if is_chat(v) else None)


def detect_event(d: Any) -> str | None:
    """``openhands-v1-events`` for a V1 event (``kind``), ``openhands-v0-events`` for a V0 event."""
    if not isinstance(d, dict):
        return None
    if isinstance(d.get("kind"), str) and ("id" in d or "source" in d):
        return "openhands-v1-events"
    if "action" in d or "observation" in d:
        return "openhands-v0-events"
    return None


def not_a_trajectory(d: Any) -> str | None:
    """Why a known non-trajectory file holds no trajectory, or None."""
    if isinstance(d, dict):
        if "final_score" in d or "checkpoints" in d:
            return "evaluation score only (its trajectory is the matching traj_<task>.json)"
        if "error" in d and "traceback" in d:
            return f"evaluator crash report, no trajectory and no score: {str(d['error'])[:120]}"
        if "conversation_id" in d and ("llm_model" in d or "title" in d):
            return "conversation metadata only (its events are in the events/ directory next to it)"
        if "execution_status" in d and isinstance(d.get("agent"), dict):
            return "conversation state (OpenHands V1 base_state.json: read with the events/ directory next to it)"
    return None


def detect_document(d: Any) -> str | None:
    """Format of a whole JSON document (object or array), or None when unknown."""
    fmt = detect_record(d)
    if fmt:
        return fmt
    if isinstance(d, list) and d:
        first = next((x for x in d if isinstance(x, dict)), None)
        if first is None:
            return None
        fmt = detect_record(first)
        if fmt:
            return fmt
        ev = detect_event(first)
        if ev:
            return ev
        if is_message_list(d):
            return "chat-messages"
    return None
