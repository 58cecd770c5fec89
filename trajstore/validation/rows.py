"""Row rules of stored trajectories, checked one Arrow table (a Parquet row group) at a time.

Each row is rebuilt as the SDK's :class:`~trajstore.models.Trajectory` (log-probs expanded to the
SDK's full length; spans as plain attribute records, which is all the rules read: building 10+
pydantic spans per row cost a third of the time) and checked by the SDK's own rules,
:func:`trajstore.validate.find_violations`;
then the columns the writer derives (:func:`trajstore.convert.derived_columns`: counts, min/max
policy version, ``trainable``) and the stored log-prob layout of the file's schema version are
compared with what the row's spans and tokens give. No rule is written twice.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa

from trajstore.convert import derived_columns, ranges_positions
from trajstore.errors import Violation
from trajstore.models import Trajectory
from trajstore.schema import (
    ACTION_LOGPROBS_COLUMN,
    DERIVED_SPAN_FIELDS,
    LEGACY_LOGPROBS_COLUMN,
    SPAN_FIELDS,
    trajectory_schema,
)
from trajstore.validate import find_violations

_SPAN_DEFAULTS = {f.name: None for f, _ in SPAN_FIELDS}
"""Every span attribute the rules read; a v1 row lacks the fields new in v2."""
_MODEL_SCALARS = ("trajectory_id", "prompt_id", "group_id", "episode_id", "parent_trajectory_id", "fork_point",
                  "link_kind", "source", "model", "tokenizer", "status", "reward", "reward_raw", "token_source",
                  "logprob_source")  # the lineage columns are null in v1 / v2 files
_NO_ACTION_REASON = "no action tokens"  # what the writer stores as not_trainable_reason without actions


def _flat_list(table: pa.Table, name: str, dtype: type) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(offsets int64 (n + 1,), values (V,), null mask of the values or None) of a list column."""
    col = table.column(name).combine_chunks()
    values = col.values
    nulls = None
    if values.null_count:
        nulls = np.asarray(values.is_null())
        values = values.fill_null(0)
    return col.offsets.to_numpy().astype(np.int64), values.to_numpy(zero_copy_only=False).astype(dtype), nulls


def _metadata(text: str | None) -> tuple[dict[str, Any], list[Violation]]:
    """The ``metadata`` column's JSON object (empty when null), or {} and why it is not one."""
    if text is None:
        return {}, []
    try:
        value = json.loads(text)
    except ValueError as e:
        return {}, [Violation("metadata", f"is not valid JSON ({str(e).splitlines()[0]})")]
    if not isinstance(value, dict):
        return {}, [Violation("metadata", f"must be a JSON object or null, got {type(value).__name__}")]
    return value, []


def _declared_reason(trainable: bool | None, reason: str | None) -> str | None:
    """The producer's own not-trainable reason, as :func:`trajstore.convert.table_to_trajectories`
    reads it back (the writer's derived "no action tokens" is not one)."""
    return None if trainable or reason == _NO_ACTION_REASON else reason


def logprobs_column(version: int) -> str:
    """Name of the log-prob column in a file of schema `version`."""
    return ACTION_LOGPROBS_COLUMN if version >= 3 else LEGACY_LOGPROBS_COLUMN


def _expand_logprobs(version: int, lp: np.ndarray, spans: list[dict[str, Any]], n: int
                     ) -> tuple[np.ndarray, list[Violation]]:
    """The SDK's full-length log-probs (NaN outside action tokens) of a stored row, and the
    layout rule of `version` it breaks: v2 and v3 hold one value per action token in token
    order; v1 is as long as ``tokens`` (its length is the SDK rule's to check)."""
    if version == 1:
        return lp, []
    acts = [(s["start"], s["end"]) for s in spans if s["kind"] == "action"]
    starts = np.array([a for a, _ in acts], dtype=np.int64)
    lens = np.maximum(np.array([b - a for a, b in acts], dtype=np.int64), 0)
    v: list[Violation] = []
    if len(lp) != int(lens.sum()):
        v.append(Violation(logprobs_column(version), f"{len(lp)} log-probs, but the action spans hold {int(lens.sum())} tokens "
                                       f"(schema v{version}: one per action token, in token order)"))
    ends = np.clip(starts + lens, 0, n)  # broken spans (their own rules) never index past the tokens
    pos = ranges_positions(np.clip(starts, 0, n), np.maximum(ends - np.clip(starts, 0, n), 0))
    m = min(len(pos), len(lp))
    full = np.full(n, np.nan, dtype=np.float32)
    full[pos[:m]] = lp[:m]
    return full, v


def _derived_violations(traj: Trajectory, stored: dict[str, Any]) -> list[Violation]:
    """Stored derived columns that disagree with what the writer derives from the row."""
    v = []
    for name, expected in derived_columns(traj).items():
        got = stored.get(name)
        if got != expected:
            source = "the action spans' policy versions" if "policy_version" in name else "the spans and tokens"
            v.append(Violation(name, f"is {got!r}, but {source} give {expected!r}"))
    return v


