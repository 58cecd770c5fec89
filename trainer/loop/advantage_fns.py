"""The advantage estimators as the loop calls them, one per micro-batch (or per group of a
rank's micro-batches that share a chain of an episode's parts), picked once at setup: SAO's
skip-observation GAE from the critic's values, or a baseline's per-trajectory scalar advantage
(GRPO group-normalised / running-mean reward) spread over its action slots. Both credit an
episode stored as several linked trajectories once (:mod:`~trajstore.trainer.data.episodes`)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from trajstore.errors import TrajstoreError
from trajstore.trainer.config import TrainConfig
from trajstore.trainer.data import (
    PackedMicroBatch,
    TrainSample,
    episode_chains,
    gae_inputs,
    join_chains,
    split_chains,
    to_packed,
)
from trajstore.trainer.loop.checkpoint import TrainerState
from trajstore.trainer.sao.advantages import sao_targets
from trajstore.trainer.sao.baselines import RunningMeanBaseline, make_trajectory_baseline

AdvantageFn = Callable[[PackedMicroBatch, list[TrainSample], torch.Tensor | None, dict[str, float]],
                       tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]]
"""(packed, samples, values (1, L) or None, per-trajectory scalar advantages) ->
(advantages (1, L), returns (1, L) or None, lambda_policy (n,))."""


def sao_gae_advantages(cfg: TrainConfig) -> AdvantageFn:
    """SAO's advantages (skip-observation GAE, length-adaptive lambda_policy) and critic targets
    (lambda_critic = 1) of a micro-batch from the critic's values (docs/sao.md, mechanisms 3-4).

    The parts of a chain (context rewrite, continuation; :mod:`~trajstore.trainer.data.episodes`)
    are one row of the GAE: the last action of a part bootstraps from the first action of the next
    part, only the chain's last part carries the reward, and lambda_policy counts the chain's
    action tokens (each part's entry of the returned lambdas is its chain's)."""

    def fn(mb: PackedMicroBatch, samples: list[TrainSample], values: torch.Tensor | None,
           _scalar: dict[str, float]) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        x = gae_inputs(mb, samples, values)
        chains = episode_chains(samples)
        if len(chains) == len(samples):  # no chain: one row per trajectory
            t = sao_targets(x.rewards, x.values, x.action_mask, gamma=cfg.algo.gamma, alpha=cfg.algo.lambda_alpha)
            return to_packed(t.advantages, mb.segments), to_packed(t.returns, mb.segments), t.lambda_policy
        j = join_chains(x, mb.segments, chains)
        t = sao_targets(j.inputs.rewards, j.inputs.values, j.inputs.action_mask, gamma=cfg.algo.gamma,
                        alpha=cfg.algo.lambda_alpha)
        lam = torch.empty(len(samples), dtype=t.lambda_policy.dtype, device=t.lambda_policy.device)
        for k, c in enumerate(chains):
            lam[c] = t.lambda_policy[k]
        return (to_packed(split_chains(t.advantages, j), mb.segments),
                to_packed(split_chains(t.returns, j), mb.segments), lam)

    return fn


def scalar_advantages(_cfg: TrainConfig) -> AdvantageFn:
    """Baselines: each trajectory's scalar advantage (computed on the whole step batch) on all
    of its action slots; no critic targets."""

    def fn(mb: PackedMicroBatch, samples: list[TrainSample], _values: torch.Tensor | None,
           scalar: dict[str, float]) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        adv = torch.zeros(mb.action_mask.shape, dtype=torch.float32, device=mb.action_mask.device)
        for i, s in enumerate(samples):
            a, b = int(mb.segments[i]), int(mb.segments[i + 1])
            adv[0, a:b] = scalar[s.trajectory_id]
        return adv * mb.action_mask, None, torch.ones(len(samples))

    return fn


def scalar_baseline_fn(cfg: TrainConfig, state: TrainerState) -> Callable[[list[TrainSample], TrainerState], dict[str, float]]:
    """Per-trajectory scalar advantages for the baselines (trainer.baselines), computed on the
    global step batch; the running mean's window lives in ``state.baseline`` (checkpointed).

    A chain of an episode's parts (context rewrite, continuation;
    :mod:`~trajstore.trainer.data.episodes`) counts once: its last part's reward and group enter
    the baseline, and every part gets the chain's advantage. A chain whose last part is an
    abandoned branch (a retry or resample replaced it) is left out and gets advantage 0."""
    baseline = make_trajectory_baseline(cfg.algo.advantage, window=cfg.algo.running_mean_window)
    if isinstance(baseline, RunningMeanBaseline) and state.baseline is not None:
        baseline.load_state_dict({"history": torch.tensor(state.baseline, dtype=torch.float64)})

    def fn(all_samples: list[TrainSample], st: TrainerState) -> dict[str, float]:
        every = episode_chains(all_samples)
        # an abandoned branch earns no episode reward: left out of the baseline, advantage 0
        chains = [c for c in every if not all_samples[c[-1]].abandoned]
        out = {all_samples[i].trajectory_id: 0.0 for c in every for i in c}
        if not chains:
            return out
        samples = [all_samples[c[-1]] for c in chains]  # one per chain: its last part
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
        out.update({all_samples[i].trajectory_id: float(a) for c, a in zip(chains, adv) for i in c})
        return out

    return fn
