"""Chunked per-token log-probs and entropy: hand-computed cases, equality with the full-logits
computation (values and gradients) with and without per-token truncation (every combination of
temperature, top-k, top-p and min-p, disabled values included), the straight-through gradient
``onehot(y) - p`` over the kept set, and that no (N x V) tensor is kept for backward."""

from __future__ import annotations

import math

import pytest
import torch

from trajstore.sampling import SamplingArrays
from trajstore.trainer.sao.logprobs import (
    token_logprobs_and_entropy,
    token_logprobs_and_entropy_reference,
)
from trajstore.trainer.sao.sampling import processed_logprobs

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
    logp_t, _ = token_logprobs_and_entropy(hidden, weight, torch.tensor([0]), sampling=_params([2.0]))
    assert logp_t.item() == pytest.approx(math.log(math.sqrt(3) / (math.sqrt(3) + 1)), abs=1e-14)


def _params(temperature, top_k=None, top_p=None, min_p=None) -> SamplingArrays:
    n = len(temperature)
    return SamplingArrays(torch.tensor(temperature, dtype=torch.float32),
                          torch.tensor(top_k if top_k is not None else [0] * n, dtype=torch.int64),
                          torch.tensor(top_p if top_p is not None else [1.0] * n, dtype=torch.float32),
                          torch.tensor(min_p if min_p is not None else [0.0] * n, dtype=torch.float32))


def test_hand_computed_truncations():
    # V = 4, logits [3, 2, 1, 0] (weight = identity, hidden = logits): p ~ [.644, .237, .087, .032]
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]], dtype=f64)
    eye = torch.eye(4, dtype=f64)

    def logp(target, **kw):
        return token_logprobs_and_entropy(logits, eye, torch.tensor([target]), sampling=_params([1.0], **kw))

    lse2 = math.log(math.exp(3) + math.exp(2))
    assert logp(0, top_k=[2])[0].item() == pytest.approx(3 - lse2, abs=1e-12)  # top-2 renormalised
    assert logp(0, top_p=[0.6])[0].item() == pytest.approx(0.0, abs=1e-12)    # .644 >= .6: only the first
    assert logp(1, top_p=[0.7])[0].item() == pytest.approx(2 - lse2, abs=1e-12)  # .644 < .7: two kept
    # min-p 0.1: keep p >= 0.0644 (the first three), e^(1-3) = .135 >= .1 > e^(0-3) = .0498
    lse3 = math.log(math.exp(3) + math.exp(2) + math.exp(1))
    lp, ent = logp(2, min_p=[0.1])
    assert lp.item() == pytest.approx(1 - lse3, abs=1e-12)
    q = [math.exp(v - lse3) for v in (3, 2, 1)]
    assert ent.item() == pytest.approx(-sum(x * math.log(x) for x in q), abs=1e-12)
    # the target is always kept: token 3 is outside top-2; the engine drew it, so its set held it and
    # every more likely token (each truncation keeps a top set): all four are renormalised
    lse_t = math.log(math.exp(3) + math.exp(2) + math.exp(1) + math.exp(0))
    assert logp(3, top_k=[2])[0].item() == pytest.approx(0 - lse_t, abs=1e-12)


def _both(hidden, weight, targets, upstream, chunk_size=1024, sampling=None):
    """Values and gradients (hidden, weight) of both implementations for the same upstream."""
    out = []
    for fn, kw in ((token_logprobs_and_entropy, {"chunk_size": chunk_size}), (token_logprobs_and_entropy_reference, {})):
        h = hidden.detach().clone().requires_grad_()
        w = weight.detach().clone().requires_grad_()
        logp, ent = fn(h, w, targets, sampling=sampling, **kw)
        (logp * upstream[0] + ent * upstream[1]).sum().backward()
        out.append((logp.detach(), ent.detach(), h.grad, w.grad))
    return out


def _uniform_params(shape, temperature: float) -> SamplingArrays:
    n = math.prod(shape)
    return SamplingArrays(*(x.reshape(shape) for x in _params([temperature] * n)))


@pytest.mark.parametrize("shape", [(3, 37), (50,)])
@pytest.mark.parametrize("chunk_size", [1, 8, 64])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_equals_full_logits_float64_values_and_gradients(shape, chunk_size, temperature):
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(*shape, 16, generator=gen, dtype=f64)
    weight = torch.randn(101, 16, generator=gen, dtype=f64)
    targets = torch.randint(0, 101, shape, generator=gen)
    upstream = (torch.randn(shape, generator=gen, dtype=f64), torch.randn(shape, generator=gen, dtype=f64))
    fast, ref = _both(hidden, weight, targets, upstream, chunk_size=chunk_size,
                      sampling=_uniform_params(shape, temperature))
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


