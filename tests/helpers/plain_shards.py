"""Trajectory shards written with plain pyarrow, as a writer in another language would: the schema
read from schemas/trajectory.v2.arrow, rows as plain dicts (no trajstore import)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
V2 = pa.ipc.read_schema(pa.memory_map(str(SCHEMAS / "trajectory.v2.arrow")))


def row(tid: str) -> dict:
    """A valid row, its derived columns worked out by hand: tokens 0..8; prompt [0, 3), action
    [3, 5) by version 3, observation [5, 6), action [6, 9) by version 4 -> 3 prompt, 5 action,
    1 observation tokens, 2 actions, 1 observation, versions 3..4, log-probs 2 + 3 = 5 long,
    the second action's start at 2 in `logprobs`."""
    span = {f.name: None for f in V2.field("spans").type.value_type}
    spans = [
        {**span, "kind": "prompt", "start": 0, "end": 3, "role": "user"},
        {**span, "kind": "action", "start": 3, "end": 5, "policy_version": 3, "logprob_start": 0,
         "num_missing_logprobs": 0},
        {**span, "kind": "observation", "start": 5, "end": 6, "role": "tool"},
        {**span, "kind": "action", "start": 6, "end": 9, "policy_version": 4, "logprob_start": 2,
         "num_missing_logprobs": 0},
    ]
    return {
        "trajectory_id": tid, "prompt_id": "p", "group_id": None, "source": "elsewhere", "model": "m",
        "tokenizer": "t", "created_at": pa.scalar(0, pa.timestamp("us", tz="UTC")).as_py(), "status": "completed",
        "reward": 1.0, "reward_raw": "1", "token_source": "engine", "logprob_source": "engine", "trainable": True,
        "not_trainable_reason": None, "min_policy_version": 3, "max_policy_version": 4, "num_tokens": 9,
        "num_prompt_tokens": 3, "num_action_tokens": 5, "num_observation_tokens": 1, "num_actions": 2,
        "num_observations": 1, "num_missing_logprobs": 0, "tokens": list(range(9)),
        "logprobs": [-0.5, -0.25, -1.0, -0.125, -2.0], "spans": spans, "metadata": None,
    }


def write(path: Path, rows: list[dict], schema: pa.Schema = V2, row_group_size: int = 2) -> str:
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, row_group_size=row_group_size)
    return str(path)
