"""Conversion between SDK models (:class:`~trajstore.models.Trajectory`) and Arrow tables of
schema v4, and of tables read from older shards (v1 to v3) into v4. Per-token columns are built from
concatenated numpy arrays (no per-token Python)."""

from __future__ import annotations

import json
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from trajstore.lineage import episode_id_column, episode_id_of
from trajstore.models import Span, Trajectory
from trajstore.schema import (
    ACTION_LOGPROBS_COLUMN,
    COLUMNS_NEW_IN_V3,
    DERIVED_SPAN_FIELDS,
    LEGACY_LOGPROBS_COLUMN,
    READABLE_VERSIONS,
    SCHEMA_VERSION,
    SPAN_FIELDS,
    SPAN_FIELDS_V1,
    SPAN_TYPE,
    TRAJECTORY_SCHEMA,
    TRAJECTORY_SCHEMA_V1,
    TRAJECTORY_SCHEMA_V2,
    TRAJECTORY_SCHEMA_V3,
)


def derived_columns(t: Trajectory) -> dict[str, Any]:
    """The columns the writer derives from a trajectory's spans and tokens (``trainable``,
    ``not_trainable_reason``, ``min/max_policy_version``, ``num_*``), by column name. The writer
    stores them and ``traj validate`` recomputes them to check a stored row (one rule)."""
    counts = {"prompt": 0, "action": 0, "observation": 0}
    n_actions = n_obs = 0
    versions = []
    for s in t.spans:
        counts[s.kind] = counts.get(s.kind, 0) + (s.end - s.start)
        if s.kind == "action":
            n_actions += 1
            if s.policy_version is not None:
                versions.append(s.policy_version)
            if s.policy_version_max is not None:  # a mixed-version span: its newest version counts too
                versions.append(s.policy_version_max)
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


def _large_list(arrays: Sequence[np.ndarray], dtype: np.dtype, list_type: pa.DataType) -> pa.LargeListArray:
    lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.zeros(0, dtype)
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(flat), type=list_type)


