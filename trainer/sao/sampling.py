"""The processed distribution: the one definition of the distribution a token is drawn from, given
its logits and the sampling parameters (:class:`~trajstore.sampling.SamplingArrays`). ``traj
serve``'s sampler, the rollout worker and the trainer's reference log-probs call
:func:`processed_logits`; the trainer's chunked kernel (:mod:`.logprobs`) applies the same
:func:`kept_threshold` chunk by chunk, so engine and trainer keep the same tokens.

Order (vLLM V1's sampler, ``vllm/v1/sample/sampler.py``: temperature, then the argmax-invariant
min-p processor, then ``apply_top_k_top_p``), per row with logits ``x``:

1. ``z = x / temperature``.
2. min-p: keep ``p_v >= min_p * max_u p_u``, i.e. ``z_v >= max z + log(min_p)`` (Nguyen et al. 2024,
   "Turning Up the Heat: Min-p Sampling", eq. 1; compared in logit space here, in probability
   space in vLLM: the two can differ in the last float bit at the boundary).
3. top-k over the survivors: keep ``z_v >=`` the k-th largest value (ties with it kept, as vLLM's
   ``logits < kth`` mask does).
4. top-p over the survivors renormalised: in decreasing order, keep each token whose preceding
   mass is ``< top_p`` (Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration",
   sect. 3.1: the smallest prefix whose mass reaches p; vLLM masks ascending cumulative sums
   ``<= 1 - p``, the same set), and every token tied with the last one kept.
5. renormalise over the kept set.

Every step keeps all tokens at or above a value, so the kept set is ``z >= threshold`` for one
threshold per row: the engine and the trainer differ at most in tokens tied with the boundary,
which both keep (vLLM keeps those its sort happened to put first).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from trajstore.sampling import SamplingArrays

__all__ = ["TOP_P_CANDIDATES", "as_tensors", "kept_threshold", "processed_logits", "processed_logprobs",
           "truncating"]

TOP_P_CANDIDATES = 1024
"""Top-p looks for its boundary among the largest ``TOP_P_CANDIDATES`` logits first (a top-k, not a
full sort of the vocabulary) and sorts the whole row only when the nucleus is larger. Both give the
same threshold: the mass before a position depends only on the values before it."""

_BLOCK_ROWS = 64
"""Rows whose top-k / top-p are found together: bounds the (rows, V) copies and sort buffers."""


def as_tensors(params: SamplingArrays, device: torch.device | str | None = None) -> SamplingArrays:
    """`params` (numpy arrays or sequences, one entry per row) as tensors: temperature, top_p and
    min_p float32, top_k int64."""
    return SamplingArrays(torch.as_tensor(params.temperature, dtype=torch.float32, device=device),
                          torch.as_tensor(params.top_k, dtype=torch.int64, device=device),
                          torch.as_tensor(params.top_p, dtype=torch.float32, device=device),
                          torch.as_tensor(params.min_p, dtype=torch.float32, device=device))


def truncating(params: SamplingArrays, vocab_size: int) -> Tensor:
    """bool (R,): rows whose kept set may be smaller than the vocabulary (top-k < V, top-p < 1
    or min-p > 0)."""
    return ((params.top_k > 0) & (params.top_k < vocab_size)) | (params.top_p < 1) | (params.min_p > 0)


def _nucleus_boundary(vals: Tensor, lse: Tensor, top_p: Tensor) -> tuple[Tensor, Tensor]:
    """(value of the last kept position, whether it was found) for rows of `vals` sorted in
    decreasing order (a prefix of each row's sorted logits, excluded ones below the threshold
    masked to -inf), `lse` the log-sum-exp of each row's kept logits (the whole row)."""
    probs = torch.exp(vals - lse[:, None])
    before = torch.cumsum(probs, dim=-1) - probs
    n = (before < top_p[:, None]).sum(-1)
    found = n < vals.shape[1]
    boundary = vals.gather(1, (n.clamp(min=1) - 1)[:, None]).squeeze(1)
    return boundary, found


