"""Pure-torch packing: a micro-batch's trajectories concatenated into one row in the
prediction frame (:class:`PackedMicroBatch`), and the conversions between that packed layout
and one padded row per trajectory (what the advantage estimators take), or one row per chain of
an episode's parts (:func:`join_chains`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from trajstore.sampling import SamplingArrays, no_truncation
from trajstore.trainer.data.episodes import credited_reward
from trajstore.trainer.data.samples import TrainSample


class PackedMicroBatch(NamedTuple):
    """Trajectories of one micro-batch concatenated into a single row (no padding).

    Positions restart at 0 for each trajectory, which makes transformers build a block-diagonal
    causal mask (no attention across trajectories). Everything is in the *prediction frame*:
    position p holds what is predicted from tokens[:p+1], i.e. token p+1. L = total tokens.

    Fields:
        input_ids: (1, L) int64 token ids.
        position_ids: (1, L) int64 positions inside each trajectory.
        targets: (1, L) int64; the next token of the same trajectory (0 at each trajectory's last
            position, which is never an action slot).
        action_mask: (1, L) bool; True = the predicted token is a model action (an action slot).
        rollout_logprobs: (1, L) float32, nats; behaviour log-prob of the predicted token at action
            slots, 0 elsewhere.
        policy_version: (1, L) int64; version that generated the predicted token, -1 elsewhere.
        sampling: the sampling parameters of the predicted token's distribution, (1, L) tensors
            (temperature, top_p, min_p float32; top_k int64; temperature 1 without truncation
            where no action is predicted).
        segments: (n + 1,) int64 offsets; trajectory i occupies ``[segments[i], segments[i+1])``.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    targets: torch.Tensor
    action_mask: torch.Tensor
    rollout_logprobs: torch.Tensor
    policy_version: torch.Tensor
    sampling: SamplingArrays
    segments: torch.Tensor


def pack(samples: Sequence[TrainSample], device: torch.device | str = "cpu") -> PackedMicroBatch:
    """Pack samples into one row in the prediction frame (see :class:`PackedMicroBatch`).

    An empty `samples` gives a one-token dummy row with no action slot (used so that every
    data-parallel rank runs the same number of micro-batches).
    """
    if not samples:
        z = torch.zeros((1, 1), dtype=torch.int64, device=device)
        return PackedMicroBatch(z, z.clone(), z.clone(), torch.zeros((1, 1), dtype=torch.bool, device=device),
                                torch.zeros((1, 1), device=device), torch.full((1, 1), -1, device=device),
                                _sampling_tensors([no_truncation(1)], device), torch.tensor([0, 1]))
    ids, pos, tgt, act, lp, pv, smp, seg = [], [], [], [], [], [], [], [0]
    for s in samples:
        t = s.num_tokens
        ids.append(s.tokens)
        pos.append(np.arange(t, dtype=np.int64))
        tgt.append(np.concatenate([s.tokens[1:], [0]]))
        act.append(np.concatenate([s.action_mask[1:], [False]]))
        lp.append(np.concatenate([np.nan_to_num(s.rollout_logprobs[1:], nan=0.0), [0.0]]).astype(np.float32))
        pv.append(np.concatenate([s.policy_version[1:], [-1]]))
        smp.append(SamplingArrays(*(np.concatenate([x[1:], none[:1]]) for x, none in zip(s.sampling, NONE))))
        seg.append(seg[-1] + t)

    def cat(parts: list[np.ndarray], dtype: torch.dtype) -> torch.Tensor:
        return torch.as_tensor(np.concatenate(parts)).to(dtype=dtype).unsqueeze(0).to(device)

    return PackedMicroBatch(cat(ids, torch.int64), cat(pos, torch.int64), cat(tgt, torch.int64),
                            cat(act, torch.bool), cat(lp, torch.float32), cat(pv, torch.int64),
                            _sampling_tensors(smp, device), torch.tensor(seg, dtype=torch.int64))


NONE = no_truncation(1)
"""Sampling parameters where no action is predicted (each trajectory's last position)."""


def _sampling_tensors(parts: Sequence[SamplingArrays], device: torch.device | str) -> SamplingArrays:
    """Concatenated numpy parts as (1, L) tensors (temperature, top_p, min_p float32; top_k int64)."""
    return SamplingArrays(*(torch.as_tensor(np.concatenate(xs)).to(dtype=dt).unsqueeze(0).to(device)
                            for xs, dt in zip(zip(*parts), (torch.float32, torch.int64, torch.float32, torch.float32))))


