"""Stores of many small trajectory shards (what the proxy wrote before it grouped episodes), for
the compaction tests: one table built once, written a slice per shard."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from tests.helpers.process_caches import new_process
from tests.helpers.trajectories import tiny_model_trajectory
from trajstore.convert import trajectories_to_table
from trajstore.store import Store, open_store


def trajectory_table(n: int, *, prefix: str = "t", seed: int = 0, rewards: list[float] | None = None) -> pa.Table:
    """`n` tiny-model trajectories ``<prefix>00000``... as one table (rewards given or drawn)."""
    rng = np.random.default_rng(seed)
    trajs = [tiny_model_trajectory(rng, trajectory_id=f"{prefix}{i:05d}", policy_versions=(i // 8,),
                                   reward=None if rewards is None else rewards[i]) for i in range(n)]
    return trajectories_to_table(trajs)


def write_small_shards(store: Store, table: pa.Table, per_shard: int = 1) -> list[str]:
    """Write `table` as shards of `per_shard` rows in order; return the shard names."""
    names = []
    for a in range(0, table.num_rows, per_shard):
        names.append(store.write_table(table.slice(a, per_shard)).rsplit("/", 1)[-1])
    return names


def write_one_row_shards_in_new_processes(root: Path, n: int, after_each: Callable[[Store], Any]) -> Store:
    """Write `n` one-row shards into a store at `root`, one at a time, each followed by a new
    process (:func:`~tests.helpers.process_caches.new_process`) that runs ``after_each(store)``
    (the read that adds to a store cache); return the store."""
    store = open_store(root)
    table = trajectory_table(n)
    for i in range(n):
        write_small_shards(store, table.slice(i, 1))
        new_process()
        after_each(store)
    return store


def write_one_row_shards_refusing_deletes(root: Path, monkeypatch: Any, n: int,
                                          after_each: Callable[[Store, int], None]) -> None:
    """Write `n` one-row shards into a store at `root` whose filesystem refuses every delete (a
    bucket with PutObject but no DeleteObject), its warnings silenced; ``after_each(store, i)``
    runs after the i-th write."""
    store = open_store(root)

    def refuse(path):  # noqa: ANN001, ANN202 - fsspec's rm_file signature
        raise PermissionError(13, "Access Denied")
    monkeypatch.setattr(store.fs, "rm_file", refuse)
    table = trajectory_table(n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(n):
            store.write_table(table.slice(i, 1))
            after_each(store, i)
