"""verl: a ``DataProto`` batch as verl's agent loop hands it to the trainer, as safetensors (the
``batch`` tensors) plus Parquet (the ``non_tensor_batch`` columns).

Layout checked against verl 0.9.1 (PyPI), ``verl/experimental/agent_loop/agent_loop.py``
(``_agent_loop_postprocess``, ``AgentLoopWorker._postprocess``) and
``verl/workers/rollout/llm_server.py`` (``min_global_steps`` / ``max_global_steps`` extra fields);
the same file at github volcengine/verl commit b178a3c has the tensors but not yet the version fields.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from trajstore.export.arrays import pad, position_ids
from trajstore.export.samples import Sample, lineage_arrays
from trajstore.export.target import Part, trainer_target, write_tensor_part


def verl_batch(samples: list[Sample], *, holds: frozenset[str], pad_token_id: int = 0) -> dict[str, np.ndarray]:
    """The ``DataProto.batch`` tensors of `samples` (B of them).

    Notation: P = the longest prompt, R = the longest response of the batch; a sample's prompt is
    its tokens before the first action, its response everything from the first action to the end of
    the last one (observations between actions included, masked out).

    Returns:
        ``prompts`` (B, P) int64, left-padded with `pad_token_id`; ``responses`` (B, R) int64,
        right-padded; ``response_mask`` (B, R) int64, 1 = action token (0 on observations and
        padding); ``input_ids`` (B, P + R) = prompts | responses; ``attention_mask`` (B, P + R)
        int64, 1 = real token; ``position_ids`` (B, P + R) int64, ``clip(cumsum(attention_mask) - 1,
        0)``; with ``logprobs`` held: ``rollout_log_probs`` (B, R) float32, the engine's log-prob
        (nats) on action tokens, 0.0 elsewhere; with ``rewards`` held: ``rm_scores`` (B, R)
        float32, the reward on the last real response token (the last action token), 0.0 elsewhere.
    """
    prompts = pad([s.tokens[:s.prompt_len] for s in samples], value=pad_token_id, dtype=np.int64, side="left")
    responses = pad([s.tokens[s.prompt_len:] for s in samples], value=pad_token_id, dtype=np.int64, side="right")
    p_mask = pad([np.ones(s.prompt_len, np.int64) for s in samples], value=0, dtype=np.int64, side="left",
                 width=prompts.shape[1])
    r_mask = pad([np.ones(s.response_len, np.int64) for s in samples], value=0, dtype=np.int64, side="right",
                 width=responses.shape[1])
    attention_mask = np.concatenate([p_mask, r_mask], axis=1)
    out = {
        "prompts": prompts,
        "responses": responses,
        "response_mask": pad([s.loss_mask[s.prompt_len:] for s in samples], value=0, dtype=np.int64, side="right",
                             width=responses.shape[1]),
        "input_ids": np.concatenate([prompts, responses], axis=1),
        "attention_mask": attention_mask,
        "position_ids": position_ids(attention_mask),
    }
    if "logprobs" in holds:
        out["rollout_log_probs"] = pad([s.logprobs[s.prompt_len:] for s in samples], value=0.0, dtype=np.float32,
                                       side="right", width=responses.shape[1])
    if "rewards" in holds:
        scores = np.zeros(responses.shape, np.float32)
        for i, s in enumerate(samples):
            scores[i, s.response_len - 1] = s.reward
        out["rm_scores"] = scores
    return out


def verl_non_tensors(samples: list[Sample], *, holds: frozenset[str]) -> pa.Table:
    """The ``DataProto.non_tensor_batch`` columns of `samples`, one row each.

    Columns: ``uid`` (the group verl's GRPO baselines group by: the stored ``group_id``, else
    ``prompt_id``, else the trajectory id), ``trajectory_id``, ``__num_turns__`` (spans: prompt,
    action and observation pieces), with ``versions`` held ``min_global_steps`` /
    ``max_global_steps`` (oldest / newest policy version of the sample's model calls), then the
    lineage columns the store has.
    """
    cols: dict[str, pa.Array] = {
        "uid": pa.array([s.group_id or s.prompt_id or s.trajectory_id for s in samples], pa.string()),
        "trajectory_id": pa.array([s.trajectory_id for s in samples], pa.string()),
        "__num_turns__": pa.array([s.num_turns for s in samples], pa.int32()),
    }
    if "versions" in holds:
        cols["min_global_steps"] = pa.array([s.min_version for s in samples], pa.int64())
        cols["max_global_steps"] = pa.array([s.max_version for s in samples], pa.int64())
    cols.update(lineage_arrays(samples))
    return pa.table(cols)


def write_part(part: Part) -> list[str]:
    tensors = verl_batch(part.samples, holds=part.holds, pad_token_id=part.pad_token_id)
    return write_tensor_part(part, "verl", tensors, ".non_tensor.parquet",
                             verl_non_tensors(part.samples, holds=part.holds))


LOADER = """\
import numpy as np, pyarrow.parquet as pq, torch
from safetensors.torch import load_file
from verl import DataProto
tensors = load_file("DIR/part-00000.safetensors")
non_tensors = {k: np.array(v, dtype=object) for k, v in pq.read_table("DIR/part-00000.non_tensor.parquet").to_pydict().items()}
batch = DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)"""

TARGET = trainer_target(
    name="verl", description="verl DataProto batches (safetensors + Parquet non-tensor columns)",
    fields={"logprobs": "rollout_log_probs", "rewards": "rm_scores", "versions": "min/max_global_steps"},
    alignment="response window: prompts left-padded, responses right-padded, response_mask 1 on action tokens; "
              "rollout_log_probs aligned with responses, 0.0 where response_mask is 0; reward on the last action token",
    checked_against="verl 0.9.1: verl/experimental/agent_loop/agent_loop.py, verl/workers/rollout/llm_server.py",
    write=write_part, loader=LOADER)
