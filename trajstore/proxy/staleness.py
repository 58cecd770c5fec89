"""AReaL's bounded staleness for ``traj proxy``: admission control for new episodes.

:class:`StalenessGate` is AReaL's bounded staleness (Fu et al. 2025, "AReaL: A Large-Scale
Asynchronous Reinforcement Learning System for Language Reasoning", section 5.1, eta): a new
episode may start only while the episodes that are running or finished but not yet consumed by
the trainer number fewer than ``(max_staleness + 1) * batch_size``. The unit is the episode: one
whose prompts stopped extending is stored as several trajectories (parts, linked by metadata
``episode.id``) and still counts once, running or unconsumed (unconsumed while any of its parts
is). Consumption is read from the run's ``runs/<run>/consumed`` records in the store, so the
count is right after a proxy or trainer restart.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pyarrow.parquet as pq

from trajstore.errors import TrajstoreError
from trajstore.proxy.recorder import PROXY_SOURCE
from trajstore.reader import read_trajectories
from trajstore.store import TRAJECTORIES_DIR, Store
from trajstore.store.layout import run_consumed_dir

COUNTED_STATUSES: tuple[str, ...] = ("completed", "truncated")
"""Statuses of trajectories the staleness gate expects the trainer to consume (train proxy
data with ``--where "status IN ('completed', 'truncated')"``)."""


def episode_key(trajectory_id: str, metadata: dict[str, Any] | None) -> str:
    """The episode a stored trajectory belongs to: metadata ``episode.id`` for a part of a split
    episode, else the trajectory itself (an episode of one trajectory)."""
    ep = (metadata or {}).get("episode")
    eid = ep.get("id") if isinstance(ep, dict) else None
    return eid if isinstance(eid, str) and eid else trajectory_id


GATE_POLL_S = 0.5
"""Seconds between re-reads of the consumed records while an episode is held, at most: ``traj proxy
--poll-interval`` lowers it (a held episode starts up to this long after the trainer's step is recorded)."""


class StalenessOverflow(TrajstoreError):
    """A new episode waited longer than the hold timeout for the staleness bound."""


class StalenessGate:
    """Admission control for new episodes (see the module docstring).

    Args:
        store, run_id: the run whose consumed records are read.
        max_staleness: eta >= 0 (versions).
        batch_size: the trainer's trajectories per step (B).
        hold_timeout_s: how long a new episode waits for room before it is refused.
        poll_s: seconds between reads of the consumed records while someone waits.
    """

    def __init__(self, store: Store, run_id: str, *, max_staleness: int, batch_size: int,
                 hold_timeout_s: float = 600.0, poll_s: float = GATE_POLL_S):
        if max_staleness < 0 or batch_size < 1:
            raise ValueError("max_staleness must be >= 0 and batch_size >= 1")
        self.store = store
        self.run_id = run_id
        self.capacity = (max_staleness + 1) * batch_size
        self.hold_timeout_s = hold_timeout_s
        self.poll_s = poll_s
        self.running = 0
        self.written: dict[str, set[str]] = {}
        """Episode key (:func:`episode_key`) -> ids of its stored trajectories the trainer will consume."""
        self.consumed: set[str] = set()
        self._shards: dict[str, frozenset[str]] = {}
        self._last_refresh = 0.0
        self.held = 0
        self.refused = 0
        self.closing = False
        """Set when the proxy begins to shut down: held episodes are refused at once instead of
        holding uvicorn's graceful shutdown (and so the writing of open episodes) for its timeout."""

    @property
    def unconsumed(self) -> int:
        """Written episodes with at least one part the trainer has not consumed yet."""
        consumed = self.consumed
        return sum(1 for ids in self.written.values() if not ids <= consumed)

    @property
    def load(self) -> int:
        """Running episodes plus finished, not yet consumed episodes."""
        return self.running + self.unconsumed

    def _refresh(self) -> None:
        sub = run_consumed_dir(self.run_id)
        shards = {sh.path: sh for sh in self.store.list_shards(sub)}
        for path in list(self._shards):
            if path not in shards:  # rolled back by a resumed trainer
                del self._shards[path]
        for path in shards:
            if path not in self._shards:
                with self.store.fs.open(path, "rb") as fh:
                    ids = pq.read_table(fh, columns=["trajectory_id"]).column(0).to_pylist()
                self._shards[path] = frozenset(ids)
        self.consumed = set().union(*self._shards.values()) if self._shards else set()
        self._last_refresh = time.monotonic()

    def load_written(self) -> None:
        """Read which of this run's proxy trajectories the store already holds (at start)."""
        if not self.store.list_shards(TRAJECTORIES_DIR):
            self._refresh()
            return
        t = read_trajectories(self.store, columns=["trajectory_id", "source", "status", "metadata"])
        for tid, src, status, meta in zip(*(t.column(c).to_pylist() for c in
                                           ("trajectory_id", "source", "status", "metadata"))):
            if src != PROXY_SOURCE or status not in COUNTED_STATUSES:
                continue
            try:
                m = json.loads(meta or "{}")
            except ValueError:
                continue
            if isinstance(m, dict) and m.get("run_id") == self.run_id:
                self.written.setdefault(episode_key(tid, m), set()).add(tid)
        self._refresh()

    def on_written(self, trajectory: Any) -> None:
        if trajectory.status in COUNTED_STATUSES:
            key = episode_key(trajectory.trajectory_id, trajectory.metadata)
            self.written.setdefault(key, set()).add(trajectory.trajectory_id)

    async def admit(self) -> float:
        """Wait until one more running episode fits; then count it as running.

        Returns:
            Seconds the episode was held (0.0 when there was room at once).

        Raises:
            StalenessOverflow: no room within ``hold_timeout_s``, or the proxy began to shut down
                while the episode waited (:attr:`closing`): refused, not dropped.
        """
        start = time.monotonic()
        deadline = start + self.hold_timeout_s
        waited = False
        while True:
            if self.load + 1 <= self.capacity:
                self.running += 1
                return time.monotonic() - start if waited else 0.0
            if self.closing:
                self.refused += 1
                raise StalenessOverflow("the proxy is shutting down; this episode was held by --max-staleness "
                                        "and is not started")
            if not waited:
                self.held += 1
                waited = True
            if time.monotonic() >= deadline:
                self.refused += 1
                raise StalenessOverflow(
                    f"max staleness: {self.running} running + {self.unconsumed} finished but unconsumed "
                    f"episodes of run {self.run_id!r} fill the bound of {self.capacity} "
                    f"(= (max_staleness + 1) x batch size); the trainer is not consuming")
            if time.monotonic() - self._last_refresh >= self.poll_s:
                await asyncio.to_thread(self._refresh)
                continue
            await asyncio.sleep(self.poll_s / 4)

    def release(self) -> None:
        """A running episode ended (written, however many trajectories it was stored as, or dropped)."""
        self.running = max(0, self.running - 1)
