"""What one learning-benchmark run is (:class:`RunSpec`: an arm on a task from a seed's warm start)
and what it produced (:class:`RunResult`)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from trajstore.trainer.apps.learning_bench.tasks import BenchTask


class RunSpec(BaseModel):
    """One run: an arm on a task from a seed's warm start."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: BenchTask = Field(description="task name")
    arm: str = Field(description="arm name (a key of ARMS)")
    seed: int = Field(0, description="seeds the warm start, task draws, latencies, sampler and evaluation")
    warm_start: str = Field(description="directory of the seed's warm-start model (HF format)")
    steps: int = Field(60, ge=1, description="policy steps")
    critic_warmup: int = Field(10, ge=0, description="warm-up iterations before the first policy step, in every "
                                                     "arm: critics train, critic-free baselines fill their state")
    policy_lr: float = Field(gt=0, description="policy learning rate (calibrated once, same for every arm)")
    critic_lr_factor: float = Field(5.0, gt=0, description="critic learning rate / policy learning rate "
                                                           "(docs/sao.md: 5e-6 / 1e-6)")
    batch_size: int = Field(32, ge=1, description="trajectories per iteration")
    workers: int = Field(64, ge=1, description="simulated rollout workers")
    turn_latency_sigma: float = Field(1.0, ge=0, description="lognormal sigma of the per-turn latency")
    train_step_s: float = Field(1.0, ge=0, description="simulated seconds per trainer iteration "
                                                       "(median turn latency = 1 s)")
    bf16: bool = Field(True, description="engine weights and logits rounded to bfloat16")
    logit_noise: float = Field(0.0, ge=0, description="scale of the engine's logit noise (nats): the sd of "
                                                      "Gaussian noise, or the Student-t scale (mismatch engine)")
    mismatch: Literal["noise", "engine"] = Field("noise", description="the engine's mismatch model: bf16 + Gaussian "
                                                 "logit noise, or engine-like (float8 LM head, Student-t noise; "
                                                 "sampler.Mismatch)")
    held_out: int = Field(3, ge=0, le=20, description="first terms per family held out of training (tasks.split; "
                                                      "chain tasks 0..9); the evaluation "
                                                     "episodes use only these (0: evaluate on training instances)")
    critic_warm_start: str | None = Field(None, description="directory of the seed's warm-started MoE LM (arms with "
                                                            "critic_model tiny-qwen3-moe)")
    eval_every: int = Field(10, ge=1, description="policy steps between evaluations")
    eval_per_family: int = Field(32, ge=1, description="fixed evaluation episodes per difficulty family")
    stages: list[tuple[int, str]] = Field(default_factory=list, description="pref-shift: (first policy step, "
                                          "preferred style) per stage, the first at step 0")
    measure_kl: bool = Field(False, description="also measure the exact per-step KL(pi_before || pi_after) "
                                                "over the batch's action slots (nats/token; 2 extra forwards)")

    @property
    def run_id(self) -> str:
        return f"{self.task}-{self.arm}-s{self.seed}"

    def preferred_at(self, step: int) -> str | None:
        """The preferred style for episodes started at policy version `step` (None: no stages)."""
        if not self.stages:
            return None
        firsts = [s for s, _ in self.stages]
        return self.stages[max(0, bisect.bisect_right(firsts, step) - 1)][1]


@dataclass
class RunResult:
    """What one run produced (its store also holds the trajectories and the trainer's records).

    Attributes:
        spec: the run. store: its store URI. seconds: wall time (s).
        history: one dict per trainer iteration (see :func:`run_one` for the keys).
        evals: one dict per evaluation: ``step``, ``reward`` (mean over the fixed episodes),
            ``by_family`` ({family: mean reward}), ``preferred`` (pref-shift stage style).
        log_ratio_hist: ``{staleness level: counts over LOG_RATIO_EDGES bins (+ under/overflow)}``
            of action tokens' ``log pi_theta - log pi_rollout`` at the policy update.
        band: ``{staleness level: [tokens, below 1 - eps_low, above 1 + eps_high]}`` for the DIS band.
        staleness_tokens: ``{staleness level: action tokens trained}`` (policy iterations).
    """

    spec: RunSpec
    store: str
    history: list[dict[str, float]]
    evals: list[dict[str, Any]]
    log_ratio_hist: dict[int, list[int]]
    band: dict[int, list[int]]
    staleness_tokens: dict[int, int]
    seconds: float
