"""Named loss aggregations: how a per-token loss over action tokens becomes one scalar
(token-mean, seq-mean-token-sum, seq-mean-token-mean), per trajectory also on packed rows, with
the global denominators passed in so that any split into micro-batches gives the full-batch value.

Notation: B rows, T positions per row. A row is one trajectory (padded layout) or several
trajectories concatenated (packed layout, e.g. the trainer's ``(1, L)`` micro-batches), told
apart by ``segment_ids``. action_mask[b, t] = 1 where position t of row b is a model action
token, 0 for prompt, observation and padding positions. Pure torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal

import torch
from torch import Tensor

__all__ = ["Aggregation", "aggregate"]

Aggregation = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"]
"""How per-token losses become one scalar (see :func:`aggregate`)."""


def _count(x: Tensor | float) -> Tensor:
    return torch.as_tensor(x)


def _sequence_sizes(mask: Tensor, segment_ids: Tensor | None) -> tuple[Tensor, Tensor]:
    """``(B, T)`` int64: the action-token count of the trajectory each position belongs to; and
    ``()`` int64: how many trajectories have at least one action token."""
    if segment_ids is None:  # one trajectory per row
        per_row = mask.sum(-1, keepdim=True)
        return per_row.expand_as(mask), (per_row > 0).sum()
    ids = segment_ids.reshape(-1).to(torch.int64)
    if ids.device.type == "cpu":  # on an accelerator index_add_ checks the bounds (no host sync)
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= ids.numel():
            raise ValueError(f"segment_ids must be in [0, B * T) = [0, {ids.numel()}), got {low}..{high}")
    # ids < B * T: a count table of that size needs no host sync to learn the largest id
    counts = torch.zeros(ids.numel(), dtype=torch.int64, device=ids.device)
    counts.index_add_(0, ids, mask.reshape(-1).to(torch.int64))  # integer sums: exact, any order
    return counts[ids].reshape(mask.shape), (counts > 0).sum()


def _sequences(mask: Tensor, segment_ids: Tensor | None, num_sequences: Tensor | int | None) -> Tensor:
    if num_sequences is not None:
        return _count(num_sequences)
    return _sequence_sizes(mask, segment_ids)[1].clamp(min=1)


def _token_mean(per_token: Tensor, mask: Tensor, num_tokens: Tensor | int | None,
                num_sequences: Tensor | int | None, segment_ids: Tensor | None) -> Tensor:
    denominator = mask.sum().clamp(min=1) if num_tokens is None else _count(num_tokens)
    return per_token.sum() / denominator


def _seq_mean_token_sum(per_token: Tensor, mask: Tensor, num_tokens: Tensor | int | None,
                        num_sequences: Tensor | int | None, segment_ids: Tensor | None) -> Tensor:
    return per_token.sum() / _sequences(mask, segment_ids, num_sequences)


def _seq_mean_token_mean(per_token: Tensor, mask: Tensor, num_tokens: Tensor | int | None,
                         num_sequences: Tensor | int | None, segment_ids: Tensor | None) -> Tensor:
    # sum_s (sum_{t in s} loss_t / n_s) written per token (loss_t / n_{s(t)}), so that no float sum
    # is scattered: the same value on any device and in any order of trajectories
    sizes, with_actions = _sequence_sizes(mask, segment_ids)
    denominator = with_actions.clamp(min=1) if num_sequences is None else _count(num_sequences)
    return (per_token / sizes.clamp(min=1)).sum() / denominator


_AGGREGATORS: Mapping[str, Callable[..., Tensor]] = {
    "token-mean": _token_mean,
    "seq-mean-token-sum": _seq_mean_token_sum,
    "seq-mean-token-mean": _seq_mean_token_mean,
}


def _check_segment_ids(segment_ids: Tensor, shape: torch.Size) -> None:
    if segment_ids.shape != shape:
        raise ValueError(f"segment_ids must have the (B, T) shape {tuple(shape)}, got {tuple(segment_ids.shape)}")
    if segment_ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"segment_ids must be int64 (or int32), got {segment_ids.dtype}")


def aggregate(
    per_token: Tensor,
    action_mask: Tensor,
    *,
    agg: Aggregation = "token-mean",
    num_tokens: Tensor | int | None = None,
    num_sequences: Tensor | int | None = None,
    segment_ids: Tensor | None = None,
) -> Tensor:
    """Reduce a per-token loss to a scalar over action tokens, by a named rule.

    Modes (``s`` runs over trajectories, ``n_s`` = action tokens of trajectory ``s``):

    * ``"token-mean"`` (default; docs/sao.md "what the paper leaves open"):
      ``sum_{b,t} loss * mask / num_tokens``. ``num_tokens`` should be the action-token count
      of the whole global batch (all micro-batches, all data-parallel ranks); then summing the
      micro-batch losses (and their gradients) gives exactly the full-batch token mean, however
      the batch is split. Tokens that DIS masks stay in the denominator.
    * ``"seq-mean-token-sum"``: ``sum_{b,t} loss * mask / num_sequences`` (each trajectory's
      summed loss, averaged over trajectories; Dr. GRPO-style, no length normalisation).
    * ``"seq-mean-token-mean"``: ``sum_s (sum_{t in s} loss * mask / n_s) / num_sequences``
      (each trajectory's mean loss, averaged over trajectories; the original GRPO
      normalisation). A trajectory is a row, or with ``segment_ids`` one segment of a packed
      row: without them a packed row of several trajectories would be averaged as one.

    With the global ``num_tokens`` / ``num_sequences`` passed, every mode is exact on any split
    of the batch into micro-batches (padded or packed) as long as no trajectory is split: the
    micro-batch values (and gradients) sum to the full-batch one. When a denominator is not
    passed it is computed from this micro-batch: action tokens (clamped to >= 1), or
    trajectories with at least one action token (clamped to >= 1).

    Args:
        per_token: ``(B, T)`` float loss per token.
        action_mask: ``(B, T)``, 1 = model action token.
        agg: the mode.
        num_tokens: global action-token count, int or 0-dim tensor (``"token-mean"``).
        num_sequences: global trajectory count, int or 0-dim tensor (the ``"seq-*"`` modes).
        segment_ids: ``(B, T)`` int64 in ``[0, B * T)``, packed layout: the trajectory each
            position belongs to (e.g. its index in the micro-batch); positions of one trajectory
            share an id, other trajectories (in any row) have other ids; ids need not be
            contiguous. None = each row is one trajectory. Read (and range-checked on the CPU)
            by the ``"seq-*"`` modes only; no host sync.

    Returns:
        ``()`` float tensor (differentiable with respect to ``per_token``).

    Raises:
        ValueError: unknown ``agg``, shape mismatch, or ``segment_ids`` not integer, of another
            shape, or (``"seq-*"`` modes, on the CPU) outside ``[0, B * T)``.
    """
    if agg not in _AGGREGATORS:
        raise ValueError(f"agg must be one of {sorted(_AGGREGATORS)}, got {agg!r}")
    if per_token.shape != action_mask.shape or per_token.dim() != 2:
        raise ValueError(
            f"per_token and action_mask must share one (B, T) shape, got "
            f"{tuple(per_token.shape)} and {tuple(action_mask.shape)}"
        )
    if segment_ids is not None:
        _check_segment_ids(segment_ids, per_token.shape)
        if segment_ids.numel() == 0:
            segment_ids = None
    mask = action_mask != 0
    masked = torch.where(mask, per_token, 0.0)
    return _AGGREGATORS[agg](masked, mask, num_tokens, num_sequences, segment_ids)