def ranges_positions(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(starts[i], starts[i] + lengths[i])`` for all i, vectorised.

    Args:
        starts, lengths: int64 (K,). Lengths must be >= 0.

    Returns:
        int64 (sum(lengths),): the positions of every range, in order.
    """
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    # Position j of the output lies in range r(j); it equals starts[r] + (j - first output index of r).
    firsts = np.cumsum(lengths) - lengths
    return np.repeat(starts - firsts, lengths) + np.arange(total, dtype=np.int64)


def segment_sums(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Sums of consecutive segments of `values` (K segments of `lengths`, empty ones give 0)."""
    c = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(values, out=c[1:])
    ends = np.cumsum(np.asarray(lengths, dtype=np.int64))
    return c[ends] - c[ends - lengths]


def _spans_array(trajectories: Sequence[Trajectory], list_type: pa.ListType,
                 derived: dict[str, np.ndarray]) -> pa.ListArray:
    """The ``spans`` column built field by field (one Arrow array per span field, then offsets),
    which avoids a Python dict per span. `derived` holds each derived span field per span in
    order, -1 on non-action spans (stored as null)."""
    counts = np.fromiter((len(t.spans) for t in trajectories), dtype=np.int32, count=len(trajectories))
    offsets = np.zeros(len(trajectories) + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    model_fields = [f for f, _ in SPAN_FIELDS if f.name not in DERIVED_SPAN_FIELDS]
    get = operator.attrgetter(*(f.name for f in model_fields))
    rows = [get(s) for t in trajectories for s in t.spans]
    columns = list(zip(*rows)) if rows else [()] * len(model_fields)
    by_name = {f.name: pa.array(col, type=f.type) for col, f in zip(columns, model_fields)}
    for name, arr in derived.items():
        by_name[name] = pa.array(arr, type=pa.int64(), mask=arr < 0)
    children = [by_name[f.name] for f, _ in SPAN_FIELDS]
    values = pa.StructArray.from_arrays(children, fields=list(SPAN_TYPE))
    return pa.ListArray.from_arrays(pa.array(offsets), values, type=list_type)


def trajectories_to_table(trajectories: Sequence[Trajectory], *, version: int = SCHEMA_VERSION) -> pa.Table:
    """Arrow table of schema `version` with one row per trajectory (derived columns computed here).

    v4 (default): the SDK model's full-length log-probs (NaN outside actions) are cut to the
    action tokens in token order (see :mod:`trajstore.schema`); NaN inside an action stays NaN
    and is counted in ``num_missing_logprobs``; ``schema_version`` is 4 and an unset
    ``episode_id`` is :func:`episode_id_of`. ``version=1`` to ``version=3`` build the old
    layouts (v1: full-length log-probs, NaN -> null; v2: v3 without the new columns, the
    log-prob column named ``logprobs``; v3: v4 without the span fields new in v4), which only
    benchmarks and tests of the read and migrate paths need. Inputs are assumed validated.

    Raises:
        ValueError: `version` is not 1 to 4.
    """
    if version == 1:
        return _trajectories_to_table_v1(trajectories)
    if version == 3:
        v4 = trajectories_to_table(trajectories)
        cols = {f.name: v4.column(f.name).cast(f.type) for f in TRAJECTORY_SCHEMA_V3}  # spans: v4's fields dropped
        cols["schema_version"] = pa.array(np.full(v4.num_rows, 3, np.int64))
        return pa.Table.from_pydict(cols, schema=TRAJECTORY_SCHEMA_V3)
    if version == 2:
        v3 = trajectories_to_table(trajectories, version=3)
        v3 = v3.drop_columns(list(COLUMNS_NEW_IN_V3)).rename_columns(
            [LEGACY_LOGPROBS_COLUMN if n == ACTION_LOGPROBS_COLUMN else n for n in v3.column_names
             if n not in COLUMNS_NEW_IN_V3])
        return pa.Table.from_arrays(v3.columns, schema=TRAJECTORY_SCHEMA_V2)
    if version != SCHEMA_VERSION:
        raise ValueError(f"cannot write schema version {version}")
    rows: dict[str, list[Any]] = {f.name: [] for f in TRAJECTORY_SCHEMA
                                  if f.name not in ("tokens", ACTION_LOGPROBS_COLUMN, "spans", "num_missing_logprobs")}
    act_starts: list[int] = []   # flat (batch-wide) token index of each action span's first token
    act_lens: list[int] = []
    act_row: list[int] = []      # trajectory (row) of each action span
    span_is_action: list[bool] = []
    base = 0
    for row, t in enumerate(trajectories):
        d = derived_columns(t)
        for name in rows:
            if name in d:
                rows[name].append(d[name])
            elif name == "metadata":
                rows[name].append(metadata_json(t.metadata))
            elif name == "schema_version":
                rows[name].append(SCHEMA_VERSION)
            elif name == "episode_id":
                rows[name].append(t.episode_id or episode_id_of(t.trajectory_id, t.metadata))
            else:
                rows[name].append(getattr(t, name))
        for s in t.spans:
            is_act = s.kind == "action"
            span_is_action.append(is_act)
            if is_act:
                act_starts.append(base + s.start)
                act_lens.append(s.end - s.start)
                act_row.append(row)
        base += len(t.tokens)
    lens = np.asarray(act_lens, dtype=np.int64)
    full = (np.concatenate([t.action_logprobs for t in trajectories]).astype(np.float32, copy=False)
            if trajectories else np.zeros(0, np.float32))
    action_lp = full[ranges_positions(np.asarray(act_starts, dtype=np.int64), lens)]
    n_act = np.asarray(rows["num_action_tokens"], dtype=np.int64)
    lp_offsets = np.zeros(len(trajectories) + 1, dtype=np.int64)
    np.cumsum(n_act, out=lp_offsets[1:])
    is_action = np.asarray(span_is_action, dtype=bool)
    derived = {name: np.full(len(span_is_action), -1, dtype=np.int64) for name in DERIVED_SPAN_FIELDS}
    nan = np.isnan(action_lp)
    if nan.any():
        derived["num_missing_logprobs"][is_action] = segment_sums(nan, lens)
        missing_per_traj = segment_sums(nan, n_act)
    else:  # the usual case (engine log-probs for every action token): no prefix sums needed
        derived["num_missing_logprobs"][is_action] = 0
        missing_per_traj = np.zeros(len(trajectories), dtype=np.int64)
    derived["logprob_start"][is_action] = (np.cumsum(lens) - lens) - lp_offsets[np.asarray(act_row, dtype=np.int64)]

    columns: dict[str, pa.Array] = {}
    for f in TRAJECTORY_SCHEMA:
        if f.name == "tokens":
            columns[f.name] = _large_list([t.tokens for t in trajectories], np.int32, f.type)
        elif f.name == ACTION_LOGPROBS_COLUMN:
            columns[f.name] = pa.LargeListArray.from_arrays(pa.array(lp_offsets), pa.array(action_lp), type=f.type)
        elif f.name == "spans":
            columns[f.name] = _spans_array(trajectories, f.type, derived)
        elif f.name == "num_missing_logprobs":
            columns[f.name] = pa.array(missing_per_traj, type=f.type)
        else:
            columns[f.name] = pa.array(rows[f.name], type=f.type)
    return pa.Table.from_arrays(list(columns.values()), schema=TRAJECTORY_SCHEMA)


def _trajectories_to_table_v1(trajectories: Sequence[Trajectory]) -> pa.Table:
    schema = TRAJECTORY_SCHEMA_V1
    columns: dict[str, pa.Array] = {}
    derived = [derived_columns(t) for t in trajectories]
    v1_span_fields = [f for f, _ in SPAN_FIELDS_V1]
    for f in schema:
        if f.name == "tokens":
            columns[f.name] = _large_list([t.tokens for t in trajectories], np.int32, f.type)
        elif f.name == LEGACY_LOGPROBS_COLUMN:
            lengths = np.fromiter((len(t.action_logprobs) for t in trajectories), dtype=np.int64,
                                  count=len(trajectories))
            offsets = np.zeros(len(trajectories) + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
            flat = (np.concatenate([t.action_logprobs for t in trajectories]).astype(np.float32, copy=False)
                    if trajectories else np.zeros(0, np.float32))
            columns[f.name] = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(flat, mask=np.isnan(flat)),
                                                            type=f.type)
        elif f.name == "spans":
            get = operator.attrgetter(*(g.name for g in v1_span_fields))
            rows = [get(s) for t in trajectories for s in t.spans]
            cols = list(zip(*rows)) if rows else [()] * len(v1_span_fields)
            counts = np.fromiter((len(t.spans) for t in trajectories), dtype=np.int32, count=len(trajectories))
            offsets = np.zeros(len(trajectories) + 1, dtype=np.int32)
            np.cumsum(counts, out=offsets[1:])
            values = pa.StructArray.from_arrays([pa.array(c, type=g.type) for c, g in zip(cols, v1_span_fields)],
                                                fields=v1_span_fields)
            columns[f.name] = pa.ListArray.from_arrays(pa.array(offsets), values, type=f.type)
        elif f.name == "metadata":
            columns[f.name] = pa.array([metadata_json(t.metadata) for t in trajectories], type=f.type)
        elif derived and f.name in derived[0]:
            columns[f.name] = pa.array([d[f.name] for d in derived], type=f.type)
        else:
            columns[f.name] = pa.array([getattr(t, f.name) for t in trajectories], type=f.type)
    return pa.Table.from_arrays(list(columns.values()), schema=schema)


def metadata_json(metadata: dict[str, Any]) -> str | None:
    """The ``metadata`` column's text: standard JSON (sorted keys), None for an empty object.

    Raises:
        ValueError: a float in it is NaN or infinite (not standard JSON; validation reports it first).
    """
    if not metadata:
        return None
    return json.dumps(metadata, sort_keys=True, default=str, allow_nan=False)


def action_positions(spans_kind: np.ndarray, spans_start: np.ndarray, spans_end: np.ndarray,
                     span_base: np.ndarray) -> np.ndarray:
    """Flat token index of every action token, in order.

    Args:
        spans_kind: bool (S,), True for action spans. spans_start, spans_end: int64 (S,),
            token offsets inside their trajectory. span_base: int64 (S,), flat index of the
            first token of each span's trajectory.

    Returns:
        int64 (A,), A = total action tokens.
    """
    st = (span_base + spans_start)[spans_kind]
    return ranges_positions(st, (spans_end - spans_start)[spans_kind])


def table_to_trajectories(table: pa.Table) -> list[Trajectory]:
    """Inverse of :func:`trajectories_to_table` for a schema-v4 table (derived columns are
    dropped; log-probs are expanded to the SDK's full length, NaN outside action spans; lineage
    columns the table lacks are None, and an ``episode_id`` equal to the writer's default
    (:func:`episode_id_of`) is None, as in a model that named none)."""
    out = []
    tokens_col = table.column("tokens").combine_chunks()
    lp_col = table.column(ACTION_LOGPROBS_COLUMN).combine_chunks()
    tok_off = tokens_col.offsets.to_numpy()
    tok_val = tokens_col.values.to_numpy()
    lp_off = lp_col.offsets.to_numpy()
    lp_val = lp_col.values.to_numpy(zero_copy_only=False)
    lineage = [n for n in ("episode_id", "parent_trajectory_id", "fork_point", "link_kind", "abandoned")
               if n in table.column_names]
    scalars = table.select([n for n in ("trajectory_id", "prompt_id", "group_id", *lineage, "source", "model",
                                        "tokenizer", "created_at", "status", "reward", "reward_raw",
                                        "token_source", "logprob_source", "metadata")]).to_pylist()
    # a declared reason (not the derived "no action tokens") goes back into the model
    declared = [None if t or r == "no action tokens" else r for t, r in zip(
        table.column("trainable").to_pylist(), table.column("not_trainable_reason").to_pylist())] \
        if "not_trainable_reason" in table.column_names else [None] * table.num_rows
    spans = table.column("spans").to_pylist()
    span_names = [f.name for f, _ in SPAN_FIELDS if f.name not in DERIVED_SPAN_FIELDS]
    for i, row in enumerate(scalars):
        row["metadata"] = json.loads(row["metadata"]) if row["metadata"] else {}
        if row.get("episode_id") == episode_id_of(row["trajectory_id"], row["metadata"]):
            row["episode_id"] = None  # the writer's default, as the model had it (None = derived)
        tok = tok_val[tok_off[i]:tok_off[i + 1]]
        full = np.full(len(tok), np.nan, dtype=np.float32)
        acts = [(s["start"], s["end"]) for s in spans[i] if s["kind"] == "action"]
        pos = ranges_positions(np.array([a for a, _ in acts], np.int64), np.array([b - a for a, b in acts], np.int64))
        full[pos] = lp_val[lp_off[i]:lp_off[i + 1]]
        out.append(Trajectory(
            **row, not_trainable_reason=declared[i], tokens=tok, action_logprobs=full,
            spans=[Span(**{k: s[k] for k in span_names}) for s in spans[i]],
        ))
    return out


# -- older schema versions ---------------------------------------------------------------------


def read_columns(columns: Sequence[str] | None, version: int) -> list[str] | None:
    """Columns to read from a shard of schema `version` to produce `columns` of the current
    schema (None = all) with :func:`upgrade_table`.

    v3: `columns` as they are (only the spans and ``schema_version`` change). v2:
    ``action_logprobs`` is v2's ``logprobs``; ``episode_id``
    needs ``trajectory_id`` and ``metadata``; ``schema_version`` and the other lineage columns
    need only ``trajectory_id`` (for the row count). v1: as v2, and ``action_logprobs`` and
    ``spans`` are rebuilt from ``spans``, ``logprob_source`` and ``num_action_tokens`` (and v1's
    full-length ``logprobs`` when asked for); ``num_missing_logprobs`` alone from
    ``logprob_source`` and ``num_action_tokens``.

    Raises:
        ValueError: `version` is not readable.
    """
    if version not in READABLE_VERSIONS:
        raise ValueError(f"cannot convert schema version {version} (this package reads {list(READABLE_VERSIONS)})")
    if columns is None or version >= 3:
        return None if columns is None else list(columns)
    wanted = [LEGACY_LOGPROBS_COLUMN if c == ACTION_LOGPROBS_COLUMN else c for c in columns]
    old_names = set((TRAJECTORY_SCHEMA_V1 if version == 1 else TRAJECTORY_SCHEMA_V2).names)
    need = [c for c in wanted if c in old_names]
    if set(COLUMNS_NEW_IN_V3) & set(columns):
        need.append("trajectory_id")
    if "episode_id" in columns:
        need.append("metadata")
    if version == 1:
        if {LEGACY_LOGPROBS_COLUMN, "spans"} & set(wanted):
            need += ["spans", "logprob_source", "num_action_tokens"]
        elif "num_missing_logprobs" in wanted:  # v1's write-time rule needs no spans (a scalar read stays scalar)
            need += ["logprob_source", "num_action_tokens"]
    return list(dict.fromkeys(need))


def upgrade_table(table: pa.Table, version: int, *, columns: Sequence[str] | None = None) -> pa.Table:
    """A table read from a shard of schema `version` as schema v4 (the current one).

    v1 -> v2: ``logprobs`` keeps only the action tokens' values, in token order, nulls -> NaN;
    the spans gain ``num_missing_logprobs`` (NaN/null action tokens of the span) and the row
    ``num_missing_logprobs``. Without v1's ``logprobs`` in `table`, the counts follow v1's
    write-time rule (engine: every action token has a log-prob; none: none has).

    v2 -> v3: ``logprobs`` is renamed ``action_logprobs`` (values unchanged, bit for bit);
    ``schema_version`` is the current version (the layout the row now has; the footer keeps the file's);
    ``episode_id`` is :func:`episode_id_of` (metadata ``episode.id`` of a split episode's part,
    else ``trajectory_id``); ``parent_trajectory_id``, ``fork_point`` and ``link_kind`` are null.

    v3 -> v4: each span gains the fields new in v4 (:data:`~trajstore.schema.SPAN_FIELDS_NEW_IN_V4`:
    ``logprob_mode``, call timing and usage) as null (not recorded), the row the columns new in v4
    (``abandoned``) as null; ``schema_version`` is 4.

    Args:
        table: columns read with :func:`read_columns` (any subset of the `version` schema).
        version: the shard's schema version.
        columns: v4 columns wanted, in order (None = the whole v4 schema).

    Returns:
        `columns` of schema v4 (missing nullable columns filled with nulls).

    Raises:
        ValueError: unknown `version`.
    """
    if version == SCHEMA_VERSION:
        return conform_table(table, columns)
    if version not in (1, 2, 3):
        raise ValueError(f"cannot convert schema version {version} (this package reads {list(READABLE_VERSIONS)})")
    cols = dict(zip(table.column_names, table.columns))
    if version == 1 and "spans" in cols:
        sp = _combined(cols["spans"])
        sp_off = sp.offsets.to_numpy().astype(np.int64)
        sp_off = sp_off - sp_off[0]
        values = sp.values.slice(int(sp.offsets[0].as_py()), int(sp_off[-1]))
        kind = pc.equal(values.field("kind"), "action").to_numpy(zero_copy_only=False)
        start = values.field("start").to_numpy(zero_copy_only=False).astype(np.int64)
        end = values.field("end").to_numpy(zero_copy_only=False).astype(np.int64)
        lens = np.where(kind, end - start, 0)
        spans_per_row = np.diff(sp_off)
        n_act = segment_sums(lens, spans_per_row)
        if LEGACY_LOGPROBS_COLUMN in cols:
            lp = _combined(cols[LEGACY_LOGPROBS_COLUMN])
            lp_off = lp.offsets.to_numpy().astype(np.int64)
            flat = lp.values.slice(int(lp_off[0]), int(lp_off[-1] - lp_off[0]))
            flat_np = flat.to_numpy(zero_copy_only=False).astype(np.float32)  # nulls -> NaN
            base = np.repeat(lp_off[:-1] - lp_off[0], spans_per_row)
            pos = ranges_positions((base + start)[kind], lens[kind])
            action_lp = flat_np[pos]
            missing_act = segment_sums(np.isnan(action_lp), lens[kind])
        else:
            action_lp = None
            none = np.repeat(pc.equal(cols["logprob_source"], "none").to_numpy(zero_copy_only=False), spans_per_row)
            missing_act = np.where(none[kind], lens[kind], 0)
        missing = np.full(len(kind), -1, dtype=np.int64)
        missing[kind] = missing_act
        # logprob_start: action tokens of the same row's earlier spans
        before = np.cumsum(lens) - lens
        row_first = np.repeat(np.cumsum(n_act) - n_act, spans_per_row)
        lp_start = np.where(kind, before - row_first, -1)
        derived = {"logprob_start": lp_start, "num_missing_logprobs": missing}
        v1_names = {f.name for f, _ in SPAN_FIELDS_V1}
        children = [values.field(f.name) if f.name in v1_names
                    else pa.array(derived[f.name], type=pa.int64(), mask=derived[f.name] < 0)
                    if f.name in derived else pa.nulls(len(values), f.type)  # new in v2, unknown in v1
                    for f, _ in SPAN_FIELDS]
        new_values = pa.StructArray.from_arrays(children, fields=list(SPAN_TYPE), mask=None)
        cols["spans"] = pa.ListArray.from_arrays(pa.array(sp_off.astype(np.int32)), new_values,
                                                 type=TRAJECTORY_SCHEMA.field("spans").type)
        cols["num_missing_logprobs"] = pa.array(segment_sums(np.where(kind, missing, 0), spans_per_row), pa.int64())
        if action_lp is not None:
            off = np.zeros(len(n_act) + 1, dtype=np.int64)
            np.cumsum(n_act, out=off[1:])
            cols[LEGACY_LOGPROBS_COLUMN] = pa.LargeListArray.from_arrays(pa.array(off), pa.array(action_lp, pa.float32()),
                                                             type=TRAJECTORY_SCHEMA.field(ACTION_LOGPROBS_COLUMN).type)
    elif version == 1 and "logprob_source" in cols and "num_action_tokens" in cols:
        none = pc.equal(cols["logprob_source"], "none")
        cols["num_missing_logprobs"] = pc.if_else(none, cols["num_action_tokens"], 0)
    if version == 1 and LEGACY_LOGPROBS_COLUMN in cols and pa.types.is_large_list(cols[LEGACY_LOGPROBS_COLUMN].type) and \
            cols[LEGACY_LOGPROBS_COLUMN].type.value_field.nullable:
        raise ValueError("v1 logprobs cannot be converted without the spans column")
    want = list(columns) if columns is not None else TRAJECTORY_SCHEMA.names
    if version < 3:  # v2 -> v3
        if LEGACY_LOGPROBS_COLUMN in cols:
            cols[ACTION_LOGPROBS_COLUMN] = cols.pop(LEGACY_LOGPROBS_COLUMN)
        if "episode_id" in want and "trajectory_id" in cols:
            cols["episode_id"] = episode_id_column(cols["trajectory_id"], cols.get("metadata"))
    if "schema_version" in want:
        cols["schema_version"] = pa.array(np.full(table.num_rows, SCHEMA_VERSION, np.int64))
    # v3 -> v4: conform_table casts the spans to v4's struct, which adds the new fields as nulls
    return conform_table(pa.table(cols) if cols else table, want)


def _combined(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    return col


def conform_table(table: pa.Table, columns: Sequence[str] | None = None) -> pa.Table:
    """`columns` (default: every schema-v4 column) of `table` in that order, with the schema's
    types; a column the shard lacks is filled with nulls (older shards may lack a nullable
    column such as ``group_id``). The schema's field docs and version travel along.

    Raises:
        ValueError: a required (non-nullable) column is missing, or a name is not in the schema.
    """
    want = list(columns) if columns is not None else TRAJECTORY_SCHEMA.names
    arrays, fields = [], []
    for name in want:
        i = TRAJECTORY_SCHEMA.get_field_index(name)
        if i < 0:
            raise ValueError(f"no column {name!r} in the trajectory schema")
        f = TRAJECTORY_SCHEMA.field(i)
        if name in table.column_names:
            col = table.column(name)
            arrays.append(col if col.type.equals(f.type) else col.cast(f.type))
        elif f.nullable:
            arrays.append(pa.nulls(table.num_rows, f.type))
        else:
            raise ValueError(f"required column {name!r} is missing")
        fields.append(f)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=TRAJECTORY_SCHEMA.metadata))


assert SPAN_TYPE.num_fields == len(SPAN_FIELDS)
