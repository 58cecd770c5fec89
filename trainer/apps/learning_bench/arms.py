"""The arms of the learning benchmark: SAO and its ablations, each differing from its reference
(``sao``; ``moe-critic`` for ``moe-full-critic``) in one respect, looked up by name (:func:`get_arm`, which raises the benchmark's :class:`BenchError`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from trajstore.errors import TrajstoreError
from trajstore.trainer.apps.learning_bench.estimators import EstimatorName

DIS_BAND = (0.3, 5.0)
"""SAO's DIS band (eps_low, eps_high) for reasoning (docs/sao.md mechanism 1); the benchmark's DIS arms
use it, and the per-staleness band occupancy is measured against it in every arm."""


NO_CORRECTION_LR_FACTOR = 0.64
"""Learning-rate factor of ``no-correction-small-step``, chosen so that its median per-step KL
matches sao's. First set to 0.45 from the v1 run (no-correction 7.04e-3 nats/token vs sao's
1.45e-3, assuming KL ~ lr**2); a one-seed sizing run of the default preset at commit 7f0a5d5
(seed 0, before any run of the v2 rules) measured sao 1.23e-3, no-correction 7.43e-3 and
no-correction at 0.45x 3.11e-4: KL grew as lr**4 between the two, and log-log interpolation to
sao's KL gives 0.64. Only KL was used to choose it; the arm's KL is measured in every run."""


REPLAY_MAX_REUSE = 1
"""The ``replay`` arm's ``data.replay_max_reuse``: a trajectory is trained at most twice."""
REPLAY_MAX_STALENESS = 4
"""The ``replay`` arm's ``data.replay_max_staleness`` (policy versions): a reuse is at most 4
versions behind, inside what DIS's band (0.3 / 5.0) corrects on this task at the calibrated lr."""


class BenchError(TrajstoreError):
    """The benchmark could not run (bad arm name, the stream returned a different batch)."""


@dataclass(frozen=True)
class Arm:
    """One algorithm variant; each differs from its `reference` in exactly one respect (`changes`).

    Attributes:
        name: short name. changes: what differs from ``sao``, in words.
        algo: overrides of :class:`~trajstore.trainer.config.AlgoConfig` fields.
        full_critic: train every critic parameter (no frozen embeddings / norms / attention).
        group_size: rollouts per prompt (GRPO groups); 1 = single rollout per prompt.
        estimator: the policy's advantage estimator when there is a critic.
        correction: ``dis`` (SAO), ``ppo-clip`` (against the rollout log-probs) or ``none``
            (the ratio is recomputed with the current weights, hence 1: plain policy gradient).
        lr_factor: the policy (and critic) learning rate relative to the calibrated one; 1 in
            every arm whose ablation is not the step size.
        baseline_key: running-mean arms: one global window (``global``) or one window per
            difficulty family (``family``, read from the prompt's tag), each of the arm's size.
        critic_model: ``policy`` (the critic is built from the policy's backbone, as in SAO) or
            ``tiny-qwen3-moe`` (a 2-layer Qwen3-MoE, 4 experts, top-2, warm-started on the same
            demonstrations as the policy; :func:`~.warmstart.ensure_warm_start`).
        reference: the arm it ablates (``sao`` but for the MoE full critic, whose reference is
            the MoE critic with frozen attention).
        replay: replay slots per fresh trajectory: each step trains the timeline's batch plus
            ``floor(replay x batch_size)`` trajectories drawn again from the trainer's replay
            buffer (``data.replay_fraction``; :data:`REPLAY_MAX_REUSE`,
            :data:`REPLAY_MAX_STALENESS`); 0 = every trajectory trained once.
    """

    name: str
    changes: str
    algo: dict[str, Any] = field(default_factory=dict)
    full_critic: bool = False
    group_size: int = 1
    estimator: EstimatorName = "token"
    correction: Literal["dis", "ppo-clip", "none"] = "dis"
    lr_factor: float = 1.0
    baseline_key: Literal["global", "family"] = "global"
    critic_model: Literal["policy", "tiny-qwen3-moe"] = "policy"
    reference: str = "sao"
    replay: float = 0.0

    @property
    def has_critic(self) -> bool:
        return self.algo.get("advantage", "sao-gae") == "sao-gae"


