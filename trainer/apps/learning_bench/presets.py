"""The presets of ``traj bench learning`` and what each runs (:class:`SuiteConfig`: the grid of
arms x tasks x paired seeds as run specs), with the calibrated learning rate.

Presets: ``default`` (the grid behind bench/LEARNING.md, measured at 16 min on 2 idle
Intel Xeon cores before the replay arm; with it 45 min on 2 busy AMD EPYC cores, 55 CPU-min:
bench/LEARNING.md),
``smoke`` (CI: one seed, the advantage-quality study at small size and one short run of every task
and arm the default runs, with the same measurements), ``calibrate`` (the one-off learning-rate
calibration that fixed :data:`POLICY_LR`), ``long`` (sao, GRPO with and without DIS and
no-correction for 400 policy steps, outside CI: the dynamics the paper sees after ~160-400 steps)
``power`` (the DIS and critic claims alone, each with the paired seeds it needs for 80 % power
at the paper's effect: :data:`POWER_SEEDS`), ``staleness`` (a sweep: the DIS claims' arms at
:data:`STALENESS_WORKERS` simulated rollout workers, one run each) and ``held-out`` (the power
preset's arms on ``chain100``, whose evaluation instances no training or warm-start episode shows).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from trajstore.trainer.apps.learning_bench.arms import get_arm
from trajstore.trainer.apps.learning_bench.claims import CLAIMS
from trajstore.trainer.apps.learning_bench.oracle import QualityConfig
from trajstore.trainer.apps.learning_bench.spec import RunSpec
from trajstore.trainer.apps.learning_bench.warmstart import WarmStartConfig
from trajstore.trainer.apps.scratch import bench_scratch

Preset = Literal["default", "smoke", "calibrate", "long", "power", "staleness", "held-out"]
PRESETS: tuple[str, ...] = ("default", "smoke", "calibrate", "long", "power", "staleness", "held-out")

POLICY_LR = 5e-4
"""The RL learning rate of every arm (critic: 5x). Calibrated once with ``traj bench learning
--preset calibrate`` (SAO, seed 0, 20 policy steps per candidate lr): the median per-step
KL(pi_before || pi_after) was 6.2e-4 nats per action token at 3e-4 and 9.8e-4 at 5e-4
(interpolated 5.04e-4 for 1e-3); the table is in bench/LEARNING.md."""
CALIBRATION_LRS = (1e-4, 2e-4, 3e-4, 5e-4, 1e-3)
CALIBRATION_TARGET_KL = 1e-3
"""nats per action token, exact over the vocabulary at the batch's action slots."""
DEFAULT_CHAIN_ARMS = ("sao", "sao-k1", "full-critic", "running-mean-8", "running-mean-128", "running-mean-family",
                      "ppo-clip", "no-correction", "no-correction-small-step", "grpo-dis", "grpo-no-dis",
                      "gae-turn-last-h", "gae-turn-avg-h", "gae-no-skip", "moe-critic", "moe-full-critic", "replay")
"""The default preset's chain arms (with the per-family running mean, the step-matched
no-correction, the matched-horizon turn-level GAE and the MoE critic pair added; the turn-level
arms without horizon matching, ``gae-turn-last`` / ``gae-turn-avg``, run with ``--arms``), and
the replay buffer against single use on sao's timeline."""
LONG_ARMS = ("sao", "grpo-dis", "grpo-no-dis", "no-correction")
"""The long preset's arms."""
LONG_SEEDS = 10
"""Paired seeds of the long preset (each of its runs is 16x a default chain run; 5 before the
verdict rules v3: the sign-flip test cannot reach 0.05 with 5 seeds)."""
POWER_ARMS = ("sao", "no-correction", "grpo-dis", "grpo-no-dis", "running-mean-8", "running-mean-128")
"""The power preset's arms: the DIS claims (``dis-vs-none``, ``grpo-dis-vs-none``) and the critic
claims (``critic-vs-mean-8``, ``critic-vs-mean-128``); ``sao-vs-grpo`` reaches a test with them,
so its family has 5 claims."""
POWER_SEEDS = {"dis-vs-none": 64, "grpo-dis-vs-none": 48, "critic-vs-mean-8": 8, "critic-vs-mean-128": 10}
"""Paired seeds per claim of the power preset: the fewest with 80 % power at the paper's effect
on the AUC at level 0.05 / 5 (Holm's first level in a family of 5), from each claim's paired sd
in the default preset's committed run (bench/learning_results/default; the ``seeds`` table of
bench/LEARNING.md, which the tests recompute from those files). The critic claims are sized below
the default preset's 10 seeds; they run 10 (:data:`POWER_MIN_SEEDS`)."""
STALENESS_ARMS = ("sao", "no-correction", "grpo-dis", "grpo-no-dis")
"""The staleness sweep's arms: the DIS claims'."""
STALENESS_WORKERS = (32, 64, 128, 256)
"""Simulated rollout workers per point of the staleness sweep (the trainer takes 32 trajectories a
step: from one batch in flight, as little staleness as the timeline allows, to 8; 64 is the
default preset's)."""
POWER_MIN_SEEDS = 10
"""No claim of the power preset runs fewer paired seeds than the default preset's."""


