"""Trajectory factories of the test suite.

:func:`random_trajectory` builds a valid schema-v1 trajectory with a random span layout (token ids
below SmolLM2's vocabulary size; the ``make_trajectory`` fixture of ``tests/conftest.py``).
:func:`tiny_model_trajectory` builds a multi-turn trajectory with the writer SDK (engine token ids,
engine log-probs, a policy version per action) for the tiny random models of the trainer tests:
token ids below :data:`VOCAB`. :func:`hand_built_pair` builds two small trajectories whose
layouts are written out in its docstring."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np

from trajstore import TrajectoryBuilder
from trajstore.models import SamplingParams, Span, Trajectory

VOCAB = 128
"""Vocabulary of the tiny test models; :func:`tiny_model_trajectory` draws token ids below it."""

SMOLLM2_VOCAB_SIZE = 49_152
"""Token ids of :func:`random_trajectory` are drawn from [0, SMOLLM2_VOCAB_SIZE) (SmolLM2's vocabulary size)."""


def tiny_model_trajectory(rng: np.random.Generator, *, trajectory_id: str, tokenizer: str = "tiny-llama",
                          policy_versions: tuple[int, ...] = (0,), with_logprobs: bool = True,
                          num_turns: int = 3, group_id: str | None = None, reward: float | None = None,
                          action_len: tuple[int, int] = (3, 9), metadata: dict | None = None):
    """A prompt, then `num_turns` x (action, observation) with a final action. Log-probs are
    near log(1/VOCAB) (what a freshly initialised tiny model assigns), so importance ratios start
    near 1; temperature 1 is recorded on every action."""
    b = TrajectoryBuilder(trajectory_id=trajectory_id, prompt_id=f"p-{trajectory_id}", group_id=group_id,
                          model="tiny", tokenizer=tokenizer, metadata=metadata)
    b.add_prompt(rng.integers(0, VOCAB, int(rng.integers(4, 9))))
    for turn in range(num_turns):
        n = int(rng.integers(*action_len))
        lps = (np.full(n, -math.log(VOCAB)) + rng.normal(0, 0.05, n)).clip(max=-1e-3) if with_logprobs else None
        b.add_action(rng.integers(0, VOCAB, n), lps, policy_version=policy_versions[turn % len(policy_versions)],
                     finish_reason="stop", sampling={"temperature": 1.0})
        if turn < num_turns - 1:
            b.add_observation(rng.integers(0, VOCAB, int(rng.integers(2, 6))), cause_id=f"c{turn}")
    b.set_reward(float(rng.integers(0, 2)) if reward is None else reward)
    t = b.finish()
    if not with_logprobs:
        t = t.model_copy(update={"token_source": "retokenized"})
    return t


def random_trajectory(
    rng: np.random.Generator,
    *,
    trajectory_id: str | None = None,
    num_turns: int | None = None,
    max_span_tokens: int = 64,
    with_logprobs: bool = True,
    with_actions: bool = True,
    reward: float | None | str = "random",
    group_id: str | None = None,
) -> Trajectory:
    """A valid schema-v1 trajectory with a random span layout.

    Layout: one prompt span, then `num_turns` (random 1-6 when None) action spans, each
    followed by an observation span except possibly the last (random). Span lengths are
    uniform in [1, max_span_tokens]. Action spans get policy versions that grow over the
    trajectory (a trajectory can cross versions), a random finish reason and sampling params.

    Args:
        rng: the random source (use ``np.random.default_rng(seed)`` for reproducible data).
        trajectory_id: defaults to ``traj-<random hex>``.
        with_logprobs: engine log-probs (<= 0, nats) on every action token; else every
            log-prob is null and ``logprob_source='none'`` (action spans then may lack a version).
        with_actions: False gives a prompt + observation trajectory (stored, not trainable).
        reward: a float or None as given; ``"random"`` (default) draws a float or, 1 in 5, None.
        group_id: stored as given.

    Returns:
        A :class:`trajstore.Trajectory` that passes :func:`trajstore.validate.validate_trajectory`.
    """
    tid = trajectory_id or f"traj-{rng.integers(2**63):016x}"
    turns = int(rng.integers(1, 7)) if num_turns is None else num_turns
    tokens: list[np.ndarray] = []
    logprobs: list[np.ndarray] = []
    spans: list[Span] = []
    pos = 0
    version = int(rng.integers(0, 50))

    def add(kind: str, n: int, **extra: Any) -> None:
        nonlocal pos
        tokens.append(rng.integers(0, SMOLLM2_VOCAB_SIZE, size=n, dtype=np.int32))
        if kind == "action" and with_logprobs:
            logprobs.append((-rng.exponential(1.0, size=n)).astype(np.float32))
        else:
            logprobs.append(np.full(n, np.nan, dtype=np.float32))
        spans.append(Span(kind=kind, start=pos, end=pos + n, **extra))
        pos += n

    add("prompt", int(rng.integers(1, max_span_tokens + 1)), role="user")
    for turn in range(turns):
        if with_actions:
            version += int(rng.integers(0, 2))
            sp = SamplingParams(temperature=float(rng.choice([0.6, 1.0])), top_p=float(rng.choice([0.95, 1.0])),
                                top_k=int(rng.choice([-1, 50])), max_tokens=int(rng.integers(256, 4096)))
            add("action", int(rng.integers(1, max_span_tokens + 1)), role="assistant",
                policy_version=version if with_logprobs or rng.random() < 0.5 else None,
                call_id=f"call-{turn}", finish_reason=str(rng.choice(["stop", "length", "tool_calls"])),
                temperature=sp.temperature, top_p=sp.top_p, top_k=sp.top_k, max_tokens=sp.max_tokens,
                sampling_params=sp.to_json(), tool_call_ids=[f"tc-{turn}"])
        if not with_actions or turn < turns - 1 or rng.random() < 0.5:
            add("observation", int(rng.integers(1, max_span_tokens + 1)), role="tool",
                cause_id=f"tc-{turn}", truncated=bool(rng.random() < 0.1))
    if reward == "random":
        reward = None if rng.random() < 0.2 else float(rng.normal())
    created = datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=int(rng.integers(0, 10**12)))
    return Trajectory(
        trajectory_id=tid,
        prompt_id=f"prompt-{rng.integers(1000)}",
        group_id=group_id,
        source="sdk",
        model="test-policy",
        tokenizer="HuggingFaceTB/SmolLM2-135M-Instruct",
        created_at=created,
        status=str(rng.choice(["completed", "truncated", "aborted", "failed"])),
        reward=reward,
        reward_raw=None if reward is None else f"{reward!r}",
        token_source="engine",
        logprob_source="engine" if with_logprobs else "none",
        tokens=np.concatenate(tokens),
        action_logprobs=np.concatenate(logprobs),
        spans=spans,
        metadata={"seed_turns": turns, "tags": ["test", str(rng.integers(10))], "nested": {"x": 1.5}},
    )


