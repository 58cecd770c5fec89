"""One benchmark run: an arm trained from the seed's warm start through the real pipeline, fed by
a simulated asynchronous rollout system.

  event timeline (schedule.simulate) -> every action sampled by the engine copy of the policy
  version current when the action starts (mismatch injected, engine log-probs recorded) ->
  TrajectoryBuilder + StoreWriter (one shard per trainer iteration, trajectories in completion
  order) -> the trainer's TrajectoryStream reads exactly that batch -> trainer.loop.step.train_step ->
  records -> the new weights go to the engine when the timeline publishes them.

Arms that the trainer has no option for replace one picked-once function of the
:class:`~trajstore.trainer.loop.trainer.Trainer`: the GAE variants its ``advantage_fn``, "no correction"
its ``policy_loss_fn``. A spy around the policy loss records each action token's log-ratio
``log pi_theta - log pi_rollout`` by staleness (histograms, DIS band occupancy).
"""

from __future__ import annotations

import bisect
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from trajstore.errors import TrajstoreError
from trajstore.trainer.apps.envs import FAMILIES, TaskName, draw_instance, make_episode, max_action_tokens
from trajstore.trainer.apps.envs.chain import TURNS
from trajstore.trainer.apps.learning_bench.codec import CharCodec
from trajstore.trainer.apps.learning_bench.estimators import EstimatorName, trainer_advantage_fn
from trajstore.trainer.apps.learning_bench.sampler import LlamaEngine, Mismatch, Row, new_row, play
from trajstore.trainer.apps.learning_bench.schedule import AsyncConfig, Timeline, simulate

BENCH_SOURCE = "trajstore/bench-learning"
"""The ``source`` column of the benchmark's trajectories."""

LOG_RATIO_EDGES = [round(-2.0 + 0.05 * i, 2) for i in range(81)]
"""Bin edges (nats) of the log-ratio histograms, -2 .. 2; values outside go to the end bins."""
MAX_STALENESS_BIN = 8
"""Staleness levels >= this are pooled in the histograms ("8+")."""
MICRO_BATCH = 8
"""Trajectories per forward pass: packing fewer rows keeps the packed attention small (it is
quadratic in the packed length); the update is the same (token-mean over the global count)."""
DIS_BAND = (0.3, 5.0)
"""SAO's DIS band (eps_low, eps_high) for reasoning (SAO.md mechanism 1); the benchmark's DIS arms
use it, and the per-staleness band occupancy is measured against it in every arm."""


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
    """

    name: str
    changes: str
    algo: dict[str, Any] = field(default_factory=dict)
    full_critic: bool = False
    group_size: int = 1
    estimator: EstimatorName = "token"
    correction: Literal["dis", "ppo-clip", "none"] = "dis"

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


class BenchError(TrajstoreError):
    """The benchmark could not run (bad arm name, the stream returned a different batch)."""


class RunSpec(BaseModel):
    """One run: an arm on a task from a seed's warm start."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: TaskName = Field(description="task name")
    arm: str = Field(description="arm name (a key of ARMS)")
    seed: int = Field(0, description="seeds the warm start, task draws, latencies, sampler and evaluation")
    warm_start: str = Field(description="directory of the seed's warm-start model (HF format)")
    steps: int = Field(60, ge=1, description="policy steps")
    critic_warmup: int = Field(10, ge=0, description="critic-only iterations before the first policy step "
                                                     "(critic arms)")
    policy_lr: float = Field(gt=0, description="policy learning rate (calibrated once, same for every arm)")
    critic_lr_factor: float = Field(5.0, gt=0, description="critic learning rate / policy learning rate "
                                                           "(SAO.md: 5e-6 / 1e-6)")
    batch_size: int = Field(32, ge=1, description="trajectories per iteration")
    workers: int = Field(64, ge=1, description="simulated rollout workers")
    turn_latency_sigma: float = Field(1.0, ge=0, description="lognormal sigma of the per-turn latency")
    train_step_s: float = Field(1.0, ge=0, description="simulated seconds per trainer iteration "
                                                       "(median turn latency = 1 s)")
    bf16: bool = Field(True, description="engine weights and logits rounded to bfloat16")
    logit_noise: float = Field(0.0, ge=0, description="sd of Gaussian logit noise at the engine (nats)")
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


