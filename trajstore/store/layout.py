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
COMPACTIONS_DIR = "_compactions"
"""Inside ``trajectories/``: one record per compaction output, ``trajectories/_compactions/<output
stem>.json``, naming the shards it replaces (:mod:`trajstore.store.compaction_records`)."""
INDEX_DIR = "_index"
"""Inside ``trajectories/``: the shard index, append-only files of footer facts by shard name
(:mod:`trajstore.store.index`)."""
SCALAR_CACHE_DIR = "scalars"
"""Inside ``trajectories/_index/``: the scalar cache, append-only files of the shards' scalar
columns by shard name (:mod:`trajstore.store.scalar_cache`)."""
ID_LOOKUP_DIR = "ids"
"""Inside ``trajectories/_index/``: the merged id lookup, every shard's id index in one sorted
file (:mod:`trajstore.store.id_lookup_file`)."""
STORE_FIRST_ENTRIES = frozenset({TRAJECTORIES_DIR, TMP_DIR, LOCKS_DIR})
"""What a writer creates before its first shard: a folder holding only these (``trajectories/``
empty) is a store being created. ``runs/`` and ``policies/`` count only with their own marks."""

RUN_STEPS_DIR = "steps"
"""Per-step training records of a run: ``runs/<run_id>/steps/<shard>.parquet``."""
RUN_CONSUMED_DIR = "consumed"
"""Which trajectories a run trained on: ``runs/<run_id>/consumed/<shard>.parquet``."""
RUN_TOKENS_DIR = "tokens"
"""Per-token trainer annotations of a run (``traj train --record-tokens``):
``runs/<run_id>/tokens/<shard>.parquet``."""
RUN_CONFIG_FILE = "config.json"
"""The resolved training config of a run: ``runs/<run_id>/config.json``."""
RUN_TENSORBOARD_DIR = "tensorboard"
"""TensorBoard event files of a run: ``runs/<run_id>/tensorboard/``."""
CHECKPOINTS_DIR = "checkpoints"
"""A run's checkpoints: ``runs/<run_id>/checkpoints/it<iteration, 8 digits>/`` and ``LATEST``."""
LATEST_FILE = "LATEST"
"""The commit pointer (small JSON) of ``policies/<run_id>/`` and of ``runs/<run_id>/checkpoints/``."""

CHECKPOINT_POLICY_FILE = "policy.pt"
"""In a checkpoint folder: the policy's state dict (``torch.save``)."""
CHECKPOINT_CRITIC_FILE = "critic.pt"
"""In a checkpoint folder: the critic's state dict (an empty dict without a critic)."""
CHECKPOINT_OPTIM_FILE = "optim.pt"
"""In a checkpoint folder: the optimisers' state dicts, by optimiser name."""
CHECKPOINT_RNG_FILE = "rng.pt"
"""In a checkpoint folder: the torch and Python RNG states."""
CHECKPOINT_STATE_FILE = "state.json"
"""In a checkpoint folder: the trainer's counters and data cursor."""
CHECKPOINT_CONFIG_FILE = "config.json"
"""In a checkpoint folder: the resolved training config the checkpoint was taken under."""
CHECKPOINT_FILES = (CHECKPOINT_POLICY_FILE, CHECKPOINT_CRITIC_FILE, CHECKPOINT_OPTIM_FILE, CHECKPOINT_RNG_FILE,
                    CHECKPOINT_STATE_FILE, CHECKPOINT_CONFIG_FILE)
"""The files of a whole-state-dict checkpoint folder."""
CHECKPOINT_SHARDED_METADATA_FILE = ".metadata"
"""In a sharded (FSDP) checkpoint folder: the index torch.distributed.checkpoint writes beside
its shards; its presence marks the folder as sharded."""
CHECKPOINT_SHARD_SUFFIX = ".distcp"
"""In a sharded checkpoint folder: torch.distributed.checkpoint's shard files (``__<rank>_0.distcp``)."""
SHARDED_CHECKPOINT_FILES = (CHECKPOINT_SHARDED_METADATA_FILE, CHECKPOINT_RNG_FILE, CHECKPOINT_STATE_FILE,
                            CHECKPOINT_CONFIG_FILE)
