"""Checkpoints: policy, critic, optimisers, RNG, trainer counters and the data cursor, together.

Layout under ``runs/<run_id>/checkpoints/``::

    it<iteration, 8 digits>/{policy.pt, critic.pt, optim.pt, rng.pt, state.json, config.json}
    LATEST          {"iteration": i, "dir": "it0000000i"}: the commit point

A checkpoint is committed when ``LATEST`` names it. Locally the folder is written under
``_tmp/`` (every file fsynced), renamed into place, and only then is ``LATEST`` replaced
atomically; on object stores the files are PUT first and ``LATEST`` last. A crash at any
moment leaves the previous committed checkpoint intact. Tensors are loaded with
``weights_only=True`` (no pickled code runs on load).
"""

from __future__ import annotations

import io
import json
import os
import random
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trajstore.errors import TrajstoreError
from trajstore.store import Store
from trajstore.store.layout import (
    CHECKPOINT_CONFIG_FILE,
    CHECKPOINT_CRITIC_FILE,
    CHECKPOINT_OPTIM_FILE,
    CHECKPOINT_POLICY_FILE,
    CHECKPOINT_RNG_FILE,
    CHECKPOINT_SHARDED_METADATA_FILE,
    CHECKPOINT_STATE_FILE,
    checkpoint_dir,
    checkpoint_dir_name,
    checkpoint_latest_file,
    checkpoints_dir,
    parse_checkpoint_dir_name,
)
from trajstore.trainer.config import TrainConfig
from trajstore.trainer.data import DataCursor


class CheckpointError(TrajstoreError):
    """A checkpoint is missing, incomplete, or does not fit the run being resumed."""


