"""Setting a run up: everything that can refuse it (store, checkpoint, data, memory) is checked
before anything is written; then models, optimisers, data stream and recorder are built into a
:class:`~trajstore.trainer.loop.trainer.Trainer`, with the run's variants picked once."""

from __future__ import annotations

import os
import uuid
from typing import Any

import torch

from trajstore.errors import StoreError, TrajstoreError
from trajstore.store import TMP_DIR, Store, open_store
from trajstore.store.layout import tmp_path
from trajstore.trainer.config import TrainConfig
from trajstore.trainer.data import DataCursor, TrainDataError, TrajectoryStream, replay_buffer_for, stream_config
from trajstore.trainer.loop import distributed as D
from trajstore.trainer.loop import memory
from trajstore.trainer.loop.advantage_fns import sao_gae_advantages, scalar_advantages, scalar_baseline_fn
from trajstore.trainer.loop.build import models_ddp, models_fsdp
from trajstore.trainer.loop.checkpoint import CheckpointError, TrainerState
from trajstore.trainer.loop.records import RunRecorder
from trajstore.trainer.loop.resume import interrupted_rerun_hint, restore_settings, resume_point
from trajstore.trainer.loop.save import publish
from trajstore.trainer.loop.token_records import TokenRecorder
from trajstore.trainer.loop.trainer import CheckpointGate, Trainer
from trajstore.trainer.models import LoadedPolicy, load_policy, policy_identity
from trajstore.trainer.sao.losses import POLICY_LOSSES, value_loss