"""The files a sharded checkpoint folder has besides its ``*.distcp`` shards."""

VERSION_WEIGHTS_FILE = "model.safetensors"
"""In a published version folder: the policy's weights (tied tensors stored once)."""
VERSION_CONFIG_FILE = "config.json"
"""In a published version folder: the model's Hugging Face config."""
VERSION_META_FILE = "meta.json"
"""In a published version folder, written last: a version is complete iff it exists."""

RUN_LOG_SUFFIX = ".log"
"""``runs/<run_id>/<process>.log``: output of a run's processes (``traj demo`` keeps its children's)."""
RUN_APP_CONFIG_SUFFIX = "-config.json"
"""``runs/<run_id>/<app>-config.json``: the config an application ran the run with (``traj demo``)."""

SHARD_SUFFIX = ".parquet"
LOCK_SUFFIX = ".lock"
RECORD_SUFFIX = ".json"
INDEX_SUFFIX = ".arrow"
SCALAR_CACHE_SUFFIX = ".scalars"
ID_LOOKUP_SUFFIX = ".ids"

HOST_TAG = "".join(c for c in socket.gethostname() if c.isalnum())[:16] or "host"
"""This host in shard and ``_tmp/`` names (alphanumerics of the host name, at most 16)."""

_VERSION_DIR = re.compile(r"^v(\d+)$")
_CHECKPOINT_DIR = re.compile(r"^it(\d+)$")


def new_shard_name() -> str:
    """``<utc ns, 20 digits>-<host>-<pid>-<random>.parquet``: unique across hosts and
    processes, and sorting names sorts by write time (arrival order)."""
    return f"{time.time_ns():020d}-{HOST_TAG}-{os.getpid()}-{uuid.uuid4().hex[:12]}{SHARD_SUFFIX}"


def compaction_record_file(output_name: str) -> str:
    """``trajectories/_compactions/<output stem>.json``: the record of the compaction that wrote
    the shard `output_name` (``<stem>.parquet``)."""
    return f"{TRAJECTORIES_DIR}/{COMPACTIONS_DIR}/{output_name.removesuffix(SHARD_SUFFIX)}{RECORD_SUFFIX}"


def compactions_dir() -> str:
    """``trajectories/_compactions``: every compaction record."""
    return f"{TRAJECTORIES_DIR}/{COMPACTIONS_DIR}"


def shard_index_dir() -> str:
    """``trajectories/_index``: the shard index's files."""
    return f"{TRAJECTORIES_DIR}/{INDEX_DIR}"


def shard_index_file(name: str) -> str:
    """``trajectories/_index/<name>``: one file of the shard index (``<utc ns>-<host>-<pid>-<random>.arrow``)."""
    return f"{shard_index_dir()}/{name}"


def scalar_cache_dir() -> str:
    """``trajectories/_index/scalars``: the scalar cache's files."""
    return f"{shard_index_dir()}/{SCALAR_CACHE_DIR}"


def id_lookup_dir() -> str:
    """``trajectories/_index/ids``: the merged id lookup's files."""
    return f"{shard_index_dir()}/{ID_LOOKUP_DIR}"


def id_lookup_file(name: str) -> str:
    """``trajectories/_index/ids/<name>``: one file of the merged id lookup (``<utc ns>-<host>-<pid>-<random>.ids``)."""
    return f"{id_lookup_dir()}/{name}"


def scalar_cache_file(name: str) -> str:
    """``trajectories/_index/scalars/<name>``: one file of the scalar cache (``<utc ns>-<host>-<pid>-<random>.scalars``)."""
    return f"{scalar_cache_dir()}/{name}"


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


