"""The advantage estimators as the loop calls them, one per micro-batch, picked once at setup:
SAO's skip-observation GAE from the critic's values, or a baseline's per-trajectory scalar
advantage (GRPO group-normalised / running-mean reward) spread over its action slots."""

from __future__ import annotations

from collections.abc import Callable

import torch

from trajstore.errors import TrajstoreError
from trajstore.trainer.data import PackedMicroBatch, Sample, gae_inputs, to_packed
from trajstore.trainer.loop.checkpoint import TrainerState
from trajstore.trainer.loop.config import TrainConfig
from trajstore.trainer.sao.advantages import sao_targets
from trajstore.trainer.sao.baselines import RunningMeanBaseline, make_trajectory_baseline

AdvantageFn = Callable[[PackedMicroBatch, list[Sample], torch.Tensor | None, dict[str, float]],
                       tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]]
"""(packed, samples, values (1, L) or None, per-trajectory scalar advantages) ->
(advantages (1, L), returns (1, L) or None, lambda_policy (n,))."""


def sao_gae_advantages(cfg: TrainConfig) -> AdvantageFn:
    """SAO's advantages (skip-observation GAE, length-adaptive lambda_policy) and critic targets
    (lambda_critic = 1) of a micro-batch from the critic's values (SAO.md, mechanisms 3-4)."""

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


def scalar_baseline_fn(cfg: TrainConfig, state: TrainerState) -> Callable[[list[Sample], TrainerState], dict[str, float]]:
    """Per-trajectory scalar advantages for the baselines (trainer.baselines), computed on the
    global step batch; the running mean's window lives in ``state.baseline`` (checkpointed)."""
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
