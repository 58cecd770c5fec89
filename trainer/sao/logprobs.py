"""Per-token log-probs and entropies of given tokens from final hidden states and the output
embedding, without materialising the (tokens x vocab) logits: chunked over tokens in the
forward pass and recomputed chunk by chunk in the backward pass. Each token's distribution is the
processed one it was sampled from (:mod:`.sampling`: temperature, min-p, top-k, top-p, per token).
Pure torch; a plain full-logits reference sits next to it for the tests.

Notation: N = tokens (``B * T`` when the input is batched), H = hidden size, V = vocabulary.

Gradient through truncation: the kept set (``z >= threshold``) is treated as fixed, so
``d log p(y) / dz = onehot(y) - p`` on the kept set and 0 outside (``p`` the renormalised kept
distribution). The set is a step function of the logits (its derivative is 0 almost everywhere),
so this is the exact gradient wherever the set does not change; it is also what recomputing
processed log-probs with autograd through a -inf mask gives (vLLM's ``processed_logprobs``, and
trainers that mask the same way). The sampled token is always kept (the engine drew it).

Entropy is that of the processed distribution (the kept set renormalised): the distribution the
policy samples from and the loss weighs; without truncation it is the tempered one, as before.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from trajstore.sampling import SamplingArrays
from trajstore.trainer.sao.sampling import kept_threshold, processed_logits, truncating

__all__ = [
    "DEFAULT_CHUNK_TOKENS",
    "token_logprobs_and_entropy",
    "token_logprobs_and_entropy_reference",
]

DEFAULT_CHUNK_TOKENS = 1024
"""Tokens per chunk. Peak extra memory is about two float32 (chunk, V) buffers plus the weight
gradient (1024 x 49,152 x 4 B = 192 MiB each; measured +438 MiB at H = 576 in bench/sao_math.py),
against several (N, V) buffers for the full logits; a chunk with truncated tokens adds a (chunk, V)
bool mask and (64, V) sort buffers."""


def _compute_dtype(hidden: Tensor) -> torch.dtype:
    """float64 stays float64; everything else computes in float32."""
    return torch.float64 if hidden.dtype == torch.float64 else torch.float32


def _check(hidden: Tensor, weight: Tensor, targets: Tensor, sampling: SamplingArrays | None) -> None:
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
    if sampling is not None:
        for name, x in zip(sampling._fields, sampling):
            if tuple(x.shape) != tuple(targets.shape):
                raise ValueError(f"sampling.{name} must have the targets' shape {tuple(targets.shape)}, "
                                 f"got {tuple(x.shape)}")
        if not bool((sampling.temperature > 0).all()):
            raise ValueError("sampling.temperature must be > 0 (greedy calls are given 1)")


def _flat(sampling: SamplingArrays | None, n: int) -> SamplingArrays | None:
    return None if sampling is None else SamplingArrays(*(x.reshape(n) for x in sampling))


def token_logprobs_and_entropy_reference(
    hidden: Tensor, weight: Tensor, targets: Tensor, *, sampling: SamplingArrays | None = None
) -> tuple[Tensor, Tensor]:
    """Same contract as :func:`token_logprobs_and_entropy`, computed the obvious way through
    the full ``(N, V)`` logits, the shared definition of the processed distribution
    (:func:`~trajstore.trainer.sao.sampling.processed_logits`) and autograd. For tests and the
    memory benchmark."""
    _check(hidden, weight, targets, sampling)
    leading = targets.shape
    n = targets.numel()
    logits = (hidden @ weight.T).to(_compute_dtype(hidden)).reshape(n, -1)
    flat_targets = targets.reshape(n).long()
    params = _flat(sampling, n)
    if params is None:
        z, drop = logits, None
    else:
        with torch.no_grad():  # the kept set is fixed (no gradient through the thresholds)
            drop = ~torch.isfinite(processed_logits(logits, params, always_keep=flat_targets))
        z = (logits / params.temperature.to(logits.dtype)[:, None]).masked_fill(drop, -math.inf)
    logp_all = torch.log_softmax(z, dim=-1)
    logprobs = logp_all.gather(-1, flat_targets.unsqueeze(-1)).squeeze(-1)
    finite = logp_all if drop is None else logp_all.masked_fill(drop, 0.0)  # 0 * -inf would be NaN
    entropy = -(logp_all.exp() * finite).sum(-1)
    return logprobs.reshape(leading), entropy.reshape(leading)


def _chunk_flags(mask: Tensor | None, n: int, chunk: int) -> list[bool]:
    """Per chunk of `chunk` tokens: whether any token of it has `mask` set (one sync for all)."""
    n_chunks = -(-n // chunk)
    if mask is None:
        return [False] * n_chunks
    padded = torch.zeros(n_chunks * chunk, dtype=torch.bool, device=mask.device)
    padded[:n] = mask
    return padded.view(n_chunks, chunk).any(1).tolist()


class _ChunkedLogprobEntropy(torch.autograd.Function):
    """Forward and backward of (log p(target), entropy) per token, ``chunk`` tokens at a time.

    Per token with tempered logits ``z = h W^T / T``, kept set ``K = {v: z_v >= thr}`` (the
    processed distribution's, :func:`~trajstore.trainer.sao.sampling.kept_threshold`, always with
    the target), ``p = softmax(z)`` over K (0 outside), ``zbar = sum_v p_v z_v``:
    ``logp = z_y - lse_K(z)``, ``H = lse_K(z) - zbar``;
    ``dlogp/dz = onehot(y) - p``, ``dH/dz = -p * (z - zbar)`` (K fixed).
    Saved for backward: the inputs and three floats per token (lse, H, thr); logits are
    recomputed, under the autocast state of the forward pass so that they come out bit-identical.
    """

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, targets: Tensor, chunk: int, temperature: Tensor | None,
                top_k: Tensor | None, top_p: Tensor | None, min_p: Tensor | None):
        n = hidden.shape[0]
        dtype = _compute_dtype(hidden)
        device_type = hidden.device.type
        ctx.autocast = (
            device_type,
            torch.is_autocast_enabled(device_type),
            torch.get_autocast_dtype(device_type),
        )
        vocab = weight.shape[0]
        params = None if temperature is None else SamplingArrays(temperature, top_k, top_p, min_p)
        scaled = _chunk_flags(None if params is None else params.temperature != 1, n, chunk)
        cut = _chunk_flags(None if params is None else truncating(params, vocab), n, chunk)
        logprobs = torch.empty(n, dtype=dtype, device=hidden.device)
        entropy = torch.empty_like(logprobs)
        lse = torch.empty_like(logprobs)
        thr = torch.full_like(logprobs, -math.inf) if any(cut) else None
        for c, start in enumerate(range(0, n, chunk)):
            end = min(start + chunk, n)
            z = (hidden[start:end] @ weight.T).to(dtype)
            if scaled[c]:
                z.div_(params.temperature[start:end, None].to(dtype))
            drop = None
            if cut[c]:
                t = kept_threshold(z, params.top_k[start:end], params.top_p[start:end], params.min_p[start:end])
                t = torch.minimum(t, z.gather(-1, targets[start:end, None]).squeeze(-1))
                thr[start:end] = t
                drop = z < t[:, None]
            # two (chunk, V) buffers: z and p (no hidden temporary from logsumexp); the maximum
            # is always kept (every truncation keeps the most likely token)
            z_max = z.max(dim=-1, keepdim=True).values
            p = torch.sub(z, z_max).exp_()
            if drop is not None:
                p.masked_fill_(drop, 0.0)
                del drop
            total = p.sum(-1, keepdim=True)
            lse_c = (z_max + total.log()).squeeze(-1)
            p.div_(total)
            logprobs[start:end] = z.gather(-1, targets[start:end, None]).squeeze(-1) - lse_c
            entropy[start:end] = lse_c - p.mul_(z).sum(-1)  # H = lse - sum_v p_v z_v (z finite, p 0 off K)
            lse[start:end] = lse_c
            del z, p
        ctx.save_for_backward(hidden, weight, targets, lse, entropy, thr,
                              None if params is None else params.temperature)
        ctx.chunk = chunk
        ctx.flags = (scaled, cut)
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad_logprobs: Tensor | None, grad_entropy: Tensor | None):
        hidden, weight, targets, lse, entropy, thr, temperature = ctx.saved_tensors
        chunk = ctx.chunk
        scaled, cut = ctx.flags
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
        for c, start in enumerate(range(0, n, chunk)):
            end = min(start + chunk, n)
            h = hidden[start:end]
            with torch.autocast(device_type, dtype=autocast_dtype, enabled=autocast_on):
                z = (h @ weight.T).to(lse.dtype)
            if scaled[c]:
                tau = temperature[start:end, None].to(lse.dtype)
                z.div_(tau)
            g_lp = grad_logprobs[start:end].to(lse.dtype)[:, None]
            g_h = grad_entropy[start:end].to(lse.dtype)[:, None]
            p = torch.sub(z, lse[start:end, None]).exp_()
            if cut[c]:
                p.masked_fill_(z < thr[start:end, None], 0.0)  # off the kept set: no probability, no gradient
            zbar = (lse[start:end] - entropy[start:end])[:, None]
            # dL/dz = g_lp * (onehot - p) - g_h * p * (z - zbar), built in z's storage
            gz = z.sub_(zbar).mul_(g_h).add_(g_lp).mul_(p).neg_()
            del p
            gz[rows[: end - start], targets[start:end]] += g_lp.squeeze(-1)
            if scaled[c]:
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
        return grad_hidden, grad_weight, None, None, None, None, None, None


def token_logprobs_and_entropy(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    *,
    chunk_size: int = DEFAULT_CHUNK_TOKENS,
    sampling: SamplingArrays | None = None,
) -> tuple[Tensor, Tensor]:
    """Log-prob of each given token and the entropy of each next-token distribution, from the
    final hidden states and the output embedding, never holding more than ``chunk_size`` rows
    of logits (forward or backward).

    Per token: ``z = hidden @ weight^T / temperature`` (in float32, or float64 for float64
    inputs), the kept set of the processed distribution (min-p, top-k, top-p of the token's own
    ``sampling`` entry; :mod:`~trajstore.trainer.sao.sampling`, the definition ``traj serve``
    samples from; the target always kept), ``logp = log_softmax(z over the kept set)[y]`` and
    ``H = -sum_v p_v log p_v`` over the kept set. Equal to
    :func:`token_logprobs_and_entropy_reference` (values and gradients) up to float rounding. The
    engine's sampling parameters must be passed for the log-probs to be comparable with the
    engine's (docs/sao.md, mechanism 1: DIS ratios; docs/sampling.md).

    Memory: the backward pass recomputes each chunk's logits instead of saving them, so the
    peak extra memory is O(chunk_size x V) (about 2 float32 buffers of that size, plus a bool mask
    in a chunk with truncated tokens) instead of O(N x V); the cost is one extra (chunk x H x V)
    matmul per chunk, and the top-k / top-p search (a top-k of 1024 candidates per truncated
    token, a full sort when a nucleus is larger) in the forward pass only.

    Args:
        hidden: ``(B, T, H)`` or ``(N, H)`` final hidden states (float32 / bfloat16 / float16;
            differentiable).
        weight: ``(V, H)`` output embedding (LM head), same dtype (differentiable).
        targets: ``(B, T)`` or ``(N,)`` integer token ids in ``[0, V)``, the token whose
            log-prob is wanted at each position (usually the next input token).
        chunk_size: tokens per chunk, > 0.
        sampling: per-token tensors of targets' shape (:class:`~trajstore.sampling.SamplingArrays`:
            temperature > 0 float, top_k int (0 = off), top_p float (1 = off), min_p float
            (0 = off)); None = temperature 1 without truncation.

    Returns:
        ``(logprobs, entropy)``: float32 (float64 for float64 inputs) tensors of hidden's leading shape ``(B, T)`` or
        ``(N,)``; ``logprobs`` in nats (<= 0), ``entropy`` in nats (>= 0).

    Raises:
        ValueError: shapes disagree, ``chunk_size <= 0`` or a temperature <= 0.
    """
    _check(hidden, weight, targets, sampling)
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be > 0, got {chunk_size}")
    leading = hidden.shape[:-1]
    n = targets.numel()
    flat_hidden = hidden.reshape(-1, hidden.shape[-1])
    flat_targets = targets.reshape(-1).long()
    params = _flat(sampling, n)
    logprobs, entropy = _ChunkedLogprobEntropy.apply(
        flat_hidden, weight, flat_targets, int(chunk_size), *(params if params is not None else (None,) * 4)
    )
    return logprobs.reshape(leading), entropy.reshape(leading)
