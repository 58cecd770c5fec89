"""Advantage quality against an oracle: for a fixed policy, how close does each estimator come to
the true advantage ``A*(s_t, a_t) = Q(s_t, a_t) - V(s_t)`` of every action token?

``A*`` is estimated by Monte Carlo: from the state before each action token of a batch of
trajectories, `mc_rollouts` continuations are played to the end with the policy (float32, no
mismatch); ``V_j`` is their mean reward, ``V_n`` = the trajectory's own reward after its last
token, and ``A*_j = V_{j+1} - V_j`` (gamma = 1, deterministic environment, reward at the end).
Its own noise is measured by splitting the continuations in two halves (split-half reliability,
Spearman-Brown corrected): no estimator can correlate with the MC ``A*`` better than about
``sqrt(reliability)``.

Each estimator is scored on the same batch (groups of `group_size` rollouts per prompt, so GRPO
can be scored too) by the Pearson correlation of its per-token advantages with ``A*`` and by the
cosine between its policy gradient ``grad sum_t A_t log pi(a_t|s_t)`` and the oracle's
(``A*`` in place of ``A``). Critics are trained exactly as in the benchmark's runs (the trainer's
own critic warm-up iterations on on-policy batches of the same policy); running means see the
rewards of those batches.
"""

from __future__ import annotations

import copy
import math
import random
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from trajstore.sampling import no_truncation
from trajstore.trainer.apps.envs import FAMILIES, TaskName, draw_instance, make_episode, max_action_tokens
from trajstore.trainer.apps.learning_bench.codec import CharCodec
from trajstore.trainer.apps.learning_bench.estimators import advantages_by
from trajstore.trainer.apps.learning_bench.sampler import LlamaEngine, Row, new_row, play
from trajstore.trainer.apps.learning_bench.trainer_side import bench_model_config
from trajstore.trainer.config import AlgoConfig, DataConfig, OptimConfig, RunConfig, TrainConfig
from trajstore.trainer.data import DataCursor, StepBatch, TrainSample, gae_inputs, pack, to_rows
from trajstore.trainer.loop.setup import setup
from trajstore.trainer.loop.step import train_step
from trajstore.trainer.models import PolicyLogprobs, load_policy
from trajstore.trainer.sao.baselines import RunningMeanBaseline, grpo_advantages

CRITIC_ARMS = {"sao": ("token", False, 2), "sao-k1": ("token", False, 1), "full-critic": ("token", True, 2),
               "gae-turn-last": ("turn-last", False, 2), "gae-turn-avg": ("turn-avg", False, 2),
               "gae-turn-last-h": ("turn-last-h", False, 2), "gae-turn-avg-h": ("turn-avg-h", False, 2),
               "gae-no-skip": ("no-skip", False, 2)}
"""Estimators with a critic: (GAE variant, full-parameter critic, K critic updates per batch)."""
BASELINE_ARMS = {"running-mean-8": 8, "running-mean-128": 128, "running-mean-family": 32, "grpo-dis": None}
"""Critic-free estimators: running-mean window (trajectories; per family for ``running-mean-family``),
or None for GRPO's group normalisation."""
FAMILY_KEYED = frozenset({"running-mean-family"})
"""Running means with one window per difficulty family."""


@dataclass(frozen=True)
class QualityConfig:
    """Sizes of the advantage-quality experiment.

    Attributes:
        critic_iterations: checkpoints (critic iterations of `batch_size` on-policy trajectories)
            at which the estimators are scored; the first equals the runs' critic warm-up.
        batch_size: trajectories per critic iteration.
        prompts, group_size: the scored batch: `prompts` instances x `group_size` rollouts.
        mc_rollouts: continuations per state for A* (split in two halves for the reliability).
        policy_lr: sets the critic's learning rate (x `critic_lr_factor`), as in the runs.
        estimators: which of :data:`CRITIC_ARMS` and :data:`BASELINE_ARMS` to score.
    """

    critic_iterations: tuple[int, ...] = (10, 40)
    batch_size: int = 32
    prompts: int = 12
    group_size: int = 4
    mc_rollouts: int = 24
    policy_lr: float = 5e-4
    critic_lr_factor: float = 5.0
    estimators: tuple[str, ...] = tuple(CRITIC_ARMS) + tuple(BASELINE_ARMS)


