"""Resuming a run: which checkpoint a start continues from (or none), what is refused before
anything is written, and what of a loaded checkpoint is overridden by the resolved config."""

from __future__ import annotations

import warnings

import torch

from trajstore.errors import TrajstoreWarning
from trajstore.store import Store
from trajstore.store.layout import (
    CHECKPOINT_RNG_FILE,
    checkpoint_latest_file,
    policy_run_dir,
    run_consumed_dir,
    run_dir,
    run_steps_dir,
)
from trajstore.trainer.config import TrainConfig
from trajstore.trainer.loop.checkpoint import (
    Checkpoint,
    CheckpointError,
    load_latest_checkpoint,
    read_latest_pointer,
    set_rng_state,
)


def run_has_records(store: Store, run_id: str) -> bool:
    return bool(store.shard_paths(run_consumed_dir(run_id)) or store.shard_paths(run_steps_dir(run_id)))


def resume_fresh_message(store: Store, run_id: str) -> str:
    """What ``--resume`` of a run without any checkpoint or record says (it starts the run fresh)."""
    return (f"--resume: run {run_id!r} has no checkpoint in {store.uri} (no "
            f"{checkpoint_latest_file(run_id)}), so it starts fresh at iteration 0; check --run if "
            "you meant to continue a run (`traj runs STORE` lists them)")


def interrupted_rerun_hint(store: Store, run_id: str, *, iterations: int) -> str:
    """What a run interrupted before its first checkpoint, after `iterations` recorded
    iterations, can do next: the same command again when nothing was recorded (its v0 is
    published again), else a new ``--run`` (records without a checkpoint cannot be resumed). Either
    way the weights it published stay: ``traj gc`` keeps a run's LATEST version (a rollout server
    may load it), so an abandoned run's folder is deleted by hand once nothing loads it."""
    policies = store.url(policy_run_dir(run_id))
    if iterations == 0:
        return (f"rerun the same command to start it again (it publishes v0 again over {policies}/v0); to abandon "
                f"the run instead, delete {policies} once no rollout server loads it (traj gc keeps a run's "
                "latest version)")
    return (f"its {iterations} recorded iteration(s) cannot be resumed without one: start a new --run; the weights "
            f"it published stay in {policies} (delete the folder once no rollout server loads it: traj gc keeps a "
            "run's latest version)")


def resume_point(store: Store, cfg: TrainConfig, *, resume: bool) -> Checkpoint | None:
    """The checkpoint to resume from (validated), or None for a fresh start.

    Raises:
        CheckpointError: a fresh start on a run that has checkpoints or records; a resume of a
            run that has records but no checkpoint (its records cannot be matched to weights);
            any checkpoint file missing, unreadable, invalid, or from another model.
    """
    run_id = cfg.run.run_id
    if not resume:
        try:
            has_ckpt = read_latest_pointer(store, run_id) is not None
        except CheckpointError:
            has_ckpt = True
        if has_ckpt or run_has_records(store, run_id):
            raise CheckpointError(f"run {run_id!r} already has checkpoints or records in {store.uri}; "
                                  "pass --resume to continue it or choose another --run")
        return None
    ckpt = load_latest_checkpoint(store, run_id)
    if ckpt is None:
        if run_has_records(store, run_id):
            raise CheckpointError(
                f"cannot resume run {run_id!r}: {store.url(run_dir(run_id))} has training records but no "
                f"checkpoint ({store.url(checkpoint_latest_file(run_id))} is missing), so they cannot "
                "be matched to weights; start a new --run (nothing was changed)")
        # A supervisor may always pass --resume (the first start has nothing to resume), so this is
        # no error; but a mistyped --run must not start a new run without a word.
        warnings.warn(resume_fresh_message(store, run_id), TrajstoreWarning, stacklevel=2)
        return None
    saved = TrainConfig.from_json(ckpt.config_json)
    if saved.model.name != cfg.model.name:
        raise CheckpointError(f"checkpoint {store.url(ckpt.path)} trained model {saved.model.name!r}, "
                              f"not {cfg.model.name!r}")
    if (saved.algo.advantage == "sao-gae") != (cfg.algo.advantage == "sao-gae"):
        raise CheckpointError(f"checkpoint {store.url(ckpt.path)} was trained with --advantage "
                              f"{saved.algo.advantage}, not {cfg.algo.advantage}")
    return ckpt


def restore_settings(cfg: TrainConfig, store: Store, ckpt: Checkpoint,
                     optimizers: dict[str, torch.optim.Optimizer]) -> None:
    """After a checkpoint's optimiser states are loaded: the resolved config's hyper-parameters
    (not the saved ones) on every parameter group, and the checkpoint's RNG state.

    Raises:
        CheckpointError: the checkpoint's RNG state is invalid.
    """
    for k, o in optimizers.items():
        for g in o.param_groups:
            g.update(lr=cfg.optim.policy_lr if k == "policy" else cfg.optim.critic_lr,
                     betas=cfg.optim.betas, weight_decay=cfg.optim.weight_decay)
    try:
        set_rng_state(ckpt.rng)
    except ValueError as e:
        raise CheckpointError(f"checkpoint file {store.url(ckpt.path, CHECKPOINT_RNG_FILE)} is invalid: {e}") from None
