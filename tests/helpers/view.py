"""Helpers of the ``traj view`` tests: a store trained by a tiny run that recorded every token's
annotations, a store with a split episode and tool calls, and the app served by uvicorn in a
thread (for the browser tests)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from tests.helpers.stores import write_synthetic_store
from tests.helpers.trajectories import VOCAB
from trajstore import TrajectoryBuilder, write_trajectories
from trajstore.http.server import ServerThread
from trajstore.trainer.config import AlgoConfig, DataConfig, ModelConfig, RunConfig, TrainConfig

TRAINED_RUN = "r1"
NARROW_EPS = 0.02
"""DIS band of the trained store: narrow, so the tiny model's ratios fall on both sides of it."""


def write_trained_store(root: str | Path, n: int = 12) -> str:
    """`n` synthetic trajectories (ids t00000..), then a tiny-llama run ``r1`` (1 critic warm-up
    batch, then policy steps of 4 trajectories) that records every token's annotations."""
    from trajstore.trainer.loop.train import train

    write_synthetic_store(root, n, per_shard=4)
    train(TrainConfig(
        store=str(root), model=ModelConfig(name="tiny-llama", tiny_vocab_size=VOCAB),
        data=DataConfig(batch_size=4, micro_batch_size=2, max_seq_len=512),
        algo=AlgoConfig(critic_warmup_steps=1, eps_low=NARROW_EPS, eps_high=NARROW_EPS),
        run=RunConfig(run_id=TRAINED_RUN, checkpoint_every=100, progress=False, record_tokens=1.0)))
    return str(root)


def write_episode_store(root: str | Path) -> str:
    """Trajectories ``e1-p1``, ``e1-p2``, ``e1-p3`` (one episode split in 3 parts, metadata
    ``episode``; 10 + 12 + 14 tokens) and ``solo`` (its own episode; a tool call answered by an
    observation, and one left unanswered)."""
    trajs = []
    for part, n_obs in ((1, 1), (2, 3), (3, 5)):
        b = TrajectoryBuilder(trajectory_id=f"e1-p{part}", source="sdk",
                              metadata={"episode": {"id": "e1", "part": part, "parts": 3,
                                                    "change": None if part == 1 else "condensation"}})
        b.add_prompt(list(range(4)))
        b.add_action([5, 6, 7], [-0.1, -0.2, -0.3], policy_version=part)
        b.add_observation(list(range(10, 10 + n_obs)))
        b.add_action([8, 9], [-0.4, -0.5], policy_version=part)
        b.set_reward(float(part))
        trajs.append(b.finish())
    b = TrajectoryBuilder(trajectory_id="solo", source="other")
    b.add_prompt([1, 2])
    b.add_action([3, 4], [-1.0, -2.0], policy_version=0, call_id="call-a", tool_call_ids=["tc-1", "tc-2"])
    b.add_observation([5], cause_id="tc-1")
    b.add_action([6], [-3.0], policy_version=0, call_id="call-b")
    b.set_reward(None)
    trajs.append(b.finish("truncated"))
    write_trajectories(str(root), trajs)
    return str(root)


@contextlib.contextmanager
def serving(app) -> Iterator[str]:  # noqa: ANN001
    """Serve a Starlette app on 127.0.0.1 (any free port) in a thread; yields its base URL."""
    with ServerThread(app) as srv:
        yield srv.url
