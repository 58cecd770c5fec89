"""The trainer side of a benchmark run: the trainer's config for an arm, the "no correction"
policy loss, and the spy that records each action token's log-ratio by staleness at the update."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from trajstore.trainer.apps.learning_bench.arms import (
    DIS_BAND,
    REPLAY_MAX_REUSE,
    REPLAY_MAX_STALENESS,
    BenchError,
    get_arm,
)
from trajstore.trainer.apps.learning_bench.codec import CharCodec
from trajstore.trainer.apps.learning_bench.spec import RunSpec
from trajstore.trainer.config import (
    CRITIC_TRAINABLE_PATTERN,
    AlgoConfig,
    DataConfig,
    ModelConfig,
    OptimConfig,
    RunConfig,
    TrainConfig,
)
from trajstore.trainer.loop.build import build_optimizers
from trajstore.trainer.models import build_critic, load_policy
from trajstore.trainer.sao.baselines import RunningMeanBaseline
from trajstore.trainer.sao.losses import dis_band

LOG_RATIO_EDGES = [round(-2.0 + 0.05 * i, 2) for i in range(81)]
"""Bin edges (nats) of the log-ratio histograms, -2 .. 2; values outside go to the end bins."""
MAX_STALENESS_BIN = 8
"""Staleness levels >= this are pooled in the histograms ("8+")."""
MICRO_BATCH = 8
"""Most trajectories per forward pass: packing fewer rows keeps the packed attention small (it is
quadratic in the packed length); the update is the same (token-mean over the global count). The
trainer's memory plan also caps a CPU micro-batch at ``max_seq_len`` (256) tokens; the harness
takes the loop's own micro-batches (``trainer.loop.micro.prepare``), never a split of its own."""


