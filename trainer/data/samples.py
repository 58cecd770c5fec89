"""The typed records the stream hands to the trainer: one trajectory ready for training
(:class:`TrainSample`, numpy arrays per token) and the trajectories of one step (:class:`StepBatch`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trajstore.sampling import SamplingArrays
from trajstore.trainer.data.cursor import DataCursor


@dataclass(kw_only=True)
class TrainSample:
    """One trajectory ready for training. T = its token count.

    Attributes:
        trajectory_id, group_id: as stored; shard, row: where it was read.
        tokens: int64 (T,) token ids.
        rollout_logprobs: float32 (T,), nats; the engine's log-prob at action tokens, NaN elsewhere.
            NaN at action tokens too when `needs_behaviour` (filled by the trainer, see
            ``behaviour_logprobs``).
        action_mask: bool (T,); True = token is a model action trained on (an engine action
            token without a log-prob is False: DIS cannot weigh it).
        policy_version: int64 (T,); version that generated the token, -1 at non-action tokens; for a
            mixed-version action span (schema field ``policy_version_max``) the oldest version, so
            staleness is never under-counted.
        sampling: (T,) arrays of the distribution each action token was drawn from (its span's
            temperature, top-k, top-p, min-p as the trainer applies them:
            :func:`trajstore.sampling.span_sampling`); temperature 1 without truncation elsewhere.
        reward: float, credited at the last action token.
        needs_behaviour: True for text-only data admitted with ``behaviour_logprobs="initial-policy"``.
        cursor: the stream's cursor right after this trajectory.
        mixed_version_actions: action spans produced by several versions without a known boundary.
        episode_id, parent_trajectory_id, link_kind, fork_point: its lineage as stored (schema v3;
            rows of older shards are their own episode, without a parent), read by the chain rule of
            :mod:`~trajstore.trainer.data.episodes`.
        abandoned: True for a branch the harness threw away (a retry or resample replaced it; schema
            v4 ``abandoned``): it earns no episode reward (:func:`~trajstore.trainer.data.episodes.credited_reward`).
        row_group: index of the shard's row group it was read from (the replay buffer draws
            whole row groups).
        reuse: 0 for the first time it is trained in a run; n for its n-th reuse, drawn from the
            replay buffer (:mod:`~trajstore.trainer.data.replay_buffer`).
    """

    trajectory_id: str
    group_id: str | None
    shard: str
    row: int
    tokens: np.ndarray
    rollout_logprobs: np.ndarray
    action_mask: np.ndarray
    policy_version: np.ndarray
    sampling: SamplingArrays
    reward: float
    needs_behaviour: bool
    cursor: DataCursor
    mixed_version_actions: int = 0
    episode_id: str | None = None
    parent_trajectory_id: str | None = None
    link_kind: str | None = None
    fork_point: int | None = None
    abandoned: bool | None = None
    row_group: int = 0
    reuse: int = 0

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    @property
    def num_action_tokens(self) -> int:
        return int(self.action_mask.sum())

    @property
    def versioned_policy_version(self) -> np.ndarray:
        """Policy versions of the action tokens that have one (ingested text logs have none: their
        tokens are left out, so their staleness is undefined, never ``trainer_version - (-1)``)."""
        pv = self.policy_version[self.action_mask]
        return pv[pv >= 0]

    @property
    def min_policy_version(self) -> int | None:
        pv = self.versioned_policy_version
        return int(pv.min()) if len(pv) else None

    @property
    def max_policy_version(self) -> int | None:
        pv = self.versioned_policy_version
        return int(pv.max()) if len(pv) else None


@dataclass
class StepBatch:
    """The trajectories of one training step (all ranks) and the cursor after them.

    Attributes:
        samples: in arrival order. skipped: rows read but not trained, by reason.
        wait_s: seconds spent waiting for this batch inside the stream (reading + polling).
    """

    samples: list[TrainSample]
    cursor: DataCursor
    skipped: dict[str, int]
    wait_s: float = 0.0

    @property
    def num_tokens(self) -> int:
        return sum(s.num_tokens for s in self.samples)

