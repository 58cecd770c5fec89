"""Sharded checkpoints of FSDP models: every rank writes its own shards with
torch.distributed.checkpoint (nobody gathers whole weights), committed like a plain checkpoint
(:mod:`trajstore.trainer.loop.checkpoint`: folder first, ``LATEST`` last); loaded at any world size."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch

from trajstore.store import Store
from trajstore.store.layout import CHECKPOINT_CONFIG_FILE, CHECKPOINT_RNG_FILE, CHECKPOINT_STATE_FILE, checkpoint_dir
from trajstore.trainer.loop.checkpoint import (
    Checkpoint,
    CheckpointError,
    TrainerState,
    commit_latest,
    error_line,
    rng_state,
    tensor_bytes,
    write_small,
)


def _sharded_state(modules: Mapping[str, torch.nn.Module],
                   optimizers: Mapping[str, torch.optim.Optimizer]) -> dict[str, Any]:
    """The DCP state of FSDP-sharded modules and their optimisers, keyed ``model/<name>`` and
    ``optim/<name>`` (parameter-name keyed, so it reshards to any world size).

    Pass only optimisers that have stepped: for one without state, torch's
    ``get_optimizer_state_dict`` runs a zero-gradient step to create it, which advances Adam's
    step counter and changes every later update (a policy optimiser checkpointed during the
    critic warm-up would then diverge from an uninterrupted run)."""
    # torch.distributed: loaded only by distributed (DDP / FSDP) runs
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    out: dict[str, Any] = {f"model/{k}": get_model_state_dict(m) for k, m in modules.items()}
    out.update({f"optim/{k}": get_optimizer_state_dict(modules[k], o) for k, o in optimizers.items()})
    return out


def save_checkpoint_sharded(store: Store, run_id: str, *, state: TrainerState,
                            modules: Mapping[str, torch.nn.Module], optimizers: Mapping[str, torch.optim.Optimizer],
                            config_json: str, keep: int, is_main: bool,
                            broadcast: Callable[[Any], Any], barrier: Callable[[], None]) -> str:
    """Write a checkpoint of FSDP-sharded models with torch.distributed.checkpoint (every rank
    writes its own shards, nobody gathers whole weights), atomically, and make it the latest.
    Called on every rank; `broadcast` / `barrier` are the job's collectives. Resumable at any
    world size (:func:`load_checkpoint_sharded`).

    Args:
        modules: the sharded roots by name (``policy``, ``critic``); optimizers: by the same names.
        is_main: this is rank 0 (writes the small files, renames, commits ``LATEST``).

    Returns:
        The store-relative folder of the checkpoint.
    """
    # torch.distributed: loaded only by distributed (DDP / FSDP) runs
    import torch.distributed.checkpoint as dcp

    rel = checkpoint_dir(run_id, state.iteration)
    sd = _sharded_state(modules, {k: o for k, o in optimizers.items() if o.state})
    small = {CHECKPOINT_RNG_FILE: tensor_bytes(rng_state()), CHECKPOINT_STATE_FILE: state.to_json().encode(),
             CHECKPOINT_CONFIG_FILE: config_json.encode()}
    if store.is_local:
        ctx = store.local_dir_commit(rel, prefix="ckpt-") if is_main else contextlib.nullcontext(None)
        with ctx as tmp:
            tmp = broadcast(tmp)
            dcp.save(sd, storage_writer=dcp.FileSystemWriter(tmp))
            if is_main:
                for fname, data in small.items():
                    write_small(os.path.join(tmp, fname), data)
            barrier()  # every rank's shards are written before rank 0 renames the folder
    else:
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

        dcp.save(sd, storage_writer=FsspecWriter(store.url(rel), **store.storage_options))
        if is_main:
            for fname, data in small.items():
                store.fs.pipe_file(store.path(rel, fname), data)
        barrier()
    if is_main:
        commit_latest(store, run_id, state, keep)
    barrier()
    return rel


def load_checkpoint_sharded(store: Store, ckpt: Checkpoint, modules: Mapping[str, torch.nn.Module],
                            optimizers: Mapping[str, torch.optim.Optimizer]) -> None:
    """Load a sharded checkpoint into FSDP-sharded `modules` and their `optimizers` (every
    rank), resharding to the current world size.

    Raises:
        CheckpointError: the shards are missing, unreadable or do not fit the models.
    """
    # torch.distributed: loaded only by distributed (DDP / FSDP) runs
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    if store.is_local:
        reader: Any = dcp.FileSystemReader(store.path(ckpt.path))
    else:
        # torch.distributed: loaded only by distributed (DDP / FSDP) runs
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

        reader = FsspecReader(store.url(ckpt.path), **store.storage_options)
    try:
        saved = {key.split(".", 1)[0] for key in reader.read_metadata().state_dict_metadata}
        missing = [f"model/{k}" for k in modules if not any(x.startswith(f"model/{k}") for x in saved)]
        if missing:
            raise ValueError(f"no {', '.join(missing)} in it")
        # optimisers that had not stepped when the checkpoint was taken stay fresh
        optimizers = {k: o for k, o in optimizers.items() if any(x.startswith(f"optim/{k}") for x in saved)}
        sd = _sharded_state(modules, optimizers)
        dcp.load(sd, storage_reader=reader)
    except Exception as e:  # noqa: BLE001 - DCP wraps per-rank failures in its own exception types
        raise CheckpointError(f"checkpoint {store.url(ckpt.path)} does not fit the sharded models: "
                              f"{error_line(e)}") from None
    for k, m in modules.items():
        set_model_state_dict(m, sd[f"model/{k}"])
    for k, o in optimizers.items():
        set_optimizer_state_dict(modules[k], o, sd[f"optim/{k}"])
