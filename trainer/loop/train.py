"""The streaming SAO training loop (../shared/docs/SAO.md), torchtune-style: :func:`setup`
builds everything once, :func:`train` streams step batches from the store and for each one
computes values, advantages, K critic updates and one policy update, then records, publishes
and checkpoints. Variants (advantage estimator, policy loss) are picked once in :func:`setup`.

Per iteration i (one step batch of trajectories):
  1. values of the batch from the critic (no grad), in the prediction frame;
  2. advantages: SAO skip-observation GAE with length-adaptive lambda_policy, returns with
     lambda_critic = 1 (or a baseline: GRPO group-normalised / running-mean reward);
  3. K critic updates on the returns (warm-up iterations stop here);
  4. one policy update with DIS against the rollout engine's log-probs; version += 1.
Losses are sums over the step's action tokens divided by their global count (all
micro-batches, all ranks), so micro-batching and data parallelism do not change the update.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import queue
import signal
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from trajstore.display import plural
from trajstore.errors import StoreError, TrajstoreError, TrajstoreWarning
from trajstore.store import RUN_CONSUMED_DIR, RUN_STEPS_DIR, RUNS_DIR, Store, open_store
from trajstore.trainer.loop import distributed as D
from trajstore.trainer.loop.checkpoint import (
    Checkpoint,
    CheckpointError,
    TrainerState,
    load_checkpoint_sharded,
    load_latest_checkpoint,
    load_optimizer_checked,
    load_state_dict_checked,
    read_latest_pointer,
    save_checkpoint,
    save_checkpoint_sharded,
    set_rng_state,
)
from trajstore.trainer.loop.config import TrainConfig
from trajstore.trainer.data import (
    DataCursor,
    PackedMicroBatch,
    Sample,
    StepBatch,
    StoreCensus,
    TrainDataError,
    TrajectoryStream,
    gae_inputs,
    pack,
    split_for_rank,
    to_packed,
    token_micro_batches,
)
from trajstore.trainer.sao.losses import POLICY_LOSSES, PolicyLossFn, value_loss
from trajstore.trainer.models import (
    Critic,
    LoadedPolicy,
    PolicyLogprobs,
    build_critic,
    decoder_layers,
    load_policy,
    policy_identity,
)
from trajstore.trainer.loop.records import RunRecorder, consumed_rows

# -- advantage estimators (picked once at setup) -----------------------------------------------

AdvantageFn = Callable[[PackedMicroBatch, list[Sample], torch.Tensor | None, dict[str, float]],
                       tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]]
"""(packed, samples, values (1, L) or None, per-trajectory scalar advantages) ->
(advantages (1, L), returns (1, L) or None, lambda_policy (n,))."""


def sao_gae_advantages(cfg: TrainConfig) -> AdvantageFn:
    from trajstore.trainer.sao.advantages import sao_targets

    def fn(mb: PackedMicroBatch, samples: list[Sample], values: torch.Tensor | None,
           _scalar: dict[str, float]) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        x = gae_inputs(mb, samples, values)
        t = sao_targets(x.rewards, x.values, x.action_mask, gamma=cfg.algo.gamma, alpha=cfg.algo.lambda_alpha)
        return to_packed(t.advantages, mb.segments), to_packed(t.returns, mb.segments), t.lambda_policy

    return fn


def scalar_advantages(_cfg: TrainConfig) -> AdvantageFn:
    """Baselines: each trajectory's scalar advantage (computed on the whole step batch) on all
    of its action slots; no critic targets."""

    def fn(mb: PackedMicroBatch, samples: list[Sample], _values: torch.Tensor | None,
           scalar: dict[str, float]) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        adv = torch.zeros(mb.action_mask.shape, dtype=torch.float32, device=mb.action_mask.device)
        for i, s in enumerate(samples):
            a, b = int(mb.segments[i]), int(mb.segments[i + 1])
            adv[0, a:b] = scalar[s.trajectory_id]
        return adv * mb.action_mask, None, torch.ones(len(samples))

    return fn


def _scalar_baseline_fn(cfg: TrainConfig, state: TrainerState) -> Callable[[list[Sample], TrainerState], dict[str, float]]:
    """Per-trajectory scalar advantages for the baselines (trainer.baselines), computed on the
    global step batch; the running mean's window lives in ``state.baseline`` (checkpointed)."""
    from trajstore.trainer.sao.baselines import RunningMeanBaseline, make_trajectory_baseline

    baseline = make_trajectory_baseline(cfg.algo.advantage, window=cfg.algo.running_mean_window)
    if isinstance(baseline, RunningMeanBaseline) and state.baseline is not None:
        baseline.load_state_dict({"history": torch.tensor(state.baseline, dtype=torch.float64)})

    def fn(samples: list[Sample], st: TrainerState) -> dict[str, float]:
        rewards = torch.tensor([s.reward for s in samples], dtype=torch.float64)
        group_ids = None
        if cfg.algo.advantage == "grpo":
            missing = [s.trajectory_id for s in samples if s.group_id is None]
            if missing:
                raise TrajstoreError(
                    f"--advantage grpo needs group_id on every trajectory (the rollouts of one prompt share "
                    f"one); {missing[0]!r} has none ({len(missing)} of this batch's {len(samples)} lack it). Set "
                    "it when capturing: through `traj proxy`, send an X-Group-Id header on the session's first "
                    "call (or \"group_id\" in the POST /s/<session>/finish body); with the writer SDK, "
                    "TrajectoryBuilder(group_id=...). Or train with --advantage sao-gae / running-mean, "
                    "which need no groups")
            labels = {g: i for i, g in enumerate(sorted({s.group_id for s in samples}))}
            group_ids = torch.tensor([labels[s.group_id] for s in samples])
        adv = baseline(rewards, group_ids)
        if isinstance(baseline, RunningMeanBaseline):
            st.baseline = baseline.state_dict()["history"].tolist()
        return {s.trajectory_id: float(a) for s, a in zip(samples, adv)}

    return fn


