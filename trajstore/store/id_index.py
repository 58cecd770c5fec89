"""The id index a trajectory shard keeps in its footer: sorted 64-bit hashes of its
``trajectory_id`` s with their row numbers, so a reader finds given ids without reading the column."""

from __future__ import annotations

import base64
import hashlib

import numpy as np
import pyarrow as pa

METADATA_ID_INDEX_KEY = b"trajstore.id_index"
"""Footer key of a shard's id index: base64 of ``uint64[n]`` sorted id hashes then ``uint32[n]``
row numbers in the same order (:func:`id_hashes`), so a reader finds the rows of given ids from
the footer it already read, without reading the ``trajectory_id`` column."""


def id_hashes(ids: pa.Array | pa.ChunkedArray | list[str]) -> np.ndarray:
    """uint64 (n,): the first 8 bytes of BLAKE2b of each id's UTF-8 (stable across processes)."""
    values = ids.to_pylist() if not isinstance(ids, list) else ids
    raw = b"".join(hashlib.blake2b(v.encode(), digest_size=8).digest() for v in values)
    return np.frombuffer(raw, dtype="<u8").copy()


def encode_id_index(ids: pa.Array | pa.ChunkedArray) -> bytes:
    """The footer value of :data:`METADATA_ID_INDEX_KEY` for a shard whose rows have `ids`."""
    h = id_hashes(ids)
    order = np.argsort(h, kind="stable")
    return base64.b64encode(h[order].astype("<u8").tobytes() + order.astype("<u4").tobytes())


def decode_id_index(value: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(sorted uint64 hashes, uint32 row numbers) from :func:`encode_id_index`'s bytes."""
    raw = base64.b64decode(value)
    n = len(raw) // 12
    return np.frombuffer(raw[:8 * n], dtype="<u8"), np.frombuffer(raw[8 * n:], dtype="<u4")
