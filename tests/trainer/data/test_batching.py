"""trainer/data/batching.py: rank splits are disjoint, micro-batches align and keep a token bound
and the order."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.helpers.stores import write_synthetic_store
from tests.helpers.trajectories import VOCAB
from trajstore import open_store
from trajstore.trainer.config import DataConfig
from trajstore.trainer.data import (
    DataCursor,
    TrajectoryStream,
    micro_batches,
    pack,
    split_for_rank,
    token_micro_batches,
)


class _S:
    def __init__(self, n: int) -> None:
        self.num_tokens = n


def test_token_micro_batches_never_exceed_the_bound_and_keep_order() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        lens = rng.integers(1, 100, int(rng.integers(0, 20))).tolist()
        bound, size = int(rng.integers(1, 250)), int(rng.integers(1, 5))
        samples = [_S(n) for n in lens]
        parts = token_micro_batches(samples, size, bound)
        assert [s for p in parts for s in p] == samples  # every trajectory once, in order
        for p in parts:
            assert 1 <= len(p) <= size
            assert sum(s.num_tokens for s in p) <= bound or len(p) == 1  # only a lone long one exceeds it
    assert [len(p) for p in token_micro_batches([_S(10)] * 5, 8, None)] == [5]


def _stream(root: str | Path, cursor: DataCursor | None = None, tokenizer: str = "tiny-llama", **cfg) -> TrajectoryStream:
    return TrajectoryStream(open_store(str(root)), DataConfig(**cfg), tokenizer=tokenizer, vocab_size=VOCAB,
                            cursor=cursor)


def test_rank_split_is_disjoint_and_micro_batches_align(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 7)
    samples = _stream(tmp_path, batch_size=7).next_batch().samples
    parts = [split_for_rank(samples, r, 3) for r in range(3)]
    ids = [s.trajectory_id for p in parts for s in p]
    assert sorted(ids) == sorted(s.trajectory_id for s in samples) and len(set(ids)) == 7
    mbs = micro_batches(parts[2], 2, 2)  # rank 2 has 2 samples -> one full, one empty micro-batch
    assert [len(m) for m in mbs] == [2, 0]
    assert pack([]).action_mask.sum() == 0


class _L:
    def __init__(self, tid: str, n: int, parent: str | None = None, link: str | None = None) -> None:
        self.trajectory_id, self.num_tokens, self.parent_trajectory_id, self.link_kind = tid, n, parent, link


def test_a_rank_gets_whole_chains_in_chain_order() -> None:
    # issue 23: p -> r (context rewrite) is one chain of 12 tokens, the longest unit: rank 0 gets it
    # whole, parts next to each other; a sub-agent child is a unit of its own
    batch = [_L("p", 5), _L("q", 9), _L("r", 7, "p", "context_rewrite"), _L("s", 8, "p", "subagent"),
             _L("t", 1)]
    shares = [[x.trajectory_id for x in split_for_rank(batch, r, 2)] for r in range(2)]
    assert shares == [["p", "r", "s"], ["q", "t"]]
    # without links: by length, as before
    plain = [_L(x.trajectory_id, x.num_tokens) for x in batch]
    assert [[x.trajectory_id for x in split_for_rank(plain, r, 2)] for r in range(2)] == [["q", "r", "t"], ["s", "p"]]