# -- setup -------------------------------------------------------------------------------------


class CheckpointGate:
    """Auto activation checkpointing (trainer.memory): the decoder layers are wrapped, and a
    micro-batch of more than `above` tokens is checkpointed (0: every one). Set before each pass."""

    def __init__(self, above: int) -> None:
        self.above = above
        self.on = above == 0

    def set_tokens(self, tokens: int) -> None:
        self.on = tokens > self.above

    def __call__(self) -> bool:
        return self.on


@dataclass
class Trainer:
    """Everything :func:`train` uses, built once by :func:`setup`."""

    cfg: TrainConfig
    env: D.DistEnv
    store: Store
    loaded: LoadedPolicy
    policy: nn.Module  # PolicyLogprobs, DDP-wrapped in a multi-process job
    critic: nn.Module | None  # Critic, DDP-wrapped likewise; None for the baselines
    optimizers: dict[str, torch.optim.Optimizer]
    stream: TrajectoryStream
    recorder: RunRecorder | None
    state: TrainerState
    advantage_fn: AdvantageFn
    scalar_fn: Callable[[list[Sample], TrainerState], dict[str, float]] | None
    policy_loss_fn: PolicyLossFn
    value_loss_fn: Callable[..., Any] | None
    behaviour: PolicyLogprobs | None
    published: int | None = None
    history: list[dict[str, float]] = field(default_factory=list)
    census: StoreCensus | None = None
    last_checkpoint: int = 0
    resumed_fresh: bool = False
    """``--resume`` found no checkpoint (and no records): the run started at iteration 0."""
    stop: StopRequest = field(default_factory=lambda: StopRequest())
    say: Callable[[str], None] = field(default=lambda _message: None)
    """Tells the user what the trainer is doing within a step (rank 0: the progress line, or a
    line on stderr every few seconds without a terminal); a no-op elsewhere."""
    checkpoint_gate: CheckpointGate | None = None
    """Which micro-batches recompute their layers (auto activation checkpointing, ddp)."""
    last_pass: tuple[float, int] | None = None
    """(start time, tokens) of the step's previous forward/backward pass, for tokens/s."""

    def in_warmup(self) -> bool:
        """Whether the next batch only trains the critic (SAO's value warm-up): there is a critic,
        the warm-up has not ended (:attr:`TrainerState.warmup_done`) and its budget is not spent."""
        return (self.critic is not None and not self.state.warmup_done
                and self.state.iteration < self.cfg.algo.critic_warmup_steps)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.env.device.type == "cuda" and self.cfg.run.bf16:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()


class NonFiniteUpdateError(TrajstoreError):
    """An optimiser step made parameters NaN or infinite; the run stops before recording,
    checkpointing or publishing that step (the last good version stays the latest)."""


def check_writable(store: Store) -> None:
    """Refuse a store the trainer cannot write to, before anything is written: a probe file is
    created and removed under ``_tmp/`` (never read by anyone).

    Raises:
        StoreError: the store (or its ``_tmp/`` folder) refuses writes, e.g. read-only.
    """
    from trajstore.store import TMP_DIR

    probe = f"{TMP_DIR}/write-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
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


def _run_has_records(store: Store, run_id: str) -> bool:
    return bool(store.shard_paths(f"{RUNS_DIR}/{run_id}/{RUN_CONSUMED_DIR}")
                or store.shard_paths(f"{RUNS_DIR}/{run_id}/{RUN_STEPS_DIR}"))


def resume_fresh_message(store: Store, run_id: str) -> str:
    """What ``--resume`` of a run without any checkpoint or record says (it starts the run fresh)."""
    return (f"--resume: run {run_id!r} has no checkpoint in {store.uri} (no "
            f"{RUNS_DIR}/{run_id}/checkpoints/LATEST), so it starts fresh at iteration 0; check --run-id if "
            "you meant to continue a run (`traj runs STORE` lists them)")


def _resume_point(store: Store, cfg: TrainConfig, *, resume: bool) -> Checkpoint | None:
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
        if has_ckpt or _run_has_records(store, run_id):
            raise CheckpointError(f"run {run_id!r} already has checkpoints or records in {store.uri}; "
                                  "pass --resume to continue it or choose another --run-id")
        return None
    ckpt = load_latest_checkpoint(store, run_id)
    if ckpt is None:
        if _run_has_records(store, run_id):
            raise CheckpointError(
                f"cannot resume run {run_id!r}: {store.url(RUNS_DIR, run_id)} has training records but no "
                f"checkpoint ({store.url(RUNS_DIR, run_id, 'checkpoints', 'LATEST')} is missing), so they cannot "
                "be matched to weights; start a new --run-id (nothing was changed)")
        # A supervisor may always pass --resume (the first start has nothing to resume), so this is
        # no error; but a mistyped --run-id must not start a new run without a word.
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


