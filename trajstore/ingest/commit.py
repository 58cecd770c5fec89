"""Committing an ingest's new trajectories to the store: buffered into atomic shards, each
written under the store's ingest lock after dropping what another ingest stored meanwhile, so
ingests run at once store every trajectory once.
"""

from __future__ import annotations

import contextlib
import warnings

import pyarrow as pa

from trajstore.convert import trajectories_to_table
from trajstore.ingest.summary import IngestReport
from trajstore.models import Trajectory
from trajstore.reader import read_shard, read_trajectories
from trajstore.store import TRAJECTORIES_DIR, CorruptShardWarning, Store
from trajstore.store.encoding import token_encoding
from trajstore.store.lock import store_lock as _store_lock
from trajstore.writer import DEFAULT_FLUSH_MB, DEFAULT_FLUSH_ROWS
from trajstore.writer import _approx_bytes as approx_bytes  # the SDK writer's flush sizing

INGEST_LOCK = "ingest"
"""Name of the store lock every ingest commit holds (:func:`store_lock`)."""


def store_lock(st: Store, name: str = INGEST_LOCK) -> contextlib.AbstractContextManager[None]:
    """The store lock `name` (default: the ingest lock); see :func:`trajstore.store.lock.store_lock`."""
    return _store_lock(st, name)


class StoreCommitter:
    """Writes an ingest's new trajectories as shards so that an ingest run twice at once (two
    processes, two threads) stores each trajectory once.

    Trajectories are buffered (:data:`~trajstore.writer.DEFAULT_FLUSH_ROWS` rows or
    :data:`~trajstore.writer.DEFAULT_FLUSH_MB` MiB, as the writer SDK does); each commit takes
    the store's ingest lock (:func:`store_lock`), reads the ids of the shards that appeared
    since its last look, drops what is now stored (counted as ``already_in_store``) and writes
    the rest as one atomic shard before releasing the lock.

    Guarantees: on a local store, concurrent ingests never store an id twice. On an object
    store, ingests on one host are serialised the same way; ingests on different hosts can
    still both store a trajectory that neither saw when it committed (the window is one
    listing plus one PUT): readers keep the first copy only (``read_trajectories`` dedupes by
    id) and ``traj info`` counts duplicates.

    Attributes:
        existing: ids stored when last looked (plus those this committer wrote).
    """

    def __init__(self, st: Store, report: IngestReport, *, flush_rows: int = DEFAULT_FLUSH_ROWS,
                 flush_mb: float = DEFAULT_FLUSH_MB):
        token_encoding()  # a bad TRAJSTORE_TOKEN_ENCODING is refused before anything is read or written
        self.st = st
        self.report = report
        self.flush_rows = flush_rows
        self.flush_bytes = int(flush_mb * 2**20)
        self._buf: list[Trajectory] = []
        self._buf_bytes = 0
        st.clean_stale_tmp()  # leftovers of killed writers (an hour old, never in use)
        self._known = {s.name for s in st.list_shards()}
        self.existing: set[str] = set(read_trajectories(st, columns=["trajectory_id"])
                                      .column("trajectory_id").to_pylist())

    def _look(self) -> None:
        """Add the ids of shards that appeared since the last look to :attr:`existing`."""
        for s in self.st.list_shards():
            if s.name in self._known:
                continue
            self._known.add(s.name)
            try:
                ids = read_shard(self.st, s, columns=["trajectory_id"]).column("trajectory_id").to_pylist()
            except (OSError, pa.ArrowException) as e:
                warnings.warn(f"skipping {self.st.url_of(s.path)}: cannot read its ids ({type(e).__name__}: {e})",
                              CorruptShardWarning, stacklevel=2)
                continue
            self.existing.update(ids)

    def add(self, t: Trajectory) -> None:
        """Buffer one (already validated) trajectory; commit when the buffer is full."""
        self._buf.append(t)
        self._buf_bytes += approx_bytes(t)
        if len(self._buf) >= self.flush_rows or self._buf_bytes >= self.flush_bytes:
            self.flush()

    def flush(self) -> None:
        """Commit the buffer: under the store lock, drop what another ingest stored meanwhile
        and write the rest as one shard.

        Raises:
            StoreError: the shard could not be written (nothing of the buffer is stored).
        """
        if not self._buf:
            return
        with store_lock(self.st):
            self._look()
            fresh = [t for t in self._buf if t.trajectory_id not in self.existing]
            if fresh:
                path = self.st.write_table(trajectories_to_table(fresh), subdir=TRAJECTORIES_DIR)
                self._known.add(path.rsplit("/", 1)[-1])
                self.existing.update(t.trajectory_id for t in fresh)
        self.report.skipped["already_in_store"] += len(self._buf) - len(fresh)
        self.report.written_ids.extend(t.trajectory_id for t in fresh)
        self._buf, self._buf_bytes = [], 0
