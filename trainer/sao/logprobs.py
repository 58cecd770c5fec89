"""Per-token log-probs and entropies of given tokens from final hidden states and the output
embedding, without materialising the (tokens x vocab) logits: chunked over tokens in the
forward pass and recomputed chunk by chunk in the backward pass. Pure torch; a plain
full-logits reference sits next to it for the tests.

Notation: N = tokens (``B * T`` when the input is batched), H = hidden size, V = vocabulary.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "DEFAULT_CHUNK_TOKENS",
    "token_logprobs_and_entropy",
    "token_logprobs_and_entropy_reference",
]

DEFAULT_CHUNK_TOKENS = 1024
"""Tokens per chunk. Peak extra memory is about two float32 (chunk, V) buffers plus the weight
gradient (1024 x 49,152 x 4 B = 192 MiB each; measured +438 MiB at H = 576 in bench/sao_math.py),
against several (N, V) buffers for the full logits."""


def _compute_dtype(hidden: Tensor) -> torch.dtype:
    """float64 stays float64; everything else computes in float32."""
    return torch.float64 if hidden.dtype == torch.float64 else torch.float32


def _check(hidden: Tensor, weight: Tensor, targets: Tensor, temperature: float) -> None:
    if weight.dim() != 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"weight must be (V, H) with H = hidden.shape[-1], got hidden "
            f"{tuple(hidden.shape)} and weight {tuple(weight.shape)}"
        )
    if hidden.shape[:-1] != targets.shape:
        raise ValueError(
            f"targets must have hidden's leading shape {tuple(hidden.shape[:-1])}, got "
            f"{tuple(targets.shape)}"
        )
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")


def token_logprobs_and_entropy_reference(
    hidden: Tensor, weight: Tensor, targets: Tensor, *, temperature: float = 1.0
) -> tuple[Tensor, Tensor]:
    """Same contract as :func:`token_logprobs_and_entropy`, computed the obvious way through
    the full ``(N, V)`` logits and autograd. For tests and the memory benchmark."""
    _check(hidden, weight, targets, temperature)
    logits = (hidden @ weight.T).to(_compute_dtype(hidden)) / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logprobs = logp_all.gather(-1, targets.unsqueeze(-1).long()).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logprobs, entropy


class _ChunkedLogprobEntropy(torch.autograd.Function):
    """Forward and backward of (log p(target), entropy) per token, ``chunk`` tokens at a time.

    Per token with logits ``z = h W^T / tau``, ``p = softmax(z)``, ``zbar = sum_v p_v z_v``:
    ``logp = z_y - lse(z)``, ``H = lse(z) - zbar``;
    ``dlogp/dz = onehot(y) - p``, ``dH/dz = -p * (z - zbar)``.
    Saved for backward: the inputs and two floats per token (lse, H); logits are recomputed,
    under the autocast state of the forward pass so that they come out bit-identical.
    """

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, targets: Tensor, chunk: int, tau: float):
        n = hidden.shape[0]
        dtype = _compute_dtype(hidden)
        device_type = hidden.device.type
        ctx.autocast = (
            device_type,
            torch.is_autocast_enabled(device_type),
            torch.get_autocast_dtype(device_type),
        )
        logprobs = torch.empty(n, dtype=dtype, device=hidden.device)
        entropy = torch.empty_like(logprobs)
        lse = torch.empty_like(logprobs)
        for start in range(0, n, chunk):
            end = min(start + chunk, n)
            z = (hidden[start:end] @ weight.T).to(dtype)
            if tau != 1.0:
                z.div_(tau)
            # two (chunk, V) buffers: z and p (no hidden temporary from logsumexp)
            z_max = z.max(dim=-1, keepdim=True).values
            p = torch.sub(z, z_max).exp_()
            total = p.sum(-1, keepdim=True)
            lse_c = (z_max + total.log()).squeeze(-1)
            p.div_(total)
            logprobs[start:end] = z.gather(-1, targets[start:end, None]).squeeze(-1) - lse_c
            entropy[start:end] = lse_c - p.mul_(z).sum(-1)  # H = lse - sum_v p_v z_v
            lse[start:end] = lse_c
            del z, p
        ctx.save_for_backward(hidden, weight, targets, lse, entropy)
        ctx.chunk = chunk
        ctx.tau = tau
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad_logprobs: Tensor | None, grad_entropy: Tensor | None):
        hidden, weight, targets, lse, entropy = ctx.saved_tensors
        chunk, tau = ctx.chunk, ctx.tau
        device_type, autocast_on, autocast_dtype = ctx.autocast
        n = hidden.shape[0]
        want_hidden, want_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if grad_logprobs is None:
            grad_logprobs = torch.zeros_like(lse)
        if grad_entropy is None:
            grad_entropy = torch.zeros_like(lse)
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        accumulate_dtype = torch.float32 if weight.dtype in (torch.float16, torch.bfloat16) else weight.dtype
        grad_weight = (
            torch.zeros(weight.shape, dtype=accumulate_dtype, device=weight.device)
            if want_weight
            else None
        )
        rows = torch.arange(chunk, device=hidden.device)
        for start in range(0, n, chunk):
            end = min(start + chunk, n)
            h = hidden[start:end]
            with torch.autocast(device_type, dtype=autocast_dtype, enabled=autocast_on):
                z = (h @ weight.T).to(lse.dtype)
            if tau != 1.0:
                z.div_(tau)
            g_lp = grad_logprobs[start:end].to(lse.dtype)[:, None]
            g_h = grad_entropy[start:end].to(lse.dtype)[:, None]
            p = torch.sub(z, lse[start:end, None]).exp_()
            zbar = (lse[start:end] - entropy[start:end])[:, None]
            # dL/dz = g_lp * (onehot - p) - g_h * p * (z - zbar), built in z's storage
            gz = z.sub_(zbar).mul_(g_h).add_(g_lp).mul_(p).neg_()
            del p
            gz[rows[: end - start], targets[start:end]] += g_lp.squeeze(-1)
            if tau != 1.0:
                gz.div_(tau)
            gz = gz.to(hidden.dtype)
            if want_hidden:
                torch.mm(gz, weight.to(gz.dtype), out=grad_hidden[start:end])
            if want_weight:
                if accumulate_dtype == gz.dtype:
                    grad_weight.addmm_(gz.T, h)
                else:
                    grad_weight += (gz.T @ h).to(accumulate_dtype)
            del gz, z
        if grad_weight is not None:
            grad_weight = grad_weight.to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None


def token_logprobs_and_entropy(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    *,
    chunk_size: int = DEFAULT_CHUNK_TOKENS,
    temperature: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """Log-prob of each given token and the entropy of each next-token distribution, from the
    final hidden states and the output embedding, never holding more than ``chunk_size`` rows
    of logits (forward or backward).

    Per token: ``z = hidden @ weight^T / temperature`` (in float32, or float64 for float64
    inputs), ``logp = log_softmax(z)[y]``
    and ``H = -sum_v p_v log p_v``. Equal to
    :func:`token_logprobs_and_entropy_reference` (values and gradients) up to float rounding.
    The rollout engine's sampling temperature must be passed for the log-probs to be
    comparable with the engine's (docs/sao.md, mechanism 1: DIS ratios).

    Memory: the backward pass recomputes each chunk's logits instead of saving them, so the
    peak extra memory is O(chunk_size x V) (about 2 float32 buffers of that size) instead of
    O(N x V); the cost is one extra (chunk x H x V) matmul per chunk.

    Args:
        hidden: ``(B, T, H)`` or ``(N, H)`` final hidden states (float32 / bfloat16 / float16;
            differentiable).
        weight: ``(V, H)`` output embedding (LM head), same dtype (differentiable).
        targets: ``(B, T)`` or ``(N,)`` integer token ids in ``[0, V)``, the token whose
            log-prob is wanted at each position (usually the next input token).
        chunk_size: tokens per chunk, > 0.
        temperature: > 0, dimensionless.

    Returns:
        ``(logprobs, entropy)``: float32 (float64 for float64 inputs) tensors of hidden's leading shape ``(B, T)`` or
        ``(N,)``; ``logprobs`` in nats (<= 0), ``entropy`` in nats (>= 0).

    Raises:
        ValueError: shapes disagree, ``chunk_size <= 0`` or ``temperature <= 0``.
    """
    _check(hidden, weight, targets, temperature)
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be > 0, got {chunk_size}")
    leading = hidden.shape[:-1]
    flat_hidden = hidden.reshape(-1, hidden.shape[-1])
    flat_targets = targets.reshape(-1).long()
    logprobs, entropy = _ChunkedLogprobEntropy.apply(
        flat_hidden, weight, flat_targets, int(chunk_size), float(temperature)
    )
    return logprobs.reshape(leading), entropy.reshape(leading)
