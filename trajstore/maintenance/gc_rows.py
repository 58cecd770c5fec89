"""Which stored trajectories ``traj gc`` may delete, and deleting them without a reader or a
training cursor ever seeing a trajectory twice or losing one it still needs.

A row is deleted only when all of these hold:

- it matches the rule: consumed by **every** run named (``consumed_by``, never empty: unconsumed
  data is never collected), and, when given, older than ``older_than_s`` (``created_at``) and
  of one of ``statuses``;
- every run that can resume has read it: a run with a checkpoint resumes from the cursor of its
  ``LATEST`` checkpoint (rows before that cursor are behind it, rows after it are read again on
  resume, so they stay); a run with no checkpoint that is not named in ``consumed_by`` may be a
  trainer still running (it checkpoints later) and blocks every row, unless listed in
  ``ignore_runs`` (runs that will never resume, e.g. finished ``traj demo`` runs).

Deleting: a shard whose every row goes is deleted; a shard that keeps some rows is replaced by a
shard of the kept rows through the compaction commit protocol (:mod:`trajstore.store.compaction_records`:
a record naming the old shard with the deleted rows as left out, then the new shard), so a
cursor naming the old shard stays valid and readers see the change atomically.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trajstore.reader import read_shard
from trajstore.reader.progress import Progress, plan
from trajstore.schema import TRAJECTORY_SCHEMA
from trajstore.store.compaction_records import CompactionRecord, compacted_name, write_record
from trajstore.store.layout import (
    CHECKPOINT_STATE_FILE,
    RUNS_DIR,
    TRAJECTORIES_DIR,
    checkpoint_dir,
    checkpoint_latest_file,
    checkpoints_dir,
    run_consumed_dir,
)
from trajstore.store.shards import ShardInfo, list_shards

if TYPE_CHECKING:
    from trajstore.store.handle import Store


@dataclass
class RowPlan:
    """Rows :func:`plan_rows` found deletable.

    Attributes:
        shards: (shard, sorted row numbers to delete) per shard with such rows.
        rows: rows to delete in all. bytes: their estimated size on disk (a whole shard exactly,
            a part of one in proportion to its rows).
        blocked: why rows matching the rule are kept (a run that may still need them).
    """

    shards: list[tuple[ShardInfo, np.ndarray]] = field(default_factory=list)
    rows: int = 0
    bytes: int = 0
    blocked: list[str] = field(default_factory=list)


def _cursor(store: Store, run_id: str) -> Progress | None:
    """The data cursor of run `run_id`'s ``LATEST`` checkpoint, None when it has none."""
    try:
        pointer = json.loads(store.fs.cat_file(store.path(checkpoint_latest_file(run_id))))
        state = json.loads(store.fs.cat_file(store.path(checkpoint_dir(run_id, int(pointer["iteration"])),
                                                        CHECKPOINT_STATE_FILE)))
    except FileNotFoundError:
        return None
    c = state["cursor"]
    return Progress(list(c["done_shards"]), c["shard"], int(c["next_row"]))


def _has_checkpoints(store: Store, run_id: str) -> bool:
    return any(True for _ in store.iter_dirs(checkpoints_dir(run_id)))


def consumed_ids(store: Store, run_id: str) -> set[str]:
    """Ids of the trajectories run `run_id` trained on (its ``consumed`` records)."""
    ids: set[str] = set()
    for s in list_shards(store, run_consumed_dir(run_id)):
        ids.update(_read_column(store, s, "trajectory_id").to_pylist())
    return ids


def _read_column(store: Store, shard: ShardInfo, column: str) -> pa.ChunkedArray:
    fh = store.fs.open(shard.path, "rb") if not store.is_local else shard.path
    return pq.read_table(fh, columns=[column]).column(column)