def power_family() -> int:
    """Claims that reach a test in the power preset (chain AUC claims between its arms): the
    Holm family its seed counts are sized for."""
    return sum(c.task == "chain" and c.metric == "auc" and c.arm in POWER_ARMS and c.ref in POWER_ARMS
               for c in CLAIMS)
SHIFT_STYLES = ("<", "=", ">")
"""Preferred style of each stage of the pref-shift task."""


class SuiteConfig(BaseModel):
    """What ``traj bench learning`` runs (see the presets)."""

    model_config = ConfigDict(extra="forbid")

    preset: Preset = "default"
    scratch: str = Field(default_factory=lambda: str(bench_scratch("learning")),
                         description="directory for warm starts (cached per seed) and a fresh run directory")
    seeds: list[int] = Field(default_factory=lambda: list(range(10)), description="paired seeds (>= 10 for intervals that hold their level)")
    chain_arms: list[str] = Field(default_factory=lambda: list(DEFAULT_CHAIN_ARMS))
    chain_steps: int = 25
    shift_arms: list[str] = Field(default_factory=lambda: ["sao", "running-mean-8", "running-mean-128"])
    shift_stage_steps: int = Field(12, description="policy steps per preference stage (3 stages)")
    batch_size: int = 32
    workers: int = Field(64, description="simulated rollout workers")
    critic_warmup: int = 10
    policy_lr: float = POLICY_LR
    logit_noise: float = Field(0.2, description="scale of the engine's logit noise (nats), on top of bf16 rounding")
    mismatch: Literal["noise", "engine"] = Field("noise", description="the engine's mismatch model "
                                                 "(sampler.Mismatch): bf16 + Gaussian noise, or engine-like")
    chain_task: Literal["chain", "chain100"] = Field("chain", description="the task the chain arms run on: the "
                                                     "mod-10 chain or the mod-100 chain100 (tasks.py)")
    held_out: int = Field(3, ge=0, le=20, description="first terms per family held out of training for evaluation "
                                                      "(chain: at most 9)")
    eval_every: int = Field(5, description="chain task: policy steps between evaluations")
    shift_eval_every: int = Field(4, description="pref-shift task: policy steps between evaluations (divides the "
                                                 "stage length, so every shift step is evaluated)")
    eval_per_family: int = 32
    kl_arms: list[str] = Field(default_factory=lambda: ["sao", "no-correction", "no-correction-small-step",
                                                        "ppo-clip", "grpo-dis"],
                               description="arms whose exact per-step KL is measured (2 extra forwards per step)")
    quality: QualityConfig | None = Field(default_factory=lambda: QualityConfig(critic_iterations=(10, 30)))
    warm_start: WarmStartConfig = Field(default_factory=WarmStartConfig)
    processes: int = Field(2, ge=1, description="worker processes (one torch thread each)")
    calibrate_lrs: list[float] = Field(default_factory=list, description="calibrate preset: candidate policy lrs")
    sweep_workers: list[int] = Field(default_factory=list, description="staleness sweep: run the preset once per "
                                     "number of simulated rollout workers (empty: one run at `workers`)")
    claim_seeds: dict[str, int] = Field(default_factory=dict, description="paired seeds per claim (claim key -> n: "
                                        "seeds 0..n-1); an arm runs every seed any of its claims asks for, arms "
                                        "of no listed claim run `seeds`")

    @classmethod
    def preset_config(cls, name: Preset, **overrides: Any) -> SuiteConfig:
        """The named preset with `overrides` applied (unknown preset: ValueError)."""
        if name == "default":
            base: dict[str, Any] = {}
        elif name == "smoke":
            # every task, arm and measurement of the default preset, one short run each (the arm
            # lists and kl_arms are the default's), so a crash on any of the default's paths shows
            # in CI (the default's pref-shift runs once crashed while smoke ran sao on chain only)
            base = dict(seeds=[0], chain_steps=3, shift_stage_steps=2, shift_eval_every=1, batch_size=16, workers=32,
                        critic_warmup=3, eval_every=3, eval_per_family=8, processes=1,
                        quality=QualityConfig(critic_iterations=(40,), prompts=6, mc_rollouts=16),
                        warm_start=WarmStartConfig(steps=200))
        elif name == "calibrate":
            base = dict(seeds=[0], chain_arms=["sao"], chain_steps=20, shift_arms=[], quality=None,
                        calibrate_lrs=list(CALIBRATION_LRS))
        elif name == "long":
            base = dict(seeds=list(range(LONG_SEEDS)), chain_arms=list(LONG_ARMS), chain_steps=400, shift_arms=[],
                        quality=None, eval_every=25, kl_arms=["sao", "no-correction", "grpo-dis"])
        elif name == "power":
            base = dict(seeds=list(range(POWER_MIN_SEEDS)), chain_arms=list(POWER_ARMS), shift_arms=[], quality=None,
                        kl_arms=["sao", "no-correction", "grpo-dis"],
                        claim_seeds={k: max(n, POWER_MIN_SEEDS) for k, n in POWER_SEEDS.items()})
        elif name == "held-out":
            base = dict(chain_task="chain100", chain_arms=list(POWER_ARMS), shift_arms=[], quality=None,
                        kl_arms=["sao", "no-correction", "grpo-dis"],
                        warm_start=WarmStartConfig(tasks=("chain100",), held_out=3))
        elif name == "staleness":
            base = dict(chain_arms=list(STALENESS_ARMS), shift_arms=[], quality=None,
                        kl_arms=["sao", "no-correction", "grpo-dis"], sweep_workers=list(STALENESS_WORKERS))
        else:
            raise ValueError(f"unknown preset {name!r}; expected {', '.join(PRESETS)}")
        return cls(preset=name, **{**base, **overrides})

    def shifts(self) -> list[int]:
        """Policy steps at which the pref-shift preference changes."""
        return [self.shift_stage_steps * i for i in range(1, len(SHIFT_STYLES))]

    @field_validator("claim_seeds")
    @classmethod
    def _claim_seeds(cls, v: dict[str, int]) -> dict[str, int]:
        known = {c.key for c in CLAIMS}
        bad = sorted(set(v) - known)
        if bad:
            raise ValueError(f"unknown claim {bad[0]!r} in claim_seeds; known: {', '.join(sorted(known))}")
        if any(n < 1 for n in v.values()):
            raise ValueError("claim_seeds: every count must be at least 1")
        return v

    @model_validator(mode="after")
    def _held_out(self) -> SuiteConfig:
        if self.chain_task == "chain" and self.held_out > 9:
            raise ValueError(f"held_out {self.held_out}: the chain task has 10 first terms per family (at most 9)")
        if self.chain_task == "chain100" and (self.chain_arms and "chain100" not in self.warm_start.tasks
                                              or self.warm_start.held_out != self.held_out):
            raise ValueError("chain100 runs need a warm start on chain100 that holds out the same instances "
                             f"(warm_start tasks {self.warm_start.tasks}, held_out {self.warm_start.held_out}; the "
                             f"runs hold out {self.held_out})")
        return self

    def arm_seeds(self, arm: str) -> list[int]:
        """The paired seeds `arm` runs: ``seeds``, widened to 0..n-1 for every claim of
        ``claim_seeds`` that compares it (as arm or reference)."""
        out = set(self.seeds)
        for c in CLAIMS:
            if c.key in self.claim_seeds and arm in (c.arm, c.ref):
                out |= set(range(self.claim_seeds[c.key]))
        return sorted(out)

    def all_seeds(self) -> list[int]:
        """Every seed some run uses (their warm starts are needed)."""
        return sorted(set(self.seeds).union(*(range(n) for n in self.claim_seeds.values())))

    def needs_moe(self) -> bool:
        """Whether an arm runs with the MoE critic (its warm starts are then needed too)."""
        return any(get_arm(a).critic_model != "policy" for a in [*self.chain_arms, *self.shift_arms])

    def specs(self, warm: dict[int, str], warm_moe: dict[int, str] | None = None) -> list[RunSpec]:
        """Every RL run, in a stable order (`warm`: seed -> warm-start directory; `warm_moe`: seed
        -> the MoE LM's, for the MoE critic arms; a placeholder when not given)."""
        common = dict(batch_size=self.batch_size, workers=self.workers, critic_warmup=self.critic_warmup,
                      logit_noise=self.logit_noise, mismatch=self.mismatch, held_out=self.held_out,
                      eval_every=self.eval_every, eval_per_family=self.eval_per_family)
        out = []

        def moe(arm: str, s: int) -> dict[str, Any]:
            if get_arm(arm).critic_model == "policy":
                return {}
            return {"critic_warm_start": (warm_moe or {}).get(s, "(not built)")}

        lrs = self.calibrate_lrs or [self.policy_lr]
        for lr in lrs:
            for arm in self.chain_arms:
                for s in self.arm_seeds(arm):
                    out.append(RunSpec(task=self.chain_task, arm=arm, seed=s, warm_start=warm[s], steps=self.chain_steps,
                                       policy_lr=lr, measure_kl=arm in self.kl_arms, **common, **moe(arm, s)))
        stages = [(i * self.shift_stage_steps, st) for i, st in enumerate(SHIFT_STYLES)]
        if self.shift_arms and self.shift_stage_steps % self.shift_eval_every:
            raise ValueError(f"shift_eval_every {self.shift_eval_every} must divide shift_stage_steps "
                             f"{self.shift_stage_steps}")
        common_shift = {**common, "eval_every": self.shift_eval_every}
        for arm in self.shift_arms:
            for s in self.arm_seeds(arm):
                out.append(RunSpec(task="pref-shift", arm=arm, seed=s, warm_start=warm[s], policy_lr=self.policy_lr,
                                   steps=self.shift_stage_steps * len(SHIFT_STYLES), stages=stages,
                                   measure_kl=arm in self.kl_arms, **common_shift, **moe(arm, s)))
        return out
