"""AReaL: the padded tensor dict an AReaL workflow returns for a batch of trajectories (full
sequence, per-token policy versions), as safetensors, plus a Parquet file naming each row.

Layout checked against AReaL 1.0.4 (PyPI; github inclusionAI/AReaL commit 4aef98d):
``areal/workflow/rlvr.py`` (``arun_episode``: ``input_ids``, ``loss_mask``, ``logprobs`` 0.0 and
``versions`` -1 on tokens the model did not generate, ``attention_mask``, ``rewards``),
``areal/experimental/openai/types.py`` (``to_tensor_dict``: a multi-turn chain, tool tokens 0 / 0.0 /
-1) and ``areal/utils/data.py`` (``concat_padded_tensors``: right padding with 0, attention_mask
False).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from trajstore.export.arrays import pad
from trajstore.export.samples import Sample, lineage_arrays
from trajstore.export.target import MIXED_AS_OLDEST, TAIL_DROPPED, Part, trainer_target, write_tensor_part


def areal_batch(samples: list[Sample], *, holds: frozenset[str], pad_token_id: int = 0) -> dict[str, np.ndarray]:
    """The padded AReaL tensor dict of `samples` (B of them, L = the longest).

    Returns:
        ``input_ids`` (B, L) int32, right-padded with `pad_token_id`; ``attention_mask`` (B, L)
        bool, True = real token; ``loss_mask`` (B, L) int32, 1 = action token; ``logprobs`` (B, L)
        float32, the engine's log-prob of each action token (nats), 0.0 elsewhere; with
        ``versions`` held ``versions`` (B, L) int32, the policy version of each action token
        (the oldest for a call of several versions), -1 on prompt and observation tokens, 0 on
        padding as AReaL's ``concat_padded_tensors`` pads; with ``rewards`` held ``rewards`` (B,)
        float32. Token ``i``'s values sit at position ``i`` (no shift).
    """
    out = {
        "input_ids": pad([s.tokens for s in samples], value=pad_token_id, dtype=np.int32, side="right"),
        "attention_mask": pad([np.ones(len(s.tokens), bool) for s in samples], value=False, dtype=bool,
                              side="right"),
        "loss_mask": pad([s.loss_mask for s in samples], value=0, dtype=np.int32, side="right"),
        "logprobs": pad([s.logprobs for s in samples], value=0.0, dtype=np.float32, side="right"),
    }
    if "versions" in holds:
        out["versions"] = pad([s.versions for s in samples], value=0, dtype=np.int32, side="right")
    if "rewards" in holds:
        out["rewards"] = np.asarray([s.reward for s in samples], np.float32)
    return out


def areal_rows(samples: list[Sample]) -> pa.Table:
    """Which trajectory each row of the tensor dict is: ``trajectory_id``, ``group_id``, ``prompt_id``,
    then the lineage columns."""
    cols = {"trajectory_id": pa.array([s.trajectory_id for s in samples], pa.string()),
            "group_id": pa.array([s.group_id for s in samples], pa.string()),
            "prompt_id": pa.array([s.prompt_id for s in samples], pa.string())}
    cols.update(lineage_arrays(samples))
    return pa.table(cols)


def write_part(part: Part) -> list[str]:
    return write_tensor_part(part, "areal", areal_batch(part.samples, holds=part.holds, pad_token_id=part.pad_token_id),
                             ".rows.parquet", areal_rows(part.samples))


LOADER = """\
from safetensors.torch import load_file
from areal.utils.data import pack_tensor_dict
batch = load_file("DIR/part-00000.safetensors")  # input_ids, attention_mask, loss_mask, logprobs, versions, rewards
packed = pack_tensor_dict(batch)"""

TARGET = trainer_target(
    name="areal", description="AReaL padded tensor dicts (safetensors + Parquet row ids)",
    fields={"logprobs": "logprobs", "rewards": "rewards", "versions": "versions"},
    required=frozenset({"logprobs", "rewards"}),
    alignment="full sequence, unshifted: input_ids, loss_mask, logprobs (0.0 off actions) and versions (-1 off "
              "actions) all L long, right-padded with 0; one reward per trajectory",
    checked_against="AReaL 1.0.4 (github inclusionAI/AReaL@4aef98d): areal/workflow/rlvr.py, "
                    "areal/experimental/openai/types.py, areal/utils/data.py",
    write=write_part, loader=LOADER, approximates=frozenset({TAIL_DROPPED, MIXED_AS_OLDEST}))
