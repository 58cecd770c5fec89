"""Per-token trainer annotations: what ``traj train --record-tokens`` writes under
``runs/<run_id>/tokens/`` (one row per trained action token of a recorded trajectory), beside the
per-step and per-trajectory records of :mod:`trajstore.schema` (``STEP_FIELDS``,
``CONSUMED_FIELDS``). Rows join the trajectory by ``trajectory_id`` and ``position`` (an index
into its ``tokens``); ``traj sql`` reads them as the view ``token_annotations``."""

from __future__ import annotations

from typing import Final

import pyarrow as pa

from trajstore.schema import METADATA_SCHEMA_VERSION_KEY, SCHEMA_VERSION

TOKEN_ANNOTATION_FIELDS: Final[list[tuple[pa.Field, str]]] = [
    (pa.field("run_id", pa.string(), nullable=False), "training run id"),
    (pa.field("step", pa.int64(), nullable=False), "policy update that trained the token (0-based)"),
    (pa.field("trainer_version", pa.int64(), nullable=False), "policy version being trained at that step"),
    (pa.field("trajectory_id", pa.string(), nullable=False), "the trajectory the token belongs to"),
    (pa.field("position", pa.int32(), nullable=False),
     "index of the action token in the trajectory's `tokens` (0-based; the token the policy predicted)"),
    (pa.field("rollout_logprob", pa.float32(), nullable=False),
     "behaviour log-prob the loss used (nats): the rollout engine's, or the frozen initial policy's with "
     "--behaviour-logprobs initial-policy"),
    (pa.field("trainer_logprob", pa.float32(), nullable=False),
     "log pi_theta(token) under the weights being updated, as the policy loss saw it (nats; before the step's "
     "policy update)"),
    (pa.field("ratio", pa.float32(), nullable=False),
     "importance ratio exp(trainer_logprob - rollout_logprob), computed as the loss computed it (dimensionless)"),
    (pa.field("band", pa.int8()),
     "where the ratio sits against DIS's open band (1 - eps_low, 1 + eps_high): -1 = at or below 1 - eps_low, "
     "0 = inside (kept), 1 = at or above 1 + eps_high; -1 and 1 are masked out of the gradient by the dis loss "
     "(the ppo-clip loss clips instead); null when the ratio is NaN"),
    (pa.field("advantage", pa.float32(), nullable=False), "advantage the loss weighed the token with (reward units)"),
    (pa.field("value", pa.float32()),
     "critic value at the token's slot before the step's critic updates (reward units); null without a critic"),
    (pa.field("return", pa.float32()),
     "critic target at the token's slot (the return, reward units); null without a critic"),
]
"""Columns of ``runs/<run_id>/tokens/*.parquet``, each with its doc (unit, source)."""

TOKEN_ANNOTATION_SCHEMA: Final[pa.Schema] = pa.schema(
    [f.with_metadata({b"doc": d.encode()}) for f, d in TOKEN_ANNOTATION_FIELDS],
    metadata={METADATA_SCHEMA_VERSION_KEY: str(SCHEMA_VERSION).encode()})

TOKEN_ANNOTATION_DOCS: Final[dict[str, str]] = {f.name: d for f, d in TOKEN_ANNOTATION_FIELDS}

BAND_BELOW: Final[int] = -1
BAND_INSIDE: Final[int] = 0
BAND_ABOVE: Final[int] = 1
