"""Scanning a store for secrets (``traj redact --dry-run``, and ``traj export``'s refusal) and
rewriting the shards that hold some (``traj redact``).

Every row of every trajectory shard is read, the hidden copies of duplicated ids included (a
reader skips them, an export of the files would not). A shard is rewritten only when one of its
rows changed, atomically and under its own name (:meth:`~trajstore.store.Store.rewrite_shard`,
as ``traj migrate`` does): readers see the old file or the new one, never a mix; rows keep their
order, so arrival order, duplicate resolution and training cursors (shard name and row) hold;
unchanged rows are copied as stored. Training records (``runs/<id>/``) are not touched: they name
trajectories by id, which a redaction never changes.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Collection
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa

from trajstore.convert import table_to_trajectories
from trajstore.maintenance.replace_rows import replace_rows
from trajstore.reader import read_shard, read_trajectories_by_id
from trajstore.redact.lineage import refork
from trajstore.redact.report import Finding, RedactionResult, ScanReport, Unscanned
from trajstore.redact.rules import RedactConfig
from trajstore.redact.trajectory import Redacted, Redactor
from trajstore.store import CorruptShardWarning, ShardInfo, Store, open_store, scalar_cache
from trajstore.store.layout import TRAJECTORIES_DIR
from trajstore.store.lock import maintenance_lock

OnShard = Callable[[ShardInfo, int, int], None]
"""Progress callback: (shard, its index, number of shards), called after each shard."""


def _open(uri: str | os.PathLike[str] | Store, storage_options: dict[str, Any] | None) -> Store:
    return uri if isinstance(uri, Store) else open_store(uri, storage_options=storage_options)


def _list_shards(store: Store, unscanned: list[Unscanned]) -> list[ShardInfo]:
    """The readable trajectory shards; each unreadable one becomes an :class:`Unscanned` entry
    (a secret may be in it) instead of a warning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CorruptShardWarning)
        shards = store.list_shards(TRAJECTORIES_DIR)
    for w in caught:
        if issubclass(w.category, CorruptShardWarning):
            unscanned.append(Unscanned(None, str(w.message), getattr(w.message, "shard", None)))
        else:  # not ours to swallow
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return shards


def _read(store: Store, shard: ShardInfo, unscanned: list[Unscanned]) -> pa.Table | None:
    try:
        return read_shard(store, shard)
    except (OSError, pa.ArrowException) as e:
        unscanned.append(Unscanned(None, f"cannot decode: {str(e).splitlines()[0]}", store.url_of(shard.path)))
        return None


def find_secrets(uri: str | os.PathLike[str] | Store, *, config: RedactConfig | None = None,
                 storage_options: dict[str, Any] | None = None, trajectory_ids: Collection[str] | None = None,
                 on_shard: OnShard | None = None) -> ScanReport:
    """Every secret in a store's trajectories (spans, metadata, raw rewards); nothing is changed.

    Args:
        uri: the store (local path or fsspec URL) or an open :class:`Store`.
        config: the rules (default :class:`RedactConfig`: the built-in detectors).
        trajectory_ids: scan only these trajectories (every stored copy of each); None = all.
        on_shard: progress callback.

    Returns:
        A :class:`ScanReport`; ``report.clean`` is what ``traj redact --dry-run`` exits 0 on.

    Raises:
        StoreError: the store cannot be listed.
    """
    store = _open(uri, storage_options)
    redactor = Redactor(config)
    report = ScanReport(store.uri)
    shards = _list_shards(store, report.unscanned)
    wanted = None if trajectory_ids is None else set(trajectory_ids)
    for n, shard in enumerate(shards):
        table = _read(store, shard, report.unscanned)
        report.shards += 1
        if table is not None:
            url = store.url_of(shard.path)
            rows = range(table.num_rows)
            if wanted is not None:
                ids = table.column("trajectory_id").to_pylist()
                rows = [i for i in rows if ids[i] in wanted]
                table = table.take(pa.array(rows, type=pa.int64()))
            for row, t in zip(rows, table_to_trajectories(table)):
                scan = redactor.scan(t)
                report.trajectories += 1
                report.findings += [_placed(f, url, row) for f in scan.findings]
                if scan.unscanned is not None:
                    report.unscanned.append(Unscanned(t.trajectory_id, scan.unscanned, url, row))
        if on_shard is not None:
            on_shard(shard, n, len(shards))
    return report


def store_has_findings(uri: str | os.PathLike[str] | Store, *, config: RedactConfig | None = None,
                       storage_options: dict[str, Any] | None = None,
                       trajectory_ids: Collection[str] | None = None) -> bool:
    """Whether ``traj redact --dry-run`` would fail on the store (or on `trajectory_ids`): a secret
    found, or a row or shard that could not be scanned. What ``traj export`` refuses to write on."""
    return not find_secrets(uri, config=config, storage_options=storage_options,
                            trajectory_ids=trajectory_ids).clean


