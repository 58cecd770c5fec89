"""One row group's trajectories as the per-token arrays a training sample is cut from
(:class:`RowGroupArrays`): action mask, log-probs, policy versions and the sampling parameters of
the distribution each action token was drawn from, built once per row group with numpy from the
spans, so the stream slices each trajectory's arrays out instead of looping over its spans."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow.compute as pc

from trajstore.reader import TrajectoryBatch
from trajstore.sampling import SamplingArrays, no_truncation, span_sampling
from trajstore.schema import SPAN_KIND_CODES

LINEAGE_SAMPLE_COLUMNS: tuple[str, ...] = ("episode_id", "parent_trajectory_id", "link_kind", "fork_point", "abandoned")
"""Lineage columns each sample carries (episode crediting, abandoned branches and the shared-prefix rule)."""


@dataclass
class RowGroupArrays:
    """Per-token arrays of one row group's trajectories, built once for all its rows with numpy
    (no loop over spans). N tokens, S spans in all.

    Attributes:
        batch: the row group.
        action: bool (N,): the token is a model action. logprobs: float32 (N,), nats: the engine's
            log-prob at action tokens, NaN elsewhere (schema v2 stores action tokens only).
        policy_version: int64 (N,): the version of the token's action span, -1 at non-action tokens.
        sampling: (N,) arrays: the temperature, top-k, top-p and min-p the trainer applies to each
            token (its action span's, as :func:`trajstore.sampling.span_sampling` gives them;
            temperature 1 without truncation at non-action tokens).
        mixed_before: int64 (S+1,): action spans produced by several versions (schema field
            ``policy_version_max``) among the first k spans, for each k.
        columns: ``group_id`` and the lineage columns, one value per row (None where a shard
            predates the column).
    """

    batch: TrajectoryBatch
    action: np.ndarray
    logprobs: np.ndarray
    policy_version: np.ndarray
    sampling: SamplingArrays
    mixed_before: np.ndarray
    columns: dict[str, list]

    @classmethod
    def of(cls, batch: TrajectoryBatch) -> RowGroupArrays:
        table = batch.table
        flat_spans = pc.list_flatten(table.column("spans").combine_chunks())
        mixed = flat_spans.field("policy_version_max").is_valid().to_numpy(zero_copy_only=False)
        is_act = batch.span_kind == SPAN_KIND_CODES["action"]
        lengths = (batch.span_end - batch.span_start)[is_act]
        at = batch.action_positions()  # every action token, span after span
        policy_version = np.full(len(batch.tokens), -1, dtype=np.int64)
        policy_version[at] = np.repeat(batch.span_policy_version[is_act], lengths)
        _, per_span = span_sampling(flat_spans)  # the one rule's effective parameters
        sampling = no_truncation(len(batch.tokens))
        for mine, spans in zip(sampling, per_span):
            mine[at] = np.repeat(spans[is_act], lengths)
        columns = {c: (table.column(c).to_pylist() if c in table.column_names else [None] * len(batch))
                   for c in ("group_id", *LINEAGE_SAMPLE_COLUMNS)}  # older shards lack them: nulls
        return cls(batch, batch.action_mask(), batch.logprobs_full(), policy_version, sampling,
                   np.concatenate([[0], np.cumsum(mixed, dtype=np.int64)]), columns)

    def token_range(self, i: int) -> tuple[int, int]:
        """Row `i`'s tokens: ``[a, b)`` in the flat arrays."""
        return int(self.batch.token_offsets[i]), int(self.batch.token_offsets[i + 1])

    def mixed_version_actions(self, i: int) -> int:
        """Row `i`'s action spans produced by several versions without a known boundary."""
        so, eo = int(self.batch.span_offsets[i]), int(self.batch.span_offsets[i + 1])
        return int(self.mixed_before[eo] - self.mixed_before[so])
