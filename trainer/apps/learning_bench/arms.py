"""The arms of the learning benchmark: SAO and its ablations, each differing from ``sao`` in one
respect, looked up by name (:func:`get_arm`, which raises the benchmark's :class:`BenchError`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from trajstore.errors import TrajstoreError
from trajstore.trainer.apps.learning_bench.estimators import EstimatorName

DIS_BAND = (0.3, 5.0)
"""SAO's DIS band (eps_low, eps_high) for reasoning (SAO.md mechanism 1); the benchmark's DIS arms
use it, and the per-staleness band occupancy is measured against it in every arm."""


class BenchError(TrajstoreError):
    """The benchmark could not run (bad arm name, the stream returned a different batch)."""


@dataclass(frozen=True)
class Arm:
    """One algorithm variant; each differs from ``sao`` in exactly one respect (`changes`).

    Attributes:
        name: short name. changes: what differs from ``sao``, in words.
        algo: overrides of :class:`~trajstore.trainer.loop.config.AlgoConfig` fields.
        full_critic: train every critic parameter (no frozen embeddings / norms / attention).
        group_size: rollouts per prompt (GRPO groups); 1 = single rollout per prompt.
        estimator: the policy's advantage estimator when there is a critic.
        correction: ``dis`` (SAO), ``ppo-clip`` (against the rollout log-probs) or ``none``
            (the ratio is recomputed with the current weights, hence 1: plain policy gradient).
        lr_factor: the policy (and critic) learning rate relative to the calibrated one; 1 in
            every arm whose ablation is not the step size.
    """

    name: str
    changes: str
    algo: dict[str, Any] = field(default_factory=dict)
    full_critic: bool = False
    group_size: int = 1
    estimator: EstimatorName = "token"
    correction: Literal["dis", "ppo-clip", "none"] = "dis"
    lr_factor: float = 1.0

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