def setup(cfg: TrainConfig, *, resume: bool = False, allow_empty: bool = False) -> Trainer:
    """Check the store, the checkpoint and the data, then load models, optimisers, the data
    stream and the recorder; restore a checkpoint with `resume`.

    Everything that can refuse the run does so before anything is written to the store (the
    config, the published v0, records), and the data is checked before the model is loaded.

    Raises:
        StoreError: the store is not writable.
        CheckpointError: see :func:`_resume_point`; a checkpoint's tensors do not fit the model.
        TrainDataError: data the trainer refuses (:meth:`TrajectoryStream.precheck`), or nothing
            to train on a fresh run without ``follow`` (unless `allow_empty`: a caller that writes
            the data itself after setup, such as the learning benchmark).
    """
    env = D.init_distributed(cfg.run.device, strategy=cfg.run.strategy)
    store = open_store(cfg.store, storage_options=cfg.storage_options or None)
    check_writable(store)
    if env.is_main:
        store.clean_stale_tmp()  # what killed writers and trainers left, an hour old (never in use)
    ckpt = _resume_point(store, cfg, resume=resume)
    state = ckpt.state if ckpt is not None else TrainerState(iteration=0, step=0, version=0, baseline=None,
                                                             cursor=DataCursor())
    # the data first (cheap: scalar columns and statistics), the model after
    canonical, tokenizer = policy_identity(cfg.model.name, tokenizer=cfg.model.tokenizer)
    list_shards = None
    if env.distributed:
        list_shards = lambda: D.broadcast_object(store.list_shards() if env.is_main else None, env)  # noqa: E731
    stream = TrajectoryStream(store, cfg.data, tokenizer=tokenizer, vocab_size=None, cursor=state.cursor,
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
    plan = _memory_plan(cfg, env, loaded)  # refuses a run that cannot fit, still before the first write
    if ckpt is not None and ckpt.sharded != (cfg.run.strategy == "fsdp"):
        raise CheckpointError(f"checkpoint {store.url(ckpt.path)} was written with --strategy "
                              f"{'fsdp' if ckpt.sharded else 'ddp'}; resume it with that strategy (any world size)")
    build = _models_fsdp if cfg.run.strategy == "fsdp" else _models_ddp
    gate = CheckpointGate(plan.checkpoint_above_tokens)
    policy, critic, behaviour, optimizers = build(cfg, env, loaded, store, ckpt, gate=gate)
    if ckpt is not None:
        for k, o in optimizers.items():
            for g in o.param_groups:  # the resolved config's hyper-parameters, not the saved ones
                g.update(lr=cfg.optim.policy_lr if k == "policy" else cfg.optim.critic_lr,
                         betas=cfg.optim.betas, weight_decay=cfg.optim.weight_decay)
        try:
            set_rng_state(ckpt.rng)
        except ValueError as e:
            raise CheckpointError(f"checkpoint file {store.url(ckpt.path, 'rng.pt')} is invalid: {e}") from None
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
    if cfg.algo.advantage == "sao-gae":
        adv_fn, scalar_fn = sao_gae_advantages(cfg), None
    else:
        adv_fn, scalar_fn = scalar_advantages(cfg), _scalar_baseline_fn(cfg, state)
    tr = Trainer(cfg, env, store, loaded, policy, critic, optimizers, stream, recorder, state, adv_fn, scalar_fn,
                 POLICY_LOSSES[cfg.algo.policy_loss], value_loss if critic is not None else None, behaviour)
    tr.census = census
    tr.checkpoint_gate = gate
    tr.last_checkpoint = state.iteration
    tr.resumed_fresh = resume and ckpt is None
    if recorder is not None:
        stream.on_wait = recorder.waiting
        tr.say = recorder.activity
    # v0 on a fresh start; on resume the checkpoint's version again, so LATEST stops pointing at
    # versions the killed process published after its last checkpoint (they are re-trained and
    # re-published under the same numbers)
    _publish(tr, force=True)
    return tr


def _memory_plan(cfg: TrainConfig, env: D.DistEnv, loaded: LoadedPolicy) -> Any:
    """The memory plan (trainer.memory) of this run, resolved into ``cfg`` (micro-batch token
    bound, activation checkpointing) so that config.json records what ran. Planned against the
    RAM available on CPU; on CUDA nothing is estimated (the user's bounds, or micro_batch_size x
    max_seq_len tokens, and checkpointing only when asked). Rank 0 decides for every rank.

    Raises:
        TrainMemoryError: the longest micro-batch allowed cannot fit (names the options to lower).
    """
    from trajstore.trainer.loop.memory import available_memory_bytes, model_shape, plan_memory

    plan = None
    if env.is_main:
        shape = model_shape(loaded.model, cfg.model.critic_trainable_pattern,
                            with_critic=cfg.algo.advantage == "sao-gae")
        available = available_memory_bytes() if env.device.type == "cpu" else None
        processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if env.device.type == "cpu" else 1
        try:
            plan = plan_memory(shape, max_seq_len=cfg.data.max_seq_len, micro_batch_size=cfg.data.micro_batch_size,
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


Models = tuple[nn.Module, "nn.Module | None", "PolicyLogprobs | None", dict[str, torch.optim.Optimizer]]
"""(policy, critic or None, behaviour policy or None, optimisers by name) as the loop uses them."""


def _optimizers(cfg: TrainConfig, policy_params: list[nn.Parameter],
                critic_params: list[nn.Parameter] | None, *, fused: bool) -> dict[str, torch.optim.Optimizer]:
    """AdamW for each network. `fused` (whole tensors on CPU or CUDA): one kernel per step and no
    temporaries, where the default multi-tensor (foreach) path allocates about one more copy of
    the parameters during each step (measured: +128 MB for 128 MB of parameters)."""
    kw = {"fused": True} if fused else {}
    out = {"policy": torch.optim.AdamW(policy_params, lr=cfg.optim.policy_lr, betas=cfg.optim.betas,
                                       weight_decay=cfg.optim.weight_decay, **kw)}
    if critic_params is not None:
        out["critic"] = torch.optim.AdamW(critic_params, lr=cfg.optim.critic_lr, betas=cfg.optim.betas,
                                          weight_decay=cfg.optim.weight_decay, **kw)
    return out


def _critic_of(cfg: TrainConfig, loaded: LoadedPolicy) -> Critic | None:
    if cfg.algo.advantage != "sao-gae":
        return None
    return build_critic(loaded.model, trainable_pattern=cfg.model.critic_trainable_pattern, seed=cfg.model.seed)


def _behaviour_of(cfg: TrainConfig, loaded: LoadedPolicy) -> PolicyLogprobs | None:
    """A frozen copy of the *initial* weights for text-only data (the checkpoint keeps it
    implicit: on resume the initial weights are rebuilt from the model source)."""
    if cfg.data.behaviour_logprobs != "initial-policy":
        return None
    return PolicyLogprobs(copy.deepcopy(loaded.model)).eval().requires_grad_(False)


def _models_ddp(cfg: TrainConfig, env: D.DistEnv, loaded: LoadedPolicy, store: Store,
                ckpt: Checkpoint | None, *, gate: Callable[[], bool] | None = None) -> Models:
    """Whole models on every rank (DDP-wrapped with several ranks); a checkpoint's state dicts
    are loaded before wrapping."""
    behaviour = _behaviour_of(cfg, loaded)
    critic = _critic_of(cfg, loaded)
    if ckpt is not None:
        load_state_dict_checked(loaded.model, ckpt.policy, what=store.url(ckpt.path, "policy.pt"))
        if critic is not None:
            if ckpt.critic is None:
                raise CheckpointError(f"checkpoint {store.url(ckpt.path)} has no critic (trained with a baseline)")
            load_state_dict_checked(critic, ckpt.critic, what=store.url(ckpt.path, "critic.pt"))
    if cfg.run.activation_checkpointing:
        for m in (loaded.model, critic):
            if m is not None:
                for layer in decoder_layers(m):
                    D.checkpoint_activations(layer, gate)
    loaded.model.to(env.device)
    if behaviour is not None:
        behaviour.to(env.device)
    policy = D.wrap(PolicyLogprobs(loaded.model), env)
    if critic is not None:
        critic.to(env.device)
    optimizers = _optimizers(cfg, [p for p in loaded.model.parameters() if p.requires_grad],
                             [p for p in critic.parameters() if p.requires_grad] if critic is not None else None,
                             fused=env.device.type in ("cpu", "cuda"))
    if critic is not None:
        critic = D.wrap(critic, env)
    if ckpt is not None:
        for k, o in optimizers.items():
            if k not in ckpt.optim:
                raise CheckpointError(f"checkpoint file {store.url(ckpt.path, 'optim.pt')} has no {k} optimiser")
            load_optimizer_checked(o, ckpt.optim[k], what=store.url(ckpt.path, "optim.pt"))
    return policy, critic, behaviour, optimizers


def _models_fsdp(cfg: TrainConfig, env: D.DistEnv, loaded: LoadedPolicy, store: Store,
                 ckpt: Checkpoint | None, *, gate: Callable[[], bool] | None = None) -> Models:
    """Policy and critic each sharded with FSDP2 (one group per decoder layer, the rest in the
    root); optimisers over the sharded parameters; a sharded checkpoint resharded into them.
    Activation checkpointing, when on, covers every micro-batch (`gate` is not used)."""
    del gate
    behaviour = _behaviour_of(cfg, loaded)
    critic = _critic_of(cfg, loaded)
    bf16, ac = cfg.run.bf16, cfg.run.activation_checkpointing
    loaded.model.to(env.device)
    policy = D.shard(PolicyLogprobs(loaded.model), decoder_layers(loaded.model), env, bf16=bf16,
                     activation_checkpointing=ac)
    if critic is not None:
        critic = D.shard(critic.to(env.device), decoder_layers(critic), env, bf16=bf16, activation_checkpointing=ac)
    if behaviour is not None:
        behaviour = D.shard(behaviour.to(env.device), decoder_layers(behaviour.lm), env, bf16=bf16)
    optimizers = _optimizers(cfg, [p for p in loaded.model.parameters() if p.requires_grad],
                             [p for p in critic.parameters() if p.requires_grad] if critic is not None else None,
                             fused=False)  # DTensor parameters: the multi-tensor path
    if ckpt is not None:
        modules = {"policy": policy, **({"critic": critic} if critic is not None else {})}
        load_checkpoint_sharded(store, ckpt, modules, optimizers)
    return policy, critic, behaviour, optimizers


def publish_dtype(cfg: TrainConfig, env: D.DistEnv) -> torch.dtype:
    """dtype of published weights: ``run.publish_dtype``, where ``auto`` = bfloat16 when the run
    computes in bf16 (CUDA with ``run.bf16``), else float32."""
    if cfg.run.publish_dtype == "auto":
        return torch.bfloat16 if env.device.type == "cuda" and cfg.run.bf16 else torch.float32
    return getattr(torch, cfg.run.publish_dtype)


def _publish(tr: Trainer, *, force: bool = False) -> None:
    """Publish the current policy version (rank 0) unless it is already the published one.
    FSDP: every rank takes part in gathering the full state dict (on rank 0's CPU, one tensor at
    a time), which rank 0 writes as one safetensors model."""
    if tr.published == tr.state.version and not force:
        return
    state_dict = None
    if D.is_sharded(tr.policy):
        state_dict = D.full_state_dict(tr.policy, tr.env, prefix="lm.")
    if tr.env.is_main:
        from trajstore.trainer.loop.publish import prune_versions, publish_policy

        publish_policy(tr.store, tr.cfg.run.run_id, tr.state.version, tr.loaded.model, step=tr.state.step,
                       base_model=tr.loaded.name, tokenizer=tr.loaded.tokenizer, state_dict=state_dict,
                       dtype=publish_dtype(tr.cfg, tr.env))
        prune_versions(tr.store, tr.cfg.run.run_id, keep=tr.cfg.run.keep_versions)
    tr.published = tr.state.version
    D.barrier(tr.env)


# -- one iteration -----------------------------------------------------------------------------


@dataclass
class _Micro:
    """A micro-batch and what the step computed for it. All tensors (1, L)."""

    samples: list[Sample]
    mb: PackedMicroBatch
    values: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    logprobs: torch.Tensor | None = None


def _prepare(tr: Trainer, batch: StepBatch) -> tuple[list[_Micro], torch.Tensor]:
    """This rank's micro-batches (same count on every rank) and the step's global action-token count."""
    cfg, env = tr.cfg, tr.env
    local = split_for_rank(batch.samples, env.rank, env.world_size)
    parts = token_micro_batches(local, cfg.data.micro_batch_size, cfg.data.micro_batch_tokens)
    # every rank runs the same number of passes (empty micro-batches pad the shorter ranks)
    n_micro = max(1, int(D.all_reduce_max(torch.tensor([float(len(parts))], device=env.device), env)))
    micros = [_Micro(s, pack(s, env.device)) for s in parts + [[] for _ in range(n_micro - len(parts))]]
    tr.last_pass = None
    if tr.behaviour is not None:
        todo = [m for m in micros if any(s.needs_behaviour for s in m.samples)]
        for j, m in enumerate(todo):
            need = [i for i, s in enumerate(m.samples) if s.needs_behaviour]
            if need:
                _start_pass(tr, "initial-policy log-probs", j, len(todo), m)
                with torch.no_grad(), tr.autocast():
                    lp, _ = tr.behaviour(m.mb.input_ids, m.mb.position_ids, m.mb.targets, m.mb.inv_temperature)
                fill = torch.zeros_like(m.mb.action_mask)
                for i in need:
                    fill[0, int(m.mb.segments[i]):int(m.mb.segments[i + 1])] = True
                fill &= m.mb.action_mask
                m.mb = m.mb._replace(rollout_logprobs=torch.where(fill, lp.float(), m.mb.rollout_logprobs))
    count = torch.tensor(float(sum(int(m.mb.action_mask.sum()) for m in micros)), device=env.device)
    return micros, D.all_reduce_sum(count, env)


def _start_pass(tr: Trainer, what: str, j: int, n: int, m: _Micro) -> None:
    """Before each pass over a micro-batch: decide whether it is checkpointed (auto activation
    checkpointing) and report it: ``step 1: critic update 1/2, micro-batch 2/3 (11,500 tokens,
    2 trajectories; last pass 61 tok/s)``, with tokens/s of the previous pass of this step."""
    if tr.checkpoint_gate is not None:
        tr.checkpoint_gate.set_tokens(int(m.mb.input_ids.shape[1]))
    now = time.perf_counter()
    rate = ""
    if tr.last_pass is not None and now > tr.last_pass[0]:
        rate = f"; last pass {tr.last_pass[1] / (now - tr.last_pass[0]):,.0f} tok/s"
    tr.last_pass = (now, int(m.mb.input_ids.shape[1]))
    head = f"step {tr.state.step}" if not tr.in_warmup() else f"critic warm-up {tr.state.iteration + 1}"
    tr.say(f"{head}: {what}, micro-batch {j + 1}/{n} ({int(m.mb.input_ids.shape[1]):,} tokens, "
           f"{len(m.samples)} trajector{'y' if len(m.samples) == 1 else 'ies'}{rate})")


def _clip_and_step(tr: Trainer, params: list[nn.Parameter], opt: torch.optim.Optimizer, max_norm: float, *,
                   what: str) -> float:
    """Clip the gradients' global L2 norm, step, and refuse non-finite parameters afterwards.

    Raises:
        NonFiniteUpdateError: the step made a parameter NaN or infinite (e.g. an infinite learning
            rate, or a NaN loss); nothing of this step is recorded, checkpointed or published.
    """
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if not D.all_finite(params, tr.env):
        raise NonFiniteUpdateError(
            f"iteration {tr.state.iteration}: the {what} update made parameters non-finite (gradient norm "
            f"{float(D.full(norm)):.3g}, {what} lr {opt.param_groups[0]['lr']:g}); stopped before recording, "
            f"checkpointing or publishing it: the last good version v{tr.published} stays the latest, resume "
            "from the last checkpoint with smaller learning rates")
    return float(D.full(norm))


def _critic_update(tr: Trainer, micros: list[_Micro], n_tokens: torch.Tensor, n_seqs: int, *,
                   what: str = "critic update") -> dict[str, float]:
    """One critic update over the step's micro-batches (gradients accumulated)."""
    assert tr.critic is not None and tr.value_loss_fn is not None
    world = tr.env.world_size
    total = 0.0
    for j, m in enumerate(micros):
        _start_pass(tr, what, j, len(micros), m)
        with D.maybe_no_sync(tr.critic, j < len(micros) - 1), tr.autocast():
            v = tr.critic(m.mb.input_ids, m.mb.position_ids)
            clip = tr.cfg.algo.value_clip
            loss, _stats = tr.value_loss_fn(v.float(), m.returns, m.mb.action_mask,
                                            old_values=m.values if clip is not None else None, clip_range=clip,
                                            agg=tr.cfg.algo.loss_agg, num_tokens=n_tokens, num_sequences=n_seqs,
                                            segment_ids=m.mb.segment_ids)
            (loss * world).backward()
        total += float(loss.detach())
    params = [p for p in D.unwrap(tr.critic).parameters() if p.requires_grad]
    norm = _clip_and_step(tr, params, tr.optimizers["critic"], tr.cfg.optim.max_grad_norm, what="critic")
    return {"value/loss": float(D.all_reduce_sum(torch.tensor(total, device=tr.env.device), tr.env)),
            "value/grad_norm": norm}


def _policy_update(tr: Trainer, micros: list[_Micro], n_tokens: torch.Tensor, n_seqs: int) -> dict[str, float]:
    """One policy update (DIS or PPO-clip) over the step's micro-batches."""
    cfg, world = tr.cfg, tr.env.world_size
    sums = {k: 0.0 for k in ("loss", "n", "below", "above", "zero", "ratio", "kl", "entropy")}
    rmin, rmax = math.inf, -math.inf
    for j, m in enumerate(micros):
        _start_pass(tr, "policy update", j, len(micros), m)
        with D.maybe_no_sync(tr.policy, j < len(micros) - 1), tr.autocast():
            lp, ent = tr.policy(m.mb.input_ids, m.mb.position_ids, m.mb.targets, m.mb.inv_temperature)
            loss, st = tr.policy_loss_fn(lp.float(), m.mb.rollout_logprobs, m.advantages, m.mb.action_mask,
                                         cfg.algo.eps_low, cfg.algo.eps_high, agg=cfg.algo.loss_agg,
                                         num_tokens=n_tokens, num_sequences=n_seqs, segment_ids=m.mb.segment_ids)
            (loss * world).backward()
        m.logprobs = lp.detach()
        n = float(st.num_tokens)
        sums["loss"] += float(loss.detach())
        sums["n"] += n
        sums["below"] += float(st.frac_below) * n
        sums["above"] += float(st.frac_above) * n
        sums["zero"] += float(st.frac_zero_grad) * n
        sums["ratio"] += float(st.ratio_mean) * n
        sums["kl"] += float(st.kl_k3) * n
        sums["entropy"] += float((ent * m.mb.action_mask).sum())
        if n:
            rmin, rmax = min(rmin, float(st.ratio_min)), max(rmax, float(st.ratio_max))
    norm = _clip_and_step(tr, [p for p in tr.loaded.model.parameters() if p.requires_grad], tr.optimizers["policy"],
                          cfg.optim.max_grad_norm, what="policy")
    keys = sorted(sums)
    red = D.all_reduce_sum(torch.tensor([sums[k] for k in keys], dtype=torch.float64, device=tr.env.device), tr.env)
    s = dict(zip(keys, red.tolist()))
    lo = D.all_reduce_max(torch.tensor([-rmin, rmax], dtype=torch.float64, device=tr.env.device), tr.env).tolist()
    n = max(s["n"], 1.0)
    return {"policy/loss": s["loss"], "policy/grad_norm": norm, "policy/entropy": s["entropy"] / n,
            "policy/kl_k3": s["kl"] / n, "ratio/mean": s["ratio"] / n, "ratio/masked_below": s["below"] / n,
            "ratio/masked_above": s["above"] / n, "ratio/zero_grad": s["zero"] / n,
            "ratio/min": -lo[0], "ratio/max": lo[1]}


def _value_stats(tr: Trainer, micros: list[_Micro], n_tokens: torch.Tensor) -> dict[str, float]:
    """Global value statistics before the critic update, incl. explained variance
    ``1 - Var(R - V) / Var(R)`` over all action tokens of the step (all ranks; `n_tokens` is
    their count, from :func:`_prepare`)."""
    acc = torch.zeros(5, dtype=torch.float64, device=tr.env.device)
    for m in micros:
        mask = m.mb.action_mask
        r, v = m.returns[mask].double(), m.values[mask].double()
        acc += torch.stack([r.sum(), (r * r).sum(), (r - v).sum(), ((r - v) ** 2).sum(), v.sum()])
    acc = D.all_reduce_sum(acc, tr.env)
    n = max(float(n_tokens), 1.0)
    var_r = float(acc[1] / n - (acc[0] / n) ** 2)
    var_e = float(acc[3] / n - (acc[2] / n) ** 2)
    return {"value/explained_variance": 1.0 - var_e / var_r if var_r > 1e-12 else float("nan"),
            "value/mean": float(acc[4]) / n, "value/return_mean": float(acc[0]) / n}


def train_step(tr: Trainer, batch: StepBatch) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Train on one step batch; return (metrics, consumed rows of this rank)."""
    cfg, env, state = tr.cfg, tr.env, tr.state
    warmup = tr.in_warmup()
    # warm-up iterations are recorded as steps -budget .. -1 (unique, increasing; an early end
    # leaves a gap before step 0)
    step = state.step if not warmup else state.iteration - cfg.algo.critic_warmup_steps
    trainer_version = state.version
    micros, n_tokens = _prepare(tr, batch)
    scalar = tr.scalar_fn(batch.samples, state) if tr.scalar_fn is not None else {}
    metrics: dict[str, float] = {}
    # 1-2. values (no grad, without DDP hooks), advantages and critic targets
    for j, m in enumerate(micros):
        if tr.critic is not None:
            _start_pass(tr, "critic values", j, len(micros), m)
            with torch.no_grad(), tr.autocast():
                m.values = D.unwrap(tr.critic)(m.mb.input_ids, m.mb.position_ids).float()
        m.advantages, m.returns, lam = tr.advantage_fn(m.mb, m.samples, m.values, scalar)
        metrics.setdefault("_lam", 0.0)
        metrics["_lam"] += float(lam.sum()) if m.samples else 0.0
    lam_sum = float(D.all_reduce_sum(torch.tensor(metrics.pop("_lam"), device=env.device), env))
    # 3. K critic updates
    if tr.critic is not None:
        metrics.update(_value_stats(tr, micros, n_tokens))
        ev = metrics["value/explained_variance"]
        # NaN (all returns equal) says nothing either way: no warning, and no end of the warm-up
        metrics["warn/critic_ev_not_positive"] = 1.0 if ev <= 0 else 0.0
        if warmup and cfg.algo.critic_warmup_until == "explained-variance" and ev > 0:
            state.warmup_done = True  # the critic explains returns of a batch it has not trained on
        for k in range(cfg.algo.critic_updates):
            metrics.update(_critic_update(tr, micros, n_tokens, len(batch.samples),
                                          what=f"critic update {k + 1}/{cfg.algo.critic_updates}"))
    # 4. one policy update with DIS, then the version moves on
    if not warmup:
        state.warmup_done = True
        metrics.update(_policy_update(tr, micros, n_tokens, len(batch.samples)))
        adv = sum(float((m.advantages * m.mb.action_mask).sum()) for m in micros)
        metrics["policy/advantage_mean"] = float(D.all_reduce_sum(torch.tensor(adv, device=env.device), env)) / max(
            float(n_tokens), 1.0)
        metrics["policy/lambda_mean"] = lam_sum / max(len(batch.samples), 1)
        state.step += 1
        state.version += 1
    consumed: list[dict[str, Any]] = []
    for m in micros:
        consumed += consumed_rows(m.samples, step=step, trainer_version=trainer_version, rank=env.rank,
                                  logprobs=m.logprobs, packed=m.mb, eps_low=cfg.algo.eps_low,
                                  eps_high=cfg.algo.eps_high)
    # staleness is defined only for action tokens with a policy version (text-only logs have none);
    # without any, the step has no staleness metric rather than a made-up 0 or trainer_version + 1
    stale = [trainer_version - v for s in batch.samples for v in s.versioned_policy_version.tolist()]
    if stale:
        metrics["staleness/mean"] = sum(stale) / len(stale)
        metrics["staleness/max"] = float(max(stale))
    metrics["staleness/unversioned_action_tokens"] = float(
        sum(s.num_action_tokens - len(s.versioned_policy_version) for s in batch.samples))
    metrics["staleness/mixed_version_actions"] = float(sum(s.mixed_version_actions for s in batch.samples))
    metrics["reward/mean"] = sum(s.reward for s in batch.samples) / len(batch.samples)
    metrics["data/trajectories"] = float(len(batch.samples))
    metrics["data/action_tokens"] = float(n_tokens)
    for reason, k in batch.skipped.items():
        metrics[f"data/skipped_{reason}"] = float(k)
    state.iteration += 1
    state.cursor = batch.cursor
    return metrics, consumed


# -- the loop ----------------------------------------------------------------------------------


@dataclass
class TrainSummary:
    """What a run did: iterations and policy steps done (in total, resumes included), the final
    version, and the metrics of every iteration of this process (rank 0)."""

    iterations: int
    steps: int
    version: int
    history: list[dict[str, float]]
    warnings: list[str] = field(default_factory=list)
    """Things the user should know although the run succeeded (e.g. nothing new was trained)."""


def _batches(tr: Trainer) -> Iterator[tuple[StepBatch | None, float]]:
    """(batch, seconds the loop waited for it). One process: a reader thread keeps up to two
    batches ready; with several ranks batches are read in step (shard listing is a collective).
    Ends early (without a batch) once a stop is requested (:class:`StopRequest`)."""
    if tr.env.distributed:
        while True:
            t0 = time.perf_counter()
            b = tr.stream.next_batch()
            yield b, time.perf_counter() - t0
            if b is None:
                return
    q: queue.Queue[Any] = queue.Queue(maxsize=2)
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                b = tr.stream.next_batch()
                q.put(b)
                if b is None:
                    return
        except BaseException as e:  # surfaced in the training thread
            q.put(e)

    th = threading.Thread(target=reader, name="trajstore-train-reader", daemon=True)
    th.start()
    try:
        while True:
            t0 = time.perf_counter()
            try:
                b = q.get(timeout=0.2)
            except queue.Empty:
                if tr.stop.requested.is_set():
                    return
                continue
            if isinstance(b, BaseException):
                raise b
            yield b, time.perf_counter() - t0
            if b is None:
                return
    finally:
        stop.set()


class TrainingInterrupted(BaseException):
    """A second SIGTERM / SIGINT: the run stops at once; a publish or checkpoint in progress is
    rolled back (its temporary files removed), the committed ones stay. A BaseException, like
    KeyboardInterrupt, so that no ``except Exception`` swallows it."""


class StopRequest:
    """Graceful stop on SIGTERM / SIGINT (main thread only): the first signal lets the current
    iteration, its records and any publish or checkpoint in progress finish, then the run ends as
    at the end of the data (final checkpoint and publish); a second one raises
    :class:`TrainingInterrupted` at once."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.signal_name: str | None = None
        self._old: dict[int, Any] = {}

    def _handle(self, signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.requested.is_set():
            raise TrainingInterrupted(f"interrupted by a second {name}: the publish or checkpoint in progress was "
                                      "rolled back; --resume continues from the last checkpoint")
        self.signal_name = name
        self.requested.set()

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()

    def agreed(self, env: D.DistEnv) -> bool:
        """Whether any rank was asked to stop (all ranks stop at the same iteration)."""
        flag = torch.tensor([1.0 if self.requested.is_set() else 0.0], device=env.device)
        return float(D.all_reduce_max(flag, env)) > 0


def _train_loop(tr: Trainer) -> None:
    """Iterations until max_steps, the end of the data, or a stop request."""
    state, run = tr.state, tr.cfg.run
    if tr.recorder is not None:
        tr.recorder.set_completed(state.step)
    for batch, wait_s in _batches(tr):
        if run.max_steps is not None and state.step >= run.max_steps:
            break
        if tr.stop.agreed(tr.env) or batch is None:
            break
        t0 = time.perf_counter()
        iteration = state.iteration
        metrics, consumed = train_step(tr, batch)
        if tr.env.device.type == "cuda":
            torch.cuda.synchronize(tr.env.device)
        step_s = time.perf_counter() - t0 + wait_s
        tokens = float(batch.num_tokens)  # every rank holds the whole step batch: all ranks' tokens
        metrics.update({"perf/step_s": step_s, "perf/tokens_per_s": tokens / step_s,
                        "perf/data_wait_frac": wait_s / step_s})
        rows = [r for part in D.gather_objects(consumed, tr.env) for r in part]
        if tr.recorder is not None:
            tr.recorder.write_step(iteration=iteration, step=rows[0]["step"] if rows else state.step - 1,
                                   trainer_version=rows[0]["trainer_version"] if rows else state.version,
                                   metrics=metrics, consumed=rows)
        tr.history.append(metrics)
        if metrics.get("policy/loss") is not None and run.publish_every and state.step % run.publish_every == 0:
            _publish(tr)
        if state.iteration - tr.last_checkpoint >= run.checkpoint_every:
            checkpoint(tr)


def train(cfg: TrainConfig, *, resume: bool = False, trainer: Trainer | None = None) -> TrainSummary:
    """Run `traj train`: stream the store, update, record, publish and checkpoint until
    ``max_steps`` policy steps are done or the data ends (with ``follow``: until idle timeout).

    Raises:
        TrainDataError: data the trainer refuses (see :mod:`trajstore.trainer.data`).
        CheckpointError: see :func:`setup`.
    """
    tr = trainer or setup(cfg, resume=resume)
    state = tr.state
    tr.stream.stop_event = tr.stop.requested
    try:
        with tr.stop:
            _train_loop(tr)
            if state.iteration != tr.last_checkpoint:
                checkpoint(tr)
            _publish(tr)
    finally:
        tr.stream.close()
        if tr.recorder is not None:
            tr.recorder.close()

    warnings: list[str] = []
    if tr.stop.signal_name is not None:
        warnings.append(f"stopped by {tr.stop.signal_name} after iteration {state.iteration}: checkpointed and "
                        f"published v{tr.published}; --resume continues")
    policy_steps = [h for h in tr.history if "policy/loss" in h and "warn/critic_ev_not_positive" in h]
    bad = [h for h in policy_steps if h["warn/critic_ev_not_positive"]]
    if bad:
        first = policy_steps[0]["value/explained_variance"]
        warnings.append(f"the critic's explained variance was not above 0 on {len(bad)} of {len(policy_steps)} policy "
                        f"steps (first policy step: {first:.3g}); its values added noise to those advantages "
                        "(a longer warm-up, --critic-warmup-steps, or a larger --critic-lr helps)")
    asked = tr.cfg.run.max_steps
    if asked is not None and state.step < asked and tr.history and tr.stop.signal_name is None:
        warmup = sum(1 for h in tr.history if "policy/loss" not in h)
        warnings.append(f"made {state.step} of the {asked} policy steps asked for (--max-steps): the data ran out "
                        f"after {plural(len(tr.history), 'iteration')} in this run, {warmup} of them critic warm-up "
                        "(--critic-warmup-steps)")
    overlong = int(sum(h.get("data/skipped_overlong", 0.0) for h in tr.history))
    if overlong:
        warnings.append(f"{overlong} trajector{'y' if overlong == 1 else 'ies'} longer than --max-seq-len "
                        f"{tr.cfg.data.max_seq_len} tokens {'was' if overlong == 1 else 'were'} skipped, not trained "
                        "(raise --max-seq-len to train them; --overlong error stops at the first)")
    if resume and tr.resumed_fresh:
        warnings.append(resume_fresh_message(tr.store, tr.cfg.run.run_id))
    if not tr.history:
        what = tr.census.describe() if tr.census is not None else "no rows"
        warnings.append(f"no trajectory was trained in this run ({'since the checkpoint: ' if resume else ''}{what})")
    return TrainSummary(state.iteration, state.step, state.version, tr.history, warnings)


def checkpoint(tr: Trainer) -> None:
    """Save policy, critic, optimisers, RNG, counters and cursor, then sync ranks: whole state
    dicts from rank 0 (ddp), or every rank's shards with torch.distributed.checkpoint (fsdp)."""
    tr.last_checkpoint = tr.state.iteration
    run = tr.cfg.run
    if D.is_sharded(tr.policy):
        modules = {"policy": tr.policy, **({"critic": tr.critic} if tr.critic is not None else {})}
        save_checkpoint_sharded(tr.store, run.run_id, state=tr.state, modules=modules, optimizers=tr.optimizers,
                                config_json=tr.cfg.to_json(), keep=run.keep_checkpoints, is_main=tr.env.is_main,
                                broadcast=lambda obj: D.broadcast_object(obj, tr.env),
                                barrier=lambda: D.barrier(tr.env))
        return
    if tr.env.is_main:
        save_checkpoint(tr.store, run.run_id, state=tr.state, policy=tr.loaded.model,
                        critic=D.unwrap(tr.critic) if tr.critic is not None else None,
                        optimizers=tr.optimizers, config_json=tr.cfg.to_json(), keep=run.keep_checkpoints)
    D.barrier(tr.env)


__all__ = ["NonFiniteUpdateError", "Trainer", "TrainSummary", "checkpoint", "setup", "train", "train_step", "Critic"]