ARMS: dict[str, Arm] = {a.name: a for a in (
    Arm("sao", "SAO: DIS (0.3 / 5.0), critic K = 2 with frozen embeddings / norms / attention, token-level "
               "skip-observation GAE, single rollout per prompt"),
    Arm("sao-k1", "K = 1 critic update per policy update", algo={"critic_updates": 1}),
    Arm("full-critic", "full-parameter critic (attention, embeddings, norms train too)", full_critic=True),
    Arm("running-mean-8", "no critic: A = R - mean of the last 8 rewards (global window)",
        algo={"advantage": "running-mean", "running_mean_window": 8}),
    Arm("running-mean-128", "no critic: A = R - mean of the last 128 rewards (global window)",
        algo={"advantage": "running-mean", "running_mean_window": 128}),
    Arm("ppo-clip", "PPO-clip 0.2 / 0.28 with pi_old = rollout log-probs instead of DIS",
        algo={"policy_loss": "ppo-clip", "eps_low": 0.2, "eps_high": 0.28}, correction="ppo-clip"),
    Arm("no-correction", "no off-policy correction: ratio recomputed with current weights (= 1)",
        correction="none"),
    Arm("grpo-dis", "GRPO: 4 rollouts per prompt, group-normalised rewards, no critic (DIS kept)",
        algo={"advantage": "grpo"}, group_size=4),
    Arm("grpo-no-dis", "GRPO (as grpo-dis) without correction: ratio recomputed (= 1)",
        algo={"advantage": "grpo"}, group_size=4, correction="none"),
    Arm("gae-turn-last", "turn-level GAE, a turn's value read at its last token", estimator="turn-last"),
    Arm("gae-turn-avg", "turn-level GAE, a turn's value = mean over its tokens", estimator="turn-avg"),
    Arm("gae-no-skip", "token-level GAE through observation tokens (no skipping)", estimator="no-skip"),
    # comparators and controls a reviewer asks for
    Arm("running-mean-family", "no critic: A = R - mean of the last 32 rewards of the same difficulty family "
        "(one window per family)", algo={"advantage": "running-mean", "running_mean_window": 32},
        baseline_key="family"),
    Arm("no-correction-small-step", f"no-correction at {NO_CORRECTION_LR_FACTOR:g}x the learning rate: per-step "
        "KL matched to sao's", correction="none", lr_factor=NO_CORRECTION_LR_FACTOR),
    Arm("gae-turn-last-h", "turn-level GAE (value at a turn's last token) with the token-level effective horizon: "
        "lambda_turn = lambda ** (tokens / turns)", estimator="turn-last-h"),
    Arm("gae-turn-avg-h", "turn-level GAE (turn's mean value) with the token-level effective horizon",
        estimator="turn-avg-h"),
    Arm("moe-critic", "critic from a 2-layer tiny Qwen3-MoE (4 experts, top-2), attention / router / embeddings / "
        "norms frozen (the reference of moe-full-critic)", critic_model="tiny-qwen3-moe"),
    Arm("moe-full-critic", "the MoE critic with every parameter trained (attention and router too)",
        critic_model="tiny-qwen3-moe", full_critic=True, reference="moe-critic"),
    Arm("replay", f"replay buffer: each step also trains half a batch of trajectories drawn again (whole row groups, "
        f"each reused at most {REPLAY_MAX_REUSE}x, at most {REPLAY_MAX_STALENESS} versions stale), DIS-corrected by "
        "their stored rollout log-probs; the same fresh rollouts as sao", replay=0.5),
)}


def get_arm(name: str) -> Arm:
    """The arm called `name`.

    Raises:
        BenchError: unknown name (the known ones are listed).
    """
    try:
        return ARMS[name]
    except KeyError:
        raise BenchError(f"unknown arm {name!r}; known arms: {', '.join(ARMS)}") from None
