"""Trajectory-level advantage baselines SAO is compared with (docs/sao.md, "Results"; arXiv
2607.07508): GRPO's group-normalised advantages and a running-mean reward baseline, selectable
by name. The vanilla PPO loss baseline lives in ``losses.py`` (``POLICY_LOSSES["ppo-clip"]``).
Pure torch.

Notation: N = trajectories; rewards are one scalar per trajectory.
"""

from __future__ import annotations

from typing import Literal, Protocol

import torch
from torch import Tensor

__all__ = [
    "GroupNormBaseline",
    "RunningMeanBaseline",
    "TrajectoryBaseline",
    "TrajectoryBaselineName",
    "grpo_advantages",
    "make_trajectory_baseline",
    "to_action_tokens",
]

TrajectoryBaselineName = Literal["grpo", "running-mean"]


def grpo_advantages(
    rewards: Tensor, group_id: Tensor, *, eps: float = 1e-6, scale: bool = True
) -> Tensor:
    """GRPO group-normalised advantages (Shao et al. 2024, DeepSeekMath, eq. 3; the baseline
    of docs/sao.md's "GRPO (+DIS)" row)::

        A_i = (R_i - mean_{j in g(i)} R_j) / (std_{j in g(i)} R_j + eps)

    ``std`` is the unbiased sample standard deviation, as in the GRPO reference
    implementations; a group of one trajectory gets advantage 0 (nothing to compare with).

    Args:
        rewards: ``(N,)`` float, one reward per trajectory.
        group_id: ``(N,)`` integer, trajectories with the same id were sampled for the same
            prompt (any integer labels, not necessarily contiguous).
        eps: > 0, same unit as the rewards; keeps an all-equal group at advantage 0.
        scale: divide by the group std (False: only subtract the group mean, Dr. GRPO).

    Returns:
        ``(N,)`` float advantages, same dtype as ``rewards``.

    Raises:
        ValueError: shapes are not matching 1-D tensors.
    """
    if rewards.dim() != 1 or group_id.shape != rewards.shape:
        raise ValueError(
            f"rewards and group_id must be matching (N,) tensors, got {tuple(rewards.shape)} "
            f"and {tuple(group_id.shape)}"
        )
    if rewards.numel() == 0:
        return rewards.clone()
    _, inverse = torch.unique(group_id, return_inverse=True)
    n_groups = int(inverse.max()) + 1
    x = rewards.to(torch.float64)
    count = torch.zeros(n_groups, dtype=torch.float64, device=x.device).index_add_(
        0, inverse, torch.ones_like(x)
    )
    mean = torch.zeros_like(count).index_add_(0, inverse, x) / count
    centred = x - mean[inverse]
    if not scale:
        return centred.to(rewards.dtype)
    sum_sq = torch.zeros_like(count).index_add_(0, inverse, centred.square())
    std = (sum_sq / (count - 1).clamp(min=1)).sqrt()
    advantages = torch.where(count[inverse] > 1, centred / (std[inverse] + eps), 0.0)
    return advantages.to(rewards.dtype)


def to_action_tokens(trajectory_values: Tensor, action_mask: Tensor) -> Tensor:
    """Spread one value per trajectory over its action tokens (GRPO's token advantages).

    Args:
        trajectory_values: ``(B,)`` float.
        action_mask: ``(B, T)``, 1 = model action token.

    Returns:
        ``(B, T)`` float: the row's value at action tokens, 0 elsewhere.
    """
    if trajectory_values.dim() != 1 or action_mask.dim() != 2:
        raise ValueError("trajectory_values must be (B,) and action_mask (B, T)")
    if trajectory_values.shape[0] != action_mask.shape[0]:
        raise ValueError(
            f"{trajectory_values.shape[0]} trajectory values for {action_mask.shape[0]} rows"
        )
    return torch.where(action_mask != 0, trajectory_values.unsqueeze(-1), 0.0)


class TrajectoryBaseline(Protocol):
    """A named baseline: per-trajectory rewards in, per-trajectory advantages out."""

    def __call__(self, rewards: Tensor, group_id: Tensor | None = None) -> Tensor: ...


class GroupNormBaseline:
    """GRPO advantages as a :class:`TrajectoryBaseline` (stateless; needs ``group_id``)."""

    def __init__(self, *, eps: float = 1e-6, scale: bool = True) -> None:
        self.eps = eps
        self.scale = scale

    def __call__(self, rewards: Tensor, group_id: Tensor | None = None) -> Tensor:
        """``(N,)`` rewards and ``(N,)`` group ids -> ``(N,)`` advantages (see
        :func:`grpo_advantages`). Raises ValueError without ``group_id``."""
        if group_id is None:
            raise ValueError("the grpo baseline needs group_id (trajectories per prompt)")
        return grpo_advantages(rewards, group_id, eps=self.eps, scale=self.scale)


class RunningMeanBaseline:
    """Running-mean reward baseline over the last ``window`` trajectories: the critic-free
    ablation of docs/sao.md ("running-mean baseline instead of a critic")::

        A_i = R_i - mean(rewards of the last `window` trajectories seen before this batch)

    The batch itself is added to the window after its advantages are computed, so no
    trajectory is its own baseline. Before any trajectory has been seen the baseline is 0.

    Args:
        window: trajectories kept, > 0.
    """

    def __init__(self, window: int) -> None:
        if window <= 0:
            raise ValueError(f"window must be > 0 trajectories, got {window}")
        self.window = window
        self._history = torch.zeros(0, dtype=torch.float64)

    @property
    def mean(self) -> float:
        """Current baseline (reward units); 0 before any trajectory."""
        return float(self._history.mean()) if self._history.numel() else 0.0

    def __call__(self, rewards: Tensor, group_id: Tensor | None = None) -> Tensor:
        """``(N,)`` rewards -> ``(N,)`` advantages; ``group_id`` is ignored. Then the batch's
        rewards join the window (in order; the oldest fall out)."""
        if rewards.dim() != 1:
            raise ValueError(f"rewards must be (N,), got {tuple(rewards.shape)}")
        advantages = rewards - torch.as_tensor(self.mean, dtype=rewards.dtype).to(rewards.device)
        seen = torch.cat((self._history, rewards.detach().to("cpu", torch.float64)))
        self._history = seen[-self.window :]
        return advantages

    def state_dict(self) -> dict[str, Tensor]:
        """The window's rewards, oldest first, ``(<= window,)`` float64, for checkpoints."""
        return {"history": self._history.clone()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        """Restore from :meth:`state_dict`."""
        self._history = state["history"].to("cpu", torch.float64)[-self.window :].clone()


def make_trajectory_baseline(
    name: TrajectoryBaselineName, *, window: int = 128
) -> TrajectoryBaseline:
    """Build a baseline by name, once at setup.

    Args:
        name: ``"grpo"`` (:class:`GroupNormBaseline`) or ``"running-mean"``
            (:class:`RunningMeanBaseline`).
        window: trajectories in the running mean (``"running-mean"`` only).

    Raises:
        ValueError: unknown name.
    """
    if name == "grpo":
        return GroupNormBaseline()
    if name == "running-mean":
        return RunningMeanBaseline(window)
    raise ValueError(f"baseline must be 'grpo' or 'running-mean', got {name!r}")