def run_tokens_dir(run_id: str) -> str:
    """``runs/<run_id>/tokens``: the run's per-token trainer annotations (Parquet shards, written only
    with ``traj train --record-tokens``)."""
    return f"{run_dir(run_id)}/{RUN_TOKENS_DIR}"


def run_config_file(run_id: str) -> str:
    """``runs/<run_id>/config.json``: the run's resolved training config."""
    return f"{run_dir(run_id)}/{RUN_CONFIG_FILE}"


def run_log_file(run_id: str, process: str) -> str:
    """``runs/<run_id>/<process>.log``: the output of one of the run's processes (e.g. ``trainer``)."""
    return f"{run_dir(run_id)}/{process}{RUN_LOG_SUFFIX}"


def run_app_config_file(run_id: str, app: str) -> str:
    """``runs/<run_id>/<app>-config.json``: the resolved config of the application that ran the run
    (``traj demo`` saves ``demo`` and the ``demo-train`` config it hands its trainer)."""
    return f"{run_dir(run_id)}/{app}{RUN_APP_CONFIG_SUFFIX}"


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
    """The iteration of a checkpoint folder name (``it00000012`` -> 12), None for any other name
    (also for one :func:`checkpoint_dir_name` would not write, such as ``it12``)."""
    m = _CHECKPOINT_DIR.match(name)
    return int(m.group(1)) if m and checkpoint_dir_name(int(m.group(1))) == name else None


def is_run_id(name: str) -> bool:
    """Whether `name` can be a run id: one non-empty path component not starting with '.' or '_'."""
    return bool(name) and "/" not in name and not name.startswith((".", "_"))


def check_run_id(run_id: str) -> None:
    """Raise ValueError unless `run_id` is one path component not starting with '.' or '_'."""
    if not is_run_id(run_id):
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
    """The version of a published-version folder name (``v3`` -> 3), None for any other name
    (also for one :func:`version_dir_name` would not write, such as ``v03``)."""
    m = _VERSION_DIR.match(name)
    return int(m.group(1)) if m and version_dir_name(int(m.group(1))) == name else None


def policy_latest_file(run_id: str) -> str:
    """``policies/<run_id>/LATEST``: names the version rollout servers should load."""
    return f"{policy_run_dir(run_id)}/{LATEST_FILE}"



def _is_shard_name(name: str) -> bool:
    """A name the shard listings read (``*.parquet``, not hidden, not ``_``-prefixed)."""
    return name.endswith(SHARD_SUFFIX) and not name.startswith((".", "_"))


