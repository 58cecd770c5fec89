"""Conversion between SDK models (:class:`~trajstore.models.Trajectory`) and Arrow tables of
schema v1. Per-token columns are built from concatenated numpy arrays (no per-token Python)."""

from __future__ import annotations

import json
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from trajstore.models import Span, Trajectory
from trajstore.schema import SPAN_FIELDS, SPAN_TYPE, TRAJECTORY_SCHEMA


def _derived(t: Trajectory) -> dict[str, Any]:
    counts = {"prompt": 0, "action": 0, "observation": 0}
    n_actions = n_obs = 0
    versions = []
    for s in t.spans:
        counts[s.kind] = counts.get(s.kind, 0) + (s.end - s.start)
        if s.kind == "action":
            n_actions += 1
            if s.policy_version is not None:
                versions.append(s.policy_version)
        elif s.kind == "observation":
            n_obs += 1
    trainable = counts["action"] > 0 and t.not_trainable_reason is None
    return {
        "trainable": trainable,
        "not_trainable_reason": None if trainable else t.not_trainable_reason or "no action tokens",
        "min_policy_version": min(versions) if versions else None,
        "max_policy_version": max(versions) if versions else None,
        "num_tokens": len(t.tokens),
        "num_prompt_tokens": counts["prompt"],
        "num_action_tokens": counts["action"],
        "num_observation_tokens": counts["observation"],
        "num_actions": n_actions,
        "num_observations": n_obs,
    }


def _large_list(arrays: Sequence[np.ndarray], dtype: np.dtype, with_nulls: bool) -> pa.LargeListArray:
    lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.zeros(0, dtype)
    if with_nulls:
        values = pa.array(flat, mask=np.isnan(flat))
    else:
        values = pa.array(flat)
    return pa.LargeListArray.from_arrays(pa.array(offsets), values)


def _spans_array(trajectories: Sequence[Trajectory], list_type: pa.ListType) -> pa.ListArray:
    """The ``spans`` column built field by field (one Arrow array per span field, then offsets),
    which avoids a Python dict per span."""
    counts = np.fromiter((len(t.spans) for t in trajectories), dtype=np.int32, count=len(trajectories))
    offsets = np.zeros(len(trajectories) + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    get = operator.attrgetter(*(f.name for f, _ in SPAN_FIELDS))
    rows = [get(s) for t in trajectories for s in t.spans]
    columns = list(zip(*rows)) if rows else [()] * len(SPAN_FIELDS)
    children = [pa.array(col, type=f.type) for col, (f, _) in zip(columns, SPAN_FIELDS)]
    values = pa.StructArray.from_arrays(children, fields=list(SPAN_TYPE))
    return pa.ListArray.from_arrays(pa.array(offsets), values, type=list_type)


def trajectories_to_table(trajectories: Sequence[Trajectory]) -> pa.Table:
    """Arrow table of schema v1 with one row per trajectory (derived columns computed here).

    Log-prob NaNs become Arrow nulls. Inputs are assumed validated.
    """
    rows: dict[str, list[Any]] = {f.name: [] for f in TRAJECTORY_SCHEMA if f.name not in ("tokens", "logprobs", "spans")}
    for t in trajectories:
        d = _derived(t)
        for name in rows:
            if name in d:
                rows[name].append(d[name])
            elif name == "metadata":
                rows[name].append(json.dumps(t.metadata, sort_keys=True, default=str) if t.metadata else None)
            else:
                rows[name].append(getattr(t, name))
    columns: dict[str, pa.Array] = {}
    for f in TRAJECTORY_SCHEMA:
        if f.name == "tokens":
            columns[f.name] = _large_list([t.tokens for t in trajectories], np.int32, with_nulls=False)
        elif f.name == "logprobs":
            columns[f.name] = _large_list([t.logprobs for t in trajectories], np.float32, with_nulls=True)
        elif f.name == "spans":
            columns[f.name] = _spans_array(trajectories, f.type)
        else:
            columns[f.name] = pa.array(rows[f.name], type=f.type)
    return pa.Table.from_arrays(list(columns.values()), schema=TRAJECTORY_SCHEMA)


def table_to_trajectories(table: pa.Table) -> list[Trajectory]:
    """Inverse of :func:`trajectories_to_table` (derived columns are dropped; nulls -> NaN)."""
    out = []
    tokens_col = table.column("tokens").combine_chunks()
    lp_col = table.column("logprobs").combine_chunks()
    tok_off = tokens_col.offsets.to_numpy()
    tok_val = tokens_col.values.to_numpy()
    lp_off = lp_col.offsets.to_numpy()
    lp_val = lp_col.values.to_numpy(zero_copy_only=False)  # nulls -> NaN
    scalars = table.select([n for n in ("trajectory_id", "prompt_id", "group_id", "source", "model",
                                        "tokenizer", "created_at", "status", "reward", "reward_raw",
                                        "token_source", "logprob_source", "metadata")]).to_pylist()
    # a declared reason (not the derived "no action tokens") goes back into the model
    declared = [None if t or r == "no action tokens" else r for t, r in zip(
        table.column("trainable").to_pylist(), table.column("not_trainable_reason").to_pylist())] \
        if "not_trainable_reason" in table.column_names else [None] * table.num_rows
    spans = table.column("spans").to_pylist()
    span_names = [f.name for f, _ in SPAN_FIELDS]
    for i, row in enumerate(scalars):
        row["metadata"] = json.loads(row["metadata"]) if row["metadata"] else {}
        out.append(Trajectory(
            **row,
            not_trainable_reason=declared[i],
            tokens=tok_val[tok_off[i]:tok_off[i + 1]],
            logprobs=lp_val[lp_off[i]:lp_off[i + 1]].astype(np.float32),
            spans=[Span(**{k: s[k] for k in span_names}) for s in spans[i]],
        ))
    return out


assert SPAN_TYPE.num_fields == len(SPAN_FIELDS)