def kept_threshold(z: Tensor, top_k: Tensor, top_p: Tensor, min_p: Tensor) -> Tensor:
    """Per row, the smallest tempered logit kept by min-p, top-k and top-p (module docstring): the
    kept set is ``z >= threshold``; -inf where nothing is truncated.

    Args:
        z: (R, V) logits already divided by the temperature (float32 or float64; -inf = an id
            the engine excluded before, e.g. allowed_token_ids).
        top_k: (R,) int64, 0 = off (any k >= V is off too). top_p: (R,) float, 1 = off.
            min_p: (R,) float, 0 = off.

    Returns:
        (R,) tensor of z's dtype. Memory: (64, V) blocks for the rows that need top-k / top-p.
    """
    R, V = z.shape
    thr = torch.full((R,), -math.inf, dtype=z.dtype, device=z.device)
    use_m = min_p > 0
    if bool(use_m.any()):
        log_min_p = torch.log(min_p.to(z.dtype).clamp(min=torch.finfo(z.dtype).tiny))
        thr = torch.where(use_m, z.max(dim=-1).values + log_min_p, thr)
    use_k = (top_k > 0) & (top_k < V)
    use_p = top_p < 1
    rows = torch.nonzero(use_k | use_p).flatten()
    for block in rows.split(_BLOCK_ROWS) if len(rows) else ():
        zr = z.index_select(0, block)
        t = thr.index_select(0, block)
        bk, bp = use_k[block], use_p[block]
        k = torch.where(bk, top_k[block], 1)
        width = int(k.max())  # the largest k asked for (1 when none is)
        if bool(bp.any()):
            width = max(width, min(V, TOP_P_CANDIDATES))
        vals = zr.topk(width, dim=-1).values if width < V else zr.sort(dim=-1, descending=True).values
        kth = vals.gather(1, (k - 1)[:, None]).squeeze(1)
        t = torch.where(bk, torch.maximum(t, kth), t)
        if bool(bp.any()):
            p = top_p[block].to(z.dtype)
            lse = torch.logsumexp(zr.masked_fill(zr < t[:, None], -math.inf), dim=-1)
            masked = vals.masked_fill(vals < t[:, None], -math.inf)
            boundary, found = _nucleus_boundary(masked, lse, p)
            redo = torch.nonzero(bp & ~found).flatten() if width < V else rows.new_zeros(0)
            if len(redo):  # a nucleus wider than the candidates: sort those rows whole
                full = zr[redo].sort(dim=-1, descending=True).values
                full = full.masked_fill(full < t[redo, None], -math.inf)
                boundary[redo] = _nucleus_boundary(full, lse[redo], p[redo])[0]
            t = torch.where(bp, torch.maximum(t, boundary), t)
        thr[block] = t
    return thr


def processed_logits(logits: Tensor, params: SamplingArrays, *, always_keep: Tensor | None = None) -> Tensor:
    """The tempered logits with every token outside the kept set at -inf: ``log_softmax`` of the
    result is the processed distribution (module docstring).

    Args:
        logits: (R, V) raw logits (any float dtype; computed in float32, float64 stays float64).
        params: per row (R,) tensors on logits' device (:func:`as_tensors`); temperature > 0
            (map greedy calls to 1 first: :func:`trajstore.sampling.effective_sampling`).
        always_keep: (R,) int64 ids kept whatever the thresholds say (the trainer's sampled
            tokens: the engine drew them, so they were in its kept set; float differences between
            the engine's and the trainer's logits must not give them probability 0).

    Returns:
        (R, V) float32 (float64 for float64 logits).
    """
    dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    z = logits.to(dtype) / params.temperature.to(dtype)[:, None]
    thr = kept_threshold(z, params.top_k, params.top_p, params.min_p)
    if always_keep is not None:
        thr = torch.minimum(thr, z.gather(1, always_keep[:, None]).squeeze(1))
    return z.masked_fill(z < thr[:, None], -math.inf)


def processed_logprobs(logits: Tensor, params: SamplingArrays) -> Tensor:
    """Log-probabilities of the processed distribution, (R, V) -> (R, V) nats (-inf outside the
    kept set); see :func:`processed_logits`."""
    return torch.log_softmax(processed_logits(logits, params), dim=-1)
