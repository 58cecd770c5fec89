"""Every path of a store: named folder and file names, and small functions that build
store-relative paths from them (``/``-separated; :meth:`Store.path` joins them to the root).
The store, the readers, the trainer, the proxy and the CLI build their paths here, never by hand."""

from __future__ import annotations

import os
import re
import socket
import time
import uuid

TRAJECTORIES_DIR = "trajectories"
"""Trajectory shards: ``trajectories/<shard>.parquet``."""
RUNS_DIR = "runs"
"""One folder per training run: ``runs/<run_id>/``."""
POLICIES_DIR = "policies"
"""One folder per run's published policies: ``policies/<run_id>/``."""
TMP_DIR = "_tmp"
"""Local stores only: shards, rewrites, checkpoints and policies being written (never read)."""
LOCKS_DIR = "_locks"
"""Lock files of writers that serialise their commits (``traj ingest``: ``_locks/ingest.lock``)."""
STORE_FIRST_ENTRIES = frozenset({TRAJECTORIES_DIR, TMP_DIR, LOCKS_DIR})
"""What a writer creates before its first shard: a folder holding only these (``trajectories/``
empty) is a store being created. ``runs/`` and ``policies/`` count only with their own marks."""

RUN_STEPS_DIR = "steps"
"""Per-step training records of a run: ``runs/<run_id>/steps/<shard>.parquet``."""
RUN_CONSUMED_DIR = "consumed"
"""Which trajectories a run trained on: ``runs/<run_id>/consumed/<shard>.parquet``."""
RUN_CONFIG_FILE = "config.json"
"""The resolved training config of a run: ``runs/<run_id>/config.json``."""
RUN_TENSORBOARD_DIR = "tensorboard"
"""TensorBoard event files of a run: ``runs/<run_id>/tensorboard/``."""
CHECKPOINTS_DIR = "checkpoints"
"""A run's checkpoints: ``runs/<run_id>/checkpoints/it<iteration, 8 digits>/`` and ``LATEST``."""
LATEST_FILE = "LATEST"
"""The commit pointer (small JSON) of ``policies/<run_id>/`` and of ``runs/<run_id>/checkpoints/``."""

SHARD_SUFFIX = ".parquet"
LOCK_SUFFIX = ".lock"

HOST_TAG = "".join(c for c in socket.gethostname() if c.isalnum())[:16] or "host"
"""This host in shard and ``_tmp/`` names (alphanumerics of the host name, at most 16)."""

_VERSION_DIR = re.compile(r"^v(\d+)$")
_CHECKPOINT_DIR = re.compile(r"^it(\d+)$")


def new_shard_name() -> str:
    """``<utc ns, 20 digits>-<host>-<pid>-<random>.parquet``: unique across hosts and
    processes, and sorting names sorts by write time (arrival order)."""
    return f"{time.time_ns():020d}-{HOST_TAG}-{os.getpid()}-{uuid.uuid4().hex[:12]}{SHARD_SUFFIX}"


def tmp_path(name: str) -> str:
    """``_tmp/<name>``: an entry being written (local stores)."""
    return f"{TMP_DIR}/{name}"


def lock_file(name: str) -> str:
    """``_locks/<name>.lock``: the lock file of the writers named `name`."""
    return f"{LOCKS_DIR}/{name}{LOCK_SUFFIX}"


def run_dir(run_id: str) -> str:
    """``runs/<run_id>``: everything a training run writes besides its policies."""
    return f"{RUNS_DIR}/{run_id}"


def run_steps_dir(run_id: str) -> str:
    """``runs/<run_id>/steps``: the run's per-step records (Parquet shards)."""
    return f"{run_dir(run_id)}/{RUN_STEPS_DIR}"


def run_consumed_dir(run_id: str) -> str:
    """``runs/<run_id>/consumed``: which trajectories the run trained on (Parquet shards)."""
    return f"{run_dir(run_id)}/{RUN_CONSUMED_DIR}"


def run_config_file(run_id: str) -> str:
    """``runs/<run_id>/config.json``: the run's resolved training config."""
    return f"{run_dir(run_id)}/{RUN_CONFIG_FILE}"


def run_tensorboard_dir(run_id: str) -> str:
    """``runs/<run_id>/tensorboard``: the run's TensorBoard event files."""
    return f"{run_dir(run_id)}/{RUN_TENSORBOARD_DIR}"


def checkpoints_dir(run_id: str) -> str:
    """``runs/<run_id>/checkpoints``: the run's checkpoint folders and their ``LATEST`` pointer."""
    return f"{run_dir(run_id)}/{CHECKPOINTS_DIR}"


def checkpoint_dir_name(iteration: int) -> str:
    """``it<iteration, 8 digits>``: the folder name of the checkpoint after `iteration`."""
    return f"it{iteration:08d}"


def checkpoint_dir(run_id: str, iteration: int) -> str:
    """``runs/<run_id>/checkpoints/it<iteration, 8 digits>``: one checkpoint folder."""
    return f"{checkpoints_dir(run_id)}/{checkpoint_dir_name(iteration)}"


def checkpoint_latest_file(run_id: str) -> str:
    """``runs/<run_id>/checkpoints/LATEST``: names the committed checkpoint."""
    return f"{checkpoints_dir(run_id)}/{LATEST_FILE}"


def parse_checkpoint_dir_name(name: str) -> int | None:
    """The iteration of a checkpoint folder name (``it00000012`` -> 12), None for any other name."""
    m = _CHECKPOINT_DIR.match(name)
    return int(m.group(1)) if m else None


def check_run_id(run_id: str) -> None:
    """Raise ValueError unless `run_id` is one path component not starting with '.' or '_'."""
    if not run_id or "/" in run_id or run_id.startswith((".", "_")):
        raise ValueError(f"run_id {run_id!r} must be a non-empty path component not starting with '.' or '_'")


def policy_run_dir(run_id: str) -> str:
    """``policies/<run_id>``: the run's published versions and their ``LATEST`` pointer."""
    return f"{POLICIES_DIR}/{run_id}"


def version_dir_name(version: int) -> str:
    """``v<N>``: the folder name of published policy version `version`."""
    return f"v{version}"


def version_dir(run_id: str, version: int) -> str:
    """Store-relative folder of one published version: ``policies/<run_id>/v<N>``.

    Raises:
        ValueError: `run_id` is not one plain path component, or `version` is negative.
    """
    check_run_id(run_id)
    if version < 0:
        raise ValueError(f"policy version must be >= 0, got {version}")
    return f"{policy_run_dir(run_id)}/{version_dir_name(version)}"


def parse_version_dir_name(name: str) -> int | None:
    """The version of a published-version folder name (``v3`` -> 3), None for any other name."""
    m = _VERSION_DIR.match(name)
    return int(m.group(1)) if m else None


def policy_latest_file(run_id: str) -> str:
    """``policies/<run_id>/LATEST``: names the version rollout servers should load."""
    return f"{policy_run_dir(run_id)}/{LATEST_FILE}"