# -- evaluation --------------------------------------------------------------------------------


def eval_instances(seed: int, per_family: int) -> list[tuple[str, int, int]]:
    """The fixed evaluation instances of a seed: `per_family` of each family, the same for every arm."""
    rng = random.Random(f"eval-{seed}")
    out: list[tuple[str, int, int]] = []
    for fam in FAMILIES:
        while sum(1 for f, _, _ in out if f == fam) < per_family:
            inst = draw_instance(rng)
            if inst[0] == fam:
                out.append(inst)
    return out


def evaluate(model: torch.nn.Module, task: TaskName, instances: list[tuple[str, int, int]], *, seed: int,
             preferred: str | None) -> dict[str, Any]:
    """Mean reward of the float32 policy (no mismatch, temperature 1) on `instances`, sampled with
    a generator seeded by `seed`, overall and per family."""
    codec = CharCodec()
    rows = [new_row(make_episode(task, inst, preferred=preferred), codec, max_action_tokens(task)) for inst in instances]
    play(LlamaEngine(model), rows, codec, generator=torch.Generator().manual_seed(seed))
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(r.episode.family, []).append(float(r.reward or 0.0))
    allr = [x for v in by.values() for x in v]
    return {"reward": sum(allr) / len(allr), "by_family": {f: sum(v) / len(v) for f, v in by.items()},
            "preferred": preferred}


# -- the trainer side --------------------------------------------------------------------------


