"""``traj compact``: merge runs of small trajectory shards into shards of a target size, dropping
later copies of a trajectory id, without a reader or a training cursor ever seeing a trajectory
twice or not at all (the commit protocol and listing rule are :mod:`trajstore.store.compaction_records`'s).

What a run does, holding the store's maintenance lock (:func:`~trajstore.store.lock.exclusive_lock`;
one compaction or gc per store at a time, on any host):

1. finishes what an earlier run left: deletes the shards committed outputs replaced once their
   record is ``keep_replaced_s`` old, removes records whose output never appeared and outputs
   whose record is missing (a run killed part-way);
2. plans: consecutive visible shards (arrival order) each smaller than half the target and older
   than ``min_age_s`` form a run; a run is cut into groups of about ``target_mb`` MiB (on disk),
   each group of two shards or more becoming one output shard;
3. for each group: reads the sources through the reader (older schema versions converted to
   the current one), drops rows whose id appeared earlier in arrival order (the readers' rule,
   :mod:`trajstore.reader.dedupe`), writes the record, then the output (the commit point);
4. deletes the replaced sources now when ``keep_replaced_s`` is 0, otherwise leaves them, hidden,
   to the next ``traj compact`` or ``traj gc`` (readers that listed them before the commit
   still read them meanwhile).

Killed at any point (SIGKILL included), nothing is lost or doubled: before a group's commit point
its sources are what readers see, after it the output is; the next run cleans up.

Writers keep appending meanwhile: a run only touches shards it listed, and its outputs take the
place of their first source in arrival order. A shard older than ``min_age_s`` by its name (a
writer names a shard when it starts writing it) that appears only after the listing can land
between sources of a group: it is then read after the group's output (first-copy dedupe between
the two follows that order); nothing is lost or doubled.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from trajstore.errors import StoreError
from trajstore.reader import read_shard
from trajstore.schema import TRAJECTORY_SCHEMA
from trajstore.store.compaction_records import CompactionRecord, compacted_name, delete_record, write_record
from trajstore.store.fsutil import fresh_info, why
from trajstore.store.handle import Store
from trajstore.store.layout import TRAJECTORIES_DIR
from trajstore.store.lock import maintenance_lock
from trajstore.store.open import open_store
from trajstore.store.shards import ShardInfo, list_view

TARGET_MB = 64.0
"""Default size of a compaction output on disk (MiB, compressed)."""
MIN_AGE_S = 60.0
"""Default: shards younger than this (by the time in their name) are left for a later run."""
KEEP_REPLACED_S = 600.0
"""Default: replaced shards are deleted once their compaction is this old (s), so a reader that
listed them just before the commit can still read them."""


@dataclass
class CompactionResult:
    """What :func:`compact_store` did (or, with ``dry_run``, would do).

    Attributes:
        store: the store's URI. dry_run: nothing was written or deleted.
        groups: one dict per output: ``output``, ``sources``, ``rows``, ``dropped`` (later copies
            left out), ``bytes_before`` (sources on disk), ``bytes_after`` (output; 0 in a dry run).
        replaced_deleted: replaced shards deleted; bytes_freed: their size.
        replaced_kept: replaced shards still kept for readers (deleted by a later run).
        orphans_removed: records and outputs of runs killed before their commit, removed.
        left_young, left_big, left_alone: visible shards not merged, by reason (see
            :class:`CompactionPlan`: younger than ``min_age_s``, half the target or more, no
            small neighbour).
    """

    store: str
    dry_run: bool
    groups: list[dict[str, Any]] = field(default_factory=list)
    replaced_deleted: int = 0
    bytes_freed: int = 0
    replaced_kept: int = 0
    orphans_removed: int = 0
    left_young: int = 0
    left_big: int = 0
    left_alone: int = 0

    @property
    def shards_merged(self) -> int:
        return sum(g["sources"] for g in self.groups)


def shard_time_s(name: str) -> float | None:
    """UNIX time (s) a shard's name was given (its leading 20-digit UTC ns), None when it has none."""
    head = name.split("-", 1)[0]
    return int(head) / 1e9 if len(head) == 20 and head.isdigit() else None


