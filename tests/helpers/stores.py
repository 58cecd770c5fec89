"""Stores with known contents for the tests.

:func:`write_synthetic_store` writes :func:`tests.helpers.trajectories.tiny_model_trajectory`
trajectories in shards, for the trainer tests.

:func:`write_big_v1_store` writes schema-v1 shards (what ``traj migrate`` rewrites).

:func:`write_split_episode_store` writes episodes stored as linked trajectories (schema v3
lineage): a part, its context-rewrite successor and a sub-agent, for the trainer tests.

:func:`build_lineage_store` writes episodes of linked trajectories with hand-chosen sizes for the
lineage audit tests (its docstring has the table).

:func:`listing_returns_after_invalidation` makes an object store's listing cache go stale the way a
concurrent listing does (another thread's, stored after a write's invalidation).

:func:`build_known_store` writes a store with hand-chosen contents for the audit tests (expected
numbers are derived by hand in the tests from the table below, never from the code under test):

trajectories (shard 1, in this order), tokens per span, action spans with policy version v:

    id  source     status     reward  spans                                          versions
    A   sdk        completed   1.0    prompt 2, act 3 (v5), obs 2, act 1 (v7)         5..7
    B   sdk        truncated   0.0    prompt 1, act 2 (v6)                             6
    C   openhands  completed  -1.0    prompt 1, act 4 (v4), obs 3, act 2 (v4)          4
    D   openhands  failed      None   prompt 2, act 2 (v3, no lp), act 1 (no v, no lp) 3
    E   sdk        aborted     None   prompt 3, obs 2 (no actions: not trainable)      -
    F   sdk        completed   0.5    prompt 1, act 2 (v6), act 3 (v8)                 6..8

shard 2: a second copy of B (v1, reward 9.0): readers must ignore it.

runs/r1/consumed: step 0 (trainer v8): A, B; step 1 (trainer v9): C.
runs/r2/consumed: step 0 (trainer v10): A.
runs/r1/steps: step 0: policy/loss 0.5, ratio/masked_below 0.1; step 1: policy/loss 0.4.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import trajstore as ts
from tests.helpers.trajectories import tiny_model_trajectory
from trajstore import TrajectoryBuilder, write_trajectories
from trajstore.convert import trajectories_to_table
from trajstore.schema import CONSUMED_SCHEMA, STEP_SCHEMA
from trajstore.store import Store, open_store


def write_synthetic_store(root: str | Path, n: int, *, seed: int = 0, per_shard: int = 4, prefix: str = "t",
                          **kw) -> list[str]:
    """Write `n` trajectories in shards of `per_shard`; return the ids in arrival order."""
    rng = np.random.default_rng(seed)
    ids = []
    for start in range(0, n, per_shard):
        trajs = [tiny_model_trajectory(rng, trajectory_id=f"{prefix}{i:05d}",
                                       policy_versions=(max(0, i // 8 - 1), i // 8), **kw)
                 for i in range(start, min(n, start + per_shard))]
        write_trajectories(str(root), trajs)
        ids += [t.trajectory_id for t in trajs]
    return ids


def split_episode(rng: np.random.Generator, k: int, *, reward: float | None = None) -> list[ts.Trajectory]:
    """Episode ``ep<k>`` as the proxy stores a context rewrite and a sub-agent:

    * ``ep<k>.0`` (root): a prompt and 2 turns;
    * ``ep<k>.1``: its ``context_rewrite`` successor: a prompt of the root's first 4 tokens and 3
      new ones (a summary), then 2 turns; ``fork_point`` 4;
    * ``ep<k>.2``: a ``subagent`` child of the root with its own prompt and 1 turn; ``fork_point`` 0.

    Every part carries the episode's reward (0 or 1 at random, or `reward`)."""
    r = float(rng.integers(0, 2)) if reward is None else reward
    root = tiny_model_trajectory(rng, trajectory_id=f"ep{k}.0", num_turns=2, reward=r)
    b = TrajectoryBuilder(trajectory_id=f"ep{k}.1", prompt_id=root.prompt_id, model="tiny", tokenizer="tiny-llama")
    b.add_prompt(np.concatenate([root.tokens[:4], rng.integers(0, 128, 3)]))
    for turn in range(2):
        b.add_action(rng.integers(0, 128, 4), np.full(4, -4.8), policy_version=0, sampling={"temperature": 1.0})
        if turn == 0:
            b.add_observation(rng.integers(0, 128, 3))
    b.set_reward(r)
    rewrite = b.finish()
    sub = tiny_model_trajectory(rng, trajectory_id=f"ep{k}.2", num_turns=1, reward=r)
    ep = f"ep{k}"
    return [root.model_copy(update={"episode_id": ep}),
            rewrite.model_copy(update={"episode_id": ep, "parent_trajectory_id": root.trajectory_id,
                                       "fork_point": 4, "link_kind": "context_rewrite"}),
            sub.model_copy(update={"episode_id": ep, "parent_trajectory_id": root.trajectory_id,
                                   "fork_point": 0, "link_kind": "subagent"})]


