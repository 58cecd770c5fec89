"""Freeing a finished ``traj demo`` run's disk: its superseded policy versions and checkpoints."""

from __future__ import annotations

import os
import shutil
from typing import Any

from trajstore.policies import latest_policy_version, list_policy_versions
from trajstore.store.layout import checkpoints_dir, version_dir


def _tree_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def run_has_weights(store: Any, run_id: str) -> bool:
    """Whether run `run_id` already has published policy versions or checkpoints (local stores)."""
    return bool(list_policy_versions(store, run_id)) or os.path.isdir(store.path(checkpoints_dir(run_id)))


def prune_weights(store: Any, run_id: str) -> int:
    """Remove a finished demo run's superseded policy versions (all but the latest) and its
    checkpoints (a demo is never resumed); return the bytes freed. Local stores only."""
    latest = latest_policy_version(store, run_id)
    doomed = [store.path(version_dir(run_id, v)) for v in list_policy_versions(store, run_id) if v != latest]
    doomed.append(store.path(checkpoints_dir(run_id)))
    freed = 0
    for path in doomed:
        if os.path.isdir(path):
            freed += _tree_bytes(path)
            shutil.rmtree(path)
    return freed
