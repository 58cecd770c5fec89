"""Padding ragged per-sample arrays into (B, L) batches, left or right, and position ids from an
attention mask: the small numpy helpers the padded layouts (verl, AReaL, OpenRLHF) share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np


def pad(rows: Sequence[np.ndarray], *, value: float | int, dtype: np.dtype | type, side: Literal["left", "right"],
        width: int | None = None) -> np.ndarray:
    """Stack 1-D arrays into one (B, L) array, padding each with `value` on `side`.

    Args:
        rows: B arrays of any lengths.
        width: L; default the longest row (0 for no rows).

    Returns:
        Shape (B, L), `dtype`.

    Raises:
        ValueError: a row is longer than `width`.
    """
    n = max((len(r) for r in rows), default=0) if width is None else width
    out = np.full((len(rows), n), value, dtype=dtype)
    for i, r in enumerate(rows):
        if len(r) > n:
            raise ValueError(f"row {i} has {len(r)} values, more than the width {n}")
        if len(r):
            if side == "left":
                out[i, n - len(r):] = r
            else:
                out[i, :len(r)] = r
    return out


def position_ids(attention_mask: np.ndarray) -> np.ndarray:
    """Positions of the real tokens, counted from 0 at the first one, 0 on padding before it.

    ``clip(cumsum(mask) - 1, 0)`` along the last axis: verl's ``compute_position_id_with_mask``
    (verl/utils/model.py, verl 0.9.1). Shape as `attention_mask` (B, L), int64.
    """
    return np.clip(np.cumsum(attention_mask.astype(np.int64), axis=-1) - 1, 0, None)
