"""Event-driven timeline of an asynchronous RL run: rollout workers with long-tailed per-turn
latency, a trainer that consumes finished trajectories in completion order, and the policy
versions it publishes. Pure Python (no torch, no model).

The timeline does not depend on what the policy writes: an episode's number of turns is fixed
by its instance, and each turn's latency is drawn from a lognormal distribution with a random
stream per rollout (``(seed, rollout index)``), so every arm of a seed sees the same latencies.
That is what lets the harness compute the whole timeline first and then sample each action with
the policy version current when the action starts (versions mix within a trajectory), batching
the actions that share a version.

Modelled: workers take the next rollout as soon as they are free (for GRPO a prompt is queued
``group_size`` times in a row, and its group becomes trainable only when its slowest member has
finished); the trainer starts an iteration as soon as it is idle and ``batch_size`` trajectories
(whole groups) are waiting, takes them in completion order, and publishes the new version
``train_step_s`` later (critic warm-up iterations publish nothing). Not modelled: latency that
depends on the sampled text, rollouts aborted on a version change, back-pressure on workers.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class AsyncConfig:
    """Timing of the simulated system (times in simulated seconds).

    Attributes:
        workers: rollouts in flight at once.
        batch_size: trajectories per trainer iteration.
        group_size: rollouts per prompt (GRPO groups); 1 = single rollout per prompt (SAO).
        turn_latency_median_s: median latency of one turn (generation + environment).
        turn_latency_sigma: sigma of the lognormal turn latency (1.0: p99 is ~10x the median).
        train_step_s: time of one trainer iteration, from taking the batch to publishing.
    """

    workers: int = 64
    batch_size: int = 32
    group_size: int = 1
    turn_latency_median_s: float = 1.0
    turn_latency_sigma: float = 1.0
    train_step_s: float = 1.0

    def __post_init__(self) -> None:
        if self.batch_size % self.group_size:
            raise ValueError(f"batch_size {self.batch_size} is not a multiple of group_size {self.group_size}")
        if self.workers < 1 or self.turn_latency_median_s <= 0 or self.turn_latency_sigma < 0 or self.train_step_s < 0:
            raise ValueError(f"invalid async config {self}")


@dataclass
class Rollout:
    """One rollout on the timeline.

    Attributes:
        index: position in the rollout stream (prompt ``index // group_size``).
        prompt: prompt index (the task instance drawn for it).
        worker: the worker that ran it.
        action_starts: time each action (turn) starts, increasing.
        end: time the episode finished.
        iteration: trainer iteration that consumed it (-1: never consumed).
    """

    index: int
    prompt: int
    worker: int
    action_starts: list[float]
    end: float
    iteration: int = -1


@dataclass
class Iteration:
    """One trainer iteration.

    Attributes:
        index: 0-based. start, end: when it took its batch and when it finished (and published).
        rollouts: indices of the consumed rollouts, in completion order (groups kept together).
        publishes: the policy version it publishes at `end`, or None (critic warm-up).
    """

    index: int
    start: float
    end: float
    rollouts: list[int]
    publishes: int | None


@dataclass
class Timeline:
    """The whole run's timeline.

    Attributes:
        rollouts: every rollout started (some are still unconsumed at the end).
        iterations: the trainer iterations, in order.
        publish_times: ``publish_times[v]`` = when version v became current (``[0.0]`` for v0).
    """

    rollouts: list[Rollout]
    iterations: list[Iteration]
    publish_times: list[float] = field(default_factory=lambda: [0.0])

    def version_at(self, t: float) -> int:
        """The policy version current at time `t` (a version published exactly at `t` counts)."""
        return bisect.bisect_right(self.publish_times, t) - 1


def turn_latencies(seed: int, index: int, turns: int, cfg: AsyncConfig) -> list[float]:
    """The `turns` latencies (s) of rollout `index`: lognormal, median ``turn_latency_median_s``,
    shape ``turn_latency_sigma``, from a stream of its own (the same in every arm of a seed)."""
    rng = random.Random(f"latency-{seed}-{index}")
    return [cfg.turn_latency_median_s * math.exp(cfg.turn_latency_sigma * rng.gauss(0.0, 1.0)) for _ in range(turns)]


def simulate(turns_per_prompt: Sequence[int], cfg: AsyncConfig, *, iterations: int, warmup: int,
             seed: int) -> Timeline:
    """Run the event simulation until the trainer has done `iterations` iterations.

    Args:
        turns_per_prompt: actions of the episode drawn for each prompt, in draw order (must be
            long enough: ``ValueError`` otherwise).
        cfg: the timing.
        iterations: trainer iterations to simulate (warm-up included).
        warmup: the first `warmup` iterations train the critic only and publish no version.
        seed: the latency streams' seed.

    Returns:
        The :class:`Timeline`.
    """
    g = cfg.group_size
    rollouts: list[Rollout] = []
    events: list[tuple[float, int, str, int]] = []  # (time, tie-break, kind, payload)
    seq = 0

    def start(worker: int, t: float) -> None:
        nonlocal seq
        k = len(rollouts)
        p = k // g
        if p >= len(turns_per_prompt):
            raise ValueError(f"the simulation needs more than {len(turns_per_prompt)} prompts")
        lat = turn_latencies(seed, k, turns_per_prompt[p], cfg)
        starts = [t + sum(lat[:j]) for j in range(len(lat))]
        rollouts.append(Rollout(k, p, worker, starts, t + sum(lat)))
        heapq.heappush(events, (t + sum(lat), seq, "done", k))
        seq += 1

    for w in range(cfg.workers):
        start(w, 0.0)
    finished_in_group: dict[int, list[int]] = {}
    ready: list[int] = []  # trainable rollouts in completion order
    its: list[Iteration] = []
    publish = [0.0]
    busy_until: float | None = None

    def maybe_train(t: float) -> None:
        nonlocal busy_until, seq
        if busy_until is not None or len(ready) < cfg.batch_size or len(its) >= iterations:
            return
        batch = ready[:cfg.batch_size]
        del ready[:cfg.batch_size]
        i = len(its)
        version = None if i < warmup else i - warmup + 1
        its.append(Iteration(i, t, t + cfg.train_step_s, batch, version))
        for k in batch:
            rollouts[k].iteration = i
        busy_until = t + cfg.train_step_s
        heapq.heappush(events, (busy_until, seq, "trained", i))
        seq += 1

    while events and (len(its) < iterations or busy_until is not None):
        t, _, kind, payload = heapq.heappop(events)
        if kind == "done":
            r = rollouts[payload]
            members = finished_in_group.setdefault(r.prompt, [])
            members.append(payload)
            if len(members) == g:
                ready.extend(members)
                del finished_in_group[r.prompt]
            start(r.worker, t)
        else:
            busy_until = None
            if its[payload].publishes is not None:
                publish.append(t)
        maybe_train(t)
    return Timeline(rollouts, its, publish)
