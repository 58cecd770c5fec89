"""schema.py is the single source of truth: the pydantic SDK models match the Arrow schema field
by field, and ``schemas/trajectory.v1.json`` / ``v2.json`` are exactly what the code generates."""

from __future__ import annotations

import json
import types
import typing
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from tests.helpers.paths import REPO_ROOT
from trajstore.models import Span, Trajectory
from trajstore.schema import (
    ACTION_LOGPROBS_COLUMN,
    DERIVED_SPAN_FIELDS,
    LINK_KINDS,
    LOGPROB_MODES,
    SCHEMA_VERSION,
    SPAN_FIELDS,
    SPAN_KINDS,
    TRAJECTORY_FIELDS,
    TRAJECTORY_SCHEMA,
    schema_description,
    schema_json,
    trajectory_schema,
)

# not_trainable_reason is also a model field: a producer may declare one (e.g. engine ids of an
# unknown tokenizer); without one it is derived ("no action tokens")
DERIVED = {"schema_version", "trainable", "min_policy_version", "max_policy_version", "num_tokens",
           "num_prompt_tokens", "num_action_tokens", "num_observation_tokens", "num_actions", "num_observations",
           "num_missing_logprobs"}
"""Columns the writer computes from `spans` / `tokens`; they are not SDK inputs."""

# Arrow type -> the Python type the model must use for it.
SCALAR_TYPES: dict[pa.DataType, type] = {
    pa.string(): str, pa.int64(): int, pa.float64(): float, pa.bool_(): bool,
    pa.timestamp("us", tz="UTC"): datetime,
}


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """(inner type, optional?) of ``X | None`` / ``Optional[X]`` / ``Annotated[X, ...]``."""
    optional = False
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        annotation = args[0] if len(args) == 1 else annotation
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation, optional


def test_trajectory_model_matches_arrow_schema_field_by_field() -> None:
    model = Trajectory.model_fields
    schema_names = [f.name for f, _ in TRAJECTORY_FIELDS]
    # Same fields in the same order, minus the derived ones.
    assert list(model) == [n for n in schema_names if n not in DERIVED]
    assert DERIVED <= set(schema_names)
    for f, _ in TRAJECTORY_FIELDS:
        if f.name in DERIVED:
            continue
        inner, optional = _unwrap(model[f.name].annotation)
        if f.name in ("tokens", "action_logprobs"):
            assert pa.types.is_large_list(f.type)
            assert inner is np.ndarray, f.name
            continue
        if f.name == "episode_id":  # required in the store; None in the model = the writer's default (its own id)
            assert not f.nullable and inner is str and optional and model[f.name].default is None
            continue
        if f.name == "metadata":  # JSON object in the SDK, JSON text in the store
            assert f.type == pa.string() and typing.get_origin(inner) is dict
            continue
        if f.name == "spans":
            assert pa.types.is_list(f.type) and typing.get_args(inner) == (Span,)
            continue
        assert inner is SCALAR_TYPES[f.type], f"{f.name}: model {inner} vs arrow {f.type}"
        # A nullable column is optional (default None) in the model; a required one is never None.
        assert optional == f.nullable, f"{f.name}: nullable={f.nullable} but model optional={optional}"
        if f.nullable:
            assert model[f.name].default is None


def test_span_model_matches_span_struct() -> None:
    model = Span.model_fields
    assert set(DERIVED_SPAN_FIELDS) == {"logprob_start", "num_missing_logprobs"}
    assert list(model) == [f.name for f, _ in SPAN_FIELDS if f.name not in DERIVED_SPAN_FIELDS]
    for f, _ in SPAN_FIELDS:
        if f.name in DERIVED_SPAN_FIELDS:
            assert f.type == pa.int64() and f.nullable
            continue
        inner, optional = _unwrap(model[f.name].annotation)
        if pa.types.is_list(f.type):
            assert typing.get_origin(inner) is list and typing.get_args(inner) == (str,)
            assert f.type.value_type == pa.string()
        else:
            assert inner is SCALAR_TYPES[f.type], f"spans.{f.name}: model {inner} vs arrow {f.type}"
        assert optional == f.nullable, f"spans.{f.name}"
        assert model[f.name].is_required() == (not f.nullable), f"spans.{f.name}"


def test_token_columns_are_large_lists_and_version_is_stamped() -> None:
    tok = TRAJECTORY_SCHEMA.field("tokens").type
    lp = TRAJECTORY_SCHEMA.field("action_logprobs").type
    assert tok == pa.large_list(pa.field("item", pa.int32(), nullable=False))
    # v2: one non-null float32 per action token (no nulls inside the list)
    assert lp == pa.large_list(pa.field("item", pa.float32(), nullable=False))
    assert not TRAJECTORY_SCHEMA.field("action_logprobs").nullable
    assert SCHEMA_VERSION == 4
    assert pa.types.is_struct(TRAJECTORY_SCHEMA.field("spans").type.value_type)
    assert TRAJECTORY_SCHEMA.metadata[b"trajstore.schema_version"] == str(SCHEMA_VERSION).encode()
    assert SPAN_KINDS == ("prompt", "action", "observation")


