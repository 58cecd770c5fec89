"""trajstore/export/verl.py: the DataProto batch of the three-turn store, every tensor written by
hand from the table in tests/helpers/export.py, and the export loaded by verl's own DataProto."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.export import ROOT_LINEAGE, UNCHECKED, assert_tensors
from trajstore.export import ExportOptions, export_store

F = np.float32

# P = 3 (t1's prompt), R = 9 (t1: A1 A1 obs A2 A2 A2 obs obs A3); t2's trailing observation [32] is dropped.
PROMPTS = [[11, 12, 13], [0, 0, 14]]                                    # left-padded
RESPONSES = [[21, 22, 31, 41, 42, 43, 51, 52, 61], [23, 0, 0, 0, 0, 0, 0, 0, 0]]  # right-padded
RESPONSE_MASK = [[1, 1, 0, 1, 1, 1, 0, 0, 1], [1, 0, 0, 0, 0, 0, 0, 0, 0]]
ATTENTION = [[1] * 12, [0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0]]
# clip(cumsum(attention) - 1, 0): t2's pads before its prompt are 0, those after its response repeat 1
POSITIONS = [list(range(12)), [0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1]]
LOGPROBS = [[F(-0.1), F(-0.2), 0, F(-0.3), F(-0.4), F(-0.5), 0, 0, F(-0.6)], [F(-0.7), 0, 0, 0, 0, 0, 0, 0, 0]]
RM_SCORES = [[0] * 8 + [1.0], [0.5] + [0] * 8]  # on the last real response token (= the last action token)


def test_verl_batch_layout(store, tmp_path, read_out):
    out = tmp_path / "verl"
    export_store(store, "verl", str(out), UNCHECKED)
    t = read_out(out, "part-00000.safetensors")
    assert sorted(t) == ["attention_mask", "input_ids", "position_ids", "prompts", "response_mask", "responses",
                         "rm_scores", "rollout_log_probs"]
    assert_tensors(t, np.int64, prompts=PROMPTS, responses=RESPONSES, response_mask=RESPONSE_MASK,
                   input_ids=[p + r for p, r in zip(PROMPTS, RESPONSES)], attention_mask=ATTENTION,
                   position_ids=POSITIONS)
    assert_tensors(t, np.float32, rollout_log_probs=LOGPROBS, rm_scores=RM_SCORES)
    nt = read_out(out, "part-00000.non_tensor.parquet")
    assert nt == {**ROOT_LINEAGE, "uid": ["g1", "g1"], "trajectory_id": ["t1", "t2"], "__num_turns__": [6, 2],
                  "min_global_steps": [3, 5], "max_global_steps": [4, 5]}
    manifest = read_out(out, ".trajstore/export.json")
    assert manifest["approximations"] == {"trailing observation tokens dropped": 1}
    assert manifest["fields"] == {"logprobs": "rollout_log_probs", "rewards": "rm_scores",
                                  "versions": "min/max_global_steps"}


def test_verl_without_fields_leaves_them_out(store, tmp_path, read_out):
    out = tmp_path / "verl"
    export_store(store, "verl", str(out), ExportOptions(allow_secrets=True, pad_token_id=7,
                                                       without=frozenset({"logprobs", "rewards", "versions"})))
    t = read_out(out, "part-00000.safetensors")
    assert set(t) == {"prompts", "responses", "response_mask", "input_ids", "attention_mask", "position_ids"}
    assert t["prompts"][1].tolist() == [7, 7, 14] and t["responses"][1].tolist() == [23] + [7] * 8
    assert set(read_out(out, "part-00000.non_tensor.parquet")) == {"uid", "trajectory_id", "__num_turns__", *ROOT_LINEAGE}


@pytest.mark.slow
def test_verl_dataproto_loads_the_export(store, tmp_path):
    verl = pytest.importorskip("verl", reason="verl is not installed (it pulls ray; see README, traj export)")
    import pyarrow.parquet as pq
    from safetensors.torch import load_file

    out = tmp_path / "verl"
    export_store(store, "verl", str(out), UNCHECKED)
    nt = {k: np.array(v, dtype=object) for k, v in pq.read_table(out / "part-00000.non_tensor.parquet")
          .to_pydict().items()}
    batch = verl.DataProto.from_dict(tensors=load_file(str(out / "part-00000.safetensors")), non_tensors=nt)
    assert len(batch) == 2
    first, second = batch.chunk(2)  # verl's own split keeps each sample's tensors and non-tensors together
    assert second.batch["responses"][0].tolist() == RESPONSES[1]
    assert second.non_tensor_batch["trajectory_id"].tolist() == ["t2"]
    assert first.batch["rollout_log_probs"][0].tolist() == np.array(LOGPROBS[0], np.float32).tolist()
    assert first.non_tensor_batch["min_global_steps"].tolist() == [3]