def no_correction_loss(loss_fn: Callable[..., Any]) -> Callable[..., Any]:
    """`loss_fn` with the behaviour log-probs replaced by the current policy's own (detached): every
    ratio is exactly 1 and nothing is masked, i.e. the plain policy gradient ``-A grad log pi``
    that a trainer recomputing "old" log-probs with its current weights computes (docs/sao.md, "Data
    the method depends on")."""

    def fn(logprobs, _rollout_logprobs, advantages, action_mask, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        return loss_fn(logprobs, logprobs.detach(), advantages, action_mask, *a, **kw)

    return fn


def keyed_running_mean(window: int, key_of: Callable[[Any], str]) -> Callable[[list[Any], Any], dict[str, float]]:
    """A ``Trainer.scalar_fn`` for a running mean per key (``running-mean-family``: one window of
    `window` rewards per difficulty family): each trajectory's advantage is its reward minus the
    mean of the last `window` rewards of its key seen before this batch (0 before any), by the
    trainer's own :class:`~trajstore.trainer.sao.baselines.RunningMeanBaseline`, one per key.
    `key_of` maps a trainer ``TrainSample`` to its key."""

    baselines: dict[str, RunningMeanBaseline] = {}

    def fn(samples: list[Any], _state: Any) -> dict[str, float]:
        keys = [key_of(s) for s in samples]
        out: dict[str, float] = {}
        for k in dict.fromkeys(keys):
            idx = [i for i, x in enumerate(keys) if x == k]
            rm = baselines.setdefault(k, RunningMeanBaseline(window))
            adv = rm(torch.tensor([samples[i].reward for i in idx], dtype=torch.float64))
            out.update({samples[i].trajectory_id: float(a) for i, a in zip(idx, adv)})
        return out

    return fn


def use_moe_critic(tr: Any, lm_dir: str, *, full: bool) -> None:
    """Replace the trainer's critic (built from the policy's backbone) by one built the same way,
    by the trainer's own ``build_critic`` and ``build_optimizers``, from the warm-started tiny
    Qwen3-MoE LM in `lm_dir`: attention, router, embeddings and norms frozen (the default
    trainable pattern: expert projections and value head), or every parameter (`full`)."""

    lm = load_policy(lm_dir, tokenizer=CharCodec().name).model
    critic = build_critic(lm, trainable_pattern=None if full else CRITIC_TRAINABLE_PATTERN,
                          seed=tr.cfg.model.seed).to(tr.env.device)
    fused = any(o.defaults.get("fused") for o in tr.optimizers.values())
    opt = build_optimizers(tr.cfg, [p for p in tr.loaded.model.parameters() if p.requires_grad],
                           [p for p in critic.parameters() if p.requires_grad], fused=bool(fused))
    tr.critic, tr.optimizers["critic"] = critic, opt["critic"]


def bench_model_config(warm_start: str, seed: int, *, full_critic: bool) -> ModelConfig:
    """The model section every benchmark trainer shares: the warm-start policy on the character
    codec, the critic training every weight (`full_critic`) or only the MLPs
    (:data:`~trajstore.trainer.config.CRITIC_TRAINABLE_PATTERN`)."""
    return ModelConfig(name=warm_start, tokenizer=CharCodec().name, seed=seed,
                       critic_trainable_pattern=None if full_critic else CRITIC_TRAINABLE_PATTERN)


def train_config(spec: RunSpec, store_uri: str) -> Any:
    """The trainer's config for a run (no follow: the harness writes a batch, then reads it)."""

    arm = get_arm(spec.arm)
    # a fixed warm-up of spec.critic_warmup iterations (docs/sao.md: 10 steps): the simulated timeline
    # publishes nothing during exactly that many iterations, so the trainer must not end it early
    algo = {"critic_warmup_steps": spec.critic_warmup, "critic_warmup_until": "budget", "eps_low": DIS_BAND[0],
            "eps_high": DIS_BAND[1], **arm.algo}
    # the replay arm's slots come on top of the timeline's batch (the stream still reads exactly it):
    # batch_size + slots per step, of which the replay fraction is the slots
    slots = int(arm.replay * spec.batch_size)
    total = spec.batch_size + slots
    replay = dict(replay_fraction=slots / total, replay_max_reuse=REPLAY_MAX_REUSE,
                  replay_max_staleness=REPLAY_MAX_STALENESS) if slots else {}
    return TrainConfig(
        store=store_uri,
        model=bench_model_config(spec.warm_start, spec.seed, full_critic=arm.full_critic),
        data=DataConfig(batch_size=total, micro_batch_size=MICRO_BATCH, max_seq_len=256,
                        max_batch_tokens=256 * total, follow=False, **replay),
        optim=OptimConfig(policy_lr=spec.policy_lr * arm.lr_factor,
                          critic_lr=spec.policy_lr * arm.lr_factor * spec.critic_lr_factor),
        algo=AlgoConfig(**algo),
        run=RunConfig(run_id=spec.run_id, max_steps=spec.steps, publish_every=0, checkpoint_every=10**6,
                      device="cpu", progress=False),
    )


@dataclass
class LogRatioSpy:
    """Collects log-ratios by staleness at each policy-loss call (see the module docstring)."""

    staleness: list[torch.Tensor] = field(default_factory=list)  # (1, L) per slot, per micro-batch in order
    calls: int = 0
    hist: dict[int, list[int]] = field(default_factory=dict)
    band: dict[int, list[int]] = field(default_factory=dict)
    tokens: dict[int, int] = field(default_factory=dict)

    def wrap(self, loss_fn: Callable[..., Any]) -> Callable[..., Any]:
        edges = torch.tensor(LOG_RATIO_EDGES)

        def fn(logprobs, rollout_logprobs, advantages, action_mask, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
            st_all = self.staleness[self.calls] if self.calls < len(self.staleness) else None
            self.calls += 1
            if st_all is None or st_all.shape != action_mask.shape:
                raise BenchError("the policy loss saw a packing other than the harness's")
            m = action_mask.bool()
            lr = (logprobs.detach() - rollout_logprobs)[m].double()
            st = st_all[m].clamp(max=MAX_STALENESS_BIN)
            b = torch.bucketize(lr, edges.double())  # 0 = below the first edge, len(edges) = above the last
            band = dis_band(lr.exp(), *DIS_BAND)  # the trainer's own rule: edges count as outside
            for s in st.unique().tolist():
                sel = st == s
                h = self.hist.setdefault(int(s), [0] * (len(LOG_RATIO_EDGES) + 1))
                for k, c in zip(*torch.unique(b[sel], return_counts=True)):
                    h[int(k)] += int(c)
                bd = self.band.setdefault(int(s), [0, 0, 0])
                bd[0] += int(sel.sum())
                bd[1] += int(band.below[sel].sum())
                bd[2] += int(band.above[sel].sum())
                self.tokens[int(s)] = self.tokens.get(int(s), 0) + int(sel.sum())
            return loss_fn(logprobs, rollout_logprobs, advantages, action_mask, *a, **kw)

        return fn


def exact_kl(model: torch.nn.Module, packs: list[Any], before: torch.Tensor | None) -> tuple[torch.Tensor, float]:
    """Log-softmax at the action slots of the packed micro-batches ``(N, V)``, and the mean
    ``KL(before || now)`` over those slots (nats per token; NaN without `before`)."""
    with torch.no_grad():
        lp = torch.cat([torch.log_softmax(model(input_ids=mb.input_ids, position_ids=mb.position_ids).logits[0].float()
                                          [mb.action_mask[0]], -1) for mb in packs])
    if before is None:
        return lp, math.nan
    return lp, float((before.exp() * (before - lp)).sum(-1).mean())