@dataclass
class CompactionPlan:
    """What :func:`plan_compaction` chose: the groups to merge and, counted by reason, the visible
    shards left as they are.

    Attributes:
        groups: runs of consecutive small shards to merge (two or more each), in arrival order.
        young: shards younger than ``min_age_s`` by their name's time (a writer may still be adding
            around them); a later run (or a smaller ``min_age_s``) takes them.
        big: shards of half the target size or more: already about the size of an output.
        alone: small shards old enough but with no small neighbour to merge with (between big or
            young shards, or the one left over after a group reached the target): a group of one
            is not rewritten.
    """

    groups: list[list[ShardInfo]] = field(default_factory=list)
    young: int = 0
    big: int = 0
    alone: int = 0


def plan_compaction(shards: list[ShardInfo], *, target_bytes: int, min_age_s: float,
                    now: float | None = None) -> CompactionPlan:
    """Groups of consecutive small shards to merge (see the module docstring), in arrival order,
    and how many shards are left out and why.

    Args:
        shards: the visible shards in arrival order.
        target_bytes: size of an output (bytes on disk); shards of half that or more are big.
        min_age_s: shards younger than this (s, by their name's time) are left out.
        now: UNIX time (s); default: the clock.
    """
    now = time.time() if now is None else now
    plan = CompactionPlan()
    cur: list[ShardInfo] = []
    size = 0

    def close() -> None:
        nonlocal cur, size
        if len(cur) >= 2:
            plan.groups.append(cur)
        else:
            plan.alone += len(cur)
        cur, size = [], 0

    for s in shards:
        t = shard_time_s(s.name)
        big = s.size_bytes >= target_bytes / 2
        young = not big and t is not None and now - t < min_age_s
        if big or young:
            plan.big += big
            plan.young += young
            close()
            continue
        if cur and size + s.size_bytes > target_bytes:
            close()
        cur.append(s)
        size += s.size_bytes
    close()
    return plan


def _delete(store: Store, paths: list[str]) -> None:
    if not paths:
        return
    try:
        if store.is_local:
            for p in paths:
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass
        else:
            store.fs.rm(paths)
    except (OSError, FileNotFoundError) as e:
        raise StoreError(f"could not delete replaced shards under {store.url(TRAJECTORIES_DIR)}: {why(e)}") from e


def finish_earlier(store: Store, *, keep_replaced_s: float, dry_run: bool, result: CompactionResult) -> None:
    """Step 1: delete replaced shards old enough, remove what killed runs left (holding the lock)."""
    _, res = list_view(store)
    assert res is not None
    now = time.time()
    old = []
    for name in res.replaced:
        rec = res.committed.get(res.replaced_by[name])
        if rec is not None and now - rec.created_at >= keep_replaced_s:
            old.append(name)
        else:
            result.replaced_kept += 1
    paths = {p.rsplit("/", 1)[-1]: (p, n) for p, n in store.shard_paths(TRAJECTORIES_DIR)}
    result.replaced_deleted += len(old)
    result.bytes_freed += sum(paths[n][1] for n in old if n in paths)
    result.orphans_removed += len(res.orphans) + len(res.pending)
    if dry_run:
        return
    _delete(store, [paths[n][0] for n in old if n in paths])
    _delete(store, [paths[n][0] for n in res.pending if n in paths])
    for out in [*res.orphans, *res.pending]:
        delete_record(store, out)


def _merge(store: Store, group: list[ShardInfo], seen: set[str]) -> tuple[pa.Table, CompactionRecord]:
    """The group's rows (current schema, arrival order) without ids in `seen` or repeated, and its
    record; `seen` is extended with the kept ids."""
    tables, sources = [], []
    for s in group:
        t = read_shard(store, s)
        ids = t.column("trajectory_id").to_pylist()
        keep, dropped = [], []
        for i, tid in enumerate(ids):
            if tid in seen:
                dropped.append(i)
            else:
                seen.add(tid)
                keep.append(i)
        if dropped:
            t = t.take(pa.array(keep, pa.int64()))
        tables.append(t)
        sources.append((s.name, len(ids), tuple(dropped)))
    # one chunk per column: a table of many small chunks is written as many small pages
    table = pa.concat_tables(tables).combine_chunks().replace_schema_metadata(TRAJECTORY_SCHEMA.metadata)
    record = CompactionRecord(compacted_name(group[0].name), table.num_rows, tuple(sources), pid=os.getpid())
    return table, record