def hand_built_pair() -> list[Trajectory]:
    """Two trajectories with known layouts (the schema-v2 tests write their expected values from these).

    h1: prompt [1, 2], action [3, 4, 5] lps [-0.5, NaN, -0.25] (v2; one token without an engine
        log-prob), observation [6], action [7] lp [-1.0] (v3).
        Action tokens: 3 + 1 = 4; stored action_logprobs = [-0.5, NaN, -0.25, -1.0]; missing = 1;
        span logprob_start: action 1 -> 0, action 2 -> 3.
    h2: prompt [9], action [10, 11] without log-probs (logprob_source none, no version).
        stored action_logprobs = [NaN, NaN]; missing = 2.
    """
    b = TrajectoryBuilder(trajectory_id="h1", group_id="g")
    b.add_prompt([1, 2])
    b.add_action([3, 4, 5], [-0.5, None, -0.25], policy_version=2)
    b.add_observation([6])
    b.add_action([7], [-1.0], policy_version=3)
    b.set_reward(1.0)
    h1 = b.finish()
    b = TrajectoryBuilder(trajectory_id="h2")
    b.add_prompt([9])
    b.add_action([10, 11], None, policy_version=None)
    h2 = b.finish()
    return [h1, h2]


def valid_record(**update: Any) -> dict[str, Any]:
    """The fields of a small valid trajectory as a dict (prompt [0, 1), action [1, 3) by version 0
    with log-probs -0.1 and -0.2, observation [3, 4)), with `update` applied: what the model and
    validation tests break one field at a time."""
    d: dict[str, Any] = dict(
        trajectory_id="hole", source="sdk", reward=1.0, tokens=[1, 2, 3, 4],
        action_logprobs=[math.nan, -0.1, -0.2, math.nan],
        spans=[dict(kind="prompt", start=0, end=1),
               dict(kind="action", start=1, end=3, policy_version=0),
               dict(kind="observation", start=3, end=4)])
    d.update(update)
    return d


def fat_trajectory(i: int, meta_bytes: int) -> Trajectory:
    """A 4-token trajectory ``fat-<i>`` whose metadata holds `meta_bytes` bytes (row-size tests)."""
    b = TrajectoryBuilder(trajectory_id=f"fat-{i}", metadata={"blob": "x" * meta_bytes})
    b.add_prompt([1, 2])
    b.add_action([3, 4], [-0.5, -0.25], policy_version=0)
    return b.finish()
