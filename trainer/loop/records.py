"""What a training run records: per-step metrics (long format, ``runs/<run_id>/steps``) and one
row per consumed trajectory (``runs/<run_id>/consumed``), both as immutable Parquet shards in
the store, plus the terminal progress bar and optional TensorBoard events.

Each records shard carries the run's *iteration* (0-based index of the batch, warm-up included)
in its footer. A run resumed from the checkpoint of iteration i deletes the shards of later
iterations (:meth:`RunRecorder.rollback_after`): they describe updates the checkpoint does not
contain, and those trajectories are trained (and recorded) again.
"""

from __future__ import annotations

import math
import sys
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from trajstore.errors import TrajstoreError
from trajstore.schema import CONSUMED_SCHEMA, STEP_SCHEMA
from trajstore.store import Store
from trajstore.store.layout import (
    run_config_file,
    run_consumed_dir,
    run_steps_dir,
    run_tensorboard_dir,
    run_tokens_dir,
)
from trajstore.trainer.data import TrainSample

ITERATION_KEY = b"trajstore.train.iteration"
"""Footer key of a records shard: the iteration whose records it holds (decimal)."""

METRIC_DOCS: Mapping[str, str] = {
    "policy/loss": "policy loss of the step (token-mean over action tokens)",
    "policy/grad_norm": "policy gradient L2 norm before clipping",
    "policy/entropy": "mean entropy of the policy at action tokens (nats)",
    "policy/kl_k3": "k3 estimate of KL(pi_rollout || pi_theta) per action token (nats)",
    "policy/abs_logp_diff_mean": "mean |log pi_theta - log pi_rollout| over action tokens (nats)",
    "policy/advantage_mean": "mean advantage over action tokens (reward units)",
    "policy/lambda_mean": "mean length-adaptive lambda_policy of the step's trajectories",
    "value/loss": "critic loss of the last of the K updates",
    "value/grad_norm": "critic gradient L2 norm before clipping (last update)",
    "value/explained_variance": "1 - Var(R - V) / Var(R) over action tokens, values before the update",
    "value/mean": "mean predicted value at action tokens (reward units)",
    "value/return_mean": "mean return target at action tokens (reward units)",
    "value/clip_frac": "fraction of action tokens where the clipped value loss was the larger (--value-clip; "
                       "last of the K updates; 0 without clipping, and in the first update, where V = V_old)",
    "value/last_update_mean": "mean predicted value at action tokens in the last of the K critic updates, i.e. "
                              "after K - 1 of them (reward units)",
    "ratio/mean": "mean importance ratio pi_theta / pi_rollout over action tokens",
    "ratio/min": "smallest ratio", "ratio/max": "largest ratio",
    "ratio/masked_below": "fraction of action tokens with ratio <= 1 - eps_low",
    "ratio/masked_above": "fraction of action tokens with ratio >= 1 + eps_high",
    "ratio/zero_grad": "fraction of action tokens that got no gradient",
    "staleness/mean": "mean staleness of action tokens with a policy version (policy versions; absent when "
                      "none has one)",
    "staleness/max": "largest staleness of an action token (policy versions; absent when none has a version)",
    "staleness/unversioned_action_tokens": "action tokens without a policy version (ingested text logs): "
                                           "their staleness is undefined, left out of staleness/*",
    "staleness/mixed_version_actions": "action spans of the step made by several policy versions without a known "
                                       "boundary (counted at their oldest version)",
    "reward/mean": "mean trajectory reward of the step",
    "data/trajectories": "trajectories trained in the step (all ranks)",
    "data/episodes": "episodes (distinct episode_id) among the step's trajectories: an episode stored as several "
                     "linked trajectories (sub-agents, context rewrites, forks, continuations) counts once",
    "data/action_tokens": "action tokens trained in the step (all ranks)",
    "data/replayed": "trajectories of the step drawn from the replay buffer (reuses; with --replay-fraction)",
    "perf/tokens_per_s": "tokens (all kinds, all ranks) per second of step time",
    "perf/step_s": "wall seconds of the step (data wait included)",
    "perf/data_wait_frac": "share of the step's wall time spent waiting for data",
    "warn/critic_ev_not_positive": "1 when the critic's explained variance on the step (values before its "
                                   "update) is not above 0, i.e. its values add more noise than they remove "
                                   "from the advantages; 0 otherwise",
}
"""Units and meaning of the metric names the loop writes (``data/skipped_<reason>`` also)."""


