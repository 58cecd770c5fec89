"""What training runs occupy in a store: for each run its published policy versions, its
checkpoints and its records, with their sizes (``traj runs``). Reads listings and small JSON
files only (no torch), so it works without the ``train`` extra."""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field

from trajstore.store import POLICIES_DIR, RUNS_DIR, TMP_DIR, Store, open_store
from trajstore.store.layout import (
    CHECKPOINT_FILES,
    CHECKPOINT_SHARDED_METADATA_FILE,
    CHECKPOINT_STATE_FILE,
    SHARDED_CHECKPOINT_FILES,
    VERSION_META_FILE,
    checkpoint_dir,
    checkpoint_dir_name,
    checkpoint_latest_file,
    checkpoints_dir,
    is_run_id,
    parse_checkpoint_dir_name,
    parse_version_dir_name,
    policy_latest_file,
    policy_run_dir,
    run_config_file,
    run_consumed_dir,
    run_steps_dir,
    run_tokens_dir,
    version_dir,
)


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
    problems: list[str] = field(default_factory=list)
    """What is damaged: an unreadable or dangling ``LATEST`` (checkpoints or policies), a checkpoint
    with a file missing, empty or truncated, a ``state.json`` that does not match its folder
    (what ``traj train --resume`` would refuse), one line each naming the file."""

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


def _du(store: Store, rel: str) -> int:
    try:
        return int(store.fs.du(store.path(rel), total=True))
    except FileNotFoundError:
        return 0


def _json(store: Store, rel: str) -> dict | None:
    try:
        out = json.loads(store.fs.cat_file(store.path(rel)))
    except (FileNotFoundError, ValueError, UnicodeDecodeError):
        return None
    return out if isinstance(out, dict) else None


def _read_json(store: Store, rel: str) -> tuple[bool, dict | None, str | None]:
    """(exists, the JSON object or None, why it is not one or None) of the small file `rel`."""
    try:
        raw = store.fs.cat_file(store.path(rel))
    except FileNotFoundError:
        return False, None, None
    except OSError as e:
        return True, None, f"unreadable ({type(e).__name__}: {e})"
    try:
        out = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        return True, None, f"not valid JSON ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
    return (True, out, None) if isinstance(out, dict) else (True, None, f"not a JSON object ({type(out).__name__})")


def _checkpoint_problems(store: Store, run_id: str, iteration: int) -> list[str]:
    """What is wrong with the checkpoint folder of `iteration`, checked without torch: every file
    present and non-empty, each ``.pt`` a whole zip archive (what ``torch.save`` writes; a
    truncated one has no central directory), ``state.json`` valid JSON naming this iteration."""
    rel = checkpoint_dir(run_id, iteration)
    try:
        entries = {e["name"].rstrip("/").rsplit("/", 1)[-1]: int(e.get("size") or 0)
                   for e in store.fs.ls(store.path(rel), detail=True)}
    except (FileNotFoundError, NotADirectoryError):
        return [f"checkpoint {store.url(rel)} is not a folder"]
    need = SHARDED_CHECKPOINT_FILES if CHECKPOINT_SHARDED_METADATA_FILE in entries else CHECKPOINT_FILES
    out = []
    missing = [f for f in need if f not in entries]
    if missing:
        out.append(f"checkpoint {store.url(rel)} has no {', '.join(missing)}")
    for f in need:
        if f in entries and entries[f] == 0:
            out.append(f"checkpoint file {store.url(rel, f)} is empty")
        elif f in entries and f.endswith(".pt"):
            try:
                with store.fs.open(store.path(rel, f), "rb") as fh:
                    whole = zipfile.is_zipfile(fh)
            except OSError:
                whole = False
            if not whole:
                out.append(f"checkpoint file {store.url(rel, f)} is damaged (not a whole torch.save archive)")
    if entries.get(CHECKPOINT_STATE_FILE):
        state_file = f"{rel}/{CHECKPOINT_STATE_FILE}"
        _, state, why = _read_json(store, state_file)
        if why:
            out.append(f"checkpoint file {store.url(state_file)} is {why}")
        elif state is not None and state.get("iteration") != iteration:
            out.append(f"checkpoint file {store.url(state_file)} says iteration {state.get('iteration')!r}, "
                       f"not {iteration}")
    return out


def list_runs(store: Store | str, *, storage_options: dict | None = None) -> RunsReport:
    """The runs of `store` (any with a ``runs/<id>/`` or ``policies/<id>/`` folder), by id.
    Folders there whose name is no run id (hidden ones, ``_``-prefixed ones) are left out.

    Raises:
        StoreError: the store cannot be listed.
    """
    s = open_store(store, storage_options=storage_options)
    ids = sorted(run_id for run_id in set(s.iter_dirs(RUNS_DIR)) | set(s.iter_dirs(POLICIES_DIR))
                 if is_run_id(run_id))
    runs = []
    for run_id in ids:
        info = RunInfo(run_id)
        cfg = _json(s, run_config_file(run_id))
        if cfg is not None:
            info.model = (cfg.get("model") or {}).get("name")
        latest_file = policy_latest_file(run_id)
        found, latest, why = _read_json(s, latest_file)
        if latest is not None and isinstance(latest.get("version"), int) and not isinstance(latest["version"], bool):
            info.latest_version = latest["version"]
        elif found:
            info.problems.append(f"{s.url(latest_file)} is {why or 'not a pointer'} "
                                 "(a rollout server following this run cannot load the latest version)")
        for d in s.iter_dirs(policy_run_dir(run_id)):
            if (v := parse_version_dir_name(d)) is not None:
                rel = version_dir(run_id, v)
                info.versions.append(VersionInfo(v, _du(s, rel), s.fs.exists(s.path(rel, VERSION_META_FILE))))
        info.versions.sort(key=lambda v: v.version)
        if info.latest_version is not None and not any(v.version == info.latest_version and v.complete
                                                       for v in info.versions):
            info.problems.append(f"{s.url(latest_file)} names v{info.latest_version}, which is "
                                 "missing or incomplete")
        ckpt_latest = checkpoint_latest_file(run_id)
        found, pointer, why = _read_json(s, ckpt_latest)
        latest_dir = pointer.get("dir") if pointer is not None else None
        for d in s.iter_dirs(checkpoints_dir(run_id)):
            if (it := parse_checkpoint_dir_name(d)) is not None:
                info.checkpoints.append(CheckpointInfo(it, _du(s, checkpoint_dir(run_id, it)),
                                                       latest_dir == checkpoint_dir_name(it)))
                info.problems += _checkpoint_problems(s, run_id, it)
        info.checkpoints.sort(key=lambda c: c.iteration)
        where = s.url(ckpt_latest)
        if found and (why or not isinstance(latest_dir, str) or parse_checkpoint_dir_name(latest_dir) is None):
            info.problems.append(f"{where} is {why or 'not a checkpoint pointer'}: --resume refuses this run")
        elif found and not any(c.latest for c in info.checkpoints):
            info.problems.append(f"{where} names {latest_dir}, which does not exist: --resume refuses this run")
        elif not found and info.checkpoints:
            info.problems.append(f"{where} is missing (no checkpoint was committed): --resume cannot continue "
                                 "this run")
        info.records_bytes = (_du(s, run_steps_dir(run_id)) + _du(s, run_consumed_dir(run_id))
                              + _du(s, run_tokens_dir(run_id)))
        runs.append(info)
    return RunsReport(s.uri, runs, _du(s, TMP_DIR) if s.is_local else 0)