def classify(relpath: str) -> str | None:
    """The template of this layout that a store-relative file path is an instance of, or None
    when no writer of the layout puts a file there.

    Example: ``classify("runs/r1/checkpoints/it00000002/rng.pt")`` is
    ``"runs/<run_id>/checkpoints/it<iteration>/<checkpoint file>"``. A version folder holds a
    Hugging Face model folder (:data:`VERSION_WEIGHTS_FILE`, :data:`VERSION_CONFIG_FILE`, the
    tokenizer's files, :data:`VERSION_META_FILE`), so any file name is accepted there; a
    checkpoint folder holds :data:`CHECKPOINT_FILES`, or :data:`SHARDED_CHECKPOINT_FILES` and
    ``*`` :data:`CHECKPOINT_SHARD_SUFFIX` shards.

    Args:
        relpath: ``/``-separated, relative to the store's root (what :func:`run_dir` and the
            other functions here return, with a file name where they name a folder).
    """
    top, *rest = relpath.split("/")
    n = len(rest)
    if top == TRAJECTORIES_DIR and n == 1 and _is_shard_name(rest[0]):
        return f"{TRAJECTORIES_DIR}/<shard>{SHARD_SUFFIX}"
    if top == TRAJECTORIES_DIR and n == 2 and rest[0] == COMPACTIONS_DIR and rest[1].endswith(RECORD_SUFFIX) \
            and _is_shard_name(rest[1].removesuffix(RECORD_SUFFIX) + SHARD_SUFFIX):
        return f"{TRAJECTORIES_DIR}/{COMPACTIONS_DIR}/<output stem>{RECORD_SUFFIX}"
    if top == TRAJECTORIES_DIR and n == 2 and rest[0] == INDEX_DIR and rest[1].endswith(INDEX_SUFFIX) \
            and not rest[1].startswith((".", "_")):
        return f"{TRAJECTORIES_DIR}/{INDEX_DIR}/<index file>{INDEX_SUFFIX}"
    if top == TRAJECTORIES_DIR and n == 3 and rest[:2] == [INDEX_DIR, SCALAR_CACHE_DIR] \
            and rest[2].endswith(SCALAR_CACHE_SUFFIX) and not rest[2].startswith((".", "_")):
        return f"{TRAJECTORIES_DIR}/{INDEX_DIR}/{SCALAR_CACHE_DIR}/<scalar cache file>{SCALAR_CACHE_SUFFIX}"
    if top == TRAJECTORIES_DIR and n == 3 and rest[:2] == [INDEX_DIR, ID_LOOKUP_DIR] \
            and rest[2].endswith(ID_LOOKUP_SUFFIX) and not rest[2].startswith((".", "_")):
        return f"{TRAJECTORIES_DIR}/{INDEX_DIR}/{ID_LOOKUP_DIR}/<id lookup file>{ID_LOOKUP_SUFFIX}"
    if top == TMP_DIR and n >= 1 and all(rest):
        return f"{TMP_DIR}/<entry being written>"
    if top == LOCKS_DIR and n == 1 and rest[0].endswith(LOCK_SUFFIX):
        return f"{LOCKS_DIR}/<name>{LOCK_SUFFIX}"
    if top not in (RUNS_DIR, POLICIES_DIR) or n < 2 or not is_run_id(rest[0]) or not all(rest):
        return None
    run = "<run_id>"
    if top == POLICIES_DIR:
        if rest[1:] == [LATEST_FILE]:
            return f"{POLICIES_DIR}/{run}/{LATEST_FILE}"
        if n == 3 and parse_version_dir_name(rest[1]) is not None:
            return f"{POLICIES_DIR}/{run}/v<N>/<model file>"
        return None
    kind = rest[1]
    if rest[1:] == [RUN_CONFIG_FILE]:
        return f"{RUNS_DIR}/{run}/{RUN_CONFIG_FILE}"
    if n == 2 and kind.endswith(RUN_LOG_SUFFIX) and len(kind) > len(RUN_LOG_SUFFIX):
        return f"{RUNS_DIR}/{run}/<process>{RUN_LOG_SUFFIX}"
    if n == 2 and kind.endswith(RUN_APP_CONFIG_SUFFIX) and len(kind) > len(RUN_APP_CONFIG_SUFFIX):
        return f"{RUNS_DIR}/{run}/<app>{RUN_APP_CONFIG_SUFFIX}"
    if kind in (RUN_STEPS_DIR, RUN_CONSUMED_DIR, RUN_TOKENS_DIR) and n == 3 and _is_shard_name(rest[2]):
        return f"{RUNS_DIR}/{run}/{kind}/<shard>{SHARD_SUFFIX}"
    if kind == RUN_TENSORBOARD_DIR and n >= 3:
        return f"{RUNS_DIR}/{run}/{RUN_TENSORBOARD_DIR}/<event file>"
    if kind == CHECKPOINTS_DIR and rest[2:] == [LATEST_FILE]:
        return f"{RUNS_DIR}/{run}/{CHECKPOINTS_DIR}/{LATEST_FILE}"
    if kind == CHECKPOINTS_DIR and n == 4 and parse_checkpoint_dir_name(rest[2]) is not None and (
            rest[3] in CHECKPOINT_FILES or rest[3] in SHARDED_CHECKPOINT_FILES
            or rest[3].endswith(CHECKPOINT_SHARD_SUFFIX)):
        return f"{RUNS_DIR}/{run}/{CHECKPOINTS_DIR}/it<iteration>/<checkpoint file>"
    return None
