"""`traj serve` never labels answers with a version that does not describe its weights: a reload
that names no version (none in the request, no meta.json in the folder) is refused, as is a
folder holding a NaN or inf tensor; the served weights and label stay as they were."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from safetensors.torch import save_file  # noqa: E402

from trajstore.trainer.serving.config import ServeConfig  # noqa: E402
from trajstore.trainer.serving.engine import Engine  # noqa: E402
from trajstore.trainer.serving.routes import create_app  # noqa: E402
from trajstore.trainer.serving.state import ServeApp  # noqa: E402


def _tiny(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=False)
    return transformers.LlamaForCausalLM(cfg)


def _folder(path, model: torch.nn.Module, edit=None) -> str:
    """A bare Hugging Face weights folder (no meta.json), `edit` applied to its tensors."""
    os.makedirs(path, exist_ok=True)
    tensors = {k: v.contiguous().clone() for k, v in model.state_dict().items()}
    if edit is not None:
        edit(tensors)
    save_file(tensors, os.path.join(path, "model.safetensors"))
    return str(path)


@pytest.fixture
def served():
    from fastapi.testclient import TestClient

    model = _tiny(2)
    engine = Engine(model, eos_token_ids=[0], version="0")
    app = create_app(ServeApp(ServeConfig(model="tiny-llama"), None, engine, model_name="m", vocab_size=64,
                             max_model_len=128))
    try:
        with TestClient(app) as client:
            yield model, client
    finally:
        engine.close()


def _unchanged(model, before) -> bool:
    return all(torch.equal(t, before[k]) for k, t in model.state_dict().items())


def test_a_reload_without_any_version_is_refused(served, tmp_path):
    # Answered success with weight_version "0" while the outputs changed: the proxy recorded the
    # new weights' calls as v0
    model, client = served
    before = {k: v.clone() for k, v in model.state_dict().items()}
    path = _folder(tmp_path / "hf", _tiny(1))
    r = client.post("/update_weights_from_disk", json={"model_path": path})
    body = r.json()
    assert r.status_code == 400 and body["success"] is False and body["weight_version"] == "0", body
    assert "weight_version" in body["message"] and "meta.json" in body["message"]
    assert client.get("/health").json()["weight_version"] == "0" and _unchanged(model, before)
    body = client.post("/update_weights_from_disk", json={"model_path": path, "weight_version": "7"}).json()
    assert body["success"] is True and body["weight_version"] == "7", body  # named: loaded under its name


def test_a_nan_weight_is_refused_naming_the_tensor(served, tmp_path):
    # accepted, after which every call answered 500
    model, client = served
    before = {k: v.clone() for k, v in model.state_dict().items()}
    name = "model.layers.0.mlp.up_proj.weight"

    def poison(t):
        t[name][3, 5] = float("nan")

    path = _folder(tmp_path / "nan", _tiny(1), poison)
    r = client.post("/update_weights_from_disk", json={"model_path": path, "weight_version": "1"})
    body = r.json()
    assert r.status_code == 400 and body["success"] is False and name in body["message"], body
    assert "non-finite" in body["message"] and body["weight_version"] == "0"
    assert client.get("/health").json()["weight_version"] == "0" and _unchanged(model, before)
