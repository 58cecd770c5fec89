"""The paper's comparative claims (docs/sao.md, "Results to keep in mind") that ``traj bench learning`` decides, each with its
paired comparison, metric, direction and the effect the paper reports for it.

**The paper's effect, mapped to the benchmark's metric.** The paper reports accuracy points after
training (AIME25; Qwen3-30B-A3B, 400-1,000 steps); the benchmark's reward is also a success
fraction in [0, 1], so one point is 0.01 reward units. Its ``auc`` metric is the mean evaluation
reward over the run, which starts from the same warm start for every arm: a gap that opens
linearly from step 0 to the paper's final gap ``e`` has an AUC gap of ``e / 2``
(:data:`AUC_EFFECT_FACTOR`). A claim's :attr:`Claim.effect` is ``e``; :meth:`Claim.metric_effect`
is what the verdict rules test against. Claims on metrics the paper has no figure for
(advantage quality ``corr`` / ``cos``, post-shift recovery, skipping observation tokens) have
no effect size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

AUC_EFFECT_FACTOR = 0.5
"""AUC gap per unit of final gap, for a gap that opens linearly from the shared warm start."""


@dataclass(frozen=True)
class PaperEffect:
    """What the paper reports for a claim.

    Attributes:
        gap: the final gap in reward units (accuracy points / 100), a magnitude.
        source: the paper's numbers it comes from.
    """

    gap: float
    source: str

Direction = Literal["ref-better", "arm-better"]


@dataclass(frozen=True)
class Claim:
    """One of the paper's comparative claims (docs/sao.md, "Results to keep in mind") and how the benchmark decides it.

    Attributes:
        key: short id. paper: the claim in the paper's words / numbers.
        task: where it is measured. metric: ``auc`` (mean eval reward over the run),
            ``post-shift-auc`` (mean eval reward in the windows after each reward shift),
            ``corr`` / ``cos`` (advantage quality vs the oracle at the runs' critic warm-up size,
            higher is better; Pearson ``corr`` ignores a constant offset, so every running-mean
            window scores alike on it, while the gradient cosine ``cos`` sees the offset).
        arm, ref: the paired comparison ``arm - ref``.
        direction: ``ref-better`` = the paper says `ref` beats `arm` (expect a negative difference).
        scale_note: why the claim may not be testable here, decided before running ("" = testable),
            or the rule that decides it (``dis``: needs DIS to mask >= MIN_DIS_MASKED).
        effect: the paper's figure for the claim (None: the paper gives none).
    """

    key: str
    paper: str
    task: str
    metric: str
    arm: str
    ref: str
    direction: Direction = "ref-better"
    scale_note: str = ""
    effect: PaperEffect | None = None

    def metric_effect(self) -> float | None:
        """The paper's effect on this claim's metric (reward units, a magnitude; its sign is
        :attr:`direction`'s): ``effect * AUC_EFFECT_FACTOR`` for ``auc``, None without a figure
        or on another metric."""
        if self.effect is None or self.metric != "auc":
            return None
        return self.effect.gap * AUC_EFFECT_FACTOR


_DIS = PaperEffect(0.060, "SAO 97.3 vs VAPO without DIS 91.3 (AIME25)")
_DIS_BORROWED = PaperEffect(0.060, "the paper's only with/without-DIS figure, SAO 97.3 vs VAPO without DIS "
                            "91.3 (AIME25); GRPO's collapse without DIS has no number")
_K = PaperEffect(0.023, "K = 2 97.3 vs K = 1 95.0 (AIME25)")
_FROZEN = PaperEffect(0.067, "frozen attention 97.3 vs full-parameter critic 90.6 (AIME25)")
_CRITIC = PaperEffect(0.175, "critic 97.3 vs running-mean baseline 79.8 (AIME25)")
_TURN = PaperEffect(0.025, "token-level 89.8 vs turn-level 87.3 (AIME25, 400 steps; the smaller of the two "
                    "turn-level gaps, 85.8 and 87.3, as the paper does not say which variant is which)")
_GRPO = PaperEffect(0.131, "SAO 97.3 vs GRPO+DIS 84.2 (AIME25)")


CLAIMS: tuple[Claim, ...] = (
    Claim("dis-vs-none", "without DIS training collapses (VAPO w/o DIS 91.3 vs 97.3 AIME25; vanilla GRPO "
          "collapsed at ~160 steps)", "chain", "auc", "no-correction", "sao", scale_note="dis", effect=_DIS),
    Claim("grpo-dis-vs-none", "GRPO needs DIS in the async setup (collapse at ~160 steps without)", "chain", "auc",
          "grpo-no-dis", "grpo-dis", scale_note="dis", effect=_DIS_BORROWED),
    Claim("k2-vs-k1", "K = 2 critic updates beat K = 1 (97.3 vs 95.0 AIME25)", "chain", "auc", "sao-k1", "sao", effect=_K),
    Claim("frozen-vs-full", "a critic with frozen attention beats a full-parameter critic (97.3 vs 90.6)", "chain",
          "auc", "full-critic", "sao", effect=_FROZEN),
    Claim("critic-vs-mean-8", "a critic beats a running-mean baseline (97.3 vs 79.8)", "chain", "auc",
          "running-mean-8", "sao", effect=_CRITIC),
    Claim("critic-vs-mean-128", "a critic beats a running-mean baseline (97.3 vs 79.8)", "chain", "auc",
          "running-mean-128", "sao", effect=_CRITIC),
    Claim("critic-vs-mean-corr", "the critic's advantages are better than a running mean's (the mechanism behind "
          "97.3 vs 79.8)", "chain", "corr", "running-mean-128", "sao"),
    Claim("critic-vs-mean-cos", "the critic's advantages are better than a running mean's (the mechanism behind "
          "97.3 vs 79.8)", "chain", "cos", "running-mean-128", "sao"),
    Claim("shift-recovery-8", "after each reward-preference shift the critic recovers faster than a running mean",
          "pref-shift", "post-shift-auc", "running-mean-8", "sao"),
    Claim("shift-recovery-128", "after each reward-preference shift the critic recovers faster than a running mean",
          "pref-shift", "post-shift-auc", "running-mean-128", "sao"),
    Claim("token-vs-turn-last", "token-level GAE beats turn-level GAE (89.8 vs 85.8 / 87.3 AIME25 at 400 steps)",
          "chain", "auc", "gae-turn-last", "sao", effect=_TURN),
    Claim("token-vs-turn-avg", "token-level GAE beats turn-level GAE (89.8 vs 85.8 / 87.3 AIME25 at 400 steps)",
          "chain", "auc", "gae-turn-avg", "sao", effect=_TURN),
    Claim("token-vs-turn-last-corr", "token-level GAE's advantages are closer to the true ones than turn-level "
          "GAE's", "chain", "corr", "gae-turn-last", "sao"),
    Claim("token-vs-turn-avg-corr", "token-level GAE's advantages are closer to the true ones than turn-level "
          "GAE's", "chain", "corr", "gae-turn-avg", "sao"),
    Claim("skip-vs-no-skip", "GAE skips observation tokens (mechanism 4)", "chain", "auc", "gae-no-skip", "sao"),
    # comparators and controls added in v2
    Claim("critic-vs-mean-family", "a critic beats a running-mean baseline (97.3 vs 79.8), here one kept per "
          "difficulty family", "chain", "auc", "running-mean-family", "sao", effect=_CRITIC),
    Claim("critic-vs-mean-family-corr", "the critic's advantages are better than a running mean's, here one kept "
          "per difficulty family", "chain", "corr", "running-mean-family", "sao"),
    Claim("dis-vs-none-small-step", "without DIS training collapses, at a step size matched to sao's (no-correction "
          "at 0.64x the lr)", "chain", "auc", "no-correction-small-step", "sao", scale_note="dis", effect=_DIS),
    Claim("token-vs-turn-last-h", "token-level GAE beats turn-level GAE, at the same effective horizon", "chain",
          "auc", "gae-turn-last-h", "sao", effect=_TURN),
    Claim("token-vs-turn-avg-h", "token-level GAE beats turn-level GAE, at the same effective horizon", "chain",
          "auc", "gae-turn-avg-h", "sao", effect=_TURN),
    Claim("token-vs-turn-last-h-corr", "token-level GAE's advantages are closer to the true ones than turn-level "
          "GAE's, at the same effective horizon", "chain", "corr", "gae-turn-last-h", "sao"),
    Claim("token-vs-turn-avg-h-corr", "token-level GAE's advantages are closer to the true ones than turn-level "
          "GAE's, at the same effective horizon", "chain", "corr", "gae-turn-avg-h", "sao"),
    Claim("frozen-vs-full-moe", "a critic with frozen attention beats a full-parameter critic (97.3 vs 90.6), on a "
          "2-layer MoE critic", "chain", "auc", "moe-full-critic", "moe-critic", effect=_FROZEN),
    Claim("sao-vs-grpo", "SAO beats GRPO+DIS (97.3 vs 84.2 AIME25); they track each other for ~400 steps, then SAO "
          "pulls ahead", "chain", "auc", "grpo-dis", "sao",
          scale_note="the paper's gap opens after ~400 policy steps; these runs are far shorter", effect=_GRPO),
    # not the paper's: what async-RL teams ask of a replay buffer (trajstore's own, decided the same way)
    Claim("replay-vs-single", "not in the paper: training each rollout once more from a replay buffer (DIS-corrected "
          "by its stored log-probs, at most 4 versions stale) learns more from the same rollouts than single use",
          "chain", "auc", "replay", "sao", direction="arm-better"),
)
