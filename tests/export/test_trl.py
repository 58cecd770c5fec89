"""trajstore/export/trl.py: the rollout_func output of the three-turn store, written by hand from
the table in tests/helpers/export.py, and served to TRL's own GRPOTrainer through a rollout_func
(a tiny random model and a word-level tokenizer built here: nothing is downloaded)."""

from __future__ import annotations

import pytest

from tests.helpers.export import RESPONSE_LOGPROBS, ROOT_LINEAGE, UNCHECKED, response_window
from trajstore.export import ExportOptions, export_store


def test_trl_rollout_func_output(store, tmp_path, read_out):
    out = tmp_path / "trl"
    export_store(store, "trl", str(out), UNCHECKED)
    assert read_out(out, "part-00000.parquet") == {**ROOT_LINEAGE,
        **response_window(prompt="prompt_ids", response="completion_ids", mask="env_mask", logprobs="logprobs"),
        "trajectory_id": ["t1", "t2"],
        "reward": [1.0, 0.5],
    }


def test_trl_carries_no_versions(store, tmp_path):
    from trajstore.export import ExportError

    with pytest.raises(ExportError, match=r"^invalid --without versions: trl writes no versions$"):
        export_store(store, "trl", str(tmp_path / "trl"),
                     ExportOptions(allow_secrets=True, without=frozenset({"versions"})))


@pytest.mark.slow
def test_grpo_trainer_takes_the_export_from_a_rollout_func(store, tmp_path, read_out, monkeypatch):
    trl = pytest.importorskip("trl", reason="trl is not installed (pip install 'trajstore[export-check]')")
    datasets = pytest.importorskip("datasets")
    from tokenizers import Tokenizer, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    out = tmp_path / "trl"
    export_store(store, "trl", str(out), UNCHECKED)
    rows = read_out(out, "part-00000.parquet")

    def rollout_func(prompts, trainer):
        return {k: v[:len(prompts)] for k, v in rows.items()}

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({f"t{i}": i for i in range(100)},
                                                                             unk_token="t0")),
                                  pad_token="t0", eos_token="t1")
    model = LlamaForCausalLM(LlamaConfig(vocab_size=100, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    args = trl.GRPOConfig(output_dir=str(tmp_path / "run"), per_device_train_batch_size=2, num_generations=2,
                          max_steps=1, report_to=[], use_cpu=True, bf16=False)
    trainer = trl.GRPOTrainer(model=model, reward_funcs=[lambda completions, reward, **kw: reward], args=args,
                              train_dataset=datasets.Dataset.from_dict({"prompt": ["a", "b"]}), processing_class=tok,
                              rollout_func=rollout_func)
    batch = trainer._generate_and_score_completions([{"prompt": "a"}, {"prompt": "a"}])
    # TRL pads the lists itself: prompts left with the pad id (0), completions right
    assert batch["prompt_ids"].tolist() == [[11, 12, 13], [0, 0, 14]]
    assert batch["completion_ids"].tolist() == [[21, 22, 31, 41, 42, 43, 51, 52, 61], [23] + [0] * 8]
    assert batch["completion_mask"].tolist() == [[1] * 9, [1] + [0] * 8]
    assert batch["tool_mask"][0].tolist() == [1, 1, 0, 1, 1, 1, 0, 0, 1]  # env_mask: observations masked out
    assert batch["sampling_per_token_logps"].tolist() == [RESPONSE_LOGPROBS[0], [RESPONSE_LOGPROBS[1][0]] + [0.0] * 8]
    # the stored rewards reach the reward function: one group of 2, rewards 1.0 and 0.5 -> advantages +-std-normalised
    assert batch["advantages"].tolist() == pytest.approx([0.7071, -0.7071], abs=1e-3)
