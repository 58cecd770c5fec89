"""What ``traj bench throughput`` runs: the arms (:class:`Arm`), the grid and sizes
(:class:`ThroughputConfig`) and its presets."""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from trajstore.errors import TrajstoreError
from trajstore.hub import SMOLLM2_ALIAS
from trajstore.trainer.apps.throughput.trace import EnvSpec

Preset = Literal["default", "smoke"]
DEFAULT_ARMS = ("sync", "one-step", "async-1", "async-2", "async-4", "async-8")
EQUAL_CONCURRENCY_ETA = 2
"""The presets also run ``async-2-cB``: eta 2 with B episodes in flight, the barrier arms' concurrency,
so that asynchrony and concurrency can be told apart (report.decomposition)."""


class ThroughputError(TrajstoreError):
    """The benchmark cannot run as asked (a bad arm name, a child process that failed)."""


@dataclass(frozen=True)
class Arm:
    """How rollouts and training are interleaved.

    Attributes:
        kind: ``sync`` (a batch barrier: batch k+1 starts once the weights of step k are loaded),
            ``one-step`` (batch k+1 starts when batch k has finished and the weights of step k-1 are
            loaded: generated one version behind) or ``async`` (no barrier: every slot starts its
            next episode at once; ``traj proxy --max-staleness`` bounds how far ahead).
        max_staleness: eta of an ``async`` arm (None otherwise).
        concurrency: an ``async`` arm's rollout slots (episodes in flight at most); None: all W.
            The barrier arms run one batch, B episodes, at a time.
    """

    kind: Literal["sync", "one-step", "async"]
    max_staleness: int | None = None
    concurrency: int | None = None

    @property
    def name(self) -> str:
        if self.kind != "async":
            return self.kind
        return f"async-{self.max_staleness}" + (f"-c{self.concurrency}" if self.concurrency is not None else "")

    def slots(self, cfg: ThroughputConfig) -> int:
        """Episodes this arm runs at once at most: B for the barrier arms, its concurrency (or all W
        slots) for an asynchronous one."""
        if self.kind != "async":
            return cfg.batch_size
        return self.concurrency if self.concurrency is not None else cfg.workers

    @classmethod
    def parse(cls, name: str) -> Arm:
        """``sync``, ``one-step``, ``async-N`` (N >= 0, the proxy's ``--max-staleness``; all W
        slots) or ``async-N-cC`` (at most C >= 1 episodes in flight, e.g. C = B to match the
        barrier arms' concurrency).

        Raises:
            ThroughputError: any other name.
        """
        name = name.strip()
        if name in ("sync", "one-step"):
            return cls(name)  # type: ignore[arg-type]
        m = re.fullmatch(r"async-(\d+)(?:-c([1-9]\d*))?", name)
        if m is None:
            raise ThroughputError(f"unknown arm {name!r}: use sync, one-step, async-N (N = --max-staleness) or "
                                  f"async-N-cC (C episodes in flight at most)")
        return cls("async", int(m.group(1)), int(m.group(2)) if m.group(2) else None)


def default_scratch() -> Path:
    """``<system temp dir>/trajstore-bench-throughput``: where the benchmark writes unless told."""
    return Path(tempfile.gettempdir()) / "trajstore-bench-throughput"