PROGRESS_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("reward/mean", "reward", ".3g"),
    ("value/explained_variance", "EV", ".2f"),
    ("ratio/mean", "ratio", ".3f"),
    ("perf/tokens_per_s", "tok/s", ",.0f"),
)
"""(metric, label, format) shown on the progress line; every label is distinct."""


def progress_line(step: int, trainer_version: int, metrics: Mapping[str, float], *,
                  iteration: int | None = None) -> str:
    """The progress bar's description of one iteration, e.g.
    ``step 3 v3 reward=0.5 EV=0.12 ratio=1.002 tok/s=1,234``; a critic warm-up iteration (recorded
    as a negative step, ``iteration - budget``) reads ``critic warm-up 3/10``: the third of at
    most 10 critic-only batches (``--critic-warmup-steps``; it may end early). A critic whose
    explained variance is not above 0 is flagged, see ``warn/critic_ev_not_positive``."""
    if step >= 0:
        head = f"step {step}"
    elif iteration is not None:
        head = f"critic warm-up {iteration + 1}/{iteration - step}"
    else:
        head = f"critic warm-up (step {step})"
    parts = [head, f"v{trainer_version}"]
    for key, label, fmt in PROGRESS_FIELDS:
        if key in metrics:  # NaN (no value yet: e.g. EV before the critic has varied returns) reads n/a
            v = metrics[key]
            parts.append(f"{label}={v:{fmt}}" if math.isfinite(v) else f"{label}=n/a")
    if metrics.get("warn/critic_ev_not_positive"):
        parts.append("[critic not useful yet: EV<=0]")
    return " ".join(parts)


def _still_running(ref: weakref.ref[RunRecorder], closed: threading.Event) -> None:
    """Heartbeat of :meth:`RunRecorder.activity` until the recorder is closed or dropped."""
    while True:
        rec = ref()
        if rec is None:
            return
        wait = min(rec.STILL_RUNNING_EVERY_S, 5.0)
        rec._still_running_tick()
        del rec
        if closed.wait(wait):
            return


def _duration(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s}s" if m else f"{s}s"


def consumed_rows(samples: Sequence[TrainSample], *, step: int, trainer_version: int, rank: int,
                  ratios: Sequence[tuple[float, float, float] | None] | None) -> list[dict[str, Any]]:
    """One CONSUMED_SCHEMA row (minus run_id / consumed_at) per sample of a micro-batch.

    Args:
        samples: the micro-batch's trajectories, in packing order.
        ratios: per sample, ``(masked_below, masked_above, ratio_mean)`` over its action slots
            (fractions outside DIS's band on each side, mean importance ratio; from the step's
            statistics), None for a sample without an action slot; or None for a critic-only
            step. Their columns are null where there is no value.
    """
    out = []
    for i, s in enumerate(samples):
        r = ratios[i] if ratios is not None else None
        out.append({
            "step": step, "trainer_version": trainer_version, "trajectory_id": s.trajectory_id, "rank": rank,
            "min_policy_version": s.min_policy_version, "max_policy_version": s.max_policy_version,
            # null (undefined) for a trajectory whose action tokens carry no policy version
            "staleness_min": None if s.max_policy_version is None else trainer_version - s.max_policy_version,
            "staleness_max": None if s.min_policy_version is None else trainer_version - s.min_policy_version,
            "num_action_tokens": s.num_action_tokens,
            "masked_below": r[0] if r else None, "masked_above": r[1] if r else None,
            "ratio_mean": r[2] if r else None, "reuse": s.reuse,
        })
    return out


