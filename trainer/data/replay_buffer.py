"""The replay buffer of `traj train` (``data.replay_fraction`` > 0): trajectories already trained
in the run are trained again at later steps, a bounded number of times and only while they are
fresh enough (docs/design.md, "Replay buffer").

Design:
- What it holds: the :class:`TrainSample` s the stream handed to the trainer, grouped by where
  they were read, (shard, row group), oldest group first, within a token budget
  (``replay_budget_tokens``; the oldest groups are dropped first).
- How it draws: a step has ``floor(replay_fraction x batch_size)`` replay slots (the stream reads
  the rest). Whole row groups are drawn uniformly among those with an eligible trajectory, and
  all their eligible trajectories join the step, until the slots (or the step's token budget)
  are full; the group that would overflow contributes what fits, in row order.
- How many times, how stale: a trajectory is eligible while it was reused fewer than
  ``replay_max_reuse`` times and its staleness (trainer version - its newest action policy
  version) is at most ``replay_max_staleness``; one that can never be eligible again is dropped.
  Trajectories without a policy version (text-only logs) and parts of an episode chain (with a
  parent) are never buffered: their staleness is undefined, or their chain's estimate needs the
  other parts in the same step.
- Importance correction: none of its own. A reused trajectory keeps its stored rollout
  log-probs, so the policy loss (DIS, docs/sao.md) weighs it by pi_theta / pi_rollout like any
  stale trajectory, and masks tokens outside the band.
- Checkpoints: the buffer is emptied, and its random generator re-seeded from (seed, iteration),
  at each checkpoint. A resumed run and a replayed step (``--replay-step``) start from a
  checkpoint with an empty buffer and the same generator, so they draw exactly what the
  uninterrupted run drew; the cost is that no trajectory is reused across a checkpoint.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

import numpy as np

from trajstore.trainer.config import DataConfig, replay_slots
from trajstore.trainer.data.samples import StepBatch, TrainSample

GroupKey = tuple[str, int]
"""(shard name, row group index) of buffered trajectories."""


class ReplayBuffer:
    """Trajectories of the run kept for reuse, grouped by (shard, row group).

    Args:
        slots: trajectories drawn per step at most (:func:`replay_slots`).
        max_reuse: most reuses of one trajectory (>= 1).
        max_staleness: most staleness (policy versions) of a drawn trajectory.
        budget_tokens: most tokens held (tokens).
        seed: seeds the generator (with the iteration, see :meth:`reset`).
    """

    def __init__(self, *, slots: int, max_reuse: int, max_staleness: int, budget_tokens: int, seed: int,
                 iteration: int = 0):
        if slots < 0 or max_reuse < 1 or max_staleness < 0 or budget_tokens < 1:
            raise ValueError(f"replay buffer: slots {slots} >= 0, max_reuse {max_reuse} >= 1, max_staleness "
                             f"{max_staleness} >= 0 and budget_tokens {budget_tokens} >= 1 expected")
        self.slots, self.max_reuse, self.max_staleness, self.budget_tokens = slots, max_reuse, max_staleness, \
            budget_tokens
        self.seed = seed
        self._groups: OrderedDict[GroupKey, list[TrainSample]] = OrderedDict()
        self.tokens = 0
        self.reset(iteration)

    def reset(self, iteration: int) -> None:
        """Empty the buffer and re-seed its generator from (seed, `iteration`): a run that goes on
        from a checkpoint taken at `iteration` draws what the uninterrupted run drew."""
        self._groups.clear()
        self.tokens = 0
        self._rng = np.random.default_rng([self.seed, iteration])

    def __len__(self) -> int:
        return sum(len(g) for g in self._groups.values())

    @property
    def groups(self) -> list[GroupKey]:
        """Buffered (shard, row group) keys, oldest first."""
        return list(self._groups)

    def add(self, samples: list[TrainSample]) -> None:
        """Keep `samples` (just trained) for reuse: a first use enters its row group, a reuse
        goes back with its count. Unversioned trajectories and chain parts are left out; then
        the oldest groups are dropped until the buffer is within its token budget."""
        for s in samples:
            if s.max_policy_version is None or s.needs_behaviour or s.parent_trajectory_id is not None:
                continue
            if s.reuse >= self.max_reuse:
                continue
            self._groups.setdefault((s.shard, s.row_group), []).append(s)
            self.tokens += s.num_tokens
        while self.tokens > self.budget_tokens and self._groups:
            _, dropped = self._groups.popitem(last=False)
            self.tokens -= sum(s.num_tokens for s in dropped)

    def _eligible(self, s: TrainSample, trainer_version: int) -> bool:
        pv = s.max_policy_version
        return s.reuse < self.max_reuse and pv is not None and trainer_version - pv <= self.max_staleness

    def _prune(self, trainer_version: int) -> None:
        """Drop trajectories that can never be drawn again (staleness only grows)."""
        for key in list(self._groups):
            keep = [s for s in self._groups[key] if self._eligible(s, trainer_version)]
            self.tokens -= sum(s.num_tokens for s in self._groups[key]) - sum(s.num_tokens for s in keep)
            if keep:
                self._groups[key] = keep
            else:
                del self._groups[key]

    def draw(self, trainer_version: int, *, max_tokens: int) -> list[TrainSample]:
        """Up to :attr:`slots` eligible trajectories for a step training `trainer_version`, at most
        `max_tokens` tokens together, drawn as whole row groups uniformly (see the module doc).
        Each comes back as a copy with ``reuse`` + 1 and leaves the buffer (:meth:`add` takes it
        back after the step). Returned in (shard, row) order, so the step does not depend on
        the order of the draws."""
        self._prune(trainer_version)
        out: list[TrainSample] = []
        tokens = 0
        keys = list(self._groups)
        while keys and len(out) < self.slots:
            key = keys.pop(int(self._rng.integers(len(keys))))
            group = sorted(self._groups[key], key=lambda s: s.row)
            taken = []
            for s in group:
                if len(out) >= self.slots or tokens + s.num_tokens > max_tokens:
                    break
                out.append(dataclasses.replace(s, reuse=s.reuse + 1))
                taken.append(s)
                tokens += s.num_tokens
            if taken:
                rest = [s for s in self._groups[key] if all(s is not t for t in taken)]
                self.tokens -= sum(s.num_tokens for s in taken)
                if rest:
                    self._groups[key] = rest
                else:
                    del self._groups[key]
            if len(taken) < len(group):
                break  # slots or tokens are full
        return sorted(out, key=lambda s: (s.shard, s.row))


def replay_buffer_for(cfg: DataConfig, *, seed: int, iteration: int) -> ReplayBuffer | None:
    """The run's buffer (None with ``replay_fraction`` 0 or no slot), its generator seeded from
    (`seed`, `iteration`): the iteration the run starts or resumes at."""
    slots = replay_slots(cfg.batch_size, cfg.replay_fraction)
    if slots == 0:
        return None
    return ReplayBuffer(slots=slots, max_reuse=cfg.replay_max_reuse, max_staleness=cfg.replay_max_staleness,
                        budget_tokens=cfg.replay_budget_tokens, seed=seed, iteration=iteration)


def stream_config(cfg: DataConfig) -> DataConfig:
    """The data config the stream reads with: ``batch_size`` less the replay slots."""
    slots = replay_slots(cfg.batch_size, cfg.replay_fraction)
    return cfg.model_copy(update={"batch_size": cfg.batch_size - slots}) if slots else cfg


def with_replay(buffer: ReplayBuffer | None, batch: StepBatch, trainer_version: int, *,
                max_tokens: int) -> StepBatch:
    """`batch` (read by the stream) with the buffer's draw for a step training `trainer_version`
    appended (within `max_tokens` tokens for the whole step); unchanged without a buffer. The
    cursor stays the stream's: replayed trajectories were read before."""
    if buffer is None:
        return batch
    drawn = buffer.draw(trainer_version, max_tokens=max_tokens - batch.num_tokens)
    if not drawn:
        return batch
    return dataclasses.replace(batch, samples=[*batch.samples, *drawn])
