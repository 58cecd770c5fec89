"""trajstore/export/openrlhf.py: the Experience tensors of the three-turn store (the per-action ones
shifted by one), written by hand from the table in tests/helpers/export.py, and built into
OpenRLHF's own Experience."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.export import ROOT_LINEAGE, UNCHECKED, assert_tensors, export_as_torch, single_rows
from trajstore.export import export_store

F = np.float32

SEQUENCES = [[11, 12, 13, 21, 22, 31, 41, 42, 43, 51, 52, 61], [14, 23] + [0] * 10]
ATTENTION = [[1] * 12, [1, 1] + [0] * 10]
# position i describes token i + 1 (T - 1 = 11 positions): t1's tokens 1..11 are 12 13 A A o A A A o o A
ACTION_MASK = [[0, 0, 1, 1, 0, 1, 1, 1, 0, 0, 1], [1] + [0] * 10]
ROLLOUT_LOGPROBS = [[0, 0, F(-0.1), F(-0.2), 0, F(-0.3), F(-0.4), F(-0.5), 0, 0, F(-0.6)], [F(-0.7)] + [0] * 10]


def test_openrlhf_experience_tensors(store, tmp_path, read_out):
    out = tmp_path / "openrlhf"
    export_store(store, "openrlhf", str(out), UNCHECKED)
    t = read_out(out, "part-00000.safetensors")
    # response_length: from the first to the last action token
    assert_tensors(t, np.int64, sequences=SEQUENCES, attention_mask=ATTENTION, action_mask=ACTION_MASK,
                   response_length=[9, 1])
    assert_tensors(t, np.float32, rollout_log_probs=ROLLOUT_LOGPROBS, total_length=[12, 2], rewards=[1.0, 0.5])
    assert read_out(out, "part-00000.rows.parquet") == {**ROOT_LINEAGE,
        "trajectory_id": ["t1", "t2"], "action_ranges": [[[3, 5], [6, 9], [11, 12]], [[1, 2]]]}


@pytest.mark.slow
def test_openrlhf_experience_takes_the_export(store, tmp_path):
    experience = pytest.importorskip("openrlhf.trainer.ppo_utils.experience", reason="openrlhf is not installed")
    import torch

    tensors = export_as_torch(store, tmp_path / "openrlhf", "openrlhf")
    batch = experience.Experience(**tensors)
    # OpenRLHF's own concatenation of one-sample Experiences (as its generator makes them) pads them the same way
    singles = [experience.Experience(**row) for row in single_rows(tensors)]
    singles[1].action_mask = singles[1].action_mask[:, :1]
    singles[1].rollout_log_probs = singles[1].rollout_log_probs[:, :1]
    joined = experience.Experience.concat_experiences(singles, pad_token_id=0)
    for k in tensors:
        assert torch.equal(getattr(joined, k), getattr(batch, k)), k