class ThroughputConfig(BaseModel):
    """The grid (sigmas x seeds x arms) and the sizes every arm shares."""

    model_config = ConfigDict(extra="forbid")

    preset: Preset = "default"
    scratch: str = Field(default_factory=lambda: str(default_scratch()),
                         description="a fresh run directory is made under it (stores, logs, results)")
    sigmas: list[float] = Field(default_factory=lambda: [0.5, 1.0, 1.5], description="tool-latency log-sigmas")
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2], description="trace and model seeds (paired)")
    arms: list[str] = Field(default_factory=lambda: list(DEFAULT_ARMS))
    steps: int = Field(8, ge=1, description="N: policy steps each arm runs to")
    batch_size: int = Field(4, ge=1, description="B: trajectories per step, every arm (on 2 shared cores a "
                                                 "step of 8 cost the trainer more than the batch's fork-join tail: "
                                                 "bench/RESULTS.md)")
    workers: int = Field(8, ge=1, description="W: episodes that may run at once (rollout slots), every arm")
    median_s: float = Field(0.2, gt=0, description="median tool-call latency (s)")
    mean_turns: float = Field(3.0, ge=1, description="mean turns per episode (geometric)")
    max_turns: int = Field(12, ge=1, description="turns per episode at most")
    model: str = Field("tiny-llama", description="policy served and trained (random weights: the environment's "
                                                 "latency dominates)")
    tokenizer: str = Field(SMOLLM2_ALIAS, description="tokenizer of the chats")
    max_tokens: int = Field(4, ge=1, description="tokens per model call (a random model rarely samples its end "
                                                 "token: most actions are this long)")
    poll_s: float = Field(0.1, gt=0, description="the trainer's store poll, the proxy's version and gate poll, "
                                                 "the barrier's version poll (s)")
    policy_lr: float = Field(1e-3, gt=0, description="policy learning rate: large enough that one version's "
                                                    "weights differ measurably from the next, so that staleness "
                                                    "shows in the importance ratios (DIS masking)")
    startup_timeout_s: float = Field(600.0, gt=0, description="serve, proxy and trainer must be ready by then")
    arm_timeout_s: float = Field(1800.0, gt=0, description="one arm's run must end by then")

    @field_validator("arms")
    @classmethod
    def _arms(cls, v: list[str]) -> list[str]:
        try:
            names = [Arm.parse(a).name for a in v]
        except ThroughputError as e:
            raise ValueError(str(e)) from None
        if not names:
            raise ValueError("at least one arm")
        return names

    @model_validator(mode="after")
    def _concurrency(self) -> ThroughputConfig:
        for a in self.arm_specs:
            if a.concurrency is not None and a.concurrency > self.workers:
                raise ValueError(f"arm {a.name}: {a.concurrency} episodes in flight is more than the W = "
                                 f"{self.workers} rollout slots (--workers)")
        return self

    @field_validator("sigmas")
    @classmethod
    def _sigmas(cls, v: list[float]) -> list[float]:
        if not v or any(s <= 0 for s in v):
            raise ValueError("sigmas must be positive (and at least one)")
        return v

    @property
    def arm_specs(self) -> list[Arm]:
        return [Arm.parse(a) for a in self.arms]

    def env(self, sigma: float) -> EnvSpec:
        return EnvSpec(median_s=self.median_s, sigma=sigma, mean_turns=self.mean_turns, max_turns=self.max_turns)

    def trace_episodes(self) -> int:
        """Episodes an arm may start at most: the N x B it trains on, plus those running or waiting
        when the trainer finishes (at most W, or (eta + 1) x B under the gate)."""
        return self.steps * self.batch_size + self.workers + self.batch_size

    @classmethod
    def preset_config(cls, name: Preset, **overrides: Any) -> ThroughputConfig:
        """The named preset with `overrides` applied. ``default``: the grid of bench/RESULTS.md;
        ``smoke``: every arm once at sigma 1, 2 steps of 2 trajectories, short tool calls. Unless
        the arms are given, both run :data:`DEFAULT_ARMS` and ``async-2-cB`` (B = the batch size)."""
        base: dict[str, Any] = {}
        if name == "smoke":
            base = dict(sigmas=[1.0], seeds=[0], steps=2, batch_size=2, workers=4, median_s=0.05, mean_turns=2.0,
                        max_turns=4)
        merged = {**base, **overrides}
        if "arms" not in merged:
            b = merged.get("batch_size", cls.model_fields["batch_size"].default)
            merged["arms"] = [*DEFAULT_ARMS, f"async-{EQUAL_CONCURRENCY_ETA}-c{b}"]
        return cls(preset=name, **merged)
