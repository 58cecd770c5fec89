"""The :class:`Trainer` record: everything :func:`~trajstore.trainer.loop.setup.setup` builds
once (models, optimisers, data stream, recorder, the variants picked for this run) and the step
and the run loop use."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from trajstore.store import Store
from trajstore.trainer.config import TrainConfig
from trajstore.trainer.data import ReplayBuffer, StoreCensus, TrainSample, TrajectoryStream
from trajstore.trainer.loop import distributed as D
from trajstore.trainer.loop.advantage_fns import AdvantageFn
from trajstore.trainer.loop.checkpoint import TrainerState
from trajstore.trainer.loop.records import RunRecorder
from trajstore.trainer.loop.stop import StopRequest
from trajstore.trainer.loop.token_records import TokenRecorder
from trajstore.trainer.models import LoadedPolicy, PolicyLogprobs
from trajstore.trainer.sao.types import PolicyLossStats


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
    """Everything :func:`~trajstore.trainer.loop.train.train` uses, built once by
    :func:`~trajstore.trainer.loop.setup.setup`."""

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
    scalar_fn: Callable[[list[TrainSample], TrainerState], dict[str, float]] | None
    policy_loss_fn: Callable[..., tuple[torch.Tensor, PolicyLossStats]]  # a sao.losses.PolicyLoss, or a wrapper
    value_loss_fn: Callable[..., Any] | None
    behaviour: PolicyLogprobs | None
    published: int | None = None
    history: list[dict[str, float]] = field(default_factory=list)
    census: StoreCensus | None = None
    last_checkpoint: int = 0
    resumed_fresh: bool = False
    """``--resume`` found no checkpoint (and no records): the run started at iteration 0."""
    stop: StopRequest = field(default_factory=StopRequest)
    say: Callable[[str], None] = field(default=lambda _message: None)
    """Tells the user what the trainer is doing within a step (rank 0: the progress line, or a
    line on stderr every few seconds without a terminal); a no-op elsewhere."""
    checkpoint_gate: CheckpointGate | None = None
    """Which micro-batches recompute their layers (auto activation checkpointing, ddp)."""
    token_recorder: TokenRecorder | None = None
    """Writes per-token annotations (``run.record_tokens`` > 0; on every rank), else None."""
    replay: ReplayBuffer | None = None
    """The replay buffer (``data.replay_fraction`` > 0; on every rank, drawing alike), else None."""
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