def no_correction_loss(loss_fn: Callable[..., Any]) -> Callable[..., Any]:
    """`loss_fn` with the behaviour log-probs replaced by the current policy's own (detached): every
    ratio is exactly 1 and nothing is masked, i.e. the plain policy gradient ``-A grad log pi``
    that a trainer recomputing "old" log-probs with its current weights computes (SAO.md, "Data
    the method depends on")."""

    def fn(logprobs, _rollout_logprobs, advantages, action_mask, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        return loss_fn(logprobs, logprobs.detach(), advantages, action_mask, *a, **kw)

    return fn


def train_config(spec: RunSpec, store_uri: str) -> Any:
    """The trainer's config for a run (no follow: the harness writes a batch, then reads it)."""
    from trajstore.trainer.loop.config import (CRITIC_TRAINABLE_PATTERN, AlgoConfig, DataConfig, ModelConfig, OptimConfig,
                                          RunConfig, TrainConfig)

    arm = get_arm(spec.arm)
    codec = CharCodec()
    # a fixed warm-up of spec.critic_warmup iterations (SAO.md: 10 steps): the simulated timeline
    # publishes nothing during exactly that many iterations, so the trainer must not end it early
    algo = {"critic_warmup_steps": spec.critic_warmup, "critic_warmup_until": "budget", "eps_low": DIS_BAND[0],
            "eps_high": DIS_BAND[1], **arm.algo}
    return TrainConfig(
        store=store_uri,
        model=ModelConfig(name=spec.warm_start, tokenizer=codec.name, seed=spec.seed,
                          critic_trainable_pattern=None if arm.full_critic else CRITIC_TRAINABLE_PATTERN),
        data=DataConfig(batch_size=spec.batch_size, micro_batch_size=MICRO_BATCH, max_seq_len=256,
                        max_batch_tokens=256 * spec.batch_size, follow=False),
        optim=OptimConfig(policy_lr=spec.policy_lr, critic_lr=spec.policy_lr * spec.critic_lr_factor),
        algo=AlgoConfig(**algo),
        run=RunConfig(run_id=spec.run_id, max_steps=spec.steps, publish_every=0, checkpoint_every=10**6,
                      device="cpu", progress=False),
    )


@dataclass
class _Spy:
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
            r = lr.exp()
            for s in st.unique().tolist():
                sel = st == s
                h = self.hist.setdefault(int(s), [0] * (len(LOG_RATIO_EDGES) + 1))
                for k, c in zip(*torch.unique(b[sel], return_counts=True)):
                    h[int(k)] += int(c)
                bd = self.band.setdefault(int(s), [0, 0, 0])
                bd[0] += int(sel.sum())
                bd[1] += int((r[sel] <= 1 - DIS_BAND[0]).sum())
                bd[2] += int((r[sel] >= 1 + DIS_BAND[1]).sum())
                self.tokens[int(s)] = self.tokens.get(int(s), 0) + int(sel.sum())
            return loss_fn(logprobs, rollout_logprobs, advantages, action_mask, *a, **kw)

        return fn


def _exact_kl(model: torch.nn.Module, packs: list[Any], before: torch.Tensor | None) -> tuple[torch.Tensor, float]:
    """Log-softmax at the action slots of the packed micro-batches ``(N, V)``, and the mean
    ``KL(before || now)`` over those slots (nats per token; NaN without `before`)."""
    with torch.no_grad():
        lp = torch.cat([torch.log_softmax(model(input_ids=mb.input_ids, position_ids=mb.position_ids).logits[0].float()
                                          [mb.action_mask[0]], -1) for mb in packs])
    if before is None:
        return lp, math.nan
    return lp, float((before.exp() * (before - lp)).sum(-1).mean())


# -- one run -------------------------------------------------------------------------------------


def _percentile(xs: list[int], q: float) -> float:
    if not xs:
        return math.nan
    s = sorted(xs)
    return float(s[min(len(s) - 1, int(q * len(s)))])


def run_one(spec: RunSpec, store_uri: str, *, on_iteration: Callable[[dict[str, float]], None] | None = None,
            ) -> RunResult:
    """Train one arm on one task from the seed's warm start (see the module docstring).

    History keys per iteration: ``iteration``, ``step`` (policy step trained, -1 in warm-up),
    ``trainer_version``, ``reward`` (batch mean as sampled) and ``reward_<family>``,
    ``zero_grad`` (fraction of action tokens with zero policy gradient: DIS-masked, or on PPO's
    active clipped branch), ``grad_norm`` (policy, before clipping), ``entropy`` (nats/token),
    ``kl_rollout`` (k3 estimate of KL(rollout || policy), nats/token), ``ratio_mean``,
    ``explained_variance``, ``value_loss``, ``staleness_mean`` / ``staleness_p95`` /
    ``staleness_max`` (versions, over action tokens), ``kl_step`` (with ``measure_kl``).

    Raises:
        BenchError: unknown arm, or the trainer's stream returned a batch other than the one
            just written.
    """
    from trajstore.builder import TrajectoryBuilder
    from trajstore.trainer.data import micro_batches, pack, split_for_rank
    from trajstore.trainer.loop.setup import setup
    from trajstore.trainer.loop.step import train_step
    from trajstore.writer import StoreWriter

    t0 = time.monotonic()
    arm = get_arm(spec.arm)
    codec = CharCodec()
    mismatch = Mismatch(bf16=spec.bf16, logit_noise=spec.logit_noise)
    cfg = train_config(spec, store_uri)
    tr = setup(cfg, allow_empty=True)  # the harness writes each batch after setup
    if arm.has_critic and arm.estimator != "token":
        tr.advantage_fn = trainer_advantage_fn(arm.estimator, cfg.algo.gamma, cfg.algo.lambda_alpha)
    if arm.correction == "none":
        tr.policy_loss_fn = no_correction_loss(tr.policy_loss_fn)
    spy = _Spy()
    tr.policy_loss_fn = spy.wrap(tr.policy_loss_fn)
    warmup = cfg.algo.critic_warmup_steps if tr.critic is not None else 0

    # the timeline: prompts drawn in order (the same stream in every arm of the seed)
    acfg = AsyncConfig(workers=spec.workers, batch_size=spec.batch_size, group_size=arm.group_size,
                       turn_latency_sigma=spec.turn_latency_sigma, train_step_s=spec.train_step_s)
    task_rng = random.Random(f"tasks-{spec.seed}")
    n_prompts = 4 * (warmup + spec.steps) * spec.batch_size + spec.workers
    instances = [draw_instance(task_rng) for _ in range(n_prompts)]
    timeline: Timeline = simulate([TURNS[f] for f, _, _ in instances], acfg, iterations=warmup + spec.steps,
                                  warmup=warmup, seed=spec.seed)
    consumed = {k for it in timeline.iterations for k in it.rollouts}
    actions = sorted((t, k, j) for k in consumed for j, t in enumerate(timeline.rollouts[k].action_starts))
    action_times = [a[0] for a in actions]

    engine = LlamaEngine(tr.loaded.model, mismatch)
    engine_version = 0
    gen = torch.Generator().manual_seed(spec.seed)
    evals_inst = eval_instances(spec.seed, spec.eval_per_family)
    rows: dict[int, Row] = {}
    builders: dict[int, TrajectoryBuilder] = {}
    finished: dict[int, Any] = {}
    family_of: dict[str, str] = {}
    sampling = {"temperature": 1.0, "top_p": 1.0, "max_tokens": max_action_tokens(spec.task)}
    history: list[dict[str, float]] = []
    evals: list[dict[str, Any]] = []

    def on_action(row: Row, ids: list[int], lps: list[float], reply: Any, obs: list[int]) -> None:
        k, j, v = row.tag
        b = builders[k]
        b.add_action(ids, lps, policy_version=v, finish_reason="stop" if ids[-1] == codec.eos_token_id else "length",
                     sampling=sampling, call_id=f"turn-{j}")
        if reply.done:
            b.set_reward(float(reply.reward))
            t = b.finish("completed")
            finished[k] = t
            family_of[t.trajectory_id] = row.episode.family
        else:
            b.add_observation(obs, role="user", cause_id=f"turn-{j}")

    def sample_until(t_end: float, pointer: int) -> int:
        """Sample every consumed rollout's actions starting before `t_end`, version by version."""
        nonlocal engine_version
        stop = bisect.bisect_left(action_times, t_end)
        seg = actions[pointer:stop]
        by_version: dict[int, list[tuple[float, int, int]]] = {}
        for a in seg:
            by_version.setdefault(timeline.version_at(a[0]), []).append(a)
        for v in sorted(by_version):
            if v != engine_version:
                if v != tr.state.version:
                    raise BenchError(f"{spec.run_id}: an action needs version {v}, the trainer is at "
                                     f"{tr.state.version}")
                engine.load(tr.loaded.model)
                engine_version = v
            per_rollout: dict[int, list[int]] = {}
            for _, k, j in by_version[v]:
                per_rollout.setdefault(k, []).append(j)
            rnd = 0
            while True:
                batch_rows = []
                for k, js in per_rollout.items():
                    if rnd < len(js):
                        j = js[rnd]
                        if k not in rows:
                            r = timeline.rollouts[k]
                            inst = instances[r.prompt]
                            ep = make_episode(spec.task, inst, preferred=spec.preferred_at(timeline.version_at(
                                r.action_starts[0])))
                            rows[k] = new_row(ep, codec, max_action_tokens(spec.task))
                            builders[k] = TrajectoryBuilder(
                                trajectory_id=f"{spec.run_id}-r{k}", prompt_id=ep.prompt_id,
                                group_id=f"{spec.run_id}-p{r.prompt}" if arm.group_size > 1 else None,
                                source=BENCH_SOURCE, model="tiny-llama-warm", tokenizer=codec.name,
                                metadata={"bench_run": spec.run_id, "arm": spec.arm, "family": inst[0]})
                            builders[k].add_prompt(rows[k].context, role="user")
                        rows[k].tag = (k, j, v)
                        batch_rows.append(rows[k])
                if not batch_rows:
                    break
                play(engine, batch_rows, codec, generator=gen, until="action", on_action=on_action)
                rnd += 1
        return stop

    def do_eval(step: int) -> None:
        e = evaluate(tr.loaded.model, spec.task, evals_inst, seed=20_000 + spec.seed, preferred=spec.preferred_at(step))
        e["step"] = step
        evals.append(e)

    pointer = 0
    do_eval(0)
    try:
        with StoreWriter(tr.store, flush_seconds=None) as writer:
            for it in timeline.iterations:
                pointer = sample_until(it.start, pointer)
                if engine_version != tr.state.version:
                    # the version published at the previous iteration's end had no action yet;
                    # actions from now until this iteration's end use it
                    engine.load(tr.loaded.model)
                    engine_version = tr.state.version
                missing = [k for k in it.rollouts if k not in finished]
                if missing:
                    raise BenchError(f"{spec.run_id}: rollout {missing[0]} is consumed before it finished")
                trajs = [finished.pop(k) for k in it.rollouts]
                for k in it.rollouts:
                    rows.pop(k, None)
                    builders.pop(k, None)
                writer.write_many(trajs)
                writer.flush()
                batch = tr.stream.next_batch()
                if batch is None or [s.trajectory_id for s in batch.samples] != [t.trajectory_id for t in trajs]:
                    raise BenchError(f"{spec.run_id} iteration {it.index}: the trainer's stream did not return the "
                                     f"{len(trajs)} trajectories just written, in completion order")
                version = tr.state.version
                # the loop's micro-batches (one rank): the spy's per-slot staleness must align with them
                local = split_for_rank(batch.samples, 0, 1)
                packs = [pack(m) for m in micro_batches(local, cfg.data.micro_batch_size,
                                                        math.ceil(len(local) / cfg.data.micro_batch_size))]
                spy.staleness = [torch.where(p.action_mask, version - p.policy_version, 0) for p in packs]
                spy.calls = 0
                kl_before = None
                if spec.measure_kl and it.publishes is not None:
                    kl_before, _ = _exact_kl(tr.loaded.model, packs, None)
                step_before = tr.state.step
                metrics, consumed_rows = train_step(tr, batch)
                if tr.recorder is not None:
                    tr.recorder.write_step(iteration=it.index, step=consumed_rows[0]["step"] if consumed_rows else
                                           step_before, trainer_version=version, metrics=metrics,
                                           consumed=consumed_rows)
                stale = torch.cat([st[p.action_mask] for st, p in zip(spy.staleness, packs)]).tolist()
                row: dict[str, float] = {
                    "iteration": it.index, "step": step_before if it.publishes is not None else -1,
                    "trainer_version": version, "time_s": it.start,
                    "reward": sum(t.reward for t in trajs) / len(trajs),
                    "zero_grad": metrics.get("ratio/zero_grad", math.nan),
                    "grad_norm": metrics.get("policy/grad_norm", math.nan),
                    "entropy": metrics.get("policy/entropy", math.nan),
                    "kl_rollout": metrics.get("policy/kl_k3", math.nan),
                    "ratio_mean": metrics.get("ratio/mean", math.nan),
                    "explained_variance": metrics.get("value/explained_variance", math.nan),
                    "value_loss": metrics.get("value/loss", math.nan),
                    "staleness_mean": sum(stale) / max(len(stale), 1),
                    "staleness_p95": _percentile(stale, 0.95),
                    "staleness_max": float(max(stale, default=0)),
                }
                for fam in FAMILIES:
                    rs = [t.reward for t in trajs if family_of[t.trajectory_id] == fam]
                    row[f"reward_{fam}"] = sum(rs) / len(rs) if rs else math.nan
                if kl_before is not None:
                    row["kl_step"] = _exact_kl(tr.loaded.model, packs, kl_before)[1]
                history.append(row)
                if on_iteration is not None:
                    on_iteration(row)
                if it.publishes is not None and tr.state.step % spec.eval_every == 0:
                    do_eval(tr.state.step)
    finally:
        tr.stream.close()
        if tr.recorder is not None:
            tr.recorder.close()
    if evals[-1]["step"] != tr.state.step:
        do_eval(tr.state.step)
    return RunResult(spec, tr.store.uri, history, evals, spy.hist, spy.band, spy.tokens, time.monotonic() - t0)

