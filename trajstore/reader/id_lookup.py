"""The per-process id lookup: every trajectory shard's footer id index merged into one sorted
``(id hash, shard, row)`` array, so a fetch by id finds its rows with one binary search instead
of listing the store and decoding each shard's index in turn.

One :class:`IdLookup` is kept per store URL and process (:func:`lookup_for`). It is built from a
listing (:meth:`trajstore.store.Store.list_shards`, which takes the footer facts from the shard
index: no footer is read for an indexed shard) and kept current as shards come and go:

- on a local store, a fetch compares the ``trajectories/`` folder's modification time (one
  ``stat``) with the one taken before the lookup's listing; any shard added, deleted, compacted
  or rewritten changes it, and the lookup is rebuilt;
- on any store, a fetch that misses an id, or meets a shard deleted since the lookup was built,
  rebuilds it once and fetches again (:func:`trajstore.reader.by_id.read_trajectories_by_id`):
  a new shard is seen by the first fetch that asks for one of its ids.

A rebuild lists the store again but decodes only the id indexes of shards it has not seen:
the decoded arrays of the others are kept. Memory: 16 bytes per trajectory (16 MiB at a
million). Lookups are exact: a hit's row is read and its ``trajectory_id`` compared (a hash
can collide), so a stale entry can cost a rebuild, never a wrong row.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

import numpy as np

from trajstore.store import ShardInfo, Store, decode_id_index, id_hashes
from trajstore.store.layout import TRAJECTORIES_DIR


@dataclass
class IdLookup:
    """The merged id index of one listing of a store's ``trajectories/``.

    Attributes:
        shards: the listed shards, in arrival order (an entry's ``shard`` indexes this).
        hashes: uint64 (n,) sorted id hashes (:func:`trajstore.store.id_hashes`) of every row
            of every shard with an id index; ties in (shard, row) order.
        shard_of: int32 (n,) the shard of each entry. row_of: uint32 (n,) its row in that shard.
        unindexed: int32 (k,) shards without an id index (written before it existed): their
            ``trajectory_id`` column is read on every fetch that reaches them.
        token: the folder's modification time (ns), the same before and after the listing
            (local stores; :data:`STALE` when it changed meanwhile), None where the store has
            none (object stores).
    """

    shards: list[ShardInfo]
    hashes: np.ndarray
    shard_of: np.ndarray
    row_of: np.ndarray
    unindexed: np.ndarray
    token: int | None
    decoded: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)
    """(sorted hashes, rows) of each shard's id index by (path, size), reused by the next rebuild."""

    def candidates(self, ids: list[str]) -> dict[int, np.ndarray | None]:
        """Shard -> sorted int64 rows that may hold one of `ids` (hash matches; an id stored
        twice has each copy), for the shards that have any, in arrival order, plus every
        unindexed shard (mapped to None: its ``trajectory_id`` column decides)."""
        if len(self.hashes) and ids:
            h = id_hashes(ids)
            lo = np.searchsorted(self.hashes, h, "left")
            hi = np.searchsorted(self.hashes, h, "right")
            hit = lo < hi
            idx = np.concatenate([np.arange(a, b) for a, b in zip(lo[hit], hi[hit])]) if hit.any() else \
                np.empty(0, np.int64)
        else:
            idx = np.empty(0, np.int64)
        shard, row = self.shard_of[idx], self.row_of[idx].astype(np.int64)
        order = np.lexsort((row, shard))
        shard, row = shard[order], row[order]
        out: dict[int, np.ndarray | None] = {}
        if len(shard):
            cuts = np.flatnonzero(np.diff(shard)) + 1
            for s, rows in zip(shard[np.r_[0, cuts]].tolist(), np.split(row, cuts)):
                out[s] = np.unique(rows)
        for s in self.unindexed.tolist():
            out[s] = None
        return dict(sorted(out.items()))


def folder_token(store: Store) -> int | None:
    """The ``trajectories/`` folder's modification time in ns on a local store (None elsewhere,
    and when the folder does not exist yet)."""
    if not store.is_local:
        return None
    try:
        return os.stat(store.path(TRAJECTORIES_DIR)).st_mtime_ns
    except FileNotFoundError:
        return None


def build(store: Store, *, strict: bool = False, previous: IdLookup | None = None) -> IdLookup:
    """A lookup from a fresh listing of `store` (reusing `previous`'s decoded shard indexes).

    Raises:
        CorruptShardError: with `strict`, a shard that cannot be read (as the listing does).
    """
    token = folder_token(store)
    shards = store.list_shards(TRAJECTORIES_DIR, strict=strict)
    if token != folder_token(store):
        # changed while listing (a writer, or the listing's own first shard-index folder): the
        # next fetch lists again rather than trust a listing that may predate the change
        token = STALE
    old = previous.decoded if previous is not None else {}
    decoded: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
    hs, ss, rs, unindexed = [], [], [], []
    for i, s in enumerate(shards):
        key = (s.path, s.size_bytes)
        got = old.get(key)
        if got is None and s.id_index is not None:
            got = decode_id_index(s.id_index)
        if got is None:
            unindexed.append(i)
            continue
        decoded[key] = got
        hs.append(got[0])
        rs.append(got[1])
        ss.append(np.full(len(got[0]), i, np.int32))
    if hs:
        h = np.concatenate(hs)
        order = np.argsort(h, kind="stable")  # shards concatenated in arrival order: ties stay in (shard, row) order
        hashes, shard_of, row_of = h[order], np.concatenate(ss)[order], np.concatenate(rs)[order]
    else:
        hashes, shard_of, row_of = np.empty(0, np.uint64), np.empty(0, np.int32), np.empty(0, np.uint32)
    return IdLookup(shards, hashes, shard_of, row_of, np.asarray(unindexed, np.int32), token, decoded)


STALE = -1
"""The token of a lookup whose folder changed during its listing (never a real time)."""
MAX_STORES = 64
"""Stores whose lookup a process keeps; the one used least recently is dropped beyond this."""
_LOOKUPS: dict[tuple[str, bool], IdLookup] = {}
"""The lookup of each store URL (and strictness) this process fetched from, least recently used first."""
_LOCK = threading.Lock()


def lookup_for(store: Store, *, strict: bool = False, rebuild: bool = False) -> tuple[IdLookup, bool]:
    """(the process's lookup of `store`, whether it was built by this call). It is rebuilt when
    `rebuild` is set, when there is none yet, or when a local store's folder changed since."""
    key = (store.url(TRAJECTORIES_DIR), strict)
    with _LOCK:
        current = _LOOKUPS.pop(key, None)
        if current is not None:
            _LOOKUPS[key] = current  # now the most recently used
    if current is not None and not rebuild and (current.token is None or current.token == folder_token(store)):
        return current, False
    fresh = build(store, strict=strict, previous=current)
    with _LOCK:
        _LOOKUPS.pop(key, None)
        _LOOKUPS[key] = fresh
        while len(_LOOKUPS) > MAX_STORES:
            del _LOOKUPS[next(iter(_LOOKUPS))]
    return fresh, True
