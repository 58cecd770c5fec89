"""Named loss aggregations: how a per-token loss over action tokens becomes one scalar
(token-mean, seq-mean-token-sum, seq-mean-token-mean), with the global denominators passed in so
that a step split into micro-batches gives the full-batch value. Pure torch.

Notation: B rows, T tokens per row (padded); action_mask[b, t] = 1 where token t of row b is a
model action token, 0 for prompt, observation and padding tokens.
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


def _token_mean(
    per_token: Tensor, mask: Tensor, num_tokens: Tensor | int | None, num_sequences
) -> Tensor:
    denominator = mask.sum().clamp(min=1) if num_tokens is None else _count(num_tokens)
    return per_token.sum() / denominator


def _seq_mean_token_sum(
    per_token: Tensor, mask: Tensor, num_tokens, num_sequences: Tensor | int | None
) -> Tensor:
    if num_sequences is None:
        denominator = mask.any(-1).sum().clamp(min=1)
    else:
        denominator = _count(num_sequences)
    return per_token.sum() / denominator


def _seq_mean_token_mean(
    per_token: Tensor, mask: Tensor, num_tokens, num_sequences: Tensor | int | None
) -> Tensor:
    per_sequence = per_token.sum(-1) / mask.sum(-1).clamp(min=1)
    if num_sequences is None:
        denominator = mask.any(-1).sum().clamp(min=1)
    else:
        denominator = _count(num_sequences)
    return per_sequence.sum() / denominator


_AGGREGATORS: Mapping[str, Callable[..., Tensor]] = {
    "token-mean": _token_mean,
    "seq-mean-token-sum": _seq_mean_token_sum,
    "seq-mean-token-mean": _seq_mean_token_mean,
}


def aggregate(
    per_token: Tensor,
    action_mask: Tensor,
    *,
    agg: Aggregation = "token-mean",
    num_tokens: Tensor | int | None = None,
    num_sequences: Tensor | int | None = None,
) -> Tensor:
    """Reduce a per-token loss to a scalar over action tokens, by a named rule.

    Modes (``n_b`` = action tokens of row ``b``):

    * ``"token-mean"`` (default; SAO.md "what the paper leaves open"):
      ``sum_{b,t} loss * mask / num_tokens``. ``num_tokens`` should be the action-token count
      of the whole global batch (all micro-batches, all data-parallel ranks); then summing the
      micro-batch losses (and their gradients) gives exactly the full-batch token mean, however
      the batch is split. Tokens that DIS masks stay in the denominator.
    * ``"seq-mean-token-sum"``: ``sum_{b,t} loss * mask / num_sequences`` (each trajectory's
      summed loss, averaged over trajectories; Dr. GRPO-style, no length normalisation).
    * ``"seq-mean-token-mean"``: ``sum_b (sum_t loss * mask / n_b) / num_sequences`` (each
      trajectory's mean loss, averaged over trajectories; the original GRPO normalisation).

    When a denominator is not passed it is computed from this micro-batch: action tokens
    (clamped to >= 1), or rows that have at least one action token (clamped to >= 1). Pass the
    global value whenever the batch is split.

    Args:
        per_token: ``(B, T)`` float loss per token.
        action_mask: ``(B, T)``, 1 = model action token.
        agg: the mode.
        num_tokens: global action-token count, int or 0-dim tensor (``"token-mean"``).
        num_sequences: global trajectory count, int or 0-dim tensor (the ``"seq-*"`` modes).

    Returns:
        ``()`` float tensor (differentiable with respect to ``per_token``).

    Raises:
        ValueError: unknown ``agg`` or shape mismatch.
    """
    if agg not in _AGGREGATORS:
        raise ValueError(f"agg must be one of {sorted(_AGGREGATORS)}, got {agg!r}")
    if per_token.shape != action_mask.shape or per_token.dim() != 2:
        raise ValueError(
            f"per_token and action_mask must share one (B, T) shape, got "
            f"{tuple(per_token.shape)} and {tuple(action_mask.shape)}"
        )
    mask = action_mask != 0
    masked = torch.where(mask, per_token, 0.0)
    return _AGGREGATORS[agg](masked, mask, num_tokens, num_sequences)