def _random_params(n: int, vocab: int, gen: torch.Generator) -> SamplingArrays:
    """Per-token parameters covering every combination: each of top-k, top-p, min-p on or off
    (off as 0 / 1 / 0, top-k also as >= V), temperatures 0.5..1.5, by token (8 patterns cycled)."""
    combo = torch.arange(n) % 8
    k_on, p_on, m_on = combo & 1 > 0, combo & 2 > 0, combo & 4 > 0
    top_k = torch.where(k_on, torch.randint(1, vocab // 2, (n,), generator=gen),
                        torch.where(torch.arange(n) % 3 == 0, vocab + 3, 0))
    top_p = torch.where(p_on, 0.05 + 0.9 * torch.rand(n, generator=gen), 1.0)
    min_p = torch.where(m_on, 0.3 * torch.rand(n, generator=gen), 0.0)
    temperature = 0.5 + torch.rand(n, generator=gen)
    return SamplingArrays(temperature.float(), top_k.long(), top_p.float(), min_p.float())


@pytest.mark.parametrize("chunk_size", [1, 7, 64])
def test_truncated_equals_the_reference_over_every_combination_float64(chunk_size):
    gen = torch.Generator().manual_seed(10)
    n, vocab = 96, 211
    hidden = torch.randn(n, 16, generator=gen, dtype=f64)
    weight = torch.randn(vocab, 16, generator=gen, dtype=f64)
    targets = torch.randint(0, vocab, (n,), generator=gen)
    upstream = (torch.randn(n, generator=gen, dtype=f64), torch.randn(n, generator=gen, dtype=f64))
    params = _random_params(n, vocab, gen)
    fast, ref = _both(hidden, weight, targets, upstream, chunk_size=chunk_size, sampling=params)
    for a, b in zip(fast, ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    assert torch.isfinite(fast[0]).all()  # the target is always kept


def test_truncated_with_tied_logits_equals_the_reference_exactly():
    # logits on a grid of quarters, computed exactly (small integers times quarters): many ties at
    # every boundary; the chunked kept sets and the reference's must be the same sets
    gen = torch.Generator().manual_seed(11)
    n, vocab = 120, 64
    hidden = torch.randint(-2, 3, (n, 8), generator=gen).to(f64)
    weight = torch.randint(-2, 3, (vocab, 8), generator=gen).to(f64) / 4
    targets = torch.randint(0, vocab, (n,), generator=gen)
    params = _random_params(n, vocab, gen)._replace(temperature=torch.ones(n))
    upstream = (torch.randn(n, generator=gen, dtype=f64), torch.randn(n, generator=gen, dtype=f64))
    fast, ref = _both(hidden, weight, targets, upstream, chunk_size=16, sampling=params)
    for a, b in zip(fast, ref):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_gradient_is_onehot_minus_the_kept_distribution_over_temperature():
    # weight = identity: hidden are the logits, d log p(y) / d x = (onehot(y) - p_kept) / T
    gen = torch.Generator().manual_seed(12)
    n, vocab = 40, 30
    x = torch.randn(n, vocab, generator=gen, dtype=f64).requires_grad_()
    targets = torch.randint(0, vocab, (n,), generator=gen)
    params = _random_params(n, vocab, gen)
    logp, _ = token_logprobs_and_entropy(x, torch.eye(vocab, dtype=f64), targets, chunk_size=8, sampling=params)
    logp.sum().backward()
    kept = torch.exp(processed_logprobs(x.detach(), params))  # the engine's distribution
    for i in range(n):
        if kept[i, targets[i]] == 0:  # outside the engine's set: kept for the trainer, not compared here
            continue
        want = (torch.nn.functional.one_hot(targets[i], vocab).to(f64) - kept[i]) / params.temperature[i].to(f64)
        torch.testing.assert_close(x.grad[i], want, rtol=1e-10, atol=1e-12)
    assert logp.detach().le(0).all()


def test_truncated_float32_and_a_wide_nucleus_match_the_reference():
    # a flat distribution over 3000 ids: top-p 0.9 keeps ~2700 tokens, more than the 1024
    # candidates of the fast path (the whole row is sorted for those)
    gen = torch.Generator().manual_seed(13)
    n, vocab = 24, 3000
    hidden = torch.randn(n, 16, generator=gen)
    weight = 0.01 * torch.randn(vocab, 16, generator=gen)
    targets = torch.randint(0, vocab, (n,), generator=gen)
    params = _params([1.0] * n, top_p=[0.9] * (n // 2) + [0.3] * (n - n // 2))
    upstream = (torch.randn(n, generator=gen), torch.randn(n, generator=gen))
    fast, ref = _both(hidden, weight, targets, upstream, chunk_size=5, sampling=params)
    for a, b in zip(fast, ref):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_truncation_keeps_no_tokens_by_vocab_tensor_for_backward():
    n, hidden_size, vocab = 256, 16, 2048
    gen = torch.Generator().manual_seed(14)
    hidden = torch.randn(n, hidden_size, requires_grad=True)
    weight = torch.randn(vocab, hidden_size, requires_grad=True)
    targets = torch.randint(0, vocab, (n,))
    params = _random_params(n, vocab, gen)
    chunked = _saved_bytes(lambda: token_logprobs_and_entropy(hidden, weight, targets, chunk_size=64,
                                                              sampling=params))
    inputs = (n * hidden_size + vocab * hidden_size) * 4
    # the inputs, the targets, three floats per token (lse, entropy, threshold) and the temperatures
    assert chunked <= inputs + n * 8 + 4 * n * 4
