"""Buffered, thread-safe writing of trajectories into a store.

A :class:`StoreWriter` validates each trajectory when it is handed over, keeps it in memory,
and writes the buffer as one new shard when it reaches `flush_rows` rows, `flush_mb` MiB or
`flush_seconds` seconds of age, and on close. A shard appears atomically, so readers never see
a partial flush; trajectories still buffered when the process dies are lost, those flushed
before are readable.

With ``dedupe_lock`` (what ``traj ingest`` writes with) every flush holds that store lock, drops
what another writer stored meanwhile and writes the rest (:class:`StoredIds`), so writers run at
once store each id once.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from trajstore.convert import metadata_json, trajectories_to_table
from trajstore.errors import TrajectoryValidationError
from trajstore.models import Trajectory
from trajstore.reader import read_shard, read_trajectories, read_trajectories_by_id
from trajstore.store import SPAN_BYTES_ESTIMATE, CorruptShardWarning, Store, open_store
from trajstore.store.encoding import token_encoding
from trajstore.store.layout import TRAJECTORIES_DIR
from trajstore.store.lock import store_lock
from trajstore.validate import lineage_violations, validate_trajectory

DEFAULT_FLUSH_ROWS = 1024
DEFAULT_FLUSH_MB = 64.0
DEFAULT_FLUSH_SECONDS = 30.0
RECENT_IDS_KEPT = 65536
"""Ids (with their token counts) of trajectories a writer accepted that it remembers, so a child
of a recently written parent needs no store lookup."""


def _approx_bytes(t: Trajectory) -> int:
    """Uncompressed bytes `t` adds to a shard, for flush sizing: int32 tokens, one float32 per
    action token (schema v3), the spans, the metadata JSON (can be megabytes) and the strings."""
    n_action = sum(s.end - s.start for s in t.spans if s.kind == "action")
    meta = metadata_json(t.metadata)
    strings = sum(len(x) for x in (t.trajectory_id, t.prompt_id, t.group_id, t.source, t.model, t.tokenizer,
                                   t.reward_raw) if x)
    return (len(t.tokens) * 4 + n_action * 4 + SPAN_BYTES_ESTIMATE * len(t.spans)
            + (len(meta) if meta else 0) + strings + 256)


def _positive(name: str, value: Any, alternative: str = "") -> float:
    """`value` as a finite float > 0, else ValueError naming the argument."""
    out = float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else math.nan
    if not math.isfinite(out) or out <= 0:
        raise ValueError(f"{name} must be a finite number > 0{alternative}, got {value!r}")
    return out


class StoredIds:
    """The ids a deduplicating :class:`StoreWriter` knows to be stored, and what its flushes did.

    Attributes:
        lock: the store lock its flushes hold (``dedupe_lock``).
        stored: ids in the store when last looked (the shards listed then), plus those the
            writer wrote since.
        written: ids the writer wrote, in order.
        dropped: trajectories a flush left out because their id was stored meanwhile (by
            another writer: the id was not in `stored` when they were handed over).
    """

    def __init__(self, store: Store, lock: str):
        self.store = store
        self.lock = lock
        self._seen_shards = {s.name for s in store.list_shards()}
        self.stored: set[str] = set(read_trajectories(store, columns=["trajectory_id"])
                                    .column("trajectory_id").to_pylist())
        self.written: list[str] = []
        self.dropped = 0

    def look(self) -> None:
        """Add the ids of the shards that appeared since the last look to :attr:`stored` (a shard
        whose ids cannot be read is skipped with a :class:`~trajstore.store.CorruptShardWarning`)."""
        for s in self.store.list_shards():
            if s.name in self._seen_shards:
                continue
            self._seen_shards.add(s.name)
            try:
                ids = read_shard(self.store, s, columns=["trajectory_id"]).column("trajectory_id").to_pylist()
            except (OSError, pa.ArrowException) as e:
                warnings.warn(f"skipping {self.store.url_of(s.path)}: cannot read its ids ({type(e).__name__}: {e})",
                              CorruptShardWarning, stacklevel=3)
                continue
            self.stored.update(ids)

    def wrote(self, path: str, ids: list[str]) -> None:
        """Count the shard at `path` (holding `ids`) as written by this writer."""
        self._seen_shards.add(path.rsplit("/", 1)[-1])
        self.stored.update(ids)
        self.written.extend(ids)


class StoreWriter:
    """Append trajectories to a store; use as a context manager.

    Args:
        store: a :class:`~trajstore.store.Store` or a URI for :func:`~trajstore.store.open_store`.
        flush_rows: write a shard once this many trajectories are buffered.
        flush_mb: ... or once the buffer holds about this many MiB (uncompressed: tokens,
            log-probs, spans, metadata and strings).
        flush_seconds: ... or once the oldest buffered trajectory is this many seconds old
            (checked by a background thread, so an idle writer still flushes). ``None`` = never.
        storage_options: passed to :func:`open_store` when `store` is a URI.
        validate: check each trajectory (schema and lineage rules) when it is handed over.
            False: the caller checked them and vouches for their lineage, stored as given (``traj
            ingest`` validates what it builds, and keeps a parent id its input names even when
            that parent is not in the store).
        dedupe_lock: the name of a store lock (:func:`trajstore.store.lock.store_lock`): each
            flush holds it, looks for shards that appeared since the writer's last look, drops
            the buffered trajectories whose id is now stored and writes the rest as one shard
            (:attr:`dedupe` counts both). On a local store, writers with the same lock never
            store an id twice; on an object store, those of one host are serialised the same way,
            while writers on different hosts can still both store an id neither saw (readers keep
            the first copy, ``read_trajectories`` dedupes by id). Such a writer makes no folder
            before its first shard: one that stores nothing (all already stored) leaves no store
            behind. None (default): every flush writes the buffer as it is.

    Attributes:
        dedupe: with `dedupe_lock`, the ids known to be stored and what the flushes wrote and
            dropped (:class:`StoredIds`); None without.

    Lineage: a child's parent (``parent_trajectory_id``) must be in the same write (the same
    :meth:`write_many` call, in any order, or the buffer), written earlier by this writer, or
    already in the store (looked up by id), and its ``fork_point`` must not be past the
    parent's end.

    Raises (from :meth:`write`):
        TrajectoryValidationError: the trajectory breaks a schema rule (or a lineage rule);
            nothing of it is buffered.
        StoreError: a flush failed; the buffered trajectories are kept for the next attempt.
    """

    def __init__(self, store: Store | str, *, flush_rows: int = DEFAULT_FLUSH_ROWS,
                 flush_mb: float = DEFAULT_FLUSH_MB, flush_seconds: float | None = DEFAULT_FLUSH_SECONDS,
                 storage_options: dict[str, Any] | None = None, validate: bool = True,
                 dedupe_lock: str | None = None):
        if flush_rows < 1:
            raise ValueError(f"flush_rows must be >= 1, got {flush_rows!r}")
        token_encoding()  # a bad TRAJSTORE_TOKEN_ENCODING is refused now, not by a flush in the background
        flush_mb = _positive("flush_mb", flush_mb)
        if flush_seconds is not None:  # nan compares false with everything: the age flusher would never flush
            flush_seconds = _positive("flush_seconds", flush_seconds, " or None (never)")
        self.store = store if isinstance(store, Store) else open_store(store, storage_options=storage_options)
        if self.store.is_local and dedupe_lock is None:  # the store exists from now on: read as empty, not missing
            with contextlib.suppress(OSError):  # an unwritable place is reported by the first flush, as before
                os.makedirs(self.store.path(TRAJECTORIES_DIR), exist_ok=True)
        self.store.clean_stale_tmp()  # leftovers of killed writers (an hour old, never in use)
        self.validate = validate
        self.dedupe = StoredIds(self.store, dedupe_lock) if dedupe_lock is not None else None
        self.flush_rows = flush_rows
        self.flush_bytes = int(flush_mb * 2**20)
        self.flush_seconds = flush_seconds
        self._buf: list[Trajectory] = []
        self._recent: OrderedDict[str, int] = OrderedDict()  # id -> num_tokens, newest last
        self._buf_bytes = 0
        self._oldest: float | None = None
        self._lock = threading.RLock()
        self._closed = False
        self.shards_written: list[str] = []
        self.rows_written = 0
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        if flush_seconds is not None:
            self._timer = threading.Thread(target=self._age_flusher, name="trajstore-flush", daemon=True)
            self._timer.start()

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write(self, trajectory: Trajectory) -> None:
        """Validate (unless the writer was made with ``validate=False``) and buffer one trajectory,
        flushing if a threshold is reached."""
        self._write(trajectory, {})

    def _write(self, trajectory: Trajectory, same_write: Mapping[str, int]) -> None:
        if self.validate:
            validate_trajectory(trajectory)
        with self._lock:
            if self._closed:
                raise RuntimeError("StoreWriter is closed")
            if self.validate:
                self._check_lineage(trajectory, same_write)
            self._buf.append(trajectory)
            self._buf_bytes += _approx_bytes(trajectory)
            if self._oldest is None:
                self._oldest = time.monotonic()
            if len(self._buf) >= self.flush_rows or self._buf_bytes >= self.flush_bytes:
                self._flush_locked()

    def write_many(self, trajectories: Iterable[Trajectory]) -> None:
        """Validate and buffer each trajectory in order (those before a refused one stay
        buffered); a parent may come after its children in the same call."""
        trajectories = list(trajectories)
        same_write = {t.trajectory_id: len(t.tokens) for t in trajectories}
        for t in trajectories:
            self._write(t, same_write)

    def _check_lineage(self, trajectory: Trajectory, same_write: Mapping[str, int]) -> None:
        """Refuse a child whose parent is unknown or shorter than its fork point; remember `trajectory`."""
        parent = trajectory.parent_trajectory_id
        if parent is not None:
            violations = lineage_violations(trajectory, self._parent_length(parent, same_write))
            if violations:
                raise TrajectoryValidationError(trajectory.trajectory_id, violations)
        self._recent[trajectory.trajectory_id] = len(trajectory.tokens)
        self._recent.move_to_end(trajectory.trajectory_id)
        if len(self._recent) > RECENT_IDS_KEPT:
            self._recent.popitem(last=False)

    def _parent_length(self, parent: str, same_write: Mapping[str, int]) -> int | None:
        """num_tokens of trajectory `parent`: from the same write, this writer's recent ones, or
        the store (first stored copy); None when it is in none of them."""
        if parent in same_write:
            return same_write[parent]
        if parent in self._recent:
            return self._recent[parent]
        found = read_trajectories_by_id(self.store, [parent], columns=["trajectory_id", "num_tokens"])
        return int(found.column("num_tokens")[0].as_py()) if found.num_rows else None

    def flush(self) -> str | None:
        """Write the buffer as one shard now; return its path (None when nothing was written:
        the buffer was empty, or with `dedupe_lock` everything in it was stored meanwhile)."""
        with self._lock:
            return self._flush_locked()

    def _flush_locked(self) -> str | None:
        if not self._buf:
            return None
        if self.dedupe is None:
            path: str | None = self._write_shard(self._buf)
        else:
            with store_lock(self.store, self.dedupe.lock):
                self.dedupe.look()
                fresh = [t for t in self._buf if t.trajectory_id not in self.dedupe.stored]
                path = self._write_shard(fresh) if fresh else None
                if path is not None:
                    self.dedupe.wrote(path, [t.trajectory_id for t in fresh])
            self.dedupe.dropped += len(self._buf) - len(fresh)
        self._buf, self._buf_bytes, self._oldest = [], 0, None
        return path

    def _write_shard(self, trajectories: list[Trajectory]) -> str:
        path = self.store.write_table(trajectories_to_table(trajectories), subdir=TRAJECTORIES_DIR)
        self.shards_written.append(path)
        self.rows_written += len(trajectories)
        return path

    def _age_flusher(self) -> None:
        assert self.flush_seconds is not None
        tick = min(1.0, max(0.05, self.flush_seconds / 4))
        while not self._stop.wait(tick):
            with self._lock:
                if self._oldest is not None and time.monotonic() - self._oldest >= self.flush_seconds:
                    try:
                        self._flush_locked()
                    except Exception:  # kept buffered; the next write or close retries and raises
                        pass

    def close(self) -> None:
        """Flush what is buffered and stop the background flusher. Idempotent."""
        self._stop.set()
        with self._lock:
            if self._closed:
                return
            self._flush_locked()
            self._closed = True
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.join(timeout=5)


def write_trajectories(store: Store | str, trajectories: Iterable[Trajectory], *,
                       storage_options: dict[str, Any] | None = None, **writer_options: Any) -> list[str]:
    """Validate and write trajectories; return the shard paths written."""
    with StoreWriter(store, storage_options=storage_options, flush_seconds=None, **writer_options) as w:
        w.write_many(trajectories)
    return w.shards_written