def _sample_batch(engine: LlamaEngine, task: TaskName, instances: list[tuple[str, int, int]], *,
                  generator: torch.Generator) -> list[dict[str, Any]]:
    """Play `instances` to the end; per episode its tokens, action mask, engine log-probs, reward."""
    codec = CharCodec()
    rows = [new_row(make_episode(task, inst, preferred=None if task == "chain" else "<"), codec,
                    max_action_tokens(task), tag=i) for i, inst in enumerate(instances)]
    acts: dict[int, list[tuple[int, list[float]]]] = {i: [] for i in range(len(rows))}

    def on(row: Row, ids: list[int], lps: list[float], _reply: Any, obs: list[int]) -> None:
        start = len(row.context) - len(ids) - len(obs)
        acts[row.tag].append((start, lps))

    play(engine, rows, codec, generator=generator, on_action=on)
    out = []
    for r, inst in zip(rows, instances):
        mask = np.zeros(len(r.context), dtype=bool)
        lps = np.full(len(r.context), np.nan, dtype=np.float32)
        for start, lp in acts[r.tag]:
            mask[start:start + len(lp)] = True
            lps[start:start + len(lp)] = lp
        out.append({"tokens": np.asarray(r.context, dtype=np.int64), "mask": mask, "logprobs": lps,
                    "reward": float(r.reward or 0.0), "instance": inst})
    return out


def to_samples(episodes: list[dict[str, Any]], *, group_ids: list[str | None] | None = None, prefix: str = "q"):
    """In-memory trainer ``TrainSample`` s for `episodes` (version 0, temperature 1), as the store's
    reader would produce them."""

    out = []
    for i, e in enumerate(episodes):
        n = len(e["tokens"])
        pv = np.where(e["mask"], 0, -1).astype(np.int64)
        out.append(TrainSample(trajectory_id=f"{prefix}{i}", group_id=group_ids[i] if group_ids else None,
                               shard="memory", row=i, tokens=e["tokens"], rollout_logprobs=e["logprobs"],
                               action_mask=e["mask"], policy_version=pv, sampling=no_truncation(n),
                               reward=e["reward"], needs_behaviour=False, cursor=DataCursor()))
    return out


def mc_oracle(engine: LlamaEngine, task: TaskName, episodes: list[dict[str, Any]], *, rollouts: int,
              generator: torch.Generator, chunk_rows: int = 4096) -> tuple[list[np.ndarray], float]:
    """Monte-Carlo ``A*`` per action token of each episode, and the split-half reliability.

    Returns:
        (one ``(n_actions,)`` float array per episode, in the order of its action tokens;
        Spearman-Brown corrected split-half reliability of the pooled A*).
    """
    codec = CharCodec()
    states: list[tuple[int, int]] = []  # (episode, action-token ordinal)
    rows: list[Row] = []
    for ei, e in enumerate(episodes):
        inst = e["instance"]
        pos = np.flatnonzero(e["mask"])
        for j, t in enumerate(pos):
            # rebuild the environment at token t: replay the completed actions before it
            ep = make_episode(task, inst, preferred=None if task == "chain" else "<")
            partial: list[int] = []
            for tt in pos[pos < t]:
                tok = int(e["tokens"][tt])
                partial.append(tok)
                if tok == codec.eos_token_id or len(partial) == max_action_tokens(task):
                    ep.step(codec.decode([a for a in partial if a != codec.eos_token_id]))
                    partial = []
            for _ in range(rollouts):
                r = Row(copy.deepcopy(ep), [int(x) for x in e["tokens"][:t]], max_action_tokens(task))
                r._action = list(partial)
                r._logprobs = [0.0] * len(partial)
                rows.append(r)
            states.append((ei, j))
    for a in range(0, len(rows), chunk_rows):
        play(engine, rows[a:a + chunk_rows], codec, generator=generator)
    rewards = np.array([r.reward for r in rows], dtype=np.float64).reshape(len(states), rollouts)
    half = rollouts // 2
    v_full, v_a, v_b = rewards.mean(1), rewards[:, :half].mean(1), rewards[:, half:].mean(1)
    out, pa, pb = [], [], []
    k = 0
    for e in episodes:
        n = int(e["mask"].sum())
        for vv, dst in ((v_full, out), (v_a, pa), (v_b, pb)):
            v = np.append(vv[k:k + n], e["reward"])
            dst.append(v[1:] - v[:-1])
        k += n
    ra = np.corrcoef(np.concatenate(pa), np.concatenate(pb))[0, 1]
    return out, float(2 * ra / (1 + ra)) if ra > -1 else math.nan


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    if x.std() == 0 or y.std() == 0:
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


