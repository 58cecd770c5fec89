"""Synthetic stores for the trainer tests: multi-turn trajectories built with the writer SDK
(engine token ids, engine log-probs, a policy version per action) for the tiny random models."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from trajstore import TrajectoryBuilder, write_trajectories

VOCAB = 128
"""Vocabulary of the tiny test models; token ids are drawn below it."""


def make_trajectory(rng: np.random.Generator, *, trajectory_id: str, tokenizer: str = "tiny-llama",
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


def write_synthetic_store(root: str | Path, n: int, *, seed: int = 0, per_shard: int = 4, prefix: str = "t",
                          **kw) -> list[str]:
    """Write `n` trajectories in shards of `per_shard`; return the ids in arrival order."""
    rng = np.random.default_rng(seed)
    ids = []
    for start in range(0, n, per_shard):
        trajs = [make_trajectory(rng, trajectory_id=f"{prefix}{i:05d}", policy_versions=(max(0, i // 8 - 1), i // 8),
                                 **kw) for i in range(start, min(n, start + per_shard))]
        write_trajectories(str(root), trajs)
        ids += [t.trajectory_id for t in trajs]
    return ids