def plan_rows(store: Store, *, consumed_by: tuple[str, ...], older_than_s: float | None,
              statuses: tuple[str, ...] | None, ignore_runs: tuple[str, ...] = (),
              now: float | None = None) -> RowPlan:
    """The trajectory rows the rule allows deleting now (module docstring)."""
    out = RowPlan()
    if not consumed_by:
        return out
    runs = sorted(store.iter_dirs(RUNS_DIR))
    missing = [r for r in consumed_by if r not in runs]
    if missing:
        out.blocked.append(f"run(s) {', '.join(missing)} not found under {store.url(RUNS_DIR)}: nothing is consumed "
                           "by them")
        return out
    cursors: dict[str, Progress] = {}
    for r in runs:
        if r in ignore_runs:
            continue
        c = _cursor(store, r)
        if c is not None:
            cursors[r] = c
        elif r not in consumed_by or _has_checkpoints(store, r):
            out.blocked.append(f"run {r} has no committed checkpoint: it may be running and need any row "
                               f"(name it in --consumed-by, or --ignore-run {r} if it will never resume)")
    if out.blocked:
        return out
    eaten = set.intersection(*(consumed_ids(store, r) for r in consumed_by))
    if not eaten:
        return out
    now = time.time() if now is None else now
    wanted = pa.array(sorted(eaten), pa.string())
    for shard in list_shards(store, TRAJECTORIES_DIR):
        t = read_shard(store, shard, columns=["trajectory_id", "created_at", "status"])
        mask = pc.is_in(t.column("trajectory_id"), value_set=wanted).to_numpy(zero_copy_only=False)
        if older_than_s is not None:
            cutoff = pa.scalar(int((now - older_than_s) * 1e6), pa.timestamp("us", tz="UTC"))
            mask &= pc.less(t.column("created_at"), cutoff).to_numpy(zero_copy_only=False)
        if statuses is not None:
            mask &= pc.is_in(t.column("status"), value_set=pa.array(list(statuses), pa.string())
                             ).to_numpy(zero_copy_only=False)
        if not mask.any():
            continue
        for c in cursors.values():  # behind every resumable run's cursor
            read = np.zeros(shard.num_rows, dtype=bool)
            read[plan(shard, c)[1]] = True
            mask &= read
        rows = np.flatnonzero(mask)
        if len(rows):
            out.shards.append((shard, rows))
            out.rows += len(rows)
            out.bytes += shard.size_bytes if len(rows) == shard.num_rows else shard.size_bytes * len(rows) // shard.num_rows
    return out


def _remove(store: Store, path: str) -> None:
    try:
        if store.is_local:
            os.unlink(path)
        else:
            store.fs.rm_file(path)
    except FileNotFoundError:
        pass


def delete_rows(store: Store, plan: RowPlan, *, keep_replaced_s: float) -> list[str]:
    """Carry out `plan` (holding the maintenance lock); return the shards replaced or deleted.

    A replaced shard (some rows kept, in a new shard) is deleted at once, after the new shard's
    commit, when `keep_replaced_s` is 0 or less (as ``traj compact`` does: no reader to wait
    for); otherwise a later ``traj compact`` / ``traj gc`` deletes it once its record is that old.
    """
    done = []
    for shard, rows in plan.shards:
        if len(rows) == shard.num_rows:
            _remove(store, shard.path)
        else:
            keep = np.setdiff1d(np.arange(shard.num_rows), rows)
            table = read_shard(store, shard).take(pa.array(keep)).combine_chunks()
            record = CompactionRecord(compacted_name(shard.name), table.num_rows,
                                      ((shard.name, shard.num_rows, tuple(int(r) for r in rows)),), pid=os.getpid())
            write_record(store, record)
            store.write_table(table.replace_schema_metadata(TRAJECTORY_SCHEMA.metadata), subdir=TRAJECTORIES_DIR,
                              name=record.output)  # the commit point: the old shard is hidden from now on
            if keep_replaced_s <= 0:
                _remove(store, shard.path)
        done.append(store.url_of(shard.path))
    return done


def report_items(plan: RowPlan) -> list[dict[str, Any]]:
    """One item per shard of `plan` for the gc report."""
    return [{"kind": "trajectories", "what": f"{len(rows)} of {shard.num_rows} rows of {shard.name}",
             "bytes": shard.size_bytes if len(rows) == shard.num_rows else shard.size_bytes * len(rows) // shard.num_rows}
            for shard, rows in plan.shards]
