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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from trajstore.errors import TrajstoreError
from trajstore.store import RUNS_DIR, Store
from trajstore.trainer.data import DataCursor

CHECKPOINTS_DIR = "checkpoints"
LATEST_FILE = "LATEST"
_FILES = ("policy.pt", "critic.pt", "optim.pt", "rng.pt", "state.json", "config.json")


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
    """

    iteration: int
    step: int
    version: int
    baseline: list[float] | None
    cursor: DataCursor

    def to_json(self) -> str:
        return json.dumps({"iteration": self.iteration, "step": self.step, "version": self.version,
                           "baseline": self.baseline, "cursor": json.loads(self.cursor.to_json())}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> TrainerState:
        d = json.loads(text)
        return cls(int(d["iteration"]), int(d["step"]), int(d["version"]), d["baseline"],
                   DataCursor.from_json(json.dumps(d["cursor"])))


@dataclass
class Checkpoint:
    """A loaded checkpoint: state dicts (CPU tensors), the counters and the saved config JSON."""

    path: str
    state: TrainerState
    policy: dict[str, torch.Tensor]
    critic: dict[str, torch.Tensor] | None
    optim: dict[str, Any]
    rng: dict[str, Any]
    config_json: str


def _ckpt_root(run_id: str) -> str:
    return f"{RUNS_DIR}/{run_id}/{CHECKPOINTS_DIR}"


def _tensor_bytes(obj: Any) -> bytes:
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
    torch.set_rng_state(state["torch"])
    v = json.loads(state["python"])
    random.setstate((v[0], tuple(v[1]), v[2]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(store: Store, run_id: str, *, state: TrainerState, policy: torch.nn.Module,
                    critic: torch.nn.Module | None, optimizers: Mapping[str, torch.optim.Optimizer],
                    config_json: str, keep: int = 2) -> str:
    """Write a checkpoint atomically and make it the latest; prune older ones beyond `keep`.

    Returns:
        The store-relative folder of the checkpoint.

    Raises:
        OSError: the filesystem refused a write (the previous checkpoint stays the latest).
    """
    name = f"it{state.iteration:08d}"
    rel = f"{_ckpt_root(run_id)}/{name}"
    files = {
        "policy.pt": _tensor_bytes(policy.state_dict()),
        "critic.pt": _tensor_bytes(critic.state_dict() if critic is not None else {}),
        "optim.pt": _tensor_bytes({k: o.state_dict() for k, o in optimizers.items()}),
        "rng.pt": _tensor_bytes(rng_state()),
        "state.json": state.to_json().encode(),
        "config.json": config_json.encode(),
    }
    if store.is_local:
        with store.local_dir_commit(rel, prefix="ckpt-") as tmp:  # replaces an uncommitted leftover
            for fname, data in files.items():
                with open(os.path.join(tmp, fname), "wb") as fh:
                    fh.write(data)
    else:
        for fname, data in files.items():
            store.fs.pipe_file(store.path(rel, fname), data)
    store.write_bytes(f"{_ckpt_root(run_id)}/{LATEST_FILE}",
                      json.dumps({"iteration": state.iteration, "dir": name}).encode())
    _prune(store, run_id, keep=keep, latest=name)
    return rel


def _prune(store: Store, run_id: str, *, keep: int, latest: str) -> None:
    names = sorted(d for d in store.iter_dirs(_ckpt_root(run_id)) if d.startswith("it") and d <= latest)
    for old in names[:-keep]:
        store.fs.rm(store.path(_ckpt_root(run_id), old), recursive=True)


def load_latest_checkpoint(store: Store, run_id: str, *, map_location: str = "cpu") -> Checkpoint | None:
    """The committed checkpoint ``LATEST`` names, or None when the run has none.

    Raises:
        CheckpointError: ``LATEST`` names a folder that lacks a file or cannot be read.
    """
    try:
        pointer = json.loads(store.fs.cat_file(store.path(_ckpt_root(run_id), LATEST_FILE)))
    except FileNotFoundError:
        return None
    rel = f"{_ckpt_root(run_id)}/{pointer['dir']}"

    def read(fname: str) -> bytes:
        try:
            return store.fs.cat_file(store.path(rel, fname))
        except FileNotFoundError as e:
            raise CheckpointError(f"checkpoint {store.url(rel)} has no {fname}") from e

    def load(fname: str) -> Any:
        try:
            return torch.load(io.BytesIO(read(fname)), map_location=map_location, weights_only=True)
        except (RuntimeError, EOFError) as e:
            raise CheckpointError(f"checkpoint file {store.url(rel, fname)} is unreadable: {e}") from e

    critic = load("critic.pt")
    return Checkpoint(path=rel, state=TrainerState.from_json(read("state.json").decode()),
                      policy=load("policy.pt"), critic=critic or None, optim=load("optim.pt"),
                      rng=load("rng.pt"), config_json=read("config.json").decode())