def to_rows(x: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
    """One row per trajectory of a packed tensor, zero-padded on the right.

    Args:
        x: ``(1, L)`` packed tensor (any dtype), e.g. a :class:`PackedMicroBatch` field or the
            critic's values of one.
        segments: ``(n + 1,)`` int64 offsets of the packing (:attr:`PackedMicroBatch.segments`).

    Returns:
        ``(n, Tmax)`` tensor of ``x``'s dtype and device, ``Tmax`` = longest trajectory: row ``i``
        is ``x[0, segments[i]:segments[i + 1]]`` followed by zeros.
    """
    lens = (segments[1:] - segments[:-1]).tolist()
    out = x.new_zeros((len(lens), max(lens)))
    for i, (a, n) in enumerate(zip(segments[:-1].tolist(), lens)):
        out[i, :n] = x[0, a:a + n]
    return out


def to_packed(rows: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
    """``(n, Tmax)`` rows -> ``(1, L)`` packed: the inverse of :func:`to_rows` (padding dropped)."""
    lens = (segments[1:] - segments[:-1]).tolist()
    return torch.cat([rows[i, :n] for i, n in enumerate(lens)]).unsqueeze(0)


class GAEInputs(NamedTuple):
    """A packed micro-batch laid out as one row per trajectory, as the advantage estimators
    (:mod:`trajstore.trainer.sao.advantages`) take it. n = trajectories, Tmax = the longest one.

    Fields:
        rewards: (n, Tmax) float32; the trajectory's reward at its last action slot (0 for an abandoned
            branch: :func:`~trajstore.trainer.data.episodes.credited_reward`), 0 elsewhere.
        values: (n, Tmax) float; the critic's values (prediction frame), 0 in the padding.
        action_mask: (n, Tmax) bool; True = action slot.
    """

    rewards: torch.Tensor
    values: torch.Tensor
    action_mask: torch.Tensor


def gae_inputs(mb: PackedMicroBatch, samples: Sequence[TrainSample], values: torch.Tensor) -> GAEInputs:
    """Rewards, values and action mask of a micro-batch, one row per trajectory (see
    :class:`GAEInputs`); map results back with :func:`to_packed`.

    Args:
        mb: the packed micro-batch of `samples` (possibly the one-token dummy of ``pack([])``).
        samples: its trajectories, in packing order.
        values: ``(1, L)`` float critic values of `mb`.
    """
    mask = to_rows(mb.action_mask, mb.segments)
    n, width = mask.shape
    reward = torch.zeros(n, dtype=torch.float32)
    reward[:len(samples)] = torch.tensor([credited_reward(s) for s in samples], dtype=torch.float32)
    # last action slot per row (argmax takes the first maximum, here of the reversed row); a row
    # without one gets 0 at its end, i.e. no reward
    last = width - 1 - mask.flip(1).to(torch.uint8).argmax(1)
    rewards = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    rewards[torch.arange(n, device=mask.device), last] = torch.where(mask.any(1), reward.to(mask.device), 0.0)
    return GAEInputs(rewards, to_rows(values, mb.segments), mask)



class ChainedRows(NamedTuple):
    """:class:`GAEInputs` with the parts of each chain (:func:`~trajstore.trainer.data.episodes.episode_chains`)
    joined into one row, as the skip-observation GAE runs over them. c = chains, Tc = the longest.

    Fields:
        inputs: (c, Tc) rows: each chain's parts' rows (their own lengths, no padding between them)
            one after the other; the reward only at the last action slot of the chain's last part.
        chains: indices of the trajectories of each row, in chain order.
        lengths: (n,) each trajectory's length (its row's unpadded part).
    """

    inputs: GAEInputs
    chains: list[list[int]]
    lengths: list[int]


def join_chains(x: GAEInputs, segments: torch.Tensor, chains: Sequence[Sequence[int]]) -> ChainedRows:
    """Join the rows of `x` (one per trajectory, from :func:`gae_inputs`) chain by chain; a part
    that is not the last of its chain keeps no reward (the episode is credited once, at its end).

    Args:
        segments: ``(n + 1,)`` offsets of the packing the rows came from.
        chains: every row index in exactly one chain, each in chain order.
    """
    lengths = (segments[1:] - segments[:-1]).tolist()
    width = max(sum(lengths[i] for i in c) for c in chains)
    out = [t.new_zeros((len(chains), width)) for t in x]
    for k, c in enumerate(chains):
        at = 0
        for j, i in enumerate(c):
            n = lengths[i]
            out[1][k, at:at + n] = x.values[i, :n]
            out[2][k, at:at + n] = x.action_mask[i, :n]
            if j == len(c) - 1:
                out[0][k, at:at + n] = x.rewards[i, :n]
            at += n
    return ChainedRows(GAEInputs(*out), [list(c) for c in chains], lengths)


def split_chains(rows: torch.Tensor, joined: ChainedRows) -> torch.Tensor:
    """``(c, Tc)`` rows of :func:`join_chains`' layout -> ``(n, Tmax)`` one row per trajectory
    (zero-padded), the inverse of the join."""
    n, width = len(joined.lengths), max(joined.lengths)
    out = rows.new_zeros((n, width))
    for k, c in enumerate(joined.chains):
        at = 0
        for i in c:
            out[i, :joined.lengths[i]] = rows[k, at:at + joined.lengths[i]]
            at += joined.lengths[i]
    return out