def _ids(store: Store, shard: ShardInfo) -> list[str]:
    return read_shard(store, shard, columns=["trajectory_id"]).column("trajectory_id").to_pylist()


def compact_store(uri: str | os.PathLike[str] | Store, *, storage_options: dict[str, Any] | None = None,
                  target_mb: float = TARGET_MB, min_age_s: float = MIN_AGE_S,
                  keep_replaced_s: float = KEEP_REPLACED_S, dry_run: bool = False, wait_s: float | None = None,
                  on_group: Callable[[dict[str, Any], int, int], None] | None = None) -> CompactionResult:
    """Compact a store's trajectory shards (module docstring).

    Args:
        target_mb: size of an output on disk (MiB); shards of half that or more are left alone.
        min_age_s: leave shards younger than this (by their name's time).
        keep_replaced_s: delete replaced shards once their compaction is this old (0: at once).
        dry_run: only plan (and count what earlier runs left); takes no lock, writes nothing.
        wait_s: give up when another compaction or gc holds the lock this long (None: wait).
        on_group: called after each output is committed with (group dict, index, groups).

    Raises:
        StoreError: the store cannot be written (what was committed stays; rerun to continue),
            or the lock was not acquired within `wait_s`.
    """
    store = uri if isinstance(uri, Store) else open_store(uri, storage_options=storage_options)
    if target_mb <= 0:
        raise ValueError(f"target_mb must be > 0, got {target_mb}")
    result = CompactionResult(store.uri, dry_run)
    with maintenance_lock(store, wait_s=wait_s, dry_run=dry_run):
        finish_earlier(store, keep_replaced_s=keep_replaced_s, dry_run=dry_run, result=result)
        shards, _ = list_view(store)
        plan = plan_compaction(shards, target_bytes=int(target_mb * 2**20), min_age_s=min_age_s)
        groups = plan.groups
        result.left_young, result.left_big, result.left_alone = plan.young, plan.big, plan.alone
        if dry_run:
            result.groups = [{"output": None, "sources": len(g), "rows": sum(s.num_rows for s in g), "dropped": None,
                              "bytes_before": sum(s.size_bytes for s in g), "bytes_after": 0} for g in groups]
            return result
        first = {g[0].name: g for g in groups}
        grouped = {s.name for g in groups for s in g}
        seen: set[str] = set()
        done = 0
        for s in shards:
            if done == len(groups):
                break
            group = first.get(s.name)
            if group is None:
                if s.name not in grouped:  # earlier copies decide what a group drops
                    seen.update(_ids(store, s))
                continue
            table, record = _merge(store, group, seen)
            write_record(store, record)  # 1. the intent
            out = store.write_table(table, subdir=TRAJECTORIES_DIR, name=record.output)  # 2. the commit point
            # past the listing cache: a listing another thread took before this write may stand there
            size = int(fresh_info(store.fs, out)["size"]) if not store.is_local else os.path.getsize(out)
            if keep_replaced_s <= 0:  # 3. no reader to wait for
                _delete(store, [g.path for g in group])
                result.replaced_deleted += len(group)
                result.bytes_freed += sum(g.size_bytes for g in group)
            else:
                result.replaced_kept += len(group)
            info = {"output": store.url_of(out), "sources": len(group), "rows": record.rows,
                    "dropped": sum(len(d) for _, _, d in record.sources),
                    "bytes_before": sum(g.size_bytes for g in group), "bytes_after": size}
            result.groups.append(info)
            done += 1
            if on_group is not None:
                on_group(info, done - 1, len(groups))
    return result
