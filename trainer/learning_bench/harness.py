"""One benchmark run through the real pipeline, in one process, alternating:

  rollout worker (policy version ``latest - K`` loaded from ``policies/<run>/``) plays a step
  batch of episodes -> writer SDK -> local store shard -> the trainer's ``TrajectoryStream``
  reads exactly that batch -> :func:`trajstore.trainer.loop.train_step` -> records written ->
  the new version published into the store.

Staleness is therefore exact: every action of iteration i was sampled by version
``max(0, v_i - K)`` where ``v_i`` is the trainer's version when it consumes the batch. Arms that
the trainer has no option for are set up here by replacing one picked-once function of the
:class:`~trajstore.trainer.loop.Trainer` (per-prompt running mean, GAE without skipping).
"""

from __future__ import annotations

import math
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from trajstore.trainer.learning_bench.codec import CharCodec
from trajstore.trainer.envs import TaskName, TaskPhase, clone_episode, sample_episode
from trajstore.errors import TrajstoreError
from trajstore.store import Store

BENCH_SOURCE = "trajstore/bench-learning"
"""The ``source`` column of the benchmark's trajectories."""

ArmName = Literal["sao", "sao-k1", "sao-full-critic", "running-mean-prompt8", "running-mean-global128",
                  "grpo-dis", "ppo-clip", "gae-no-skip"]


@dataclass(frozen=True)
class Arm:
    """One algorithm variant.

    Attributes:
        name: short name (table rows).
        description: what differs from SAO, in words.
        algo: overrides of :class:`~trajstore.trainer.config.AlgoConfig` fields.
        full_critic: train every critic parameter (no frozen attention).
        group_size: episodes per prompt (GRPO groups); 1 = single rollout per prompt.
        advantage_override: ``None``, ``"gae-no-skip"`` or ``"running-mean-per-prompt"``.
        prompt_window: trajectories per prompt in the per-prompt running mean.
    """

    name: str
    description: str
    algo: dict[str, Any] = field(default_factory=dict)
    full_critic: bool = False
    group_size: int = 1
    advantage_override: str | None = None
    prompt_window: int = 8


ARMS: dict[str, Arm] = {a.name: a for a in (
    Arm("sao", "SAO: DIS, critic K=2, frozen attention, skip-observation GAE, adaptive lambda"),
    Arm("sao-k1", "SAO with K=1 critic update per policy update", algo={"critic_updates": 1}),
    Arm("sao-full-critic", "SAO with a full-parameter critic (attention trains too)", full_critic=True),
    Arm("running-mean-prompt8", "reward minus the mean of the last 8 rewards of the same prompt, no critic",
        algo={"advantage": "running-mean"}, advantage_override="running-mean-per-prompt", prompt_window=8),
    Arm("running-mean-global128", "reward minus the mean of the last 128 rewards, no critic",
        algo={"advantage": "running-mean", "running_mean_window": 128}),
    Arm("grpo-dis", "GRPO group-normalised rewards (4 rollouts per prompt) with DIS, no critic",
        algo={"advantage": "grpo"}, group_size=4),
    Arm("ppo-clip", "vanilla PPO clip (0.2) against the rollout log-probs, no masking; critic and GAE as SAO",
        algo={"policy_loss": "ppo-clip", "eps_low": 0.2, "eps_high": 0.2}),
    Arm("gae-no-skip", "token-level GAE over actions and observations (no skipping), else SAO",
        advantage_override="gae-no-skip"),
)}


