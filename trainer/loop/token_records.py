"""Per-token trainer annotations (``traj train --record-tokens FRACTION``): for the action tokens
of a sample of the trained trajectories, what the policy loss saw (behaviour and trainer
log-probs, importance ratio, DIS band, advantage) and the critic's value and return, written to
``runs/<run_id>/tokens/`` (schema :data:`trajstore.token_annotations.TOKEN_ANNOTATION_SCHEMA`).

The annotations of a micro-batch are gathered on the device during the policy update and copied
to the host without waiting (:func:`capture`); they are read after the step's one host sync
(:func:`~trajstore.trainer.loop.step_stats.log_metrics`), so recording adds no sync of its own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import torch
from torch import Tensor

from trajstore.store import Store, id_hashes
from trajstore.store.layout import run_tokens_dir
from trajstore.token_annotations import BAND_ABOVE, BAND_BELOW, BAND_INSIDE, TOKEN_ANNOTATION_SCHEMA
from trajstore.trainer.data import PackedMicroBatch, TrainSample
from trajstore.trainer.loop.records import ITERATION_KEY
from trajstore.trainer.sao.losses import dis_band

ROWS = ("action_mask", "rollout_logprob", "trainer_logprob", "ratio", "band", "advantage", "value", "return")
"""The rows of :attr:`TokenCapture.data`, in order."""


def is_recorded(trajectory_ids: Sequence[str], fraction: float) -> list[bool]:
    """Whether each trajectory's tokens are recorded at `fraction` (0 = none, 1 = all): the
    trajectory's 64-bit id hash (:func:`trajstore.store.id_hashes`) below ``fraction * 2**64``.
    Deterministic, so every rank and a resumed run pick the same trajectories."""
    if fraction <= 0 or not trajectory_ids:
        return [False] * len(trajectory_ids)
    bound = int(fraction * 2**64)
    return [int(h) < bound for h in id_hashes(list(trajectory_ids))]


class TokenCapture(NamedTuple):
    """The recorded trajectories of one micro-batch.

    Fields:
        trajectory_ids: the recorded trajectories, in packing order.
        lengths: tokens of each (its packed positions), in the same order.
        data: ``(len(ROWS), sum(lengths))`` float32, on the host once the step has synced (a
            non-blocking copy until then): per packed position (prediction frame: position p of a
            trajectory predicts its token p + 1) each of :data:`ROWS`; ``action_mask`` is 1 at the
            action slots the loss trained, ``band`` is -1 / 0 / 1 (NaN for a NaN ratio), ``value``
            and ``return`` NaN without a critic.
    """

    trajectory_ids: list[str]
    lengths: list[int]
    data: Tensor


def capture(mb: PackedMicroBatch, samples: Sequence[TrainSample], recorded: Sequence[bool], logprobs: Tensor,
            advantages: Tensor, values: Tensor | None, returns: Tensor | None, eps_low: float,
            eps_high: float) -> TokenCapture | None:
    """Gather the annotations of a micro-batch's recorded trajectories on the device and start
    their copy to the host (no sync: the slices come from the host-side packing offsets).

    Args:
        mb: the packed micro-batch of `samples` (:func:`~trajstore.trainer.data.pack`: trajectory i
            occupies the positions after the tokens of the ones before it).
        samples: its trajectories, in packing order; recorded: whether each is recorded.
        logprobs: ``(1, L)``, nats; the current policy's log-probs of ``mb.targets``, as the loss got them.
        advantages: ``(1, L)``, the loss's advantages. values, returns: ``(1, L)`` critic values and
            targets, or None without a critic.
        eps_low, eps_high: DIS's band (:func:`~trajstore.trainer.sao.losses.dis_band`).

    Returns:
        None when no trajectory of the micro-batch is recorded.
    """
    picked = [i for i, r in enumerate(recorded) if r]
    if not picked:
        return None
    with torch.no_grad():
        mask = mb.action_mask[0]
        lp = logprobs[0].detach().float()
        rollout = mb.rollout_logprobs[0].float()
        # as the losses compute it: log-ratio at action slots only, then exp
        ratio = torch.where(mask, lp - rollout, 0.0).exp()
        b = dis_band(ratio, eps_low, eps_high)
        nan = torch.full_like(ratio, float("nan"))
        band = torch.where(b.below, float(BAND_BELOW), torch.where(b.above, float(BAND_ABOVE),
                                                                    torch.where(b.inside, float(BAND_INSIDE), nan)))
        rows = [mask.float(), rollout, lp, ratio, band, advantages[0].detach().float(),
                values[0].detach().float() if values is not None else nan,
                returns[0].detach().float() if returns is not None else nan]
        full = torch.stack(rows)
        seg = [0, *np.cumsum([s.num_tokens for s in samples]).tolist()]  # the packing's offsets, from host data
        parts = [full[:, seg[i]:seg[i + 1]] for i in picked]
        data = torch.cat(parts, dim=1).to("cpu", non_blocking=True)
    return TokenCapture([samples[i].trajectory_id for i in picked], [seg[i + 1] - seg[i] for i in picked], data)


def annotation_table(captures: Sequence[TokenCapture], *, run_id: str, step: int,
                     trainer_version: int) -> pa.Table:
    """The :data:`TOKEN_ANNOTATION_SCHEMA` rows of a step's captures: one per trained action slot.
    Call after the step's host sync (the captures' copies have landed)."""
    ids: list[str] = []
    positions, columns = [], []
    for c in captures:
        data = c.data.numpy()
        start = 0
        for tid, n in zip(c.trajectory_ids, c.lengths):
            block = data[:, start:start + n]
            slots = np.flatnonzero(block[0] > 0.5)
            ids += [tid] * len(slots)
            positions.append((slots + 1).astype(np.int32))  # slot p predicts token p + 1
            columns.append(block[1:, slots])
            start += n
    k = len(ids)
    vals = np.concatenate(columns, axis=1) if columns else np.zeros((len(ROWS) - 1, 0), np.float32)
    named = dict(zip(ROWS[1:], vals))
    band = named["band"]
    return pa.table({
        "run_id": pa.array([run_id] * k, pa.string()), "step": pa.array(np.full(k, step, np.int64)),
        "trainer_version": pa.array(np.full(k, trainer_version, np.int64)),
        "trajectory_id": pa.array(ids, pa.string()),
        "position": pa.array(np.concatenate(positions) if positions else np.zeros(0, np.int32)),
        **{n: pa.array(named[n].astype(np.float32)) for n in ("rollout_logprob", "trainer_logprob", "ratio")},
        "band": pa.array(np.nan_to_num(band, nan=0).astype(np.int8), mask=np.isnan(band)),
        "advantage": pa.array(named["advantage"].astype(np.float32)),
        **{n: pa.array(named[n].astype(np.float32), mask=np.isnan(named[n])) for n in ("value", "return")},
    }, schema=TOKEN_ANNOTATION_SCHEMA)


class TokenRecorder:
    """Writes a run's per-token annotations: every rank its own rows, one shard per step (tagged
    with the iteration, as the other records, so a resumed run rolls them back with them).

    Args:
        store: the store. run_id: the run. fraction: share of trajectories recorded, in (0, 1].
    """

    def __init__(self, store: Store, run_id: str, fraction: float):
        self.store = store
        self.run_id = run_id
        self.fraction = fraction

    def recorded(self, samples: Sequence[TrainSample]) -> list[bool]:
        return is_recorded([s.trajectory_id for s in samples], self.fraction)

    def write(self, captures: Sequence[TokenCapture | None], *, iteration: int, step: int,
              trainer_version: int) -> str | None:
        """Write the step's annotations as one shard (after the step's host sync); None when the
        step recorded nothing."""
        got = [c for c in captures if c is not None]
        if not got:
            return None
        table = annotation_table(got, run_id=self.run_id, step=step, trainer_version=trainer_version)
        return self.store.write_table(table, subdir=run_tokens_dir(self.run_id),
                                      extra_metadata={ITERATION_KEY: str(iteration).encode()})
