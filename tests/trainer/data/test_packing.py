"""trainer/data/packing.py: packed rows use the prediction frame; GAE inputs to rows and back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers.stores import write_synthetic_store
from tests.helpers.trajectories import VOCAB
from trajstore import open_store
from trajstore.sampling import no_truncation
from trajstore.trainer.config import DataConfig
from trajstore.trainer.data import DataCursor, TrainSample, TrajectoryStream, gae_inputs, pack, to_packed, to_rows


def _stream(root: str | Path, cursor: DataCursor | None = None, tokenizer: str = "tiny-llama", **cfg) -> TrajectoryStream:
    return TrajectoryStream(open_store(str(root)), DataConfig(**cfg), tokenizer=tokenizer, vocab_size=VOCAB,
                            cursor=cursor)


def _sample(tid: str, action_mask: list[bool], reward: float) -> TrainSample:
    t = len(action_mask)
    mask = np.array(action_mask)
    return TrainSample(trajectory_id=tid, group_id=None, shard="s", row=0, tokens=np.arange(t, dtype=np.int64),
                       rollout_logprobs=np.where(mask, -0.5, np.nan).astype(np.float32), action_mask=mask,
                       policy_version=np.where(mask, 0, -1).astype(np.int64), sampling=no_truncation(t),
                       reward=reward, needs_behaviour=False, cursor=DataCursor())


def test_pack_uses_the_prediction_frame(tmp_path: Path) -> None:
    write_synthetic_store(tmp_path, 2)
    a, b = _stream(tmp_path).next_batch().samples
    mb = pack([a, b])
    L = a.num_tokens + b.num_tokens
    assert mb.input_ids.shape == (1, L) and mb.segments.tolist() == [0, a.num_tokens, L]
    # position p predicts token p+1 of the same trajectory
    assert mb.targets[0, : a.num_tokens - 1].tolist() == a.tokens[1:].tolist()
    assert mb.action_mask[0, : a.num_tokens - 1].tolist() == a.action_mask[1:].tolist()
    assert not mb.action_mask[0, a.num_tokens - 1] and not mb.action_mask[0, L - 1]
    assert mb.position_ids[0, a.num_tokens].item() == 0
    first_act = int(np.argmax(a.action_mask))
    assert mb.rollout_logprobs[0, first_act - 1].item() == pytest.approx(float(a.rollout_logprobs[first_act]))
    assert int(mb.action_mask.sum()) == a.num_action_tokens + b.num_action_tokens


def test_gae_inputs_rows_and_back() -> None:
    # token masks [0 1 1 0 1] and [0 1 0]; in the prediction frame (shifted left by one, last
    # slot never an action) the action slots are [1 1 0 1 0] and [1 0 0]: the last action slot
    # is 3 in row 0 and 0 in row 1, where the rewards go
    a, b = _sample("a", [False, True, True, False, True], 2.0), _sample("b", [False, True, False], -1.0)
    mb = pack([a, b])
    values = torch.arange(1.0, 9.0).unsqueeze(0)  # (1, 8)
    x = gae_inputs(mb, [a, b], values)
    assert x.action_mask.tolist() == [[True, True, False, True, False], [True, False, False, False, False]]
    assert x.rewards.tolist() == [[0, 0, 0, 2.0, 0], [-1.0, 0, 0, 0, 0]]
    assert x.rewards.dtype == torch.float32
    assert x.values.tolist() == [[1, 2, 3, 4, 5], [6, 7, 8, 0, 0]]
    assert torch.equal(to_packed(x.values, mb.segments), values)
    assert torch.equal(to_rows(mb.input_ids, mb.segments), torch.tensor([[0, 1, 2, 3, 4], [0, 1, 2, 0, 0]]))
    # a row without an action slot gets no reward; the dummy micro-batch of an idle rank too
    c = _sample("c", [True, False], 5.0)  # its only action token is position 0: no action slot
    assert gae_inputs(pack([c]), [c], torch.zeros(1, 2)).rewards.tolist() == [[0.0, 0.0]]
    assert gae_inputs(pack([]), [], torch.zeros(1, 1)).rewards.tolist() == [[0.0]]
