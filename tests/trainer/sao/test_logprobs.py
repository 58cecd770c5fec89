"""Chunked per-token log-probs and entropy: a hand-computed case, equality with the full-logits
computation (values and gradients), and that no (N x V) tensor is kept for backward."""

from __future__ import annotations

import math

import pytest
import torch

from trajstore.trainer.sao.logprobs import (
    token_logprobs_and_entropy,
    token_logprobs_and_entropy_reference,
)

f64 = torch.float64


def test_hand_computed_two_token_vocabulary():
    # H = 1, V = 2, W = [[1], [0]], h = ln 3 -> logits [ln 3, 0] -> p = [3/4, 1/4]
    # log p(token 0) = ln 0.75; entropy = -(0.75 ln 0.75 + 0.25 ln 0.25) = 0.562335...
    hidden = torch.tensor([[math.log(3.0)]], dtype=f64)
    weight = torch.tensor([[1.0], [0.0]], dtype=f64)
    logp, ent = token_logprobs_and_entropy(hidden, weight, torch.tensor([0]))
    assert logp.item() == pytest.approx(math.log(0.75), abs=1e-14)
    assert ent.item() == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)), abs=1e-14)
    # temperature 2 halves the logits: [ln 3 / 2, 0] -> p0 = sqrt(3) / (sqrt(3) + 1)
    logp_t, _ = token_logprobs_and_entropy(hidden, weight, torch.tensor([0]), temperature=2.0)
    assert logp_t.item() == pytest.approx(math.log(math.sqrt(3) / (math.sqrt(3) + 1)), abs=1e-14)


def _both(hidden, weight, targets, upstream, **kwargs):
    """Values and gradients (hidden, weight) of both implementations for the same upstream."""
    out = []
    for fn, kw in ((token_logprobs_and_entropy, kwargs), (token_logprobs_and_entropy_reference, {})):
        if "temperature" in kwargs:
            kw = {**kw, "temperature": kwargs["temperature"]}
        h = hidden.detach().clone().requires_grad_()
        w = weight.detach().clone().requires_grad_()
        logp, ent = fn(h, w, targets, **kw)
        (logp * upstream[0] + ent * upstream[1]).sum().backward()
        out.append((logp.detach(), ent.detach(), h.grad, w.grad))
    return out


@pytest.mark.parametrize("shape", [(3, 37), (50,)])
@pytest.mark.parametrize("chunk_size", [1, 8, 64])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_equals_full_logits_float64_values_and_gradients(shape, chunk_size, temperature):
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(*shape, 16, generator=gen, dtype=f64)
    weight = torch.randn(101, 16, generator=gen, dtype=f64)
    targets = torch.randint(0, 101, shape, generator=gen)
    upstream = (torch.randn(shape, generator=gen, dtype=f64), torch.randn(shape, generator=gen, dtype=f64))
    fast, ref = _both(hidden, weight, targets, upstream, chunk_size=chunk_size, temperature=temperature)
    for a, b in zip(fast, ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_equals_full_logits_float32_within_1e5_realistic_scale():
    # hidden ~ N(0, 1) as after a final norm, LM head ~ N(0, 0.02^2) * sqrt-ish scale of real models
    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(2, 300, 64, generator=gen)
    weight = 0.1 * torch.randn(2000, 64, generator=gen)
    targets = torch.randint(0, 2000, (2, 300), generator=gen)
    upstream = (torch.randn(2, 300, generator=gen), torch.randn(2, 300, generator=gen))
    fast, ref = _both(hidden, weight, targets, upstream, chunk_size=128)
    for a, b in zip(fast, ref):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_only_hidden_trainable_and_bfloat16_inputs():
    gen = torch.Generator().manual_seed(2)
    hidden = torch.randn(40, 32, generator=gen).to(torch.bfloat16).requires_grad_()
    weight = (0.1 * torch.randn(300, 32, generator=gen)).to(torch.bfloat16)  # frozen head
    targets = torch.randint(0, 300, (40,), generator=gen)
    logp, ent = token_logprobs_and_entropy(hidden, weight, targets, chunk_size=16)
    assert logp.dtype == torch.float32
    logp.sum().backward()
    assert hidden.grad is not None and hidden.grad.dtype == torch.bfloat16 and weight.grad is None
    ref_logp, ref_ent = token_logprobs_and_entropy_reference(hidden.detach(), weight, targets)
    torch.testing.assert_close(logp.detach(), ref_logp, rtol=0, atol=1e-4)
    torch.testing.assert_close(ent, ref_ent.detach(), rtol=0, atol=1e-4)


def _saved_bytes(fn) -> int:
    """Bytes of tensors autograd keeps for backward while running ``fn``."""
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total


def test_keeps_no_tokens_by_vocab_tensor_for_backward():
    n, hidden_size, vocab = 512, 32, 4096
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(n, hidden_size, generator=gen, requires_grad=True)
    weight = torch.randn(vocab, hidden_size, generator=gen, requires_grad=True)
    targets = torch.randint(0, vocab, (n,), generator=gen)
    chunked = _saved_bytes(lambda: token_logprobs_and_entropy(hidden, weight, targets, chunk_size=64))
    full = _saved_bytes(lambda: token_logprobs_and_entropy_reference(hidden, weight, targets))
    inputs = (n * hidden_size + vocab * hidden_size) * 4
    # chunked: the inputs, the targets and two floats per token; full: at least one n x V logits
    assert chunked <= inputs + n * 8 + 2 * n * 4
    assert full >= n * vocab * 4


def test_bad_arguments_raise():
    with pytest.raises(ValueError):
        token_logprobs_and_entropy(torch.zeros(3, 4), torch.zeros(5, 3), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError):
        token_logprobs_and_entropy(torch.zeros(3, 4), torch.zeros(5, 4), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError):
        token_logprobs_and_entropy(torch.zeros(3, 4), torch.zeros(5, 4), torch.zeros(3, dtype=torch.long),
                                   chunk_size=0)


def test_under_autocast_backward_recomputes_the_same_logits():
    # bf16 autocast rounds logits of magnitude ~20 by up to ~0.1; the backward pass must
    # recompute them under the same autocast state, or softmax(z) no longer matches the saved
    # logsumexp and the gradient is off by tens of percent (measured: 24% without, 0.5% with)
    gen = torch.Generator().manual_seed(3)
    hidden = torch.randn(64, 32, generator=gen)
    weight = 3.0 * torch.randn(500, 32, generator=gen)
    targets = torch.randint(0, 500, (64,), generator=gen)
    results = []
    for fn in (token_logprobs_and_entropy, token_logprobs_and_entropy_reference):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logp, ent = fn(h, w, targets)
        (logp.sum() + ent.sum()).backward()
        results.append((logp.detach(), ent.detach(), h.grad, w.grad))
    (logp, ent, grad_h, grad_w), (ref_logp, ref_ent, ref_grad_h, ref_grad_w) = results
    torch.testing.assert_close(logp, ref_logp, rtol=0, atol=1e-4)
    torch.testing.assert_close(ent, ref_ent, rtol=0, atol=1e-4)
    # the reference's own gradient matmuls run in bf16: agree to 2% of the largest entry
    assert (grad_h - ref_grad_h).abs().max() <= 0.02 * ref_grad_h.abs().max()
    assert (grad_w - ref_grad_w).abs().max() <= 0.02 * ref_grad_w.abs().max()
