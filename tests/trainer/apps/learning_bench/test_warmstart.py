"""trainer/apps/learning_bench/warmstart.py: saving a warm start prints no progress bar."""

from __future__ import annotations


def test_saving_a_warm_start_prints_no_transformers_progress_bar(tmp_path, monkeypatch, capfd):
    # `traj bench learning` printed "Writing model shards: 100%|██████████| 1/1" between its lines
    import transformers

    from trajstore.trainer.apps.learning_bench import warmstart

    tiny = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1))
    monkeypatch.setattr(warmstart, "train_warm_start", lambda seed, cfg: tiny)
    out = warmstart.ensure_warm_start(tmp_path, 0, warmstart.WarmStartConfig(steps=1))
    assert (out / "warmstart.json").is_file()
    captured = capfd.readouterr()
    assert "Writing model shards" not in captured.err + captured.out
