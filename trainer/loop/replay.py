"""Replaying one step of a run (``traj train --replay-step N --run RUN``): the weights, optimiser
state, RNG state and data cursor of the newest checkpoint taken before step N are loaded, the
run's iterations from there are executed again on the same trajectories (read from the
checkpoint's data cursor in arrival order and checked against the run's consumption records,
step by step, before each is trained; with a replay buffer, its draws too: the buffer is empty at
each checkpoint and seeded from its iteration, so the replay draws what the run drew), and step
N's recorded metrics are reported beside the
recomputed ones: the losses, gradient norms and importance-ratio statistics.

Nothing is written to the store: no record, checkpoint or published version. The run may be
finished or still running (its records and checkpoints are only read). The replay runs on one
process (CPU by default); a run trained with several ranks is replayed with its whole step
batches on one, which gives the same update (losses are global token means) up to the order of
floating-point sums.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pyarrow.parquet as pq

from trajstore.errors import TrajstoreError
from trajstore.store import Store, open_existing_store
from trajstore.store.layout import (
    checkpoint_dir,
    checkpoints_dir,
    parse_checkpoint_dir_name,
    run_config_file,
    run_consumed_dir,
    run_steps_dir,
)
from trajstore.trainer.config import TrainConfig
from trajstore.trainer.data import TrajectoryStream, stream_config, with_replay
from trajstore.trainer.loop import distributed as D
from trajstore.trainer.loop.build import models_ddp
from trajstore.trainer.loop.checkpoint import Checkpoint, load_checkpoint
from trajstore.trainer.loop.records import ITERATION_KEY
from trajstore.trainer.loop.resume import restore_settings
from trajstore.trainer.loop.setup import make_trainer
from trajstore.trainer.loop.step import train_step
from trajstore.trainer.loop.trainer import CheckpointGate, Trainer
from trajstore.trainer.models import load_policy, policy_identity

COMPARED_METRICS = ("policy/loss", "policy/grad_norm", "policy/entropy", "policy/kl_k3", "value/loss",
                    "value/grad_norm", "ratio/mean", "ratio/min", "ratio/max", "ratio/masked_below",
                    "ratio/masked_above", "ratio/zero_grad", "policy/advantage_mean", "data/trajectories",
                    "data/action_tokens")
"""The step metrics a replay reports side by side (those the step recorded)."""


class ReplayError(TrajstoreError):
    """A step cannot be replayed: no such run or step, no checkpoint before it, or the data the
    checkpoint's cursor reads is not what the run consumed (the store changed since)."""


@dataclass
class ReplayedStep:
    """What :func:`replay_step` found.

    Attributes:
        run_id, step: the replayed step; iteration: its iteration (warm-up included).
        checkpoint_iteration: the checkpoint it started from; iterations_before: iterations
            executed again between that checkpoint and the step.
        trajectories: the step's trajectories (all ranks), in the order trained.
        metrics: metric -> (recorded, recomputed) for :data:`COMPARED_METRICS` the step recorded.
    """

    run_id: str
    step: int
    iteration: int
    checkpoint_iteration: int
    iterations_before: int
    trajectories: list[str]
    metrics: dict[str, tuple[float, float]] = field(default_factory=dict)

    def relative_difference(self, metric: str) -> float:
        """|recomputed - recorded| / max(|recorded|, tiny) of one metric (NaN when either is NaN)."""
        rec, new = self.metrics[metric]
        return abs(new - rec) / max(abs(rec), 1e-30)


def _records(store: Store, subdir: str) -> list[tuple[int, list[dict[str, Any]]]]:
    """(iteration, rows) of each records shard of a run folder."""
    out = []
    for shard in store.list_shards(subdir, strict=True):
        with store.fs.open(shard.path, "rb") as fh:
            pf = pq.ParquetFile(fh)
            it = int((pf.metadata.metadata or {}).get(ITERATION_KEY, b"-1"))
            out.append((it, pf.read().to_pylist()))
    return out


def _checkpoint_before(store: Store, run_id: str, step: int) -> Checkpoint:
    """The newest checkpoint whose state has done fewer than `step` + 1 policy steps (so step
    `step` is still ahead of it)."""
    its = sorted(it for d in store.iter_dirs(checkpoints_dir(run_id))
                 if (it := parse_checkpoint_dir_name(d)) is not None)
    for it in reversed(its):
        ckpt = load_checkpoint(store, run_id, checkpoint_dir(run_id, it))
        if ckpt.state.step <= step:
            if ckpt.sharded:
                raise ReplayError(f"checkpoint {store.url(ckpt.path)} is sharded (FSDP): a replay loads whole state "
                                  "dicts; replay a step after a DDP or single-process checkpoint")
            return ckpt
    raise ReplayError(f"run {run_id!r} has no checkpoint before step {step} in {store.uri} (checkpoints at "
                      f"iterations {its or 'none'}; older ones may have been pruned: --keep-checkpoints)")


