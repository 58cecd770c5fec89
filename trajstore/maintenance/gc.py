"""``traj gc``: retention by rule. A dry run by default: it lists what it would delete and the
bytes; ``dry_run=False`` deletes, holding the store's maintenance lock (one ``traj gc`` or
``traj compact`` per store at a time).

Rules, each off unless given:

- ``keep_versions=N``: per run, published policy versions beyond the newest N, except the one
  ``LATEST`` names and the one before it (a rollout server may still be loading it), any version
  a checkpoint of the run was taken at (``state.json``'s ``version``), and folders without
  ``meta.json`` (a publish in progress);
- ``keep_checkpoints=N``: per run, checkpoints beyond the newest N, except the one ``LATEST``
  names and any newer than it (a checkpoint being committed);
- trajectories consumed by every run in ``consumed_by``, optionally only those older than
  ``older_than_s`` and of ``statuses``, and only once every run that can resume has read them
  (:mod:`trajstore.maintenance.gc_rows`).

Shards that ``traj compact`` replaced are also deleted once their compaction is
``keep_replaced_s`` old, as ``traj compact`` itself does.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from trajstore.maintenance.compact import KEEP_REPLACED_S, CompactionResult, finish_earlier
from trajstore.maintenance.gc_rows import delete_rows, plan_rows, report_items
from trajstore.policies import latest_policy_version, list_policy_versions
from trajstore.schema import STATUSES
from trajstore.store import scalar_cache
from trajstore.store.handle import Store
from trajstore.store.layout import (
    CHECKPOINT_STATE_FILE,
    POLICIES_DIR,
    RUNS_DIR,
    VERSION_META_FILE,
    checkpoint_dir,
    checkpoint_latest_file,
    checkpoints_dir,
    parse_checkpoint_dir_name,
    version_dir,
)
from trajstore.store.lock import maintenance_lock
from trajstore.store.open import open_store


@dataclass(frozen=True)
class GcRules:
    """What ``traj gc`` may delete (module docstring); None / empty = that rule is off.

    Raises:
        ValueError: a bound out of range, a trajectory rule without ``consumed_by``, or a status
            that is not one of :data:`trajstore.schema.STATUSES`.
    """

    keep_versions: int | None = None
    keep_checkpoints: int | None = None
    consumed_by: tuple[str, ...] = ()
    older_than_s: float | None = None
    statuses: tuple[str, ...] | None = None
    ignore_runs: tuple[str, ...] = ()
    keep_replaced_s: float = KEEP_REPLACED_S

    def __post_init__(self) -> None:
        if self.keep_versions is not None and self.keep_versions < 2:
            raise ValueError(f"keep_versions must be >= 2 (the latest and the one before), got {self.keep_versions}")
        if self.keep_checkpoints is not None and self.keep_checkpoints < 1:
            raise ValueError(f"keep_checkpoints must be >= 1, got {self.keep_checkpoints}")
        if (self.older_than_s is not None or self.statuses is not None) and not self.consumed_by:
            raise ValueError("trajectories are deleted only once consumed: name the runs (consumed_by)")
        bad = [s for s in self.statuses or () if s not in STATUSES]
        if bad:
            raise ValueError(f"statuses: {', '.join(map(repr, bad))} is not a trajectory status "
                             f"(one of {', '.join(STATUSES)})")


@dataclass
class GcResult:
    """What :func:`gc_store` deleted (or, in a dry run, would delete).

    Attributes:
        items: one dict per thing: ``kind`` (``policy_version``, ``checkpoint``, ``trajectories``,
            ``replaced_shards``), ``what`` (a path, or rows of a shard), ``bytes``.
        kept: why things matching a rule are kept (a run that may still need them).
    """

    store: str
    dry_run: bool
    items: list[dict[str, Any]] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(i["bytes"] for i in self.items)


def _tree_bytes(store: Store, rel: str) -> int:
    path = store.path(rel)
    if store.is_local:
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)
    try:
        return int(store.fs.du(path, total=True))
    except FileNotFoundError:
        return 0


def _rm_tree(store: Store, rel: str) -> None:
    try:
        store.fs.rm(store.path(rel), recursive=True)
    except FileNotFoundError:
        pass


def _checkpoints(store: Store, run_id: str) -> tuple[list[int], int | None]:
    """Iterations of a run's checkpoint folders (ascending) and the one ``LATEST`` names."""
    its = sorted(i for d in store.iter_dirs(checkpoints_dir(run_id)) if (i := parse_checkpoint_dir_name(d)) is not None)
    try:
        latest = int(json.loads(store.fs.cat_file(store.path(checkpoint_latest_file(run_id))))["iteration"])
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        latest = None
    return its, latest


