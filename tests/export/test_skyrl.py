"""trajstore/export/skyrl.py: the GeneratorOutput lists of the three-turn store, written by hand
from the table in tests/helpers/export.py, and padded by SkyRL's own
convert_prompts_responses_to_batch_tensors."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.helpers.export import RESPONSE_LOGPROBS, ROOT_LINEAGE, UNCHECKED, response_window
from trajstore.export import export_store


def test_skyrl_generator_output(store, tmp_path, read_out):
    out = tmp_path / "skyrl"
    export_store(store, "skyrl", str(out), UNCHECKED)
    assert read_out(out, "part-00000.parquet") == {**ROOT_LINEAGE,
        **response_window(prompt="prompt_token_ids", response="response_ids", mask="loss_masks",
                          logprobs="rollout_logprobs"),
        "stop_reasons": ["stop", "length"],
        "instance_id": ["p1", "p1"], "repetition_id": [0, 1],
        "trajectory_id": ["t1", "t2"],
        "rewards": [1.0, 0.5],
        "global_step_when_scheduled": [3, 5],  # the oldest version of each trajectory's calls
    }


@pytest.mark.slow
def test_skyrl_pads_the_export_for_training(store, tmp_path, read_out):
    preprocess = pytest.importorskip("skyrl.train.dataset.preprocess", reason="skyrl is not installed")
    out = tmp_path / "skyrl"
    export_store(store, "skyrl", str(out), UNCHECKED)
    g = read_out(out, "part-00000.parquet")
    # its first argument is the tokenizer in skyrl 0.3.0 (only its pad_token_id is read), the pad id in later SkyRL
    seqs, attention, response_mask, rewards, loss_masks, logprobs, _ = preprocess.convert_prompts_responses_to_batch_tensors(
        SimpleNamespace(pad_token_id=0), g["prompt_token_ids"], g["response_ids"], [[0.0] * (len(r) - 1) + [x] for r, x in
                                                        zip(g["response_ids"], g["rewards"])],
        g["loss_masks"], g["rollout_logprobs"])
    # SkyRL left-pads prompt + response as one block and right-aligns the response-level tensors
    assert seqs.tolist() == [[11, 12, 13, 21, 22, 31, 41, 42, 43, 51, 52, 61], [0] * 10 + [14, 23]]
    assert attention.tolist() == [[1] * 12, [0] * 10 + [1, 1]]
    assert response_mask.tolist() == [[1] * 9, [0] * 8 + [1]]
    assert loss_masks.tolist() == [[1, 1, 0, 1, 1, 1, 0, 0, 1], [0] * 8 + [1]]
    assert logprobs.tolist() == [RESPONSE_LOGPROBS[0], [0.0] * 8 + [RESPONSE_LOGPROBS[1][0]]]
    assert rewards.tolist() == [[0.0] * 8 + [1.0], [0.0] * 8 + [0.5]]
