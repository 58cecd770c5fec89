"""A store of schema v1, v2, v3 and v4 shards, interleaved, with repeated trajectory ids whose later
copies have other rewards: what the README's engine recipes must read as trajstore does.

Shards in arrival order (shard names sort by write time), rows in order; ``*`` marks a later
copy (reward 100 + k, so a recipe that keeps one shows a reward >= 100):

    shard  version  rows
    1      v1       x0, x1 (a NaN log-prob), x2 (an action without log-probs), x3 (no action)
    2      v3       y0, x1*, y1, y1*            (a repeat inside one shard: row order decides)
    3      v2       z0 (a NaN log-prob), y0*, x0*
    4      v1       w0, z0*
    5      v4       w1, w0*

First copies: x0 x1 x2 x3 (v1), y0 y1 (v3), z0 (v2), w0 (v1), w1 (v4): 9 trajectories, 15 rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trajstore import TrajectoryBuilder
from trajstore.convert import trajectories_to_table
from trajstore.models import Trajectory
from trajstore.store import open_store

LAYOUT: tuple[tuple[int, tuple[str, ...]], ...] = (
    (1, ("x0", "x1", "x2", "x3")),
    (3, ("y0", "x1*", "y1", "y1*")),
    (2, ("z0", "y0*", "x0*")),
    (1, ("w0", "z0*")),
    (4, ("w1", "w0*")),
)
"""(schema version, row ids) per shard in arrival order; ``*`` marks a later copy."""

FIRST_COPY_VERSION = {"x0": 1, "x1": 1, "x2": 1, "x3": 1, "y0": 3, "y1": 3, "z0": 2, "w0": 1, "w1": 4}
"""Each trajectory's first copy: the schema version of the shard holding it (from :data:`LAYOUT`)."""

LATER_COPY_REWARD = 100.0
"""Later copies have reward 100 + k; first copies have rewards in [0, 1]."""


def _trajectory(rng: np.random.Generator, tid: str, reward: float) -> Trajectory:
    base = tid.rstrip("*")
    b = TrajectoryBuilder(trajectory_id=base, prompt_id=f"p-{base}", model="m", tokenizer="tiny")
    b.add_prompt(rng.integers(0, 100, int(rng.integers(2, 7))))
    if base == "x3":  # prompt and observation only: no action token (empty log-prob list)
        b.add_observation(rng.integers(0, 100, 3))
    else:
        for turn in range(int(rng.integers(1, 4))):
            n = int(rng.integers(2, 7))
            lps = -rng.exponential(1.0, n).astype(np.float32)
            if base in ("x1", "z0") and turn == 0:
                lps[1] = np.nan  # the engine gave no log-prob for this token
            b.add_action(rng.integers(0, 100, n), None if base == "x2" and turn == 0 else lps,
                         policy_version=turn)
            b.add_observation(rng.integers(0, 100, int(rng.integers(1, 4))))
    b.set_reward(reward)
    return b.finish()


def write_mixed_version_store(root: str | Path, *, seed: int = 0) -> None:
    """Write :data:`LAYOUT` at `root` (a new store)."""
    rng = np.random.default_rng(seed)
    store = open_store(str(root))
    later = 0
    for version, ids in LAYOUT:
        trajs = []
        for tid in ids:
            if tid.endswith("*"):
                later += 1
                reward = LATER_COPY_REWARD + later
            else:
                reward = float(rng.uniform(0.0, 1.0))
            trajs.append(_trajectory(rng, tid, reward))
        store.write_table(trajectories_to_table(trajs, version=version))
    assert [s.schema_version for s in store.list_shards(strict=True)] == [v for v, _ in LAYOUT]