def redact_store(uri: str | os.PathLike[str] | Store, *, config: RedactConfig | None = None,
                 storage_options: dict[str, Any] | None = None, on_shard: OnShard | None = None,
                 wait_s: float | None = None) -> RedactionResult:
    """Rewrite every shard holding a secret without it (see the module docstring and
    :meth:`~trajstore.redact.trajectory.Redactor.redact` for what a trajectory becomes).

    Holds the store's maintenance lock (:func:`~trajstore.store.lock.maintenance_lock`) from the
    listing to the last rewrite, waiting for a running ``traj compact`` / ``traj gc`` first: a
    compaction cannot copy a shard into a merged one that this run then misses.

    Args:
        wait_s: give up when another maintenance command holds the lock this long (None: wait).

    Interrupting it loses nothing: each shard is the old file or the new one, and a rerun finds
    only what is left (a redacted trajectory has no secret of the same rules any more).

    Raises:
        StoreError: a shard could not be written back (it is untouched; rerun to continue).
        TrajectoryValidationError: a rewritten trajectory would break a schema rule (a bug; that
            shard is left as it was).
    """
    store = _open(uri, storage_options)
    redactor = Redactor(config)
    result = RedactionResult(store.uri)
    with maintenance_lock(store, wait_s=wait_s):
        store.remove_stale_rewrites()
        shards = _list_shards(store, result.unscanned)  # listed under the lock: what a compaction left
        before: dict[str, np.ndarray] = {}
        for n, shard in enumerate(shards):
            _redact_shard(store, shard, redactor, result, before)
            if on_shard is not None:
                on_shard(shard, n, len(shards))
        if before:
            _refork_store(store, before, result)
        if result.shards_rewritten:
            scalar_cache.clear(store)  # it may hold the old rows' metadata
    return result


def _redact_shard(store: Store, shard: ShardInfo, redactor: Redactor, result: RedactionResult,
                  before: dict[str, np.ndarray]) -> None:
    """Scan one shard and rewrite it when a row changed (holding the maintenance lock); the
    token ids of each row whose tokens changed go into `before`, by trajectory id."""
    table = _read(store, shard, result.unscanned)
    result.shards += 1
    if table is not None:
        url = store.url_of(shard.path)
        changed: dict[int, Redacted] = {}
        for row, t in enumerate(table_to_trajectories(table)):
            result.trajectories += 1
            r = redactor.redact(t)
            unscanned = r.unscanned if r is not None else redactor.unscanned(t)
            if unscanned is not None:
                result.unscanned.append(Unscanned(t.trajectory_id, unscanned, url, row))
            if r is not None:
                changed[row] = r
                if not np.array_equal(np.asarray(t.tokens), np.asarray(r.trajectory.tokens)):
                    before[t.trajectory_id] = np.asarray(t.tokens)
        if changed:
            store.rewrite_shard(shard.path, replace_rows(table, {i: r.trajectory for i, r in changed.items()}))
            result.shards_rewritten.append(url)
            result.trajectories_redacted += len(changed)
            result.made_not_trainable += sum(r.made_not_trainable for r in changed.values())
            result.changes += [_placed(c, url, row) for row, r in sorted(changed.items()) for c in r.changes]


def _refork_store(store: Store, before: dict[str, np.ndarray], result: RedactionResult) -> None:
    """After the rewrites: recompute the ``fork_point`` of every child whose own tokens or whose
    parent's changed (ids in `before`, with their tokens before), wherever it is stored, and
    rewrite the shards holding one that changed (:func:`~trajstore.redact.lineage.refork`)."""
    links: dict[str, list[tuple[int, str, str, int]]] = {}
    infos = {s.path: s for s in store.list_shards(TRAJECTORIES_DIR)}
    for path, shard in infos.items():
        t = read_shard(store, shard, columns=["trajectory_id", "parent_trajectory_id", "fork_point"])
        rows = zip(*(t.column(c).to_pylist() for c in ("trajectory_id", "parent_trajectory_id", "fork_point")))
        for row, (tid, parent, fork) in enumerate(rows):
            if parent is not None and fork is not None and (tid in before or parent in before):
                links.setdefault(path, []).append((row, tid, parent, fork))
    if not links:
        return
    need = sorted({x for rows in links.values() for _, tid, parent, _ in rows for x in (tid, parent)})
    got = read_trajectories_by_id(store, need, columns=["trajectory_id", "tokens"])
    now = {i: np.asarray(t) for i, t in zip(got.column("trajectory_id").to_pylist(), got.column("tokens").to_pylist())}
    for path, rows in links.items():
        forks = {}
        for row, tid, parent, fork in rows:
            if tid in now and parent in now:
                new = refork(fork, before.get(tid, now[tid]), now[tid], before.get(parent, now[parent]), now[parent])
                if new != fork:
                    forks[row] = new
        if not forks:
            continue
        table = read_shard(store, infos[path])
        olds = table_to_trajectories(table.take(pa.array(sorted(forks), type=pa.int64())))
        store.rewrite_shard(path, replace_rows(table, {row: t.model_copy(update={"fork_point": forks[row]})
                                                      for row, t in zip(sorted(forks), olds)}))
        result.fork_points_fixed += len(forks)
        url = store.url_of(path)
        if url not in result.shards_rewritten:
            result.shards_rewritten.append(url)


def _placed(f: Finding, shard: str, row: int) -> Finding:
    return replace(f, shard=shard, row=row)
