"""``traj show``: one trajectory fetched by id (:func:`trajstore.reader.read_trajectories_by_id`,
the process's merged id lookup: only the row group holding it is read) and made readable: its
scalar columns, the transcript span by span with kinds, roles and policy versions, and its flags.
Imports no web or SQL dependency, so a new process shows a trajectory in well under a second."""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa

from trajstore.errors import TrajstoreError
from trajstore.reader import read_trajectories_by_id
from trajstore.reader.files import StoreLike, as_store
from trajstore.schema import ACTION_LOGPROBS_COLUMN
from trajstore.store import CorruptShardWarning, Store
from trajstore.view.decode import Decoder
from trajstore.view.transcript import SpanView, span_views, trajectory_flags


class TrajectoryNotInStore(TrajstoreError):
    """No trajectory with that id in the store's readable shards.

    Attributes:
        unreadable: the shards (URLs) that could not be read: any of them may hold it.
    """

    def __init__(self, trajectory_id: str, store: str, unreadable: Sequence[str] = ()):
        self.unreadable = list(unreadable)
        if self.unreadable:
            super().__init__(
                f"no trajectory {trajectory_id!r} in the readable shards of {store}; {len(self.unreadable)} shard(s) "
                f"could not be read and may hold it: {', '.join(self.unreadable)} (`traj validate {store}` says "
                "why; restore or remove them)")
        else:
            super().__init__(f"no trajectory {trajectory_id!r} in {store}")


def read_one(store: Store, trajectory_id: str) -> pa.Table:
    """The stored row of `trajectory_id` (no row when absent), read like
    :func:`~trajstore.reader.read_trajectories_by_id`.

    Raises:
        TrajectoryNotInStore: no such row, naming the shards that could not be read (a damaged
            shard may hold it: "no such trajectory" alone would be wrong).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CorruptShardWarning)
        table = read_trajectories_by_id(store, [trajectory_id])
    unreadable = []
    for w in caught:
        if issubclass(w.category, CorruptShardWarning) and table.num_rows == 0:
            unreadable.append(getattr(w.message, "shard", None) or str(w.message))
        else:  # the row was found, or not ours to swallow: warn as usual
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if table.num_rows == 0:
        raise TrajectoryNotInStore(trajectory_id, store.url(), list(dict.fromkeys(unreadable)))
    return table


@dataclass
class ShownTrajectory:
    """One trajectory as ``traj show`` prints it.

    Attributes:
        row: its scalar columns (``trajectory_id``, ``status``, ``reward``, ``min_policy_version``,
            ``max_policy_version``, ``num_tokens``, ...; not ``tokens``, ``spans``,
            ``action_logprobs``). metadata: its metadata, parsed (None when absent or not JSON).
        spans: the transcript, decoded (token ids where the tokenizer cannot be loaded).
        flags: (name, what it means) of what ingest approximated or the row lacks.
        tokenizer_note: why token ids are shown instead of text (None when decoded).
    """

    trajectory_id: str
    row: dict[str, Any]
    metadata: dict[str, Any] | None
    spans: list[SpanView]
    flags: list[tuple[str, str]]
    tokenizer_note: str | None


def _naive(t: pa.DataType) -> pa.DataType:
    """`t` with every time-zone-aware timestamp (nested ones included) made naive (same values)."""
    if pa.types.is_timestamp(t) and t.tz is not None:
        return pa.timestamp(t.unit)
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_naive(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        field = t.value_field.with_type(_naive(t.value_type))
        return pa.large_list(field) if pa.types.is_large_list(t) else pa.list_(field)
    return t


def _aware(value: Any, tz: ZoneInfo) -> Any:
    if isinstance(value, datetime):
        return value.replace(tzinfo=tz) if value.tzinfo is None else value
    if isinstance(value, dict):
        return {k: _aware(v, tz) for k, v in value.items()}
    if isinstance(value, list):
        return [_aware(v, tz) for v in value]
    return value


def first_row(table: pa.Table) -> dict[str, Any]:
    """The first row of `table` as Python values, as ``to_pylist`` gives them (timestamps as
    UTC-aware datetimes), without importing pandas: pyarrow imports it to convert any
    time-zone-aware timestamp, about 0.7 s of ``traj show`` in a new process. The schema's
    timestamps are all UTC."""
    one = table.slice(0, 1)
    naive = pa.schema([f.with_type(_naive(f.type)) for f in one.schema])
    return _aware(one.cast(naive).to_pylist()[0], ZoneInfo("UTC"))


def show_trajectory(uri: StoreLike, trajectory_id: str, *, tokenizer: str | None = None,
                    storage_options: dict[str, Any] | None = None) -> ShownTrajectory:
    """The trajectory `trajectory_id` of the store at `uri`, decoded for reading.

    Args:
        tokenizer: decode with this tokenizer (alias, ``.gguf`` file or local Hugging Face
            folder) instead of the trajectory's own ``tokenizer`` column.

    Raises:
        TrajectoryNotInStore: no trajectory with that id (naming the shards that could not be read).
        StoreError: `uri` is not a store.
    """
    store = as_store(uri, storage_options)
    row = first_row(read_one(store, trajectory_id))
    tokens: list[int] = row.pop("tokens")
    row.pop(ACTION_LOGPROBS_COLUMN)
    raw_spans: list[dict[str, Any]] = row.pop("spans")
    try:
        metadata = json.loads(row["metadata"]) if row.get("metadata") else None
    except ValueError:
        metadata = None
    decoder = Decoder(tokenizer)
    tok, note = decoder.tokenizer(row.get("tokenizer"))
    return ShownTrajectory(trajectory_id=trajectory_id, row=row, metadata=metadata,
                           spans=span_views(raw_spans, tokens, tok, decoder),
                           flags=trajectory_flags(row, raw_spans, metadata), tokenizer_note=note)
