"""Replacing some rows of a shard's table by rewritten trajectories, every other row copied as
stored and the order kept (arrival order, duplicate resolution and training cursors, which name
a shard and a row, hold). Used by ``traj redact`` and by the proxy's late outcome."""

from __future__ import annotations

import pyarrow as pa

from trajstore.convert import trajectories_to_table
from trajstore.models import Trajectory
from trajstore.schema import TRAJECTORY_SCHEMA


def replace_rows(table: pa.Table, changed: dict[int, Trajectory]) -> pa.Table:
    """`table` (schema current) with the rows in `changed` (row index -> its new trajectory)
    replaced; every other row is copied as it is, and the order is kept."""
    new = trajectories_to_table([changed[i] for i in sorted(changed)])
    table = table.replace_schema_metadata(TRAJECTORY_SCHEMA.metadata).cast(new.schema)
    pieces, pos = [], 0
    for j, i in enumerate(sorted(changed)):
        if i > pos:
            pieces.append(table.slice(pos, i - pos))
        pieces.append(new.slice(j, 1))
        pos = i + 1
    if pos < table.num_rows:
        pieces.append(table.slice(pos))
    return pa.concat_tables(pieces).combine_chunks()
