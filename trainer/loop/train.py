"""The streaming SAO training loop (docs/sao.md), torchtune-style: :func:`train` takes
a :class:`~trajstore.trainer.loop.trainer.Trainer` from :func:`~trajstore.trainer.loop.setup.setup`,
streams step batches from the store and, for each, runs one iteration
(:func:`~trajstore.trainer.loop.step.train_step`), records it, publishes and checkpoints.

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

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

from trajstore.trainer.config import TrainConfig
from trajstore.trainer.data import StepBatch, with_replay
from trajstore.trainer.loop import distributed as D
from trajstore.trainer.loop.save import checkpoint, publish
from trajstore.trainer.loop.setup import setup
from trajstore.trainer.loop.step import train_step
from trajstore.trainer.loop.summary import TrainSummary, run_warnings
from trajstore.trainer.loop.trainer import Trainer


def train(cfg: TrainConfig, *, resume: bool = False, trainer: Trainer | None = None) -> TrainSummary:
    """Run `traj train`: stream the store, update, record, publish and checkpoint until
    ``max_steps`` policy steps are done or the data ends (with ``follow``: until idle timeout).
    Without `trainer` (as `traj train` calls it) it sets up the run and, under torchrun, leaves
    the process group at the end; a caller passing its own `trainer` owns that group.

    Raises:
        TrainDataError: data the trainer refuses (see :mod:`trajstore.trainer.data`).
        CheckpointError: see :func:`~trajstore.trainer.loop.setup.setup`.
    """
    tr = trainer or setup(cfg, resume=resume)
    state = tr.state
    tr.stream.stop_event = tr.stop.requested
    tr.stop.in_progress = lambda: (tr.recorder.current_activity() if tr.recorder is not None else None) or (
        f"{state.iteration} iteration(s) done")
    try:
        with tr.stop:
            _train_loop(tr)
            if state.iteration != tr.last_checkpoint:
                checkpoint(tr)
            publish(tr)
    finally:
        tr.stream.close()
        if tr.recorder is not None:
            tr.recorder.close()
    summary = TrainSummary(state.iteration, state.step, state.version, tr.history, run_warnings(tr, resume=resume),
                           is_main=tr.env.is_main)
    if trainer is None:
        # this call joined the torchrun process group (setup), so it leaves it, on every rank and
        # only after a run that ended normally (a rank that raised may leave the others inside a
        # collective, where destroying the group would hang). A process that exits with the group
        # alive can abort in gloo's teardown ("terminate called without an active exception").
        D.shutdown(tr.env)
    return summary


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
        batch = with_replay(tr.replay, batch, state.version, max_tokens=tr.cfg.data.max_batch_tokens)
        metrics, consumed = train_step(tr, batch)
        if tr.replay is not None:
            tr.replay.add(batch.samples)  # ends with its one host sync: the GPU is idle again
        step_s = time.perf_counter() - t0 + wait_s
        tokens = float(batch.num_tokens)  # every rank holds the whole step batch: all ranks' tokens
        metrics.update({"perf/step_s": step_s, "perf/tokens_per_s": tokens / step_s,
                        "perf/data_wait_frac": wait_s / step_s})
        if tr.replay is not None:
            metrics["data/replayed"] = float(sum(s.reuse > 0 for s in batch.samples))
        rows = [r for part in D.gather_objects(consumed, tr.env) for r in part]
        if tr.recorder is not None:
            tr.recorder.write_step(iteration=iteration, step=rows[0]["step"] if rows else state.step - 1,
                                   trainer_version=rows[0]["trainer_version"] if rows else state.version,
                                   metrics=metrics, consumed=rows)
        tr.history.append(metrics)
        if metrics.get("policy/loss") is not None and run.publish_every and state.step % run.publish_every == 0:
            publish(tr)
        if state.iteration - tr.last_checkpoint >= run.checkpoint_every:
            checkpoint(tr)
        if run.max_steps is not None and state.step >= run.max_steps:
            break  # done: not waiting for a batch it would not train (with --follow, maybe for ever)


def _batches(tr: Trainer) -> Iterator[tuple[StepBatch | None, float]]:
    """(batch, seconds the loop waited for it). One process: a reader thread keeps up to two
    batches ready; with several ranks batches are read in step (shard listing is a collective).
    Ends early (without a batch) once a stop is requested (:class:`~trajstore.trainer.loop.stop.StopRequest`)."""
    if tr.env.distributed:
        while True:
            t0 = time.perf_counter()
            b = tr.stream.next_batch()
            yield b, time.perf_counter() - t0
            if b is None:
                return
    q: queue.Queue[Any] = queue.Queue(maxsize=2)
    stop = threading.Event()

    def offer(item: Any) -> None:  # never blocks for ever on a full queue once the loop is done
        while not stop.is_set():
            try:
                q.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def reader() -> None:
        try:
            while not stop.is_set():
                b = tr.stream.next_batch()
                offer(b)
                if b is None:
                    return
        except BaseException as e:  # surfaced in the training thread
            offer(e)

    th = threading.Thread(target=reader, name="trajstore-train-reader", daemon=True)
    th.start()
    try:
        t0 = time.perf_counter()
        while True:
            try:
                b = q.get(timeout=0.2)  # in slices, to notice a stop request while waiting
            except queue.Empty:
                if tr.stop.requested.is_set():
                    return
                continue  # the wait goes on: t0 stays where it began
            if isinstance(b, BaseException):
                raise b
            yield b, time.perf_counter() - t0
            t0 = time.perf_counter()
            if b is None:
                return
    finally:
        stop.set()
        # a following stream waiting for data stops waiting: the reader thread ends instead of
        # polling the store for as long as the process lives (a process that trains again)
        tr.stream.stop_event = stop