class RunRecorder:
    """Writes a run's records (rank 0 only) and shows progress.

    Args:
        store: the store. run_id: the run.
        total_steps: for the progress bar (None = unknown).
        progress: draw a rich progress bar. tensorboard: also write TensorBoard events (local
            stores only, under ``runs/<run_id>/tensorboard``).
    """

    WAIT_LOG_EVERY_S = 30.0
    """Without a progress bar: seconds between repeated "waiting for ..." lines."""

    def __init__(self, store: Store, run_id: str, *, total_steps: int | None = None, progress: bool = True,
                 tensorboard: bool = False):
        self.store = store
        self.run_id = run_id
        self._tb = None
        if tensorboard:
            if not store.is_local:
                raise ValueError("--tensorboard needs a local store (TensorBoard writes files in place)")
            try:
                from torch.utils.tensorboard import SummaryWriter  # the optional tensorboard extra
            except ImportError as e:
                raise TrajstoreError("--tensorboard needs the tensorboard package: "
                                     "pip install 'trajstore[tensorboard]'") from e

            self._tb = SummaryWriter(store.path(run_tensorboard_dir(run_id)))
        self._progress = None
        self._task = None
        self._last_wait: tuple[str, float] = ("", -math.inf)
        self._last_activity = -math.inf
        self._activity: tuple[str, float] | None = None
        self._activity_lock = threading.Lock()
        self._heartbeat: threading.Thread | None = None
        self._closed = threading.Event()
        if progress:
            self._progress = Progress(TextColumn("[bold]train[/] {task.description}"), BarColumn(),
                                      MofNCompleteColumn(), TimeElapsedColumn(), transient=False,
                                      console=Console(stderr=True))
            self._progress.start()
            self._task = self._progress.add_task("", total=total_steps)

    def save_config(self, config_json: str) -> str:
        """Write the resolved config to ``runs/<run_id>/config.json`` (atomically)."""
        return self.store.write_bytes(run_config_file(self.run_id), config_json.encode())

    def write_step(self, *, iteration: int, step: int, trainer_version: int, metrics: Mapping[str, float],
                   consumed: Sequence[Mapping[str, Any]]) -> None:
        """Write one iteration's metrics and consumption rows as two shards, then update the
        progress bar and TensorBoard."""
        self.pass_done()
        now = datetime.now(timezone.utc)
        meta = {ITERATION_KEY: str(iteration).encode()}
        names = sorted(metrics)
        steps = pa.table({
            "run_id": [self.run_id] * len(names), "step": [step] * len(names),
            "trainer_version": [trainer_version] * len(names), "wall_time": [now] * len(names),
            "metric": names, "value": [float(metrics[n]) for n in names],
        }, schema=STEP_SCHEMA)
        self.store.write_table(steps, subdir=run_steps_dir(self.run_id), extra_metadata=meta)
        if consumed:
            cols = {f.name: [] for f in CONSUMED_SCHEMA}
            optional = {f.name for f in CONSUMED_SCHEMA if f.nullable}  # e.g. reuse: null reads as 0 (a first use)
            for r in consumed:
                for name in cols:
                    cols[name].append(self.run_id if name == "run_id" else now if name == "consumed_at" else
                                      r.get(name) if name in optional else r[name])
            self.store.write_table(pa.table(cols, schema=CONSUMED_SCHEMA), subdir=run_consumed_dir(self.run_id),
                                   extra_metadata=meta)
        if self._tb is not None:
            for n in names:
                if np.isfinite(metrics[n]):
                    self._tb.add_scalar(n, metrics[n], global_step=iteration)
        if self._progress is not None:
            self._progress.update(self._task, advance=1 if step >= 0 else 0,
                                  description=progress_line(step, trainer_version, metrics, iteration=iteration))

    def waiting(self, message: str) -> None:
        """Show what the trainer waits for: on the progress line, or (without one) as a line on
        stderr, at most every :attr:`WAIT_LOG_EVERY_S` seconds while the message stays the same."""
        if self._progress is not None:
            self._progress.update(self._task, description=message)
            return
        now = time.monotonic()
        if message != self._last_wait[0] or now - self._last_wait[1] >= self.WAIT_LOG_EVERY_S:
            self._last_wait = (message, now)
            print(message, file=sys.stderr, flush=True)

    ACTIVITY_LOG_EVERY_S = 10.0
    """Without a live progress bar: seconds between lines saying what a step is doing."""
    STILL_RUNNING_EVERY_S = 60.0
    """Without a live progress bar: a pass that runs longer repeats its line with the time spent
    (a micro-batch of 12,000 tokens of SmolLM2-135M takes minutes on 2 CPU cores)."""

    def activity(self, message: str) -> None:
        """Show what the current step is doing (e.g. ``step 0: critic update 1/2, micro-batch 1/3
        (11,500 tokens, ...)``) so that a long pass is never silent: on the live progress line
        (whose clock keeps ticking), or (without a terminal or a progress bar) as a line on stderr,
        the first one at once and then at most every :attr:`ACTIVITY_LOG_EVERY_S` seconds, and
        ``... still running (3m0s)`` every :attr:`STILL_RUNNING_EVERY_S` seconds of one pass."""
        if self._progress is not None and self._progress.console.is_terminal:
            self._progress.update(self._task, description=message)
            return
        now = time.monotonic()
        with self._activity_lock:
            self._activity = (message, now)
            if now - self._last_activity >= self.ACTIVITY_LOG_EVERY_S:
                self._last_activity = now
                print(message, file=sys.stderr, flush=True)
            if self._heartbeat is None:
                # holds the recorder weakly: a recorder dropped without close() ends its thread too
                self._heartbeat = threading.Thread(target=_still_running, args=(weakref.ref(self), self._closed),
                                                   name="trajstore-train-heartbeat", daemon=True)
                self._heartbeat.start()

    def _still_running_tick(self) -> None:
        with self._activity_lock:
            if self._activity is None:
                return
            message, since = self._activity
            now = time.monotonic()
            if now - since >= self.STILL_RUNNING_EVERY_S and now - self._last_activity >= self.STILL_RUNNING_EVERY_S:
                self._last_activity = now
                print(f"{message} ... still running ({_duration(now - since)})", file=sys.stderr, flush=True)

    def current_activity(self) -> str | None:
        """The message of the pass in progress (:meth:`activity`), None between passes. Reads one
        attribute without the lock: a signal handler calls it while the main thread may hold it."""
        activity = self._activity
        return None if activity is None else activity[0]

    def pass_done(self) -> None:
        """The pass announced by :meth:`activity` ended (no "still running" lines for it)."""
        with self._activity_lock:
            self._activity = None

    def note(self, message: str) -> None:
        """A line that stays (above the progress bar, or on stderr), e.g. the memory plan."""
        if self._progress is not None:
            self._progress.console.print(message, highlight=False, markup=False, soft_wrap=True)
        else:
            print(message, file=sys.stderr, flush=True)

    def rollback_after(self, iteration: int) -> int:
        """Delete records shards (steps, consumed, per-token annotations) of iterations > `iteration` (work lost with the process that
        wrote them); return how many shards were removed. Idempotent."""
        removed = 0
        for records_dir in (run_steps_dir(self.run_id), run_consumed_dir(self.run_id), run_tokens_dir(self.run_id)):
            for path, _size in self.store.shard_paths(records_dir):
                with self.store.fs.open(path, "rb") as fh:
                    md = pq.read_metadata(fh).metadata or {}
                it = int(md.get(ITERATION_KEY, b"-1"))
                if it > iteration:
                    self.store.fs.rm_file(path)
                    removed += 1
        return removed

    def set_completed(self, steps: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=steps)

    def close(self) -> None:
        self._closed.set()
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None

