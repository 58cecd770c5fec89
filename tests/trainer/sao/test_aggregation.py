"""The named loss aggregations (trainer/sao/aggregation.py): hand-computed values in the padded
and the packed layout, and the invariance every mode must keep: the same trajectories
give the same loss and gradient padded or packed, in one micro-batch or split over several."""

from __future__ import annotations

import pytest
import torch

from trajstore.trainer.sao.aggregation import aggregate
from trajstore.trainer.sao.losses import POLICY_LOSSES, value_loss

f64 = torch.float64
MODES = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"]


def test_aggregation_modes_hand_computed():
    # per-token loss with mask: row 0 = [1, 2, (9)], row 1 = [3, (9), (9)], row 2 has no action token
    per_token = torch.tensor([[1.0, 2.0, 9.0], [3.0, 9.0, 9.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    # token-mean: (1 + 2 + 3) / 3 tokens = 2
    assert aggregate(per_token, mask).item() == 2.0
    # seq-mean-token-sum: (3 + 3) / 2 rows with actions = 3
    assert aggregate(per_token, mask, agg="seq-mean-token-sum").item() == 3.0
    # seq-mean-token-mean: (1.5 + 3) / 2 = 2.25
    assert aggregate(per_token, mask, agg="seq-mean-token-mean").item() == 2.25
    # global denominators passed in override the local ones: 6 / 12 tokens, 6 / 4 sequences
    assert aggregate(per_token, mask, num_tokens=12).item() == 0.5
    assert aggregate(per_token, mask, agg="seq-mean-token-sum", num_sequences=4).item() == 1.5
    with pytest.raises(ValueError, match="agg"):
        aggregate(per_token, mask, agg="mean")  # type: ignore[arg-type]


# Two trajectories, per-token loss (x = not an action token, never read):
#   A: [x, 4]          one action token, summed loss 4, mean 4
#   B: [x, 1, 1, 1]    three action tokens, summed loss 3, mean 1
# token-mean          = (4 + 1 + 1 + 1) / 4 tokens     = 1.75
# seq-mean-token-sum  = (4 + 3) / 2 trajectories      = 3.5
# seq-mean-token-mean = (4 / 1 + 3 / 3) / 2           = 2.5
EXPECTED = {"token-mean": 1.75, "seq-mean-token-sum": 3.5, "seq-mean-token-mean": 2.5}
X = 9.0
PADDED = (torch.tensor([[X, 4.0, X, X], [X, 1.0, 1.0, 1.0]]), torch.tensor([[0, 1, 0, 0], [0, 1, 1, 1]]))
PACKED = (torch.tensor([[X, 4.0, X, 1.0, 1.0, 1.0]]), torch.tensor([[0, 1, 0, 1, 1, 1]]),
          torch.tensor([[0, 0, 1, 1, 1, 1]]))


@pytest.mark.parametrize("agg", MODES)
def test_two_trajectories_padded_packed_and_split_hand_computed(agg):
    want = pytest.approx(EXPECTED[agg], rel=1e-6)  # float32: 1/3 + 1/3 + 1/3 is 1 to within an ulp
    per_token, mask = PADDED
    assert aggregate(per_token, mask, agg=agg).item() == want
    assert aggregate(per_token, mask, agg=agg, num_tokens=4, num_sequences=2).item() == want
    per_token, mask, seg = PACKED
    assert aggregate(per_token, mask, agg=agg, segment_ids=seg).item() == want
    assert aggregate(per_token, mask, agg=agg, num_tokens=4, num_sequences=2, segment_ids=seg).item() == want
    # one micro-batch per trajectory (each packed on its own, ids from 0): 4/4 + 3/4, 4/2 + 3/2, 4/2 + 1/2
    a = aggregate(torch.tensor([[X, 4.0]]), torch.tensor([[0, 1]]), agg=agg, num_tokens=4, num_sequences=2,
                  segment_ids=torch.tensor([[0, 0]]))
    b = aggregate(torch.tensor([[X, 1.0, 1.0, 1.0]]), torch.tensor([[0, 1, 1, 1]]), agg=agg, num_tokens=4,
                  num_sequences=2, segment_ids=torch.tensor([[0, 0, 0, 0]]))
    assert (a + b).item() == want


def test_a_packed_row_without_segment_ids_is_one_trajectory():
    """What the trainer computed before it passed segment ids: the packed row was averaged as one
    trajectory, (4 + 1 + 1 + 1) / 4 = 1.75, then divided by the 2 trajectories it passed: 0.875
    instead of 2.5; seq-mean-token-sum does not depend on where a trajectory ends (7 / 2)."""
    per_token, mask, _ = PACKED
    assert aggregate(per_token, mask, agg="seq-mean-token-mean", num_sequences=2).item() == 0.875
    assert aggregate(per_token, mask, agg="seq-mean-token-sum", num_sequences=2).item() == 3.5
    assert aggregate(per_token, mask, agg="seq-mean-token-mean").item() == 1.75  # 1 row with actions


def test_segment_ids_are_checked():
    per_token, mask, seg = PACKED
    with pytest.raises(ValueError, match="shape"):
        aggregate(per_token, mask, agg="seq-mean-token-mean", segment_ids=seg[:, :3])
    with pytest.raises(ValueError, match="int64"):
        aggregate(per_token, mask, agg="seq-mean-token-mean", segment_ids=seg.float())
    with pytest.raises(ValueError, match=r"\[0, 6\), got -1\.\.0"):
        aggregate(per_token, mask, agg="seq-mean-token-mean", segment_ids=seg - 1)
    with pytest.raises(ValueError, match=r"\[0, 6\), got 6\.\.7"):
        aggregate(per_token, mask, agg="seq-mean-token-mean", segment_ids=seg + 6)
    # ids need not be contiguous nor start at 0; a trajectory without an action token adds nothing
    sparse = torch.tensor([[5, 5, 3, 3, 3, 3]])
    assert aggregate(per_token, mask, agg="seq-mean-token-mean", segment_ids=sparse).item() == pytest.approx(2.5)
    no_action = torch.tensor([[0, 1, 0, 1, 1, 1, 0, 0]])
    assert aggregate(torch.cat([per_token, torch.full((1, 2), X)], 1), no_action, agg="seq-mean-token-mean",
                     segment_ids=torch.tensor([[0, 0, 1, 1, 1, 1, 2, 2]])).item() == pytest.approx(2.5)  # (4+1)/2


def _trajectories(seed: int, n: int = 6):
    """n trajectories of random lengths (one has no action token): per-token inputs of each."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        t = int(torch.randint(3, 12, (1,), generator=gen))
        mask = (torch.rand(t, generator=gen) < 0.6).to(f64) * (i != 2)
        rollout = -torch.rand(t, generator=gen, dtype=f64) * 3
        out.append({"mask": mask, "rollout": rollout,
                    "logprobs": rollout + 0.6 * torch.randn(t, generator=gen, dtype=f64),
                    "advantages": torch.randn(t, generator=gen, dtype=f64),
                    "returns": torch.randn(t, generator=gen, dtype=f64)})
    return out


def _padded(trajs, key):
    width = max(len(t[key]) for t in trajs)
    return torch.stack([torch.nn.functional.pad(t[key], (0, width - len(t[key]))) for t in trajs])


def _packed(trajs, key):
    return torch.cat([t[key] for t in trajs]).unsqueeze(0)


def _segment_ids(trajs):
    return torch.cat([torch.full((len(t["mask"]),), i) for i, t in enumerate(trajs)]).unsqueeze(0)


def _loss(kind: str, x: torch.Tensor, layout, trajs, agg, n_tok, n_seq):
    """The loss `kind` of `trajs` in `layout` (padded rows or one packed row), with `x` (the
    differentiable input: log-probs, or values for the value loss) laid out the same way."""
    seg = _segment_ids(trajs) if layout is _packed else None
    kw = {"agg": agg, "num_tokens": n_tok, "num_sequences": n_seq, "segment_ids": seg}
    if kind == "value":
        return value_loss(x, layout(trajs, "returns"), layout(trajs, "mask"), **kw)[0]
    return POLICY_LOSSES[kind](x, layout(trajs, "rollout"), layout(trajs, "advantages"), layout(trajs, "mask"),
                               0.3, 0.5, **kw)[0]


@pytest.mark.parametrize("kind", [*sorted(POLICY_LOSSES), "value"])
@pytest.mark.parametrize("agg", MODES)
def test_padded_packed_and_every_split_give_one_loss_and_gradient(kind, agg):
    trajs = _trajectories(seed=5)
    key = "returns" if kind == "value" else "logprobs"  # the value loss differentiates the values: any tensor
    n_tok = int(sum(t["mask"].sum() for t in trajs))
    n_seq = len(trajs)
    # reference: one padded batch, each row one trajectory
    ref_x = _padded(trajs, key).clone().requires_grad_()
    ref = _loss(kind, ref_x, _padded, trajs, agg, n_tok, n_seq)
    (ref_grad,) = torch.autograd.grad(ref, ref_x)
    ref_grads = [ref_grad[i, :len(t["mask"])] for i, t in enumerate(trajs)]
    for layout in (_padded, _packed):
        for split in ([6], [1, 1, 1, 1, 1, 1], [1, 3, 2], [4, 2]):  # trajectories per micro-batch
            total, grads, start = 0.0, [], 0
            for size in split:
                part = trajs[start:start + size]
                x = layout(part, key).clone().requires_grad_()
                loss = _loss(kind, x, layout, part, agg, n_tok, n_seq)
                (g,) = torch.autograd.grad(loss, x)
                total += loss.item()
                offsets = [0, *torch.tensor([len(t["mask"]) for t in part]).cumsum(0).tolist()]
                grads += ([g[i, :len(t["mask"])] for i, t in enumerate(part)] if layout is _padded
                          else [g[0, offsets[i]:offsets[i + 1]] for i in range(len(part))])
                start += size
            assert total == pytest.approx(ref.item(), rel=1e-12, abs=1e-12), (layout.__name__, split)
            for got, want in zip(grads, ref_grads):
                torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)
