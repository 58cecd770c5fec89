"""trajstore/export/areal.py: the padded tensor dict of the three-turn store, written by hand from
the table in tests/helpers/export.py, and batched / packed by AReaL's own functions."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.export import ROOT_LINEAGE, UNCHECKED, assert_tensors, export_as_torch, single_rows
from trajstore.export import ExportError, ExportOptions, export_store

F = np.float32

# L = 12 (t1's tokens); t2 = [14, 23] then 10 pads; its trailing observation [32] is dropped.
INPUT_IDS = [[11, 12, 13, 21, 22, 31, 41, 42, 43, 51, 52, 61], [14, 23] + [0] * 10]
ATTENTION = [[True] * 12, [True, True] + [False] * 10]
LOSS_MASK = [[0, 0, 0, 1, 1, 0, 1, 1, 1, 0, 0, 1], [0, 1] + [0] * 10]
LOGPROBS = [[0, 0, 0, F(-0.1), F(-0.2), 0, F(-0.3), F(-0.4), F(-0.5), 0, 0, F(-0.6)], [0, F(-0.7)] + [0] * 10]
VERSIONS = [[-1, -1, -1, 3, 3, -1, 4, 4, 4, -1, -1, 4], [-1, 5] + [0] * 10]  # -1 = not generated; pads 0


def test_areal_tensor_dict(store, tmp_path, read_out):
    out = tmp_path / "areal"
    export_store(store, "areal", str(out), UNCHECKED)
    t = read_out(out, "part-00000.safetensors")
    assert sorted(t) == ["attention_mask", "input_ids", "logprobs", "loss_mask", "rewards", "versions"]
    assert_tensors(t, np.int32, input_ids=INPUT_IDS, loss_mask=LOSS_MASK, versions=VERSIONS)
    assert_tensors(t, bool, attention_mask=ATTENTION)
    assert_tensors(t, np.float32, logprobs=LOGPROBS, rewards=[1.0, 0.5])
    assert read_out(out, "part-00000.rows.parquet") == {**ROOT_LINEAGE, "trajectory_id": ["t1", "t2"], "group_id": ["g1", "g1"],
                                                        "prompt_id": ["p1", "p1"]}


def test_areal_needs_logprobs_and_rewards(store, tmp_path):
    for field in ("logprobs", "rewards"):
        with pytest.raises(ExportError, match=rf"^invalid --without {field}: areal needs its {field}"):
            export_store(store, "areal", str(tmp_path / field),
                         ExportOptions(allow_secrets=True, without=frozenset({field})))


@pytest.mark.slow
def test_areal_batches_and_packs_the_export(store, tmp_path):
    data = pytest.importorskip("areal.utils.data", reason="areal is not installed")
    import torch

    batch = export_as_torch(store, tmp_path / "areal", "areal")
    # AReaL's own batching of the two one-row dicts an AReaL workflow would return gives the same padded batch
    joined = data.concat_padded_tensors(single_rows(batch))
    for k in batch:
        assert torch.equal(joined[k], batch[k]), k
    packed = data.pack_tensor_dict(dict(batch))  # what AReaL's engines feed the model: padding removed
    assert packed["cu_seqlens"].tolist() == [0, 12, 14]
    assert packed["input_ids"].tolist() == INPUT_IDS[0] + [14, 23]
    assert packed["versions"].tolist() == VERSIONS[0] + [-1, 5]
