"""`traj serve` reloads a published version of a model with tied embeddings (SmolLM2 ties its
LM head to the input embeddings). Publishing stores the tied tensor once, under
``lm_head.weight``; the server's loader refused the folder ("missing model.embed_tokens.weight"),
so in `traj demo` the proxy's weight sync failed on every poll and every episode ran on v0.
A version that does not match the served model is refused whole: the served weights stay bit-identical."""

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


def _publish_edited(store: str, version: int, model: torch.nn.Module, edit) -> str:
    """Publish `model` as version `version`, then rewrite its safetensors file with `edit(tensors)`
    applied (what a truncated or mismatched upload leaves); returns the folder."""
    import glob

    from safetensors.torch import load_file, save_file

    publish_policy(store, "r", version, model)
    path = open_store(store).path(f"policies/r/v{version}")
    (f,) = glob.glob(f"{path}/*.safetensors")
    tensors = load_file(f)
    edit(tensors)
    save_file(tensors, f, metadata={"format": "pt"})
    return path


def test_a_refused_version_leaves_the_served_weights_bit_identical(tmp_path):
    # A published version with a tensor missing, one of the wrong shape or of a
    # non-float dtype answered success: false and kept weight version "0", but
    # load_state_dict(strict=False) had already copied every matching tensor in place: later calls
    # were recorded as version 0 with log-probs up to 0.49 nats away from version 0's.
    from fastapi.testclient import TestClient

    from trajstore.trainer.serving.config import ServeConfig
    from trajstore.trainer.serving.engine import Engine
    from trajstore.trainer.serving.routes import create_app
    from trajstore.trainer.serving.state import ServeApp

    served, trained = _tiny(2, tied=True), _tiny(1, tied=True)  # tied, as SmolLM2
    before = {k: v.clone() for k, v in served.state_dict().items()}
    engine = Engine(served, eos_token_ids=[0], version="0")
    app = create_app(ServeApp(ServeConfig(model="tiny-llama"), None, engine, model_name="m", vocab_size=64,
                             max_model_len=128))
    store = str(tmp_path)
    down, q = "model.layers.0.mlp.down_proj.weight", "model.layers.0.self_attn.q_proj.weight"
    broken = {
        "missing": (down, lambda t: t.pop(down)),
        "shape": (q, lambda t: t.__setitem__(q, t[q][:8].contiguous())),  # (16, 16) published as (8, 16)
        "dtype": ("model.norm.weight", lambda t: t.__setitem__("model.norm.weight", t["model.norm.weight"].long())),
    }
    try:
        with TestClient(app) as client:
            for version, (case, (name, edit)) in enumerate(broken.items(), start=1):
                path = _publish_edited(store, version, trained, edit)
                r = client.post("/update_weights_from_disk", json={"model_path": path})
                body = r.json()
                assert r.status_code == 400 and body["success"] is False, (case, body)
                assert body["weight_version"] == "0" and name in body["message"], (case, body)
                assert client.get("/health").json()["weight_version"] == "0"
                for k, t in served.state_dict().items():  # not one tensor of the refused version copied in
                    assert torch.equal(t, before[k]), (case, k)
                assert served.lm_head.weight.data_ptr() == served.model.embed_tokens.weight.data_ptr()
            # a complete version still loads, whole
            path = _publish_edited(store, 4, trained, lambda t: None)
            body = client.post("/update_weights_from_disk", json={"model_path": path}).json()
            assert body["success"] is True and body["weight_version"] == "4", body
            assert client.get("/health").json()["weight_version"] == "4"
            for k, t in trained.state_dict().items():
                assert torch.equal(served.state_dict()[k], t), k
    finally:
        engine.close()
