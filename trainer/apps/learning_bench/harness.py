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
``log pi_theta - log pi_rollout`` by staleness (histograms, DIS band occupancy). Those pieces are in
trainer_side.py, the arms in arms.py, the evaluation in evaluation.py.
"""

from __future__ import annotations

import bisect
import math
import random
import time
from collections.abc import Callable
from typing import Any

import torch

from trajstore.builder import TrajectoryBuilder
from trajstore.trainer.apps.learning_bench.arms import BenchError, get_arm
from trajstore.trainer.apps.learning_bench.codec import CharCodec
from trajstore.trainer.apps.learning_bench.estimators import trainer_advantage_fn
from trajstore.trainer.apps.learning_bench.evaluation import eval_instances, evaluate
from trajstore.trainer.apps.learning_bench.sampler import LlamaEngine, Mismatch, Row, new_row, play
from trajstore.trainer.apps.learning_bench.schedule import AsyncConfig, Timeline, simulate
from trajstore.trainer.apps.learning_bench.spec import RunResult, RunSpec
from trajstore.trainer.apps.learning_bench.tasks import FAMILIES, draw, make_episode, max_action_tokens, split, turns
from trajstore.trainer.apps.learning_bench.trainer_side import (
    LogRatioSpy,
    exact_kl,
    keyed_running_mean,
    no_correction_loss,
    train_config,
    use_moe_critic,
)
from trajstore.trainer.data import with_replay
from trajstore.trainer.loop.micro import prepare
from trajstore.trainer.loop.setup import setup
from trajstore.trainer.loop.step import train_step
from trajstore.writer import StoreWriter

BENCH_SOURCE = "trajstore/bench-learning"
"""The ``source`` column of the benchmark's trajectories."""


def _percentile(xs: list[int], q: float) -> float:
    if not xs:
        return math.nan
    s = sorted(xs)
    return float(s[min(len(s) - 1, int(q * len(s)))])


def plan_timeline(spec: RunSpec) -> tuple[list[tuple[str, int, int]], Timeline]:
    """The run's prompts (task instances, drawn in order from the seed's stream) and its timeline.

    Every arm of a seed is on the same timeline: ``spec.critic_warmup`` warm-up iterations (the
    critic arms train their critic on them; critic-free arms fill their baseline's state, e.g. the
    running mean's window; no arm takes a policy step), then ``spec.steps`` policy steps. Arms with
    one rollout per prompt therefore consume the same rollouts at every iteration, and the same
    prompts and latencies reach every arm; GRPO's groups of 4 (its ablation) change which
    rollouts finish first.
    """
    arm = get_arm(spec.arm)
    acfg = AsyncConfig(workers=spec.workers, batch_size=spec.batch_size, group_size=arm.group_size,
                       turn_latency_sigma=spec.turn_latency_sigma, train_step_s=spec.train_step_s)
    task_rng = random.Random(f"tasks-{spec.seed}")
    warmup = spec.critic_warmup
    n_prompts = 4 * (warmup + spec.steps) * spec.batch_size + spec.workers
    sp = split(spec.task, spec.seed, spec.held_out)  # training never sees the evaluation's held-out instances
    instances = [draw(task_rng, sp, held_out=False) for _ in range(n_prompts)]
    timeline = simulate([turns(spec.task, f) for f, _, _ in instances], acfg, iterations=warmup + spec.steps,
                        warmup=warmup, seed=spec.seed)
    return instances, timeline


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

    t0 = time.monotonic()
    arm = get_arm(spec.arm)
    codec = CharCodec()
    mismatch = (Mismatch.engine_like(spec.logit_noise) if spec.mismatch == "engine" else
                Mismatch(bf16=spec.bf16, logit_noise=spec.logit_noise))
    cfg = train_config(spec, store_uri)
    tr = setup(cfg, allow_empty=True)  # the harness writes each batch after setup
    tr.say = lambda _m: None  # no per-pass activity lines (and no heartbeat thread) from the worker processes
    family_of: dict[str, str] = {}
    if arm.critic_model != "policy":
        if spec.critic_warm_start is None:
            raise BenchError(f"{spec.run_id}: arm {arm.name} needs critic_warm_start (the seed's warm-started "
                             f"{arm.critic_model})")
        use_moe_critic(tr, spec.critic_warm_start, full=arm.full_critic)
    if arm.baseline_key == "family":
        tr.scalar_fn = keyed_running_mean(cfg.algo.running_mean_window, lambda smp: family_of[smp.trajectory_id])
    if arm.has_critic and arm.estimator != "token":
        tr.advantage_fn = trainer_advantage_fn(arm.estimator, cfg.algo.gamma, cfg.algo.lambda_alpha)
    if arm.correction == "none":
        tr.policy_loss_fn = no_correction_loss(tr.policy_loss_fn)
    spy = LogRatioSpy()
    tr.policy_loss_fn = spy.wrap(tr.policy_loss_fn)
    instances, timeline = plan_timeline(spec)
    consumed = {k for it in timeline.iterations for k in it.rollouts}
    actions = sorted((t, k, j) for k in consumed for j, t in enumerate(timeline.rollouts[k].action_starts))
    action_times = [a[0] for a in actions]

    engine = LlamaEngine(tr.loaded.model, mismatch)
    engine_version = 0
    gen = torch.Generator().manual_seed(spec.seed)
    evals_inst = eval_instances(spec.seed, spec.eval_per_family, held_out=spec.held_out, task=spec.task)
    rows: dict[int, Row] = {}
    builders: dict[int, TrajectoryBuilder] = {}
    finished: dict[int, Any] = {}
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
                # the replay arm: the buffer's draw joins the batch, as in the training loop
                batch = with_replay(tr.replay, batch, version, max_tokens=cfg.data.max_batch_tokens)
                # the loop's own micro-batches, by the loop's own function (trajectory count and the
                # memory plan's token bound): the spy's per-slot staleness must align with them
                packs = [m.mb for m in prepare(tr, batch)[0]]
                spy.staleness = [torch.where(p.action_mask, version - p.policy_version, 0) for p in packs]
                spy.calls = 0
                kl_before = None
                if spec.measure_kl and it.publishes is not None:
                    kl_before, _ = exact_kl(tr.loaded.model, packs, None)
                step_before = tr.state.step
                if it.publishes is None and tr.critic is None:
                    # warm-up of a critic-free arm: its baseline sees the batch (the running mean's
                    # window fills), no policy step (starting at once, from a zero baseline, would bias them)
                    if tr.scalar_fn is not None:
                        tr.scalar_fn(batch.samples, tr.state)
                    tr.state.cursor = batch.cursor
                    metrics, consumed_rows = {}, []
                else:
                    metrics, consumed_rows = train_step(tr, batch)
                    if tr.replay is not None:
                        tr.replay.add(batch.samples)
                if tr.recorder is not None and (metrics or consumed_rows):
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
                    row["kl_step"] = exact_kl(tr.loaded.model, packs, kl_before)[1]
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