def write_split_episode_store(root: str | Path, n: int, *, seed: int = 0, per_shard: int = 2) -> list[str]:
    """:func:`split_episode` ``ep0`` ... ``ep<n-1>``, `per_shard` episodes a shard; the ids in arrival order."""
    rng = np.random.default_rng(seed)
    ids = []
    for start in range(0, n, per_shard):
        trajs = [t for k in range(start, min(n, start + per_shard)) for t in split_episode(rng, k)]
        write_trajectories(str(root), trajs)
        ids += [t.trajectory_id for t in trajs]
    return ids


def write_big_v1_store(uri: str, n_shards: int, tokens: int, seed: int = 0) -> pa.Table:
    """`n_shards` v1 shards of 2 trajectories each (``tokens`` action tokens, some without
    log-probs); returns the same rows encoded directly as v2 (what migration must produce)."""
    rng = np.random.default_rng(seed)
    store = open_store(uri)
    everything = []
    for k in range(n_shards):
        trajs = []
        for j in range(2):
            b = TrajectoryBuilder(trajectory_id=f"m{k}-{j}", group_id=f"g{k}")
            b.add_prompt(rng.integers(0, 49152, 50))
            b.add_action(rng.integers(0, 49152, tokens), -rng.exponential(1.0, tokens).astype(np.float32),
                         policy_version=k)
            b.add_observation(rng.integers(0, 49152, 20))
            b.add_action(rng.integers(0, 49152, 30), None if j else -rng.exponential(1.0, 30), policy_version=k)
            b.set_reward(float(j))
            trajs.append(b.finish())
        store.write_table(trajectories_to_table(trajs, version=1))
        everything += trajs
    assert [s.schema_version for s in store.list_shards(strict=True)] == [1] * n_shards
    return trajectories_to_table(everything)


# -- the known store of the audit tests ----------------------------------------------------------

T0 = datetime(2026, 7, 1, tzinfo=timezone.utc)


def layout_trajectory(tid: str, source: str, status: str, reward: float | None,
                      layout: list[tuple[str, int, int | None, bool]]) -> ts.Trajectory:
    """layout: (kind, num_tokens, policy_version, with_logprobs) per span."""
    b = ts.TrajectoryBuilder(trajectory_id=tid, source=source, prompt_id=f"p-{tid}")
    tok = 10
    for kind, n, version, lp in layout:
        ids = list(range(tok, tok + n))
        tok += n
        if kind == "prompt":
            b.add_prompt(ids)
        elif kind == "observation":
            b.add_observation(ids)
        else:
            b.add_action(ids, [-0.5] * n if lp else None, policy_version=version)
    b.set_reward(reward)
    return b.finish(status, created_at=T0)


KNOWN = {  # id: layout_trajectory's (source, status, reward, layout)
    "A": ("sdk", "completed", 1.0, [("prompt", 2, None, False), ("action", 3, 5, True),
                                    ("observation", 2, None, False), ("action", 1, 7, True)]),
    "B": ("sdk", "truncated", 0.0, [("prompt", 1, None, False), ("action", 2, 6, True)]),
    "C": ("openhands", "completed", -1.0, [("prompt", 1, None, False), ("action", 4, 4, True),
                                           ("observation", 3, None, False), ("action", 2, 4, True)]),
    "D": ("openhands", "failed", None, [("prompt", 2, None, False), ("action", 2, 3, False),
                                        ("action", 1, None, False)]),
    "E": ("sdk", "aborted", None, [("prompt", 3, None, False), ("observation", 2, None, False)]),
    "F": ("sdk", "completed", 0.5, [("prompt", 1, None, False), ("action", 2, 6, True), ("action", 3, 8, True)]),
}


def consumed_row(run: str, step: int, tv: int, tid: str, vmin: int, vmax: int, n: int,
                 below: float, above: float, ratio: float) -> dict[str, Any]:
    return dict(run_id=run, step=step, trainer_version=tv, trajectory_id=tid, rank=0, min_policy_version=vmin,
                max_policy_version=vmax, staleness_min=tv - vmax, staleness_max=tv - vmin, num_action_tokens=n,
                masked_below=below, masked_above=above, ratio_mean=ratio, consumed_at=T0)


