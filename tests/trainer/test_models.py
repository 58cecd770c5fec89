"""trainer/models.py: policy / critic construction: the value head starts at zero, the
critic's trainable set by pattern (dense and MoE), critic initialised from the policy, packed rows
equal separate forwards, temperature-scaled log-probs."""

from __future__ import annotations

import pytest
import torch

from trajstore.sampling import SamplingArrays
from trajstore.trainer.models import TINY_MODELS, PolicyLogprobs, backbone_of, build_critic, load_policy
from trajstore.trainer.sao.sampling import processed_logprobs

VOCAB = 128


@pytest.mark.parametrize("name", TINY_MODELS)
def test_critic_trains_exactly_mlp_projections_and_value_head(name: str) -> None:
    """docs/sao.md, mechanism 3: embeddings, norms, attention (and the MoE router) frozen; only the MLP /
    expert projections and the value head train. Expected sets written out per architecture."""
    pol = load_policy(name, tiny_vocab_size=VOCAB)
    critic = build_critic(pol.model)
    trainable = {n for n, p in critic.named_parameters() if p.requires_grad}
    if name == "tiny-llama":
        mlp = {f"backbone.layers.{i}.mlp.{k}_proj.weight" for i in (0, 1) for k in ("gate", "up", "down")}
    else:  # Qwen3-MoE: fused expert projections; the router mlp.gate.weight stays frozen
        mlp = {f"backbone.layers.{i}.mlp.experts.{k}_proj" for i in (0, 1) for k in ("gate_up", "down")}
    assert trainable == mlp | {"value_head.weight", "value_head.bias"}
    frozen = {n for n, p in critic.named_parameters() if not p.requires_grad}
    assert "backbone.embed_tokens.weight" in frozen and "backbone.norm.weight" in frozen
    assert {n for n in frozen if ".self_attn." in n} == {n for n, _ in critic.named_parameters() if ".self_attn." in n}
    # initialised from the policy's backbone, but a separate copy
    pol_sd = backbone_of(pol.model).state_dict()
    for k, v in critic.backbone.state_dict().items():
        assert torch.equal(v, pol_sd[k]), k
        assert v.data_ptr() != pol_sd[k].data_ptr()
    assert pol.vocab_size == VOCAB and pol.tokenizer == name


def test_bad_trainable_pattern_is_refused() -> None:
    pol = load_policy("tiny-llama", tiny_vocab_size=VOCAB)
    with pytest.raises(ValueError, match="matches no backbone parameter"):
        build_critic(pol.model, trainable_pattern=r"^value_head\.|mlp_typo")
    with pytest.raises(ValueError, match="leaves the value head frozen"):
        build_critic(pol.model, trainable_pattern=r"\.mlp\.")
    full = build_critic(pol.model, trainable_pattern=None)
    assert all(p.requires_grad for p in full.parameters())
    attn = build_critic(pol.model, trainable_pattern=r"self_attn|^value_head\.")  # configurable by pattern
    assert {n for n, p in attn.named_parameters() if p.requires_grad} == {
        n for n, _ in attn.named_parameters() if "self_attn" in n or n.startswith("value_head.")}


def test_config_refuses_the_replaced_frozen_pattern_key() -> None:
    from pydantic import ValidationError

    from trajstore.trainer.config import ModelConfig

    with pytest.raises(ValidationError, match="replaced by critic_trainable_pattern"):
        ModelConfig(name="tiny-llama", critic_frozen_pattern="self_attn")


@pytest.mark.parametrize("name", TINY_MODELS)
def test_packed_row_equals_separate_forwards(name: str) -> None:
    """Positions restarting at 0 give a block-diagonal mask: no attention across trajectories."""
    pol = load_policy(name, tiny_vocab_size=VOCAB)
    critic = build_critic(pol.model).eval()
    g = torch.Generator().manual_seed(0)
    a, b = torch.randint(0, VOCAB, (1, 7), generator=g), torch.randint(0, VOCAB, (1, 5), generator=g)
    with torch.no_grad():
        packed = critic(torch.cat([a, b], 1), torch.cat([torch.arange(7), torch.arange(5)]).unsqueeze(0))
        va = critic(a, torch.arange(7).unsqueeze(0))
        vb = critic(b, torch.arange(5).unsqueeze(0))
    torch.testing.assert_close(packed, torch.cat([va, vb], 1), atol=1e-5, rtol=1e-5)