class RunSpec(BaseModel):
    """One run: an arm on a task at a staleness, learning rate and seed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: TaskName = Field(description="task name")
    arm: str = Field(description="arm name (a key of ARMS)")
    staleness: int = Field(0, ge=0, description="K: rollouts come from policy version latest - K (versions)")
    policy_lr: float = Field(1e-3, gt=0, description="policy learning rate")
    critic_lr: float = Field(1e-3, gt=0, description="critic learning rate")
    seed: int = Field(0, description="seeds model init, task draws and sampling")
    steps: int = Field(60, ge=1, description="policy steps (versions published after the first)")
    critic_warmup_steps: int = Field(3, ge=0, description="critic-only iterations before policy steps "
                                                          "(critic arms only)")
    batch_size: int = Field(32, ge=1, description="episodes per step batch")
    phase: TaskPhase = Field(default_factory=TaskPhase, description="how instances are drawn before the shift")
    shift_step: int | None = Field(None, ge=1, description="policy step at which `shifted` replaces `phase`")
    shifted: TaskPhase | None = Field(None, description="instances after the shift")
    modulus: int = Field(10, ge=2, le=10, description="sequence task modulus")
    sampler_dtype: Literal["float32", "bfloat16"] = Field("float32", description="rollout worker weights' dtype "
                                                          "(bfloat16: ratios are not exactly 1 at K = 0)")
    eval_episodes: int = Field(256, ge=1, description="episodes of the final evaluation (fresh draws)")

    @property
    def run_id(self) -> str:
        lr = f"{self.policy_lr:g}".replace("+", "")
        return f"{self.task}-{self.arm}-k{self.staleness}-lr{lr}-s{self.seed}"

    def phase_at(self, step: int) -> TaskPhase:
        """The phase in force for iterations trained at policy step `step`."""
        if self.shift_step is not None and self.shifted is not None and step >= self.shift_step:
            return self.shifted
        return self.phase


@dataclass
class RunResult:
    """What one run produced (everything is also in its store).

    Attributes:
        spec: the run. store: its store URI.
        history: one dict per iteration: ``iteration``, ``step`` (policy step trained, -1 in
            warm-up), ``version_sampled``, ``reward`` (mean reward of the batch, as sampled),
            ``masked`` (fraction of action tokens DIS-masked or PPO-clipped), ``explained_variance``,
            ``ratio_mean``, ``entropy``, ``staleness_max`` (versions).
        initial_reward, final_reward: mean reward of `eval_episodes` fresh episodes sampled by
            version 0 and by the final version, same draws and sampler seed, final phase.
        seconds: wall time (s).
    """

    spec: RunSpec
    store: str
    history: list[dict[str, float]]
    initial_reward: float
    final_reward: float
    seconds: float


class BenchError(TrajstoreError):
    """The benchmark could not run (bad arm name, the stream returned a different batch)."""


# -- rollout ---------------------------------------------------------------------------------


@dataclass
class _Played:
    trajectory: Any
    prompt_id: str
    reward: float


def play_episodes(model: torch.nn.Module, codec: CharCodec, episodes: list[Any], *, version: int,
                  generator: torch.Generator, metadata: dict[str, Any] | None = None,
                  group_ids: list[str | None] | None = None) -> list[_Played]:
    """Play `episodes` side by side (one sampling batch per turn) and build their trajectories.

    Spans: prompt = BOS + the prompt text; each action = the one sampled token with its
    sampling log-prob (nats) and `version`; each observation = the environment's reply.

    Returns:
        One :class:`_Played` per episode, in order (trajectory validated, not yet written).
    """
    from trajstore.builder import TrajectoryBuilder
    from trajstore.trainer.rollout_worker import SamplingConfig, sample_actions

    sampling = SamplingConfig(max_new_tokens=1)
    sp = sampling.to_sampling_params()
    builders, contexts, rewards = [], [], [None] * len(episodes)
    for i, ep in enumerate(episodes):
        b = TrajectoryBuilder(prompt_id=ep.prompt_id, group_id=group_ids[i] if group_ids else None,
                              source=BENCH_SOURCE, model="tiny-llama", tokenizer=codec.name,
                              metadata=dict(metadata or {}))
        ctx = [codec.bos_token_id] + codec.encode(ep.prompt())
        b.add_prompt(ctx, role="user")
        builders.append(b)
        contexts.append(ctx)
    active = list(range(len(episodes)))
    turn = 0
    while active:
        acts = sample_actions(model, [contexts[i] for i in active], sampling=sampling,
                              stop_token_ids=[codec.eos_token_id], generator=generator)
        still = []
        for i, act in zip(active, acts):
            builders[i].add_action(act.token_ids, act.logprobs, policy_version=version,
                                   finish_reason=act.finish_reason, sampling=sp, call_id=f"turn-{turn}")
            reply = episodes[i].step(codec.decode(act.token_ids))
            if reply.done:
                rewards[i] = float(reply.reward)
                continue
            obs = codec.encode(reply.observation)
            builders[i].add_observation(obs, role="user", cause_id=f"turn-{turn}")
            contexts[i] = contexts[i] + list(act.token_ids) + obs
            still.append(i)
        active = still
        turn += 1
    out = []
    for b, ep, r in zip(builders, episodes, rewards):
        b.set_reward(r)
        out.append(_Played(b.finish("completed"), ep.prompt_id, float(r)))
    return out


def evaluate(model: torch.nn.Module, codec: CharCodec, spec: RunSpec, phase: TaskPhase, *, seed: int) -> float:
    """Mean reward of ``spec.eval_episodes`` fresh episodes from `phase`, sampled (temperature 1)
    with a generator seeded by `seed`: the same draws for every model evaluated with one seed."""
    rng = random.Random(seed)
    eps = [sample_episode(spec.task, phase, rng, modulus=spec.modulus) for _ in range(spec.eval_episodes)]
    gen = torch.Generator().manual_seed(seed)
    played = play_episodes(model, codec, eps, version=0, generator=gen)
    return sum(p.reward for p in played) / len(played)


# -- arm plumbing ----------------------------------------------------------------------------


def _prompt_mean_scalar_fn(window: int, prompt_of: dict[str, str]) -> Callable[..., dict[str, float]]:
    """Per-prompt running mean: A = R - mean(last `window` rewards of the same prompt_id seen in
    earlier batches), 0-baseline for a prompt not seen yet (trainer.baselines.RunningMeanBaseline
    per prompt)."""
    from trajstore.trainer.baselines import RunningMeanBaseline

    per_prompt: dict[str, RunningMeanBaseline] = {}

    def fn(samples: list[Any], _state: Any) -> dict[str, float]:
        out: dict[str, float] = {}
        by_prompt: dict[str, list[Any]] = {}
        for s in samples:
            by_prompt.setdefault(prompt_of[s.trajectory_id], []).append(s)
        for pid, group in by_prompt.items():
            base = per_prompt.setdefault(pid, RunningMeanBaseline(window))
            adv = base(torch.tensor([s.reward for s in group], dtype=torch.float64))
            out.update({s.trajectory_id: float(a) for s, a in zip(group, adv)})
        return out

    return fn


def _gae_no_skip_fn(tr: Any) -> Callable[..., Any]:
    """Token-level GAE without skipping observations: the mask passed to GAE (and to the
    critic's returns) marks every slot from the first action to the last one (actions and the
    observations between them) as a step, so observation values enter the deltas; advantages
    are then kept on action tokens only, where the policy loss reads them. lambda_policy counts
    those steps too (the trainer's math has no no-skip variant; this is the mask trick)."""
    from trajstore.trainer.advantages import sao_targets
    from trajstore.trainer.data import gae_inputs, to_packed

    cfg = tr.cfg

    def fn(mb: Any, samples: list[Any], values: torch.Tensor | None, _scalar: dict[str, float]) -> Any:
        x = gae_inputs(mb, samples, values)
        mask = x.action_mask
        # from the first action slot to the last one (the reward slot), observations included
        pos = torch.arange(mask.shape[1]).unsqueeze(0)
        first = mask.float().argmax(dim=1, keepdim=True)
        last = mask.shape[1] - 1 - mask.flip(1).float().argmax(dim=1, keepdim=True)
        steps = (pos >= first) & (pos <= last)
        t = sao_targets(x.rewards, x.values, steps, gamma=cfg.algo.gamma, alpha=cfg.algo.lambda_alpha)
        adv = t.advantages * mask
        return to_packed(adv, mb.segments), to_packed(t.returns, mb.segments), t.lambda_policy

    return fn


def train_config(spec: RunSpec, store_uri: str) -> Any:
    """The trainer's config for a run (no follow: the harness writes a batch, then reads it)."""
    from trajstore.trainer.config import (CRITIC_TRAINABLE_PATTERN, AlgoConfig, DataConfig, ModelConfig,
                                          OptimConfig, RunConfig, TrainConfig)

    arm = get_arm(spec.arm)
    codec = CharCodec()
    # a fixed warm-up: the grid compares arms over the same number of policy steps
    algo = {"critic_warmup_steps": spec.critic_warmup_steps, "critic_warmup_until": "budget", **arm.algo}
    return TrainConfig(
        store=store_uri,
        model=ModelConfig(name="tiny-llama", tokenizer=codec.name, tiny_vocab_size=codec.vocab_size, seed=spec.seed,
                          critic_trainable_pattern=None if arm.full_critic else CRITIC_TRAINABLE_PATTERN),
        data=DataConfig(batch_size=spec.batch_size, micro_batch_size=spec.batch_size, max_seq_len=512,
                        max_batch_tokens=512 * spec.batch_size, follow=False),
        optim=OptimConfig(policy_lr=spec.policy_lr, critic_lr=spec.critic_lr),
        algo=AlgoConfig(**algo),
        run=RunConfig(run_id=spec.run_id, max_steps=spec.steps, publish_every=1, checkpoint_every=10**6,
                      device="cpu", progress=False),
    )


def get_arm(name: str) -> Arm:
    """The arm called `name`.

    Raises:
        BenchError: unknown name (the known ones are listed).
    """
    try:
        return ARMS[name]
    except KeyError:
        raise BenchError(f"unknown arm {name!r}; known arms: {', '.join(ARMS)}") from None


# -- one run ---------------------------------------------------------------------------------


def run_one(spec: RunSpec, store_uri: str, *, on_iteration: Callable[[dict[str, float]], None] | None = None,
            ) -> RunResult:
    """Train one arm on one task through the pipeline (see the module docstring).

    Args:
        spec: the run. store_uri: a local store directory for this run (created).
        on_iteration: called with each iteration's history row (progress output).

    Returns:
        The :class:`RunResult` (the store also holds trajectories, ``runs/<run_id>/`` records
        and the last K+1 published versions).

    Raises:
        BenchError: unknown arm, or the trainer's stream returned a batch other than the one
            just written.
    """
    from trajstore.trainer.loop import setup, train_step
    from trajstore.trainer.models import load_policy
    from trajstore.trainer.publish import load_policy_into, publish_policy
    from trajstore.writer import StoreWriter

    t0 = time.monotonic()
    arm = get_arm(spec.arm)
    codec = CharCodec()
    cfg = train_config(spec, store_uri)
    tr = setup(cfg, allow_empty=True)  # the harness writes each batch after setup
    store = tr.store
    run_id = spec.run_id
    prompt_of: dict[str, str] = {}
    if arm.advantage_override == "running-mean-per-prompt":
        tr.scalar_fn = _prompt_mean_scalar_fn(arm.prompt_window, prompt_of)
    elif arm.advantage_override == "gae-no-skip":
        tr.advantage_fn = _gae_no_skip_fn(tr)
    sampler = load_policy("tiny-llama", tokenizer=codec.name, tiny_vocab_size=codec.vocab_size, seed=spec.seed).model
    if spec.sampler_dtype == "bfloat16":
        sampler = sampler.to(torch.bfloat16)
    sampler.eval()
    held = load_policy_into(sampler, store, run_id, 0)
    initial = copy_model(sampler)
    rng = random.Random(spec.seed)
    gen = torch.Generator().manual_seed(spec.seed)
    history: list[dict[str, float]] = []
    total = spec.steps + (tr.cfg.algo.critic_warmup_steps if tr.critic is not None else 0)
    try:
        with StoreWriter(store, flush_seconds=None) as writer:
            for iteration in range(total):
                latest = tr.state.version
                want = max(0, latest - spec.staleness)
                if want != held:
                    held = load_policy_into(sampler, store, run_id, want)
                phase = spec.phase_at(tr.state.step)
                n_prompts = math.ceil(spec.batch_size / arm.group_size)
                eps, groups = [], []
                for j in range(n_prompts):
                    ep = sample_episode(spec.task, phase, rng, modulus=spec.modulus)
                    for g in range(min(arm.group_size, spec.batch_size - len(eps))):
                        eps.append(ep if g == 0 else clone_episode(ep))
                        groups.append(f"{run_id}-i{iteration}-p{j}" if arm.group_size > 1 else None)
                played = play_episodes(sampler, codec, eps, version=held, generator=gen, group_ids=groups,
                                       metadata={"bench_run": run_id, "arm": spec.arm, "task": spec.task,
                                                 "phase": 1 if phase is not spec.phase else 0})
                for p in played:
                    prompt_of[p.trajectory.trajectory_id] = p.prompt_id
                writer.write_many(p.trajectory for p in played)
                writer.flush()
                batch = tr.stream.next_batch()
                wrote = {p.trajectory.trajectory_id for p in played}
                if batch is None or {s.trajectory_id for s in batch.samples} != wrote:
                    raise BenchError(f"{run_id} iteration {iteration}: the trainer's stream did not return the "
                                     f"{len(wrote)} trajectories just written")
                step_before = tr.state.step
                warm = tr.state.iteration < tr.cfg.algo.critic_warmup_steps and tr.critic is not None
                metrics, consumed = train_step(tr, batch)
                if tr.recorder is not None:
                    tr.recorder.write_step(iteration=iteration,
                                           step=consumed[0]["step"] if consumed else step_before,
                                           trainer_version=consumed[0]["trainer_version"] if consumed else latest,
                                           metrics=metrics, consumed=consumed)
                if not warm:
                    publish_policy(store, run_id, tr.state.version, tr.loaded.model, step=tr.state.step,
                                   base_model=tr.loaded.name, tokenizer=tr.loaded.tokenizer)
                    tr.published = tr.state.version
                    _prune_versions(store, run_id, keep_from=tr.state.version - spec.staleness - 1)
                row = {
                    "iteration": iteration, "step": -1 if warm else step_before, "version_sampled": held,
                    "phase": 1 if phase is not spec.phase else 0,
                    "reward": sum(p.reward for p in played) / len(played),
                    "masked": metrics.get("ratio/masked_below", math.nan) + metrics.get("ratio/masked_above", math.nan),
                    "zero_grad": metrics.get("ratio/zero_grad", math.nan),
                    "explained_variance": metrics.get("value/explained_variance", math.nan),
                    "ratio_mean": metrics.get("ratio/mean", math.nan),
                    "entropy": metrics.get("policy/entropy", math.nan),
                    "staleness_max": metrics.get("staleness/max", math.nan),
                }
                history.append(row)
                if on_iteration is not None:
                    on_iteration(row)
    finally:
        tr.stream.close()
        if tr.recorder is not None:
            tr.recorder.close()
    final_phase = spec.phase_at(spec.steps)
    trained = copy_model(sampler)
    trained.load_state_dict(tr.loaded.model.state_dict())
    eval_seed = 10_000 + spec.seed
    initial_reward = evaluate(initial, codec, spec, final_phase, seed=eval_seed)
    final_reward = evaluate(trained, codec, spec, final_phase, seed=eval_seed)
    return RunResult(spec, store.uri, history, initial_reward, final_reward, time.monotonic() - t0)


def copy_model(model: torch.nn.Module) -> torch.nn.Module:
    """A deep copy in eval mode (the sampler's dtype)."""
    import copy

    return copy.deepcopy(model).eval()


def _prune_versions(store: Store, run_id: str, *, keep_from: int) -> None:
    """Delete published versions below `keep_from` (never v0: it is the untrained baseline);
    a run only ever loads ``latest - K``, and ~100 versions per run would fill the disk.
    The benchmark's stores are local directories."""
    from trajstore.policies import list_policy_versions, version_dir

    if keep_from <= 1:
        return
    for v in list_policy_versions(store, run_id):
        if 0 < v < keep_from:
            shutil.rmtree(store.path(version_dir(run_id, v)), ignore_errors=True)
