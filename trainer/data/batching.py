"""How a step's trajectories are divided: a disjoint share per data-parallel rank (whole chains of
an episode's parts, :mod:`~trajstore.trainer.data.episodes`), then micro-batches bounded by a
trajectory count (and a token count); trajectories are never split."""

from __future__ import annotations

from collections.abc import Sequence

from trajstore.trainer.data.episodes import episode_chains
from trajstore.trainer.data.samples import TrainSample


def split_for_rank(samples: Sequence[TrainSample], rank: int, world_size: int) -> list[TrainSample]:
    """This rank's disjoint share of a step: chains (an episode's parts joined by a context rewrite
    or a continuation, :func:`~trajstore.trainer.data.episodes.episode_chains`; a plain trajectory
    is a chain of one) sorted by length (longest first) are dealt round-robin, so ranks get similar
    token counts and a chain's parts stay on one rank, next to each other in chain order.
    Deterministic on every rank."""
    chains = episode_chains(samples)
    tokens = [sum(samples[i].num_tokens for i in c) for c in chains]
    order = sorted(range(len(chains)), key=lambda k: (-tokens[k], chains[k][0]))
    return [samples[i] for k in order[rank::world_size] for i in chains[k]]


def micro_batches(samples: Sequence[TrainSample], micro_batch_size: int, num_micro: int) -> list[list[TrainSample]]:
    """Split into exactly `num_micro` micro-batches of at most `micro_batch_size` trajectories
    (trailing ones may be empty so that every rank runs the same number of passes)."""
    out = [list(samples[i:i + micro_batch_size]) for i in range(0, len(samples), micro_batch_size)]
    if len(out) > num_micro:
        raise ValueError(f"{len(samples)} samples do not fit {num_micro} micro-batches of {micro_batch_size}")
    return out + [[] for _ in range(num_micro - len(out))]


def token_micro_batches(samples: Sequence[TrainSample], micro_batch_size: int, max_tokens: int | None) -> list[list[TrainSample]]:
    """Split in order into micro-batches of at most `micro_batch_size` trajectories and at most
    `max_tokens` tokens (None: no token bound); a trajectory longer than `max_tokens` goes alone
    (trajectories are never split). The step's loss is normalised by its global token or
    trajectory count, per trajectory also in a packed micro-batch, so how it is split does not
    change the update in any ``loss_agg`` mode (tests/trainer/test_aggregation.py,
    test_loop_invariants.py)."""
    out: list[list[TrainSample]] = []
    cur: list[TrainSample] = []
    n = 0
    for s in samples:
        if cur and (len(cur) >= micro_batch_size or (max_tokens is not None and n + s.num_tokens > max_tokens)):
            out.append(cur)
            cur, n = [], 0
        cur.append(s)
        n += s.num_tokens
    if cur:
        out.append(cur)
    return out

