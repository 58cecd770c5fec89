"""`traj serve` reloads a published version of a model with tied embeddings (SmolLM2 ties its
LM head to the input embeddings). Publishing stores the tied tensor once, under
``lm_head.weight``; the server's loader refused the folder ("missing model.embed_tokens.weight"),
so in `traj demo` the proxy's weight sync failed on every poll and every episode ran on v0."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from trajstore.store import open_store  # noqa: E402
from trajstore.trainer.loop.publish import publish_policy  # noqa: E402
from trajstore.trainer.serving.weights import WeightLoadError, load_weights_from_dir  # noqa: E402


def _tiny(seed: int, *, tied: bool) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=tied)
    return transformers.LlamaForCausalLM(cfg)


@pytest.mark.parametrize("tied", [True, False])
def test_serve_loads_a_published_version_whatever_name_the_tied_tensor_has(tmp_path, tied):
    trained, served = _tiny(1, tied=tied), _tiny(2, tied=tied)
    publish_policy(str(tmp_path), "r", 1, trained)
    load_weights_from_dir(served, open_store(str(tmp_path)).path("policies/r/v1"))
    for name, t in trained.state_dict().items():
        assert torch.equal(served.state_dict()[name], t), name
    if tied:  # still one tensor: the embeddings are the head
        assert served.lm_head.weight.data_ptr() == served.model.embed_tokens.weight.data_ptr()


def test_a_really_missing_tensor_is_still_refused(tmp_path):
    from safetensors.torch import save_file

    sd = {k: v.contiguous() for k, v in _tiny(1, tied=False).state_dict().items() if k != "model.norm.weight"}
    save_file(sd, str(tmp_path / "model.safetensors"))
    with pytest.raises(WeightLoadError, match="missing .*model.norm.weight"):
        load_weights_from_dir(_tiny(2, tied=False), str(tmp_path))


def test_a_tied_head_saved_under_the_embedding_name_loads(tmp_path):
    # from_pretrained's save_pretrained keeps model.embed_tokens.weight and drops lm_head.weight
    from safetensors.torch import save_file

    trained, served = _tiny(1, tied=True), _tiny(2, tied=True)
    save_file({k: v.contiguous() for k, v in trained.state_dict().items() if k != "lm_head.weight"},
              str(tmp_path / "model.safetensors"))
    load_weights_from_dir(served, str(tmp_path))
    assert torch.equal(served.lm_head.weight, trained.lm_head.weight)