def _critic_trainer(warm_start: str, seed: int, full: bool, k: int, cfg: QualityConfig, root: str):
    """A trainer set up like the benchmark's critic arms (warm-up only, never a policy step)."""

    tc = TrainConfig(
        store=root, model=bench_model_config(warm_start, seed, full_critic=full),
        data=DataConfig(batch_size=cfg.batch_size, micro_batch_size=8, max_seq_len=256),
        optim=OptimConfig(policy_lr=cfg.policy_lr, critic_lr=cfg.policy_lr * cfg.critic_lr_factor),
        algo=AlgoConfig(critic_updates=k, critic_warmup_steps=10**6, critic_warmup_until="budget"),  # critic only
        run=RunConfig(run_id=f"quality-{'full' if full else 'mlp'}-k{k}", device="cpu", progress=False))
    tr = setup(tc, allow_empty=True)  # the oracle writes its batches after setup
    tr.say = lambda _m: None  # no per-pass activity lines from the worker processes
    return tr


def advantage_quality(warm_start: str, seed: int, cfg: QualityConfig, *, task: TaskName = "chain") -> dict[str, Any]:
    """Score every estimator against the MC oracle at each checkpoint (see the module docstring).

    Returns:
        ``{"checkpoints": [{"critic_iterations": n, "reliability": r, "estimators": {name:
        {"corr": pearson with A*, "cos": gradient cosine}}}], "tokens": action tokens scored}``.
    """

    codec = CharCodec()
    policy = load_policy(warm_start, tokenizer=codec.name).model
    engine = LlamaEngine(policy)
    gen = torch.Generator().manual_seed(30_000 + seed)
    rng = random.Random(f"quality-{seed}")
    # the scored batch and its oracle
    inst = [draw_instance(rng) for _ in range(cfg.prompts)]
    scored_inst = [i for i in inst for _ in range(cfg.group_size)]
    scored = _sample_batch(engine, task, scored_inst, generator=gen)
    astar, reliability = mc_oracle(engine, task, scored, rollouts=cfg.mc_rollouts, generator=gen)
    astar_flat = np.concatenate(astar)
    group_ids = [f"g{i // cfg.group_size}" for i in range(len(scored))]
    samples = to_samples(scored, group_ids=group_ids, prefix="scored")
    mb = pack(samples)
    # oracle gradient and each estimator's gradient share one forward pass
    lp_fn = PolicyLogprobs(policy)
    params = [p for p in policy.parameters() if p.requires_grad]
    lp, _ = lp_fn(mb.input_ids, mb.position_ids, mb.targets, mb.sampling)
    slots = mb.action_mask[0]

    def to_slots(per_episode: list[np.ndarray]) -> torch.Tensor:
        return torch.as_tensor(np.concatenate(per_episode), dtype=torch.float32)

    def grad_of(adv_slots: torch.Tensor) -> torch.Tensor:
        g = torch.autograd.grad((lp[0][slots] * adv_slots).sum() / slots.sum(), params, retain_graph=True)
        return torch.cat([x.flatten() for x in g])

    g_star = grad_of(to_slots(astar))

    def score(adv_slots: torch.Tensor) -> dict[str, float]:
        g = grad_of(adv_slots)
        cos = float(torch.nn.functional.cosine_similarity(g, g_star, dim=0))
        return {"corr": _pearson(adv_slots.double().numpy(), astar_flat), "cos": cos}

    # on-policy critic batches, the same for every critic and running mean
    train_inst = [draw_instance(rng) for _ in range(max(cfg.critic_iterations) * cfg.batch_size)]
    batches, batch_inst = [], []
    for i in range(max(cfg.critic_iterations)):
        batch_inst.append(train_inst[i * cfg.batch_size:(i + 1) * cfg.batch_size])
        eps = _sample_batch(engine, task, batch_inst[-1], generator=gen)
        batches.append(to_samples(eps, prefix=f"b{i}-"))
    checkpoints: list[dict[str, Any]] = []
    results: dict[int, dict[str, dict[str, float]]] = {n: {} for n in cfg.critic_iterations}
    # critic-free estimators
    rewards = torch.tensor([s.reward for s in samples], dtype=torch.float64)
    for name, window in BASELINE_ARMS.items():
        if name not in cfg.estimators:
            continue
        for n in cfg.critic_iterations:
            if window is None:
                adv = grpo_advantages(rewards, torch.tensor([i // cfg.group_size for i in range(len(samples))]))
            elif name in FAMILY_KEYED:
                rms = {f: RunningMeanBaseline(window) for f in FAMILIES}
                for b, b_inst in zip(batches[:n], batch_inst[:n]):
                    for f in FAMILIES:
                        rs = [s.reward for s, i in zip(b, b_inst) if i[0] == f]
                        if rs:
                            rms[f](torch.tensor(rs, dtype=torch.float64))
                adv = torch.tensor([s.reward - rms[i[0]].mean for s, i in zip(samples, scored_inst)],
                                   dtype=torch.float64)
            else:
                rm = RunningMeanBaseline(window)
                for b in batches[:n]:
                    rm(torch.tensor([s.reward for s in b], dtype=torch.float64))
                adv = rm(rewards)
            per_ep = [np.full(int(e["mask"].sum()), float(a)) for e, a in zip(scored, adv)]
            results[n][name] = score(to_slots(per_ep))
    # critics, trained by the trainer's own warm-up iterations
    with tempfile.TemporaryDirectory(prefix="trajstore-quality-") as tmp:
        trained: dict[tuple[bool, int], Any] = {}
        for name, (est, full, k) in CRITIC_ARMS.items():
            if name not in cfg.estimators:
                continue
            key = (full, k)
            if key not in trained:
                trained[key] = {"tr": _critic_trainer(warm_start, seed, full, k, cfg, f"{tmp}/{full}-{k}"), "done": 0,
                                "values": {}}
            t = trained[key]
            for n in cfg.critic_iterations:
                if n not in t["values"]:
                    while t["done"] < n:
                        train_step(t["tr"], StepBatch(batches[t["done"]], DataCursor(), {}))
                        t["done"] += 1
                    with torch.no_grad():
                        t["values"][n] = t["tr"].critic(mb.input_ids, mb.position_ids).float()
                x = gae_inputs(mb, samples, t["values"][n])
                gamma, alpha = t["tr"].cfg.algo.gamma, t["tr"].cfg.algo.lambda_alpha
                adv_rows = advantages_by(est, x.rewards, x.values, x.action_mask, gamma=gamma, alpha=alpha)
                adv_packed = torch.cat([adv_rows[i, :int(mb.segments[i + 1] - mb.segments[i])]
                                        for i in range(len(samples))]).unsqueeze(0)
                results[n][name] = score(adv_packed[0][slots])
                if name == "sao":
                    ev_rows = to_rows(mb.action_mask, mb.segments)
                    ret = x.rewards.flip(1).cumsum(1).flip(1)  # gamma = 1 Monte-Carlo returns
                    v, r = x.values[ev_rows].double(), ret[ev_rows].double()
                    results[n]["_explained_variance"] = {"corr": float(1 - (r - v).var() / r.var()), "cos": math.nan}
        for t in trained.values():
            t["tr"].stream.close()
            if t["tr"].recorder is not None:
                t["tr"].recorder.close()
    for n in cfg.critic_iterations:
        ev = results[n].pop("_explained_variance", {"corr": math.nan})["corr"]
        checkpoints.append({"critic_iterations": n, "reliability": reliability, "explained_variance": ev,
                            "estimators": results[n]})
    return {"checkpoints": checkpoints, "tokens": int(slots.sum()), "seed": seed}
