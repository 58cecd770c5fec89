"""What training runs occupy in a store: for each run its published policy versions, its
checkpoints and its records, with their sizes (``traj runs``). Reads listings and small JSON
files only (no torch), so it works without the ``train`` extra."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from trajstore.store import POLICIES_DIR, RUN_CONSUMED_DIR, RUN_STEPS_DIR, RUNS_DIR, TMP_DIR, Store, open_store

CHECKPOINTS_DIR = "checkpoints"
"""Folder of a run's checkpoints: ``runs/<run_id>/checkpoints/it<iteration>/`` and ``LATEST``."""
_VERSION = re.compile(r"^v(\d+)$")
_CKPT = re.compile(r"^it(\d+)$")


@dataclass
class VersionInfo:
    """One published version folder: its number, bytes on disk, and whether it is complete
    (has ``meta.json``; an incomplete one is a publish in progress or an interrupted one)."""

    version: int
    bytes: int
    complete: bool


@dataclass
class CheckpointInfo:
    """One checkpoint folder: its iteration, bytes, and whether ``LATEST`` names it."""

    iteration: int
    bytes: int
    latest: bool


@dataclass
class RunInfo:
    """A training run's footprint in a store.

    Attributes:
        run_id: the run. model: the model named in its config.json (None without one).
        latest_version: the version ``policies/<run_id>/LATEST`` names (None without one).
        versions, checkpoints: ascending. records_bytes: its steps and consumed shards.
    """

    run_id: str
    model: str | None = None
    latest_version: int | None = None
    versions: list[VersionInfo] = field(default_factory=list)
    checkpoints: list[CheckpointInfo] = field(default_factory=list)
    records_bytes: int = 0

    @property
    def versions_bytes(self) -> int:
        return sum(v.bytes for v in self.versions)

    @property
    def checkpoints_bytes(self) -> int:
        return sum(c.bytes for c in self.checkpoints)

    @property
    def total_bytes(self) -> int:
        return self.versions_bytes + self.checkpoints_bytes + self.records_bytes


@dataclass
class RunsReport:
    """Every run of a store, and the bytes of temporary leftovers under ``_tmp/``."""

    store: str
    runs: list[RunInfo]
    tmp_bytes: int


def _du(store: Store, *parts: str) -> int:
    try:
        return int(store.fs.du(store.path(*parts), total=True))
    except FileNotFoundError:
        return 0


def _json(store: Store, *parts: str) -> dict | None:
    try:
        out = json.loads(store.fs.cat_file(store.path(*parts)))
    except (FileNotFoundError, ValueError, UnicodeDecodeError):
        return None
    return out if isinstance(out, dict) else None


def list_runs(store: Store | str, *, storage_options: dict | None = None) -> RunsReport:
    """The runs of `store` (any with a ``runs/<id>/`` or ``policies/<id>/`` folder), by id.

    Raises:
        StoreError: the store cannot be listed.
    """
    s = open_store(store, storage_options=storage_options)
    ids = sorted(set(s.iter_dirs(RUNS_DIR)) | set(s.iter_dirs(POLICIES_DIR)))
    runs = []
    for run_id in ids:
        info = RunInfo(run_id)
        cfg = _json(s, RUNS_DIR, run_id, "config.json")
        if cfg is not None:
            info.model = (cfg.get("model") or {}).get("name")
        latest = _json(s, POLICIES_DIR, run_id, "LATEST")
        if latest is not None and isinstance(latest.get("version"), int):
            info.latest_version = latest["version"]
        for d in s.iter_dirs(f"{POLICIES_DIR}/{run_id}"):
            if m := _VERSION.match(d):
                info.versions.append(VersionInfo(int(m.group(1)), _du(s, POLICIES_DIR, run_id, d),
                                                 s.fs.exists(s.path(POLICIES_DIR, run_id, d, "meta.json"))))
        info.versions.sort(key=lambda v: v.version)
        pointer = _json(s, RUNS_DIR, run_id, CHECKPOINTS_DIR, "LATEST")
        for d in s.iter_dirs(f"{RUNS_DIR}/{run_id}/{CHECKPOINTS_DIR}"):
            if m := _CKPT.match(d):
                info.checkpoints.append(CheckpointInfo(int(m.group(1)), _du(s, RUNS_DIR, run_id, CHECKPOINTS_DIR, d),
                                                       pointer is not None and pointer.get("dir") == d))
        info.checkpoints.sort(key=lambda c: c.iteration)
        info.records_bytes = _du(s, RUNS_DIR, run_id, RUN_STEPS_DIR) + _du(s, RUNS_DIR, run_id, RUN_CONSUMED_DIR)
        runs.append(info)
    return RunsReport(s.uri, runs, _du(s, TMP_DIR) if s.is_local else 0)