def test_policy_logprobs_apply_the_sampling_temperature() -> None:
    pol = load_policy("tiny-llama", tiny_vocab_size=VOCAB)
    fwd = PolicyLogprobs(pol.model, chunk_size=3)
    ids = torch.randint(0, VOCAB, (1, 9), generator=torch.Generator().manual_seed(1))
    pos = torch.arange(9).unsqueeze(0)
    tgt = torch.roll(ids, -1, 1)
    params = SamplingArrays(torch.full((1, 9), 0.7), torch.zeros((1, 9), dtype=torch.long), torch.ones((1, 9)),
                            torch.zeros((1, 9)))
    with torch.no_grad():
        lp, ent = fwd(ids, pos, tgt, params)
        logits = pol.model(input_ids=ids, position_ids=pos).logits / 0.7
    ref = logits.log_softmax(-1).gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(lp, ref, atol=1e-5, rtol=1e-5)
    assert lp.shape == ent.shape == (1, 9)


def test_policy_logprobs_apply_top_k_top_p_min_p_per_token() -> None:
    pol = load_policy("tiny-llama", tiny_vocab_size=VOCAB)
    fwd = PolicyLogprobs(pol.model, chunk_size=4)
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(0, VOCAB, (1, 9), generator=gen)
    pos = torch.arange(9).unsqueeze(0)
    with torch.no_grad():
        logits = pol.model(input_ids=ids, position_ids=pos).logits[0]
    tgt = logits.argmax(-1)[None]  # the most likely token: inside every kept set
    params = SamplingArrays(torch.tensor([[0.7, 1.0, 0.7, 1.3, 1.0, 0.5, 1.0, 0.9, 1.0]]),
                            torch.tensor([[20, 0, 5, 0, 3, 0, 0, 2, 0]]),
                            torch.tensor([[0.8, 0.9, 1.0, 1.0, 1.0, 0.5, 1.0, 1.0, 1.0]]),
                            torch.tensor([[0.0, 0.0, 0.0, 0.1, 0.0, 0.0, 0.2, 0.0, 0.0]]))
    with torch.no_grad():
        lp, _ = fwd(ids, pos, tgt, params)
    ref = processed_logprobs(logits, SamplingArrays(*(x[0] for x in params)))
    torch.testing.assert_close(lp[0], ref.gather(-1, tgt[0, :, None])[:, 0], atol=1e-5, rtol=1e-5)


def test_local_hf_directory_loads_with_its_path_as_tokenizer_identity(tmp_path) -> None:  # noqa: ANN001
    src = load_policy("tiny-llama", tiny_vocab_size=VOCAB)
    src.model.save_pretrained(tmp_path / "tiny")
    pol = load_policy(str(tmp_path / "tiny"))
    assert pol.tokenizer == str(tmp_path / "tiny") and pol.vocab_size == VOCAB
    for (n, a), (_, b) in zip(src.model.state_dict().items(), pol.model.state_dict().items()):
        assert torch.equal(a, b), n
    assert load_policy(str(tmp_path / "tiny"), tokenizer="my/tok").tokenizer == "my/tok"


def test_unknown_model_is_a_clear_error() -> None:
    from trajstore.errors import TrajstoreError

    with pytest.raises(TrajstoreError, match="neither 'smollm2-135m', a .gguf file, nor a local"):
        load_policy("no/such-model-dir")


@pytest.mark.slow
def test_smollm2_alias_loads_the_real_model_with_a_frozen_attention_critic() -> None:
    pol = load_policy("smollm2-135m")
    assert pol.tokenizer == "HuggingFaceTB/SmolLM2-135M-Instruct" and pol.vocab_size == 49152
    critic = build_critic(pol.model)
    trainable = [n for n, p in critic.named_parameters() if p.requires_grad]
    assert len(trainable) == 3 * pol.model.config.num_hidden_layers + 2  # gate/up/down per layer + head


def test_first_values_are_zero() -> None:
    """The demo's critic started at a mean value of 1.8 against returns of ~0.28."""
    critic = build_critic(load_policy("tiny-llama", tiny_vocab_size=VOCAB).model)
    ids = torch.randint(0, VOCAB, (1, 50), generator=torch.Generator().manual_seed(0))
    v = critic(ids, torch.arange(50)[None])
    assert v.shape == (1, 50) and torch.equal(v, torch.zeros(1, 50))
