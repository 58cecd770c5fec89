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

The first lookup of a process starts from the merged lookup the store keeps
(:mod:`trajstore.store.id_lookup_file`, memory-mapped) and decodes only the id indexes of the
shards it lacks; a rebuild starts from the process's own lookup. Either way the entries of
shards no longer listed are dropped and the new ones merged in, without sorting the whole
(at a million trajectories: a few ms instead of 0.4 s of decoding and sorting). A new process
whose listing differs from the store's file writes a new one. Memory: 16 bytes per trajectory
(16 MiB at a million). Lookups are exact: a hit's row is read and its ``trajectory_id``
compared (a hash can collide, a file can be damaged), so a stale entry can cost a rebuild
(without the store's file), never a wrong row.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import numpy as np

from trajstore.store import ShardInfo, Store, decode_id_index, id_hashes
from trajstore.store import id_lookup_file as lookup_file
from trajstore.store.layout import TRAJECTORIES_DIR


@dataclass
class IdLookup:
    """The merged id index of one listing of a store's ``trajectories/``.

    Attributes:
        shards: the listed shards, in arrival order (an entry's ``shard`` indexes this).
        hashes: uint64 (n,) sorted id hashes (:func:`trajstore.store.id_hashes`) of every row
            of every shard with an id index.
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
    verified: bool = True
    """Built from the shards' own id indexes (in this process), not from the store's lookup file:
    an id it misses is not in the listed shards."""

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
                out[s] = sorted_unique(rows)
        for s in self.unindexed.tolist():
            out[s] = None
        return dict(sorted(out.items()))


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values of sorted `values`, in order (``np.unique`` imports ``numpy.ma`` on
    first use: 0.05-0.15 s of a new process's first fetch)."""
    return values[np.r_[True, values[1:] != values[:-1]]] if len(values) else values


def folder_token(store: Store) -> int | None:
    """The ``trajectories/`` folder's modification time in ns on a local store (None elsewhere,
    and when the folder does not exist yet)."""
    if not store.is_local:
        return None
    try:
        return os.stat(store.path(TRAJECTORIES_DIR)).st_mtime_ns
    except FileNotFoundError:
        return None


def build(store: Store, *, strict: bool = False, previous: IdLookup | None = None, use_file: bool = True
          ) -> IdLookup:
    """A lookup from a fresh listing of `store`.

    The entries of the shards still listed are taken from a base: `previous` (this process's
    lookup) when given, else the store's lookup file (:mod:`trajstore.store.id_lookup_file`) when
    `use_file`; only the id indexes of listed shards the base lacks are decoded, and merged in
    without sorting the whole. When the result covers other shards than the store's file, a new
    file is written (a store that cannot be written is only read).

    Raises:
        CorruptShardError: with `strict`, a shard that cannot be read (as the listing does).
    """
    token = folder_token(store)
    shards = store.list_shards(TRAJECTORIES_DIR, strict=strict)
    if token != folder_token(store):
        # changed while listing (a writer, or the listing's own first shard-index folder): the
        # next fetch lists again rather than trust a listing that may predate the change
        token = STALE
    stored, files = lookup_file.load(store) if previous is None else (None, [])
    base = _base_of(previous) if previous is not None else stored if use_file else None
    hashes, shard_of, row_of, changed = _merge(shards, base)
    unindexed = np.asarray([i for i, s in enumerate(shards) if s.id_index is None], np.int32)
    # a process rebuilding from its own lookup (the store changed under it) leaves the file to
    # the next new process: an appending store would otherwise be rewritten at every flush
    if previous is None and len(hashes) and (changed or base is None) and not _same(stored, shards, hashes, shard_of, row_of):
        cover = [(s.name, s.size_bytes, s.num_rows, s.id_index is not None) for s in shards]
        lookup_file.save(store, lookup_file.StoredLookup(cover, hashes, shard_of, row_of), files)
    verified = previous.verified if previous is not None else base is None
    return IdLookup(shards, hashes, shard_of, row_of, unindexed, token, verified)


def _same(stored: lookup_file.StoredLookup | None, shards: list[ShardInfo], hashes: np.ndarray,
          shard_of: np.ndarray, row_of: np.ndarray) -> bool:
    """Whether the store's file already holds these entries for these shards (a rebuild without
    it found what it holds)."""
    return stored is not None and [c[:2] for c in stored.cover] == [(s.name, s.size_bytes) for s in shards] \
        and np.array_equal(stored.hashes, hashes) and np.array_equal(stored.shard_of, shard_of) \
        and np.array_equal(stored.row_of, row_of)


def _base_of(lookup: IdLookup) -> lookup_file.StoredLookup:
    cover = [(s.name, s.size_bytes, s.num_rows, s.id_index is not None) for s in lookup.shards]
    return lookup_file.StoredLookup(cover, lookup.hashes, lookup.shard_of, lookup.row_of)


def _merge(shards: list[ShardInfo], base: lookup_file.StoredLookup | None
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """(hashes, shard_of, row_of) of every listed shard with an id index, `shard_of` indexing
    `shards`: the entries of `base` whose shard is still listed (same name and size), plus the
    decoded id indexes of the others; and whether that differs from `base`'s shards."""
    position = {(s.name, s.size_bytes): i for i, s in enumerate(shards) if s.id_index is not None}
    if base is not None and len(base.hashes):
        remap = np.asarray([position.get((n, size), -1) if indexed else -1 for n, size, _, indexed in base.cover],
                           np.int32)
        new_shard = remap[base.shard_of]
        keep = new_shard >= 0
        everything = bool(keep.all())
        hashes = base.hashes if everything else base.hashes[keep]
        shard_of = new_shard if everything else new_shard[keep]
        row_of = base.row_of if everything else base.row_of[keep]
        covered = {(n, size) for (n, size, _, indexed), r in zip(base.cover, remap.tolist()) if indexed and r >= 0}
    else:
        hashes, shard_of, row_of = np.empty(0, np.uint64), np.empty(0, np.int32), np.empty(0, np.uint32)
        everything, covered = True, set()
    hs, ss, rs = [], [], []
    for key, i in position.items():
        if key not in covered:
            h, r = decode_id_index(shards[i].id_index)  # type: ignore[arg-type]
            hs.append(h)
            rs.append(r)
            ss.append(np.full(len(h), i, np.int32))
    if not hs:
        return hashes, shard_of, row_of, not everything or base is None
    h = np.concatenate(hs)
    order = np.argsort(h, kind="stable")
    h, s, r = h[order], np.concatenate(ss)[order], np.concatenate(rs)[order]
    if not len(hashes):
        return h, s, r, True
    at = np.searchsorted(hashes, h, "right")  # two sorted arrays merged in O(n), no sort of the whole
    return np.insert(hashes, at, h), np.insert(shard_of, at, s), np.insert(row_of, at, r), True


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
    if rebuild and current is not None and not current.verified:
        fresh = build(store, strict=strict, use_file=False)  # a miss: the store's file may be damaged
    else:
        fresh = build(store, strict=strict, previous=current)
    with _LOCK:
        _LOOKUPS.pop(key, None)
        _LOOKUPS[key] = fresh
        while len(_LOOKUPS) > MAX_STORES:
            del _LOOKUPS[next(iter(_LOOKUPS))]
    return fresh, True
