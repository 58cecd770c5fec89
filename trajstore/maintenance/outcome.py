"""Setting the outcome (status, reward, metadata) of trajectories already stored, rewriting the
shards that hold them: the proxy's ``/finish`` for an episode whose parts an idle eviction wrote
as ``aborted`` before the harness told how it ended.

Shards are rewritten as ``traj redact`` rewrites them (under their own names, atomically, rows in
order, :func:`~trajstore.maintenance.replace_rows.replace_rows`), holding the store's maintenance
lock, so a concurrent ``traj compact`` neither copies the old rows nor is missed."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from trajstore.convert import table_to_trajectories
from trajstore.maintenance.replace_rows import replace_rows
from trajstore.reader import read_shard
from trajstore.store import Store, scalar_cache
from trajstore.store.layout import TRAJECTORIES_DIR
from trajstore.store.lock import maintenance_lock
from trajstore.validate import validate_trajectory


@dataclass
class Outcome:
    """What a late ``/finish`` says about an episode: its final `status`, `reward` (None: none)
    and the raw reward value (stored as JSON, as the builder stores it), and `metadata` merged
    into each trajectory's own."""

    status: str
    reward: float | None
    reward_raw: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


def set_outcome(store: Store, trajectory_ids: Collection[str], outcome: Outcome, *,
                wait_s: float | None = None) -> list[str]:
    """Give stored trajectories `trajectory_ids` the `outcome`; returns the ids found and set
    (every stored copy of an id is set). Shards are searched newest first and only until every
    id is found.

    Raises:
        StoreError: the maintenance lock was not acquired within `wait_s`, or a shard could not
            be written back (it is then untouched).
        TrajectoryValidationError: the outcome breaks a schema rule (nothing is written).
    """
    wanted = set(trajectory_ids)
    found: set[str] = set()
    with maintenance_lock(store, wait_s=wait_s):
        for shard in reversed(store.list_shards(TRAJECTORIES_DIR)):
            if found >= wanted:
                break
            ids = read_shard(store, shard, columns=["trajectory_id"]).column("trajectory_id").to_pylist()
            rows = [i for i, x in enumerate(ids) if x in wanted]
            if not rows:
                continue
            table = read_shard(store, shard)
            olds = table_to_trajectories(table.take(pa.array(rows, type=pa.int64())))
            changed = {}
            for row, t in zip(rows, olds):
                t.status, t.reward, t.reward_raw = outcome.status, outcome.reward, outcome.reward_raw
                t.metadata = {**t.metadata, **outcome.metadata}
                changed[row] = validate_trajectory(t)
                found.add(t.trajectory_id)
            store.rewrite_shard(shard.path, replace_rows(table, changed))
        if found:
            scalar_cache.clear(store)  # it may hold the old rows' status and reward
    return sorted(found)