def check_writable(store: Store) -> None:
    """Refuse a store the trainer cannot write to, before anything is written: a probe file is
    created and removed under ``_tmp/`` (never read by anyone).

    Raises:
        StoreError: the store (or its ``_tmp/`` folder) refuses writes, e.g. read-only.
    """
    probe = tmp_path(f"write-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        if store.is_local:
            os.makedirs(store.path(TMP_DIR), exist_ok=True)
            with open(store.path(probe), "wb"):
                pass
            os.unlink(store.path(probe))
        else:
            store.fs.pipe_file(store.path(probe), b"")
            store.fs.rm_file(store.path(probe))
    except OSError as e:
        raise StoreError(f"cannot train into {store.uri}: the store is not writable "
                         f"({e.strerror or type(e).__name__}: {store.url(probe)})") from None


def setup(cfg: TrainConfig, *, resume: bool = False, allow_empty: bool = False) -> Trainer:
    """Check the store, the checkpoint and the data, then load models, optimisers, the data
    stream and the recorder; restore a checkpoint with `resume`.

    Everything that can refuse the run does so before anything is written to the store (the
    config, the published v0, records), and the data is checked before the model is loaded.

    Raises:
        StoreError: the store is not writable.
        CheckpointError: see :func:`~trajstore.trainer.loop.resume.resume_point`; a checkpoint's
            tensors do not fit the model.
        TrainDataError: data the trainer refuses (:meth:`TrajectoryStream.precheck`), or nothing
            to train on a fresh run without ``follow`` (unless `allow_empty`: a caller that writes
            the data itself after setup, such as the learning benchmark).
    """
    env = D.init_distributed(cfg.run.device, strategy=cfg.run.strategy)
    store = open_store(cfg.store, storage_options=cfg.storage_options or None)
    check_writable(store)
    if env.is_main:
        store.clean_stale_tmp()  # what killed writers and trainers left, an hour old (never in use)
    ckpt = resume_point(store, cfg, resume=resume)
    state = ckpt.state if ckpt is not None else TrainerState(iteration=0, step=0, version=0, baseline=None,
                                                             cursor=DataCursor())
    # the data first (cheap: scalar columns and statistics), the model after
    canonical, tokenizer = policy_identity(cfg.model.name, tokenizer=cfg.model.tokenizer)
    list_shards = None
    if env.distributed:
        list_shards = lambda: D.broadcast_object(store.list_shards() if env.is_main else None, env)  # noqa: E731
    stream = TrajectoryStream(store, stream_config(cfg.data), tokenizer=tokenizer, vocab_size=None, cursor=state.cursor,
                              list_shards=list_shards)
    census = stream.precheck()
    if census.trainable == 0 and not cfg.data.follow and ckpt is None and not allow_empty:
        raise TrainDataError(f"nothing to train in {store.uri}: {census.describe()}; nothing was written "
                             "(use --follow to wait for trajectories)")
    torch.manual_seed(cfg.model.seed)
    loaded = load_policy(cfg.model.name, tokenizer=cfg.model.tokenizer, tiny_vocab_size=cfg.model.tiny_vocab_size,
                         seed=cfg.model.seed)
    stream.vocab_size = loaded.vocab_size
    stream.check_vocabulary(census)  # still before the first write
    plan = memory_plan(cfg, env, loaded)  # refuses a run that cannot fit, still before the first write
    if ckpt is not None and ckpt.sharded != (cfg.run.strategy == "fsdp"):
        raise CheckpointError(f"checkpoint {store.url(ckpt.path)} was written with --strategy "
                              f"{'fsdp' if ckpt.sharded else 'ddp'}; resume it with that strategy (any world size)")
    build = models_fsdp if cfg.run.strategy == "fsdp" else models_ddp
    gate = CheckpointGate(plan.checkpoint_above_tokens)
    policy, critic, behaviour, optimizers = build(cfg, env, loaded, store, ckpt, gate=gate)
    if ckpt is not None:
        restore_settings(cfg, store, ckpt, optimizers)
    recorder = None
    if env.is_main:
        recorder = RunRecorder(store, cfg.run.run_id, total_steps=cfg.run.max_steps, progress=cfg.run.progress,
                               tensorboard=cfg.run.tensorboard)
        if resume:
            recorder.rollback_after(state.iteration - 1)
        recorder.save_config(cfg.to_json())
        if census.rows:  # what the store holds now (a --follow run may start on an empty store)
            recorder.note(f"data: {census.describe()}")
        recorder.note(plan.describe())
    D.barrier(env)
    tr = make_trainer(cfg, env, store, loaded, (policy, critic, behaviour, optimizers), stream, recorder, state, gate)
    tr.census = census
    tr.resumed_fresh = resume and ckpt is None
    tr.stop.checkpoint_iteration = None if ckpt is None else state.iteration
    tr.stop.rerun_hint = lambda: interrupted_rerun_hint(store, cfg.run.run_id, iterations=tr.state.iteration)
    if cfg.run.record_tokens > 0:
        tr.token_recorder = TokenRecorder(store, cfg.run.run_id, cfg.run.record_tokens)
    if recorder is not None:
        stream.on_wait = recorder.waiting
        tr.say = recorder.activity
    # v0 on a fresh start; on resume the checkpoint's version again, so LATEST stops pointing at
    # versions the killed process published after its last checkpoint (they are re-trained and
    # re-published under the same numbers)
    publish(tr, force=True)
    return tr


def make_trainer(cfg: TrainConfig, env: D.DistEnv, store: Store, loaded: LoadedPolicy, models: tuple[Any, ...],
                 stream: TrajectoryStream, recorder: RunRecorder | None, state: TrainerState,
                 gate: CheckpointGate) -> Trainer:
    """The :class:`Trainer` of `cfg` at `state`: its advantage function (SAO's skip-observation GAE
    or a scalar baseline), policy and value losses, and a replay buffer empty at `state`'s
    iteration and seeded from it (a run, its resume and a replayed step draw the same). `models`
    is (policy, critic, behaviour, optimizers); `recorder` None writes no records (a replay)."""
    policy, critic, behaviour, optimizers = models
    if cfg.algo.advantage == "sao-gae":
        adv_fn, scalar_fn = sao_gae_advantages(cfg), None
    else:
        adv_fn, scalar_fn = scalar_advantages(cfg), scalar_baseline_fn(cfg, state)
    tr = Trainer(cfg, env, store, loaded, policy, critic, optimizers, stream, recorder, state, adv_fn, scalar_fn,
                 POLICY_LOSSES[cfg.algo.policy_loss], value_loss if critic is not None else None, behaviour)
    tr.replay = replay_buffer_for(cfg.data, seed=cfg.model.seed, iteration=state.iteration)
    tr.checkpoint_gate = gate
    tr.last_checkpoint = state.iteration
    return tr


def memory_plan(cfg: TrainConfig, env: D.DistEnv, loaded: LoadedPolicy) -> Any:
    """The memory plan (trainer.memory) of this run, resolved into ``cfg`` (micro-batch token
    bound, activation checkpointing) so that config.json records what ran. Planned against the
    RAM available on CPU; on CUDA nothing is estimated (the user's bounds, or micro_batch_size x
    max_seq_len tokens, and checkpointing only when asked). Rank 0 decides for every rank.

    Raises:
        TrainMemoryError: the longest micro-batch allowed cannot fit (names the options to lower).
    """
    plan = None
    if env.is_main:
        shape = memory.model_shape(loaded.model, cfg.model.critic_trainable_pattern,
                            with_critic=cfg.algo.advantage == "sao-gae")
        available = memory.available_memory_bytes() if env.device.type == "cpu" else None
        processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if env.device.type == "cpu" else 1
        try:
            plan = memory.plan_memory(shape, max_seq_len=cfg.data.max_seq_len, micro_batch_size=cfg.data.micro_batch_size,
                               micro_batch_tokens=cfg.data.micro_batch_tokens,
                               activation_checkpointing=cfg.run.activation_checkpointing,
                               behaviour_copy=cfg.data.behaviour_logprobs == "initial-policy",
                               available=available, processes=processes)
        except TrajstoreError as e:
            plan = e
    if env.distributed:
        plan = D.broadcast_object(plan, env)
    if isinstance(plan, BaseException):
        raise plan
    cfg.data.micro_batch_tokens = plan.micro_batch_tokens
    cfg.run.activation_checkpointing = plan.activation_checkpointing
    return plan