def _logprob_count_violations(lp: np.ndarray, spans: list[dict[str, Any]], stored_missing: Any,
                              layout_ok: bool, lp_name: str) -> list[Violation]:
    """Schema v2 / v3's derived log-prob columns: each action span's ``logprob_start`` (action
    tokens before it) and ``num_missing_logprobs`` (NaN in its slice), null on other spans, and
    the row's ``num_missing_logprobs`` (NaN in the log-prob column `lp_name`)."""
    v = []
    missing = int(np.isnan(lp).sum())
    if layout_ok and stored_missing != missing:
        v.append(Violation("num_missing_logprobs", f"is {stored_missing!r}, but {lp_name} holds {missing} NaN"))
    a = 0
    for k, s in enumerate(spans):
        if s["kind"] != "action":
            for name in DERIVED_SPAN_FIELDS:
                if s.get(name) is not None:
                    v.append(Violation(f"spans[{k}].{name}", f"must be null on a {s['kind']} span, got {s[name]}"))
            continue
        length = max(s["end"] - s["start"], 0)
        if s.get("logprob_start") != a:
            v.append(Violation(f"spans[{k}].logprob_start",
                               f"is {s.get('logprob_start')!r}, but {a} action tokens come before this span"))
        if layout_ok:
            miss = int(np.isnan(lp[a:a + length]).sum())
            if s.get("num_missing_logprobs") != miss:
                v.append(Violation(f"spans[{k}].num_missing_logprobs",
                                   f"is {s.get('num_missing_logprobs')!r}, but its log-probs hold {miss} NaN"))
        a += length
    return v


def row_violations(table: pa.Table, version: int) -> Iterator[tuple[int, str | None, list[Violation]]]:
    """Every row of `table` that breaks a rule, with all its broken rules.

    Args:
        table: rows of one file of schema `version` whose columns fit that schema
            (:func:`~trajstore.validation.columns.column_problems` found nothing); optional
            columns may be missing (read as null).
        version: the file's schema version (1, 2 or 3).

    Returns:
        An iterator of ``(row index in table, trajectory_id, violations)``, rows in order; rows
        without problems are not yielded. A row with a null in a required column is reported
        with those nulls only (it cannot be rebuilt for the other rules).
    """
    n_rows = table.num_rows
    names = set(table.column_names)

    def column(name: str) -> list[Any]:
        return table.column(name).to_pylist() if name in names else [None] * n_rows

    nulls: dict[int, list[Violation]] = {}
    for f in trajectory_schema(version):
        if not f.nullable and f.name in names and table.column(f.name).null_count:
            for i in np.flatnonzero(np.asarray(table.column(f.name).is_null())):
                nulls.setdefault(int(i), []).append(Violation(f.name, "is null in a required column"))
    derived_names = ("trainable", "not_trainable_reason", "min_policy_version", "max_policy_version", "num_tokens",
                     "num_prompt_tokens", "num_action_tokens", "num_observation_tokens", "num_actions",
                     "num_observations")
    cols = {name: column(name) for name in (*_MODEL_SCALARS, *derived_names, "metadata", "num_missing_logprobs",
                                            "schema_version")}
    spans_col = column("spans")
    lp_name = logprobs_column(version)
    tok_off, tok_val, tok_nulls = _flat_list(table, "tokens", np.int64)
    lp_off, lp_val, lp_nulls = _flat_list(table, lp_name, np.float32)
    if lp_nulls is not None:  # v1: null = no value, NaN in the SDK's arrays
        lp_val[lp_nulls] = np.nan
    for i in range(n_rows):
        tid = cols["trajectory_id"][i]
        if i in nulls:
            yield i, tid, nulls[i]
            continue
        v: list[Violation] = []
        if tok_nulls is not None and tok_nulls[tok_off[i]:tok_off[i + 1]].any():
            v.append(Violation("tokens", "holds null token ids"))
        if version >= 2 and lp_nulls is not None and lp_nulls[lp_off[i]:lp_off[i + 1]].any():
            v.append(Violation(lp_name, f"holds nulls (schema v{version} stores an unknown log-prob as NaN)"))
        tokens = tok_val[tok_off[i]:tok_off[i + 1]]
        lp = lp_val[lp_off[i]:lp_off[i + 1]]
        spans = spans_col[i]
        metadata, meta_v = _metadata(cols["metadata"][i])
        full, layout_v = _expand_logprobs(version, lp, spans, len(tokens))
        traj = Trajectory.model_construct(
            **{k: cols[k][i] for k in _MODEL_SCALARS},
            not_trainable_reason=_declared_reason(cols["trainable"][i], cols["not_trainable_reason"][i]),
            tokens=tokens, action_logprobs=full, metadata=metadata,
            spans=[SimpleNamespace(**{**_SPAN_DEFAULTS, **s}) for s in spans])
        own = find_violations(traj)
        if lp_name != ACTION_LOGPROBS_COLUMN:  # the SDK names the model field; the file has the old column
            own = [Violation(lp_name, x.message) if x.field == ACTION_LOGPROBS_COLUMN else x for x in own]
        v += meta_v + layout_v + own
        if version >= 3 and cols["schema_version"][i] != version:
            v.append(Violation("schema_version", f"is {cols['schema_version'][i]!r}, but the file's footer says {version}"))
        v += _derived_violations(traj, {k: cols[k][i] for k in derived_names})
        if version >= 2:
            v += _logprob_count_violations(lp, spans, cols["num_missing_logprobs"][i], layout_ok=not layout_v,
                                           lp_name=lp_name)
        if v:
            yield i, tid, v
