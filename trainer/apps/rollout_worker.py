"""A rollout worker: samples multi-turn episodes from a causal LM, records token ids, sampling
log-probs and the policy version of every action through the writer SDK, and loads newly
published policy versions between episodes. The asynchronous half of ``traj demo``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from trajstore.builder import TrajectoryBuilder
from trajstore.chat_template import Message, action_text, observation_tokens, prompt_tokens
from trajstore.models import SamplingParams, Trajectory
from trajstore.policies import latest_policy_version
from trajstore.sampling import SamplingArrays
from trajstore.store import Store, open_store
from trajstore.trainer.apps.envs.guess_chat import EnvReply, EpisodeSummary, GuessNumberEnv
from trajstore.trainer.loop.publish import load_policy_into
from trajstore.trainer.models import cache_kwarg
from trajstore.trainer.sao.sampling import as_tensors, processed_logprobs
from trajstore.writer import StoreWriter

ROLLOUT_SOURCE = "trajstore/rollout-worker"
"""The ``source`` column of trajectories this worker writes."""


@dataclass(frozen=True)
class SamplingConfig:
    """How actions are sampled.

    Attributes:
        temperature: softmax temperature (> 0); 1 = the model's own distribution.
        top_p: nucleus mass in (0, 1]; 1 = no truncation.
        max_new_tokens: tokens per action at most (the end-of-turn token included).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 24

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")

    def to_sampling_params(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=-1,
                              max_tokens=self.max_new_tokens)