@dataclass
class TrainerState:
    """Counters restored on resume.

    Attributes:
        iteration: batches fully trained (warm-up included); the next batch is this index.
        step: policy updates done (the next policy step's index).
        version: current policy version (v0 = initial weights; +1 per policy update).
        baseline: the running-mean baseline's window of past rewards (reward units, oldest
            first), None when that baseline is not used.
        cursor: data cursor after the last trained batch.
        warmup_done: the critic warm-up has ended (policy steps run from the next batch on).
    """

    iteration: int
    step: int
    version: int
    baseline: list[float] | None
    cursor: DataCursor
    warmup_done: bool = False

    def to_json(self) -> str:
        return json.dumps({"iteration": self.iteration, "step": self.step, "version": self.version,
                           "baseline": self.baseline, "cursor": json.loads(self.cursor.to_json()),
                           "warmup_done": self.warmup_done}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> TrainerState:
        """Parse and validate ``state.json``.

        Raises:
            ValueError: not JSON, a missing or mistyped field, a negative counter, more policy
                steps than iterations, or a version below the step count.
        """
        d = _StateFile.model_validate_json(text)
        done = d.warmup_done if d.warmup_done is not None else d.step > 0  # older files: inferred
        return cls(d.iteration, d.step, d.version, d.baseline,
                   DataCursor(list(d.cursor.done_shards), d.cursor.shard, d.cursor.next_row), done)


class _CursorFile(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    done_shards: list[str]
    shard: str | None
    next_row: int = Field(ge=0)


class _StateFile(BaseModel):
    """The schema of ``state.json`` (what :meth:`TrainerState.from_json` accepts)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    iteration: int = Field(ge=0)
    step: int = Field(ge=0)
    version: int = Field(ge=0)
    baseline: list[float] | None
    cursor: _CursorFile
    warmup_done: bool | None = None

    @model_validator(mode="after")
    def _consistent(self) -> _StateFile:
        if self.step > self.iteration:
            raise ValueError(f"step {self.step} > iteration {self.iteration} (a policy step is an iteration)")
        if self.version < self.step:
            raise ValueError(f"version {self.version} < step {self.step} (each policy step adds a version)")
        return self


class _LatestFile(BaseModel):
    """The schema of ``LATEST``: the committed checkpoint's iteration and its folder name, which
    must be a plain ``it<8 digits>`` name (never a path that leaves the run's folder)."""

    model_config = ConfigDict(extra="forbid")
    iteration: int = Field(ge=0)
    dir: str = Field(pattern=r"^it\d{8,}$")

    @model_validator(mode="after")
    def _consistent(self) -> _LatestFile:
        if self.dir != checkpoint_dir_name(self.iteration):
            raise ValueError(f"dir {self.dir!r} is not the folder of iteration {self.iteration}")
        return self


@dataclass
class Checkpoint:
    """A loaded checkpoint: state dicts (CPU tensors), the counters and the saved config JSON.
    A sharded checkpoint (FSDP, ``sharded``) carries no state dicts here: its tensors are loaded
    into the sharded models by :func:`load_checkpoint_sharded`."""

    path: str
    state: TrainerState
    policy: dict[str, torch.Tensor] | None
    critic: dict[str, torch.Tensor] | None
    optim: dict[str, Any] | None
    rng: dict[str, Any]
    config_json: str
    sharded: bool = False


def tensor_bytes(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def rng_state() -> dict[str, Any]:
    """torch (CPU and CUDA) and Python RNG states, as tensors and JSON text."""
    out: dict[str, Any] = {"torch": torch.get_rng_state(), "python": json.dumps(random.getstate())}
    if torch.cuda.is_available():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore :func:`rng_state`'s output.

    Raises:
        ValueError: the states are not what :func:`rng_state` saves.
    """
    try:
        torch.set_rng_state(state["torch"])
        v = json.loads(state["python"])
        random.setstate((v[0], tuple(v[1]), v[2]))
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as e:
        raise ValueError(f"not a saved RNG state: {error_line(e)}") from None
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def write_small(path: str, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)


def _commit_folder(store: Store, rel: str, fill: Callable[[str], None]) -> None:
    """Have `fill(folder)` write a checkpoint's files into a local folder, then make them appear
    at `rel`: locally by renaming a fsynced ``_tmp/`` folder into place (atomic), on object stores
    by uploading each file from a local temporary folder (``LATEST``, written after, commits)."""
    if store.is_local:
        with store.local_dir_commit(rel, prefix="ckpt-") as tmp:  # replaces an uncommitted leftover
            fill(tmp)
        return
    with tempfile.TemporaryDirectory(prefix="trajstore-ckpt-") as tmp:
        fill(tmp)
        for fname in sorted(os.listdir(tmp)):
            store.fs.put_file(os.path.join(tmp, fname), store.path(rel, fname))


def commit_latest(store: Store, run_id: str, state: TrainerState, keep: int) -> None:
    store.write_bytes(checkpoint_latest_file(run_id),
                      json.dumps({"iteration": state.iteration, "dir": checkpoint_dir_name(state.iteration)}).encode())
    _prune(store, run_id, keep=keep, latest=state.iteration)


def save_checkpoint(store: Store, run_id: str, *, state: TrainerState, policy: torch.nn.Module,
                    critic: torch.nn.Module | None, optimizers: Mapping[str, torch.optim.Optimizer],
                    config_json: str, keep: int = 2) -> str:
    """Write a checkpoint atomically and make it the latest; prune older ones beyond `keep`.

    Whole (unsharded) state dicts, one ``.pt`` file each, written by ``torch.save`` straight to
    the file (never a second copy of the weights in memory). For FSDP-sharded models see
    :func:`save_checkpoint_sharded`.

    Returns:
        The store-relative folder of the checkpoint.

    Raises:
        OSError: the filesystem refused a write (the previous checkpoint stays the latest).
    """
    rel = checkpoint_dir(run_id, state.iteration)

    def fill(folder: str) -> None:
        torch.save(policy.state_dict(), os.path.join(folder, CHECKPOINT_POLICY_FILE))
        torch.save(critic.state_dict() if critic is not None else {}, os.path.join(folder, CHECKPOINT_CRITIC_FILE))
        torch.save({k: o.state_dict() for k, o in optimizers.items()}, os.path.join(folder, CHECKPOINT_OPTIM_FILE))
        torch.save(rng_state(), os.path.join(folder, CHECKPOINT_RNG_FILE))
        write_small(os.path.join(folder, CHECKPOINT_STATE_FILE), state.to_json().encode())
        write_small(os.path.join(folder, CHECKPOINT_CONFIG_FILE), config_json.encode())

    _commit_folder(store, rel, fill)
    commit_latest(store, run_id, state, keep)
    return rel


def _prune(store: Store, run_id: str, *, keep: int, latest: int) -> None:
    """Delete the checkpoint folders of iterations up to `latest` but the `keep` newest."""
    done = sorted(it for d in store.iter_dirs(checkpoints_dir(run_id))
                  if (it := parse_checkpoint_dir_name(d)) is not None and it <= latest)
    for old in done[:-keep]:
        store.fs.rm(store.path(checkpoint_dir(run_id, old)), recursive=True)


def error_line(e: Exception) -> str:
    """`e` in one line for a :class:`CheckpointError` message: a pydantic ``ValidationError`` as
    ``field.path: message; ...``, any other exception as its first line (its class name when it
    has no text)."""
    if isinstance(e, ValidationError):
        return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'value'}: {err['msg']}" for err in e.errors())
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def read_latest_pointer(store: Store, run_id: str) -> str | None:
    """Store-relative folder of the committed checkpoint ``LATEST`` names, or None without one.

    Raises:
        CheckpointError: ``LATEST`` is unreadable, not the JSON object
            ``{"iteration": i, "dir": "it<i, 8 digits>"}``, or names a path outside the run's
            checkpoints folder.
    """
    latest = checkpoint_latest_file(run_id)
    try:
        raw = store.fs.cat_file(store.path(latest))
    except FileNotFoundError:
        return None
    except OSError as e:
        raise CheckpointError(f"checkpoint pointer {store.url(latest)} is unreadable: {error_line(e)}") from None
    try:
        pointer = _LatestFile.model_validate_json(raw)
    except ValidationError as e:
        raise CheckpointError(f"checkpoint pointer {store.url(latest)} is invalid: {error_line(e)}") from None
    return checkpoint_dir(run_id, pointer.iteration)  # its dir is this iteration's folder (_LatestFile)


def _check_tensor_dict(obj: Any, what: str) -> dict[str, torch.Tensor]:
    if not isinstance(obj, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                            for k, v in obj.items()):
        raise ValueError(f"{what} is not a state dict (a mapping of parameter names to tensors)")
    return obj


def load_latest_checkpoint(store: Store, run_id: str, *, map_location: str = "cpu") -> Checkpoint | None:
    """The committed checkpoint ``LATEST`` names, or None when the run has none.

    Every file is checked: present, readable by ``torch.load(weights_only=True)`` (no pickled code
    runs), of the expected structure (state dicts of tensors, the optimiser states, the RNG
    states, a valid ``state.json`` whose iteration matches ``LATEST``, a valid ``config.json``).
    Whether the tensors fit the model is checked when they are loaded into it
    (:func:`load_state_dict_checked`).

    Raises:
        CheckpointError: naming the file: ``LATEST`` invalid or pointing outside the run's
            checkpoints folder, a file missing, unreadable or of the wrong structure.
    """
    rel = read_latest_pointer(store, run_id)
    if rel is None:
        return None

    def read(fname: str) -> bytes:
        try:
            return store.fs.cat_file(store.path(rel, fname))
        except FileNotFoundError:
            raise CheckpointError(f"checkpoint {store.url(rel)} has no {fname} (incomplete or damaged; "
                                  "resume from an earlier checkpoint by pointing LATEST at it)") from None
        except OSError as e:
            raise CheckpointError(f"checkpoint file {store.url(rel, fname)} is unreadable: {error_line(e)}") from None

    def load(fname: str, check: Callable[[Any], Any]) -> Any:
        data = read(fname)
        try:
            obj = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
            return check(obj)
        except Exception as e:  # noqa: BLE001 - torch.load raises many types for garbage / foreign pickles
            raise CheckpointError(f"checkpoint file {store.url(rel, fname)} is unreadable: {error_line(e)}") from None

    def optim_check(obj: Any) -> dict[str, Any]:
        if not isinstance(obj, dict) or not all(isinstance(v, dict) and {"state", "param_groups"} <= set(v)
                                                for v in obj.values()):
            raise ValueError("not a mapping of optimiser names to optimiser state dicts")
        return obj

    def rng_check(obj: Any) -> dict[str, Any]:
        if not isinstance(obj, dict) or not isinstance(obj.get("torch"), torch.Tensor) \
                or not isinstance(obj.get("python"), str):
            raise ValueError("not the RNG states this trainer saves (torch tensor and python state)")
        return obj

    try:
        state = TrainerState.from_json(read(CHECKPOINT_STATE_FILE).decode())
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"checkpoint file {store.url(rel, CHECKPOINT_STATE_FILE)} is invalid: "
                              f"{error_line(e)}") from None
    if checkpoint_dir(run_id, state.iteration) != rel:
        raise CheckpointError(f"checkpoint file {store.url(rel, CHECKPOINT_STATE_FILE)} says iteration "
                              f"{state.iteration}, but its folder is {rel.rsplit('/', 1)[-1]}")
    config_json = read(CHECKPOINT_CONFIG_FILE).decode(errors="replace")
    try:
        TrainConfig.from_json(config_json)
    except (ValueError, ValidationError) as e:
        raise CheckpointError(f"checkpoint file {store.url(rel, CHECKPOINT_CONFIG_FILE)} is invalid: "
                              f"{error_line(e)}") from None
    rng = load(CHECKPOINT_RNG_FILE, rng_check)
    if store.fs.exists(store.path(rel, CHECKPOINT_SHARDED_METADATA_FILE)):
        # torch.distributed: loaded only by distributed (DDP / FSDP) runs
        import torch.distributed.checkpoint as dcp

        try:
            if store.is_local:
                dcp.FileSystemReader(store.path(rel)).read_metadata()
            elif not store.fs.cat_file(store.path(rel, CHECKPOINT_SHARDED_METADATA_FILE)):
                raise ValueError("empty file")
        except Exception as e:  # noqa: BLE001 - a damaged .metadata is a pickle or I/O error
            raise CheckpointError(f"checkpoint file {store.url(rel, CHECKPOINT_SHARDED_METADATA_FILE)} is "
                                  f"unreadable: {error_line(e)}") from None
        return Checkpoint(path=rel, state=state, policy=None, critic=None, optim=None, rng=rng,
                          config_json=config_json, sharded=True)
    policy = load(CHECKPOINT_POLICY_FILE, lambda o: _check_tensor_dict(o, CHECKPOINT_POLICY_FILE))
    critic = load(CHECKPOINT_CRITIC_FILE, lambda o: _check_tensor_dict(o, CHECKPOINT_CRITIC_FILE))
    return Checkpoint(path=rel, state=state, policy=policy, critic=critic or None,
                      optim=load(CHECKPOINT_OPTIM_FILE, optim_check), rng=rng, config_json=config_json)


def load_state_dict_checked(module: torch.nn.Module, state: Mapping[str, torch.Tensor], *, what: str) -> None:
    """``module.load_state_dict(state)`` (strict), with missing / unexpected keys and shape
    mismatches reported as one line naming `what` (the checkpoint file).

    Raises:
        CheckpointError: the state dict does not fit the module.
    """
    own = module.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [f"{k}: {tuple(state[k].shape)} vs model {tuple(own[k].shape)}" for k in own
              if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"missing keys {missing[:3]}{' ...' if len(missing) > 3 else ''}")
        if unexpected:
            parts.append(f"unexpected keys {unexpected[:3]}{' ...' if len(unexpected) > 3 else ''}")
        if shapes:
            parts.append(f"wrong shapes {shapes[:2]}{' ...' if len(shapes) > 2 else ''}")
        raise CheckpointError(f"checkpoint file {what} does not fit the model: {'; '.join(parts)}")
    module.load_state_dict(state)


def load_optimizer_checked(opt: torch.optim.Optimizer, state: Mapping[str, Any], *, what: str) -> None:
    """``opt.load_state_dict(state)`` after checking that every saved per-parameter tensor
    (Adam's moments) has its parameter's shape.

    Raises:
        CheckpointError: a different number of parameter groups or parameters, or a shape that
            does not match (names `what`, the checkpoint file).
    """
    params = [p for g in opt.param_groups for p in g["params"]]
    groups = state.get("param_groups", [])
    saved_ids = [i for g in groups for i in g.get("params", [])]
    if len(groups) != len(opt.param_groups) or len(saved_ids) != len(params):
        raise CheckpointError(f"checkpoint file {what} does not fit the optimiser: {len(saved_ids)} parameters in "
                              f"{len(groups)} group(s) saved, {len(params)} in {len(opt.param_groups)} now")
    for idx, p in zip(saved_ids, params):
        for k, v in state.get("state", {}).get(idx, {}).items():
            if isinstance(v, torch.Tensor) and v.dim() > 0 and tuple(v.shape) != tuple(p.shape):
                raise CheckpointError(f"checkpoint file {what} does not fit the optimiser: state {k!r} of "
                                      f"parameter {idx} has shape {tuple(v.shape)}, the parameter {tuple(p.shape)}")
    try:
        opt.load_state_dict(dict(state))
    except (ValueError, KeyError, RuntimeError) as e:
        raise CheckpointError(f"checkpoint file {what} does not fit the optimiser: {error_line(e)}") from None