def test_schemas_json_has_not_drifted() -> None:
    for version in (1, 2, 3, 4):
        path = REPO_ROOT / "schemas" / f"trajectory.v{version}.json"
        assert path.read_text() == schema_json(version), (
            f"schemas/trajectory.v{version}.json differs from trajstore.schema; regenerate with "
            f"`python -m trajstore.schema {version} > schemas/trajectory.v{version}.json`")
    described = {f["name"]: f for f in json.loads((REPO_ROOT / "schemas" / "trajectory.v4.json").read_text())["fields"]}
    assert list(described) == TRAJECTORY_SCHEMA.names
    assert described["tokens"]["type"] == {"type": "large_list", "item": "int32", "item_nullable": False}
    assert described["action_logprobs"]["type"] == {"type": "large_list", "item": "float", "item_nullable": False}
    v2 = {f["name"]: f for f in json.loads((REPO_ROOT / "schemas" / "trajectory.v2.json").read_text())["fields"]}
    assert v2["logprobs"]["type"] == described["action_logprobs"]["type"] and "action_logprobs" not in v2
    v1 = {f["name"]: f for f in json.loads((REPO_ROOT / "schemas" / "trajectory.v1.json").read_text())["fields"]}
    assert v1["logprobs"]["type"]["item_nullable"] is True and "num_missing_logprobs" not in v1


def test_v1_schema_is_frozen_as_it_was_written() -> None:
    """The v1 description must not change with v2 edits: readers convert real v1 shards with it.
    Checked against the v1 layout by hand: 26 columns, logprobs nullable floats, 16 span fields."""
    v1 = trajectory_schema(1)
    assert v1.metadata[b"trajstore.schema_version"] == b"1"
    assert len(v1.names) == 26 and "num_missing_logprobs" not in v1.names
    assert v1.field("logprobs").type == pa.large_list(pa.field("item", pa.float32()))
    span = v1.field("spans").type.value_type
    assert span.num_fields == 16 and span.field(span.num_fields - 1).name == "truncated"


def test_v2_schema_is_frozen_as_it_was_written() -> None:
    """v3 renamed the log-prob column and added columns; v2 shards are still described as written.
    Checked against the v2 layout by hand: 27 columns, action-aligned `logprobs` (non-null floats),
    19 span fields, no schema_version / lineage column."""
    v2 = trajectory_schema(2)
    assert v2.metadata[b"trajstore.schema_version"] == b"2"
    assert len(v2.names) == 27 and "action_logprobs" not in v2.names
    assert not {"schema_version", "episode_id", "parent_trajectory_id", "fork_point", "link_kind"} & set(v2.names)
    assert v2.field("logprobs").type == pa.large_list(pa.field("item", pa.float32(), nullable=False))
    assert v2.field("spans").type.value_type.num_fields == 19
    assert b"`logprobs`" in v2.field("num_missing_logprobs").metadata[b"doc"]


def test_v3_adds_the_version_and_lineage_columns() -> None:
    """v3 = v2 + schema_version, episode_id (required), parent_trajectory_id, fork_point, link_kind
    (nullable), and `logprobs` renamed `action_logprobs` (32 columns)."""
    v3 = trajectory_schema(3)
    assert len(v3.names) == 32 and ACTION_LOGPROBS_COLUMN == "action_logprobs" and "logprobs" not in v3.names
    assert v3.field("schema_version").type == pa.int64() and not v3.field("schema_version").nullable
    assert v3.field("episode_id").type == pa.string() and not v3.field("episode_id").nullable
    assert v3.field("fork_point").type == pa.int64() and v3.field("fork_point").nullable
    for name in ("parent_trajectory_id", "link_kind"):
        assert v3.field(name).type == pa.string() and v3.field(name).nullable
    assert LINK_KINDS == ("subagent", "context_rewrite", "fork", "continuation")
    assert [n for n in v3.names if n not in trajectory_schema(2).names] == [
        "schema_version", "episode_id", "parent_trajectory_id", "fork_point", "link_kind", "action_logprobs"]


def test_v4_adds_the_logprob_mode_call_timing_and_usage_of_action_spans_and_abandoned() -> None:
    """v4 = v3 + the span fields logprob_mode, call timing (UTC timestamps, us) and the engine's usage
    counts (nullable, last) + the nullable bool column ``abandoned`` after the lineage columns; v3's
    spans are described as written (19 fields)."""
    v3, v4 = trajectory_schema(3), trajectory_schema(4)
    assert [n for n in v4.names if n != "abandoned"] == v3.names and v3.metadata[b"trajstore.schema_version"] == b"3"
    assert v4.names[v4.names.index("link_kind") + 1] == "abandoned"
    assert v4.field("abandoned").type == pa.bool_() and v4.field("abandoned").nullable
    span3, span4 = v3.field("spans").type.value_type, v4.field("spans").type.value_type
    new = ["logprob_mode", "started_at", "first_token_at", "ended_at", "usage_prompt_tokens",
           "usage_completion_tokens", "usage_cached_tokens"]
    assert span3.num_fields == 19 and [span4.field(i).name for i in range(span4.num_fields)] == [
        *(span3.field(i).name for i in range(span3.num_fields)), *new]
    assert span4.field("logprob_mode").type == pa.string() and span4.field("logprob_mode").nullable
    assert all(span4.field(n).type == pa.timestamp("us", tz="UTC") for n in new[1:4])
    assert all(span4.field(n).type == pa.int64() and span4.field(n).nullable for n in new[4:])
    assert LOGPROB_MODES == ("processed", "tempered", "raw")
    assert schema_description(4)["logprob_modes"] == list(LOGPROB_MODES) and "logprob_modes" not in schema_description(3)
