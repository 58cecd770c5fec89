"""What the loop saves of a :class:`~trajstore.trainer.loop.trainer.Trainer` besides its
records: the current policy version, published for rollout engines, and checkpoints, for
``--resume``; both coordinated across ranks."""

from __future__ import annotations

import torch

from trajstore.trainer.config import TrainConfig
from trajstore.trainer.loop import distributed as D
from trajstore.trainer.loop.checkpoint import save_checkpoint
from trajstore.trainer.loop.checkpoint_sharded import save_checkpoint_sharded
from trajstore.trainer.loop.publish import prune_versions, publish_policy
from trajstore.trainer.loop.trainer import Trainer


def publish_dtype(cfg: TrainConfig, env: D.DistEnv) -> torch.dtype:
    """dtype of published weights: ``run.publish_dtype``, where ``auto`` = bfloat16 when the run
    computes in bf16 (CUDA with ``run.bf16``), else float32."""
    if cfg.run.publish_dtype == "auto":
        return torch.bfloat16 if env.device.type == "cuda" and cfg.run.bf16 else torch.float32
    return getattr(torch, cfg.run.publish_dtype)


def publish(tr: Trainer, *, force: bool = False) -> None:
    """Publish the current policy version (rank 0) unless it is already the published one.
    FSDP: every rank takes part in gathering the full state dict (on rank 0's CPU, one tensor at
    a time), which rank 0 writes as one safetensors model."""
    if tr.published == tr.state.version and not force:
        return
    state_dict = None
    if D.is_sharded(tr.policy):
        state_dict = D.full_state_dict(tr.policy, tr.env, prefix="lm.")
    if tr.env.is_main:
        publish_policy(tr.store, tr.cfg.run.run_id, tr.state.version, tr.loaded.model, step=tr.state.step,
                       base_model=tr.loaded.name, tokenizer=tr.loaded.tokenizer, state_dict=state_dict,
                       dtype=publish_dtype(tr.cfg, tr.env))
        prune_versions(tr.store, tr.cfg.run.run_id, keep=tr.cfg.run.keep_versions)
    tr.published = tr.state.version
    D.barrier(tr.env)


def checkpoint(tr: Trainer) -> None:
    """Save policy, critic, optimisers, RNG, counters and cursor, then sync ranks: whole state
    dicts from rank 0 (ddp), or every rank's shards with torch.distributed.checkpoint (fsdp)."""
    tr.last_checkpoint = tr.state.iteration
    if tr.replay is not None:  # a run resumed here, or a replayed step, starts with this empty buffer
        tr.replay.reset(tr.state.iteration)
    run = tr.cfg.run
    if D.is_sharded(tr.policy):
        modules = {"policy": tr.policy, **({"critic": tr.critic} if tr.critic is not None else {})}
        save_checkpoint_sharded(tr.store, run.run_id, state=tr.state, modules=modules, optimizers=tr.optimizers,
                                config_json=tr.cfg.to_json(), keep=run.keep_checkpoints, is_main=tr.env.is_main,
                                broadcast=lambda obj: D.broadcast_object(obj, tr.env),
                                barrier=lambda: D.barrier(tr.env))
    else:
        if tr.env.is_main:
            save_checkpoint(tr.store, run.run_id, state=tr.state, policy=tr.loaded.model,
                            critic=D.unwrap(tr.critic) if tr.critic is not None else None,
                            optimizers=tr.optimizers, config_json=tr.cfg.to_json(), keep=run.keep_checkpoints)
        D.barrier(tr.env)
    tr.stop.checkpoint_iteration = tr.state.iteration  # committed: a second SIGTERM can offer --resume
