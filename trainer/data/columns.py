"""A shard's scalar columns as the current schema: older shards converted by the readers, and
a nullable column that an older shard lacks filled with nulls (a required one is refused)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from trajstore.reader import read_shard
from trajstore.schema import SCALAR_COLUMNS, TRAJECTORY_SCHEMA
from trajstore.store import ShardInfo, Store
from trajstore.trainer.data.errors import TrainDataError


def read_scalar_columns(store: Store, shard: ShardInfo) -> pa.Table:
    """The scalar columns (:data:`~trajstore.schema.SCALAR_COLUMNS`) of a shard as schema v3
    (:func:`trajstore.reader.read_shard`: older schemas converted, a nullable column that an
    older shard lacks, e.g. ``group_id`` or ``metadata``, filled with nulls)."""
    return read_shard(store, shard, columns=SCALAR_COLUMNS)


def with_missing_nullable_columns(table: pa.Table, columns: Sequence[str], *, shard: str) -> pa.Table:
    """`table` with every name of `columns` it lacks added as an all-null column of the current
    schema's type (nullable columns only), in the order of `columns` plus any others after.

    Raises:
        TrainDataError: a required (non-nullable) column of `columns` is missing.
    """
    out = []
    for c in columns:
        if c in table.column_names:
            out.append((c, table.column(c)))
            continue
        f = TRAJECTORY_SCHEMA.field(c)
        if not f.nullable:
            raise TrainDataError(f"shard {shard}: required column {c!r} is missing (schema too old or not a "
                                 "trajectory shard; `traj migrate` rewrites old shards)")
        out.append((c, pa.nulls(table.num_rows, type=f.type)))
    out += [(c, table.column(c)) for c in table.column_names if c not in columns]
    return pa.table(dict(out))