def _trainer(cfg: TrainConfig, store: Store, ckpt: Checkpoint) -> Trainer:
    """A trainer in the state of `ckpt` that writes nothing (no recorder, no publishing)."""
    env = D.init_distributed(cfg.run.device, strategy="ddp")
    state = ckpt.state
    _, tokenizer = policy_identity(cfg.model.name, tokenizer=cfg.model.tokenizer)
    stream = TrajectoryStream(store, stream_config(cfg.data), tokenizer=tokenizer, vocab_size=None, cursor=state.cursor)
    loaded = load_policy(cfg.model.name, tokenizer=cfg.model.tokenizer, tiny_vocab_size=cfg.model.tiny_vocab_size,
                         seed=cfg.model.seed)
    stream.vocab_size = loaded.vocab_size
    gate = CheckpointGate(0 if cfg.run.activation_checkpointing else 2**62)
    policy, critic, behaviour, optimizers = models_ddp(cfg, env, loaded, store, ckpt, gate=gate)
    restore_settings(cfg, store, ckpt, optimizers)
    # the replay buffer empty at the checkpoint and seeded from its iteration, as the run's own was
    return make_trainer(cfg, env, store, loaded, (policy, critic, behaviour, optimizers), stream, None, state, gate)


def replay_step(uri: str | Store, run_id: str, step: int, *, device: str = "cpu",
                storage_options: dict[str, Any] | None = None) -> ReplayedStep:
    """Execute step `step` of run `run_id` again and compare it with what the run recorded.

    Args:
        device: where to replay ('cpu', 'cuda', 'auto'); CPU by default, whatever the run used.

    Raises:
        ReplayError: the run has no config or no records of `step`, no whole-state checkpoint
            before it, or a batch read from the checkpoint's cursor is not what the run consumed
            at that step (names the step and the trajectories that differ).
        CheckpointError: a checkpoint file is missing or damaged.
    """
    store = uri if isinstance(uri, Store) else open_existing_store(uri, storage_options=storage_options)
    try:
        cfg = TrainConfig.from_json(store.fs.cat_file(store.path(run_config_file(run_id))).decode())
    except FileNotFoundError:
        raise ReplayError(f"no run {run_id!r} in {store.uri} (no {run_config_file(run_id)})") from None
    steps = _records(store, run_steps_dir(run_id))
    recorded = {r["metric"]: r["value"] for _, rows in steps for r in rows if r["step"] == step}
    iteration = next((it for it, rows in steps if rows and rows[0]["step"] == step), None)
    if not recorded or iteration is None:
        raise ReplayError(f"run {run_id!r} has no records of step {step} in {store.uri}")
    consumed: dict[int, Counter[str]] = {}
    for _, rows in _records(store, run_consumed_dir(run_id)):
        for r in rows:
            consumed.setdefault(r["step"], Counter())[r["trajectory_id"]] += 1
    ckpt = _checkpoint_before(store, run_id, step)
    cfg.run.device = device
    cfg.data.follow = False  # a running run's stream reads what is there now, never waits
    tr = _trainer(cfg, store, ckpt)
    try:
        start = tr.state.iteration
        while True:
            batch = tr.stream.next_batch()
            if batch is None:
                raise ReplayError(f"the data of run {run_id!r} ended before step {step} (iteration "
                                  f"{tr.state.iteration}): trajectories it trained are no longer in {store.uri}")
            # the replay buffer's draw, as the run drew it (its reuses are in the records too)
            batch = with_replay(tr.replay, batch, tr.state.version, max_tokens=cfg.data.max_batch_tokens)
            ids = [s.trajectory_id for s in batch.samples]
            # as train_step numbers it: warm-up iterations are steps -budget .. -1
            this_step = tr.state.step if not tr.in_warmup() else tr.state.iteration - cfg.algo.critic_warmup_steps
            want = consumed.get(this_step)
            if want is not None and Counter(ids) != want:
                extra = sorted((Counter(ids) - want).elements())[:5]
                missing = sorted((want - Counter(ids)).elements())[:5]
                raise ReplayError(f"step {this_step} of run {run_id!r} read from checkpoint it{start:08d}'s cursor is "
                                  f"not what the run consumed (not consumed: {extra}, consumed but not read: "
                                  f"{missing}): the store changed since the run read it")
            is_target = tr.state.iteration == iteration
            metrics, _ = train_step(tr, batch)
            if tr.replay is not None:
                tr.replay.add(batch.samples)
                if tr.state.iteration - tr.last_checkpoint >= cfg.run.checkpoint_every:
                    tr.last_checkpoint = tr.state.iteration  # the run checkpointed here: its buffer was emptied
                    tr.replay.reset(tr.state.iteration)
            if is_target:
                break
            if tr.state.iteration > iteration:
                raise ReplayError(f"iteration {iteration} of step {step} was passed without reaching it")
    finally:
        tr.stream.close()
    out = ReplayedStep(run_id, step, iteration, start, iteration - start, ids)
    for name in COMPARED_METRICS:
        if name in recorded and recorded[name] is not None and name in metrics:
            out.metrics[name] = (float(recorded[name]), float(metrics[name]))
    if "policy/loss" in out.metrics and any(math.isnan(v) for v in out.metrics["policy/loss"]):
        raise ReplayError(f"step {step}: policy loss is NaN (recorded or recomputed)")
    return out

