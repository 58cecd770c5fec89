"""Duplicate ``trajectory_id`` s: which rows are first copies in arrival order (the copies every
reader keeps); later copies are dropped."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def first_copy_mask(ids: pa.Array | pa.ChunkedArray, seen: set[str] | None = None) -> np.ndarray | None:
    """Boolean keep-mask for first occurrences, also dropping ids in `seen` (None when every id
    is new and distinct). O(len(ids)) whatever the size of `seen`."""
    if pc.count_distinct(ids).as_py() == len(ids) and (
            not seen or not any(t in seen for t in ids.to_pylist())):
        return None  # the usual case, found without building a mask
    keep = np.ones(len(ids), dtype=bool)
    local: set[str] = set()
    for i, t in enumerate(ids.to_pylist()):
        if (seen is not None and t in seen) or t in local:
            keep[i] = False
        else:
            local.add(t)
    return keep
