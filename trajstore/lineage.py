"""Lineage ids of stored trajectories: the ``episode_id`` a trajectory gets when it names none
(the writer's default, and the value given to rows converted from schema v1 / v2 shards; see
:mod:`trajstore.schema`, "Lineage")."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def episode_id_of(trajectory_id: str, metadata: dict[str, Any] | None) -> str:
    """The ``episode_id`` stored for a trajectory that names none: metadata ``episode.id`` of a
    part of a split episode (what ``traj proxy`` and ``traj ingest`` wrote before schema v3:
    ``{"episode": {"id", "part", "parts", "change"}}``; a plain string ``episode`` counts too),
    else the trajectory itself (a plain trajectory is its own episode). Used by the writer and
    when v1 / v2 rows are converted, so both give the same id."""
    ep = (metadata or {}).get("episode")
    eid = ep.get("id") if isinstance(ep, dict) else ep
    return eid if isinstance(eid, str) and eid else trajectory_id


def episode_id_column(trajectory_id: pa.ChunkedArray | pa.Array, metadata: pa.ChunkedArray | pa.Array | None) -> pa.Array:
    """The ``episode_id`` column of rows converted from v1 / v2 (:func:`episode_id_of` of each
    row's id and metadata JSON text); only rows whose metadata mentions ``"episode"`` are parsed.

    Args:
        trajectory_id: string (N,). metadata: JSON text (N,), or None (every row its own episode).

    Returns:
        string (N,), never null.
    """
    ids = _one_array(trajectory_id)
    if metadata is None:
        return ids
    meta = _one_array(metadata)
    hits = np.flatnonzero(pc.fill_null(pc.match_substring(meta, '"episode"'), False).to_numpy(zero_copy_only=False))
    if not len(hits):
        return ids
    out = ids.to_pylist()
    for i in hits.tolist():
        try:
            parsed = json.loads(meta[i].as_py())
        except ValueError:  # not JSON: `traj validate` names it; the row stays its own episode
            continue
        if isinstance(parsed, dict):
            out[i] = episode_id_of(out[i], parsed)
    return pa.array(out, pa.string())



def _one_array(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