def build_known_store(uri: str, storage_options: dict[str, Any] | None = None) -> Store:
    """Write the known store (this module's docstring) at `uri`; the store."""
    store = open_store(uri, storage_options=storage_options)
    ts.write_trajectories(store, [layout_trajectory(t, *KNOWN[t]) for t in "ABCDEF"])
    ts.write_trajectories(store, [layout_trajectory("B", "sdk", "completed", 9.0,
                                                    [("prompt", 1, None, False), ("action", 2, 1, True)])])
    r1 = [consumed_row("r1", 0, 8, "A", 5, 7, 4, 0.25, 0.0, 1.1), consumed_row("r1", 0, 8, "B", 6, 6, 2, 0.0, 0.5, 0.9),
          consumed_row("r1", 1, 9, "C", 4, 4, 6, 0.5, 1 / 6, 1.0)]
    store.write_table(pa.Table.from_pylist(r1[:2], schema=CONSUMED_SCHEMA), subdir="runs/r1/consumed")
    store.write_table(pa.Table.from_pylist(r1[2:], schema=CONSUMED_SCHEMA), subdir="runs/r1/consumed")
    store.write_table(pa.Table.from_pylist([consumed_row("r2", 0, 10, "A", 5, 7, 4, 0.5, 0.25, 1.2)],
                                           schema=CONSUMED_SCHEMA), subdir="runs/r2/consumed")
    steps = [dict(run_id="r1", step=0, trainer_version=8, wall_time=T0, metric="policy/loss", value=0.5),
             dict(run_id="r1", step=0, trainer_version=8, wall_time=T0, metric="ratio/masked_below", value=0.1),
             dict(run_id="r1", step=1, trainer_version=9, wall_time=T0, metric="policy/loss", value=0.4)]
    store.write_table(pa.Table.from_pylist(steps, schema=STEP_SCHEMA), subdir="runs/r1/steps")
    return store


LINEAGE = {  # id: (episode, parent, link_kind, fork_point, status, reward, [(kind, tokens)])
    "r": ("E1", None, None, None, "completed", 1.0, [("prompt", 3), ("action", 2), ("observation", 1), ("action", 2)]),
    "s": ("E1", "r", "subagent", 2, "completed", 1.0, [("prompt", 4), ("action", 3)]),
    "w": ("E1", "r", "context_rewrite", 3, "aborted", 1.0, [("prompt", 5), ("action", 1)]),
    "c": ("E1", "w", "continuation", 6, "completed", 1.0, [("prompt", 6), ("action", 2)]),
    "p": (None, None, None, None, "completed", 0.0, [("prompt", 2), ("action", 2)]),
    "f": ("E3", None, None, None, "completed", 0.5, [("prompt", 2), ("action", 1), ("observation", 1), ("action", 1)]),
    "g": ("E3", "f", "fork", 4, "truncated", 0.5, [("prompt", 5), ("action", 2)]),
}
"""The lineage store of :func:`build_lineage_store`, written in this order, one second apart."""


def build_lineage_store(uri: str) -> Store:
    """Write the trajectories of :data:`LINEAGE` (source ``sdk``; ``p`` names no episode: its own)
    and consumption records of run ``r1`` for ``r``, ``s``, ``w`` and ``c`` (step 0, trainer v1,
    actions at v0); the store.

    Lineages by hand: E1 = {r, w, c} (r -> w context rewrite -> c continuation) and {s}
    (sub-agent); E2 = p's own episode {p}; E3 = {f} and {g} (fork). Tokens: r 8, s 7, w 6, c 8,
    p 4, f 5, g 7 (45); shared prefixes (fork points of the children): s 2, w 3, c 6, g 4 (15).
    """
    from trajstore.store.layout import run_consumed_dir

    store = open_store(uri)
    trajs = []
    for i, (tid, (ep, parent, link, fork, status, reward, spans)) in enumerate(LINEAGE.items()):
        b = TrajectoryBuilder(trajectory_id=tid, model="m", tokenizer="tok")
        for kind, n in spans:
            ids = np.arange(n) + 10 * i
            if kind == "action":
                b.add_action(ids, np.full(n, -0.5), policy_version=0)
            elif kind == "prompt":
                b.add_prompt(ids)
            else:
                b.add_observation(ids)
        b.set_reward(reward)
        t = b.finish(status, created_at=datetime(2026, 1, 1, 0, 0, i, tzinfo=timezone.utc))
        trajs.append(t.model_copy(update={"episode_id": ep, "parent_trajectory_id": parent, "fork_point": fork,
                                          "link_kind": link}))
    ts.write_trajectories(store, trajs)
    n_act = {tid: sum(n for k, n in v[6] if k == "action") for tid, v in LINEAGE.items()}
    rows = [consumed_row("r1", 0, 1, tid, 0, 0, n_act[tid], 0.0, 0.0, 1.0) for tid in "rswc"]
    store.write_table(pa.Table.from_pylist(rows, schema=CONSUMED_SCHEMA), subdir=run_consumed_dir("r1"))
    return store


def listing_returns_after_invalidation(store: Store, monkeypatch: Any, subdir: str) -> None:
    """From now on, every ``invalidate_cache`` call on `store`'s (s3fs) filesystem puts back the listing
    of `subdir` taken now: what a listing another thread started before a write or a delete, and
    stored in the shared fsspec instance's cache after it, does (s3fs answers ``info``, ``size`` and
    ``exists`` from the parent's cached listing)."""
    base = store.path(subdir)
    old = store.fs.ls(base, detail=True, refresh=True)
    invalidate = store.fs.invalidate_cache

    def and_the_old_listing_comes_back(path: str | None = None) -> None:
        invalidate(path)
        store.fs.dircache[base] = old

    monkeypatch.setattr(store.fs, "invalidate_cache", and_the_old_listing_comes_back)