def _checkpoint_versions(store: Store, run_id: str, its: list[int]) -> set[int]:
    """Policy versions the run's checkpoints were taken at."""
    out = set()
    for it in its:
        try:
            out.add(int(json.loads(store.fs.cat_file(store.path(checkpoint_dir(run_id, it), CHECKPOINT_STATE_FILE)))
                        ["version"]))
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            continue
    return out


def _weights(store: Store, rules: GcRules) -> list[dict[str, Any]]:
    """Policy versions and checkpoints the rules allow deleting."""
    items = []
    runs = set(store.iter_dirs(RUNS_DIR)) | set(store.iter_dirs(POLICIES_DIR))
    for run in sorted(runs):
        its, latest_it = _checkpoints(store, run)
        if rules.keep_checkpoints is not None:
            protected = set(its[-rules.keep_checkpoints:])
            if latest_it is not None:
                protected |= {i for i in its if i >= latest_it}
            else:  # no committed checkpoint: one may be being committed; keep them all
                protected |= set(its)
            for it in its:
                if it not in protected:
                    rel = checkpoint_dir(run, it)
                    items.append({"kind": "checkpoint", "what": store.url(rel), "bytes": _tree_bytes(store, rel),
                                  "_rel": rel})
        if rules.keep_versions is not None:
            versions = list_policy_versions(store, run)
            latest = latest_policy_version(store, run)
            protected = set(versions[-rules.keep_versions:]) | _checkpoint_versions(store, run, its)
            if latest is not None:
                protected |= {latest, *[v for v in versions if v < latest][-1:]}
            for v in versions:
                if v not in protected:
                    rel = version_dir(run, v)
                    items.append({"kind": "policy_version", "what": store.url(rel), "bytes": _tree_bytes(store, rel),
                                  "_rel": rel})
    return items


def gc_store(uri: str | os.PathLike[str] | Store, rules: GcRules, *, dry_run: bool = True,
             storage_options: dict[str, Any] | None = None, wait_s: float | None = None) -> GcResult:
    """Apply the retention `rules` (module docstring); a dry run unless ``dry_run=False`` (a dry
    run takes no lock and writes nothing).

    A shard that keeps some of its rows is replaced by a shard of those rows; with
    ``keep_replaced_s`` 0 the old one is deleted in the same run (its rows' item counts it),
    otherwise by a later ``traj gc`` / ``traj compact`` once that old.

    Raises:
        StoreError: the store cannot be written, or the lock was not acquired within `wait_s`.
    """
    store = uri if isinstance(uri, Store) else open_store(uri, storage_options=storage_options)
    result = GcResult(store.uri, dry_run)
    with maintenance_lock(store, wait_s=wait_s, dry_run=dry_run):
        earlier = CompactionResult(store.uri, dry_run)
        finish_earlier(store, keep_replaced_s=rules.keep_replaced_s, dry_run=dry_run, result=earlier)
        if earlier.replaced_deleted:
            result.items.append({"kind": "replaced_shards", "what": f"{earlier.replaced_deleted} shards merged by traj "
                                 "compact", "bytes": earlier.bytes_freed})
        weights = _weights(store, rules)
        rows = plan_rows(store, consumed_by=rules.consumed_by, older_than_s=rules.older_than_s,
                         statuses=rules.statuses, ignore_runs=rules.ignore_runs)
        result.kept += rows.blocked
        result.items += [{k: v for k, v in i.items() if k != "_rel"} for i in weights] + report_items(rows)
        if dry_run:
            return result
        for item in weights:
            if item["kind"] == "policy_version":  # un-complete first: no reader trusts a half-deleted version
                try:
                    store.fs.rm_file(store.path(item["_rel"], VERSION_META_FILE))
                except FileNotFoundError:
                    pass
            _rm_tree(store, item["_rel"])
        if delete_rows(store, rows, keep_replaced_s=rules.keep_replaced_s) or earlier.replaced_deleted:
            scalar_cache.clear(store)  # no copy of a deleted trajectory's scalars stays behind
    return result