@dataclass(frozen=True)
class SampledAction:
    """One model call.

    Attributes:
        token_ids: sampled ids, shape (N,), N <= max_new_tokens, ending with the stop token
            when ``finish_reason == "stop"``.
        logprobs: log-prob (nats, <= 0) of each sampled id under the distribution it was drawn
            from (temperature- and top-p-adjusted; equal to the model's when both are 1), shape (N,).
        finish_reason: ``stop`` (a stop token was sampled) or ``length`` (max_new_tokens reached).
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str


def sampling_logprobs(logits: torch.Tensor, *, temperature: float, top_p: float) -> torch.Tensor:
    """Log-probabilities of the sampling distribution for next-token logits: the processed
    distribution (:func:`trajstore.trainer.sao.sampling.processed_logprobs`, the definition
    ``traj serve`` and the trainer share) at `temperature` with the top-p nucleus (Holtzman et al.
    2020, "The Curious Case of Neural Text Degeneration", section 3.1); -inf outside it.

    Shape: logits (V,) or (B, V) -> same shape, float32.
    """
    rows = logits.reshape(-1, logits.shape[-1])
    n = rows.shape[0]
    params = as_tensors(SamplingArrays([temperature] * n, [0] * n, [top_p] * n, [0.0] * n), rows.device)
    return processed_logprobs(rows, params).reshape(logits.shape)


@torch.no_grad()
def sample_actions(model: nn.Module, contexts: Sequence[Sequence[int]], *, sampling: SamplingConfig,
                   stop_token_ids: Sequence[int], generator: torch.Generator | None = None) -> list[SampledAction]:
    """Sample one action after each context, all contexts in one left-padded batch with a KV
    cache, keeping each sampled token's log-prob.

    Rows are left-padded to the longest context (attention mask 0 on padding, positions
    counted from each row's first real token), so every row sees exactly its own context; a
    row that sampled a stop token keeps being fed (and ignored) until all rows are done.

    Args:
        model: a transformers causal LM (evaluated without gradients; its mode is restored).
        contexts: B token-id sequences, each everything its model call conditions on (prompt,
            earlier actions and observations); lengths T_b >= 1 may differ.
        sampling: temperature, top_p and the token limit.
        stop_token_ids: ids that end an action (kept as its last token).
        generator: torch RNG for reproducible sampling (on the model's device).

    Returns:
        B :class:`SampledAction` s, in the order of `contexts`.
    """
    if not contexts or any(len(c) == 0 for c in contexts):
        raise ValueError("sample_actions needs at least one context, each with at least one token")
    # transformers (the train extra) loads only when a model or tokenizer is needed
    from transformers import DynamicCache

    device = next(model.parameters()).device
    B, T = len(contexts), max(len(c) for c in contexts)
    ids = torch.zeros((B, T), dtype=torch.long, device=device)
    mask = torch.zeros((B, T), dtype=torch.long, device=device)
    for i, c in enumerate(contexts):
        ids[i, T - len(c):] = torch.as_tensor(list(c), dtype=torch.long)
        mask[i, T - len(c):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    stops = torch.as_tensor(sorted({int(t) for t in stop_token_ids}) or [-1], device=device)
    out_ids: list[list[int]] = [[] for _ in range(B)]
    out_lps: list[list[float]] = [[] for _ in range(B)]
    done = torch.zeros(B, dtype=torch.bool, device=device)
    was_training = model.training
    model.eval()
    try:
        cache, kw = DynamicCache(), cache_kwarg(model)
        inp, pos = ids, positions
        for _ in range(sampling.max_new_tokens):
            out = model(input_ids=inp, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1,
                        **{kw: cache})
            lp = sampling_logprobs(out.logits[:, -1], temperature=sampling.temperature, top_p=sampling.top_p)
            tok = torch.multinomial(lp.exp(), 1, generator=generator)[:, 0]
            tok_lp = lp.gather(-1, tok[:, None])[:, 0]
            for i in torch.nonzero(~done).flatten().tolist():
                out_ids[i].append(int(tok[i]))
                out_lps[i].append(float(tok_lp[i]))
            done |= torch.isin(tok, stops)
            if bool(done.all()):
                break
            inp, pos = tok[:, None], pos[:, -1:] + 1
            mask = torch.cat([mask, torch.ones((B, 1), dtype=mask.dtype, device=device)], dim=1)
        stop_set = set(stops.tolist())
        return [SampledAction(out_ids[i], out_lps[i], "stop" if out_ids[i][-1] in stop_set else "length")
                for i in range(B)]
    finally:
        model.train(was_training)


def sample_action(model: nn.Module, context_ids: Sequence[int], *, sampling: SamplingConfig,
                  stop_token_ids: Sequence[int], generator: torch.Generator | None = None) -> SampledAction:
    """:func:`sample_actions` for one context, shape (T,)."""
    return sample_actions(model, [context_ids], sampling=sampling, stop_token_ids=stop_token_ids,
                          generator=generator)[0]


class RolloutWorker:
    """Plays :class:`~trajstore.trainer.apps.envs.guess_chat.GuessNumberEnv` episodes with a policy and writes them.

    Between episodes (and, with ``sync_every_action``, between actions) the worker asks the
    store for the latest published version of `run_id` and loads it when it is newer than the
    one it holds; every action span records the version of the weights that generated it.

    Args:
        model: the policy (a transformers causal LM); the version-0 weights when nothing is
            published yet.
        tokenizer: its tokenizer (with a chat template).
        store: where trajectories go and policies come from.
        run_id: the training run whose ``policies/<run_id>/`` versions are followed.
        model_name, tokenizer_name: recorded in the ``model`` / ``tokenizer`` columns; the
            trainer refuses a store whose tokenizer differs from its model's.
        sampling: sampling parameters (recorded on every action span).
        seed: seeds the task draws and the sampler.
        initial_version: version of the weights `model` holds at start.
        sync_every_action: also check for new weights before every action, so a trajectory
            can cross policy versions (as in real asynchronous rollouts).
        parallel_episodes: episodes played side by side, their actions sampled as one batch
            (on CPU a batch of 4 costs little more than one sequence).
        env_kwargs: passed to :meth:`GuessNumberEnv.sample` (low, high, max_turns).
        extra_metadata: merged into every trajectory's ``metadata`` (e.g. a demo run tag).
    """

    def __init__(self, model: nn.Module, tokenizer: Any, store: Store | str, *, run_id: str, model_name: str,
                 tokenizer_name: str, sampling: SamplingConfig | None = None, seed: int = 0,
                 initial_version: int = 0, sync_every_action: bool = False,
                 parallel_episodes: int = 1, env_kwargs: dict[str, int] | None = None, extra_metadata: dict[str, Any] | None = None,
                 storage_options: dict[str, Any] | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.store = store if isinstance(store, Store) else open_store(store, storage_options=storage_options)
        self.run_id = run_id
        self.model_name = model_name
        self.tokenizer_name = tokenizer_name
        self.sampling = sampling or SamplingConfig()
        self.version = initial_version
        self.sync_every_action = sync_every_action
        if parallel_episodes < 1:
            raise ValueError(f"parallel_episodes must be >= 1, got {parallel_episodes}")
        self.parallel_episodes = parallel_episodes
        self.env_kwargs = dict(env_kwargs or {})
        self.extra_metadata = dict(extra_metadata or {})
        self.rng = random.Random(seed)
        self.generator = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
        self.stop_token_ids = sorted({t for t in (tokenizer.eos_token_id,) if t is not None})
        if not self.stop_token_ids:
            raise ValueError(f"tokenizer {tokenizer_name!r} has no end-of-sequence token to stop actions")
        self.loads: list[tuple[int, float]] = []
        """(version, seconds to load) for every policy load."""

    def sync_policy(self) -> bool:
        """Load the latest published version if it differs from the held one; True if loaded."""
        latest = latest_policy_version(self.store, self.run_id)
        if latest is None or latest == self.version:
            return False
        t0 = time.perf_counter()
        self.version = load_policy_into(self.model, self.store, self.run_id, latest)
        self.loads.append((self.version, time.perf_counter() - t0))
        return True

    def run_episode(self, env: GuessNumberEnv) -> tuple[Trajectory, EpisodeSummary]:
        """:meth:`run_episodes` for one environment."""
        return self.run_episodes([env])[0]

    def run_episodes(self, envs: Sequence[GuessNumberEnv]) -> list[tuple[Trajectory, EpisodeSummary]]:
        """Play episodes side by side to their ends (the actions of each turn are sampled as one
        batch); return each validated trajectory and its summary, in the order of `envs`.

        Spans: prompt = the chat-template rendering of the system and user messages plus the
        assistant header; action = the generated ids (end token included); observation = the
        template's rendering of the environment's reply up to the next assistant header (see
        :func:`trajstore.chat_template.observation_tokens`). Their concatenation is exactly what the
        model conditioned on.
        """
        t0 = time.perf_counter()
        sp = self.sampling.to_sampling_params()
        eps = [_Episode.start(env, self) for env in envs]
        turn = 0
        while active := [e for e in eps if e.reply is None or not e.reply.done]:
            if self.sync_every_action and turn > 0:
                self.sync_policy()
            acts = sample_actions(self.model, [e.context for e in active], sampling=self.sampling,
                                  stop_token_ids=self.stop_token_ids, generator=self.generator)
            for e, act in zip(active, acts):
                e.step(act, turn, self, sp)
            turn += 1
        out = []
        for e in eps:
            assert e.reply is not None and e.reply.reward is not None
            e.builder.set_reward(e.reply.reward, raw={"reward": e.reply.reward, "solved": e.reply.reward == 1.0,
                                                      "guesses": e.env.guesses, "verdict": e.reply.text})
            traj = e.builder.finish("completed")
            out.append((traj, EpisodeSummary(traj.trajectory_id, e.env.prompt_id, float(e.reply.reward),
                                             e.reply.reward == 1.0, len(e.versions), e.versions, len(traj.tokens),
                                             time.perf_counter() - t0)))
        return out

    def iter_run(self, num_episodes: int | None, writer: StoreWriter, *,
                 should_stop: Callable[[], bool] | None = None) -> Iterator[EpisodeSummary]:
        """Play episodes (`parallel_episodes` at a time), write each one (flushed per episode so a trainer sees it at once) and
        yield its summary.

        Args:
            num_episodes: episodes to play (None = until `should_stop` returns True).
            writer: the store writer (its buffer is flushed after every episode).
            should_stop: called before each episode; it may block to pace the worker.
        """
        if num_episodes is None and should_stop is None:
            raise ValueError("iter_run() needs num_episodes or should_stop")
        done = 0
        while num_episodes is None or done < num_episodes:
            if should_stop is not None and should_stop():
                return
            self.sync_policy()
            n = self.parallel_episodes if num_episodes is None else min(self.parallel_episodes, num_episodes - done)
            played = self.run_episodes([GuessNumberEnv.sample(self.rng, **self.env_kwargs) for _ in range(n)])
            writer.write_many(t for t, _ in played)
            writer.flush()
            done += n
            yield from (summary for _, summary in played)

    def run(self, num_episodes: int | None, writer: StoreWriter, *,
            should_stop: Callable[[], bool] | None = None) -> list[EpisodeSummary]:
        """:meth:`iter_run` to the end; the summaries in order."""
        return list(self.iter_run(num_episodes, writer, should_stop=should_stop))


@dataclass
class _Episode:
    """One episode in progress inside :meth:`RolloutWorker.run_episodes`."""

    env: GuessNumberEnv
    builder: TrajectoryBuilder
    messages: list[Message]
    context: list[int]
    versions: list[int]
    reply: EnvReply | None = None

    @classmethod
    def start(cls, env: GuessNumberEnv, w: RolloutWorker) -> _Episode:
        messages = env.reset()
        b = TrajectoryBuilder(prompt_id=env.prompt_id, source=ROLLOUT_SOURCE, model=w.model_name,
                              tokenizer=w.tokenizer_name,
                              metadata={"env": "guess-number", "target": env.target, "low": env.low,
                                        "high": env.high, "max_turns": env.max_turns, **w.extra_metadata})
        context = prompt_tokens(w.tokenizer, messages)
        b.add_prompt(context, role="user")
        return cls(env, b, messages, list(context), [])

    def step(self, act: SampledAction, turn: int, w: RolloutWorker, sp: SamplingParams) -> None:
        """Record the action, let the environment answer, and extend the context."""
        self.builder.add_action(act.token_ids, act.logprobs, policy_version=w.version,
                                finish_reason=act.finish_reason, sampling=sp, call_id=f"turn-{turn}",
                                logprob_mode="processed")  # sampled_action's log-probs: the processed distribution
        self.versions.append(w.version)
        text = action_text(w.tokenizer, act.token_ids)
        self.reply = self.env.step(text)
        if self.reply.done:
            return
        obs = observation_tokens(w.tokenizer, self.messages, act.token_ids, self.reply.text)
        self.messages += [{"role": "assistant", "content": text}, {"role": "user", "content": self.reply.text}]
        self.builder.add_observation(obs, role="user", cause_id=f"turn-{turn}")
        self.context += act.token_ids + obs
