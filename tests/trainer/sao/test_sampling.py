"""The processed distribution's one definition (trajstore.trainer.sao.sampling): its kept sets equal
an obvious per-row walk (sorting, counting, comparing) for every combination of temperature,
min-p, top-k and top-p, ties included; the order is vLLM V1's (min-p before top-k / top-p, so
min-p changes the nucleus); the fast top-p search equals a full sort."""

from __future__ import annotations

import math

import pytest
import torch

from trajstore.sampling import SamplingArrays
from trajstore.trainer.sao import sampling as S
from trajstore.trainer.sao.sampling import kept_threshold, processed_logits, processed_logprobs


def walk_keep(z: torch.Tensor, k: int, p: float, m: float) -> torch.Tensor:
    """The kept set of one row of tempered logits, step by step as the docs say it: min-p, top-k
    over the survivors (ties with the k-th kept), top-p over the renormalised survivors (each
    token whose preceding mass is < p, and the tokens tied with the last one)."""
    V = z.numel()
    keep = torch.ones(V, dtype=torch.bool)
    if m > 0:
        keep &= z >= z.max() + math.log(m)
    if 0 < k < V:
        survivors = sorted(z[keep].tolist(), reverse=True)
        if len(survivors) >= k:
            keep &= z >= survivors[k - 1]
    if p < 1:
        zk = z.masked_fill(~keep, -math.inf)
        lse = torch.logsumexp(zk, 0)
        srt = zk.sort(descending=True).values
        probs = torch.exp(srt - lse)
        before = torch.cumsum(probs, 0) - probs
        n = max(1, int((before < torch.tensor(p, dtype=z.dtype)).sum()))
        keep &= z >= srt[n - 1]
    return keep


def _row_params(k: int, p: float, m: float, t: float = 1.0) -> SamplingArrays:
    return SamplingArrays(torch.tensor([t]), torch.tensor([k]), torch.tensor([p], dtype=torch.float32),
                          torch.tensor([m], dtype=torch.float32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kept_sets_equal_the_walk_for_every_combination_with_ties(dtype):
    gen = torch.Generator().manual_seed(0)
    V = 50
    ks, ps, ms = (0, 1, 3, 17, V, V + 4), (1.0, 0.05, 0.5, 0.9, 0.999), (0.0, 0.02, 0.3, 1.0)
    rows, params = [], []
    for i, (k, p, m) in enumerate((k, p, m) for k in ks for p in ps for m in ms):
        z = torch.randn(V, generator=gen, dtype=dtype)
        if i % 2:
            z = torch.round(z * 2) / 2  # ties at every boundary
        rows.append(z)
        params.append((k, p, m))
    z = torch.stack(rows)
    thr = kept_threshold(z, torch.tensor([k for k, _, _ in params]),
                         torch.tensor([p for _, p, _ in params], dtype=torch.float32),
                         torch.tensor([m for _, _, m in params], dtype=torch.float32))
    for i, (k, p, m) in enumerate(params):
        p_row = float(torch.tensor(p, dtype=torch.float32))  # the float32 value the kernel compares with
        want = walk_keep(z[i], k, p_row, float(torch.tensor(m, dtype=torch.float32)))
        assert torch.equal(z[i] >= thr[i], want), (k, p, m, i)


def test_min_p_comes_before_top_p_as_in_vllm():
    # probs [.5, .3, .2]: min-p .5 keeps {.5, .3} (renormalised .625 / .375), then top-p .6 keeps
    # only the first (.625 >= .6); the other order (SGLang's) would keep two
    z = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    lp = processed_logprobs(z, SamplingArrays(torch.ones(1), torch.zeros(1, dtype=torch.long),
                                              torch.tensor([0.6]), torch.tensor([0.5])))
    assert torch.isfinite(lp).tolist() == [[True, False, False]]


def test_processed_logprobs_are_a_distribution_and_temperature_comes_first():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(6, 40, generator=gen)
    params = SamplingArrays(torch.tensor([0.7, 1.0, 2.0, 0.7, 1.3, 0.5]), torch.tensor([20, 0, 5, 0, 40, 3]),
                            torch.tensor([0.8, 1.0, 1.0, 1.0, 0.5, 1.0]), torch.tensor([0.0, 0.0, 0.0, 0.1, 0.05, 0.0]))
    lp = processed_logprobs(logits, params)
    assert torch.allclose(lp.exp().sum(-1), torch.ones(6), atol=1e-6)
    # untruncated row: log_softmax(x / T)
    torch.testing.assert_close(lp[1], torch.log_softmax(logits[1] / 1.0, -1))
    kept = torch.isfinite(lp[2])  # top-5 at temperature 2: the 5 largest logits, renormalised
    torch.testing.assert_close(lp[2, kept], torch.log_softmax(logits[2, kept] / 2.0, -1))
    assert int(kept.sum()) == 5 and set(kept.nonzero().flatten().tolist()) == set(logits[2].topk(5).indices.tolist())


def test_fast_top_p_search_equals_a_full_sort(monkeypatch):
    gen = torch.Generator().manual_seed(2)
    z = torch.randn(30, 3000, generator=gen) * torch.linspace(0.01, 3.0, 30)[:, None]  # narrow to flat rows
    k = torch.where(torch.arange(30) % 3 == 0, 2000, 0)
    p = torch.linspace(0.1, 0.99, 30)
    m = torch.zeros(30)
    fast = kept_threshold(z, k, p, m)
    monkeypatch.setattr(S, "TOP_P_CANDIDATES", 10**9)  # always the whole row
    assert torch.equal(fast, kept_threshold(z, k, p, m))


def test_always_keep_keeps_the_target_and_everything_likelier():
    z = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    params = _row_params(1, 1.0, 0.0)
    out = processed_logits(z, params, always_keep=torch.tensor([2]))
    assert torch.isfinite(out).tolist() == [[True, True, True, False]]
