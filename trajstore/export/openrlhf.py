"""OpenRLHF: the tensors of an ``Experience`` built from agent rollouts (full sequence, the
per-action tensors shifted by one: position ``i`` is about token ``i + 1``), as safetensors, plus
Parquet with each row's ``action_ranges``.

Layout checked against OpenRLHF 0.11.2 (PyPI; github OpenRLHF/OpenRLHF commit 3c3be62):
``openrlhf/utils/agent.py`` (``MultiTurnAgentExecutor``: ``observation_tokens``, ``action_ranges``,
``rollout_log_probs`` 0.0 on prompt and feedback tokens),
``openrlhf/trainer/ppo_utils/samples_generator.py`` (``_process_response_into_experience``:
``action_mask`` and ``rollout_log_probs`` drop the first position) and
``openrlhf/trainer/ppo_utils/experience.py`` (``Experience``, ``concat_experiences``: right padding,
``pad_token_id`` in ``sequences``, 0 elsewhere).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from trajstore.export.arrays import pad
from trajstore.export.samples import Sample, lineage_arrays
from trajstore.export.target import Part, trainer_target, write_tensor_part


def openrlhf_experience(samples: list[Sample], *, holds: frozenset[str],
                        pad_token_id: int = 0) -> dict[str, np.ndarray]:
    """The ``Experience`` tensors of `samples` (B of them, T = the longest sequence).

    Returns:
        ``sequences`` (B, T) int64, right-padded with `pad_token_id`; ``attention_mask`` (B, T)
        int64, 1 = real token; ``action_mask`` (B, T - 1) int64, position ``i`` = 1 when token
        ``i + 1`` is an action token; ``response_length`` (B,) int64, from the first to the last
        action token; ``total_length`` (B,) float32, real tokens; with ``logprobs`` held
        ``rollout_log_probs`` (B, T - 1) float32, position ``i`` = the engine's log-prob of token
        ``i + 1`` when it is an action token, else 0.0; with ``rewards`` held ``rewards`` (B,)
        float32. Padding is 0 everywhere but ``sequences``, as ``Experience.concat_experiences`` pads.
    """
    t = max((len(s.tokens) for s in samples), default=1)
    out = {
        "sequences": pad([s.tokens for s in samples], value=pad_token_id, dtype=np.int64, side="right", width=t),
        "attention_mask": pad([np.ones(len(s.tokens), np.int64) for s in samples], value=0, dtype=np.int64,
                              side="right", width=t),
        "action_mask": pad([s.loss_mask[1:] for s in samples], value=0, dtype=np.int64, side="right", width=t - 1),
        "response_length": np.asarray([s.calls[-1].end - s.calls[0].start for s in samples], np.int64),
        "total_length": np.asarray([len(s.tokens) for s in samples], np.float32),
    }
    if "logprobs" in holds:
        out["rollout_log_probs"] = pad([s.logprobs[1:] for s in samples], value=0.0, dtype=np.float32, side="right",
                                       width=t - 1)
    if "rewards" in holds:
        out["rewards"] = np.asarray([s.reward for s in samples], np.float32)
    return out


def openrlhf_rows(samples: list[Sample]) -> pa.Table:
    """Per row: ``trajectory_id``, ``action_ranges`` (list of [start, end) token offsets of the model
    calls, as the agent executor returns them), then the lineage columns."""
    cols = {"trajectory_id": pa.array([s.trajectory_id for s in samples], pa.string()),
            "action_ranges": pa.array([[[c.start, c.end] for c in s.calls] for s in samples],
                                      pa.list_(pa.list_(pa.int64(), 2)))}
    cols.update(lineage_arrays(samples))
    return pa.table(cols)


def write_part(part: Part) -> list[str]:
    tensors = openrlhf_experience(part.samples, holds=part.holds, pad_token_id=part.pad_token_id)
    return write_tensor_part(part, "openrlhf", tensors, ".rows.parquet", openrlhf_rows(part.samples))


LOADER = """\
from safetensors.torch import load_file
from openrlhf.trainer.ppo_utils.experience import Experience
experience = Experience(**load_file("DIR/part-00000.safetensors"))"""

TARGET = trainer_target(
    name="openrlhf", description="OpenRLHF Experience tensors (safetensors + Parquet action ranges)",
    fields={"logprobs": "rollout_log_probs", "rewards": "rewards"},
    alignment="full sequence shifted by one: sequences/attention_mask T long, action_mask and rollout_log_probs "
              "T - 1 long (position i describes token i + 1; 0.0 off actions); one reward per trajectory",
    checked_against="OpenRLHF 0.11.2 (github OpenRLHF/OpenRLHF@3c3be62): openrlhf/utils/agent.py, "
                    "trainer/ppo_utils/samples_generator.py, trainer/ppo_utils/experience.py",
    write=write_part, loader=LOADER)
